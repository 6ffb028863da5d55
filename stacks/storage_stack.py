"""The storage stack: shared file systems for training data (FSx for Lustre linked to S3; optional EFS)."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.constants import TRAINING_SUBNETS
from gpu_constructs.efs import GpuEfsFileSystem
from gpu_constructs.fsx import GpuLustreFileSystem, LustreDataRepository
from stacks.base import WorkloadStack
from stacks.config import ConfigError


class StorageStack(WorkloadStack):
    """FSx for Lustre in the training subnets, linked to the datasets bucket; EFS when configured.

    Training jobs and fleets reach the file systems through the network stack's training and fleet
    security groups (Lustre: TCP 988 and 1018-1023; EFS: TCP 2049), opened through ``connections``.
    """

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        network = self.network
        #: Who mounts the file systems: training jobs and GPU fleets.
        self.clients: list[ec2.IConnectable] = [network.training_security_group, network.fleet_security_group]
        fs_config = self.config.file_systems
        self.lustre: GpuLustreFileSystem | None = self._lustre() if fs_config.lustre.enabled else None
        self.efs: GpuEfsFileSystem | None = self._efs() if fs_config.efs.enabled else None

    def _lustre(self) -> GpuLustreFileSystem:
        config, storage = self.config, self.storage
        lustre = config.file_systems.lustre
        az = lustre.availability_zone or config.availability_zones[0]
        if az not in config.availability_zones:
            raise ConfigError(
                f"file_systems.lustre.availability_zone: {az!r} is not one of the configured AZs; "
                f"allowed: {', '.join(config.availability_zones)}"
            )
        persistent = lustre.deployment_type == "PERSISTENT_2"
        backup = lustre.automatic_backup_retention_days
        fs = GpuLustreFileSystem(
            self,
            "Lustre",
            vpc=self.network.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNETS, availability_zones=[az]),
            deployment_type=lustre.deployment_type,
            storage_capacity_gib=lustre.storage_capacity_gib,
            per_unit_storage_throughput=lustre.per_unit_storage_throughput,
            data_compression=lustre.data_compression,
            kms_key=storage.key if persistent else None,
            lustre_version=lustre.lustre_version,
            mount_path=lustre.mount_path,
            removal_policy=self.removal,
            automatic_backup_retention=Duration.days(backup) if backup is not None else None,
            data_repository=LustreDataRepository(
                bucket=storage.datasets_bucket,
                prefix=lustre.import_prefix,
                file_system_path=lustre.file_system_path,
                auto_import=lustre.auto_import,
                auto_export=lustre.auto_export,
            ),
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

    def _efs(self) -> GpuEfsFileSystem:
        efs = self.config.file_systems.efs
        fs = GpuEfsFileSystem(
            self,
            "Efs",
            vpc=self.network.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNETS),
            kms_key=self.storage.key,
            throughput_mode=efs.throughput_mode,
            transition_to_ia_days=efs.transition_to_ia_days,
            automatic_backups=efs.automatic_backups,
            removal_policy=self.removal,
        )
        fs.allow_clients(*self.clients, description="training jobs and GPU fleets")
        CfnOutput(self, "EfsFileSystemId", value=fs.file_system_id)
        return fs
