"""The fleet's cdk-nag acknowledgments: each reason once, and the IAM5 (wildcard) acknowledgment of its policy."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from gpu_constructs import nag

__all__ = ["DATA_GRANT_REASON", "PolicyWildcards", "acknowledge_role_policy", "wildcard_findings"]

INTRA_GROUP_REASON = (
    "Safe because the only source is this security group itself, not a CIDR: EFA requires all traffic "
    "between the members of the group, and NCCL over TCP uses ephemeral ports"
)
MIXED_IMDS_REASON = (
    "Safe because the group launches only from this construct's launch template, through its mixed instances "
    "policy (which this rule does not read), and that template requires IMDSv2 (HttpTokens required)"
)
MIXED_EBS_REASON = (
    "Safe because the group launches only from this construct's launch template, through its mixed instances "
    "policy (which this rule does not read), and every block device there is encrypted with the platform key"
)
WILDCARD_RESOURCE_REASON = (
    "Safe because the ssmmessages channel actions (Session Manager) and cloudwatch:PutMetricData support no "
    "resource-level permissions; PutMetricData is limited to the CWAgent namespace by a condition"
)
INSTANCE_ARN_REASON = (
    "Safe because ssm:UpdateInstanceInformation only registers the calling instance with Systems Manager, "
    "and the ids of instances the group launches later cannot be known here"
)
LOG_GROUP_REASON = (
    "Safe because the log group is the fleet's own; the wildcard is the log-stream suffix of its ARN, "
    "since the agent names one stream per instance"
)
DATA_GRANT_REASON = (
    "Safe because the data grants name exact S3 and KMS actions and this object-key wildcard covers exactly "
    "one key prefix of one platform bucket, encrypted with the platform's data key"
)
GROUP_ARN_REASON = (
    "Safe because the auto scaling group is named exactly; the only wildcard is the UUID that AWS assigns "
    "to the group when it is created"
)
DEFAULT_POLICY_REASON = (
    "Safe because this inline policy is created by CDK for exactly one role (the fleet's instance role), "
    "is deleted with it and cannot be attached elsewhere; each statement is scoped to the fleet's resources"
)


def acknowledge_mixed_instances(group: autoscaling.CfnAutoScalingGroup) -> None:
    """cdk-nag reads a group's launch template only from LaunchTemplate, not from the mixed instances policy;
    the tests assert the template's IMDSv2 and encrypted volumes."""
    nag.acknowledge_compliance(group, "EC2IMDSv2Enabled", MIXED_IMDS_REASON, packs=(nag.HIPAA, nag.NIST_R5))
    nag.acknowledge(group, nag.AWS_SOLUTIONS, "EC26", MIXED_EBS_REASON)


def acknowledge_role_policy(
    scope: Construct,
    role: iam.IRole,
    statements: Sequence[tuple[iam.PolicyStatement, str]],
    policy_reason: str,
) -> PolicyWildcards | None:
    """Add ``statements`` (statement, reason) to ``role``'s policy and acknowledge exactly their wildcards.

    The policy is a new role's ``DefaultPolicy`` or the ``Policy`` the CDK attaches to an imported mutable
    role; an immutable imported role has none (its owner grants the permissions): None then.
    """
    for statement, _reason in statements:
        role.add_to_principal_policy(statement)
    policy = role.node.try_find_child("DefaultPolicy") or role.node.try_find_child("Policy")
    if policy is None:
        return None
    nag.acknowledge_compliance(policy, "IAMNoInlinePolicy", policy_reason)
    wildcards = nag.acknowledge_wildcards(policy, on=scope)
    for statement, reason in statements:
        wildcards.expect(statement, reason)
    return wildcards


def expect_data_grants(
    wildcards: PolicyWildcards | None, grants: Iterable[iam.Grant], encryption_key: kms.IKey | None
) -> None:
    """Acknowledge the wildcard findings (IAM5) of S3 data grants, exactly those (nothing without a policy)."""
    if wildcards is None:
        return
    for grant in grants:
        for statement in grant.principal_statements:
            wildcards.expect(statement, DATA_GRANT_REASON)
    if encryption_key is not None:
        wildcards.expect_key_actions(encryption_key, DATA_GRANT_REASON)


#: The IAM5 acknowledgment of one policy (the platform's recipe: :class:`gpu_constructs.nag.WildcardAcknowledgment`).
PolicyWildcards = nag.WildcardAcknowledgment
wildcard_findings = nag.wildcard_findings
