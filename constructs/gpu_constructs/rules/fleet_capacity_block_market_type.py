"""A launch template that launches into a Capacity Block names the block and buys nothing else.

Instances run in a Capacity Block for ML only when the launch says so twice: the market type ``capacity-block``
and the block's reservation id. EC2 Auto Scaling User Guide, "Use Capacity Blocks for machine learning workloads"
(https://docs.aws.amazon.com/autoscaling/ec2/userguide/launch-template-capacity-blocks.html): "Capacity Blocks
are delivered as ``targeted`` capacity reservations in a single Availability Zone. When you create your launch
template, specify the Capacity Block's reservation ID and instance type." The EC2 User Guide, "Work with Capacity
Blocks" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html): "To run instances in a
Capacity Block, you must specify the reservation ID when launching your instances." The market type is one value
(botocore 1.44.8, service ``ec2``, shape ``LaunchTemplateInstanceMarketOptionsRequest.MarketType``: ``spot |
capacity-block | interruptible-capacity-reservation | on-demand``), so a capacity-block template has no
``SpotOptions``; and the block holds one instance type, so an auto scaling group that launches from it through a
mixed instances policy neither spreads over other types (overrides) nor asks for spot (an
``OnDemandPercentageAboveBaseCapacity`` below 100): those launches cannot land in the block.

Reads ``AWS::EC2::LaunchTemplate`` and ``AWS::AutoScaling::AutoScalingGroup``. Findings:

* on a launch template with ``InstanceMarketOptions.MarketType: capacity-block``: ``NoCapacityReservationId``
  (no ``CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId``; a resource group or the
  ``open`` preference do not name a block) and ``SpotOptions``;
* on a group whose mixed instances policy launches such a template (same stack, by ``Ref``):
  ``InstanceTypes=<n>`` (more than one override) and ``Spot`` (spot capacity above the On-Demand base).

Compliant: any other market type, and capacity-block templates that name a reservation id, with groups of one type
on demand. A market type or a group setting that is not a literal is not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_constructs.rules._rule import COMPLIANT, NOT_APPLICABLE, Resource, Result, ref_id, rule

CAPACITY_BLOCK = "capacity-block"


def _data(template: Mapping[str, Any] | None) -> Mapping[str, Any]:
    properties = (template or {}).get("Properties") or {}
    data = properties.get("LaunchTemplateData") if isinstance(properties, Mapping) else None
    return data if isinstance(data, Mapping) else {}


def _is_capacity_block(data: Mapping[str, Any]) -> bool:
    market = data.get("InstanceMarketOptions")
    return isinstance(market, Mapping) and market.get("MarketType") == CAPACITY_BLOCK


def _template_findings(data: Mapping[str, Any]) -> list[str]:
    findings: list[str] = []
    specification = data.get("CapacityReservationSpecification")
    target = specification.get("CapacityReservationTarget") if isinstance(specification, Mapping) else None
    if not isinstance(target, Mapping) or target.get("CapacityReservationId") is None:
        findings.append("NoCapacityReservationId")
    market = data.get("InstanceMarketOptions")
    if isinstance(market, Mapping) and market.get("SpotOptions") is not None:
        findings.append("SpotOptions")
    return findings


def _group_findings(resource: Resource) -> Result:
    policy = resource.properties.get("MixedInstancesPolicy")
    if not isinstance(policy, Mapping):
        return NOT_APPLICABLE
    launch = policy.get("LaunchTemplate")
    if not isinstance(launch, Mapping) or not isinstance(launch.get("LaunchTemplateSpecification"), Mapping):
        return NOT_APPLICABLE
    specification = launch["LaunchTemplateSpecification"]
    template = resource.other(ref_id(specification.get("LaunchTemplateId")))
    if template is None or template.get("Type") != "AWS::EC2::LaunchTemplate":
        return NOT_APPLICABLE
    if not _is_capacity_block(_data(template)):
        return COMPLIANT
    findings: list[str] = []
    overrides = launch.get("Overrides")
    if isinstance(overrides, list) and len(overrides) > 1:
        findings.append(f"InstanceTypes={len(overrides)}")
    distribution = policy.get("InstancesDistribution")
    percentage = distribution.get("OnDemandPercentageAboveBaseCapacity") if isinstance(distribution, Mapping) else None
    if isinstance(percentage, int) and not isinstance(percentage, bool) and percentage < 100:
        findings.append("Spot")
    return findings


@rule(
    id="FleetCapacityBlockMarketType",
    resource_types=("AWS::EC2::LaunchTemplate", "AWS::AutoScaling::AutoScalingGroup"),
    info="A launch template with market type capacity-block names no Capacity Block reservation id or asks for "
    "spot, or a group launches it with several instance types or spot: those launches cannot use the block. Target "
    "the block's cr- id, one instance type, on demand.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    if resource.type == "AWS::AutoScaling::AutoScalingGroup":
        return _group_findings(resource)
    data = _data(resource.definition)
    if not _is_capacity_block(data):
        return NOT_APPLICABLE
    return _template_findings(data)
