"""The storage stack: shared file systems for training data (FSx for Lustre linked to S3; optional EFS)."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.constants import TRAINING_SUBNETS
from gpu_constructs.efs import GpuEfsFileSystem
from gpu_constructs.fsx import GpuLustreFileSystem, LustreDataRepository
from gpu_constructs.network import GpuNetwork
from gpu_constructs.storage import PlatformStorage
from stacks.config import ConfigError, EnvConfig
from stacks.network_stack import removal_policy


class StorageStack(Stack):
    """FSx for Lustre in the training subnets, linked to the datasets bucket; EFS when configured.

    Training jobs and fleets reach the file systems through the network stack's training and fleet
    security groups (Lustre: TCP 988 and 1018-1023; EFS: TCP 2049), opened through ``connections``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        network: GpuNetwork,
        storage: PlatformStorage,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        fs_config = config.file_systems
        clients: list[ec2.IConnectable] = [network.training_security_group, network.fleet_security_group]
        self.lustre: GpuLustreFileSystem | None = None
        self.efs: GpuEfsFileSystem | None = None
        lustre = fs_config.lustre
        if lustre.enabled:
            az = lustre.availability_zone or config.availability_zones[0]
            if az not in config.availability_zones:
                raise ConfigError(
                    f"file_systems.lustre.availability_zone: {az!r} is not one of the configured AZs; "
                    f"allowed: {', '.join(config.availability_zones)}"
                )
            persistent = lustre.deployment_type == "PERSISTENT_2"
            backup = lustre.automatic_backup_retention_days
            self.lustre = GpuLustreFileSystem(
                self,
                "Lustre",
                vpc=network.vpc,
                vpc_subnets=ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNETS, availability_zones=[az]),
                deployment_type=lustre.deployment_type,
                storage_capacity_gib=lustre.storage_capacity_gib,
                per_unit_storage_throughput=lustre.per_unit_storage_throughput,
                data_compression=lustre.data_compression,
                kms_key=storage.key if persistent else None,
                lustre_version=lustre.lustre_version,
                mount_path=lustre.mount_path,
                removal_policy=removal_policy(config),
                automatic_backup_retention=Duration.days(backup) if backup is not None else None,
                data_repository=LustreDataRepository(
                    bucket=storage.datasets_bucket,
                    prefix=lustre.import_prefix,
                    file_system_path=lustre.file_system_path,
                    auto_import=lustre.auto_import,
                    auto_export=lustre.auto_export,
                ),
            )
            self.lustre.allow_clients(*clients, description="training jobs and GPU fleets")
            CfnOutput(self, "LustreFileSystemId", value=self.lustre.file_system_id)
            CfnOutput(self, "LustreDnsName", value=self.lustre.dns_name)
            CfnOutput(self, "LustreMountName", value=self.lustre.mount_name)
            CfnOutput(self, "LustreMountPath", value=self.lustre.mount_path)
            CfnOutput(self, "LustreDirectoryPath", value=self.lustre.directory_path())
            CfnOutput(self, "LustreAvailabilityZone", value=self.lustre.availability_zone)
        efs_config = fs_config.efs
        if efs_config.enabled:
            self.efs = GpuEfsFileSystem(
                self,
                "Efs",
                vpc=network.vpc,
                vpc_subnets=ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNETS),
                kms_key=storage.key,
                throughput_mode=efs_config.throughput_mode,
                transition_to_ia_days=efs_config.transition_to_ia_days,
                automatic_backups=efs_config.automatic_backups,
                removal_policy=removal_policy(config),
            )
            self.efs.allow_clients(*clients, description="training jobs and GPU fleets")
            CfnOutput(self, "EfsFileSystemId", value=self.efs.file_system_id)
