"""Key-policy statements shared by the constructs that encrypt log groups with their own KMS key."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

#: What CloudWatch Logs needs on a customer managed key that encrypts a log group.
LOGS_KEY_ACTIONS = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]


def allow_cloudwatch_logs(key: kms.IKey, stack: Stack, *, sid: str, log_group: str = "*", exact: bool = False) -> None:
    """Let CloudWatch Logs of ``stack``'s region use ``key`` for this account's log groups matching ``log_group``.

    ``exact=True`` matches one log group name (``ArnEquals``); otherwise ``log_group`` is a pattern (``ArnLike``).
    """
    arn = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{log_group}"
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=list(LOGS_KEY_ACTIONS),
            resources=["*"],
            conditions={"ArnEquals" if exact else "ArnLike": {"kms:EncryptionContext:aws:logs:arn": arn}},
        )
    )
