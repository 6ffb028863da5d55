"""The base classes of the platform's stacks.

Each stack takes the environment-wide :class:`~stacks.context.StackContext` and, as its own keyword
parameters, only the config section(s) it builds from; the workload stacks also take the network and data
stacks' shared resources. Stack props (``env``, ``stack_name``, ``description``, ...) come as one typed
:class:`~aws_cdk.StackProps`.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Stack, StackProps
from constructs import Construct

from gpu_constructs.network import GpuNetwork
from gpu_constructs.storage import PlatformStorage
from stacks.context import StackContext, stack_arguments

#: The repository's root: paths in config files (code folders, image build contexts) are relative to it.
REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


class PlatformStack(Stack):
    """A stack of one environment's platform.

    :param context: the environment-wide settings; kept as ``context``, its removal policy as ``removal``.
    :param props: the :class:`~aws_cdk.Stack` props (``env``, ``stack_name``, ``description``, ...).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, context: StackContext, props: StackProps | None = None
    ) -> None:
        super().__init__(scope, construct_id, **stack_arguments(props))
        self.context = context
        self.removal = context.removal_policy


class WorkloadStack(PlatformStack):
    """A stack whose workloads run in the network stack's VPC and use the data stack's key and buckets.

    :param network: the network stack's VPC, subnets and security groups; kept as ``network``.
    :param storage: the data stack's KMS key and buckets; kept as ``storage``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        network: GpuNetwork,
        storage: PlatformStorage,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, props=props)
        self.network = network
        self.storage = storage
