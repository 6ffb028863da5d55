"""The endpoint's cdk-nag acknowledgments: the role's inline policy and the wildcards it grants on purpose."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import aws_iam as iam
from constructs import IConstruct

from gpu_constructs import nag

ROLE_POLICY_REASON = (
    "Safe because this inline policy is created by CDK from grants for exactly one role (the endpoint's "
    "execution role), is deleted with it and cannot be attached elsewhere; each statement is scoped by a grant"
)


#: Actions that AWS only supports on ``Resource: "*"`` and that a SageMaker hosting role needs.
STAR_RESOURCE_ACTIONS: dict[str, str] = {
    "ecr:GetAuthorizationToken": "ECR registry login",
    "cloudwatch:PutMetricData": "endpoint metrics (limited by a cloudwatch:namespace condition)",
    "ec2:CreateNetworkInterface": "the model's network interfaces in the VPC",
    "ec2:CreateNetworkInterfacePermission": "the model's network interfaces in the VPC",
    "ec2:DeleteNetworkInterface": "the model's network interfaces in the VPC",
    "ec2:DeleteNetworkInterfacePermission": "the model's network interfaces in the VPC",
    "ec2:DescribeNetworkInterfaces": "VPC lookups",
    "ec2:DescribeVpcs": "VPC lookups",
    "ec2:DescribeDhcpOptions": "VPC lookups",
    "ec2:DescribeSubnets": "VPC lookups",
    "ec2:DescribeSecurityGroups": "VPC lookups",
}
STAR_RESOURCE_REASON = (
    "Safe because each action on Resource * supports no resource-level permissions and SageMaker hosting "
    "requires it: ECR registry login, endpoint metrics (namespace condition), and the EC2 network-interface "
    "actions SageMaker performs for the model's VPC configuration"
)
MODEL_PREFIX_REASON = (
    "Safe because the wildcard only spans model artifacts under one prefix of one platform bucket, read-only, "
    "since the served artifact is chosen at deploy time through an SSM parameter"
)
CAPTURE_PREFIX_REASON = (
    "Safe because the wildcard is the object-key suffix of this endpoint's own data-capture prefix in one "
    "platform bucket, since SageMaker names the captured objects itself"
)
ASYNC_PREFIX_REASON = (
    "Safe because the wildcard is the object-key suffix of this endpoint's own asynchronous input, output "
    "or failure prefix in one platform bucket, since request and response keys are chosen at run time"
)


def expected_wildcard_findings(document: Mapping[str, Any], object_patterns: Mapping[str, str]) -> dict[str, str]:
    """IAM5 findings of a resolved policy ``document`` that are expected, with the reason for each.

    Expected: ``Resource::*`` when every statement on ``*`` only has actions from
    :data:`STAR_RESOURCE_ACTIONS`; ``Resource::<bucket>/<pattern>`` for an object pattern this construct
    granted. Anything else (a wildcard action, ``*`` on another action, another prefix) is not returned, so
    cdk-nag still reports it.
    """
    found: dict[str, str] = {}
    has_star, star_ok = False, True
    for actions, wildcards, _ in nag.allow_statements(document.get("Statement", [])):
        for flat in wildcards:
            if flat == "*":
                has_star = True
                star_ok = star_ok and all(a in STAR_RESOURCE_ACTIONS for a in actions)
                continue
            for pattern, reason in object_patterns.items():
                if flat.endswith(f"/{pattern}") and "*" not in flat[: -len(pattern)]:
                    found[f"Resource::{flat}"] = reason
    if has_star and star_ok:
        found["Resource::*"] = STAR_RESOURCE_REASON
    return found


def acknowledge_role_policy(scope: IConstruct, role: iam.IRole, wildcard_objects: Mapping[str, str]) -> None:
    """Document the findings on the role's CDK-generated inline policy (for a role with a default policy).

    The inline-policy finding is acknowledged now; the wildcard findings (IAM5) at validation time,
    when cross-stack references are final, one exact finding at a time and only for the wildcards
    granted on purpose: :data:`STAR_RESOURCE_ACTIONS` and the object patterns in ``wildcard_objects``
    (pattern to reason; read when the app validates, so grants added until then count). The check
    runs as a validation of ``scope`` (the endpoint).
    """
    if not isinstance(role, iam.Role):
        return
    policy = role.node.try_find_child("DefaultPolicy")
    if policy is None:
        return
    nag.acknowledge_compliance(policy, "IAMNoInlinePolicy", ROLE_POLICY_REASON)
    nag.acknowledge_wildcards(
        policy, expected=lambda document, _stack: expected_wildcard_findings(document, wildcard_objects), on=scope
    )
