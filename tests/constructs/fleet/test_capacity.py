"""GpuFleet capacity: an ordered on-demand fallback list (prioritized overrides) and EC2 capacity reservations
(On-Demand Capacity Reservations, resource groups, Capacity Blocks), each refusal with its own message."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from constructs import Construct

from gpu_constructs.dlami import DlamiImage
from gpu_constructs.errors import ValidationError
from gpu_constructs.fleet import FleetCapacity, FleetSpotOptions, GpuFleet, LustreMount
from gpu_constructs.fleet.capacity import FleetCapacityReservation, FleetFallback
from gpu_constructs.network import NetworkReachability
from gpu_constructs.rules import check_template

CR = "cr-0123456789abcdef0"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:111122223333:group/gpu-reservations"


class _Lustre(Construct):
    """A Lustre file system in us-east-1b, as the platform's construct reports it."""

    availability_zone = "us-east-1b"
    dns_name = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
    mount_name = "abcdefgh"

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        group = ec2.SecurityGroup.from_security_group_id(self, "Sg", "sg-0123456789abcdef1")
        self.connections = ec2.Connections(security_groups=[group], default_port=ec2.Port.tcp_range(988, 1023))


def _fleet(stack: cdk.Stack | None = None, **overrides: Any) -> GpuFleet:
    stack = stack or cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a", "us-east-1b"],
        isolated_subnet_ids=["subnet-a", "subnet-b"],
    )  # fmt: skip
    kwargs: dict[str, Any] = {
        "vpc": vpc, "fleet_name": "f", "instance_type": "g5.xlarge",
        "volume_key": kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-east-1:111122223333:key/k"),
        "reachability": NetworkReachability(internet=True),
    }  # fmt: skip
    if overrides.pop("zoned_lustre", False):
        kwargs["lustre"] = LustreMount(_Lustre(stack, "Lustre"), open_ports=False)
    kwargs.update(overrides)
    return GpuFleet(stack, "Fleet", **kwargs)


def _resource(fleet: GpuFleet, kind: str) -> dict[str, Any]:
    resources = assertions.Template.from_stack(cdk.Stack.of(fleet)).find_resources(kind)
    assert len(resources) == 1
    return next(iter(resources.values()))["Properties"]


def _reservation(**overrides: Any) -> FleetCapacityReservation:
    kwargs: dict[str, Any] = {"availability_zone": "us-east-1b", "instance_type": "g5.xlarge", "reservation_id": CR}
    kwargs.update(overrides)
    return FleetCapacityReservation(**kwargs)


# --------------------------------------------------------------------------------------------------
# Fallback lists
# --------------------------------------------------------------------------------------------------


def test_a_fallback_list_launches_its_types_in_order_on_demand() -> None:
    fleet = _fleet(fallback=FleetFallback(["g5.xlarge", "g6.xlarge", "g5.2xlarge"], max_cost_ratio=1.25))
    group = _resource(fleet, "AWS::AutoScaling::AutoScalingGroup")
    policy = group["MixedInstancesPolicy"]
    assert policy["InstancesDistribution"] == {
        "OnDemandAllocationStrategy": "prioritized",
        "OnDemandBaseCapacity": 0,
        "OnDemandPercentageAboveBaseCapacity": 100,
    }
    assert [o["InstanceType"] for o in policy["LaunchTemplate"]["Overrides"]] == [
        "g5.xlarge",
        "g6.xlarge",
        "g5.2xlarge",
    ]
    assert "CapacityRebalance" not in group and "LaunchTemplate" not in group
    assert fleet.instance_types == ("g5.xlarge", "g6.xlarge", "g5.2xlarge") and fleet.gpu_count == 1
    dashboard = _resource(fleet, "AWS::CloudWatch::Dashboard")
    assert "(then g6.xlarge, g5.2xlarge)" in str(dashboard["DashboardBody"])


def test_a_fallback_list_with_a_spot_mix_shares_its_types() -> None:
    spot = FleetSpotOptions(on_demand_base_capacity=1, allocation_strategy="capacity-optimized-prioritized")
    fleet = _fleet(fallback=FleetFallback(["g5.xlarge", "g6.xlarge"]), spot=spot)
    group = _resource(fleet, "AWS::AutoScaling::AutoScalingGroup")
    distribution = group["MixedInstancesPolicy"]["InstancesDistribution"]
    assert distribution == {
        "OnDemandAllocationStrategy": "prioritized",
        "OnDemandBaseCapacity": 1,
        "OnDemandPercentageAboveBaseCapacity": 0,
        "SpotAllocationStrategy": "capacity-optimized-prioritized",
    }
    assert group["CapacityRebalance"] is True and fleet.spot_types == ("g6.xlarge",)


def test_one_type_without_spot_launches_from_the_template() -> None:
    group = _resource(_fleet(fallback=FleetFallback(["g5.xlarge"])), "AWS::AutoScaling::AutoScalingGroup")
    assert "MixedInstancesPolicy" not in group and "LaunchTemplate" in group


def test_an_efa_placement_fleet_falls_back_to_a_type_with_as_many_efa_cards() -> None:
    fleet = _fleet(
        instance_type="p5.48xlarge", efa=True, placement_group=True,
        fallback=FleetFallback(["p5.48xlarge", "p5e.48xlarge"]),
    )  # fmt: skip
    assert fleet.instance_types == ("p5.48xlarge", "p5e.48xlarge") and fleet.efa_interfaces == 32


ARM_BASE = DlamiImage.from_ssm(cpu_arch="arm64")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (  # not an NVIDIA GPU type
            {"fallback": FleetFallback(["g5.xlarge", "m5.xlarge"])},
            r"instance_types\[1\]='m5.xlarge' has no NVIDIA GPU",
        ),
        (  # the image's CUDA cannot drive the fallback's GPU
            {
                "instance_type": "p5.48xlarge",
                "image": DlamiImage.from_ssm(cuda_version="12.4"),
                "fallback": FleetFallback(["p5.48xlarge", "p6-b200.48xlarge"]),
            },
            r"instance_types\[1\]='p6-b200.48xlarge' with cuda_version='12.4': CUDA 12.4 cannot drive the NVIDIA B200",
        ),
        (  # less GPU memory than the first choice
            {"instance_type": "g6e.xlarge", "fallback": FleetFallback(["g6e.xlarge", "g5.xlarge"])},
            r"instance_types\[1\]='g5.xlarge' has 22.4 GiB per GPU, less than the 44.7 GiB of the first choice",
        ),
        (  # another GPU count per host (the world size)
            {"fallback": FleetFallback(["g5.xlarge", "g5.12xlarge"])},
            r"instance_types\[1\]='g5.12xlarge' x 1 gives 4 GPUs but the first choice 'g5.xlarge' gives 1",
        ),
        (  # above the cost ceiling
            {"fallback": FleetFallback(["g5.xlarge", "g5.2xlarge"], max_cost_ratio=1.1)},
            r"instance_types\[1\]='g5.2xlarge' x 1 costs \$1.21/hour, 1.20 x the first choice .* at most "
            r"max_cost_ratio=1.1",
        ),
        (  # another CPU architecture than the image's
            {"instance_type": "g5g.xlarge", "image": ARM_BASE, "fallback": FleetFallback(["g5g.xlarge", "g5.xlarge"])},
            r"instance_types\[1\]='g5.xlarge' cannot run .*built for arm64 but 'g5.xlarge' has x86_64 CPUs",
        ),
        (  # the first entry is not the fleet's type
            {"fallback": FleetFallback(["g6.xlarge", "g5.xlarge"])},
            r"instance_types\[0\]='g6.xlarge' is not allowed; allowed: the fleet's instance_type 'g5.xlarge'",
        ),
        (  # two lists
            {
                "fallback": FleetFallback(["g5.xlarge", "g6.xlarge"]),
                "spot": FleetSpotOptions(instance_types=["g6.xlarge"]),
            },
            r"instance_types=\['g5.xlarge', 'g6.xlarge'\] and spot.instance_types=\['g6.xlarge'\] are both set",
        ),
        (  # EFA cards differ
            {"instance_type": "p5.48xlarge", "efa": True, "fallback": FleetFallback(["p5.48xlarge", "p5en.48xlarge"])},
            r"instance_types\[\]='p5en.48xlarge' is not allowed; allowed: types with 32 EFA interface\(s\)",
        ),
        (  # a type named twice
            {"fallback": FleetFallback(["g5.xlarge", "g5.xlarge"])},
            r"instance_types\[1\]='g5.xlarge' repeats instance_types\[0\]",
        ),
        (  # more than EC2 Auto Scaling takes
            {"fallback": FleetFallback(["g5.xlarge"] * 41)},
            r"instance_types='41 types' is not allowed; allowed: at most 40",
        ),
    ],
)
def test_fallback_refusals(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _fleet(**overrides)


def test_a_cost_ceiling_needs_a_known_region() -> None:
    stack = cdk.Stack(cdk.App(), "T")  # region unresolved
    with pytest.raises(ValidationError, match=r"max_cost_ratio=1.5 is not allowed; allowed: no ceiling when"):
        _fleet(stack, fallback=FleetFallback(["g5.xlarge", "g6.xlarge"], max_cost_ratio=1.5))


# --------------------------------------------------------------------------------------------------
# Capacity reservations
# --------------------------------------------------------------------------------------------------


def test_a_targeted_reservation_is_the_launch_template_target_in_its_zone() -> None:
    fleet = _fleet(capacity_reservation=_reservation(instance_count=2), capacity=FleetCapacity(0, 2))
    data = _resource(fleet, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": CR}}
    assert "InstanceMarketOptions" not in data
    assert _resource(fleet, "AWS::AutoScaling::AutoScalingGroup")["VPCZoneIdentifier"] == ["subnet-b"]
    annotations = assertions.Annotations.from_stack(cdk.Stack.of(fleet))
    assert not annotations.find_warning("*", assertions.Match.string_like_regexp("reservation"))


def test_a_resource_group_and_the_open_preference_render_one_option_each() -> None:
    grouped = _fleet(capacity_reservation=_reservation(reservation_id=None, resource_group_arn=GROUP_ARN))
    data = _resource(grouped, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    target = {"CapacityReservationResourceGroupArn": GROUP_ARN}
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": target}
    opened = _fleet(
        capacity_reservation=_reservation(preference="open"), fallback=FleetFallback(["g5.xlarge", "g6.xlarge"])
    )
    data = _resource(opened, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {"CapacityReservationPreference": "open"}


def test_a_capacity_block_sets_the_market_type_and_passes_the_rule_pack() -> None:
    fleet = _fleet(
        instance_type="p5.48xlarge", efa=True,
        capacity_reservation=_reservation(instance_type="p5.48xlarge", capacity_block=True, instance_count=2),
        capacity=FleetCapacity(0, 4),
    )  # fmt: skip
    data = _resource(fleet, "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": CR}}
    stack = cdk.Stack.of(fleet)
    template = assertions.Template.from_stack(stack).to_json()
    assert check_template(template, rules=["FleetCapacityBlockMarketType"]) == []
    warnings = assertions.Annotations.from_stack(stack).find_warning(
        "*", assertions.Match.string_like_regexp("max_capacity 4 is more than the 2 instance")
    )
    assert len(warnings) == 1


ZONED = {"zoned_lustre": True}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"capacity_reservation": _reservation(reservation_id="cr-123")},
            r"capacity_reservation.id='cr-123' is not "
            r"allowed; allowed: 'cr-' and 17 lowercase hexadecimal digits",
        ),
        (
            {"capacity_reservation": _reservation(resource_group_arn=GROUP_ARN)},
            r"capacity_reservation sets both id and resource_group_arn",
        ),
        ({"capacity_reservation": _reservation(reservation_id=None)}, r"capacity_reservation names no reservation"),
        (
            {"capacity_reservation": _reservation(reservation_id=None, resource_group_arn="arn:aws:iam::1:group/x")},
            r"capacity_reservation.resource_group_arn='arn:aws:iam::1:group/x' is not allowed",
        ),
        (
            {"capacity_reservation": _reservation(instance_type="g6.xlarge")},
            r"capacity_reservation.instance_type='g6.xlarge' is not allowed; allowed: the fleet's instance_type",
        ),
        (
            {"capacity_reservation": _reservation(), "fallback": FleetFallback(["g5.xlarge", "g6.xlarge"])},
            r"capacity_reservation \(targeted\) with a fallback list",
        ),
        (
            {"capacity_reservation": _reservation(), "spot": FleetSpotOptions()},
            r"capacity_reservation \(targeted\) with a spot mix",
        ),
        (
            {"capacity_reservation": _reservation(instance_count=1), "capacity": FleetCapacity(2, 3)},
            r"min_capacity=2 is not allowed; allowed: at most the reservation's instance_count \(1\)",
        ),
        (
            {
                "capacity_reservation": _reservation(
                    preference="open", reservation_id=None, resource_group_arn=GROUP_ARN
                )
            },
            r"capacity_reservation.preference='open' is not allowed; allowed: 'targeted' with a resource group",
        ),
        (
            {"capacity_reservation": _reservation(availability_zone="us-east-1c")},
            r"capacity_reservation.availability_zone='us-east-1c' is not allowed; allowed: an AZ of the VPC",
        ),
        (
            {"capacity_reservation": _reservation(availability_zone="us-east-1a"), **ZONED},
            r"capacity_reservation.availability_zone='us-east-1a' is not allowed; allowed: the zone of the FSx for "
            r"Lustre file system the fleet mounts \(us-east-1b\)",
        ),
        (
            {
                "instance_type": "p5.48xlarge",
                "placement_group": True,
                "availability_zone": "us-east-1a",
                "capacity_reservation": _reservation(instance_type="p5.48xlarge"),
            },
            r"availability_zone='us-east-1a' is not allowed; allowed: the reservation's zone 'us-east-1b'",
        ),
        (
            {"capacity_reservation": _reservation(capacity_block=True)},
            r"capacity_reservation.instance_type='g5.xlarge' is not allowed; allowed: a type Capacity Blocks sell",
        ),
        (
            {
                "instance_type": "p5.48xlarge",
                "spot": FleetSpotOptions(),
                "capacity_reservation": _reservation(instance_type="p5.48xlarge", capacity_block=True),
            },
            r"capacity_block with a spot mix \(spot\): the launch template's market type is capacity-block",
        ),
        (
            {
                "instance_type": "p5.48xlarge",
                "capacity": FleetCapacity(1, 2),
                "capacity_reservation": _reservation(instance_type="p5.48xlarge", capacity_block=True),
            },
            r"min_capacity/desired_capacity=\(1, None\) is not allowed; allowed: 0 with a Capacity Block",
        ),
        (
            {
                "instance_type": "p5.48xlarge",
                "capacity": FleetCapacity(0, 2),
                "capacity_reservation": _reservation(
                    instance_type="p5.48xlarge", capacity_block=True, instance_count=65
                ),
            },
            r"capacity_reservation.instance_count=65 is not allowed; allowed: 1-64",
        ),
        (
            {
                "instance_type": "p5.48xlarge",
                "capacity_reservation": _reservation(
                    instance_type="p5.48xlarge", capacity_block=True, preference="open"
                ),
            },
            r"capacity_block needs id \(cr-...\) and preference 'targeted'",
        ),
    ],
)
def test_reservation_refusals(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _fleet(**overrides)
