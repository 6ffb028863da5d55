"""The storage stack: shared file systems for training data (FSx for Lustre linked to S3; optional EFS)."""

from __future__ import annotations

from aws_cdk import CfnOutput, StackProps
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.constants import TRAINING_SUBNETS
from gpu_constructs.file_systems.efs import GpuEfsFileSystem
from gpu_constructs.file_systems.fsx import GpuLustreFileSystem
from gpu_constructs.network import GpuNetwork
from gpu_constructs.storage import PlatformStorage
from stacks.base import WorkloadStack
from stacks.config import ConfigError, EfsConfig, FileSystemsConfig, LustreConfig
from stacks.context import StackContext


class StorageStack(WorkloadStack):
    """FSx for Lustre in the training subnets, linked to the datasets bucket; EFS when configured.

    Training jobs and fleets reach the file systems through the network stack's training and fleet
    security groups (Lustre: TCP 988 and 1018-1023; EFS: TCP 2049), opened through ``connections``.

    :param file_systems: the ``file_systems`` section.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        file_systems: FileSystemsConfig,
        network: GpuNetwork,
        storage: PlatformStorage,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, network=network, storage=storage, props=props)
        #: Who mounts the file systems: training jobs and GPU fleets.
        self.clients: list[ec2.IConnectable] = [network.training_security_group, network.fleet_security_group]
        lustre, efs = file_systems.lustre, file_systems.efs
        self.lustre: GpuLustreFileSystem | None = self._lustre(lustre) if lustre.enabled else None
        self.efs: GpuEfsFileSystem | None = self._efs(efs) if efs.enabled else None

    def _lustre(self, lustre: LustreConfig) -> GpuLustreFileSystem:
        zones, storage = self.context.availability_zones, self.storage
        az = lustre.availability_zone or zones[0]
        if az not in zones:
            raise ConfigError(
                f"file_systems.lustre.availability_zone: {az!r} is not one of the configured AZs; "
                f"allowed: {', '.join(zones)}"
            )
        fs = GpuLustreFileSystem(
            self,
            "Lustre",
            vpc=self.network.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNETS, availability_zones=[az]),
            removal_policy=self.removal,
            **lustre.file_system_props(key=storage.key, datasets_bucket=storage.datasets_bucket),
        )
        fs.allow_clients(*self.clients, description="training jobs and GPU fleets")
        outputs = {
            "FileSystemId": fs.file_system_id,
            "DnsName": fs.dns_name,
            "MountName": fs.mount_name,
            "MountPath": fs.mount_path,
            "DirectoryPath": fs.directory_path(),
            "AvailabilityZone": fs.availability_zone,
        }
        for name, value in outputs.items():
            CfnOutput(self, f"Lustre{name}", value=value)
        return fs

    def _efs(self, efs: EfsConfig) -> GpuEfsFileSystem:
        fs = GpuEfsFileSystem(
            self,
            "Efs",
            vpc=self.network.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNETS),
            kms_key=self.storage.key,
            removal_policy=self.removal,
            **efs.file_system_props(),
        )
        fs.allow_clients(*self.clients, description="training jobs and GPU fleets")
        CfnOutput(self, "EfsFileSystemId", value=fs.file_system_id)
        return fs
