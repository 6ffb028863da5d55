"""The network stack: the private GPU VPC, its endpoints, flow logs and security groups."""

from __future__ import annotations

from aws_cdk import StackProps
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.constants import SAGEMAKER_ENDPOINTS, fleet_endpoints
from gpu_constructs.network import GpuNetwork
from stacks.base import PlatformStack
from stacks.config import EnvConfig, NetworkConfig
from stacks.context import StackContext


def interface_endpoints(config: EnvConfig) -> tuple[str, ...]:
    """The configured endpoints, or (default) those the enabled features call: the SageMaker set, plus
    what fleet instances call (EC2 Auto Scaling, Systems Manager) when fleets are configured."""
    if config.network.interface_endpoints is not None:
        return config.network.interface_endpoints
    names = list(SAGEMAKER_ENDPOINTS)
    if config.fleets.groups:
        names.extend(n for n in fleet_endpoints() if n not in names)
    return tuple(names)


class NetworkStack(PlatformStack):
    """VPC over the configured AZs; private subnets for training, endpoints and fleets; no internet by default.

    :param network: the ``network`` section.
    :param interface_endpoints: the interface VPC endpoints to create (:func:`interface_endpoints` of the
        environment: they follow the features other sections enable).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        network: NetworkConfig,
        interface_endpoints: tuple[str, ...],
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, props=props)
        self.network = GpuNetwork(
            self,
            "Network",
            availability_zones=context.availability_zones,
            interface_endpoints=interface_endpoints,
            removal_policy=self.removal,
            **network.network_props(),
        )

    @property
    def vpc(self) -> ec2.IVpc:
        return self.network.vpc
