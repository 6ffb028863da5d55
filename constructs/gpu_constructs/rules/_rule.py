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
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The template readers live in gpu_constructs.templates (authz, nag and the stacks read templates too); the rule
# modules import them from here, beside the rule model.
from gpu_constructs.templates import (  # noqa: F401 (re-exported for the rule modules)
    StackView,
    TemplateResource,
    as_list,
    flatten,
    literal,
    ref_id,
    service_principals,
    statements,
)


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
class Resource(TemplateResource):
    """One resource of a synthesized template, with what a rule may need around it."""

    logical_id: str
    definition: Mapping[str, Any]
    stack: StackView
    #: Every stack of the cloud assembly (this one included), for rules that look across stacks.
    assembly: Sequence[StackView] = field(default=())

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
