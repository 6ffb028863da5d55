"""The fleets stack: EC2 GPU fleets on Deep Learning AMIs and GPU notebook instances.

Every fleet and notebook runs in the network stack's fleet subnets with its fleet security group (HTTPS to
AWS APIs, all traffic within the group for EFA and NCCL), encrypts its volumes with the data stack's KMS
key, reads datasets and writes artifacts under configured prefixes, and mounts the storage stack's FSx for
Lustre file system when there is one (the storage stack admits the fleet security group).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Duration, Size, Stack
from aws_cdk import aws_kms as kms
from constructs import Construct

from gpu_constructs.catalog import lookup
from gpu_constructs.constants import FLEET_SUBNETS
from gpu_constructs.fleet import FleetSpotOptions, GpuFleet, LustreFileSystemLike, allow_notifications
from gpu_constructs.network import GpuNetwork
from gpu_constructs.notebook import GpuNotebook, NotebookPackage
from gpu_constructs.retention import retention_days
from gpu_constructs.storage import PlatformStorage
from gpu_constructs.topics import notification_topic
from gpu_constructs.wheel import ensure_wheel
from stacks.config import ConfigError, EnvConfig, FleetGroupConfig, NotebookConfig
from stacks.network_stack import removal_policy

#: The repository root: its pyproject.toml says what the notebooks' wheel holds.
REPO_ROOT = Path(__file__).resolve().parents[1]


def fleets_stack_name(prefix: str) -> str:
    return f"{prefix}-fleets"


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


class FleetStack(Stack):
    """GPU fleets (auto scaling groups) and GPU notebook instances from ``config.fleets``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        network: GpuNetwork,
        storage: PlatformStorage,
        lustre: LustreFileSystemLike | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        cfg = config.fleets
        self._validate_zones(config)
        self.prefix = config.resource_prefix
        self.removal = removal_policy(config)
        self.monitoring_key = kms.Key(
            self,
            "MonitoringKey",
            description="Encrypts the GPU fleets' logs and notifications",
            enable_key_rotation=True,
            removal_policy=self.removal,
            pending_window=Duration.days(30 if config.removal_policy == "retain" else 7),
        )
        self.topic = notification_topic(
            self,
            "Notifications",
            display_name=f"GPU fleets ({config.env_name})",
            master_key=self.monitoring_key,
            emails=cfg.notification_emails,
        )
        allow_notifications(self.topic, self.monitoring_key)
        self.fleets: dict[str, GpuFleet] = {}
        self.notebooks: dict[str, GpuNotebook] = {}
        for group in cfg.groups:
            self.fleets[group.name] = self._fleet(group, network, storage, lustre)
        for notebook in cfg.notebooks:
            self.notebooks[notebook.name] = self._notebook(notebook, network, storage, lustre)
        CfnOutput(self, "NotificationsTopicArn", value=self.topic.topic_arn)

    @staticmethod
    def _validate_zones(config: EnvConfig) -> None:
        for group in config.fleets.groups:
            zone = group.availability_zone
            if zone is not None and zone not in config.availability_zones:
                raise ConfigError(
                    f"fleets.groups[{group.name}].availability_zone: {zone!r} is not one of the configured AZs; "
                    f"allowed: {', '.join(config.availability_zones)}"
                )

    # -- fleets -----------------------------------------------------------------------------------------

    def _fleet(
        self,
        group: FleetGroupConfig,
        network: GpuNetwork,
        storage: PlatformStorage,
        lustre: LustreFileSystemLike | None,
    ) -> GpuFleet:
        config = self.config
        zone = group.availability_zone
        spot = None
        if group.spot is not None:
            spot = FleetSpotOptions(
                instance_types=group.spot.instance_types,
                on_demand_base_capacity=group.spot.on_demand_base_capacity,
                on_demand_percentage_above_base=group.spot.on_demand_percentage_above_base,
                allocation_strategy=group.spot.allocation_strategy,
            )
        mount = lustre if group.mount_lustre else None
        fleet = GpuFleet(
            self,
            _pascal(group.name),
            vpc=network.vpc,
            vpc_subnets=network.subnets(FLEET_SUBNETS),
            reachability=network.reachability(FLEET_SUBNETS),
            security_group=network.fleet_security_group,
            fleet_name=f"{self.prefix}-{group.name}",
            instance_type=group.instance_type,
            image=group.image.image(lookup(group.instance_type).cpu_arch),
            volume_key=storage.key,
            min_capacity=group.min_capacity,
            max_capacity=group.max_capacity,
            desired_capacity=group.desired_capacity,
            spot=spot,
            efa=group.efa,
            placement_group=group.placement_group,
            availability_zone=zone,
            root_volume_size=Size.gibibytes(group.root_volume_gib),
            data_volume_size=None if group.data_volume_gib is None else Size.gibibytes(group.data_volume_gib),
            file_system=mount,
            lustre_mount_path=config.file_systems.lustre.mount_path,
            # The storage stack admits the fleet security group to the file system already.
            open_lustre_ports=False,
            monitoring_key=self.monitoring_key,
            notifications_topic=self.topic,
            log_retention=retention_days(config.fleets.log_retention_days, "fleets.log_retention_days"),
            removal_policy=self.removal,
            idle_gpu_threshold_percent=group.idle_gpu_pct,
            idle_gpu_period=Duration.minutes(group.idle_minutes),
            max_gpu_temperature_celsius=group.max_gpu_temperature_c,
        )
        reads = storage.grant_read_datasets(fleet, prefix=group.datasets_prefix)
        writes = storage.grant_write_artifacts(fleet, prefix=group.artifacts_prefix)
        fleet.acknowledge_data_grants(reads, writes, encryption_key=storage.key)
        CfnOutput(self, f"{_pascal(group.name)}AutoScalingGroup", value=fleet.auto_scaling_group_name)
        return fleet

    # -- notebooks --------------------------------------------------------------------------------------

    def _notebook(
        self,
        notebook: NotebookConfig,
        network: GpuNetwork,
        storage: PlatformStorage,
        lustre: LustreFileSystemLike | None,
    ) -> GpuNotebook:
        subnets = network.vpc.select_subnets(subnet_group_name=FLEET_SUBNETS).subnets
        if notebook.gpuctl_package_key:
            package = NotebookPackage.from_bucket(storage.artifacts_bucket, notebook.gpuctl_package_key)
        else:
            # The platform's own wheel (pyproject.toml: gpuctl and the runtimes), shipped as an S3 asset:
            # nothing to upload before the first start.
            package = NotebookPackage.from_wheel_file(ensure_wheel(REPO_ROOT))
        construct = GpuNotebook(
            self,
            f"{_pascal(notebook.name)}Notebook",
            notebook_name=f"{self.prefix}-{notebook.name}",
            instance_type=notebook.instance_type,
            gpu=notebook.gpu,
            subnet=subnets[0],
            security_groups=[network.fleet_security_group],
            volume_key=storage.key,
            volume_size_gib=notebook.volume_gib,
            package=package,
            file_system=lustre if notebook.mount_lustre else None,
            open_lustre_ports=False,
        )
        grants = [
            storage.grant_read_datasets(construct, prefix=notebook.datasets_prefix),
            storage.grant_write_artifacts(construct, prefix=notebook.artifacts_prefix),
        ]
        construct.acknowledge_data_grants(*grants, encryption_key=storage.key)
        CfnOutput(self, f"{_pascal(notebook.name)}NotebookName", value=construct.notebook_name)
        return construct
