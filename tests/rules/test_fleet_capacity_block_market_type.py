"""FleetCapacityBlockMarketType: a capacity-block launch template names its block; groups launch it on demand."""

from __future__ import annotations

from typing import Any

from rule_helpers import findings, template

RULE = "FleetCapacityBlockMarketType"
BLOCK_ID = "cr-0123456789abcdef0"


def launch_template(
    market: dict[str, Any] | None = None, specification: dict[str, Any] | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {"InstanceType": "p5.48xlarge"}
    if market is not None:
        data["InstanceMarketOptions"] = market
    if specification is not None:
        data["CapacityReservationSpecification"] = specification
    return {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": data}}


def block_template(**market: Any) -> dict[str, Any]:
    target = {"CapacityReservationTarget": {"CapacityReservationId": BLOCK_ID}}
    return launch_template({"MarketType": "capacity-block", **market}, target)


def group(overrides: list[str], on_demand_percentage: int | None = None) -> dict[str, Any]:
    distribution: dict[str, Any] = {"OnDemandBaseCapacity": 0}
    if on_demand_percentage is not None:
        distribution["OnDemandPercentageAboveBaseCapacity"] = on_demand_percentage
    policy = {
        "InstancesDistribution": distribution,
        "LaunchTemplate": {
            "LaunchTemplateSpecification": {"LaunchTemplateId": {"Ref": "Template"}, "Version": "1"},
            "Overrides": [{"InstanceType": name} for name in overrides],
        },
    }
    return {"Type": "AWS::AutoScaling::AutoScalingGroup", "Properties": {"MixedInstancesPolicy": policy}}


def test_a_capacity_block_template_without_the_block_id_or_with_spot_options_is_a_finding() -> None:
    group_arn = "arn:aws:resource-groups:us-east-1:111122223333:group/blocks"
    no_id = launch_template(
        {"MarketType": "capacity-block"},
        {"CapacityReservationTarget": {"CapacityReservationResourceGroupArn": group_arn}},
    )
    open_only = launch_template({"MarketType": "capacity-block"}, {"CapacityReservationPreference": "open"})
    spot = block_template(SpotOptions={"SpotInstanceType": "one-time"})
    found = findings(RULE, template(NoId=no_id, Open=open_only, Spot=spot))
    assert sorted(f.id for f in found) == [
        "GpuPlatform::GpuPlatform-FleetCapacityBlockMarketType[NoCapacityReservationId]",
        "GpuPlatform::GpuPlatform-FleetCapacityBlockMarketType[NoCapacityReservationId]",
        "GpuPlatform::GpuPlatform-FleetCapacityBlockMarketType[SpotOptions]",
    ]
    assert sorted(f.logical_id for f in found) == ["NoId", "Open", "Spot"]


def test_a_group_launching_a_capacity_block_with_more_types_or_spot_is_a_finding() -> None:
    tpl = template(
        Template=block_template(), Mixed=group(["p5.48xlarge", "p5e.48xlarge"]), Spot=group(["p5.48xlarge"], 0)
    )
    found = findings(RULE, tpl)
    assert sorted((f.logical_id, f.finding) for f in found) == [("Mixed", "InstanceTypes=2"), ("Spot", "Spot")]


def test_capacity_blocks_named_by_id_and_other_market_types_are_compliant() -> None:
    tpl = template(
        Template=block_template(),
        OneType=group(["p5.48xlarge"], 100),
        Plain={"Type": "AWS::AutoScaling::AutoScalingGroup", "Properties": {"LaunchTemplate": {"Version": "1"}}},
        Spot=launch_template({"MarketType": "spot"}),
        Reserved=launch_template(None, {"CapacityReservationTarget": {"CapacityReservationId": BLOCK_ID}}),
        Other={"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": {"InstanceType": "g5.xlarge"}}},
    )
    assert findings(RULE, tpl) == []
    spot_fallback = template(
        Template=launch_template({"MarketType": "spot"}), Mixed=group(["g5.xlarge", "g6.xlarge"], 0)
    )
    assert findings(RULE, spot_fallback) == []
