"""Construct ids from the names in config: kebab-case names become PascalCase ids."""

from __future__ import annotations


def pascal_case(name: str) -> str:
    """``dev`` -> ``Dev``, ``eu-prod`` -> ``EuProd``, ``gpu-a100`` -> ``GpuA100``."""
    return "".join(part.capitalize() for part in name.split("-"))
