"""The flat keywords ``GpuFleet`` took before its value types, kept for one release as deprecated aliases.

``GpuFleet(min_capacity=2, root_volume_size=..., file_system=fs, idle_gpu_period=...)`` still works: each flat
keyword warns, naming the value type field that replaces it, and is folded into that value type. Giving a flat
keyword together with the value type that replaces it is an error, not a silent choice of one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

from gpu_constructs.deprecation import warn_deprecated
from gpu_constructs.errors import ValidationError
from gpu_constructs.file_systems.lustre_mount import LustreMount
from gpu_constructs.fleet.options import FleetAlarms, FleetCapacity, FleetVolumes

#: Each deprecated keyword: the ``GpuFleet`` keyword that replaces it and the field it sets there.
FLAT_KEYWORDS: Mapping[str, tuple[str, str]] = {
    "min_capacity": ("capacity", "min_capacity"),
    "max_capacity": ("capacity", "max_capacity"),
    "desired_capacity": ("capacity", "desired_capacity"),
    "root_volume_size": ("volumes", "root_volume_size"),
    "data_volume_size": ("volumes", "data_volume_size"),
    "data_mount_path": ("volumes", "data_mount_path"),
    "file_system": ("lustre", "file_system"),
    "open_lustre_ports": ("lustre", "open_ports"),
    "lustre_mount_path": ("lustre", "mount_path"),
    "same_zone_as_file_system": ("lustre", "same_zone"),
    "lustre_mount_attempts": ("lustre", "mount_attempts"),
    "lustre_retry_interval": ("lustre", "retry_interval"),
    "idle_gpu_threshold_percent": ("alarms", "idle_gpu_threshold_percent"),
    "idle_gpu_period": ("alarms", "idle_gpu_period"),
    "max_gpu_temperature_celsius": ("alarms", "max_gpu_temperature_celsius"),
}


#: The value type of each keyword that replaces flat ones.
_VALUE_TYPES: Mapping[str, type[Any]] = {
    "capacity": FleetCapacity,
    "volumes": FleetVolumes,
    "lustre": LustreMount,
    "alarms": FleetAlarms,
}


class FleetSettings(NamedTuple):
    """The value types of a fleet, after its deprecated flat keywords are folded in."""

    capacity: FleetCapacity | None
    volumes: FleetVolumes | None
    lustre: LustreMount | None
    alarms: FleetAlarms | None


def fold_flat_keywords(where: str, given: FleetSettings, flat: Mapping[str, Any]) -> FleetSettings:
    """``given`` with the deprecated flat keywords ``flat`` set on its value types, one warning per keyword.

    An unknown keyword raises ``TypeError`` as Python does for any other function. Lustre settings without
    ``file_system`` change nothing (as before: there is nothing to mount), but still warn.
    """
    unknown = sorted(set(flat) - set(FLAT_KEYWORDS))
    if unknown:
        raise TypeError(f"GpuFleet() got an unexpected keyword argument {unknown[0]!r}")
    fields: dict[str, dict[str, Any]] = {}
    for old, value in flat.items():
        keyword, field = FLAT_KEYWORDS[old]
        replacement = f"{keyword}={_VALUE_TYPES[keyword].__name__}({field}=...)"
        if getattr(given, keyword) is not None:
            raise ValidationError(where, f"{old!r} and {keyword!r} are the same setting; give only {replacement}")
        warn_deprecated(f"GpuFleet({old}=...)", replacement, stacklevel=4)
        fields.setdefault(keyword, {})[field] = value
    settings = given._asdict()
    for keyword, values in fields.items():
        if keyword == "lustre":
            file_system = values.pop("file_system", None)
            settings["lustre"] = None if file_system is None else LustreMount(file_system, **values)
        else:
            settings[keyword] = dataclasses.replace(_VALUE_TYPES[keyword](), **values)
    return FleetSettings(**settings)
