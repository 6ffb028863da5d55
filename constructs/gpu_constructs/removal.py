"""Removal policies for resources with explicit physical names.

CloudFormation keeps a ``Retain`` resource even when the stack's first create fails and rolls back; a resource
with an explicit name (a log group named after its endpoint, a state machine's vended-logs group) then blocks
every retry with "already exists". ``RetainExceptOnCreate`` (CDK: ``RETAIN_ON_UPDATE_OR_DELETE``) keeps the
resource on updates and deletes but lets the rollback of its own create delete it. The rule pack's
``RetainedNamedResource`` rule (gpu_constructs/rules/retained_named_resource.py) cites the AWS documentation.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct


def for_named_resource(policy: RemovalPolicy) -> RemovalPolicy:
    """The policy for a resource with an explicit physical name: ``RETAIN`` becomes ``RETAIN_ON_UPDATE_OR_DELETE``."""
    return RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE if policy == RemovalPolicy.RETAIN else policy


def named_log_group(
    scope: Construct,
    construct_id: str,
    name: str,
    key: kms.IKey,
    retention: logs.RetentionDays,
    removal_policy: RemovalPolicy,
) -> logs.LogGroup:
    """A log group named ``name``, encrypted with ``key``, kept ``retention``, removed by
    :func:`for_named_resource` of ``removal_policy``."""
    return logs.LogGroup(
        scope,
        construct_id,
        log_group_name=name,
        encryption_key=key,
        retention=retention,
        removal_policy=for_named_resource(removal_policy),
    )
