"""``GpuFleet``: an EC2 auto scaling group of GPU instances on a Deep Learning AMI, with a GPU check at boot.

For teams that train outside SageMaker jobs. One fleet is:

* a launch template on a :class:`~gpu_constructs.dlami.DlamiImage` (public SSM parameter or a pinned AMI),
  checked against the instance type's GPU (driver flavour, driver branch, CUDA); IMDSv2 required with a
  hop limit of 2 (containers); encrypted gp3 root (and optional data) volumes with the platform key; no
  public IP; detailed monitoring; no key pair and no port 22 (shell access is SSM Session Manager);
* a least-privilege instance role: Session Manager, the CloudWatch agent (one metric namespace, one log
  group), its own lifecycle hook and health; data access comes from grants (``grant_principal``);
* an auto scaling group, min 0 by default, with an optional ordered on-demand fallback list, an optional spot
  mix across compatible GPU types and capacity rebalancing, an optional capacity reservation or Capacity
  Block, an optional cluster placement group, EFA interfaces on EFA types (one per network card), EC2 health
  checks and notifications to a KMS-encrypted SNS topic;
* a boot script (``assets/fleet_boot.sh``) that mounts FSx for Lustre, checks the GPUs, starts the
  CloudWatch agent with the ``nvidia_gpu`` metrics aggregated per group and completes the launch
  lifecycle hook; a broken GPU stack marks the instance unhealthy so the group replaces it;
* a dashboard and alarms: GPU utilization, idle GPUs (cost), temperature, NVIDIA Xid errors (from the
  kernel log) and boot failures.

The package, one concept per module:

* :mod:`~gpu_constructs.fleet.options`: value types and limits (spot mix, capacity, volumes, alarms), with
  no CDK runtime, so the config model shares their rules;
* :mod:`~gpu_constructs.fleet.capacity`: where the GPUs come from (an ordered on-demand fallback list, an EC2
  capacity reservation or Capacity Block), with no CDK runtime; :mod:`~gpu_constructs.fleet.launch_options`
  renders them (mixed instances policy, the launch template's reservation target and market type);
* :mod:`~gpu_constructs.fleet.flat_keywords`: the flat keywords ``GpuFleet`` took before its value types,
  deprecated aliases for one release;
* :mod:`~gpu_constructs.fleet.construct`: ``GpuFleet`` (launch template, group, launch hook, boot script);
* :mod:`~gpu_constructs.fleet.role` and :mod:`~gpu_constructs.fleet.key_policies`: the instance role and
  the key policy statements EC2 Auto Scaling and CloudWatch Logs need;
* :mod:`~gpu_constructs.fleet.monitoring`: metrics, alarms, dashboard;
* :mod:`~gpu_constructs.fleet.reachability`: what the boot script and agents call, the zone of a fleet
  that mounts Lustre;
* :mod:`~gpu_constructs.fleet.acknowledgments`: the cdk-nag acknowledgments and their reasons.

Names are imported lazily (PEP 562), so ``gpu_constructs.fleet.options`` loads no CDK runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_constructs.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "CW_AGENT_NAMESPACE": "gpu_constructs.fleet.options",
    "USER_DATA_LIMIT_BYTES": "gpu_constructs.fleet.options",
    "FleetAlarms": "gpu_constructs.fleet.options",
    "FleetAlarmThresholds": "gpu_constructs.fleet.options",
    "FleetCapacity": "gpu_constructs.fleet.options",
    "FleetCapacityReservation": "gpu_constructs.fleet.capacity",
    "FleetFallback": "gpu_constructs.fleet.capacity",
    "FleetSpotOptions": "gpu_constructs.fleet.options",
    "FleetVolumes": "gpu_constructs.fleet.options",
    "TorchCheck": "gpu_constructs.fleet.options",
    "GpuFleet": "gpu_constructs.fleet.construct",
    "DATA_GRANT_REASON": "gpu_constructs.fleet.acknowledgments",
    "PolicyWildcards": "gpu_constructs.fleet.acknowledgments",
    "wildcard_findings": "gpu_constructs.fleet.acknowledgments",
    "allow_notifications": "gpu_constructs.fleet.key_policies",
    "autoscaling_service_linked_role_arn": "gpu_constructs.fleet.key_policies",
    "LustreFileSystemLike": "gpu_constructs.file_systems.lustre_mount",
    "LustreMount": "gpu_constructs.file_systems.lustre_mount",
    "allow_lustre_clients": "gpu_constructs.file_systems.lustre_clients",
    "render_script": "gpu_constructs.packaging.scripts",
    "strip_comments": "gpu_constructs.packaging.scripts",
}

#: The documented API: the construct, the value types of its props and the key policy an app's shared key needs.
#: The other names of ``_EXPORTS`` (limits, boot-script rendering, cdk-nag helpers, the config model's value
#: types, which it imports from :mod:`~gpu_constructs.fleet.options`) are importable, not advertised.
__all__ = [
    "FleetAlarms",
    "FleetCapacity",
    "FleetCapacityReservation",
    "FleetFallback",
    "FleetSpotOptions",
    "FleetVolumes",
    "GpuFleet",
    "LustreFileSystemLike",
    "LustreMount",
    "TorchCheck",
    "allow_notifications",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # explicit re-exports (``X as X``) for type checkers
    from gpu_constructs.file_systems.lustre_clients import allow_lustre_clients as allow_lustre_clients
    from gpu_constructs.file_systems.lustre_mount import LustreFileSystemLike as LustreFileSystemLike
    from gpu_constructs.file_systems.lustre_mount import LustreMount as LustreMount
    from gpu_constructs.fleet.acknowledgments import DATA_GRANT_REASON as DATA_GRANT_REASON
    from gpu_constructs.fleet.acknowledgments import PolicyWildcards as PolicyWildcards
    from gpu_constructs.fleet.acknowledgments import wildcard_findings as wildcard_findings
    from gpu_constructs.fleet.capacity import FleetCapacityReservation as FleetCapacityReservation
    from gpu_constructs.fleet.capacity import FleetFallback as FleetFallback
    from gpu_constructs.fleet.construct import GpuFleet as GpuFleet
    from gpu_constructs.fleet.key_policies import allow_notifications as allow_notifications
    from gpu_constructs.fleet.key_policies import (
        autoscaling_service_linked_role_arn as autoscaling_service_linked_role_arn,
    )
    from gpu_constructs.fleet.options import CW_AGENT_NAMESPACE as CW_AGENT_NAMESPACE
    from gpu_constructs.fleet.options import USER_DATA_LIMIT_BYTES as USER_DATA_LIMIT_BYTES
    from gpu_constructs.fleet.options import FleetAlarms as FleetAlarms
    from gpu_constructs.fleet.options import FleetAlarmThresholds as FleetAlarmThresholds
    from gpu_constructs.fleet.options import FleetCapacity as FleetCapacity
    from gpu_constructs.fleet.options import FleetSpotOptions as FleetSpotOptions
    from gpu_constructs.fleet.options import FleetVolumes as FleetVolumes
    from gpu_constructs.fleet.options import TorchCheck as TorchCheck
    from gpu_constructs.packaging.scripts import render_script as render_script
    from gpu_constructs.packaging.scripts import strip_comments as strip_comments
