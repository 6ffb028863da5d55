"""How a fleet's group buys its instances: the types it may launch, in order, the mixed instances policy that
launches them, and the capacity reservation its launch template targets (rules: :mod:`.capacity`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2

if TYPE_CHECKING:
    from gpu_constructs.fleet.capacity import FleetCapacityReservation
    from gpu_constructs.fleet.options import FleetSpotOptions

__all__ = ["apply_reservation", "mixed_instances_policy"]

_SPOT_STRATEGIES = {
    "price-capacity-optimized": autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED,
    "capacity-optimized": autoscaling.SpotAllocationStrategy.CAPACITY_OPTIMIZED,
    "capacity-optimized-prioritized": autoscaling.SpotAllocationStrategy.CAPACITY_OPTIMIZED_PRIORITIZED,
    "lowest-price": autoscaling.SpotAllocationStrategy.LOWEST_PRICE,
}


def mixed_instances_policy(
    launch_template: ec2.ILaunchTemplate,
    types: tuple[str, ...],
    spot: FleetSpotOptions | None,
    prioritized: bool,
) -> autoscaling.MixedInstancesPolicy | None:
    """The group's mixed instances policy: the launch template with one override per type, in order; spot above
    the On-Demand base for a spot mix; the On-Demand strategy ``prioritized`` for a fallback list. None for a
    group of one type on demand (it launches from the template)."""
    if spot is None and len(types) == 1:
        return None
    distribution: dict[str, Any] = {}
    if prioritized:
        distribution["on_demand_allocation_strategy"] = autoscaling.OnDemandAllocationStrategy.PRIORITIZED
    if spot is not None:
        distribution.update(
            on_demand_base_capacity=spot.on_demand_base_capacity,
            on_demand_percentage_above_base_capacity=spot.on_demand_percentage_above_base,
            spot_allocation_strategy=_SPOT_STRATEGIES[spot.allocation_strategy],
        )
    else:
        distribution.update(on_demand_base_capacity=0, on_demand_percentage_above_base_capacity=100)
    return autoscaling.MixedInstancesPolicy(
        launch_template=launch_template,
        instances_distribution=autoscaling.InstancesDistribution(**distribution),
        launch_template_overrides=[
            autoscaling.LaunchTemplateOverrides(instance_type=ec2.InstanceType(name)) for name in types
        ],
    )


def apply_reservation(launch_template: ec2.LaunchTemplate, reservation: FleetCapacityReservation) -> None:
    """The launch template's ``CapacityReservationSpecification`` (a target, or the ``open`` preference: one
    option at a time) and, for a Capacity Block, ``InstanceMarketOptions.MarketType: capacity-block``."""
    cfn = launch_template.node.default_child
    assert isinstance(cfn, ec2.CfnLaunchTemplate)
    specification: dict[str, Any]
    if not reservation.targeted:
        specification = {"CapacityReservationPreference": "open"}
    elif reservation.reservation_id is not None:
        specification = {"CapacityReservationTarget": {"CapacityReservationId": reservation.reservation_id}}
    else:
        target = {"CapacityReservationResourceGroupArn": reservation.resource_group_arn}
        specification = {"CapacityReservationTarget": target}
    cfn.add_property_override("LaunchTemplateData.CapacityReservationSpecification", specification)
    if reservation.capacity_block:
        cfn.add_property_override("LaunchTemplateData.InstanceMarketOptions", {"MarketType": "capacity-block"})
