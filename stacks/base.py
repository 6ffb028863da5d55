"""The base classes of the platform's stacks: each takes the environment's config once (and the workload
stacks the network and data stacks' shared resources), so every stack reads them from ``self``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import RemovalPolicy, Stack
from constructs import Construct

from gpu_constructs.network import GpuNetwork
from gpu_constructs.storage import PlatformStorage
from stacks.config import EnvConfig

#: The repository's root: paths in config files (code folders, image build contexts) are relative to it.
REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def removal_policy(config: EnvConfig) -> RemovalPolicy:
    return RemovalPolicy.RETAIN if config.removal_policy == "retain" else RemovalPolicy.DESTROY


class PlatformStack(Stack):
    """A stack of one environment's platform.

    :param config: the environment; kept as ``config``, its removal policy as ``removal``.
    :param kwargs: the :class:`~aws_cdk.Stack` props (``env``, ``stack_name``, ``description``, ...).
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: EnvConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.removal = removal_policy(config)


class WorkloadStack(PlatformStack):
    """A stack whose workloads run in the network stack's VPC and use the data stack's key and buckets.

    :param network: the network stack's VPC, subnets and security groups; kept as ``network``.
    :param storage: the data stack's KMS key and buckets; kept as ``storage``.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, network: GpuNetwork, storage: PlatformStorage, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.network = network
        self.storage = storage
