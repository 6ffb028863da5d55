"""The value types and limits of a GPU fleet, each rule written once.

No CDK runtime is loaded here: a ``Size`` or ``Duration`` comes from the caller, which has loaded it, and the
config model (which loads none) checks its whole-GiB and whole-minute keys with the same rules
(:func:`check_volume_gib`, :func:`is_idle_gpu_minutes`). Every rule raises the library's ``ValidationError`` at
``where`` (a construct path or a config key) naming the bad value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from gpu_constructs.catalog import InstanceType, require_efa
from gpu_constructs.deprecation import warn_deprecated
from gpu_constructs.errors import fail, require_range
from gpu_constructs.file_systems.lustre_mount import MOUNT_PATH_ALLOWED, is_mount_path

if TYPE_CHECKING:
    from aws_cdk import Duration, Size

    from gpu_constructs.dlami import DlamiImage

__all__ = [
    "CW_AGENT_NAMESPACE",
    "SPOT_ALLOCATION_STRATEGIES",
    "USER_DATA_LIMIT_BYTES",
    "FleetAlarms",
    "FleetCapacity",
    "FleetSpotOptions",
    "FleetVolumes",
    "TorchCheck",
    "check_efa",
    "check_fleet_name",
    "check_torch_check",
    "check_volume_gib",
    "is_idle_gpu_minutes",
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
#: What the idle alarm's period may be: whole 5-minute periods of the agent's GPU metrics, up to a day.
IDLE_GPU_PERIOD_ALLOWED = "a multiple of 5 minutes from 5 to 1440"


def check_fleet_name(where: str, name: object) -> None:
    if not isinstance(name, str) or not _FLEET_NAME_RE.match(name):
        raise fail(where, "fleet_name", name, "1-63 characters: a lowercase letter, then [a-z0-9-]")


def check_volume_gib(
    where: str,
    root_gib: float | None,
    data_gib: float | None,
    *,
    names: tuple[str, str] = ("root_volume_size (GiB)", "data_volume_size (GiB)"),
) -> None:
    """The gp3 volume sizes of an instance, in GiB: the root 100..16384 (the DLAMI needs 100), a data volume
    1..16384; None is not checked. :class:`FleetVolumes` and the config model (whole-GiB keys, named by ``names``)
    share it."""
    root, data = names
    require_range(where, root, root_gib, minimum=MIN_ROOT_GIB, maximum=MAX_EBS_GIB)
    if data_gib is not None:
        require_range(where, data, data_gib, minimum=1, maximum=MAX_EBS_GIB)


def is_idle_gpu_minutes(minutes: float) -> bool:
    """True for an idle alarm period the alarm can evaluate (:data:`IDLE_GPU_PERIOD_ALLOWED`)."""
    return not minutes % 5 and 5 <= minutes <= 24 * 60


@dataclass(frozen=True)
class FleetCapacity:
    """Instances of the group: ``0 <= min <= desired <= max`` and ``max >= 1``.

    :param min_capacity: default 0 (no idle GPU cost).
    :param max_capacity: default 1.
    :param desired_capacity: default: none (the group starts at ``min_capacity``; scaling is manual or by your
        own policies).
    """

    min_capacity: int = 0
    max_capacity: int = 1
    desired_capacity: int | None = None

    def validate(self, where: str) -> None:
        """Raise a ``ValidationError`` at ``where`` naming the capacity that breaks the order above."""
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

    def check(self, where: str) -> None:
        """Deprecated: use :meth:`validate`."""
        warn_deprecated("gpu_constructs.fleet.options.FleetCapacity.check", "FleetCapacity.validate")
        self.validate(where)


@dataclass(frozen=True)
class FleetVolumes:
    """The gp3 volumes of an instance, encrypted with the fleet's volume key.

    :param root_volume_size: the root volume, 100..16384 GiB (default: 200 GiB; the DLAMI needs 100).
    :param data_volume_size: an extra data volume, 1..16384 GiB, formatted and mounted at ``data_mount_path``
        (default: none).
    :param data_mount_path: default ``/data``.
    """

    root_volume_size: Size | None = None
    data_volume_size: Size | None = None
    data_mount_path: str = "/data"

    def validate(self, where: str) -> None:
        """Raise a ``ValidationError`` at ``where`` naming the size (in GiB) or path that is not allowed."""
        root = None if self.root_volume_size is None else self.root_volume_size.to_gibibytes()
        data = None if self.data_volume_size is None else self.data_volume_size.to_gibibytes()
        check_volume_gib(where, root, data)
        if data is not None and not is_mount_path(self.data_mount_path):
            raise fail(where, "data_mount_path", self.data_mount_path, MOUNT_PATH_ALLOWED)

    def check(self, where: str) -> None:
        """Deprecated: use :meth:`validate`."""
        warn_deprecated("gpu_constructs.fleet.options.FleetVolumes.check", "FleetVolumes.validate")
        self.validate(where)


@dataclass(frozen=True)
class FleetAlarms:
    """When the fleet's alarms fire.

    :param idle_gpu_threshold_percent: the idle alarm fires when the average GPU utilization of the group stays
        below this, 0..100 (default: 5).
    :param idle_gpu_period: for this long, a multiple of 5 minutes up to 1 day (default: 1 hour).
    :param max_gpu_temperature_celsius: the temperature alarm fires when a GPU reaches this, 30..120 (default: 85).
    """

    idle_gpu_threshold_percent: float = 5
    idle_gpu_period: Duration | None = None
    max_gpu_temperature_celsius: float = 85

    def validate(
        self,
        where: str,
        *,
        names: tuple[str, str, str] = (
            "idle_gpu_threshold_percent",
            "idle_gpu_period (minutes)",
            "max_gpu_temperature_celsius",
        ),
    ) -> None:
        """Raise a ``ValidationError`` at ``where`` naming the setting (by ``names``) that is out of range."""
        idle, period, temperature = names
        require_range(where, idle, self.idle_gpu_threshold_percent, minimum=0, maximum=100)
        if self.idle_gpu_period is not None:
            minutes = self.idle_gpu_period.to_minutes()
            if not is_idle_gpu_minutes(minutes):
                raise fail(where, period, minutes, IDLE_GPU_PERIOD_ALLOWED)
        require_range(where, temperature, self.max_gpu_temperature_celsius, minimum=30, maximum=120)


def FleetAlarmThresholds(
    idle_gpu_threshold_percent: float = 5, idle_gpu_minutes: float = 60, max_gpu_temperature_celsius: float = 85
) -> FleetAlarms:
    """Deprecated: use :class:`FleetAlarms`, whose idle period is a ``Duration`` (``idle_gpu_period``) rather than
    minutes. Returns the equivalent :class:`FleetAlarms`."""
    warn_deprecated("gpu_constructs.fleet.options.FleetAlarmThresholds", "gpu_constructs.fleet.options.FleetAlarms")
    from aws_cdk import Duration

    return FleetAlarms(idle_gpu_threshold_percent, Duration.minutes(idle_gpu_minutes), max_gpu_temperature_celsius)


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

    def validate(self, where: str, *, instance: InstanceType, image: DlamiImage) -> None:
        """Raise a ``ValidationError`` at ``where`` unless the mix fits a fleet of ``instance`` on ``image``."""
        self.further_types(where, instance, image)

    def check(self, where: str, instance: InstanceType, image: DlamiImage) -> tuple[str, ...]:
        """Deprecated: use :meth:`validate`, and :meth:`further_types` for the types it returned."""
        warn_deprecated("gpu_constructs.fleet.FleetSpotOptions.check", "FleetSpotOptions.validate")
        return self.further_types(where, instance, image)

    def further_types(self, where: str, instance: InstanceType, image: DlamiImage) -> tuple[str, ...]:
        """The further types of the mix as catalog names, validated as :meth:`validate` does."""
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


def check_efa(
    where: str, instance: InstanceType, spot_types: Sequence[str], *, param: str = "spot.instance_types[]"
) -> None:
    """EFA needs an EFA type, and every further type (a spot mix's, or a fallback list's named by ``param``) with
    the same number of EFA interfaces (network cards)."""
    require_efa(instance, where=where)
    for name in spot_types:
        other = require_efa(name, where=where, param=param)
        if other.efa_interfaces != instance.efa_interfaces:
            raise fail(
                where,
                param,
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
