"""Scoped acknowledgments of compliance findings (cdk-nag 3.x / CDK validation plugins).

Each call acknowledges exactly ONE rule id on ONE L1 resource, with a reason that says why the
finding is safe there. The security tests walk the construct tree and fail any acknowledgment that is
not on an L1 resource, names more than one rule, or has a reason shorter than 20 characters or without
a "because"/"since" clause.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
from constructs import IConstruct

from gpu_constructs.errors import ValidationError, path_of

AWS_SOLUTIONS = "AwsSolutions"
HIPAA = "HIPAA.Security"
NIST_R5 = "NIST.800.53.R5"
PCI_DSS = "PCI.DSS.321"
#: The compliance packs whose rules share a name (HIPAA, NIST 800-53 R5, PCI DSS 3.2.1).
COMPLIANCE_PACKS: tuple[str, ...] = (HIPAA, NIST_R5, PCI_DSS)

REASON_MIN_LENGTH = 20
REASON_MARKERS = ("because", "since")


def rule_id(pack: str, rule: str) -> str:
    """Full validation rule id, e.g. ``NIST.800.53.R5::NIST.800.53.R5-S3BucketReplicationEnabled``."""
    return f"{pack}::{pack}-{rule}"


def check_reason(reason: str, where: str = "acknowledgment") -> None:
    """Raise unless ``reason`` is at least 20 characters and says why (contains 'because' or 'since')."""
    text = reason.strip()
    if len(text) < REASON_MIN_LENGTH or not any(m in text.lower() for m in REASON_MARKERS):
        raise ValidationError(
            where,
            f"reason={reason!r} is not allowed; allowed: at least {REASON_MIN_LENGTH} characters that say why "
            f"the finding is safe here, with a 'because' or 'since' clause",
        )


def _l1(scope: IConstruct) -> IConstruct:
    """The L1 resource of ``scope`` (itself when it is one, else its default child)."""
    if isinstance(scope, cdk.CfnResource):
        return scope
    child = scope.node.default_child
    if child is None or not isinstance(child, cdk.CfnResource):
        raise ValidationError(
            path_of(scope),  # type: ignore[arg-type]
            "acknowledgments go on one L1 resource; this construct has no default L1 child",
        )
    return child


def acknowledge(scope: IConstruct, pack: str, rule: str, reason: str) -> None:
    """Acknowledge one rule of one pack on the L1 resource of ``scope``."""
    target = _l1(scope)
    check_reason(reason, f"{target.node.path}: {rule_id(pack, rule)}")
    cdk.Validations.of(target).acknowledge(cdk.Acknowledgment(id=rule_id(pack, rule), reason=reason))


def acknowledge_compliance(scope: IConstruct, rule: str, reason: str, packs: Iterable[str] = COMPLIANCE_PACKS) -> None:
    """Acknowledge the same-named rule once per compliance pack (one id per call) on ``scope``'s L1."""
    for pack in packs:
        acknowledge(scope, pack, rule, reason)


CHECKOV_METADATA_KEY = "checkov"


def checkov_skip(scope: IConstruct, check_id: str, comment: str) -> None:
    """Skip one checkov check on the L1 resource of ``scope`` via its template Metadata, with a comment.

    The comment follows the same rule as acknowledgments: it says why the finding is safe.
    """
    target = _l1(scope)
    check_reason(comment, f"{target.node.path}: {check_id}")
    assert isinstance(target, cdk.CfnResource)
    existing = target.get_metadata(CHECKOV_METADATA_KEY) or {}
    skips = [s for s in existing.get("skip", []) if s.get("id") != check_id]
    skips.append({"id": check_id, "comment": comment})
    target.add_metadata(CHECKOV_METADATA_KEY, {"skip": skips})


def flatten_reference(node: Any) -> str:
    """A resolved CloudFormation value as cdk-nag writes it in finding ids (``<Logical.Arn>/prefix/*``).

    Granular findings such as ``AwsSolutions-IAM5[Resource::<Bucket.Arn>/models/*]`` name the resource
    this way, so a construct can acknowledge exactly the wildcards it grants on purpose.
    """
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return str(delimiter).join(flatten_reference(item) for item in items)
        if "Fn::Sub" in node:
            return flatten_reference(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
        if "Fn::ImportValue" in node:
            return flatten_reference(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{flatten_reference(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


def as_list(value: Any) -> list[Any]:
    """A policy field (``Action``/``Resource``: one value or a list) as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]
