"""Where a fleet's GPUs come from: an ordered on-demand fallback list and an EC2 capacity reservation.

No CDK runtime is loaded here, so the config model shares these rules (as it shares :mod:`.options`).

**Fallback list** (:class:`FleetFallback`). The group launches its types in list order: the launch template's
overrides, in that order, with the On-Demand allocation strategy ``prioritized``. botocore 1.44.8, service
``autoscaling``, shape ``InstancesDistribution.OnDemandAllocationStrategy``: "prioritized: You set the order of
instance types for the launch template overrides from highest to lowest priority (from first to last in the
list). Amazon EC2 Auto Scaling launches your highest priority instance types first. If all your On-Demand
capacity cannot be fulfilled using your highest priority instance type, then Amazon EC2 Auto Scaling launches the
remaining capacity using the second priority instance type, and so on." At most 40 types: shape
``LaunchTemplateOverrides.InstanceType``: "You can specify up to 40 instance types per Auto Scaling group."
Every type is checked against the first with the catalog
(:func:`~gpu_constructs.catalog.fallback.check_fallback_chain`: an NVIDIA GPU type, the image's CUDA, at least the
first choice's GPU memory, the same GPUs per host, an optional cost ceiling) and against the DLAMI
(:meth:`~gpu_constructs.dlami.DlamiImage.check_instance_type`: one AMI, so one CPU architecture and a driver that
drives every GPU). One launch template describes the network cards, so with EFA every type has the same number of
EFA interfaces (:func:`~gpu_constructs.fleet.options.check_efa`). A cluster placement group may hold several types;
the EC2 User Guide ("Placement strategies", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html)
recommends one ("Use the same instance type for all instances in the placement group. [...] if you try to launch
more than one instance type in the placement group, you increase your chances of getting an insufficient capacity
error"); a fallback is used only when the first type has no capacity, which is when it helps.

**Capacity reservation** (:class:`FleetCapacityReservation`), rendered in the launch template's
``CapacityReservationSpecification``. The EC2 API (``LaunchTemplateCapacityReservationSpecificationRequest``,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplateCapacityReservationSpecificationRequest.html):
"You can specify only one option at a time. Use the ``CapacityReservationPreference`` parameter to configure the
instance to run in On-Demand capacity or to run in any ``open`` Capacity Reservation that has matching attributes
(instance type, platform, Availability Zone). Use the ``CapacityReservationTarget`` parameter to explicitly target
a specific Capacity Reservation or a Capacity Reservation group." So ``targeted`` (default) renders the target
alone and ``open`` the preference alone. A Capacity Block adds ``InstanceMarketOptions.MarketType:
capacity-block`` (EC2 Auto Scaling User Guide, "Use Capacity Blocks for machine learning workloads",
https://docs.aws.amazon.com/autoscaling/ec2/userguide/launch-template-capacity-blocks.html: "Capacity Blocks are
delivered as ``targeted`` capacity reservations in a single Availability Zone. When you create your launch
template, specify the Capacity Block's reservation ID and instance type. Then, update your Auto Scaling group to
use the launch template you created and the Capacity Block's Availability Zone."). Synth is offline, so the
reservation's zone and type are declared, and checked against the fleet's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from gpu_constructs.errors import ValidationError, fail

if TYPE_CHECKING:
    from gpu_constructs.catalog import InstanceType
    from gpu_constructs.dlami import DlamiImage
    from gpu_constructs.fleet.options import FleetCapacity, FleetSpotOptions

__all__ = [
    "CAPACITY_BLOCK_INSTANCE_TYPES",
    "CAPACITY_BLOCK_MAX_INSTANCES",
    "CAPACITY_RESERVATION_ID_ALLOWED",
    "MAX_INSTANCE_TYPES",
    "FleetCapacityReservation",
    "FleetFallback",
    "ReservationPreference",
    "is_capacity_reservation_id",
    "is_resource_group_arn",
    "resolve_instance_types",
]

#: botocore ``autoscaling`` ``LaunchTemplateOverrides.InstanceType``: "up to 40 instance types per Auto Scaling group".
MAX_INSTANCE_TYPES = 40

#: A Capacity Reservation id: ``cr-`` and 17 hexadecimal digits. botocore's ``autoscaling``
#: ``CapacityReservationIds`` members (``AsciiStringMaxLen255``) allow ``[A-Za-z0-9\-_\/]+``, 1-255 characters;
#: EC2 resource ids are a resource prefix, a hyphen and 17 characters (EC2 User Guide, "Resource IDs",
#: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/resource-ids.html: "a resource-specific prefix,
#: followed by a hyphen and a unique combination of letters and numbers ... 17 characters"), for Capacity
#: Reservations ``cr-`` (as every example of the EC2 API Reference shows, e.g. ``cr-1234567890abcdef1``).
_CAPACITY_RESERVATION_ID_RE = re.compile(r"^cr-[0-9a-f]{17}$")
CAPACITY_RESERVATION_ID_ALLOWED = "'cr-' and 17 lowercase hexadecimal digits (e.g. cr-0123456789abcdef0)"
#: A resource group ARN: botocore 1.44.8 ``resource-groups`` shape ``GroupArn`` (its pattern, anchored).
_RESOURCE_GROUP_ARN_RE = re.compile(
    r"^arn:aws(-[a-z]+)*:resource-groups:[a-z]{2}(-[a-z]+)+-\d{1}:[0-9]{12}:group/"
    r"([a-zA-Z0-9_\.-]{1,300}|[a-zA-Z0-9_\.-]{1,150}/[a-z0-9]{26})$"
)

#: The NVIDIA GPU types Capacity Blocks sell. EC2 User Guide, "Capacity Blocks for ML"
#: (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html): "Capacity Blocks are currently
#: available for p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p4d.24xlarge, trn1.32xlarge, and trn2.48xlarge
#: instances"; AWS PCS User Guide, "Using Amazon EC2 Capacity Blocks for ML with AWS PCS"
#: (https://docs.aws.amazon.com/pcs/latest/userguide/capacity-blocks.html): "Capacity Blocks with P6-B300, P6-B200,
#: P5en, P5e, P5, and P4d instance families". (Trainium types have no NVIDIA GPU, so a fleet cannot use them.)
CAPACITY_BLOCK_INSTANCE_TYPES: tuple[str, ...] = (
    "p4d.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
)
#: EC2 User Guide, "Capacity Blocks for ML": "Each Capacity Block can have up to 64 instances".
CAPACITY_BLOCK_MAX_INSTANCES = 64

ReservationPreference = Literal["targeted", "open"]
_PREFERENCES: tuple[str, ...] = get_args(ReservationPreference)


def is_capacity_reservation_id(value: object) -> bool:
    return isinstance(value, str) and bool(_CAPACITY_RESERVATION_ID_RE.match(value))


def is_resource_group_arn(value: object) -> bool:
    return isinstance(value, str) and bool(_RESOURCE_GROUP_ARN_RE.match(value))


@dataclass(frozen=True)
class FleetFallback:
    """An ordered on-demand fallback list: the first type is the fleet's ``instance_type``, the others are launched
    in order when the ones before have no capacity.

    :param instance_types: EC2 GPU types, first choice first, at most 40.
    :param max_cost_ratio: refuse a type whose on-demand price is more than this many times the first choice's
        (prices: :mod:`gpu_constructs.catalog.pricing`). Default: no ceiling.
    """

    instance_types: Sequence[str]
    max_cost_ratio: float | None = None

    def resolve(
        self, where: str, *, instance: InstanceType, image: DlamiImage, region: str | None
    ) -> tuple[InstanceType, ...]:
        """The catalog entries of the list, in order; a ``ValidationError`` at ``where`` for a list that does not fit
        a fleet of ``instance`` on ``image``. ``region`` prices the cost ceiling (None: not known at synth, so a
        ceiling cannot be checked and is an error)."""
        from gpu_constructs.catalog.fallback import check_fallback_chain

        names = list(self.instance_types) if not isinstance(self.instance_types, str) else self.instance_types
        if not isinstance(names, list) or not names:
            raise fail(where, "instance_types", names, "an ordered list of 1 to 40 EC2 GPU types, first choice first")
        if len(names) > MAX_INSTANCE_TYPES:
            raise fail(
                where,
                "instance_types",
                f"{len(names)} types",
                f"at most {MAX_INSTANCE_TYPES} (EC2 Auto Scaling: up to 40 instance types per Auto Scaling group)",
            )
        if names[0] != instance.name:
            raise fail(
                where,
                "instance_types[0]",
                names[0],
                f"the fleet's instance_type {instance.name!r} (the "
                "first choice; the others are its fallbacks, in order)",
            )
        if self.max_cost_ratio is not None and region is None:
            raise fail(
                where,
                "max_cost_ratio",
                self.max_cost_ratio,
                "no ceiling when the stack's region is not known at synth (the price table is per region)",
            )
        resolved = check_fallback_chain(
            names,
            usage="ec2",
            where=where,
            param="instance_types",
            cuda_version=image.cuda_version,
            max_cost_ratio=self.max_cost_ratio,
            region=region or "us-east-1",
            max_entries=MAX_INSTANCE_TYPES,
        )
        for i, name in enumerate(names[1:], start=1):
            image.check_instance_type(name, where=where, param=f"instance_types[{i}]")
        return tuple(resolved)


@dataclass(frozen=True)
class FleetCapacityReservation:
    """An EC2 On-Demand Capacity Reservation, a Capacity Reservation resource group or a Capacity Block that the
    fleet launches into.

    :param availability_zone: the reservation's zone (e.g. ``us-west-2a``); the fleet launches only there.
    :param instance_type: the reservation's instance type: the fleet's ``instance_type``.
    :param reservation_id: the reservation (``cr-`` and 17 hex digits). Give this or ``resource_group_arn``.
    :param resource_group_arn: a resource group of Capacity Reservations (``targeted`` only).
    :param capacity_block: the reservation is a Capacity Block for ML (default: False).
    :param instance_count: the instances it reserves (default: not declared, not checked).
    :param preference: ``targeted`` (default): launch into this reservation only; ``open``: launch into any open
        reservation with matching attributes and on demand when none has room.
    """

    availability_zone: str
    instance_type: str
    reservation_id: str | None = None
    resource_group_arn: str | None = None
    capacity_block: bool = False
    instance_count: int | None = None
    preference: ReservationPreference = "targeted"

    @property
    def targeted(self) -> bool:
        return self.preference == "targeted"

    def describe(self) -> str:
        kind = "Capacity Block" if self.capacity_block else "Capacity Reservation"
        name = self.reservation_id or self.resource_group_arn or "(open)"
        return f"{kind} {name} ({self.instance_type} in {self.availability_zone})"

    def validate(
        self,
        where: str,
        *,
        instance: InstanceType,
        instance_types: Sequence[str],
        spot: bool,
        capacity: FleetCapacity,
        placement_zone: str | None = None,
    ) -> None:
        """Raise a ``ValidationError`` at ``where`` unless this reservation fits a fleet of ``instance`` that may
        launch ``instance_types`` (its fallback list, or just ``instance``), with a spot mix when ``spot``, within
        ``capacity`` and (with a placement group) in ``placement_zone``."""
        self._validate_target(where)
        if self.instance_type != instance.name:
            raise fail(
                where,
                "capacity_reservation.instance_type",
                self.instance_type,
                f"the fleet's instance_type "
                f"{instance.name!r}: a reservation holds one instance type and launches only that type",
            )
        if placement_zone is not None and placement_zone != self.availability_zone:
            raise fail(
                where,
                "availability_zone",
                placement_zone,
                f"the reservation's zone {self.availability_zone!r} "
                "(the placement group and the reservation must be in one Availability Zone)",
            )
        if self.instance_count is not None:
            if (
                isinstance(self.instance_count, bool)
                or not isinstance(self.instance_count, int)
                or self.instance_count < 1
            ):
                raise fail(where, "capacity_reservation.instance_count", self.instance_count, "a whole number >= 1")
            if self.targeted and capacity.min_capacity > self.instance_count:
                raise fail(
                    where,
                    "min_capacity",
                    capacity.min_capacity,
                    f"at most the reservation's instance_count "
                    f"({self.instance_count}): a targeted launch beyond the reservation fails, so the group "
                    "could never keep its minimum",
                )
        if self.capacity_block:
            self._validate_capacity_block(where, instance_types, spot, capacity)
        elif self.targeted and (len(instance_types) > 1 or spot):
            what = "a fallback list" if len(instance_types) > 1 else "a spot mix"
            raise ValidationError(
                where,
                f"capacity_reservation (targeted) with {what}: every launch of the group "
                f"targets {self.reservation_id or self.resource_group_arn}, which holds only "
                f"{self.instance_type} On-Demand capacity, so other types and spot launches fail; "
                "allowed: one instance type and no spot with a targeted reservation, or "
                "preference 'open' (other types and spot then run outside the reservation)",
            )

    def _validate_target(self, where: str) -> None:
        if self.preference not in _PREFERENCES:
            raise fail(where, "capacity_reservation.preference", self.preference, ", ".join(map(repr, _PREFERENCES)))
        if self.reservation_id is not None and self.resource_group_arn is not None:
            raise ValidationError(
                where,
                "capacity_reservation sets both id and resource_group_arn; allowed: one "
                "(a launch template targets one reservation or one resource group)",
            )
        if self.reservation_id is None and self.resource_group_arn is None:
            raise ValidationError(
                where,
                "capacity_reservation names no reservation; allowed: id (cr-...) or "
                "resource_group_arn (arn:aws:resource-groups:...)",
            )
        if self.reservation_id is not None and not is_capacity_reservation_id(self.reservation_id):
            raise fail(where, "capacity_reservation.id", self.reservation_id, CAPACITY_RESERVATION_ID_ALLOWED)
        if self.resource_group_arn is not None:
            if not is_resource_group_arn(self.resource_group_arn):
                raise fail(
                    where,
                    "capacity_reservation.resource_group_arn",
                    self.resource_group_arn,
                    "arn:<partition>:resource-groups:<region>:<account>:group/<name>",
                )
            if not self.targeted:
                raise fail(
                    where,
                    "capacity_reservation.preference",
                    self.preference,
                    "'targeted' with a resource "
                    "group (the launch template takes a target or the 'open' preference, not both)",
                )

    def _validate_capacity_block(
        self, where: str, instance_types: Sequence[str], spot: bool, capacity: FleetCapacity
    ) -> None:
        """Capacity Blocks: one reservation id, targeted, a type Capacity Blocks sell, no fallback and no spot (the
        launch template's one market type is ``capacity-block``), 1-64 instances, and a group that rests at zero
        (AWS: "Scale in your Auto Scaling group to zero more than 30 minutes before the Capacity Block reservation
        end time"; "When your Capacity Block reservation begins, use scheduled scaling to launch the same number of
        instances as your Capacity Block reservation")."""
        if self.reservation_id is None or not self.targeted:
            raise ValidationError(
                where,
                "capacity_reservation.capacity_block needs id (cr-...) and preference "
                "'targeted': Capacity Blocks are delivered as targeted reservations and a launch "
                "names the block's reservation id",
            )
        if self.instance_type not in CAPACITY_BLOCK_INSTANCE_TYPES:
            raise fail(
                where,
                "capacity_reservation.instance_type",
                self.instance_type,
                "a type Capacity Blocks sell: " + ", ".join(CAPACITY_BLOCK_INSTANCE_TYPES),
            )
        if len(instance_types) > 1 or spot:
            what = "a fallback list (instance_types)" if len(instance_types) > 1 else "a spot mix (spot)"
            raise ValidationError(
                where,
                f"capacity_reservation.capacity_block with {what}: the launch template's "
                "market type is capacity-block (one market type per template, spot or "
                "capacity-block) and the block holds one instance type; allowed: one instance "
                "type and no spot",
            )
        if self.instance_count is not None and self.instance_count > CAPACITY_BLOCK_MAX_INSTANCES:
            raise fail(
                where,
                "capacity_reservation.instance_count",
                self.instance_count,
                f"1-{CAPACITY_BLOCK_MAX_INSTANCES} (a Capacity Block has up to 64 instances)",
            )
        if capacity.min_capacity > 0 or (capacity.desired_capacity or 0) > 0:
            raise fail(
                where,
                "min_capacity/desired_capacity",
                (capacity.min_capacity, capacity.desired_capacity),
                "0 with a Capacity Block: launches before the block starts fail, and EC2 terminates its "
                "instances when it ends; scale the group up (scheduled scaling) while the block is "
                "active",
            )


def resolve_instance_types(
    where: str,
    instance: InstanceType,
    image: DlamiImage,
    fallback: FleetFallback | None,
    spot: FleetSpotOptions | None,
    region: str | None,
) -> tuple[str, ...]:
    """Every type the group may launch, first choice first: the fallback list, or the fleet's type and the spot
    mix's further types. One list: a fallback list and ``spot.instance_types`` together are an error (the launch
    template overrides are one list for On-Demand and spot)."""
    spot_types = spot.further_types(where, instance, image) if spot is not None else ()
    if fallback is None:
        return (instance.name, *spot_types)
    if spot_types:
        raise ValidationError(
            where,
            f"instance_types={list(fallback.instance_types)!r} and spot.instance_types={list(spot_types)!r} are both "
            "set; allowed: one list of types, instance_types (its order is the On-Demand priority; spot uses the "
            "allocation strategy over the same types), with spot.instance_types left empty",
        )
    return tuple(it.name for it in fallback.resolve(where, instance=instance, image=image, region=region))
