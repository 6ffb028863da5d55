"""What a fleet's software calls, whether its subnets reach it, and the zone of a fleet that mounts Lustre."""

from __future__ import annotations

from collections.abc import Callable

import jsii
from aws_cdk import Annotations, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct, IValidation

from gpu_constructs.constants import FLEET_FEATURE_SERVICES, S3_GATEWAY, endpoint_service_name
from gpu_constructs.dlami import LUSTRE_INSTALL_ROUTE, DlamiImage, lustre_client_lines
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.file_systems.lustre_mount import LustreFileSystemLike
from gpu_constructs.fleet.capacity import FleetCapacityReservation
from gpu_constructs.network import NetworkReachability, infer_reachability, select_subnets

_INTERNET_PROBLEM = (
    "{feature} needs a package repository on the internet; allowed: a NAT path for the fleet's subnets (config "
    "network.nat_gateways >= 1, GpuNetwork(nat_gateways=...)), or an image that ships the client: a DLAMI line "
    "whose release notes list it ({lines}; config fleets.groups[].image), or a pinned image built with it "
    "(DlamiImage.pinned(..., lustre_client_preinstalled=True))"
)


def required_services(image: DlamiImage, file_system: LustreFileSystemLike | None) -> dict[str, tuple[str, ...]]:
    """Feature -> the endpoints (short names, ``s3``) or ``internet`` its software needs to reach."""
    needs = dict(FLEET_FEATURE_SERVICES)
    if file_system is not None:
        method = image.lustre_client_install
        route = LUSTRE_INSTALL_ROUTE[method]
        if route is not None:
            feature = f"Lustre client install ({method}, {image.os}: the DLAMI {image.line_name} does not ship it)"
            needs[feature] = (route,)
    return needs


def check_reachability(
    where: str, required: dict[str, tuple[str, ...]], reach: NetworkReachability, region: str
) -> None:
    """Raise naming each feature whose endpoint the subnets reach neither through an endpoint nor a NAT path."""
    shown_region = region if not is_token(region) else "<region>"
    problems: list[str] = []
    for feature, services in required.items():
        for service in reach.missing(services):
            if service == "internet":
                problems.append(_INTERNET_PROBLEM.format(feature=feature, lines=lustre_client_lines()))
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
        raise ValidationError(where, f"{'; '.join(problems)} (reachability: {reach.describe()})")


@jsii.implements(IValidation)
class InferredReachability:
    """Checks, when the app is synthesized, that the fleet's subnets reach what its software calls.

    Run in the validation phase so endpoints added to the VPC after the fleet was constructed count.
    """

    def __init__(
        self,
        fleet: Construct,
        vpc: ec2.IVpc,
        subnets: Callable[[], ec2.SubnetSelection],
        required: dict[str, tuple[str, ...]],
    ) -> None:
        self._fleet = fleet
        self._vpc = vpc
        self._subnets = subnets
        self._required = required

    def validate(self) -> list[str]:
        fleet = self._fleet
        try:
            reach = infer_reachability(self._vpc, self._subnets())
            check_reachability(path_of(fleet), self._required, reach, Stack.of(fleet).region)
        except ValidationError as exc:
            return [str(exc)]
        return []


def check_zone(where: str, vpc: ec2.IVpc, placement_group: bool, zone: str | None) -> str | None:
    """The AZ of the fleet: ``zone`` (an AZ of the VPC), or the VPC's first AZ for a placement group."""
    zones = [z for z in vpc.availability_zones if not is_token(z)]
    if zone is not None and zones and zone not in zones:
        raise fail(where, "availability_zone", zone, f"an AZ of the VPC: {', '.join(zones)}")
    if placement_group and zone is None:
        if not zones:
            raise fail(where, "availability_zone", zone, "an AZ name (a cluster placement group is in one AZ)")
        zone = zones[0]
    return zone


def zone_for_file_system(
    scope: Construct,
    vpc: ec2.IVpc,
    subnets: ec2.SubnetSelection,
    zone: str | None,
    file_system: LustreFileSystemLike | None,
    same_zone: bool,
) -> str | None:
    """The file system's AZ when the fleet may launch there and nowhere else is asked for; a warning when the
    fleet may launch in another AZ than the file system's."""
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
        reason = (
            "availability_zone / the placement group is elsewhere"
            if zone is not None
            else ("same_zone_as_file_system=False" if fs_zone in zones else "its subnets exclude that zone")
        )
        Annotations.of(scope).add_warning_v2(
            "gpu-constructs:lustre-cross-az",
            f"the fleet mounts an FSx for Lustre file system in {fs_zone} but may launch instances in "
            f"{', '.join(others)} ({reason}): every byte between a client and the file system in another "
            "Availability Zone is billed as inter-AZ data transfer in each direction, and every Lustre RPC "
            f"crosses zones (higher latency, lower throughput). Launch the fleet in {fs_zone} "
            "(same_zone_as_file_system=True, or availability_zone / subnets in that zone)",
        )
    return zone


def zone_for_reservation(
    where: str,
    vpc: ec2.IVpc,
    subnets: ec2.SubnetSelection,
    reservation: FleetCapacityReservation,
    file_system: LustreFileSystemLike | None,
) -> str:
    """The reservation's AZ, where the fleet launches; a ``ValidationError`` when the VPC, the fleet's subnets or
    the Lustre file system it mounts are elsewhere.

    A Capacity Reservation reserves capacity in one Availability Zone, and an instance launches into it only there:
    EC2 User Guide, "Launch instances using Capacity Blocks"
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html): "Your instance can't launch
    in a subnet in a different Availability Zone from the Availability Zone where your Capacity Block is located";
    an On-Demand Capacity Reservation matches instances on "instance type, platform, Availability Zone" (EC2 API,
    ``LaunchTemplateCapacityReservationSpecificationRequest``). An FSx for Lustre file system lives in one subnet
    of one zone; a fleet that must launch in the reservation's zone mounts it across zones (inter-AZ transfer on
    every byte, higher latency), so the zones must be the same.
    """
    zone = reservation.availability_zone
    fs_zone = getattr(file_system, "availability_zone", None) if file_system is not None else None
    if isinstance(fs_zone, str) and not is_token(fs_zone) and fs_zone != zone:
        raise fail(
            where,
            "capacity_reservation.availability_zone",
            zone,
            f"the zone of the FSx for Lustre file "
            f"system the fleet mounts ({fs_zone}): the fleet launches only in the reservation's zone and "
            "would read the file system across zones; reserve capacity there, or move the file system "
            "(file_systems.lustre.availability_zone)",
        )
    zones = [z for z in vpc.availability_zones if not is_token(z)]
    if zones and zone not in zones:
        raise fail(where, "capacity_reservation.availability_zone", zone, f"an AZ of the VPC: {', '.join(zones)}")
    try:
        selected = [z for z in select_subnets(vpc, subnets).availability_zones if not is_token(z)]
    except Exception:
        return zone  # subnets the VPC cannot list at synth: the deploy checks them
    if selected and zone not in selected:
        raise fail(
            where,
            "capacity_reservation.availability_zone",
            zone,
            f"an AZ of the fleet's subnets: {', '.join(sorted(set(selected)))}",
        )
    return zone


def narrow_subnets(subnets: ec2.SubnetSelection, zone: str | None) -> ec2.SubnetSelection:
    """``subnets`` limited to ``zone`` (when one is set)."""
    if zone is not None and subnets.subnets:
        in_zone = [sn for sn in subnets.subnets if sn.availability_zone == zone]
        return ec2.SubnetSelection(subnets=in_zone or list(subnets.subnets))
    if zone is not None:
        return ec2.SubnetSelection(
            subnet_group_name=subnets.subnet_group_name,
            subnet_type=None if subnets.subnet_group_name else subnets.subnet_type,
            availability_zones=[zone],
        )
    return subnets
