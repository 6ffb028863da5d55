"""IAM policy evaluation: is one request allowed by the identity policies of its principal and the resource's policy?

One small module that follows the documented evaluation logic, case by case (each case is a test in
``tests/constructs/authz/test_authz_policy.py`` that cites the IAM User Guide):

* "Policy evaluation logic" (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
  an explicit ``Deny`` in any applicable policy wins; within one account a request is allowed when an identity
  policy **or** the resource policy allows it (a resource policy that names the role itself is enough; one that
  names the account, ``arn:aws:iam::<account>:root``, only delegates to identity policies); else it is implicitly
  denied. A permissions boundary, when the role has one, must allow it too.
* AWS KMS is the exception ("Key policies in AWS KMS", https://docs.aws.amazon.com/kms/latest/developerguide/key-policies.html):
  "Unless the key policy explicitly allows it, you cannot use IAM policies to allow access to a KMS key". The key
  policy must allow the principal itself, or allow the account (which enables identity policies).
* ``Action``/``NotAction``, ``Resource``/``NotResource``, ``Principal``/``NotPrincipal``, with ``*`` and ``?`` wildcards
  ("IAM JSON policy elements"); actions match case-insensitively, ARNs case-sensitively.
* Conditions ("IAM JSON policy elements: Condition operators"): operators in a statement, and keys in an operator,
  are ANDed; values of one key are ORed (NOR for negated operators); condition keys are case-insensitive. "If the
  key that you specify in a policy condition is not present in the request context, the values do not match and
  the condition is false. If the policy condition requires that the key is not matched, such as StringNotLike or
  ArnNotLike, and the right key is not present, the condition is true. This logic applies to all condition
  operators except ...IfExists and Null check." ``ForAnyValue:``/``ForAllValues:`` apply to multivalued keys.

Operators the platform's policies use are implemented (String*, Arn*, Bool, Null, Numeric*, each with
``IfExists``); any other operator raises :class:`UnsupportedPolicy` rather than guess. Policy variables
(``${aws:username}``) are not substituted: a policy that uses them raises too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Literal

__all__ = [
    "AuthRequest",
    "Decision",
    "PolicySet",
    "UnsupportedPolicy",
    "evaluate",
]

Effect = Literal["Allow", "Deny"]


class UnsupportedPolicy(ValueError):
    """A policy uses an element this evaluator does not implement (so it refuses to decide)."""


@dataclass(frozen=True)
class AuthRequest:
    """One AWS request: who (``principal``, a role ARN), what (``action``), on what (``resource`` ARN) and the
    request context (condition keys in any case; a list value is a multivalued key)."""

    principal: str
    action: str
    resource: str
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)
    #: Why the journey makes this request (shown in reports).
    why: str = ""
    #: What of the journey it serves, as a short id-safe token (``channel:code``, ``output``, ``logs``).
    subject: str = ""

    @property
    def account(self) -> str:
        parts = self.principal.split(":")
        return parts[4] if len(parts) > 4 else ""

    def __str__(self) -> str:
        context = ", ".join(f"{k}={v}" for k, v in sorted(self.context.items()))
        return f"{self.action} on {self.resource}" + (f" [{context}]" if context else "")


@dataclass(frozen=True)
class PolicySet:
    """What applies to one request: the principal's identity policies (documents), its permissions boundary (a
    document, or None), and the resource's own policy (a document, or None when the resource has none)."""

    identity: Sequence[Mapping[str, Any]] = ()
    boundary: Mapping[str, Any] | None = None
    resource: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Decision:
    """The outcome, and the statements that decided it (``"<where>:<Sid or index>"``)."""

    allowed: bool
    reason: str
    request: AuthRequest

    def __bool__(self) -> bool:
        return self.allowed


def evaluate(request: AuthRequest, policies: PolicySet) -> Decision:
    """Same-account evaluation of ``request`` against ``policies`` (see the module docstring).

    The global keys every request of a role session carries are added to its context: ``aws:PrincipalArn`` (the
    role's ARN) and ``aws:PrincipalAccount`` ("AWS global condition context keys": both are "always included in
    the request context"); the request's own context wins."""
    request = replace(
        request,
        context={"aws:PrincipalArn": request.principal, "aws:PrincipalAccount": request.account, **request.context},
    )
    kms = request.action.lower().startswith("kms:") and ":key/" in request.resource
    identity = [(f"identity[{i}]", doc) for i, doc in enumerate(policies.identity)]
    boundary = [("boundary", policies.boundary)] if policies.boundary is not None else []
    resource = [("resource", policies.resource)] if policies.resource is not None else []

    for where, document in [*identity, *boundary, *resource]:
        deny = _matching(request, document, "Deny", resource_policy=where == "resource")
        if deny:
            return Decision(False, f"explicitly denied by {where}:{deny[0]}", request)

    identity_allow = [f"{w}:{s}" for w, d in identity for s in _matching(request, d, "Allow", resource_policy=False)]
    boundary_allows = not boundary or bool(_matching(request, boundary[0][1], "Allow", resource_policy=False))
    direct: list[str] = []
    account: list[str] = []
    for where, document in resource:
        for sid, to_account in _resource_allows(request, document):
            (account if to_account else direct).append(f"{where}:{sid}")

    if kms and policies.resource is not None:
        if direct:
            return Decision(True, f"allowed by the key policy ({direct[0]})", request)
        if not account:
            return Decision(False, "the key policy allows neither this principal nor its account", request)
        if identity_allow and boundary_allows:
            return Decision(True, f"allowed by {identity_allow[0]} (the key policy {account[0]} enables IAM)", request)
        return Decision(False, f"no identity policy allows it (the key policy {account[0]} only enables IAM)", request)
    if direct:
        return Decision(True, f"allowed by the resource policy ({direct[0]})", request)
    if identity_allow and not boundary_allows:
        return Decision(False, "the permissions boundary does not allow it", request)
    if identity_allow:
        return Decision(True, f"allowed by {identity_allow[0]}", request)
    return Decision(False, "implicitly denied: no statement allows it", request)


# -- statements -------------------------------------------------------------------------------------------


def _statements(document: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    raw = document.get("Statement", [])
    items = raw if isinstance(raw, list) else [raw]
    return [(str(s.get("Sid") or f"#{i}"), s) for i, s in enumerate(items) if isinstance(s, Mapping)]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _matching(request: AuthRequest, document: Mapping[str, Any], effect: Effect, *, resource_policy: bool) -> list[str]:
    """Sids of the statements of ``effect`` that apply to the request (principal ignored for identity policies)."""
    found = []
    for sid, statement in _statements(document):
        if statement.get("Effect") != effect:
            continue
        if resource_policy and _principal_match(request, statement) is None:
            continue
        if _applies(request, statement):
            found.append(sid)
    return found


def _resource_allows(request: AuthRequest, document: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(sid, names only the account) of the resource policy's Allow statements that apply to the request."""
    found = []
    for sid, statement in _statements(document):
        if statement.get("Effect") != "Allow":
            continue
        match = _principal_match(request, statement)
        if match is not None and _applies(request, statement):
            found.append((sid, match == "account"))
    return found


def _applies(request: AuthRequest, statement: Mapping[str, Any]) -> bool:
    return (
        _action_match(request.action, statement)
        and _resource_match(request.resource, statement)
        and conditions_hold(statement.get("Condition"), request.context)
    )


def _action_match(action: str, statement: Mapping[str, Any]) -> bool:
    if "NotAction" in statement:
        return not any(_glob(p, action, ignore_case=True) for p in _as_list(statement["NotAction"]))
    return any(_glob(p, action, ignore_case=True) for p in _as_list(statement.get("Action")))


def _resource_match(resource: str, statement: Mapping[str, Any]) -> bool:
    if "NotResource" in statement:
        return not any(_glob(p, resource) for p in _as_list(statement["NotResource"]))
    if "Resource" not in statement:
        return True  # resource policies may omit it (the resource is the one the policy is attached to)
    return any(_glob(p, resource) for p in _as_list(statement["Resource"]))


def _principal_match(request: AuthRequest, statement: Mapping[str, Any]) -> Literal["principal", "account"] | None:
    """How a resource-policy statement names the request's principal: the role itself (or ``*``), only its
    account (``arn:aws:iam::<account>:root`` or a bare account id), or not at all (``None``)."""
    if "NotPrincipal" in statement:
        names = _principal_values(statement["NotPrincipal"])
        return None if _names_principal(request, names) else "principal"
    names = _principal_values(statement.get("Principal"))
    if "*" in names:
        return "principal"
    if request.principal in names:
        return "principal"
    if any(n in (request.account, f"arn:aws:iam::{request.account}:root") for n in names):
        return "account"
    return None


def _names_principal(request: AuthRequest, names: set[str]) -> bool:
    return request.principal in names or f"arn:aws:iam::{request.account}:root" in names


def _principal_values(principal: Any) -> set[str]:
    if principal == "*":
        return {"*"}
    if not isinstance(principal, Mapping):
        return set()
    return {str(v) for v in _as_list(principal.get("AWS"))}


# -- wildcards and conditions -------------------------------------------------------------------------------


@cache
def _pattern(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    if "${" in pattern:
        raise UnsupportedPolicy(f"policy variable in {pattern!r}: not substituted by this evaluator")
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _glob(pattern: Any, value: str, *, ignore_case: bool = False) -> bool:
    return isinstance(pattern, str) and _pattern(pattern, ignore_case).fullmatch(value) is not None


def _string_ops(op: str, policy: str, actual: str) -> bool:
    if op == "StringEquals":
        return policy == actual
    if op == "StringEqualsIgnoreCase":
        return policy.lower() == actual.lower()
    if op in ("StringLike", "ArnLike", "ArnEquals"):
        return _glob(policy, actual)
    if op.startswith("Numeric"):
        a, p = float(actual), float(policy)
        return {
            "NumericEquals": a == p,
            "NumericLessThan": a < p,
            "NumericLessThanEquals": a <= p,
            "NumericGreaterThan": a > p,
            "NumericGreaterThanEquals": a >= p,
        }[op]
    if op == "Bool":
        return policy.lower() == actual.lower()
    raise UnsupportedPolicy(f"condition operator {op!r}")


#: Negated operators and the positive operator they negate.
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
}
_POSITIVE = {
    "StringEquals",
    "StringEqualsIgnoreCase",
    "StringLike",
    "ArnEquals",
    "ArnLike",
    "Bool",
    "NumericEquals",
    "NumericLessThan",
    "NumericLessThanEquals",
    "NumericGreaterThan",
    "NumericGreaterThanEquals",
}


def conditions_hold(condition: Any, context: Mapping[str, str | Sequence[str]]) -> bool:
    """Whether a statement's ``Condition`` block holds for the request context."""
    if not condition:
        return True
    if not isinstance(condition, Mapping):
        raise UnsupportedPolicy(f"Condition {condition!r} is not an object")
    lowered = {k.lower(): v for k, v in context.items()}
    for operator, block in condition.items():
        if not isinstance(block, Mapping):
            raise UnsupportedPolicy(f"condition operator {operator!r} has no key block")
        for key, values in block.items():
            if not _one_key(str(operator), lowered.get(str(key).lower()), [str(v) for v in _as_list(values)]):
                return False
    return True


def _one_key(operator: str, actual: str | Sequence[str] | None, values: Sequence[str]) -> bool:
    qualifier, _, op = operator.rpartition(":")
    if op == "Null":
        return (actual is None) == (values[0].lower() == "true")
    if_exists = op.endswith("IfExists")
    op = op.removesuffix("IfExists")
    if op not in _POSITIVE and op not in _NEGATED:
        raise UnsupportedPolicy(f"condition operator {operator!r}")
    if actual is None:
        if qualifier == "ForAllValues":
            return True  # "ForAllValues ... returns true if there are no context keys in the request"
        return if_exists or op in _NEGATED
    actuals = [actual] if isinstance(actual, str) else list(actual)
    positive = _NEGATED.get(op, op)

    def matches(item: str) -> bool:
        return any(_string_ops(positive, v, item) for v in values)

    if qualifier == "ForAllValues":
        result = all(matches(a) for a in actuals) if op not in _NEGATED else all(not matches(a) for a in actuals)
        return result
    if qualifier in ("ForAnyValue", ""):
        if op in _NEGATED:
            return any(not matches(a) for a in actuals) if qualifier else not any(matches(a) for a in actuals)
        return any(matches(a) for a in actuals)
    raise UnsupportedPolicy(f"condition set operator {qualifier!r}")
