"""Helpers for rule tests: build small templates and run one rule of the pack on them."""

from __future__ import annotations

from typing import Any

from gpu_constructs.rules import Finding, StackView, check_template


def template(**resources: dict[str, Any]) -> dict[str, Any]:
    """A template with the given resources (logical id -> definition)."""
    return {"Resources": resources}


def findings(rule_id: str, tpl: dict[str, Any], **kwargs: Any) -> list[Finding]:
    """Every finding of rule ``rule_id`` on ``tpl``."""
    return check_template(tpl, rules=[rule_id], **kwargs)


__all__ = ["StackView", "findings", "template"]
