"""The fleets stack: EC2 GPU fleets on Deep Learning AMIs and GPU notebook instances.

Every fleet and notebook runs in the network stack's fleet subnets with its fleet security group (HTTPS to
AWS APIs, all traffic within the group for EFA and NCCL), encrypts its volumes with the data stack's KMS
key, reads datasets and writes artifacts under configured prefixes, and mounts the storage stack's FSx for
Lustre file system when there is one (the storage stack admits the fleet security group).
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, StackProps
from constructs import Construct

from gpu_constructs.constants import FLEET_SUBNETS
from gpu_constructs.fleet import GpuFleet, LustreFileSystemLike, LustreMount, allow_notifications
from gpu_constructs.idle import IdleFleetGroup, IdleStop, NotebookSessionLimit
from gpu_constructs.keys import new_key
from gpu_constructs.network import GpuNetwork
from gpu_constructs.notebook.construct import GpuNotebook, NotebookPackage
from gpu_constructs.packaging.wheel import ensure_wheel
from gpu_constructs.retention import retention_days
from gpu_constructs.storage import PlatformStorage
from gpu_constructs.topics import notification_topic
from stacks.base import REPOSITORY_ROOT, WorkloadStack
from stacks.config import ConfigError, FleetGroupConfig, FleetsConfig, NotebookConfig
from stacks.context import StackContext
from stacks.naming import pascal_case


def fleets_stack_name(prefix: str) -> str:
    return f"{prefix}-fleets"


class FleetStack(WorkloadStack):
    """GPU fleets (auto scaling groups) and GPU notebook instances from ``config.fleets``.

    :param fleets: the ``fleets`` section.
    :param lustre_mount_path: where instances mount the file system (``file_systems.lustre.mount_path``).
    :param lustre: the storage stack's FSx for Lustre file system (``None``: none to mount).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        fleets: FleetsConfig,
        lustre_mount_path: str,
        network: GpuNetwork,
        storage: PlatformStorage,
        lustre: LustreFileSystemLike | None = None,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, network=network, storage=storage, props=props)
        self._validate_zones(fleets, context.availability_zones)
        self._lustre_mount_path = lustre_mount_path
        self._log_retention = retention_days(fleets.log_retention_days, "fleets.log_retention_days")
        self.monitoring_key = new_key(
            self,
            "MonitoringKey",
            description="Encrypts the GPU fleets' logs and notifications",
            removal_policy=self.removal,
        )
        self.topic = notification_topic(
            self,
            "Notifications",
            display_name=f"GPU fleets ({context.env_name})",
            master_key=self.monitoring_key,
            emails=fleets.notification_emails,
        )
        allow_notifications(self.topic, self.monitoring_key)
        self.fleets: dict[str, GpuFleet] = {}
        self.notebooks: dict[str, GpuNotebook] = {}
        for group in fleets.groups:
            self.fleets[group.name] = self._fleet(group, lustre)
        for notebook in fleets.notebooks:
            self.notebooks[notebook.name] = self._notebook(notebook, lustre)
        self.idle_stop = self._idle_stop(fleets)
        CfnOutput(self, "NotificationsTopicArn", value=self.topic.topic_arn)

    @staticmethod
    def _validate_zones(fleets: FleetsConfig, zones: tuple[str, ...]) -> None:
        for group in fleets.groups:
            zone = group.availability_zone
            if zone is not None and zone not in zones:
                raise ConfigError(
                    f"fleets.groups[{group.name}].availability_zone: {zone!r} is not one of the configured AZs; "
                    f"allowed: {', '.join(zones)}"
                )

    # -- fleets -----------------------------------------------------------------------------------------

    def _fleet(self, group: FleetGroupConfig, lustre: LustreFileSystemLike | None) -> GpuFleet:
        network, storage = self.network, self.storage
        fleet = GpuFleet(
            self,
            pascal_case(group.name),
            vpc=network.vpc,
            vpc_subnets=network.subnets(FLEET_SUBNETS),
            reachability=network.reachability(FLEET_SUBNETS),
            security_group=network.fleet_security_group,
            fleet_name=self.context.resource_name(group.name),
            volume_key=storage.key,
            lustre=self._lustre_mount(lustre) if group.mount_lustre else None,
            monitoring_key=self.monitoring_key,
            notifications_topic=self.topic,
            log_retention=self._log_retention,
            removal_policy=self.removal,
            **group.fleet_props(),
        )
        reads = storage.grant_read_datasets(fleet, prefix=group.datasets_prefix)
        writes = storage.grant_write_artifacts(fleet, prefix=group.artifacts_prefix)
        fleet.acknowledge_data_grants(reads, writes, encryption_key=storage.key)
        CfnOutput(self, f"{pascal_case(group.name)}AutoScalingGroup", value=fleet.auto_scaling_group_name)
        return fleet

    def _lustre_mount(self, lustre: LustreFileSystemLike | None) -> LustreMount | None:
        if lustre is None:
            return None
        # The storage stack admits the fleet security group to the file system already.
        return LustreMount(lustre, mount_path=self._lustre_mount_path, open_ports=False)

    # -- idle stop --------------------------------------------------------------------------------------

    def _idle_stop(self, fleets: FleetsConfig) -> IdleStop | None:
        """The idle-stop function of the groups and notebooks whose ``auto_stop`` is on in this environment."""
        production = self.context.production
        groups = [
            IdleFleetGroup(
                self.fleets[g.name].auto_scaling_group_name,
                self.fleets[g.name].alarms["IdleGpu"],
                dry_run=g.auto_stop.dry_run,
            )
            for g in fleets.groups
            if g.auto_stop.active(production)
        ]
        notebooks = [
            NotebookSessionLimit(
                self.context.resource_name(n.name),
                max_session=Duration.minutes(n.auto_stop.max_session_minutes),
                dry_run=n.auto_stop.dry_run,
            )
            for n in fleets.notebooks
            if n.auto_stop.active(production)
        ]
        if not groups and not notebooks:
            return None
        return IdleStop(
            self,
            "FleetIdleStop",  # not the training stack's id: roles of the two stacks get distinct logical ids
            topic=self.topic,
            name=self.context.resource_name("fleets"),
            fleet_groups=groups,
            notebooks=notebooks,
            encryption_key=self.monitoring_key,
            log_retention=self._log_retention,
            removal_policy=self.removal,
        )

    # -- notebooks --------------------------------------------------------------------------------------

    def _notebook(self, notebook: NotebookConfig, lustre: LustreFileSystemLike | None) -> GpuNotebook:
        network, storage = self.network, self.storage
        subnets = network.vpc.select_subnets(subnet_group_name=FLEET_SUBNETS).subnets
        if notebook.gpuctl_package_key:
            package = NotebookPackage.from_bucket(storage.artifacts_bucket, notebook.gpuctl_package_key)
        else:
            # The platform's own wheel (pyproject.toml: gpuctl and the runtimes), shipped as an S3 asset:
            # nothing to upload before the first start.
            package = NotebookPackage.from_wheel_file(ensure_wheel(REPOSITORY_ROOT))
        construct = GpuNotebook(
            self,
            f"{pascal_case(notebook.name)}Notebook",
            notebook_name=self.context.resource_name(notebook.name),
            subnet=subnets[0],
            security_groups=[network.fleet_security_group],
            volume_key=storage.key,
            package=package,
            file_system=lustre if notebook.mount_lustre else None,
            open_lustre_ports=False,
            **notebook.notebook_props(),
        )
        grants = [
            storage.grant_read_datasets(construct, prefix=notebook.datasets_prefix),
            storage.grant_write_artifacts(construct, prefix=notebook.artifacts_prefix),
        ]
        construct.acknowledge_data_grants(*grants, encryption_key=storage.key)
        CfnOutput(self, f"{pascal_case(notebook.name)}NotebookName", value=construct.notebook_name)
        return construct
