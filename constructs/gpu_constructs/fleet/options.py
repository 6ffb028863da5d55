"""The value types and limits of a GPU fleet, each rule written once.

No CDK runtime is loaded here: the config model builds and checks the same values. Every check raises the
library's ``ValidationError`` at ``where`` (a construct path or a config key) naming the bad value and what
is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from gpu_constructs.catalog import InstanceType, require_efa
from gpu_constructs.errors import fail, require_range
from gpu_constructs.lustre_mount import check_mount_path

if TYPE_CHECKING:
    from gpu_constructs.dlami import DlamiImage

__all__ = [
    "CW_AGENT_NAMESPACE",
    "SPOT_ALLOCATION_STRATEGIES",
    "USER_DATA_LIMIT_BYTES",
    "FleetAlarmThresholds",
    "FleetCapacity",
    "FleetSpotOptions",
    "FleetVolumes",
    "TorchCheck",
    "check_efa",
    "check_fleet_name",
    "check_torch_check",
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

SpotAllocationStrategy = Literal[
    "price-capacity-optimized", "capacity-optimized", "capacity-optimized-prioritized", "lowest-price"
]
#: EC2 Auto Scaling spot allocation strategies, by their API names.
SPOT_ALLOCATION_STRATEGIES: tuple[str, ...] = get_args(SpotAllocationStrategy)

_FLEET_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
#: The DLAMI needs a root volume of at least 100 GiB; gp3 volumes are at most 16 TiB.
MIN_ROOT_GIB = 100
MAX_EBS_GIB = 16384


def check_fleet_name(where: str, name: object) -> None:
    if not isinstance(name, str) or not _FLEET_NAME_RE.match(name):
        raise fail(where, "fleet_name", name, "1-63 characters: a lowercase letter, then [a-z0-9-]")


@dataclass(frozen=True)
class FleetCapacity:
    """Instances of the group: ``0 <= min <= desired <= max`` and ``max >= 1``."""

    min_capacity: int = 0
    max_capacity: int = 1
    desired_capacity: int | None = None

    def check(self, where: str) -> None:
        minimum, maximum, desired = self.min_capacity, self.max_capacity, self.desired_capacity
        for name, value in (("min_capacity", minimum), ("max_capacity", maximum)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(where, name, value, "a whole number >= 0")
        if maximum < 1:
            raise fail(where, "max_capacity", maximum, "1 or more (a fleet that can never launch is a mistake)")
        if minimum > maximum:
            raise fail(where, "min_capacity", minimum, f"0..max_capacity ({maximum})")
        if desired is not None and not minimum <= desired <= maximum:
            raise fail(where, "desired_capacity", desired, f"None or {minimum}..{maximum} (min..max capacity)")


@dataclass(frozen=True)
class FleetVolumes:
    """The gp3 volumes of an instance: the root (100..16384 GiB) and an optional data volume (1..16384 GiB)."""

    root_gib: float = 200
    data_gib: float | None = None
    data_mount_path: str = "/data"

    def check(
        self, where: str, *, unit: str = " (GiB)", names: tuple[str, str] = ("root_volume_size", "data_volume_size")
    ) -> None:
        root, data = names
        require_range(where, f"{root}{unit}", self.root_gib, minimum=MIN_ROOT_GIB, maximum=MAX_EBS_GIB)
        if self.data_gib is not None:
            require_range(where, f"{data}{unit}", self.data_gib, minimum=1, maximum=MAX_EBS_GIB)
            check_mount_path(where, "data_mount_path", self.data_mount_path)


@dataclass(frozen=True)
class FleetAlarmThresholds:
    """When the fleet's alarms fire: average GPU utilization below ``idle_gpu_threshold_percent`` (0..100) for
    ``idle_gpu_minutes`` (a multiple of 5 from 5 to 1440), or a GPU at ``max_gpu_temperature_celsius`` (30..120)."""

    idle_gpu_threshold_percent: float = 5
    idle_gpu_minutes: float = 60
    max_gpu_temperature_celsius: float = 85

    def check(
        self,
        where: str,
        *,
        names: tuple[str, str, str] = (
            "idle_gpu_threshold_percent",
            "idle_gpu_period (minutes)",
            "max_gpu_temperature_celsius",
        ),
    ) -> None:
        idle, period, temperature = names
        require_range(where, idle, self.idle_gpu_threshold_percent, minimum=0, maximum=100)
        minutes = self.idle_gpu_minutes
        if minutes % 5 or not 5 <= minutes <= 24 * 60:
            raise fail(where, period, minutes, "a multiple of 5 minutes from 5 to 1440")
        require_range(where, temperature, self.max_gpu_temperature_celsius, minimum=30, maximum=120)


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

    def check(self, where: str, instance: InstanceType, image: DlamiImage) -> tuple[str, ...]:
        """Check the mix for a fleet of ``instance`` on ``image``; return the further types (catalog names)."""
        if self.allocation_strategy not in SPOT_ALLOCATION_STRATEGIES:
            raise fail(
                where, "spot.allocation_strategy", self.allocation_strategy, ", ".join(SPOT_ALLOCATION_STRATEGIES)
            )
        require_range(where, "spot.on_demand_base_capacity", self.on_demand_base_capacity, minimum=0)
        require_range(
            where, "spot.on_demand_percentage_above_base", self.on_demand_percentage_above_base, minimum=0, maximum=100
        )
        names = [instance.name]
        for name in self.instance_types:
            other = image.check_instance_type(name, where=where, param="spot.instance_types[]")
            if other.name in names:
                raise fail(where, "spot.instance_types", list(self.instance_types), "distinct types other than "
                           f"the fleet's instance_type {instance.name!r}")  # fmt: skip
            if other.nvidia_gpu_count != instance.nvidia_gpu_count:
                raise fail(
                    where,
                    "spot.instance_types[]",
                    other.name,
                    f"types with {instance.nvidia_gpu_count} GPU(s) like {instance.name!r} (the boot "
                    "check and the processes per host expect one GPU count)",
                )
            names.append(other.name)
        return tuple(names[1:])


def check_efa(where: str, instance: InstanceType, spot_types: Sequence[str]) -> None:
    """EFA needs an EFA type, and every spot type with the same number of EFA interfaces (network cards)."""
    require_efa(instance, where=where)
    for name in spot_types:
        other = require_efa(name, where=where, param="spot.instance_types[]")
        if other.efa_interfaces != instance.efa_interfaces:
            raise fail(
                where,
                "spot.instance_types[]",
                name,
                f"types with {instance.efa_interfaces} EFA interface(s) like {instance.name!r} "
                "(one launch template describes every network card)",
            )


def check_torch_check(where: str, torch_check: object, image: DlamiImage) -> None:
    if torch_check is not None and torch_check not in _TORCH_CHECKS:
        raise fail(where, "torch_check", torch_check, ", ".join(map(repr, _TORCH_CHECKS)))
    if torch_check == "required" and not image.has_torch:
        raise fail(
            where, "torch_check", torch_check, "'auto' or 'off' for a base DLAMI (no torch installed), or a "
            "PyTorch DLAMI (framework='pytorch')"
        )  # fmt: skip
