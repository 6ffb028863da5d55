"""Reading synthesized CloudFormation templates: one stack's view and the helpers that read policy fields and
values assembled with intrinsic functions.

CDK-free and shared: the platform's rule pack (:mod:`gpu_constructs.rules`), the authorization model
(:mod:`gpu_constructs.authz`), the cdk-nag acknowledgments (:mod:`gpu_constructs.nag`) and the stacks read
templates through these, so a template field is read one way everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StackView:
    """One stack of a cloud assembly: its name, account and region (``None`` when environment-agnostic)."""

    name: str
    account: str | None
    region: str | None
    template: Mapping[str, Any]
    path: str = ""

    @property
    def resources(self) -> Mapping[str, Mapping[str, Any]]:
        return self.template.get("Resources") or {}


class TemplateResource:
    """What every view of one template resource reads from its ``definition``: the type and the properties.

    A mixin of the frozen dataclasses that locate a resource (the rule pack's ``Resource``, the authorization
    model's ``Located``), so the two read a resource's fields one way."""

    definition: Mapping[str, Any]

    @property
    def type(self) -> str:
        return str(self.definition.get("Type", ""))

    @property
    def properties(self) -> Mapping[str, Any]:
        return self.definition.get("Properties") or {}


def ref_id(value: Any) -> str | None:
    """The logical id a value points to: ``{"Ref": X}`` or ``{"Fn::GetAtt": [X, attr]}`` (else ``None``)."""
    if isinstance(value, Mapping):
        if isinstance(value.get("Ref"), str):
            return str(value["Ref"])
        get_att = value.get("Fn::GetAtt")
        if isinstance(get_att, list) and get_att and isinstance(get_att[0], str):
            return get_att[0]
        if isinstance(get_att, str):
            return get_att.split(".", 1)[0]
    return None


def as_list(value: Any) -> list[Any]:
    """A policy field (one value or a list) as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def statements(document: Any) -> list[Mapping[str, Any]]:
    """The statements of an IAM policy document (``{"Statement": ...}``)."""
    if not isinstance(document, Mapping):
        return []
    return [s for s in as_list(document.get("Statement")) if isinstance(s, Mapping)]


def service_principals(statement: Mapping[str, Any]) -> list[str]:
    """The literal service principals of a statement (``Principal.Service``); tokens render as text."""
    principal = statement.get("Principal")
    if not isinstance(principal, Mapping):
        return []
    return [flatten(s) for s in as_list(principal.get("Service"))]


def literal(value: Any) -> str | None:
    """A plain string value, or ``None`` when the value is an intrinsic function."""
    return value if isinstance(value, str) else None


def flatten(value: Any) -> str:
    """A template value as text: literal parts kept, references as ``${LogicalId}`` / ``${Id.Attr}``.

    Used to read values assembled with ``Fn::Join`` / ``Fn::Sub`` (an image URI, a user-data script, a Step
    Functions definition) where only the literal parts matter to a rule.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, list):
        return ",".join(flatten(v) for v in value)
    if isinstance(value, Mapping):
        if "Fn::Join" in value:
            delimiter, items = value["Fn::Join"]
            return str(delimiter).join(flatten(item) for item in items)
        if "Fn::Sub" in value:
            sub = value["Fn::Sub"]
            return flatten(sub[0] if isinstance(sub, list) else sub)
        if "Fn::Base64" in value:
            return flatten(value["Fn::Base64"])
        if "Ref" in value:
            return "${" + str(value["Ref"]) + "}"
        if "Fn::GetAtt" in value:
            att = value["Fn::GetAtt"]
            return "${" + (".".join(map(str, att)) if isinstance(att, list) else str(att)) + "}"
        if "Fn::ImportValue" in value:
            return "${Import:" + flatten(value["Fn::ImportValue"]) + "}"
        if "Fn::Select" in value:
            return "${Select}"
        return "${" + next(iter(value), "?") + "}"
    return str(value)
