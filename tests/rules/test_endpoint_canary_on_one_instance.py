"""EndpointCanaryOnOneInstance: a canary or linear step above 50 % of the variant's instances, or on one instance."""

from __future__ import annotations

from typing import Any

from rule_helpers import findings, template

RULE = "EndpointCanaryOnOneInstance"


def config(*counts: int) -> dict[str, Any]:
    variants = [
        {"VariantName": f"V{i}", "ModelName": "m", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": c}
        for i, c in enumerate(counts)
    ]
    return {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": variants}}


def endpoint(routing: str | None, config_ref: Any, step: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"EndpointConfigName": config_ref}
    if routing is not None:
        step = step or {"Type": "CAPACITY_PERCENT", "Value": 50}
        traffic: dict[str, Any] = {"Type": routing, "WaitIntervalInSeconds": 300}
        if routing == "CANARY":
            traffic["CanarySize"] = step
        if routing == "LINEAR":
            traffic["LinearStepSize"] = step
        props["DeploymentConfig"] = {"BlueGreenUpdatePolicy": {"TrafficRoutingConfiguration": traffic}}
    return {"Type": "AWS::SageMaker::Endpoint", "Properties": props}


def test_canary_and_linear_on_one_instance_are_findings() -> None:
    tpl = template(
        One=config(1),
        Mixed=config(2, 1),
        Canary=endpoint("CANARY", {"Fn::GetAtt": ["One", "EndpointConfigName"]}),
        Linear=endpoint("LINEAR", {"Ref": "Mixed"}),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Canary", "GpuPlatform::GpuPlatform-EndpointCanaryOnOneInstance[V0:InitialInstanceCount=1]"),
        ("Linear", "GpuPlatform::GpuPlatform-EndpointCanaryOnOneInstance[V1:InitialInstanceCount=1]"),
    ]


def test_all_at_once_two_instances_or_unreadable_configs_are_clean() -> None:
    tpl = template(
        One=config(1),
        Two=config(2),
        AllAtOnce=endpoint("ALL_AT_ONCE", {"Fn::GetAtt": ["One", "EndpointConfigName"]}),
        Plain=endpoint(None, {"Fn::GetAtt": ["One", "EndpointConfigName"]}),
        CanaryOnTwo=endpoint("CANARY", {"Fn::GetAtt": ["Two", "EndpointConfigName"]}),
        Imported=endpoint("CANARY", {"Fn::ImportValue": "other:ConfigName"}),
        Literal=endpoint("LINEAR", "existing-config"),
    )
    assert findings(RULE, tpl) == []


def _count(value: int) -> dict[str, Any]:
    return {"Type": "INSTANCE_COUNT", "Value": value}


def _percent(value: int) -> dict[str, Any]:
    return {"Type": "CAPACITY_PERCENT", "Value": value}


def test_steps_above_half_of_the_variant_are_findings() -> None:
    # CanarySize: "Value must be less than or equal to 50% of the variant's total instance count"; LinearStepSize:
    # "Value must be 10-50% of the variant's total instance count" (botocore, shape TrafficRoutingConfig).
    tpl = template(
        Four=config(4),
        Twenty=config(20),
        CanaryCount=endpoint("CANARY", {"Ref": "Four"}, _count(3)),
        CanaryPercent=endpoint("CANARY", {"Ref": "Four"}, _percent(75)),
        LinearCount=endpoint("LINEAR", {"Ref": "Four"}, _count(4)),
        LinearPercent=endpoint("LINEAR", {"Fn::ImportValue": "other:ConfigName"}, _percent(60)),
        LinearTooSmall=endpoint("LINEAR", {"Ref": "Twenty"}, _count(1)),
        LinearPercentTooSmall=endpoint("LINEAR", {"Ref": "Twenty"}, _percent(5)),
    )
    rule = f"GpuPlatform::GpuPlatform-{RULE}"
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("CanaryCount", f"{rule}[V0:CanarySize=3-of-4-instances]"),
        ("CanaryPercent", f"{rule}[CanarySize=75%]"),
        ("LinearCount", f"{rule}[V0:LinearStepSize=4-of-4-instances]"),
        ("LinearPercent", f"{rule}[LinearStepSize=60%]"),
        ("LinearPercentTooSmall", f"{rule}[LinearStepSize=5%]"),
        ("LinearTooSmall", f"{rule}[V0:LinearStepSize=1-of-20-instances]"),
    ]


def test_steps_within_half_of_the_variant_are_clean() -> None:
    # only the step of the routing type counts: a LinearStepSize next to CANARY routing is not read
    other_step = endpoint("CANARY", {"Ref": "Two"}, _count(1))
    other_step["Properties"]["DeploymentConfig"]["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"][
        "LinearStepSize"
    ] = _count(2)
    tpl = template(
        Two=config(2),
        Four=config(4, 2),
        Twenty=config(20),
        CanaryHalf=endpoint("CANARY", {"Ref": "Two"}, _count(1)),
        CanaryOfEach=endpoint("CANARY", {"Ref": "Four"}, _count(1)),
        CanaryPercent=endpoint("CANARY", {"Ref": "Four"}, _percent(50)),
        CanarySmallPercent=endpoint("CANARY", {"Ref": "Four"}, _percent(1)),
        LinearTenth=endpoint("LINEAR", {"Ref": "Twenty"}, _count(2)),
        LinearHalf=endpoint("LINEAR", {"Ref": "Twenty"}, _count(10)),
        LinearPercent=endpoint("LINEAR", {"Ref": "Twenty"}, _percent(10)),
        RuntimeStep=endpoint("CANARY", {"Ref": "Two"}, {"Type": "INSTANCE_COUNT", "Value": {"Ref": "Step"}}),
        OtherStep=other_step,
    )
    assert findings(RULE, tpl) == []


def test_one_instance_is_one_finding_whatever_the_step() -> None:
    tpl = template(One=config(1), Canary=endpoint("CANARY", {"Ref": "One"}, _count(1)))
    assert [f.id for f in findings(RULE, tpl)] == [f"GpuPlatform::GpuPlatform-{RULE}[V0:InitialInstanceCount=1]"]
