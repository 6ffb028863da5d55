"""The network stack: the private GPU VPC, its endpoints, flow logs and security groups."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpu_constructs.constants import SAGEMAKER_ENDPOINTS, fleet_endpoints
from gpu_constructs.network import GpuNetwork
from gpu_constructs.retention import retention_days
from stacks.base import PlatformStack
from stacks.config import EnvConfig


def interface_endpoints(config: EnvConfig) -> tuple[str, ...]:
    """The configured endpoints, or (default) those the enabled features call: the SageMaker set, plus
    what fleet instances call (EC2 Auto Scaling, Systems Manager) when fleets are configured."""
    if config.network.interface_endpoints is not None:
        return config.network.interface_endpoints
    names = list(SAGEMAKER_ENDPOINTS)
    if config.fleets.groups:
        names.extend(n for n in fleet_endpoints() if n not in names)
    return tuple(names)


def retention(days: int) -> logs.RetentionDays:
    return retention_days(days, "flow_logs_retention_days")


class NetworkStack(PlatformStack):
    """VPC over the configured AZs; private subnets for training, endpoints and fleets; no internet by default."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        config = self.config
        net = config.network
        self.network = GpuNetwork(
            self,
            "Network",
            availability_zones=config.availability_zones,
            cidr=net.vpc_cidr,
            subnet_cidr_mask=net.subnet_cidr_mask,
            nat_gateways=net.nat_gateways,
            interface_endpoints=interface_endpoints(config),
            flow_logs_retention=retention(net.flow_logs_retention_days),
            removal_policy=self.removal,
        )

    @property
    def vpc(self) -> ec2.IVpc:
        return self.network.vpc
