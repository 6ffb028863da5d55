"""The fleet's own cdk-nag acknowledgments (its security group, mixed instances policy and role), each reason once."""

from __future__ import annotations

from aws_cdk import aws_autoscaling as autoscaling

from gpu_constructs import nag

# The role-policy acknowledgments shared with notebooks and job roles live in gpu_constructs.role_acknowledgments;
# they stay importable from here.
from gpu_constructs.role_acknowledgments import (
    DATA_GRANT_REASON,
    PolicyWildcards,
    acknowledge_role_policy,
    expect_data_grants,
    wildcard_findings,
)

__all__ = ["DATA_GRANT_REASON", "PolicyWildcards", "acknowledge_role_policy", "expect_data_grants", "wildcard_findings"]

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
