"""What every stack of one environment shares: :class:`StackContext`, built once from the environment's config.

A stack takes its own config section(s) and this context, not the whole :class:`~stacks.config.EnvConfig`, so
what a stack can read is visible in its signature: a new setting of one section reaches only the stack that takes
that section, and a test can build a stack from a section and a context without a full environment file.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from aws_cdk import RemovalPolicy, StackProps
from aws_cdk import aws_logs as logs

from gpu_constructs.retention import retention_days
from stacks.config import EnvConfig

#: The keyword arguments of :class:`~aws_cdk.Stack` that :class:`~aws_cdk.StackProps` carries.
_STACK_PROPS: tuple[str, ...] = tuple(inspect.signature(StackProps).parameters)


@dataclass(frozen=True, kw_only=True)
class StackContext:
    """The environment-wide settings the platform's stacks read besides their own config section.

    :param env_name: the environment's name (``dev``), shown in descriptions and display names.
    :param resource_prefix: the prefix of named resources and stacks (``gpu-dev``).
    :param account: the 12-digit account id, or ``None`` for account-agnostic templates.
    :param region: the region the stacks deploy to (from config: nothing is looked up at synth).
    :param availability_zones: the zones the VPC spans; file systems and placement groups pick one of them.
    :param tags: tags of every resource, sorted by key (constructs that tag their own children, such as
        training jobs, repeat them).
    :param production: the environment retains data and has termination protection, so constructs apply their
        production guardrails (blue/green traffic shifting, alarms, ...).
    :param removal_policy: what happens to stateful resources removed from a stack.
    :param log_retention: retention of the platform's CloudWatch log groups (jobs, state machines, endpoints).
    """

    env_name: str
    resource_prefix: str
    account: str | None
    region: str
    availability_zones: tuple[str, ...]
    tags: Mapping[str, str]
    production: bool
    removal_policy: RemovalPolicy
    log_retention: logs.RetentionDays

    @classmethod
    def from_config(cls, config: EnvConfig) -> StackContext:
        """The context of ``config``; its values are already validated, so this cannot fail on a loaded config."""
        return cls(
            env_name=config.env_name,
            resource_prefix=config.resource_prefix,
            account=config.account,
            region=config.region,
            availability_zones=config.availability_zones,
            tags=MappingProxyType(dict(sorted(config.tags.items()))),
            production=config.is_production,
            removal_policy=RemovalPolicy.RETAIN if config.removal_policy == "retain" else RemovalPolicy.DESTROY,
            log_retention=retention_days(config.data.log_retention_days, "data.log_retention_days"),
        )

    def resource_name(self, name: str) -> str:
        """``<resource_prefix>-<name>``: the physical name of a named resource (job prefix, endpoint, fleet)."""
        return f"{self.resource_prefix}-{name}"


def stack_arguments(props: StackProps | None) -> dict[str, Any]:
    """The keyword arguments of :class:`~aws_cdk.Stack` that ``props`` sets.

    A jsii struct cannot be unpacked with ``**``; reading the names of ``StackProps``' own signature keeps every
    prop a later aws-cdk-lib adds.
    """
    if props is None:
        return {}
    values = {name: getattr(props, name) for name in _STACK_PROPS}
    return {name: value for name, value in values.items() if value is not None}
