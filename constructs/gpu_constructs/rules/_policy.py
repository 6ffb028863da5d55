"""Reading resource policies (key, topic and queue policies) in templates: who a statement allows to do what.

Shared by the rules about service principals in resource policies. Only literal parts are judged: a
statement whose principal, action or condition is an intrinsic function is read as far as it is literal,
and callers treat what they cannot read as "not judged" rather than as a finding.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_constructs.rules._rule import as_list, service_principals

#: Global condition keys that pin a service principal to the account / resource it acts for (IAM User Guide,
#: "The confused deputy problem", https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html, and
#: "AWS global condition context keys").
SOURCE_CONDITION_KEYS = frozenset({"aws:sourceaccount", "aws:sourcearn", "aws:sourceorgid", "aws:sourceorgpaths"})

#: Condition keys that narrow a wildcard principal to principals of an account or a role: a statement with one
#: of them does not admit an AWS service principal (service principals have no principal ARN or account).
PRINCIPAL_CONDITION_KEYS = ("aws:principal", "kms:calleraccount", "kms:viaservice", "aws:userid", "aws:username")


def is_allow(statement: Mapping[str, Any]) -> bool:
    return statement.get("Effect") == "Allow"


def actions(statement: Mapping[str, Any]) -> list[str]:
    """The literal actions of a statement (``NotAction`` statements have none)."""
    return [a for a in as_list(statement.get("Action")) if isinstance(a, str)]


def allows_action(statement: Mapping[str, Any], action: str) -> bool:
    """True when one of the statement's action patterns (``kms:GenerateDataKey*``, ``sns:*``) covers ``action``."""
    wanted = action.lower()
    return any(fnmatch.fnmatchcase(wanted, pattern.lower()) for pattern in actions(statement))


def condition_keys(statement: Mapping[str, Any]) -> dict[str, str]:
    """Condition key (lower case) -> its operator, for every literal key of the statement's ``Condition``."""
    found: dict[str, str] = {}
    condition = statement.get("Condition")
    if not isinstance(condition, Mapping):
        return found
    for operator, block in condition.items():
        if isinstance(block, Mapping):
            for key in block:
                if isinstance(key, str):
                    found[key.lower()] = str(operator)
    return found


def has_source_condition(statement: Mapping[str, Any]) -> bool:
    """True when the statement requires ``aws:SourceAccount``/``aws:SourceArn``/``aws:SourceOrgID``/
    ``aws:SourceOrgPaths`` (an ``...IfExists`` operator does not count: it lets requests without the key pass)."""
    return any(
        key in SOURCE_CONDITION_KEYS and not operator.endswith("IfExists")
        for key, operator in condition_keys(statement).items()
    )


def wildcard_principal(statement: Mapping[str, Any]) -> bool:
    """True for ``"Principal": "*"`` or ``{"AWS": "*"}``."""
    principal = statement.get("Principal")
    if principal == "*":
        return True
    return isinstance(principal, Mapping) and "*" in as_list(principal.get("AWS"))


def admits_service(statement: Mapping[str, Any], service: str) -> bool:
    """True when an Allow statement names ``service`` as principal, or has a wildcard principal that no condition
    narrows to account principals (such a statement admits AWS services too)."""
    if not is_allow(statement):
        return False
    if service in service_principals(statement):
        return True
    if wildcard_principal(statement):
        return not any(key.startswith(PRINCIPAL_CONDITION_KEYS) for key in condition_keys(statement))
    return False


def allows_all(statements: Iterable[Mapping[str, Any]], wanted: Iterable[str]) -> bool:
    """True when, taken together, ``statements`` allow every action in ``wanted``."""
    pending = set(wanted)
    for statement in statements:
        pending = {a for a in pending if not allows_action(statement, a)}
    return not pending
