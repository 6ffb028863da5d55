"""cdk-nag acknowledgments of :class:`~gpu_constructs.training.TrainingPipeline`: the wildcards it grants on purpose
(IAM5, acknowledged one exact finding id at a time once references are final), its inline policies and the job
security group's self-referencing rule."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from constructs import IConstruct

from gpu_constructs import nag
from gpu_constructs.training.roles import SAGEMAKER_VPC_ACTIONS

__all__ = ["JOB_GROUP_INTERNAL_REASON", "STAR_RESOURCE_ACTIONS", "STAR_RESOURCE_REASON", "GrantedPrefixes"]


@dataclass(frozen=True)
class GrantedPrefixes:
    """What the setup's wildcards are scoped to: the job-name prefixes and the S3 key prefixes its roles read or
    write. A wildcard outside these is not acknowledged, so cdk-nag still reports it.

    :param job_name_prefix: training jobs ``<job_name_prefix>-*``; their ``output/`` and ``checkpoints/`` prefixes.
    :param shard_job_name_prefix: prepare jobs ``<shard_job_name_prefix>-*``.
    :param dataset_prefix: the datasets-bucket prefix of the setup's channels.
    :param code_prefix: where code packages are uploaded in the artifacts bucket.
    :param readable_prefixes: the prefixes of the setup's readable inputs, as configured.
    :param source_prefix: the raw files the prepare step reads (None: not granted to the role at hand).
    """

    job_name_prefix: str
    shard_job_name_prefix: str
    dataset_prefix: str
    code_prefix: str
    readable_prefixes: Sequence[str] = ()
    source_prefix: str | None = None


def acknowledge_policy(
    scope: IConstruct, policy: IConstruct | None, inline_reason: str, prefixes: GrantedPrefixes
) -> None:
    """The inline policy of one of the setup's roles: IAMNoInlinePolicy, and its expected IAM5 wildcards (those of
    :func:`expected_wildcards` for ``prefixes``), validated on ``scope``."""
    if policy is None:
        return
    nag.acknowledge_compliance(policy, "IAMNoInlinePolicy", inline_reason)
    nag.acknowledge_wildcards(
        policy,
        expected_wildcards(prefixes),
        star_actions=STAR_RESOURCE_ACTIONS,
        star_reason=STAR_RESOURCE_REASON,
        on=scope,
    )


def expected_wildcards(prefixes: GrantedPrefixes) -> list[tuple[str, str]]:
    """The IAM5 findings the setup causes on purpose (regex of the finding id, reason).

    Anything else — another prefix, a wildcard action not listed, ``*`` on another action — is not
    acknowledged, so cdk-nag still reports it.
    """
    prefix = prefixes.job_name_prefix
    readable = [p if not p or p.endswith("/") else p + "/" for p in prefixes.readable_prefixes]
    keys = [
        prefixes.dataset_prefix,
        f"output/{prefix}/",
        f"checkpoints/{prefix}/",
        prefixes.code_prefix,
        *dict.fromkeys(readable),
    ]
    if prefixes.source_prefix:
        keys.append(prefixes.source_prefix)
    objects = "|".join(re.escape(p) for p in keys)
    arn = r"arn:[^*]*"
    return [
        (
            r"Action::(s3:(GetObject|GetBucket|List|Abort|DeleteObject)|kms:(GenerateDataKey|ReEncrypt))\*",
            "Safe because these are the action groups of the CDK's S3 bucket grants (read, put, read-write) "
            "and their KMS data-key actions, each limited to one object prefix of one platform bucket and to "
            "the platform's data key",
        ),
        (
            rf"Resource::[^*]*/({objects})\*",
            "Safe because the wildcard is the object-key suffix under one prefix of one bucket (the dataset, raw "
            "files, job output, checkpoints or code packages of this setup, or a prefix its config declares "
            "readable, training.readable_inputs), since SageMaker names the objects, code packages are named by "
            "their content hash and a job reads every object of the prefix its user names",
        ),
        (
            rf"Resource::{arn}:logs:[^*]*:log-group:/aws/sagemaker/(TrainingJobs|ProcessingJobs):\*",
            "Safe because the wildcard only covers the log streams of SageMaker's own job log group, since "
            "SageMaker names one stream per job host",
        ),
        (
            rf"Resource::{arn}:ec2:[^*]*:(network-interface|subnet|security-group)/\*",
            "Safe because network interfaces are created at run time with ids unknown at deploy time, and "
            "the statement is limited by an ec2:Vpc condition to this VPC, since SageMaker needs them for VPC jobs",
        ),
        (
            rf"Resource::{arn}:sagemaker:[^*]*:(training-job/{re.escape(prefix)}|"
            rf"processing-job/{re.escape(prefixes.shard_job_name_prefix)})-\*",
            "Safe because the wildcard is the suffix of job names that start with this setup's prefix, since "
            "each execution chooses a new job name",
        ),
    ]


#: Actions AWS supports only on ``Resource: "*"`` that the job roles and the state machine need.
STAR_RESOURCE_ACTIONS = frozenset(
    {
        "ecr:GetAuthorizationToken",
        "cloudwatch:PutMetricData",
        *(a for a in SAGEMAKER_VPC_ACTIONS if ":Describe" in a),
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "logs:CreateLogDelivery",
        "logs:GetLogDelivery",
        "logs:UpdateLogDelivery",
        "logs:DeleteLogDelivery",
        "logs:ListLogDeliveries",
        "logs:PutResourcePolicy",
        "logs:DescribeResourcePolicies",
        "logs:DescribeLogGroups",
    }
)
STAR_RESOURCE_REASON = (
    "Safe because every action on Resource * supports no resource-level permissions: ECR registry login, "
    "PutMetricData (limited by a namespace condition), EC2 Describe calls for VPC jobs, and the X-Ray and "
    "log-delivery calls Step Functions makes, since AWS documents them on *"
)


JOB_GROUP_INTERNAL_REASON = (
    "Safe because the rule admits traffic only from this same security group (the hosts of one training job "
    "exchanging NCCL traffic on dynamic ports); nothing outside the group, and no CIDR, can reach these ports"
)
