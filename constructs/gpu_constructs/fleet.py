"""``GpuFleet``: an EC2 auto scaling group of GPU instances on a Deep Learning AMI, with a GPU check at boot.

For teams that train outside SageMaker jobs. One fleet is:

* a launch template on a :class:`~gpu_constructs.dlami.DlamiImage` (public SSM parameter or a pinned AMI),
  checked against the instance type's GPU (driver flavour, driver branch, CUDA); IMDSv2 required with a
  hop limit of 2 (containers); encrypted gp3 root (and optional data) volumes with the platform key; no
  public IP; detailed monitoring; no key pair and no port 22 (shell access is SSM Session Manager);
* a least-privilege instance role: Session Manager, the CloudWatch agent (one metric namespace, one log
  group), its own lifecycle hook and health; data access comes from grants (``grant_principal``);
* an auto scaling group, min 0 by default, with an optional spot mix across compatible GPU types and
  capacity rebalancing, an optional cluster placement group, EFA interfaces on EFA types (one per network
  card), EC2 health checks and notifications to a KMS-encrypted SNS topic;
* a boot script (``assets/fleet_boot.sh``) that mounts FSx for Lustre, checks the GPUs, starts the
  CloudWatch agent with the ``nvidia_gpu`` metrics aggregated per group and completes the launch
  lifecycle hook; a broken GPU stack marks the instance unhealthy so the group replaces it;
* a dashboard and alarms: GPU utilization, idle GPUs (cost), temperature, NVIDIA Xid errors (from the
  kernel log) and boot failures.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import jsii
from aws_cdk import Duration, Names, RemovalPolicy, Size, Stack, Tags, Token
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct, IValidation

from gpu_constructs import nag
from gpu_constructs.catalog import InstanceType, require_efa
from gpu_constructs.constants import (
    FLEET_FEATURE_SERVICES,
    S3_GATEWAY,
    endpoint_service_name,
)
from gpu_constructs.dlami import LUSTRE_INSTALL_ROUTE, DlamiImage
from gpu_constructs.errors import ValidationError, fail, is_token, path_of, require_range
from gpu_constructs.keys import allow_cloudwatch_logs
from gpu_constructs.nag import as_list as _as_list
from gpu_constructs.nag import flatten_reference
from gpu_constructs.network import NetworkReachability, infer_reachability, select_subnets
from gpu_constructs.removal import for_named_resource
from gpu_constructs.topics import Publisher, admit_publishers, alarm_action, notification_topic

__all__ = [
    "CW_AGENT_NAMESPACE",
    "USER_DATA_LIMIT_BYTES",
    "FleetSpotOptions",
    "GpuFleet",
    "LustreFileSystemLike",
    "PolicyWildcards",
    "TorchCheck",
    "allow_lustre_clients",
    "allow_notifications",
    "autoscaling_service_linked_role_arn",
    "render_script",
    "strip_comments",
]

#: Namespace of the CloudWatch agent's metrics (its default), where ``nvidia_smi_*`` metrics land.
CW_AGENT_NAMESPACE = "CWAgent"
#: Namespace of the metrics the fleets' log metric filters publish (one sub-namespace per fleet).
FLEET_METRICS_NAMESPACE = "GpuPlatform/Fleets"
#: EC2 rejects user data above 16 KB (before base64 encoding).
USER_DATA_LIMIT_BYTES = 16 * 1024
#: Boot log line of a failed boot (metric filter pattern; keep in sync with assets/fleet_boot.sh).
BOOT_FAILED_MARKER = "GPU fleet boot FAILED"
#: Kernel log marker of NVIDIA Xid errors ("NVRM: Xid (PCI:0000:10:1c): 79, ...").
XID_MARKER = "NVRM: Xid"
#: Name of the launch lifecycle hook that the boot script completes.
LAUNCH_HOOK_NAME = "gpu-boot-check"

TorchCheck = Literal["required", "auto", "off"]
_TORCH_CHECKS: tuple[TorchCheck, ...] = get_args(TorchCheck)

_FLEET_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
_MOUNT_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
_SPOT_STRATEGIES = {
    "price-capacity-optimized": autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED,
    "capacity-optimized": autoscaling.SpotAllocationStrategy.CAPACITY_OPTIMIZED,
    "capacity-optimized-prioritized": autoscaling.SpotAllocationStrategy.CAPACITY_OPTIMIZED_PRIORITIZED,
    "lowest-price": autoscaling.SpotAllocationStrategy.LOWEST_PRICE,
}
_MIN_ROOT_GIB = 100
_MAX_EBS_GIB = 16384


# --------------------------------------------------------------------------------------------------
# File systems and scripts
# --------------------------------------------------------------------------------------------------


@runtime_checkable
class LustreFileSystemLike(Protocol):
    """What a fleet or notebook needs of an FSx for Lustre file system.

    ``aws_fsx.LustreFileSystem`` and the platform's Lustre construct both provide it: the DNS name and
    mount name to mount ``<dns_name>@tcp:/<mount_name>``, and ``connections`` whose default port is the
    Lustre range (TCP 988-1023).
    """

    @property
    def dns_name(self) -> str: ...

    @property
    def mount_name(self) -> str: ...

    @property
    def connections(self) -> ec2.Connections: ...


#: Lustre LNET traffic (FSx for Lustre user guide, "File system access control with Amazon VPC"): TCP 988
#: and 1018-1023. Used when the file system's ``connections`` has no default port.
LUSTRE_PORTS: tuple[ec2.Port, ...] = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))


def allow_lustre_clients(scope: Construct, file_system: LustreFileSystemLike, client: ec2.ISecurityGroup) -> None:
    """Open Lustre traffic between ``client`` and ``file_system``, once per stack and pair.

    The rules are standalone resources in ``scope``'s stack (the security groups are imported there), so a
    file system or security group owned by another stack gains no reference back to this one (no
    cross-stack cycle), and two constructs of one stack that share a security group add the rules once.
    """
    stack = Stack.of(scope)
    found = stack.node.try_find_child("LustreClientAccess")
    holder = found if isinstance(found, Construct) else Construct(stack, "LustreClientAccess")
    fs_groups = list(file_system.connections.security_groups)
    if not fs_groups:
        raise ValidationError(
            path_of(scope), "file_system.connections has no security group; allowed: a file system in a VPC"
        )
    key = "|".join([_stable_id(client), *(_stable_id(g) for g in fs_groups)])
    pair_id = "Pair" + hashlib.sha256(key.encode()).hexdigest()[:12]
    if holder.node.try_find_child(pair_id) is not None:
        return
    pair = Construct(holder, pair_id)
    imported_client = ec2.SecurityGroup.from_security_group_id(
        pair, "Client", client.security_group_id, allow_all_outbound=False, mutable=True
    )
    imported_fs = [
        ec2.SecurityGroup.from_security_group_id(
            pair, f"FileSystem{i}", g.security_group_id, allow_all_outbound=False, mutable=True
        )
        for i, g in enumerate(fs_groups)
    ]
    default = file_system.connections.default_port
    ports = (default,) if default is not None else LUSTRE_PORTS
    fs_connections = ec2.Connections(security_groups=imported_fs)
    client_connections = ec2.Connections(security_groups=[imported_client])
    # Clients open the connections (ingress on the file system, egress on the clients); the FSx guide
    # also allows the same ports from the file system to the clients.
    for port in ports:
        fs_connections.allow_from(client_connections, port, "Lustre LNET from GPU clients")
        client_connections.allow_from(fs_connections, port, "Lustre LNET from the FSx file system")


def _stable_id(construct: object) -> str:
    if isinstance(construct, Construct):
        return Names.unique_id(construct)
    return repr(construct)


_INLINE_RE = re.compile(r'^\. "\$\{GPU_LIB:-[^\n]*gpu_lib\.sh\}"\n', re.MULTILINE)


@cache
def _asset(name: str) -> str:
    return (resources.files("gpu_constructs") / "assets" / name).read_text()


def render_script(name: str, settings: Mapping[str, str]) -> str:
    """``assets/<name>`` as one self-contained script: settings exported first, ``gpu_lib.sh`` inlined.

    Values may be CDK tokens (they resolve at deploy); literal values must not contain a single quote.
    """
    text = _asset(name)
    library = _asset("gpu_lib.sh")
    if not _INLINE_RE.search(text):
        raise ValueError(f"assets/{name} does not source gpu_lib.sh the way render_script expects")
    text = _INLINE_RE.sub(lambda _m: library.replace("# shellcheck shell=bash\n", "", 1), text, count=1)
    shebang, _, body = text.partition("\n")
    body = strip_comments(body)
    lines = [shebang, f"# {name} from gpu_constructs (comments stripped: see the file). Settings:"]
    for key, value in settings.items():
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise ValueError(f"setting name {key!r} is not an upper-case shell variable name")
        if not Token.is_unresolved(value) and "'" in value:
            raise ValueError(f"setting {key}={value!r} contains a single quote")
        lines.append(f"export {key}='{value}'")
    return "\n".join(lines) + "\n" + body


_HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


def strip_comments(text: str) -> str:
    """Drop full-line comments and blank lines outside here-documents (user data is limited to 16 KB).

    Lines inside a here-document are kept verbatim; trailing comments after code are kept (a ``#`` may be
    part of a word there, so removing them needs a shell parser).
    """
    out: list[str] = []
    terminator: str | None = None
    for line in text.splitlines():
        if terminator is not None:
            out.append(line)
            if line.strip() == terminator:
                terminator = None
            continue
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#!")):
            continue
        out.append(line)
        match = _HEREDOC_RE.search(line)
        if match:
            terminator = match.group(2)
    return "\n".join(out) + "\n"


def autoscaling_service_linked_role_arn(scope: IConstruct) -> str:
    """ARN of the account's EC2 Auto Scaling service-linked role (AWSServiceRoleForAutoScaling)."""
    stack = Stack.of(scope)
    return (
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/autoscaling.amazonaws.com/"
        "AWSServiceRoleForAutoScaling"
    )


# --------------------------------------------------------------------------------------------------
# The fleet
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetSpotOptions:
    """A spot mix: the fleet's instance type plus compatible GPU types, spot above an on-demand base.

    :param instance_types: further EC2 GPU types the group may launch (same GPU count, CPU architecture
        and, with EFA, the same number of EFA interfaces as the fleet's type). Default: none.
    :param on_demand_base_capacity: instances always launched on demand. Default: 0.
    :param on_demand_percentage_above_base: percent of the capacity above the base launched on demand.
        Default: 0 (all spot).
    :param allocation_strategy: ``price-capacity-optimized`` (default), ``capacity-optimized``,
        ``capacity-optimized-prioritized`` or ``lowest-price``.
    """

    instance_types: Sequence[str] = ()
    on_demand_base_capacity: int = 0
    on_demand_percentage_above_base: int = 0
    allocation_strategy: str = "price-capacity-optimized"


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class GpuFleet(Construct):
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
    :param min_capacity: default 0 (no idle GPU cost). :param max_capacity: default 1.
    :param desired_capacity: default: none (the group starts at ``min_capacity``; scaling is manual or by
        your own policies).
    :param spot: a spot mix with capacity rebalancing (default: none, on demand only).
    :param efa: attach one EFA interface per network card (default: False). EFA on a type without EFA
        is an error.
    :param efa_only_secondary: the interfaces after the first are ``efa-only`` (no IP address used;
        default: True); False makes them ``efa`` (EFA with ENA).
    :param placement_group: launch into a new cluster placement group in one AZ (default: False).
    :param availability_zone: AZ of a placement-group fleet (default: the VPC's first AZ).
    :param root_volume_size: gp3 root volume (default: 200 GiB; at least 100 GiB for the DLAMI).
    :param data_volume_size: an extra gp3 data volume, formatted and mounted at ``data_mount_path``
        (default: none).
    :param data_mount_path: default ``/data``.
    :param file_system: an FSx for Lustre file system to mount (default: none).
    :param open_lustre_ports: open Lustre traffic between ``file_system`` and ``security_group`` (default:
        True); set False when the file system's owner already admits the group (duplicate rules fail).
    :param same_zone_as_file_system: when ``file_system`` reports its Availability Zone
        (``availability_zone``, as the platform's Lustre construct does), launch only in that zone
        (default: True). An FSx for Lustre file system lives in one subnet of one AZ: a client in another
        AZ pays inter-AZ data transfer on every byte it reads or writes, in each direction, and an extra
        network hop of latency on every Lustre RPC (Amazon EC2 pricing, "Data transfer within the same
        AWS Region"). A fleet that may launch elsewhere (False, or an ``availability_zone`` or subnets
        outside the file system's zone) synthesizes with a warning saying so.
    :param reachability: what the fleet's subnets reach (:class:`~gpu_constructs.network.NetworkReachability`,
        e.g. ``GpuNetwork.reachability()``). Default: inferred from the VPC construct when the app is
        synthesized (:func:`~gpu_constructs.network.infer_reachability`). Synth fails when a feature's
        API (:data:`~gpu_constructs.constants.FLEET_FEATURE_SERVICES`: EC2 Auto Scaling for the boot
        signals, CloudWatch for the agent, Systems Manager for Session Manager) or the package repository
        of a Lustre client install is reachable neither through an endpoint nor through a NAT path.
    :param lustre_mount_path: default ``/fsx``.
    :param lustre_mount_attempts: mount attempts at boot (default: 30). :param lustre_retry_interval:
        pause between attempts (default: 10 seconds).
    :param torch_check: ``required`` (default for PyTorch DLAMIs), ``auto`` (default for base DLAMIs: run
        when an interpreter with torch exists) or ``off``.
    :param monitoring_key: KMS key of the log group and SNS topic (default: a new key with rotation).
    :param notifications_topic: topic of scaling notifications and alarms (default: a new encrypted topic).
    :param log_retention: retention of the fleet's log group (default: 1 month).
    :param removal_policy: of the log group and a new monitoring key (default: RETAIN).
    :param boot_timeout: heartbeat timeout of the launch lifecycle hook; a boot that has not completed it
        by then is abandoned (default: 30 minutes).
    :param health_check_grace_period: default 10 minutes.
    :param idle_gpu_threshold_percent: the idle alarm fires when average GPU utilization of the group
        stays below this (default: 5).
    :param idle_gpu_period: for this long (default: 1 hour, a multiple of 5 minutes up to 1 day).
    :param max_gpu_temperature_celsius: the temperature alarm threshold (default: 85).
    :param role: an existing instance role trusted by ``ec2.amazonaws.com`` (default: a new role). The
        fleet adds its statements (Session Manager, CloudWatch agent, boot signals) to the role's policy;
        give a role that this fleet alone uses, imported mutable (``iam.Role.from_role_arn(...)``).
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
        min_capacity: int = 0,
        max_capacity: int = 1,
        desired_capacity: int | None = None,
        spot: FleetSpotOptions | None = None,
        efa: bool = False,
        efa_only_secondary: bool = True,
        placement_group: bool = False,
        availability_zone: str | None = None,
        root_volume_size: Size = Size.gibibytes(200),
        data_volume_size: Size | None = None,
        data_mount_path: str = "/data",
        file_system: LustreFileSystemLike | None = None,
        open_lustre_ports: bool = True,
        lustre_mount_path: str = "/fsx",
        same_zone_as_file_system: bool = True,
        reachability: NetworkReachability | None = None,
        lustre_mount_attempts: int = 30,
        lustre_retry_interval: Duration = Duration.seconds(10),
        torch_check: TorchCheck | None = None,
        monitoring_key: kms.IKey | None = None,
        notifications_topic: sns.ITopic | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        boot_timeout: Duration = Duration.minutes(30),
        health_check_grace_period: Duration = Duration.minutes(10),
        idle_gpu_threshold_percent: float = 5,
        idle_gpu_period: Duration = Duration.hours(1),
        max_gpu_temperature_celsius: float = 85,
        role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._validate_fleet_name(fleet_name)
        if image is None:
            image = _default_image(instance_type)
        self.image = image
        self.instance: InstanceType = image.check_instance_type(instance_type, where=path_of(self))
        self._validate_capacity(min_capacity, max_capacity, desired_capacity)
        self.spot_types = self._validate_spot(spot, image)
        self._validate_efa(efa)
        self._validate_volumes(root_volume_size, data_volume_size, data_mount_path)
        self._validate_lustre(file_system, lustre_mount_path, lustre_mount_attempts, lustre_retry_interval)
        self._validate_torch_check(torch_check)
        self._validate_alarms(idle_gpu_threshold_percent, idle_gpu_period, max_gpu_temperature_celsius)
        self._validate_timeouts(boot_timeout, health_check_grace_period)
        self._validate_pinned_region(image)
        zone = self._validate_zone(vpc, placement_group, availability_zone)
        self.required_services = self._required_services(image, file_system)
        if reachability is not None:
            self._check_reachability(reachability, Stack.of(self).region)
        else:
            self.node.add_validation(_InferredReachability(self, vpc))

        self.fleet_name = fleet_name
        self.auto_scaling_group_name = fleet_name
        self.gpu_count = self.instance.nvidia_gpu_count
        self.metrics_namespace = f"{FLEET_METRICS_NAMESPACE}/{fleet_name}"
        stack = Stack.of(self)

        # -- network ------------------------------------------------------------------------------------
        if security_group is None:
            new_sg = ec2.SecurityGroup(
                self,
                "SecurityGroup",
                vpc=vpc,
                description=f"GPU fleet {fleet_name}: HTTPS to AWS APIs, all traffic within the group (EFA)",
                allow_all_outbound=False,
            )
            new_sg.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to AWS APIs (VPC endpoints, S3)")
            new_sg.connections.allow_internally(ec2.Port.all_traffic(), "EFA and NCCL traffic within the fleet")
            ingress = new_sg.node.try_find_child(f"from {Names.unique_id(new_sg)}:ALL TRAFFIC")
            if ingress is not None:
                nag.acknowledge_compliance(ingress, "EC2RestrictedCommonPorts", INTRA_GROUP_REASON)
            security_group = new_sg
        self.security_group = security_group
        self._connections = ec2.Connections(security_groups=[security_group])
        if file_system is not None and open_lustre_ports:
            allow_lustre_clients(self, file_system, security_group)

        # -- monitoring key, topic, log group ------------------------------------------------------------
        if monitoring_key is None:
            monitoring_key = kms.Key(
                self,
                "MonitoringKey",
                description=f"Encrypts the logs and notifications of GPU fleet {fleet_name}",
                enable_key_rotation=True,
                removal_policy=removal_policy,
                pending_window=Duration.days(30 if removal_policy == RemovalPolicy.RETAIN else 7),
            )
        self.monitoring_key = monitoring_key
        # A literal name: the key policy below and the user data name the group without referencing it
        # (the group depends on the key, so a reference back would be a cycle).
        self.log_group_name = f"/gpu-platform/fleets/{fleet_name}"
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            log_group_name=self.log_group_name,
            encryption_key=monitoring_key,
            retention=log_retention,
            removal_policy=for_named_resource(removal_policy),
        )
        _allow_logs_to_use_key(monitoring_key, self.log_group, self.log_group_name, stack)
        if notifications_topic is None:
            topic = notification_topic(
                self, "Notifications", display_name=f"GPU fleet {fleet_name}", master_key=monitoring_key
            )
            allow_notifications(topic, monitoring_key)
            notifications_topic = topic
        self.topic = notifications_topic

        # -- instance role ------------------------------------------------------------------------------
        self.role: iam.IRole = role or iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"GPU fleet {fleet_name} instances: Session Manager, CloudWatch agent, boot signals",
        )
        self._grant_instance_basics(stack)

        # -- launch template ----------------------------------------------------------------------------
        _allow_autoscaling_to_use_key(volume_key, self)
        block_devices = [
            ec2.BlockDevice(
                device_name=image.root_device_name,
                volume=ec2.BlockDeviceVolume.ebs(
                    root_volume_size.to_gibibytes(),
                    volume_type=ec2.EbsDeviceVolumeType.GP3,
                    encrypted=True,
                    kms_key=volume_key,
                    delete_on_termination=True,
                ),
            )
        ]
        if data_volume_size is not None:
            block_devices.append(
                ec2.BlockDevice(
                    device_name="/dev/sdf",
                    volume=ec2.BlockDeviceVolume.ebs(
                        data_volume_size.to_gibibytes(),
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        encrypted=True,
                        kms_key=volume_key,
                        delete_on_termination=True,
                    ),
                )
            )
        self.placement_group: ec2.PlacementGroup | None = None
        if placement_group:
            self.placement_group = ec2.PlacementGroup(
                self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER
            )
        settings = {
            "FLEET_NAME": fleet_name,
            "ASG_NAME": fleet_name,
            "LIFECYCLE_HOOK_NAME": LAUNCH_HOOK_NAME,
            "EXPECTED_GPUS": str(self.gpu_count),
            "AWS_REGION": stack.region,
            "TORCH_CHECK": torch_check or ("required" if image.has_torch else "auto"),
            "LOG_GROUP_NAME": self.log_group_name,
            "CW_NAMESPACE": CW_AGENT_NAMESPACE,
        }
        if image.torch_python:
            settings["TORCH_PYTHON"] = image.torch_python
        if data_volume_size is not None:
            settings["DATA_MOUNT_PATH"] = data_mount_path
        if file_system is not None:
            settings.update(
                {
                    "LUSTRE_DNS_NAME": file_system.dns_name,
                    "LUSTRE_MOUNT_NAME": file_system.mount_name,
                    "LUSTRE_MOUNT_PATH": lustre_mount_path,
                    "LUSTRE_MOUNT_ATTEMPTS": str(lustre_mount_attempts),
                    "LUSTRE_RETRY_SECONDS": str(int(lustre_retry_interval.to_seconds())),
                }
            )
        self.boot_script = render_script("fleet_boot.sh", settings)
        self._validate_user_data_size(self.boot_script)
        self.launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            machine_image=image.machine_image(),
            instance_type=ec2.InstanceType(self.instance.name),
            role=self.role,
            user_data=ec2.UserData.custom(self.boot_script),
            security_group=security_group,
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
        self.efa_interfaces = 0
        if efa:
            self._attach_efa_interfaces(security_group, efa_only_secondary)

        # -- auto scaling group -------------------------------------------------------------------------
        subnets = vpc_subnets or ec2.SubnetSelection(subnet_type=_private_subnet_type(vpc))
        zone = self._zone_for_file_system(vpc, subnets, zone, file_system, same_zone_as_file_system)
        if zone is not None and subnets.subnets:
            in_zone = [sn for sn in subnets.subnets if sn.availability_zone == zone]
            subnets = ec2.SubnetSelection(subnets=in_zone or list(subnets.subnets))
        elif zone is not None:
            subnets = ec2.SubnetSelection(
                subnet_group_name=subnets.subnet_group_name,
                subnet_type=None if subnets.subnet_group_name else subnets.subnet_type,
                availability_zones=[zone],
            )
        self._vpc_subnets = subnets
        group_kwargs: dict[str, object] = {}
        if spot is not None:
            group_kwargs["mixed_instances_policy"] = autoscaling.MixedInstancesPolicy(
                launch_template=self.launch_template,
                instances_distribution=autoscaling.InstancesDistribution(
                    on_demand_base_capacity=spot.on_demand_base_capacity,
                    on_demand_percentage_above_base_capacity=spot.on_demand_percentage_above_base,
                    spot_allocation_strategy=_SPOT_STRATEGIES[spot.allocation_strategy],
                ),
                launch_template_overrides=[
                    autoscaling.LaunchTemplateOverrides(instance_type=ec2.InstanceType(name))
                    for name in (self.instance.name, *self.spot_types)
                ],
            )
            group_kwargs["capacity_rebalance"] = True
        else:
            group_kwargs["launch_template"] = self.launch_template
        self.auto_scaling_group = autoscaling.AutoScalingGroup(
            self,
            "Group",
            vpc=vpc,
            vpc_subnets=subnets,
            auto_scaling_group_name=fleet_name,
            min_capacity=min_capacity,
            max_capacity=max_capacity,
            desired_capacity=desired_capacity,
            health_checks=autoscaling.HealthChecks.ec2(grace_period=health_check_grace_period),
            cooldown=Duration.minutes(5),
            group_metrics=[autoscaling.GroupMetrics.all()],
            notifications=[
                autoscaling.NotificationConfiguration(topic=self.topic, scaling_events=autoscaling.ScalingEvents.ALL)
            ],
            **group_kwargs,  # type: ignore[arg-type]
        )
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
        Tags.of(self.auto_scaling_group).add("gpu-platform:fleet", fleet_name)
        if spot is not None:
            # cdk-nag reads a group's launch template only from LaunchTemplate, not from the mixed instances
            # policy; the tests assert the template's IMDSv2 and encrypted volumes.
            nag.acknowledge_compliance(cfn_group, "EC2IMDSv2Enabled", MIXED_IMDS_REASON, packs=(nag.HIPAA, nag.NIST_R5))
            nag.acknowledge(cfn_group, nag.AWS_SOLUTIONS, "EC26", MIXED_EBS_REASON)

        # -- metrics, alarms, dashboard -----------------------------------------------------------------
        self._add_log_metrics()
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._add_alarms(idle_gpu_threshold_percent, idle_gpu_period, max_gpu_temperature_celsius)
        self.dashboard = self._add_dashboard(idle_gpu_threshold_percent)

    # ------------------------------------------------------------------------------------------------
    # Validation
    # ------------------------------------------------------------------------------------------------

    def _validate_fleet_name(self, name: str) -> None:
        if not isinstance(name, str) or not _FLEET_NAME_RE.match(name):
            raise fail(self, "fleet_name", name, "1-63 characters: a lowercase letter, then [a-z0-9-]")

    def _validate_capacity(self, minimum: int, maximum: int, desired: int | None) -> None:
        for name, value in (("min_capacity", minimum), ("max_capacity", maximum)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(self, name, value, "a whole number >= 0")
        if maximum < 1:
            raise fail(self, "max_capacity", maximum, "1 or more (a fleet that can never launch is a mistake)")
        if minimum > maximum:
            raise fail(self, "min_capacity", minimum, f"0..max_capacity ({maximum})")
        if desired is not None and not minimum <= desired <= maximum:
            raise fail(self, "desired_capacity", desired, f"None or {minimum}..{maximum} (min..max capacity)")

    def _validate_spot(self, spot: FleetSpotOptions | None, image: DlamiImage) -> tuple[str, ...]:
        if spot is None:
            return ()
        where = path_of(self)
        if spot.allocation_strategy not in _SPOT_STRATEGIES:
            raise fail(self, "spot.allocation_strategy", spot.allocation_strategy, ", ".join(_SPOT_STRATEGIES))
        require_range(self, "spot.on_demand_base_capacity", spot.on_demand_base_capacity, minimum=0)
        require_range(
            self, "spot.on_demand_percentage_above_base", spot.on_demand_percentage_above_base, minimum=0, maximum=100
        )
        names = [self.instance.name]
        for name in spot.instance_types:
            other = image.check_instance_type(name, where=where, param="spot.instance_types[]")
            if other.name in names:
                raise fail(self, "spot.instance_types", list(spot.instance_types), "distinct types other than "
                           f"the fleet's instance_type {self.instance.name!r}")  # fmt: skip
            if other.nvidia_gpu_count != self.instance.nvidia_gpu_count:
                raise fail(
                    self,
                    "spot.instance_types[]",
                    other.name,
                    f"types with {self.instance.nvidia_gpu_count} GPU(s) like {self.instance.name!r} (the boot "
                    "check and the processes per host expect one GPU count)",
                )
            names.append(other.name)
        return tuple(names[1:])

    def _validate_efa(self, efa: bool) -> None:
        if not efa:
            return
        where = path_of(self)
        require_efa(self.instance, where=where)
        for name in self.spot_types:
            other = require_efa(name, where=where, param="spot.instance_types[]")
            if other.efa_interfaces != self.instance.efa_interfaces:
                raise fail(
                    self,
                    "spot.instance_types[]",
                    name,
                    f"types with {self.instance.efa_interfaces} EFA interface(s) like {self.instance.name!r} "
                    "(one launch template describes every network card)",
                )

    def _validate_volumes(self, root: Size, data: Size | None, data_mount_path: str) -> None:
        require_range(self, "root_volume_size (GiB)", root.to_gibibytes(), minimum=_MIN_ROOT_GIB, maximum=_MAX_EBS_GIB)
        if data is not None:
            require_range(self, "data_volume_size (GiB)", data.to_gibibytes(), minimum=1, maximum=_MAX_EBS_GIB)
            self._validate_mount_path("data_mount_path", data_mount_path)

    def _validate_mount_path(self, name: str, path: str) -> None:
        if not isinstance(path, str) or not _MOUNT_PATH_RE.match(path) or ".." in path or path.rstrip("/") == "":
            raise fail(self, name, path, "an absolute path of letters, digits and ._-/ other than / (e.g. /fsx)")

    def _validate_lustre(
        self, file_system: LustreFileSystemLike | None, path: str, attempts: int, interval: Duration
    ) -> None:
        if file_system is None:
            return
        if not isinstance(file_system, LustreFileSystemLike):
            raise fail(self, "file_system", file_system, "an object with dns_name, mount_name and connections")
        self._validate_mount_path("lustre_mount_path", path)
        require_range(self, "lustre_mount_attempts", attempts, minimum=1, maximum=360)
        require_range(self, "lustre_retry_interval (seconds)", interval.to_seconds(), minimum=0, maximum=300)

    def _validate_torch_check(self, torch_check: TorchCheck | None) -> None:
        if torch_check is not None and torch_check not in _TORCH_CHECKS:
            raise fail(self, "torch_check", torch_check, ", ".join(map(repr, _TORCH_CHECKS)))
        if torch_check == "required" and not self.image.has_torch:
            raise fail(
                self, "torch_check", torch_check, "'auto' or 'off' for a base DLAMI (no torch installed), or a "
                "PyTorch DLAMI (framework='pytorch')"
            )  # fmt: skip

    def _validate_alarms(self, idle_percent: float, idle_period: Duration, temperature: float) -> None:
        require_range(self, "idle_gpu_threshold_percent", idle_percent, minimum=0, maximum=100)
        minutes = idle_period.to_minutes()
        if minutes % 5 or not 5 <= minutes <= 24 * 60:
            raise fail(self, "idle_gpu_period (minutes)", minutes, "a multiple of 5 minutes from 5 to 1440")
        require_range(self, "max_gpu_temperature_celsius", temperature, minimum=30, maximum=120)

    def _validate_timeouts(self, boot_timeout: Duration, grace: Duration) -> None:
        # Lifecycle hook heartbeat: 30 s to 7200 s (EC2 Auto Scaling API).
        require_range(self, "boot_timeout (seconds)", boot_timeout.to_seconds(), minimum=30, maximum=7200)
        require_range(self, "health_check_grace_period (seconds)", grace.to_seconds(), minimum=0, maximum=7200)

    def _validate_pinned_region(self, image: DlamiImage) -> None:
        region = Stack.of(self).region
        if image.is_pinned and not is_token(region):
            image.ami_for_region(region, where=path_of(self))

    def _validate_zone(self, vpc: ec2.IVpc, placement_group: bool, zone: str | None) -> str | None:
        zones = [z for z in vpc.availability_zones if not is_token(z)]
        if zone is not None and zones and zone not in zones:
            raise fail(self, "availability_zone", zone, f"an AZ of the VPC: {', '.join(zones)}")
        if placement_group and zone is None:
            if not zones:
                raise fail(self, "availability_zone", zone, "an AZ name (a cluster placement group is in one AZ)")
            zone = zones[0]
        return zone

    # -- what the boot scripts and agents call -----------------------------------------------------------

    @staticmethod
    def _required_services(image: DlamiImage, file_system: LustreFileSystemLike | None) -> dict[str, tuple[str, ...]]:
        """Feature -> the endpoints (short names, ``s3``) or ``internet`` its software needs to reach."""
        needs = dict(FLEET_FEATURE_SERVICES)
        if file_system is not None:
            method = image.lustre_client_install
            route = LUSTRE_INSTALL_ROUTE[method]
            if route is not None:
                needs[f"Lustre client install ({method}, {image.os}: the DLAMI does not ship it)"] = (route,)
        return needs

    def _check_reachability(self, reach: NetworkReachability, region: str) -> None:
        shown_region = region if not is_token(region) else "<region>"
        problems: list[str] = []
        for feature, services in self.required_services.items():
            for service in reach.missing(services):
                if service == "internet":
                    problems.append(
                        f"{feature} needs a package repository on the internet; allowed: a NAT path for the "
                        "fleet's subnets (config network.nat_gateways >= 1, GpuNetwork(nat_gateways=...)), or an "
                        "image that ships the client (DlamiImage lustre_client_preinstalled=True, or a flavour "
                        "that ships it: dlami.LUSTRE_CLIENT_PREINSTALLED)"
                    )
                    continue
                endpoint = endpoint_service_name(service, shown_region)
                kind = "gateway endpoint" if service == S3_GATEWAY else "interface endpoint"
                config_hint = (
                    "GpuNetwork(s3_gateway_endpoint=True)"
                    if service == S3_GATEWAY
                    else f"'{service}' in GpuNetwork(interface_endpoints=...) / config network.interface_endpoints"
                )
                problems.append(
                    f"{feature} calls {endpoint}, which the fleet's subnets reach neither through a VPC "
                    f"endpoint nor through a NAT path; allowed: add the {kind} {endpoint} ({config_hint}), "
                    "or give the subnets a NAT path (config network.nat_gateways >= 1)"
                )
        if problems:
            raise ValidationError(path_of(self), f"{'; '.join(problems)} (reachability: {reach.describe()})")

    def _zone_for_file_system(
        self,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        zone: str | None,
        file_system: LustreFileSystemLike | None,
        same_zone: bool,
    ) -> str | None:
        fs_zone = getattr(file_system, "availability_zone", None) if file_system is not None else None
        if not isinstance(fs_zone, str) or is_token(fs_zone):
            return zone
        if zone is not None:
            zones = [zone]
        else:
            try:
                zones = [z for z in select_subnets(vpc, subnets).availability_zones if not is_token(z)]
            except Exception:
                return zone
        if same_zone and zone is None and fs_zone in zones:
            return fs_zone
        others = sorted(set(zones) - {fs_zone})
        if others:
            from aws_cdk import Annotations

            reason = (
                "availability_zone / the placement group is elsewhere"
                if zone is not None
                else ("same_zone_as_file_system=False" if fs_zone in zones else "its subnets exclude that zone")
            )
            Annotations.of(self).add_warning_v2(
                "gpu-constructs:lustre-cross-az",
                f"the fleet mounts an FSx for Lustre file system in {fs_zone} but may launch instances in "
                f"{', '.join(others)} ({reason}): every byte between a client and the file system in another "
                "Availability Zone is billed as inter-AZ data transfer in each direction, and every Lustre RPC "
                f"crosses zones (higher latency, lower throughput). Launch the fleet in {fs_zone} "
                "(same_zone_as_file_system=True, or availability_zone / subnets in that zone)",
            )
        return zone

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
    # IAM
    # ------------------------------------------------------------------------------------------------

    def _grant_instance_basics(self, stack: Stack) -> None:
        role = self.role
        group_arn = (
            f"arn:{stack.partition}:autoscaling:{stack.region}:{stack.account}:autoScalingGroup:*:"
            f"autoScalingGroupName/{self.fleet_name}"
        )
        statements = [
            (
                iam.PolicyStatement(
                    sid="SessionManagerRegistration",
                    actions=["ssm:UpdateInstanceInformation"],
                    resources=[f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:instance/*"],
                ),
                INSTANCE_ARN_REASON,
            ),
            (
                iam.PolicyStatement(
                    sid="SessionManagerChannels",
                    actions=[
                        "ssmmessages:CreateControlChannel",
                        "ssmmessages:CreateDataChannel",
                        "ssmmessages:OpenControlChannel",
                        "ssmmessages:OpenDataChannel",
                    ],
                    resources=["*"],
                ),
                WILDCARD_RESOURCE_REASON,
            ),
            (
                iam.PolicyStatement(
                    sid="CloudWatchAgentMetrics",
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": CW_AGENT_NAMESPACE}},
                ),
                WILDCARD_RESOURCE_REASON,
            ),
            (
                iam.PolicyStatement(
                    sid="CloudWatchAgentLogs",
                    actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    resources=[self.log_group.log_group_arn],
                ),
                LOG_GROUP_REASON,
            ),
            (
                iam.PolicyStatement(
                    sid="BootCheckSignals",
                    actions=["autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceHealth"],
                    resources=[group_arn],
                ),
                GROUP_ARN_REASON,
            ),
        ]
        for statement, _reason in statements:
            role.add_to_principal_policy(statement)
        # A new role's DefaultPolicy, or the Policy the CDK attaches to an imported (mutable) role.
        policy = role.node.try_find_child("DefaultPolicy") or role.node.try_find_child("Policy")
        self._wildcards: PolicyWildcards | None = None
        if policy is None:  # an immutable imported role: its owner grants these permissions
            return
        nag.acknowledge_compliance(policy, "IAMNoInlinePolicy", DEFAULT_POLICY_REASON)
        self._wildcards = PolicyWildcards(policy)
        for statement, reason in statements:
            self._wildcards.expect(statement, reason)
        self.node.add_validation(self._wildcards)

    def acknowledge_data_grants(self, *grants: iam.Grant, encryption_key: kms.IKey | None = None) -> None:
        """Acknowledge the wildcard findings (IAM5) of S3 data grants to this fleet, exactly those.

        The CDK's bucket grants use action groups (``s3:GetObject*``, ``s3:List*``) on ``<bucket>/<prefix>*``
        objects, and add KMS data-key actions (``kms:GenerateDataKey*``, ``kms:ReEncrypt*``) on the buckets'
        ``encryption_key``; each grant is limited to one prefix of one bucket and to that key.
        """
        if self._wildcards is None:  # an immutable imported role: no policy here to acknowledge
            return
        for grant in grants:
            for statement in grant.principal_statements:
                self._wildcards.expect(statement, DATA_GRANT_REASON)
        if encryption_key is not None:
            self._wildcards.expect_key_actions(encryption_key, DATA_GRANT_REASON)

    # ------------------------------------------------------------------------------------------------
    # EFA
    # ------------------------------------------------------------------------------------------------

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

    # ------------------------------------------------------------------------------------------------
    # Monitoring
    # ------------------------------------------------------------------------------------------------

    def gpu_metric(
        self, name: str, *, statistic: str = "Average", period: Duration = Duration.minutes(5)
    ) -> cloudwatch.Metric:
        """A CloudWatch agent ``nvidia_smi_<name>`` metric aggregated over the whole group."""
        return cloudwatch.Metric(
            namespace=CW_AGENT_NAMESPACE,
            metric_name=f"nvidia_smi_{name}",
            dimensions_map={"AutoScalingGroupName": self.fleet_name},
            statistic=statistic,
            period=period,
        )

    def _log_metric(self, name: str, statistic: str = "Sum") -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=self.metrics_namespace, metric_name=name, statistic=statistic, period=Duration.minutes(5)
        )

    def _add_log_metrics(self) -> None:
        logs.MetricFilter(
            self,
            "XidErrorsFilter",
            log_group=self.log_group,
            filter_pattern=logs.FilterPattern.all_terms(XID_MARKER),
            metric_namespace=self.metrics_namespace,
            metric_name="XidErrors",
            metric_value="1",
            default_value=0,
        )
        logs.MetricFilter(
            self,
            "BootFailuresFilter",
            log_group=self.log_group,
            filter_pattern=logs.FilterPattern.all_terms(BOOT_FAILED_MARKER),
            metric_namespace=self.metrics_namespace,
            metric_name="BootFailures",
            metric_value="1",
            default_value=0,
        )

    def _add_alarms(self, idle_percent: float, idle_period: Duration, temperature: float) -> None:
        action = alarm_action(self.topic)
        periods = int(idle_period.to_minutes() // 5)
        specs: list[tuple[str, cloudwatch.Metric, float, cloudwatch.ComparisonOperator, int, str]] = [
            (
                "IdleGpu",
                self.gpu_metric("utilization_gpu"),
                idle_percent,
                cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                periods,
                f"GPUs of {self.fleet_name} averaged under {idle_percent:g}% utilization for "
                f"{idle_period.to_minutes():g} minutes: scale the group in (cost)",
            ),
            (
                "GpuTemperature",
                self.gpu_metric("temperature_gpu", statistic="Maximum"),
                temperature,
                cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                3,
                f"A GPU of {self.fleet_name} reached {temperature:g} C for 15 minutes (throttling, cooling)",
            ),
            (
                "XidErrors",
                self._log_metric("XidErrors"),
                1,
                cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                1,
                f"NVIDIA Xid errors in the kernel log of {self.fleet_name} (see the kernel log streams)",
            ),
            (
                "BootFailures",
                self._log_metric("BootFailures"),
                1,
                cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                1,
                f"An instance of {self.fleet_name} failed its boot check and was replaced (see the boot logs)",
            ),
        ]
        for name, metric, threshold, comparison, evaluation_periods, description in specs:
            alarm = metric.create_alarm(
                self,
                f"{name}Alarm",
                threshold=threshold,
                comparison_operator=comparison,
                evaluation_periods=evaluation_periods,
                alarm_description=description,
                # No instances (min 0) means no data: that is not a problem.
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            alarm.add_alarm_action(action)
            self.alarms[name] = alarm

    def _add_dashboard(self, idle_percent: float) -> cloudwatch.Dashboard:
        group = self.fleet_name
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"gpu-fleet-{group}")
        in_service = cloudwatch.Metric(
            namespace="AWS/AutoScaling",
            metric_name="GroupInServiceInstances",
            dimensions_map={"AutoScalingGroupName": group},
            statistic="Average",
            period=Duration.minutes(5),
        )
        dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown=(
                    f"# GPU fleet {group}\n{self.instance.describe()} x {self.gpu_count} GPU(s) per instance, "
                    f"{self.image.describe()}. GPU metrics: CloudWatch agent `nvidia_gpu`, per group."
                ),
                width=24,
                height=2,
            ),
            cloudwatch.GraphWidget(
                title="GPU utilization (%)",
                left=[self.gpu_metric("utilization_gpu"), self.gpu_metric("utilization_gpu", statistic="Maximum")],
                left_annotations=[cloudwatch.HorizontalAnnotation(value=idle_percent, label="idle alarm")],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="GPU memory",
                left=[self.gpu_metric("memory_used", statistic="Maximum")],
                right=[self.gpu_metric("utilization_memory")],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="GPU temperature (C) and power (W)",
                left=[self.gpu_metric("temperature_gpu", statistic="Maximum")],
                right=[self.gpu_metric("power_draw")],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Instances in service",
                left=[in_service],
                width=12,
            ),
            cloudwatch.AlarmStatusWidget(alarms=list(self.alarms.values()), title="Alarms", width=24),
        )
        return dashboard

    # ------------------------------------------------------------------------------------------------
    # Exposed
    # ------------------------------------------------------------------------------------------------

    @property
    def connections(self) -> ec2.Connections:
        return self._connections

    @property
    def grant_principal(self) -> iam.IPrincipal:
        return self.role.grant_principal


INTRA_GROUP_REASON = (
    "Safe because the only source is this security group itself, not a CIDR: EFA requires all traffic "
    "between the members of the group, and NCCL over TCP uses ephemeral ports"
)
MIXED_IMDS_REASON = (
    "Safe because the group launches only from this construct's launch template, through its mixed instances "
    "policy (which this rule does not read), and that template requires IMDSv2 (HttpTokens required)"
)
MIXED_EBS_REASON = (
    "Safe because the group launches only from this construct's launch template, through its mixed instances "
    "policy (which this rule does not read), and every block device there is encrypted with the platform key"
)
WILDCARD_RESOURCE_REASON = (
    "Safe because the ssmmessages channel actions (Session Manager) and cloudwatch:PutMetricData support no "
    "resource-level permissions; PutMetricData is limited to the CWAgent namespace by a condition"
)
INSTANCE_ARN_REASON = (
    "Safe because ssm:UpdateInstanceInformation only registers the calling instance with Systems Manager, "
    "and the ids of instances the group launches later cannot be known here"
)
LOG_GROUP_REASON = (
    "Safe because the log group is the fleet's own; the wildcard is the log-stream suffix of its ARN, "
    "since the agent names one stream per instance"
)
DATA_GRANT_REASON = (
    "Safe because these are the action groups of the CDK's S3 bucket grants (read or put) and their KMS "
    "data-key actions, each limited to one key prefix of one platform bucket and to the platform's data key"
)
GROUP_ARN_REASON = (
    "Safe because the auto scaling group is named exactly; the only wildcard is the UUID that AWS assigns "
    "to the group when it is created"
)
DEFAULT_POLICY_REASON = (
    "Safe because this inline policy is created by CDK for exactly one role (the fleet's instance role), "
    "is deleted with it and cannot be attached elsewhere; each statement is scoped to the fleet's resources"
)


def _default_image(instance_type: str) -> DlamiImage:
    from gpu_constructs.catalog import lookup

    try:
        arch = lookup(instance_type).cpu_arch
    except ValidationError:
        arch = "x86_64"  # the instance type check reports the unknown name
    return DlamiImage.from_ssm(cpu_arch=arch)


def _private_subnet_type(vpc: ec2.IVpc) -> ec2.SubnetType:
    return ec2.SubnetType.PRIVATE_ISOLATED if vpc.isolated_subnets else ec2.SubnetType.PRIVATE_WITH_EGRESS


SERVICE_LINKED_ROLE_PRINCIPAL_REASON = (
    "Safe because the wildcard principal is narrowed by conditions to this account's EC2 Auto Scaling "
    "service-linked role (aws:PrincipalArn, kms:CallerAccount), since a key policy that names the role as "
    "principal fails to deploy in an account where the role does not exist yet"
)


def _service_linked_role_statement(
    key: kms.IKey, sid: str, actions: list[str], extra: Mapping[str, Mapping[str, Any]] | None = None
) -> iam.PolicyStatement:
    stack = Stack.of(key)
    conditions: dict[str, Any] = {
        "ArnEquals": {"aws:PrincipalArn": autoscaling_service_linked_role_arn(key)},
        "StringEquals": {"kms:CallerAccount": stack.account},
    }
    conditions.update(extra or {})
    return iam.PolicyStatement(
        sid=sid, principals=[iam.AnyPrincipal()], actions=actions, resources=["*"], conditions=conditions
    )


def _allow_autoscaling_to_use_key(key: kms.IKey, scope: Construct) -> None:
    """The key policy statements EC2 Auto Scaling needs to launch instances with volumes encrypted by a
    customer managed key (EC2 Auto Scaling user guide, "Required AWS KMS key policy for use with encrypted
    volumes"): the service-linked role may use the key and create grants for AWS resources."""
    use = _service_linked_role_statement(
        key,
        "AllowAutoScalingServiceLinkedRoleUseOfTheKey",
        ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
    )
    attach = _service_linked_role_statement(
        key,
        "AllowAutoScalingServiceLinkedRoleAttachmentOfPersistentResources",
        ["kms:CreateGrant"],
        {"Bool": {"kms:GrantIsForAWSResource": True}},
    )
    added = [key.add_to_resource_policy(s).statement_added for s in (use, attach)]
    if all(added):
        _skip_wildcard_principal_check(key)
        return
    from aws_cdk import Annotations

    Annotations.of(scope).add_warning_v2(
        "gpu-constructs:volume-key-policy",
        "volume_key is imported: add the key policy statements that let the EC2 Auto Scaling service-linked "
        "role use it (kms:Encrypt/Decrypt/ReEncrypt*/GenerateDataKey*/DescribeKey, and kms:CreateGrant with "
        "kms:GrantIsForAWSResource), or instances fail to launch",
    )


def allow_notifications(topic: sns.ITopic, key: kms.IKey) -> None:
    """Let CloudWatch alarms and EC2 Auto Scaling notifications publish to ``topic`` encrypted with ``key``.

    CloudWatch alarms of this account and region are admitted on the topic and the key by the platform's one
    recipe (:func:`gpu_constructs.topics.admit_publishers`); the key policy also lets the Auto Scaling
    service-linked role (which publishes scaling notifications as a role, not as a service principal)
    encrypt messages.
    """
    admit_publishers(topic, Publisher.cloudwatch_alarms(topic), key=key)
    key.add_to_resource_policy(
        _service_linked_role_statement(
            key, "AllowAutoScalingNotificationsEncrypted", ["kms:Decrypt", "kms:GenerateDataKey*"]
        )
    )
    _skip_wildcard_principal_check(key)


def _skip_wildcard_principal_check(key: kms.IKey) -> None:
    """Skip checkov's wildcard-principal check on an owned key, keeping the reason of an earlier skip
    (another construct may have added its own conditional wildcard statement to the same key)."""
    if not isinstance(key, kms.Key):
        return
    cfn = key.node.default_child
    assert isinstance(cfn, kms.CfnKey)
    existing = cfn.get_metadata(nag.CHECKOV_METADATA_KEY) or {}
    earlier = [s.get("comment", "") for s in existing.get("skip", []) if s.get("id") == "CKV_AWS_33"]
    reasons = [c for c in earlier if c and SERVICE_LINKED_ROLE_PRINCIPAL_REASON not in c]
    comment = "; ".join([*reasons, SERVICE_LINKED_ROLE_PRINCIPAL_REASON])
    nag.checkov_skip(key, "CKV_AWS_33", comment)


def _allow_logs_to_use_key(key: kms.IKey, group: logs.LogGroup, name: str, stack: Stack) -> None:
    allow_cloudwatch_logs(
        key, stack, sid=f"AllowCloudWatchLogs{Names.unique_id(group)[-40:]}", log_group=name, exact=True
    )


# --------------------------------------------------------------------------------------------------
# Wildcard findings
# --------------------------------------------------------------------------------------------------


def wildcard_findings(statements: Sequence[Mapping[str, Any]]) -> set[str]:
    """The IAM5 finding ids (``Action::x*``, ``Resource::...*``) of resolved Allow statements."""
    found: set[str] = set()
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        found.update(f"Action::{a}" for a in map(str, _as_list(statement.get("Action"))) if "*" in a)
        for resource in _as_list(statement.get("Resource")):
            flat = flatten_reference(resource)
            if "*" in flat:
                found.add(f"Resource::{flat}")
    return found


@jsii.implements(IValidation)
class PolicyWildcards:
    """Acknowledges the IAM5 findings of known statements of one policy, in the validation phase.

    Cross-stack references only become imports when the app is prepared, so the exact finding ids are
    computed then (before the compliance plugins run). Only wildcards of statements registered with
    :meth:`expect` are acknowledged, each with the statement's reason; any other wildcard stays reported.
    """

    def __init__(self, policy: IConstruct) -> None:
        self._policy = policy
        self._expected: list[tuple[iam.PolicyStatement, str]] = []
        self._keys: list[tuple[kms.IKey, str]] = []
        self._done = False

    def expect(self, statement: iam.PolicyStatement, reason: str) -> None:
        nag.check_reason(reason, f"{self._policy.node.path}: IAM5")
        self._expected.append((statement, reason))

    def expect_key_actions(self, key: kms.IKey, reason: str) -> None:
        """Expect the wildcard KMS actions of statements whose only resource is ``key``."""
        nag.check_reason(reason, f"{self._policy.node.path}: IAM5")
        self._keys.append((key, reason))

    def validate(self) -> list[str]:
        if self._done:
            return []
        self._done = True
        cfn = self._policy.node.default_child
        if not isinstance(cfn, iam.CfnPolicy):
            return []
        stack = Stack.of(cfn)
        document = _as_list(stack.resolve(cfn.policy_document).get("Statement"))
        reported = wildcard_findings(document)
        star_actions = {
            str(action)
            for statement, _reason in self._expected
            if "*" in statement.resources
            for action in statement.actions
        }
        # "Resource::*" is one finding for every statement on "*": acknowledge it only when each of them
        # is an expected statement's action (actions without resource-level permissions).
        star_ok = all(
            str(action) in star_actions
            for st in document
            if st.get("Effect") == "Allow" and "*" in map(flatten_reference, _as_list(st.get("Resource")))
            for action in _as_list(st.get("Action"))
        )
        acknowledged: set[str] = set()
        for statement, reason in self._expected:
            for finding in sorted(wildcard_findings([stack.resolve(statement.to_statement_json())])):
                if finding == "Resource::*" and not star_ok:
                    continue
                if finding in reported and finding not in acknowledged:
                    nag.acknowledge(cfn, nag.AWS_SOLUTIONS, f"IAM5[{finding}]", reason)
                    acknowledged.add(finding)
        for key, reason in self._keys:
            key_arn = flatten_reference(stack.resolve(key.key_arn))
            for st in document:
                resources = [flatten_reference(r) for r in _as_list(st.get("Resource"))]
                if st.get("Effect") != "Allow" or resources != [key_arn]:
                    continue
                for action in map(str, _as_list(st.get("Action"))):
                    finding = f"Action::{action}"
                    if action.startswith("kms:") and "*" in action and finding not in acknowledged:
                        nag.acknowledge(cfn, nag.AWS_SOLUTIONS, f"IAM5[{finding}]", reason)
                        acknowledged.add(finding)
        return []


@jsii.implements(IValidation)
class _InferredReachability:
    """Checks, when the app is synthesized, that the fleet's subnets reach what its software calls.

    Run in the validation phase so endpoints added to the VPC after the fleet was constructed count.
    """

    def __init__(self, fleet: GpuFleet, vpc: ec2.IVpc) -> None:
        self._fleet = fleet
        self._vpc = vpc

    def validate(self) -> list[str]:
        fleet = self._fleet
        try:
            fleet._check_reachability(infer_reachability(self._vpc, fleet._vpc_subnets), Stack.of(fleet).region)
        except ValidationError as exc:
            return [str(exc)]
        return []
