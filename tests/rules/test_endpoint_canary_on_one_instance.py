"""EndpointCanaryOnOneInstance: canary or linear traffic shifting on a variant of one instance."""

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


def endpoint(routing: str | None, config_ref: Any) -> dict[str, Any]:
    props: dict[str, Any] = {"EndpointConfigName": config_ref}
    if routing is not None:
        step = {"Type": "CAPACITY_PERCENT", "Value": 50}
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
