"""The platform's KMS key recipe, and key-policy statements shared by the constructs that encrypt log groups.

Every construct that creates its own customer managed key uses :func:`new_key`: rotation on, and a pending
deletion window of 30 days for a retained key (7 days, the minimum, for one destroyed with its stack).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

#: Days a key scheduled for deletion can still be recovered: retained keys 30, keys destroyed with the stack 7.
RETAINED_PENDING_WINDOW_DAYS = 30
DESTROYED_PENDING_WINDOW_DAYS = 7


def pending_window(removal_policy: RemovalPolicy) -> Duration:
    """The deletion waiting period for a key with ``removal_policy`` (30 days for RETAIN, else 7)."""
    days = RETAINED_PENDING_WINDOW_DAYS if removal_policy == RemovalPolicy.RETAIN else DESTROYED_PENDING_WINDOW_DAYS
    return Duration.days(days)


def new_key(
    scope: Construct, construct_id: str, *, description: str, removal_policy: RemovalPolicy = RemovalPolicy.RETAIN
) -> kms.Key:
    """A customer managed KMS key with the platform's settings: rotation on, ``removal_policy`` (default:
    RETAIN) and its :func:`pending_window`. Example: ``new_key(self, "Key", description=f"Encrypts ...")``."""
    return kms.Key(
        scope,
        construct_id,
        description=description,
        enable_key_rotation=True,
        removal_policy=removal_policy,
        pending_window=pending_window(removal_policy),
    )


def given_or_new_key(
    given: kms.IKey | None,
    scope: Construct,
    construct_id: str,
    *,
    description: str,
    removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
) -> kms.IKey:
    """``given``, or when it is None a :func:`new_key` under ``scope`` (a construct's ``kms_key=None`` default).

    Example: ``self.kms_key = given_or_new_key(kms_key, self, "Key", description=f"Encrypts ...")``.
    """
    if given is not None:
        return given
    return new_key(scope, construct_id, description=description, removal_policy=removal_policy)


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


def allow_s3_access_logs(key: kms.IKey, stack: Stack) -> None:
    """Let S3 server access logging (``logging.s3.amazonaws.com``) write SSE-KMS objects with ``key``, for
    ``stack``'s account's buckets only."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AllowS3ServerAccessLogDelivery",
            principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
            actions=["kms:GenerateDataKey*", "kms:Encrypt", "kms:Decrypt"],
            resources=["*"],
            conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
        )
    )
