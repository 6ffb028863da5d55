"""The ``fleets`` section: EC2 GPU fleets on Deep Learning AMIs and GPU notebook instances.

The rules of a fleet and a notebook live in the library's value types (``gpu_constructs.fleet.options``:
``FleetCapacity``, ``FleetSpotOptions``, ``FleetVolumes``, ``FleetAlarms``; ``DlamiImage``;
``gpu_constructs.notebook.options``); the models here check their keys with those rules, naming the keys, and
keep only what is about the file (keys, types, names, prefixes). A ``Size`` or ``Duration`` is built only when
the stack asks for construct props, so loading a config loads no CDK runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from gpu_constructs.deprecation import renamed_keywords
from gpu_constructs.errors import fail
from gpu_constructs.fleet.capacity import (
    FleetCapacityReservation,
    FleetFallback,
    ReservationPreference,
    resolve_instance_types,
)
from gpu_constructs.fleet.options import (
    IDLE_GPU_PERIOD_ALLOWED,
    FleetAlarms,
    FleetCapacity,
    FleetSpotOptions,
    FleetVolumes,
    SpotAllocationStrategy,
    check_efa,
    check_volume_gib,
    is_idle_gpu_minutes,
)
from gpu_constructs.notebook.options import check_package_key, check_volume_size
from stacks.config._base import Allowed, EmailList, Retention, S3KeyPrefix, StrictModel, duplicates
from stacks.config.auto_stop import FleetAutoStopConfig, NotebookAutoStopConfig

if TYPE_CHECKING:
    from gpu_constructs.dlami import DlamiImage


_NAME = r"^[a-z][a-z0-9-]{0,30}$"
_NAME_ALLOWED = "must match [a-z][a-z0-9-]{{0,30}} (part of the {})"
#: A fleet name: the auto scaling group is ``<resource_prefix>-<name>``.
FleetName = Annotated[str, Field(pattern=_NAME), Allowed(message=_NAME_ALLOWED.format("auto scaling group name"))]
#: A notebook name: the notebook instance is ``<resource_prefix>-<name>``.
NotebookName = Annotated[str, Field(pattern=_NAME), Allowed(message=_NAME_ALLOWED.format("notebook instance name"))]


class DlamiConfig(StrictModel):
    """The Deep Learning AMI of a fleet: the latest image of a flavour (public SSM parameter) or pinned ids."""

    framework: Literal["base", "pytorch"] = Field(
        "base", description="base: driver, CUDA, EFA, NCCL; pytorch: adds PyTorch in /opt/pytorch"
    )
    os: Literal["ubuntu-22.04", "ubuntu-24.04", "amazon-linux-2023"] = Field(
        "ubuntu-22.04", description="Operating system of the DLAMI"
    )
    pytorch_version: str | None = Field(
        None,
        description=(
            "framework pytorch: the PyTorch line, MAJOR.MINOR (e.g. '2.12'); null for base. 2.11 and 2.12 on "
            "ubuntu-24.04 x86_64 ship the Lustre client; other lines install it at boot (needs a NAT on Ubuntu)"
        ),
    )
    ami_ids: dict[str, str] | None = Field(
        None,
        description="Pin: region -> AMI id (a reviewed change replaces instances); null = latest from SSM",
    )
    driver: Literal["oss", "proprietary"] = Field(
        "oss", description="NVIDIA kernel modules of the image; proprietary only for a pinned AMI"
    )
    driver_branch: int | None = Field(None, description="NVIDIA driver branch of a pinned AMI, e.g. 580")
    cuda_version: str | None = Field(None, description="CUDA version the workload uses, e.g. '12.8' (checked)")

    def image(self, cpu_arch: Literal["x86_64", "arm64"]) -> DlamiImage:
        """The ``gpu_constructs.dlami.DlamiImage`` of this config for ``cpu_arch``."""
        from gpu_constructs.dlami import DlamiImage

        return DlamiImage(cpu_arch=cpu_arch, **self.model_dump())  # the same keys

    @model_validator(mode="after")
    def _valid_image(self) -> DlamiConfig:
        self.image("x86_64")  # raises gpu_constructs.ValidationError (a ValueError) naming the bad field
        return self


class FleetSpotConfig(StrictModel):
    """A spot mix: the group's type plus compatible GPU types, spot above an on-demand base."""

    instance_types: tuple[str, ...] = Field(
        (), description="Further EC2 GPU types (same GPU count and CPU architecture as instance_type)"
    )
    on_demand_base_capacity: int = Field(0, description="Instances always launched on demand")
    on_demand_percentage_above_base: int = Field(0, description="Percent on demand above the base (0-100)")
    allocation_strategy: SpotAllocationStrategy = Field(
        "price-capacity-optimized", description="Spot allocation strategy"
    )

    def options(self) -> FleetSpotOptions:
        """The library's value type (checked with the fleet's instance type in :class:`FleetGroupConfig`)."""
        return FleetSpotOptions(**self.model_dump())  # the same keys


class CapacityReservationConfig(StrictModel):
    """An EC2 On-Demand Capacity Reservation (or a resource group of them) or a Capacity Block the group launches
    into. Synth is offline, so the reservation's zone and type are declared here and checked against the group's."""

    id: str | None = Field(None, description="Capacity Reservation id, cr- and 17 hex digits (or resource_group_arn)")
    resource_group_arn: str | None = Field(
        None, description="ARN of a resource group of Capacity Reservations (targeted only; or id)"
    )
    capacity_block: bool = Field(
        False, description="The reservation is a Capacity Block for ML (market capacity-block)"
    )
    availability_zone: str = Field(description="The reservation's AZ; the group launches only there")
    instance_type: str = Field(description="The reservation's instance type: the group's instance_type")
    instance_count: int | None = Field(None, description="Instances reserved (checked against the group's capacity)")
    preference: ReservationPreference = Field(
        "targeted", description="targeted: launch only into it; open: any open matching reservation, else on demand"
    )

    def reservation(self) -> FleetCapacityReservation:
        """The library's value type (checked with the group in :class:`FleetGroupConfig`)."""
        return FleetCapacityReservation(
            availability_zone=self.availability_zone,
            instance_type=self.instance_type,
            reservation_id=self.id,
            resource_group_arn=self.resource_group_arn,
            capacity_block=self.capacity_block,
            instance_count=self.instance_count,
            preference=self.preference,
        )


#: Keys of ``fleets.groups[]`` renamed with the library's ``FleetAlarms`` (old -> new): still read, with a warning.
RENAMED_GROUP_KEYS = {"idle_gpu_pct": "idle_gpu_percent"}


class FleetGroupConfig(StrictModel):
    """One EC2 GPU fleet (auto scaling group <resource_prefix>-<name>) on a Deep Learning AMI."""

    name: FleetName = Field(description="Fleet name, [a-z][a-z0-9-]{0,30}; the group is <resource_prefix>-<name>")
    instance_type: str = Field(
        description="EC2 NVIDIA GPU type from the catalog, no 'ml.' prefix (e.g. g5.xlarge); with instance_types: "
        "its first entry (may be left out)"
    )
    instance_types: tuple[str, ...] | None = Field(
        None,
        description="Ordered on-demand fallback list, first = instance_type (launched in order: prioritized); each "
        "checked against the first (GPU memory, GPUs per host, image CUDA/CPU architecture, EFA); null: one type",
    )
    max_cost_ratio: float | None = Field(
        None, description="With instance_types: refuse a fallback priced above this x the first (null: no ceiling)"
    )
    capacity_reservation: CapacityReservationConfig | None = Field(
        None, description="On-Demand Capacity Reservation or Capacity Block to launch into (null: none)"
    )
    min_capacity: int = Field(0, description="Minimum instances (0: no idle GPU cost)")
    max_capacity: int = Field(1, description="Maximum instances (1 or more)")
    desired_capacity: int | None = Field(None, description="Initial instances (null: min_capacity)")
    image: DlamiConfig = Field(default_factory=lambda: DlamiConfig(), description="The Deep Learning AMI")
    spot: FleetSpotConfig | None = Field(None, description="Spot mix with capacity rebalancing (null: on demand)")
    efa: bool = Field(False, description="One EFA interface per network card (EFA types only)")
    placement_group: bool = Field(False, description="Cluster placement group in one AZ")
    availability_zone: str | None = Field(None, description="AZ of a placement-group fleet (default: the first)")
    root_volume_gib: int = Field(200, description="gp3 root volume, GiB (100-16384), KMS-encrypted")
    data_volume_gib: int | None = Field(None, description="Extra gp3 data volume mounted at /data, GiB (null: none)")
    mount_lustre: bool = Field(True, description="Mount the FSx for Lustre file system when file_systems has one")
    datasets_prefix: S3KeyPrefix = Field("", description="Datasets-bucket prefix the instances may read ('' = all)")
    artifacts_prefix: S3KeyPrefix = Field("output/", description="Artifacts-bucket prefix the instances may write")
    idle_gpu_percent: float = Field(5, description="Idle alarm: average GPU utilization of the group below this")
    idle_minutes: int = Field(60, description="... for this long (a multiple of 5, up to 1440)")
    max_gpu_temperature_c: float = Field(85, description="Temperature alarm threshold, degrees Celsius")
    auto_stop: FleetAutoStopConfig = Field(
        default_factory=lambda: FleetAutoStopConfig(), description="Scale the group to 0 when its idle alarm fires"
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """A file with ``idle_gpu_pct`` keeps loading; the key warns with its new name (``FleetAlarms``'s)."""
        if not isinstance(data, dict):
            return data
        data = renamed_keywords("fleets.groups[]", data, RENAMED_GROUP_KEYS)
        types = data.get("instance_types")
        if "instance_type" not in data and isinstance(types, list | tuple) and types and isinstance(types[0], str):
            data = {**data, "instance_type": types[0]}  # the first choice is the group's type
        return data

    @field_validator("instance_type")
    @classmethod
    def _instance(cls, value: str) -> str:
        from gpu_constructs.catalog import require_nvidia_gpu

        require_nvidia_gpu(value, where="fleets.groups[].instance_type", usage="ec2")
        return value

    def dlami_image(self) -> DlamiImage:
        """The fleet's Deep Learning AMI, for the CPU architecture of its instance type."""
        from gpu_constructs.catalog import lookup

        return self.image.image(lookup(self.instance_type).cpu_arch)

    def fallback(self, *, with_cost_ceiling: bool = True) -> FleetFallback | None:
        """The library's fallback list (None without ``instance_types``)."""
        if self.instance_types is None:
            return None
        return FleetFallback(self.instance_types, self.max_cost_ratio if with_cost_ceiling else None)

    def capacity(self) -> FleetCapacity:
        return FleetCapacity(self.min_capacity, self.max_capacity, self.desired_capacity)

    def volumes(self) -> FleetVolumes:
        """The library's value type (loads the CDK runtime for its ``Size`` values)."""
        from aws_cdk import Size

        data = None if self.data_volume_gib is None else Size.gibibytes(self.data_volume_gib)
        return FleetVolumes(root_volume_size=Size.gibibytes(self.root_volume_gib), data_volume_size=data)

    def alarms(self) -> FleetAlarms:
        """The library's value type (loads the CDK runtime for its ``Duration``)."""
        from aws_cdk import Duration

        return FleetAlarms(
            idle_gpu_threshold_percent=self.idle_gpu_percent,
            idle_gpu_period=Duration.minutes(self.idle_minutes),
            max_gpu_temperature_celsius=self.max_gpu_temperature_c,
        )

    def fleet_props(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.fleet.GpuFleet` this group's settings give.

        The stack adds the fleet's name, the network, the data key, the file system when ``mount_lustre``, the
        monitoring key and topic, and the environment-wide settings; it grants the data prefixes.
        """
        return {
            "instance_type": self.instance_type,
            "image": self.dlami_image(),
            "capacity": self.capacity(),
            "spot": self.spot.options() if self.spot is not None else None,
            "fallback": self.fallback(),
            "capacity_reservation": (
                self.capacity_reservation.reservation() if self.capacity_reservation is not None else None
            ),
            "efa": self.efa,
            "placement_group": self.placement_group,
            "availability_zone": self.availability_zone,
            "volumes": self.volumes(),
            "alarms": self.alarms(),
        }

    @model_validator(mode="after")
    def _rules(self) -> FleetGroupConfig:
        """The library's rules of a fleet, naming this group's keys."""
        where = f"fleets.groups[{self.name}]"
        self.capacity().validate(where)
        image = self.dlami_image()
        instance = image.check_instance_type(self.instance_type, where=where)
        spot = self.spot.options() if self.spot else None
        # The cost ceiling needs the region: EnvConfig checks it (check_environment).
        types = resolve_instance_types(where, instance, image, self.fallback(with_cost_ceiling=False), spot, None)
        if self.max_cost_ratio is not None and self.instance_types is None:
            raise fail(where, "max_cost_ratio", self.max_cost_ratio, "null without instance_types (a fallback list)")
        if self.efa:
            param = "instance_types[]" if self.instance_types is not None else "spot.instance_types[]"
            check_efa(where, instance, types[1:], param=param)
        if self.capacity_reservation is not None:
            self.capacity_reservation.reservation().validate(
                where,
                instance=instance,
                instance_types=types,
                spot=spot is not None,
                capacity=self.capacity(),
                placement_zone=self.availability_zone if self.placement_group else None,
            )
        check_volume_gib(
            where, self.root_volume_gib, self.data_volume_gib, names=("root_volume_gib", "data_volume_gib")
        )
        # The period in whole minutes: checked here, as building its Duration would load the CDK runtime.
        FleetAlarms(
            idle_gpu_threshold_percent=self.idle_gpu_percent, max_gpu_temperature_celsius=self.max_gpu_temperature_c
        ).validate(where, names=("idle_gpu_percent", "idle_minutes", "max_gpu_temperature_c"))
        if not is_idle_gpu_minutes(self.idle_minutes):
            raise fail(where, "idle_minutes", self.idle_minutes, IDLE_GPU_PERIOD_ALLOWED)
        if self.availability_zone is not None and not self.placement_group:
            raise ValueError("availability_zone is set but placement_group is false; allowed: null")
        return self


class NotebookConfig(StrictModel):
    """One SageMaker notebook instance (<resource_prefix>-<name>) on a GPU type, checked at every start."""

    name: NotebookName = Field(
        description="Notebook name, [a-z][a-z0-9-]{0,30}; the instance is <resource_prefix>-<name>"
    )
    instance_type: str = Field("ml.g5.xlarge", description="SageMaker notebook type with the 'ml.' prefix")
    gpu: bool = Field(True, description="Require an NVIDIA GPU (a CPU type is then an error naming GPU types)")
    volume_gib: int = Field(50, description="ML storage volume, GiB (5-16384), KMS-encrypted")
    gpuctl_package_key: str | None = Field(
        None,
        description=(
            "Optional override: artifacts-bucket key of a wheel providing gpuctl that the start script installs "
            "instead of the platform's own (null: the stack ships the platform's wheel as an S3 asset; nothing "
            "to upload)"
        ),
    )
    mount_lustre: bool = Field(False, description="Mount the FSx for Lustre file system at start")
    datasets_prefix: S3KeyPrefix = Field("", description="Datasets-bucket prefix the notebook may read ('' = all)")
    artifacts_prefix: S3KeyPrefix = Field("notebooks/", description="Artifacts-bucket prefix the notebook may write")
    auto_stop: NotebookAutoStopConfig = Field(
        default_factory=lambda: NotebookAutoStopConfig(), description="Stop the notebook after a session limit"
    )

    @model_validator(mode="after")
    def _instance(self) -> NotebookConfig:
        from gpu_constructs.catalog import lookup, require_nvidia_gpu

        where = f"fleets.notebooks[{self.name}]"
        check_volume_size(where, self.volume_gib, "volume_gib")
        if self.gpuctl_package_key is not None:
            check_package_key(where, self.gpuctl_package_key, "gpuctl_package_key")
        where = f"{where}.instance_type"
        if self.gpu:
            require_nvidia_gpu(self.instance_type, where=where, usage="notebook")
        elif not self.instance_type.startswith("ml.") or not lookup(self.instance_type, where=where).valid_for(
            "notebook"
        ):
            raise ValueError(f"instance_type: {self.instance_type!r}; allowed: an ml.* SageMaker notebook type")
        if not self.artifacts_prefix:
            raise ValueError("artifacts_prefix: ''; allowed: a non-empty prefix such as 'notebooks/'")
        return self

    def notebook_props(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.notebook.GpuNotebook` this notebook's settings give
        (the stack adds the name, subnet, security group, data key, package and file system)."""
        from aws_cdk import Size

        return {"instance_type": self.instance_type, "gpu": self.gpu, "volume_size": Size.gibibytes(self.volume_gib)}


class FleetsConfig(StrictModel):
    """EC2 GPU fleets on Deep Learning AMIs and GPU notebook instances (fleets stack)."""

    groups: tuple[FleetGroupConfig, ...] = Field((), description="EC2 GPU fleets (auto scaling groups)")
    notebooks: tuple[NotebookConfig, ...] = Field((), description="SageMaker GPU notebook instances")
    log_retention_days: Retention = Field(30, description="Retention of the fleets' boot and kernel logs")
    notification_emails: EmailList = Field(
        (), description="E-mail addresses subscribed to the fleets' scaling notifications and alarms"
    )

    @model_validator(mode="after")
    def _unique(self) -> FleetsConfig:
        names = [g.name for g in self.groups] + [n.name for n in self.notebooks]
        dupes = duplicates(names)
        if dupes:
            raise ValueError(f"names {dupes} are used more than once; allowed: one fleet or notebook per name")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.groups or self.notebooks)

    def check_environment(self, region: str, zones: Sequence[str], lustre_zone: str | None) -> None:
        """The rules of each group that need the rest of the environment: the cost ceiling of a fallback list (priced
        in ``region``), and a reservation's zone (one of ``zones``, and the FSx for Lustre file system's zone
        ``lustre_zone`` when the group mounts it)."""
        for group in self.groups:
            where = f"fleets.groups[{group.name}]"
            fallback = group.fallback()
            if fallback is not None and fallback.max_cost_ratio is not None:
                image = group.dlami_image()
                instance = image.check_instance_type(group.instance_type, where=where)
                fallback.resolve(where, instance=instance, image=image, region=region)
            reservation = group.capacity_reservation
            if reservation is None:
                continue
            zone = reservation.availability_zone
            if zone not in zones:
                raise fail(
                    where, "capacity_reservation.availability_zone", zone, f"a configured AZ: {', '.join(zones)}"
                )
            if group.mount_lustre and lustre_zone is not None and zone != lustre_zone:
                raise fail(
                    where,
                    "capacity_reservation.availability_zone",
                    zone,
                    f"the FSx for Lustre file system's zone {lustre_zone} (file_systems.lustre.availability_zone): "
                    "the group launches only in the reservation's zone and would mount the file system across zones; "
                    "reserve capacity there, move the file system, or set mount_lustre: false",
                )
