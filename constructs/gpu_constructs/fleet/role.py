"""The fleet's instance role: Session Manager, the CloudWatch agent, the boot signals; nothing else.

Data access comes from grants on the fleet (``grant_principal``).
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpu_constructs.fleet.acknowledgments import (
    DEFAULT_POLICY_REASON,
    GROUP_ARN_REASON,
    INSTANCE_ARN_REASON,
    LOG_GROUP_REASON,
    WILDCARD_RESOURCE_REASON,
    PolicyWildcards,
    acknowledge_role_policy,
)
from gpu_constructs.fleet.options import CW_AGENT_NAMESPACE


def instance_role(scope: Construct, fleet_name: str, role: iam.IRole | None) -> iam.IRole:
    """``role``, or a new role that EC2 instances assume."""
    return role or iam.Role(
        scope,
        "InstanceRole",
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        description=f"GPU fleet {fleet_name} instances: Session Manager, CloudWatch agent, boot signals",
    )


def grant_instance_basics(
    scope: Construct, role: iam.IRole, fleet_name: str, log_group_arn: str
) -> PolicyWildcards | None:
    """Add the instances' own statements to ``role``'s policy, each wildcard acknowledged with its reason."""
    stack = Stack.of(scope)
    arn = f"arn:{stack.partition}"
    group_arn = f"{arn}:autoscaling:{stack.region}:{stack.account}:autoScalingGroup:*:autoScalingGroupName/{fleet_name}"
    statements = [
        (
            iam.PolicyStatement(
                sid="SessionManagerRegistration",
                actions=["ssm:UpdateInstanceInformation"],
                resources=[f"{arn}:ec2:{stack.region}:{stack.account}:instance/*"],
            ),
            INSTANCE_ARN_REASON,
        ),
        (
            iam.PolicyStatement(
                sid="SessionManagerChannels",
                actions=[
                    "ssmmessages:CreateControlChannel",
                    "ssmmessages:CreateDataChannel",
                    "ssmmessages:OpenControlChannel",
                    "ssmmessages:OpenDataChannel",
                ],
                resources=["*"],
            ),
            WILDCARD_RESOURCE_REASON,
        ),
        (
            iam.PolicyStatement(
                sid="CloudWatchAgentMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": CW_AGENT_NAMESPACE}},
            ),
            WILDCARD_RESOURCE_REASON,
        ),
        (
            iam.PolicyStatement(
                sid="CloudWatchAgentLogs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[log_group_arn],
            ),
            LOG_GROUP_REASON,
        ),
        (
            iam.PolicyStatement(
                sid="BootCheckSignals",
                actions=["autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceHealth"],
                resources=[group_arn],
            ),
            GROUP_ARN_REASON,
        ),
    ]
    return acknowledge_role_policy(scope, role, statements, DEFAULT_POLICY_REASON)
