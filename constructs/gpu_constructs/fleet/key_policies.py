"""Key policy statements a fleet needs: EC2 Auto Scaling's service-linked role (volumes, notifications) and
CloudWatch Logs (the fleet's log group)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Annotations, Names, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct

from gpu_constructs import nag
from gpu_constructs.keys import allow_cloudwatch_logs
from gpu_constructs.topics import Publisher, admit_publishers

__all__ = [
    "allow_autoscaling_to_use_key",
    "allow_logs_to_use_key",
    "allow_notifications",
    "autoscaling_service_linked_role_arn",
]

SERVICE_LINKED_ROLE_PRINCIPAL_REASON = (
    "Safe because the wildcard principal is narrowed by conditions to this account's EC2 Auto Scaling "
    "service-linked role (aws:PrincipalArn, kms:CallerAccount), since a key policy that names the role as "
    "principal fails to deploy in an account where the role does not exist yet"
)


def autoscaling_service_linked_role_arn(scope: IConstruct) -> str:
    """ARN of the account's EC2 Auto Scaling service-linked role (AWSServiceRoleForAutoScaling)."""
    stack = Stack.of(scope)
    return (
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/autoscaling.amazonaws.com/"
        "AWSServiceRoleForAutoScaling"
    )


def _service_linked_role_statement(
    key: kms.IKey, sid: str, actions: list[str], extra: Mapping[str, Mapping[str, Any]] | None = None
) -> iam.PolicyStatement:
    stack = Stack.of(key)
    conditions: dict[str, Any] = {
        "ArnEquals": {"aws:PrincipalArn": autoscaling_service_linked_role_arn(key)},
        "StringEquals": {"kms:CallerAccount": stack.account},
    }
    conditions.update(extra or {})
    return iam.PolicyStatement(
        sid=sid, principals=[iam.AnyPrincipal()], actions=actions, resources=["*"], conditions=conditions
    )


def allow_autoscaling_to_use_key(key: kms.IKey, scope: Construct) -> None:
    """The key policy statements EC2 Auto Scaling needs to launch instances with volumes encrypted by a
    customer managed key (EC2 Auto Scaling user guide, "Required AWS KMS key policy for use with encrypted
    volumes"): the service-linked role may use the key and create grants for AWS resources."""
    use = _service_linked_role_statement(
        key,
        "AllowAutoScalingServiceLinkedRoleUseOfTheKey",
        ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
    )
    attach = _service_linked_role_statement(
        key,
        "AllowAutoScalingServiceLinkedRoleAttachmentOfPersistentResources",
        ["kms:CreateGrant"],
        {"Bool": {"kms:GrantIsForAWSResource": True}},
    )
    added = [key.add_to_resource_policy(s).statement_added for s in (use, attach)]
    if all(added):
        _skip_wildcard_principal_check(key)
        return
    Annotations.of(scope).add_warning_v2(
        "gpu-constructs:volume-key-policy",
        "volume_key is imported: add the key policy statements that let the EC2 Auto Scaling service-linked "
        "role use it (kms:Encrypt/Decrypt/ReEncrypt*/GenerateDataKey*/DescribeKey, and kms:CreateGrant with "
        "kms:GrantIsForAWSResource), or instances fail to launch",
    )


def allow_notifications(topic: sns.ITopic, key: kms.IKey) -> None:
    """Let CloudWatch alarms and EC2 Auto Scaling notifications publish to ``topic`` encrypted with ``key``.

    CloudWatch alarms of this account and region are admitted on the topic and the key by the platform's one
    recipe (:func:`gpu_constructs.topics.admit_publishers`); the key policy also lets the Auto Scaling
    service-linked role (which publishes scaling notifications as a role, not as a service principal)
    encrypt messages.
    """
    admit_publishers(topic, Publisher.cloudwatch_alarms(topic), key=key)
    key.add_to_resource_policy(
        _service_linked_role_statement(
            key, "AllowAutoScalingNotificationsEncrypted", ["kms:Decrypt", "kms:GenerateDataKey*"]
        )
    )
    _skip_wildcard_principal_check(key)


def _skip_wildcard_principal_check(key: kms.IKey) -> None:
    """Skip checkov's wildcard-principal check on an owned key, keeping the reason of an earlier skip
    (another construct may have added its own conditional wildcard statement to the same key)."""
    if not isinstance(key, kms.Key):
        return
    cfn = key.node.default_child
    assert isinstance(cfn, kms.CfnKey)
    existing = cfn.get_metadata(nag.CHECKOV_METADATA_KEY) or {}
    earlier = [s.get("comment", "") for s in existing.get("skip", []) if s.get("id") == "CKV_AWS_33"]
    reasons = [c for c in earlier if c and SERVICE_LINKED_ROLE_PRINCIPAL_REASON not in c]
    comment = "; ".join([*reasons, SERVICE_LINKED_ROLE_PRINCIPAL_REASON])
    nag.checkov_skip(key, "CKV_AWS_33", comment)


def allow_logs_to_use_key(key: kms.IKey, group: logs.LogGroup, name: str) -> None:
    """CloudWatch Logs may use ``key`` for the log group ``name`` exactly."""
    allow_cloudwatch_logs(
        key, Stack.of(group), sid=f"AllowCloudWatchLogs{Names.unique_id(group)[-40:]}", log_group=name, exact=True
    )
