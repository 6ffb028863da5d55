"""EndpointInstancePools: a variant's InstancePools is a list SageMaker takes and can order."""

from __future__ import annotations

from typing import Any

import botocore.session
from rule_helpers import findings, template

from gpu_constructs.endpoint.pools import MAX_INSTANCE_POOLS, POOL_PRIORITY_RANGE

RULE = "EndpointInstancePools"
ID = "GpuPlatform::GpuPlatform-EndpointInstancePools"


def config(pools: Any, **extra: Any) -> dict[str, Any]:
    variant: dict[str, Any] = {"VariantName": "AllTraffic", "ModelName": "m", "InitialInstanceCount": 1, **extra}
    if pools is not None:
        variant["InstancePools"] = pools
    return {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [variant]}}


def ordered(*types: str) -> list[dict[str, Any]]:
    return [{"InstanceType": t, "Priority": i} for i, t in enumerate(types, start=1)]


def test_the_limits_are_botocores() -> None:
    shapes = botocore.session.get_session().get_service_model("sagemaker")
    pool_list = shapes.shape_for("ProductionVariant").members["InstancePools"]
    assert (pool_list.metadata["min"], pool_list.metadata["max"]) == (1, MAX_INSTANCE_POOLS)
    priority = shapes.shape_for("InstancePool").members["Priority"]
    assert (priority.metadata["min"], priority.metadata["max"]) == POOL_PRIORITY_RANGE
    assert shapes.shape_for("InstancePool").required_members == ["InstanceType", "Priority"]


def test_ordered_gpu_pools_are_compliant_and_variants_without_pools_not_applicable() -> None:
    tpl = template(
        Two=config(ordered("ml.g5.xlarge", "ml.g6.xlarge")),
        Five=config(ordered("ml.g5.2xlarge", "ml.g6.2xlarge", "ml.g6e.2xlarge", "ml.g5.4xlarge", "ml.g6.4xlarge")),
        CpuOnly=config(ordered("ml.m5.xlarge", "ml.c5.xlarge")),
        Override=config([{"InstanceType": "ml.g5.xlarge", "Priority": 1, "ModelNameOverride": "other"}]),
        Unknown=config(ordered("ml.g5.xlarge", "ml.new9.xlarge")),
        Intrinsic=config({"Ref": "Pools"}),
        Plain=config(None, InstanceType="ml.g5.xlarge"),
    )
    assert findings(RULE, tpl) == []


def test_each_violation_is_a_finding() -> None:
    tpl = template(
        Six=config(
            ordered("ml.g5.xlarge", "ml.g6.xlarge", "ml.g5.2xlarge", "ml.g6.2xlarge", "ml.g5.4xlarge", "ml.g6.4xlarge")
        ),
        Empty=config([]),
        Priority=config(
            [{"InstanceType": "ml.g5.xlarge", "Priority": 0}, {"InstanceType": "ml.g6.xlarge", "Priority": 6}]
        ),
        SamePriority=config(
            [{"InstanceType": "ml.g5.xlarge", "Priority": 1}, {"InstanceType": "ml.g6.xlarge", "Priority": 1}]
        ),
        SameType=config(ordered("ml.g5.xlarge", "ml.g5.xlarge")),
        Both=config(ordered("ml.g5.xlarge"), InstanceType="ml.g5.xlarge"),
        Serverless=config(ordered("ml.g5.xlarge"), ServerlessConfig={"MemorySizeInMB": 2048, "MaxConcurrency": 1}),
        CpuFallback=config(ordered("ml.g5.xlarge", "ml.m5.xlarge")),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Both", f"{ID}[AllTraffic:InstanceType-and-InstancePools]"),
        ("CpuFallback", f"{ID}[AllTraffic:ml.m5.xlarge:no-NVIDIA-GPU]"),
        ("Empty", f"{ID}[AllTraffic:count-0]"),
        ("Priority", f"{ID}[AllTraffic:priority-0]"),
        ("Priority", f"{ID}[AllTraffic:priority-6]"),
        ("SamePriority", f"{ID}[AllTraffic:duplicate-priority-1]"),
        ("SameType", f"{ID}[AllTraffic:duplicate-type-ml.g5.xlarge]"),
        ("Serverless", f"{ID}[AllTraffic:ServerlessConfig-and-InstancePools]"),
        ("Six", f"{ID}[AllTraffic:count-6]"),
        ("Six", f"{ID}[AllTraffic:priority-6]"),
    ]
