"""GpuEndpoint's instance pools (fallback instance types) and ML capacity reservations: what it renders and each
reason it refuses a list or a reservation, at construction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms
from endpoint_helpers import MODEL_KEY, dlc_image, kms_bucket, new_stack

from gpu_constructs.endpoint import EndpointAutoscaling, GpuEndpoint, InstancePool, ModelData
from gpu_constructs.endpoint.pools import (
    CAPACITY_RESERVATIONS_ONLY,
    MAX_INSTANCE_POOLS,
    as_pools,
    check_capacity_reservation,
    check_instance_pools,
)
from gpu_constructs.errors import ValidationError
from gpu_constructs.images import GpuImage

PLAN_ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p4-for-inference"


def _cuda13_image(stack: cdk.Stack) -> GpuImage:
    repository = ecr.Repository.from_repository_name(stack, "Repo", "inference")
    return GpuImage.from_ecr_repository(repository, "v1", usage="inference", cuda_version="13.0")


@pytest.fixture()
def make() -> Callable[..., GpuEndpoint]:
    def build(**overrides: Any) -> GpuEndpoint:
        stack = new_stack()
        key = kms.Key(stack, "Key")
        bucket = kms_bucket(stack, key)
        props: dict[str, Any] = {
            "image": dlc_image(stack),
            "model_data": ModelData.from_bucket(bucket, MODEL_KEY),
            "encryption_key": key,
        }
        for name, value in overrides.items():
            props[name] = value(stack) if callable(value) and not isinstance(value, type) else value
        return GpuEndpoint(stack, "Ep", **props)

    return build


def _variant(endpoint: GpuEndpoint) -> dict[str, Any]:
    template = assertions.Template.from_stack(cdk.Stack.of(endpoint))
    configs = template.find_resources("AWS::SageMaker::EndpointConfig")
    (config,) = configs.values()
    (variant,) = config["Properties"]["ProductionVariants"]
    return dict(variant)


# -- what is rendered ---------------------------------------------------------------------------------------------


def test_pools_render_priorities_in_list_order_and_no_instance_type(make: Callable[..., GpuEndpoint]) -> None:
    endpoint = make(
        instance_pools=["ml.g5.xlarge", InstancePool("ml.g6.xlarge", model_name_override="classifier-l4")],
        instance_provision_timeout=cdk.Duration.minutes(10),
    )
    variant = _variant(endpoint)
    assert "InstanceType" not in variant
    assert variant["InstancePools"] == [
        {"InstanceType": "ml.g5.xlarge", "Priority": 1},
        {"InstanceType": "ml.g6.xlarge", "ModelNameOverride": "classifier-l4", "Priority": 2},
    ]
    assert variant["VariantInstanceProvisionTimeoutInSeconds"] == 600
    assert endpoint.instance.sagemaker_name == "ml.g5.xlarge"
    assert [it.sagemaker_name for it in endpoint.instance_pools] == ["ml.g5.xlarge", "ml.g6.xlarge"]
    assert endpoint.gpu_count == 1


def test_instance_type_may_repeat_the_first_pool(make: Callable[..., GpuEndpoint]) -> None:
    endpoint = make(instance_type="ml.g5.xlarge", instance_pools=["ml.g5.xlarge", "ml.g6.xlarge"])
    assert [p["Priority"] for p in _variant(endpoint)["InstancePools"]] == [1, 2]


def test_no_pools_keeps_the_instance_type_and_no_new_properties(make: Callable[..., GpuEndpoint]) -> None:
    variant = _variant(make(instance_type="ml.g5.xlarge"))
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert "InstancePools" not in variant and "CapacityReservationConfig" not in variant


def test_reservation_renders_capacity_reservations_only(make: Callable[..., GpuEndpoint]) -> None:
    variant = _variant(make(instance_type="ml.g5.xlarge", capacity_reservation_arn=PLAN_ARN))
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert variant["CapacityReservationConfig"] == {
        "CapacityReservationPreference": CAPACITY_RESERVATIONS_ONLY,
        "MlReservationArn": PLAN_ARN,
    }


def test_gpu_alarm_and_scaling_keep_their_per_instance_gpu_count(make: Callable[..., GpuEndpoint]) -> None:
    """Every pool has the first choice's GPUs per instance, so the summed GPU memory threshold and the GPU
    utilization target (both x GPUs per instance) hold on whichever pool serves."""
    endpoint = make(
        instance_pools=["ml.g5.12xlarge", "ml.g6.12xlarge"],
        autoscaling=EndpointAutoscaling.on_gpu_utilization(70, min_capacity=1, max_capacity=2),
    )
    template = assertions.Template.from_stack(cdk.Stack.of(endpoint))
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "GPUMemoryUtilization", "Threshold": 90 * 4}
    )
    template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"TargetTrackingScalingPolicyConfiguration": assertions.Match.object_like({"TargetValue": 70 * 4})},
    )


def test_async_endpoint_takes_pools(make: Callable[..., GpuEndpoint]) -> None:
    from gpu_constructs.endpoint import AsyncInference

    endpoint = make(
        instance_pools=["ml.g5.xlarge", "ml.g6.xlarge"],
        async_inference=lambda stack: AsyncInference(bucket=stack.node.find_child("Artifacts")),
    )
    assert len(_variant(endpoint)["InstancePools"]) == 2


# -- one refusal per reason -------------------------------------------------------------------------------------

REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    (
        "non-GPU pool",
        {"instance_pools": ["ml.g5.xlarge", "ml.m5.xlarge"]},
        r"instance_pools\[1\]='ml.m5.xlarge' has no NVIDIA GPU",
    ),
    (
        "CUDA mismatch",
        {"image": _cuda13_image, "instance_pools": ["ml.g4dn.xlarge", "ml.p3.2xlarge"]},
        r"instance_pools\[1\]='ml.p3.2xlarge' with cuda_version='13.0'",
    ),
    (
        "smaller GPU memory",
        {"instance_pools": ["ml.g5.xlarge", "ml.g4dn.xlarge"]},
        r"instance_pools\[1\]='ml.g4dn.xlarge' has 16.0 GiB per GPU, less than the 22.4 GiB",
    ),
    (
        "GPU count change",
        {"instance_pools": ["ml.g5.xlarge", "ml.g5.12xlarge"]},
        r"instance_pools\[1\] \(GPUs per instance\)='ml.g5.12xlarge' .* 1 GPU\(s\) per instance .* \(it has 4\)",
    ),
    (
        "cost ceiling",
        {"instance_pools": ["ml.g5.xlarge", "ml.g6e.xlarge"], "max_cost_ratio": 1.1},
        r"instance_pools\[1\]='ml.g6e.xlarge' x 1 costs .* max_cost_ratio=1.1",
    ),
    (
        "too many",
        {
            "instance_pools": [
                "ml.g5.xlarge",
                "ml.g6.xlarge",
                "ml.g5.2xlarge",
                "ml.g6.2xlarge",
                "ml.g5.4xlarge",
                "ml.g6.4xlarge",
            ]
        },
        rf"1 to {MAX_INSTANCE_POOLS} instance types \(SageMaker's InstancePools limit\)",
    ),
    ("empty", {"instance_pools": []}, r"instance_pools=\[\] is not allowed; allowed: 1 to 5"),
    (
        "duplicate",
        {"instance_pools": ["ml.g5.xlarge", "ml.g6.xlarge", "ml.g5.xlarge"]},
        r"instance_pools\[2\]='ml.g5.xlarge' repeats instance_pools\[0\]",
    ),
    ("EC2 spelling", {"instance_pools": ["ml.g5.xlarge", "g6.xlarge"]}, r"instance_pools\[1\]"),
    (
        "instance type other than the first pool",
        {"instance_type": "ml.g6.xlarge", "instance_pools": ["ml.g5.xlarge", "ml.g6.xlarge"]},
        r"instance_type='ml.g6.xlarge' .* none or the first pool's type 'ml.g5.xlarge'",
    ),
    ("neither type nor pools", {}, r"instance_type=None .* an instance type, or instance_pools"),
    (
        "cost ceiling without pools",
        {"instance_type": "ml.g5.xlarge", "max_cost_ratio": 2},
        r"max_cost_ratio=2 .* without instance_pools",
    ),
    (
        "pools on a CPU variant",
        {"instance_pools": ["ml.m5.xlarge", "ml.m5.2xlarge"], "cpu_variant": True},
        r"none for a CPU variant",
    ),
    (
        "volume size on an NVMe pool",
        {"instance_pools": ["ml.p3.2xlarge", "ml.g4dn.xlarge"], "volume_size": cdk.Size.gibibytes(100)},
        r"none for ml.g4dn.xlarge: it has 125 GB of local NVMe",
    ),
    (
        "model name override",
        {"instance_pools": ["ml.g5.xlarge", InstancePool("ml.g6.xlarge", model_name_override="bad_name")]},
        r"instance_pools\[1\].model_name_override='bad_name'",
    ),
    (
        "reservation ARN pattern",
        {"instance_type": "ml.g5.xlarge", "capacity_reservation_arn": "arn:aws:sagemaker:us-east-1:123:plan/x"},
        r"capacity_reservation_arn=.* an ML reservation ARN of 20-258 characters",
    ),
    (
        "reservation with pools",
        {"instance_pools": ["ml.g5.xlarge", "ml.g6.xlarge"], "capacity_reservation_arn": PLAN_ARN},
        r"no reservation with instance_pools",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refused(make: Callable[..., GpuEndpoint], overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as raised:
        make(**overrides)
    assert str(raised.value).startswith("Test/Ep: ")


# -- the rules without the CDK (the config model uses them) --------------------------------------------------------


def test_rules_without_a_construct() -> None:
    pools = as_pools("cfg", ["ml.g5.2xlarge", InstancePool("ml.g6.2xlarge")])
    types = check_instance_pools("cfg", pools, cuda_version="12.8")
    assert [t.sagemaker_name for t in types] == ["ml.g5.2xlarge", "ml.g6.2xlarge"]
    check_capacity_reservation("cfg", PLAN_ARN, instance_pools=False)
    with pytest.raises(ValidationError, match=r"instance_pools='ml.g5.xlarge' .* an ordered list"):
        as_pools("cfg", "ml.g5.xlarge")
    with pytest.raises(ValidationError, match=r"instance_pools\[0\]=3 .* an instance type name or an InstancePool"):
        as_pools("cfg", [3])  # type: ignore[list-item]
