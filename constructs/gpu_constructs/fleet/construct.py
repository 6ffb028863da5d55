"""The ``GpuFleet`` construct: launch template, auto scaling group with its launch hook, boot script."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jsii
from aws_cdk import Annotations, Duration, RemovalPolicy, Size, Stack, Tags
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs.catalog import InstanceType
from gpu_constructs.dlami import DlamiImage
from gpu_constructs.errors import ValidationError, is_token, path_of, require_range
from gpu_constructs.file_systems.lustre_clients import allow_lustre_clients
from gpu_constructs.file_systems.lustre_mount import LustreMount
from gpu_constructs.fleet import acknowledgments, launch_options, monitoring
from gpu_constructs.fleet import reachability as reachability_module
from gpu_constructs.fleet.acknowledgments import PolicyWildcards
from gpu_constructs.fleet.capacity import FleetCapacityReservation, FleetFallback, resolve_instance_types
from gpu_constructs.fleet.flat_keywords import FleetSettings, fold_flat_keywords
from gpu_constructs.fleet.key_policies import (
    allow_autoscaling_to_use_key,
    allow_logs_to_use_key,
    allow_notifications,
)
from gpu_constructs.fleet.options import (
    CW_AGENT_NAMESPACE,
    FLEET_METRICS_NAMESPACE,
    LAUNCH_HOOK_NAME,
    USER_DATA_LIMIT_BYTES,
    FleetAlarms,
    FleetCapacity,
    FleetSpotOptions,
    FleetVolumes,
    TorchCheck,
    check_efa,
    check_fleet_name,
    check_torch_check,
)
from gpu_constructs.fleet.role import grant_instance_basics, instance_role
from gpu_constructs.keys import given_or_new_key
from gpu_constructs.network import NetworkReachability
from gpu_constructs.packaging.scripts import render_script
from gpu_constructs.principals import RoleCompute
from gpu_constructs.removal import named_log_group
from gpu_constructs.security_groups import cluster_security_group
from gpu_constructs.topics import notification_topic

__all__ = ["GpuFleet"]

#: The defaults of the settings that the value types leave ``None``, each written here alone.
DEFAULT_ROOT_VOLUME_SIZE = Size.gibibytes(200)
DEFAULT_LUSTRE_MOUNT_PATH = "/fsx"
DEFAULT_LUSTRE_MOUNT_ATTEMPTS = 30
DEFAULT_LUSTRE_RETRY_INTERVAL = Duration.seconds(10)
DEFAULT_IDLE_GPU_PERIOD = Duration.hours(1)


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class GpuFleet(RoleCompute, Construct):
    """An auto scaling group of GPU instances on a Deep Learning AMI, checked at boot and monitored.

    :param vpc: the VPC of the fleet.
    :param fleet_name: name of the auto scaling group (``[a-z][a-z0-9-]{0,62}``), also used for the log
        group, the dashboard and the metric namespace of the fleet. The boot script needs it before the
        group exists, so it is fixed rather than generated.
    :param instance_type: EC2 GPU instance type from the catalog (no ``ml.`` prefix), e.g. ``g5.xlarge``.
    :param volume_key: KMS key of the EBS volumes (the platform's data key). Its key policy gains the two
        statements that let EC2 Auto Scaling's service-linked role use it (AWS requires them for a
        customer managed key); for an imported key, add them yourself (a warning says so).
    :param image: the DLAMI (default: ``DlamiImage.from_ssm()`` — the latest base OSS-driver DLAMI,
        Ubuntu 22.04, for the instance type's CPU architecture).
    :param vpc_subnets: subnets of the group (default: the VPC's private subnets). With a placement group,
        only the subnets of ``availability_zone`` are used.
    :param security_group: security group of the instances and their EFA interfaces (default: a new group
        with HTTPS egress and all traffic within the group, which EFA requires). Nothing is opened to
        port 22.
    :param capacity: instances of the group (:class:`~gpu_constructs.fleet.options.FleetCapacity`; default:
        min 0, no idle GPU cost; max 1; no desired capacity, so scaling is manual or by your own policies).
    :param spot: a spot mix with capacity rebalancing (default: none, on demand only).
    :param fallback: an ordered fallback list whose first type is ``instance_type``
        (:class:`~gpu_constructs.fleet.capacity.FleetFallback`): launch template overrides in that order with the
        On-Demand allocation strategy ``prioritized``; each type checked against the first with the catalog (GPU
        memory, GPUs per host, the image's CUDA and CPU architecture, EFA interfaces, an optional cost ceiling).
        With ``spot`` the spot mix uses the same types (``spot.instance_types`` stays empty). Default: none.
    :param capacity_reservation: an On-Demand Capacity Reservation, a resource group of them or a Capacity Block
        (:class:`~gpu_constructs.fleet.capacity.FleetCapacityReservation`) that the launch template targets; the
        group launches only in the reservation's zone, which must match ``availability_zone``, the subnets and a
        Lustre file system's zone. Default: none.
    :param efa: attach one EFA interface per network card (default: False). EFA on a type without EFA
        is an error.
    :param efa_only_secondary: the interfaces after the first are ``efa-only`` (no IP address used;
        default: True); False makes them ``efa`` (EFA with ENA).
    :param placement_group: launch into a new cluster placement group in one AZ (default: False).
    :param availability_zone: AZ of a placement-group fleet (default: the VPC's first AZ).
    :param volumes: the gp3 root and data volumes (:class:`~gpu_constructs.fleet.options.FleetVolumes`;
        default: a 200 GiB root volume, no data volume).
    :param lustre: an FSx for Lustre file system to mount at boot
        (:class:`~gpu_constructs.file_systems.lustre_mount.LustreMount`; default: none). Its defaults here: mount
        path ``/fsx``, 30 attempts 10 seconds apart; Lustre ports opened to ``security_group``; and, when the file
        system reports its Availability Zone (``availability_zone``, as the platform's Lustre construct does),
        launches only in that zone. An FSx for Lustre file system lives in one subnet of one AZ: a client in another
        AZ pays inter-AZ data transfer on every byte it reads or writes, in each direction, and an extra network hop
        of latency on every Lustre RPC (Amazon EC2 pricing, "Data transfer within the same AWS Region"). A fleet
        that may launch elsewhere (``same_zone=False``, or an ``availability_zone`` or subnets outside the file
        system's zone) synthesizes with a warning saying so.
    :param reachability: what the fleet's subnets reach (:class:`~gpu_constructs.network.NetworkReachability`,
        e.g. ``GpuNetwork.reachability()``). Default: inferred from the VPC construct when the app is
        synthesized (:func:`~gpu_constructs.network.infer_reachability`). Synth fails when a feature's
        API (:data:`~gpu_constructs.constants.FLEET_FEATURE_SERVICES`: EC2 Auto Scaling for the boot
        signals, CloudWatch for the agent, Systems Manager for Session Manager) or the package repository
        of a Lustre client install is reachable neither through an endpoint nor through a NAT path.
    :param torch_check: ``required`` (default for PyTorch DLAMIs), ``auto`` (default for base DLAMIs: run
        when an interpreter with torch exists) or ``off``.
    :param monitoring_key: KMS key of the log group and SNS topic (default: a new key with rotation).
    :param notifications_topic: topic of scaling notifications and alarms (default: a new encrypted topic).
    :param log_retention: retention of the fleet's log group (default: 1 month).
    :param removal_policy: of the log group and a new monitoring key (default: RETAIN).
    :param boot_timeout: heartbeat timeout of the launch lifecycle hook; a boot that has not completed it
        by then is abandoned (default: 30 minutes).
    :param health_check_grace_period: default 10 minutes.
    :param alarms: when the idle and temperature alarms fire (:class:`~gpu_constructs.fleet.options.FleetAlarms`;
        default: average GPU utilization under 5 % for 1 hour, a GPU at 85 C).
    :param role: an existing instance role trusted by ``ec2.amazonaws.com`` (default: a new role). The
        fleet adds its statements (Session Manager, CloudWatch agent, boot signals) to the role's policy;
        give a role that this fleet alone uses, imported mutable (``iam.Role.from_role_arn(...)``).

    Deprecated keywords, for one release (each warns; giving one with the value type that replaces it is an
    error): ``min_capacity``, ``max_capacity``, ``desired_capacity`` (use ``capacity``);
    ``root_volume_size``, ``data_volume_size``, ``data_mount_path`` (use ``volumes``); ``file_system``,
    ``open_lustre_ports``, ``lustre_mount_path``, ``same_zone_as_file_system``, ``lustre_mount_attempts``,
    ``lustre_retry_interval`` (use ``lustre``); ``idle_gpu_threshold_percent``, ``idle_gpu_period``,
    ``max_gpu_temperature_celsius`` (use ``alarms``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        fleet_name: str,
        instance_type: str,
        volume_key: kms.IKey,
        image: DlamiImage | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_group: ec2.ISecurityGroup | None = None,
        capacity: FleetCapacity | None = None,
        spot: FleetSpotOptions | None = None,
        fallback: FleetFallback | None = None,
        capacity_reservation: FleetCapacityReservation | None = None,
        efa: bool = False,
        efa_only_secondary: bool = True,
        placement_group: bool = False,
        availability_zone: str | None = None,
        volumes: FleetVolumes | None = None,
        lustre: LustreMount | None = None,
        reachability: NetworkReachability | None = None,
        torch_check: TorchCheck | None = None,
        monitoring_key: kms.IKey | None = None,
        notifications_topic: sns.ITopic | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        boot_timeout: Duration = Duration.minutes(30),
        health_check_grace_period: Duration = Duration.minutes(10),
        alarms: FleetAlarms | None = None,
        role: iam.IRole | None = None,
        **deprecated: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        where = path_of(self)
        capacity, volumes, lustre, alarms = _with_defaults(
            fold_flat_keywords(where, FleetSettings(capacity, volumes, lustre, alarms), deprecated)
        )
        check_fleet_name(where, fleet_name)
        if image is None:
            image = _default_image(instance_type)
        self.image = image
        self.instance: InstanceType = image.check_instance_type(instance_type, where=where)
        capacity.validate(where)
        availability_zone = self._validate_purchase(
            image, fallback, spot, efa, capacity_reservation, capacity, placement_group, availability_zone
        )
        volumes.validate(where)
        if lustre is not None:
            lustre.validate(where)
        file_system = None if lustre is None else lustre.file_system
        check_torch_check(where, torch_check, image)
        alarms.validate(where)
        self._validate_timeouts(boot_timeout, health_check_grace_period)
        self._validate_pinned_region(image)
        zone = reachability_module.check_zone(where, vpc, placement_group, availability_zone)
        self.required_services = reachability_module.required_services(image, file_system)
        self._check_reachability(vpc, reachability)

        self.fleet_name = fleet_name
        self.auto_scaling_group_name = fleet_name
        self.gpu_count = self.instance.nvidia_gpu_count
        self.metrics_namespace = f"{FLEET_METRICS_NAMESPACE}/{fleet_name}"

        self.security_group = security_group or cluster_security_group(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"GPU fleet {fleet_name}: HTTPS to AWS APIs, all traffic within the group (EFA)",
            internal="EFA and NCCL traffic within the fleet",
            internal_reason=acknowledgments.INTRA_GROUP_REASON,
        )
        self._connections = ec2.Connections(security_groups=[self.security_group])
        if lustre is not None and lustre.open_ports:
            allow_lustre_clients(self, lustre.file_system, self.security_group)
        self._add_monitoring_resources(monitoring_key, notifications_topic, log_retention, removal_policy)
        self.role: iam.IRole = instance_role(self, fleet_name, role)
        self._wildcards: PolicyWildcards | None = grant_instance_basics(
            self, self.role, fleet_name, self.log_group.log_group_arn
        )

        allow_autoscaling_to_use_key(volume_key, self)
        self.placement_group: ec2.PlacementGroup | None = None
        if placement_group:
            self.placement_group = ec2.PlacementGroup(
                self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
            )
        settings = self._boot_settings(torch_check, volumes)
        if lustre is not None:
            settings.update(lustre.script_settings())
        self.boot_script = render_script("fleet_boot.sh", settings)
        self._validate_user_data_size(self.boot_script)
        assert volumes.root_volume_size is not None
        self.launch_template = self._launch_template(volume_key, volumes.root_volume_size, volumes.data_volume_size)
        if capacity_reservation is not None:
            launch_options.apply_reservation(self.launch_template, capacity_reservation)
        self.efa_interfaces = 0
        if efa:
            self._attach_efa_interfaces(self.security_group, efa_only_secondary)

        subnets = vpc_subnets or ec2.SubnetSelection(subnet_type=_private_subnet_type(vpc))
        same_zone = lustre is None or lustre.same_zone
        if capacity_reservation is not None:
            zone = reachability_module.zone_for_reservation(where, vpc, subnets, capacity_reservation, file_system)
        zone = reachability_module.zone_for_file_system(self, vpc, subnets, zone, file_system, same_zone)
        self._vpc_subnets = reachability_module.narrow_subnets(subnets, zone)
        self._warn_reservation_size(capacity)
        policy = launch_options.mixed_instances_policy(
            self.launch_template, self.instance_types, spot, prioritized=fallback is not None
        )
        self.auto_scaling_group = self._group(vpc, capacity, policy, spot is not None, health_check_grace_period)
        self._add_launch_hook(boot_timeout, policy is not None)

        self._add_monitoring(alarms)

    # ------------------------------------------------------------------------------------------------
    # Validation bound to the construct's stack
    # ------------------------------------------------------------------------------------------------

    def _validate_purchase(
        self,
        image: DlamiImage,
        fallback: FleetFallback | None,
        spot: FleetSpotOptions | None,
        efa: bool,
        reservation: FleetCapacityReservation | None,
        capacity: FleetCapacity,
        placement_group: bool,
        availability_zone: str | None,
    ) -> str | None:
        """The types the group may launch (:attr:`instance_types`), their EFA cards and the capacity reservation;
        returns the placement group's zone (a placement group with a reservation is in the reservation's zone)."""
        where, region = path_of(self), Stack.of(self).region
        #: Every type the group may launch, first choice first (the fallback list, or the spot mix's types).
        self.instance_types = resolve_instance_types(
            where, self.instance, image, fallback, spot, None if is_token(region) else region
        )
        self.spot_types = self.instance_types[1:] if spot is not None else ()
        if efa:
            param = "instance_types[]" if fallback is not None else "spot.instance_types[]"
            check_efa(where, self.instance, self.instance_types[1:], param=param)
        self.capacity_reservation = reservation
        if reservation is None:
            return availability_zone
        reservation.validate(
            where,
            instance=self.instance,
            instance_types=self.instance_types,
            spot=spot is not None,
            capacity=capacity,
            placement_zone=availability_zone if placement_group else None,
        )
        return (availability_zone or reservation.availability_zone) if placement_group else availability_zone

    def _validate_timeouts(self, boot_timeout: Duration, grace: Duration) -> None:
        # Lifecycle hook heartbeat: 30 s to 7200 s (EC2 Auto Scaling API).
        require_range(self, "boot_timeout (seconds)", boot_timeout.to_seconds(), minimum=30, maximum=7200)
        require_range(self, "health_check_grace_period (seconds)", grace.to_seconds(), minimum=0, maximum=7200)

    def _validate_pinned_region(self, image: DlamiImage) -> None:
        region = Stack.of(self).region
        if image.is_pinned and not is_token(region):
            image.ami_for_region(region, where=path_of(self))

    def _check_reachability(self, vpc: ec2.IVpc, reachability: NetworkReachability | None) -> None:
        """Now for a declared reachability; when the app is synthesized for one inferred from the VPC."""
        if reachability is not None:
            reachability_module.check_reachability(
                path_of(self), self.required_services, reachability, Stack.of(self).region
            )
        else:
            self.node.add_validation(
                reachability_module.InferredReachability(self, vpc, lambda: self._vpc_subnets, self.required_services)
            )

    def _warn_reservation_size(self, capacity: FleetCapacity) -> None:
        """A targeted reservation smaller than ``max_capacity``: launches beyond it fail (a warning, since the
        group may be meant to grow once the reservation does)."""
        reservation = self.capacity_reservation
        if reservation is None or not reservation.targeted or reservation.instance_count is None:
            return
        if capacity.max_capacity > reservation.instance_count:
            Annotations.of(self).add_warning_v2(
                "gpu-constructs:fleet-reservation-smaller-than-max",
                f"max_capacity {capacity.max_capacity} is more than the {reservation.instance_count} instance(s) of "
                f"{reservation.describe()}: the group targets only the reservation, so launches beyond it fail "
                f"(InsufficientInstanceCapacity); set max_capacity <= {reservation.instance_count} or grow the "
                "reservation",
            )

    def _validate_user_data_size(self, script: str) -> None:
        # Tokens (DNS name, log group, region) render as ~20-character placeholders here; allow 512 bytes
        # for their real values.
        size = len(script.encode()) + 512
        if size > USER_DATA_LIMIT_BYTES:
            raise ValidationError(
                path_of(self),
                f"the rendered boot script needs about {size} bytes; allowed: at most {USER_DATA_LIMIT_BYTES} "
                "bytes of EC2 user data",
            )

    # ------------------------------------------------------------------------------------------------
    # Resources
    # ------------------------------------------------------------------------------------------------

    def _add_monitoring_resources(
        self,
        monitoring_key: kms.IKey | None,
        topic: sns.ITopic | None,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
    ) -> None:
        """The monitoring key, the log group and the notifications topic (each given or new)."""
        description = f"Encrypts the logs and notifications of GPU fleet {self.fleet_name}"
        monitoring_key = given_or_new_key(
            monitoring_key, self, "MonitoringKey", description=description, removal_policy=removal_policy
        )
        self.monitoring_key = monitoring_key
        # A literal name: the key policy below and the user data name the group without referencing it
        # (the group depends on the key, so a reference back would be a cycle).
        self.log_group_name = f"/gpu-platform/fleets/{self.fleet_name}"
        self.log_group = named_log_group(
            self, "LogGroup", self.log_group_name, monitoring_key, log_retention, removal_policy
        )
        allow_logs_to_use_key(monitoring_key, self.log_group, self.log_group_name)
        if topic is None:
            topic = notification_topic(
                self, "Notifications", display_name=f"GPU fleet {self.fleet_name}", master_key=monitoring_key
            )
            allow_notifications(topic, monitoring_key)
        self.topic = topic

    def _boot_settings(self, torch_check: TorchCheck | None, volumes: FleetVolumes) -> dict[str, str]:
        """The boot script's environment (the Lustre mount's comes from :class:`LustreMount`)."""
        image = self.image
        settings = {
            "FLEET_NAME": self.fleet_name,
            "ASG_NAME": self.fleet_name,
            "LIFECYCLE_HOOK_NAME": LAUNCH_HOOK_NAME,
            "EXPECTED_GPUS": str(self.gpu_count),
            "AWS_REGION": Stack.of(self).region,
            "TORCH_CHECK": torch_check or ("required" if image.has_torch else "auto"),
            "LOG_GROUP_NAME": self.log_group_name,
            "CW_NAMESPACE": CW_AGENT_NAMESPACE,
        }
        if image.torch_python:
            settings["TORCH_PYTHON"] = image.torch_python
        if volumes.data_volume_size is not None:
            settings["DATA_MOUNT_PATH"] = volumes.data_mount_path
        return settings

    def _launch_template(self, volume_key: kms.IKey, root: Size, data: Size | None) -> ec2.LaunchTemplate:
        image = self.image

        def gp3(device_name: str, size: Size) -> ec2.BlockDevice:
            volume = ec2.BlockDeviceVolume.ebs(
                size.to_gibibytes(),
                volume_type=ec2.EbsDeviceVolumeType.GP3,
                encrypted=True,
                kms_key=volume_key,
                delete_on_termination=True,
            )
            return ec2.BlockDevice(device_name=device_name, volume=volume)

        block_devices = [gp3(image.root_device_name, root)]
        if data is not None:
            block_devices.append(gp3("/dev/sdf", data))
        return ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            machine_image=image.machine_image(),
            instance_type=ec2.InstanceType(self.instance.name),
            role=self.role,
            user_data=ec2.UserData.custom(self.boot_script),
            security_group=self.security_group,
            associate_public_ip_address=False,
            block_devices=block_devices,
            detailed_monitoring=True,
            require_imdsv2=True,
            http_tokens=ec2.LaunchTemplateHttpTokens.REQUIRED,
            http_put_response_hop_limit=2,
            http_endpoint=True,
            instance_metadata_tags=False,
            placement_group=self.placement_group,
            version_description=f"{image.describe()} on {self.instance.name}"[:255],
        )

    def _attach_efa_interfaces(self, security_group: ec2.ISecurityGroup, efa_only_secondary: bool) -> None:
        """One EFA per network card: card 0 carries the primary interface (EFA with ENA, device index 0);
        every further card gets one EFA at device index 1 (EC2 user guide, "Maximize network bandwidth on
        instances with multiple network cards"). The catalog's EFA count is the number of cards."""
        cards = self.instance.efa_interfaces
        interfaces: list[dict[str, object]] = [
            {
                "DeviceIndex": 0,
                "NetworkCardIndex": 0,
                "InterfaceType": "efa",
                "AssociatePublicIpAddress": False,
                "DeleteOnTermination": True,
                "Groups": [security_group.security_group_id],
            }
        ]
        for card in range(1, cards):
            interfaces.append(
                {
                    "DeviceIndex": 1,
                    "NetworkCardIndex": card,
                    "InterfaceType": "efa-only" if efa_only_secondary else "efa",
                    "DeleteOnTermination": True,
                    "Groups": [security_group.security_group_id],
                }
            )
        cfn = self.launch_template.node.default_child
        assert isinstance(cfn, ec2.CfnLaunchTemplate)
        cfn.add_property_override("LaunchTemplateData.NetworkInterfaces", interfaces)
        self.efa_interfaces = cards

    def _group(
        self,
        vpc: ec2.IVpc,
        capacity: FleetCapacity,
        policy: autoscaling.MixedInstancesPolicy | None,
        spot: bool,
        grace: Duration,
    ) -> autoscaling.AutoScalingGroup:
        group_kwargs: dict[str, object] = {}
        if policy is not None:
            group_kwargs["mixed_instances_policy"] = policy
        else:
            group_kwargs["launch_template"] = self.launch_template
        if spot:
            group_kwargs["capacity_rebalance"] = True
        return autoscaling.AutoScalingGroup(
            self,
            "Group",
            vpc=vpc,
            vpc_subnets=self._vpc_subnets,
            auto_scaling_group_name=self.fleet_name,
            min_capacity=capacity.min_capacity,
            max_capacity=capacity.max_capacity,
            desired_capacity=capacity.desired_capacity,
            health_checks=autoscaling.HealthChecks.ec2(grace_period=grace),
            cooldown=Duration.minutes(5),
            group_metrics=[autoscaling.GroupMetrics.all()],
            notifications=[
                autoscaling.NotificationConfiguration(topic=self.topic, scaling_events=autoscaling.ScalingEvents.ALL)
            ],
            **group_kwargs,  # type: ignore[arg-type]
        )

    def _add_launch_hook(self, boot_timeout: Duration, mixed_instances: bool) -> None:
        cfn_group = self.auto_scaling_group.node.default_child
        assert isinstance(cfn_group, autoscaling.CfnAutoScalingGroup)
        # The launch hook is part of the group, so instances launched while the stack is created wait too.
        cfn_group.lifecycle_hook_specification_list = [
            autoscaling.CfnAutoScalingGroup.LifecycleHookSpecificationProperty(
                lifecycle_hook_name=LAUNCH_HOOK_NAME,
                lifecycle_transition="autoscaling:EC2_INSTANCE_LAUNCHING",
                default_result="ABANDON",
                heartbeat_timeout=int(boot_timeout.to_seconds()),
            )
        ]
        Tags.of(self.auto_scaling_group).add("gpu-platform:fleet", self.fleet_name)
        if mixed_instances:
            acknowledgments.acknowledge_mixed_instances(cfn_group)

    def _add_monitoring(self, settings: FleetAlarms) -> None:
        """Log metrics, alarms and the dashboard of the fleet."""
        log_metrics = monitoring.add_log_metrics(self, self.log_group, self.metrics_namespace)
        self.alarms: dict[str, cloudwatch.Alarm] = monitoring.add_alarms(
            self, self.fleet_name, settings, log_metrics, self.topic
        )
        further = f" (then {', '.join(self.instance_types[1:])})" if len(self.instance_types) > 1 else ""
        title = (
            f"# GPU fleet {self.fleet_name}\n{self.instance.describe()}{further} x {self.gpu_count} GPU(s) per "
            f"instance, {self.image.describe()}. GPU metrics: CloudWatch agent `nvidia_gpu`, per group."
        )
        self.dashboard = monitoring.add_dashboard(
            self, self.fleet_name, title, settings.idle_gpu_threshold_percent, list(self.alarms.values())
        )

    # ------------------------------------------------------------------------------------------------
    # Exposed
    # ------------------------------------------------------------------------------------------------

    def gpu_metric(
        self, name: str, *, statistic: str = "Average", period: Duration = Duration.minutes(5)
    ) -> cloudwatch.Metric:
        """A CloudWatch agent ``nvidia_smi_<name>`` metric aggregated over the whole group."""
        return monitoring.gpu_metric(self.fleet_name, name, statistic=statistic, period=period)


class _Resolved(NamedTuple):
    """A fleet's value types with every setting left ``None`` set to its default."""

    capacity: FleetCapacity
    volumes: FleetVolumes
    lustre: LustreMount | None
    alarms: FleetAlarms


def _with_defaults(given: FleetSettings) -> _Resolved:
    volumes = given.volumes or FleetVolumes()
    if volumes.root_volume_size is None:
        volumes = dataclasses.replace(volumes, root_volume_size=DEFAULT_ROOT_VOLUME_SIZE)
    alarms = given.alarms or FleetAlarms()
    if alarms.idle_gpu_period is None:
        alarms = dataclasses.replace(alarms, idle_gpu_period=DEFAULT_IDLE_GPU_PERIOD)
    lustre = given.lustre
    if lustre is not None:
        lustre = lustre.with_defaults(
            mount_path=DEFAULT_LUSTRE_MOUNT_PATH,
            mount_attempts=DEFAULT_LUSTRE_MOUNT_ATTEMPTS,
            retry_interval=DEFAULT_LUSTRE_RETRY_INTERVAL,
        )
    return _Resolved(given.capacity or FleetCapacity(), volumes, lustre, alarms)


def _default_image(instance_type: str) -> DlamiImage:
    from gpu_constructs.catalog import lookup

    try:
        arch = lookup(instance_type).cpu_arch
    except ValidationError:
        arch = "x86_64"  # the instance type check reports the unknown name
    return DlamiImage.from_ssm(cpu_arch=arch)


def _private_subnet_type(vpc: ec2.IVpc) -> ec2.SubnetType:
    return ec2.SubnetType.PRIVATE_ISOLATED if vpc.isolated_subnets else ec2.SubnetType.PRIVATE_WITH_EGRESS
