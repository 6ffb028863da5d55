"""The rule model of the platform's own rule pack: pure functions over synthesized CloudFormation templates.

A rule is a :class:`Rule`: an id, the resource types it looks at, a one-line ``info`` (what is wrong) and an
``explanation`` (why AWS rejects or mishandles it, with the AWS document or botocore model text that says so),
and a ``check`` function that reads one resource of a synthesized template and returns:

- :data:`COMPLIANT` / :data:`NOT_APPLICABLE`, or :data:`NON_COMPLIANT`;
- or a list of findings (strings) — one finding id each (``GpuPlatform-Rule[finding]``), so one finding can be
  acknowledged without hiding the others. An empty list is compliant.

Rules read the template JSON, never CDK objects, so they run on any CDK app (and on any CloudFormation
template) and are tested with plain dicts. :class:`Resource` gives a rule the resource, its template, its
stack's environment and (for the few rules that look across stacks) every stack of the cloud assembly.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class Compliance(enum.Enum):
    """A rule's verdict on one resource (mirrors ``cdk_nag.NagRuleCompliance``)."""

    COMPLIANT = "COMPLIANT"
    NON_COMPLIANT = "NON_COMPLIANT"
    NOT_APPLICABLE = "NOT_APPLICABLE"


COMPLIANT = Compliance.COMPLIANT
NON_COMPLIANT = Compliance.NON_COMPLIANT
NOT_APPLICABLE = Compliance.NOT_APPLICABLE

#: What a check returns: a verdict, or the findings (granular ids; empty = compliant).
Result = Compliance | list[str]

#: Characters a granular finding may not contain (they delimit finding ids in acknowledgments and reports).
_FINDING_FORBIDDEN = re.compile(r"[\[\],\s]")


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


@dataclass(frozen=True)
class Resource:
    """One resource of a synthesized template, with what a rule may need around it."""

    logical_id: str
    definition: Mapping[str, Any]
    stack: StackView
    #: Every stack of the cloud assembly (this one included), for rules that look across stacks.
    assembly: Sequence[StackView] = field(default=())

    @property
    def type(self) -> str:
        return str(self.definition.get("Type", ""))

    @property
    def properties(self) -> Mapping[str, Any]:
        return self.definition.get("Properties") or {}

    @property
    def template(self) -> Mapping[str, Any]:
        return self.stack.template

    def other(self, logical_id: str | None) -> Mapping[str, Any] | None:
        """Another resource of the same template by logical id (``None`` when absent or not a literal id)."""
        if not logical_id:
            return None
        return self.stack.resources.get(logical_id)

    def of_type(self, resource_type: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """``(logical id, definition)`` of every resource of ``resource_type`` in the same template."""
        for logical_id, definition in self.stack.resources.items():
            if definition.get("Type") == resource_type:
                yield logical_id, definition


@dataclass(frozen=True)
class Rule:
    """One rule of the pack. ``id`` is the rule's name in finding ids: ``GpuPlatform-<id>``."""

    id: str
    resource_types: frozenset[str]
    info: str
    explanation: str
    check: Callable[[Resource], Result]

    def applies_to(self, resource_type: str) -> bool:
        return not self.resource_types or resource_type in self.resource_types

    def evaluate(self, resource: Resource) -> Result:
        result = self.check(resource)
        if isinstance(result, list):
            clean = sorted({finding_text(f) for f in result})
            return clean
        return result


def rule(
    *, id: str, resource_types: Sequence[str], info: str, doc: str | None
) -> Callable[[Callable[[Resource], Result]], Rule]:
    """Decorator: make a check function a :class:`Rule`; the explanation is the module docstring ``doc``."""

    def wrap(check: Callable[[Resource], Result]) -> Rule:
        explanation = " ".join((doc or check.__doc__ or "").split())
        return Rule(id=id, resource_types=frozenset(resource_types), info=info, explanation=explanation, check=check)

    return wrap


def finding_text(text: str) -> str:
    """A granular finding as an id-safe token (no whitespace, brackets or commas)."""
    return _FINDING_FORBIDDEN.sub("_", str(text).strip())[:200] or "_"


# -- template helpers -------------------------------------------------------------------------------------


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
