"""GpuEndpoint's validation rules, each checked at construction (no synthesis), and the batching
variables shared with the serving runtimes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from endpoint_helpers import (
    MODEL_KEY,
    dlc_image,
    kms_bucket,
    new_stack,
)

from gpu_constructs.endpoint import (
    GPU_SERVE_BATCHING_ENV,
    TORCHSERVE_BATCHING_ENV,
    AsyncInference,
    Batching,
    BlueGreenDeployment,
    DataCapture,
    EndpointAlarms,
    EndpointAutoscaling,
    GpuEndpoint,
    ModelData,
    OffHoursSchedule,
)
from gpu_constructs.errors import ValidationError
from gpu_constructs.images import GpuImage


@pytest.fixture()
def make() -> Callable[..., GpuEndpoint]:
    def build(**overrides: Any) -> GpuEndpoint:
        stack = new_stack()
        key = kms.Key(stack, "Key")
        bucket = kms_bucket(stack, key)
        props: dict[str, Any] = {
            "image": dlc_image(stack),
            "model_data": ModelData.from_bucket(bucket, MODEL_KEY),
            "instance_type": "ml.g5.xlarge",
            "encryption_key": key,
        }
        for name, value in overrides.items():
            props[name] = value(stack, bucket) if callable(value) and not isinstance(value, type) else value
        return GpuEndpoint(stack, "Ep", **props)

    return build


def _async(stack: cdk.Stack, bucket: s3.IBucket) -> AsyncInference:
    return AsyncInference(bucket=bucket)


def _training_image(stack: cdk.Stack, bucket: s3.IBucket) -> GpuImage:
    return dlc_image(stack, usage="training")


def _vpc_subnets_without_vpc(stack: cdk.Stack, bucket: s3.IBucket) -> ec2.SubnetSelection:
    return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)


def _capture(**kw: Any) -> Callable[[cdk.Stack, s3.IBucket], DataCapture]:
    return lambda stack, bucket: DataCapture(bucket=bucket, **kw)


def _async_with(**kw: Any) -> Callable[[cdk.Stack, s3.IBucket], AsyncInference]:
    return lambda stack, bucket: AsyncInference(bucket=bucket, **kw)


def _model(kind: str, value: str) -> Callable[[cdk.Stack, s3.IBucket], ModelData]:
    if kind == "bucket":
        return lambda stack, bucket: ModelData.from_bucket(bucket, value)
    if kind == "uri":
        return lambda stack, bucket: ModelData.from_uri(value)
    return lambda stack, bucket: ModelData.from_ssm_parameter(value, bucket=bucket)


class _Filter:
    def __init__(self, name: str, unit: str = "Count") -> None:
        self.metric_name, self.filter_pattern, self.metric_value, self.unit = name, '{ $.x = "*" }', "$.x", unit


CANARY = BlueGreenDeployment.canary(percent=10)


SCALE = EndpointAutoscaling.on_invocations


RULES: list[tuple[str, dict[str, Any], str]] = [
    ("cpu type without cpu_variant", {"instance_type": "ml.m5.xlarge"}, r"has no NVIDIA GPU .* Fitting GPU types"),
    ("inferentia type", {"instance_type": "ml.inf2.xlarge"}, r"no NVIDIA GPU"),
    ("typo", {"instance_type": "ml.g5.xlarg"}, r"did you mean 'ml.g5.xlarge'"),
    ("EC2 spelling", {"instance_type": "g5.xlarge"}, r"not how SageMaker hosting spells"),
    ("cpu variant EC2 spelling", {"instance_type": "m5.xlarge", "cpu_variant": True}, r"the SageMaker spelling"),
    ("cpu variant not hosting", {"instance_type": "ml.t3.medium", "cpu_variant": True}, r"SageMaker hosting accepts"),
    ("training image", {"image": _training_image}, r"usage='training' cannot serve as an endpoint"),
    ("cuda cannot drive gpu", {"instance_type": "ml.p6-b200.48xlarge"}, r"CUDA 12.4 cannot drive the NVIDIA B200"),
    ("instance count 0", {"initial_instance_count": 0}, r"initial_instance_count=0 is not allowed"),
    ("endpoint name", {"endpoint_name": "bad_name"}, r"endpoint_name='bad_name'"),
    ("endpoint name too long", {"endpoint_name": "a" * 64}, r"endpoint_name="),
    ("variant name", {"variant_name": "-x"}, r"variant_name='-x'"),
    ("environment key", {"environment": {"1BAD": "x"}}, r"environment keys=\['1BAD'\]"),
    ("too many variables", {"environment": {f"V{i}": "x" for i in range(101)}}, r"at most 100 variables"),
    (
        "environment contradicts batching",
        {"environment": {"GPU_SERVE_MAX_BATCH_SIZE": "8"}, "batching": Batching(max_batch_size=16)},
        r"contradicts batching \(GPU_SERVE_MAX_BATCH_SIZE=16\)",
    ),
    ("batch size", {"batching": Batching(max_batch_size=0)}, r"batching.max_batch_size=0"),
    ("batch delay", {"batching": Batching(max_batch_delay_ms=20_000)}, r"batching.max_batch_delay_ms=20000"),
    ("subnets without vpc", {"vpc_subnets": _vpc_subnets_without_vpc}, r"vpc=None .* a VPC whenever vpc_subnets"),
    (
        "volume on NVMe type",
        {"volume_size": cdk.Size.gibibytes(100)},
        r"none for ml.g5.xlarge: it has 250 GB of local NVMe",
    ),
    (
        "volume too large",
        {"instance_type": "ml.p3.2xlarge", "volume_size": cdk.Size.gibibytes(600)},
        r"volume_size \(GiB\)=600 .* \[1, 512\]",
    ),
    (
        "download timeout",
        {"model_download_timeout": cdk.Duration.seconds(30)},
        r"model_download_timeout \(seconds\)=30",
    ),
    (
        "startup timeout",
        {"container_startup_health_check_timeout": cdk.Duration.hours(2)},
        r"container_startup_health_check_timeout \(seconds\)=7200",
    ),
    (
        "provision timeout below SageMaker's 300 s",
        {"instance_provision_timeout": cdk.Duration.seconds(299)},
        r"instance_provision_timeout \(seconds\)=299 is not allowed; allowed: 300 to 3600 seconds",
    ),
    (
        "provision timeout above SageMaker's 3600 s",
        {"instance_provision_timeout": cdk.Duration.minutes(61)},
        r"instance_provision_timeout \(seconds\)=3660 is not allowed; allowed: 300 to 3600 seconds",
    ),
    ("sampling percentage", {"data_capture": _capture(sampling_percentage=101)}, r"sampling_percentage=101"),
    ("capture nothing", {"data_capture": _capture(capture_input=False, capture_output=False)}, r"at least one of them"),
    ("capture prefix", {"data_capture": _capture(prefix="../x/")}, r"data_capture.prefix='../x/'"),
    (
        "async concurrency",
        {"async_inference": _async_with(max_concurrent_invocations_per_instance=0)},
        r"max_concurrent_invocations_per_instance=0",
    ),
    (
        "async response without topic",
        {"async_inference": _async_with(include_response_in_notifications=True)},
        r"include_response_in_notifications=True .* success_topic or error_topic",
    ),
    (
        "canary above 50",
        {"deployment": BlueGreenDeployment.canary(percent=60), "initial_instance_count": 2},
        r"1 to 50",
    ),
    (
        "linear below 10",
        {"deployment": BlueGreenDeployment.linear(step_percent=5), "initial_instance_count": 2},
        r"10 to 50",
    ),
    ("canary on one instance", {"deployment": CANARY}, r"2 or more instances"),
    ("step on all at once", {"deployment": BlueGreenDeployment(step_percent=10)}, r"None for ALL_AT_ONCE"),
    ("bake too long", {"deployment": BlueGreenDeployment.all_at_once(bake=cdk.Duration.hours(2))}, r"wait_interval"),
    (
        "termination wait",
        {"deployment": BlueGreenDeployment(termination_wait=cdk.Duration.hours(2))},
        r"termination_wait \(seconds\)=7200",
    ),
    (
        "timeout range",
        {"deployment": BlueGreenDeployment(max_execution_timeout=cdk.Duration.minutes(5))},
        r"max_execution_timeout \(seconds\)=300 .* 600 to 28800",
    ),
    (
        "timeout shorter than bakes",
        {
            "deployment": BlueGreenDeployment.linear(
                step_percent=10, interval=cdk.Duration.minutes(10), max_execution_timeout=cdk.Duration.minutes(60)
            ),
            "initial_instance_count": 2,
        },
        r"more than the 6000 s of bake intervals",
    ),
    ("5xx threshold", {"alarms": EndpointAlarms(max_5xx_percent=0)}, r"alarms.max_5xx_percent=0"),
    ("gpu memory threshold", {"alarms": EndpointAlarms(max_gpu_memory_percent=150)}, r"max_gpu_memory_percent=150"),
    ("latency threshold", {"alarms": EndpointAlarms(max_model_latency_p99=cdk.Duration.millis(0))}, r"> 0 ms"),
    ("alarm period", {"alarms": EndpointAlarms(period=cdk.Duration.seconds(45))}, r"alarms.period \(seconds\)=45"),
    ("datapoints", {"alarms": EndpointAlarms(evaluation_periods=2, datapoints_to_alarm=3)}, r"datapoints_to_alarm=3"),
    ("min above max", {"autoscaling": SCALE(10, min_capacity=3, max_capacity=2)}, r"min_capacity=3 .* at most max"),
    ("max zero", {"autoscaling": SCALE(10, min_capacity=0, max_capacity=0)}, r"max_capacity >= 1"),
    ("zero for real-time", {"autoscaling": SCALE(10, min_capacity=0, max_capacity=2)}, r"scale to zero is only"),
    (
        "count outside range",
        {"autoscaling": SCALE(10, min_capacity=2, max_capacity=4)},
        r"initial_instance_count=1 .* \[2, 4\]",
    ),
    ("target not positive", {"autoscaling": SCALE(0, min_capacity=1, max_capacity=2)}, r"autoscaling.target=0"),
    (
        "backlog on real-time",
        {"autoscaling": EndpointAutoscaling.on_backlog(5, min_capacity=1, max_capacity=2)},
        r"autoscaling.metric='backlog_per_instance' .* real-time",
    ),
    (
        "invocations on async",
        {"async_inference": _async, "autoscaling": SCALE(10, min_capacity=1, max_capacity=2)},
        r"'invocations_per_instance' is not allowed; allowed: 'gpu_utilization', 'backlog_per_instance'",
    ),
    (
        "gpu metric on cpu variant",
        {
            "instance_type": "ml.m5.xlarge",
            "cpu_variant": True,
            "autoscaling": EndpointAutoscaling.on_gpu_utilization(70, min_capacity=1, max_capacity=2),
        },
        r"for a CPU variant",
    ),
    (
        "gpu target above 100",
        {"autoscaling": EndpointAutoscaling.on_gpu_utilization(150, min_capacity=1, max_capacity=2)},
        r"percent per GPU\)=150",
    ),
    (
        "zero without backlog metric",
        {
            "async_inference": _async,
            "autoscaling": EndpointAutoscaling.on_gpu_utilization(70, min_capacity=0, max_capacity=2),
        },
        r"'backlog_per_instance' when min_capacity is 0",
    ),
    ("off-hours hour", {"off_hours": OffHoursSchedule(end_hour=24)}, r"off_hours.end_hour=24"),
    ("off-hours same hours", {"off_hours": OffHoursSchedule(start_hour=8, end_hour=8)}, r"other than start_hour"),
    ("off-hours days", {"off_hours": OffHoursSchedule(week_days="Monday")}, r"off_hours.week_days='Monday'"),
    ("off-hours zone", {"off_hours": OffHoursSchedule(time_zone="Mars/Olympus")}, r"off_hours.time_zone"),
    ("off-hours zero real-time", {"off_hours": OffHoursSchedule(off_hours_capacity=0)}, r"cannot scale to zero"),
    ("log filter names", {"log_metric_filters": [_Filter("A"), _Filter("A")]}, r"each metric name once"),
    ("log filter unit", {"log_metric_filters": [_Filter("A", unit="Furlongs")]}, r"\['Furlongs'\]"),
    ("model key", {"model_data": _model("bucket", "models/x/model.pt")}, r"model_data key='models/x/model.pt'"),
    ("model uri", {"model_data": _model("uri", "https://x/model.tar.gz")}, r"model_data uri="),
    ("model parameter", {"model_data": _model("ssm", "bad name!")}, r"model_data parameter_name='bad name!'"),
    (
        "batching on the dlc",
        {"batching": Batching(max_batch_size=16)},
        r"^Test/Ep: batching.max_batch_size=16 is unsafe on the AWS PyTorch inference DLC: .* fails the whole batch "
        r"when one request fails; allowed: 1 \(or no batching\)\. To batch, serve with the platform's inference "
        r"image \(GpuImage.from_codebuild/from_asset of containers/inference, the gpu_serve runtime\)",
    ),
    (
        "torchserve batch size in environment",
        {"environment": {"SAGEMAKER_TS_BATCH_SIZE": "8"}},
        r"environment SAGEMAKER_TS_BATCH_SIZE: max_batch_size=8 is unsafe on the AWS PyTorch inference DLC",
    ),
    (
        "torchserve batch size not a number",
        {"environment": {"SAGEMAKER_TS_BATCH_SIZE": "many"}},
        r"environment SAGEMAKER_TS_BATCH_SIZE='many' is not allowed; allowed: an integer",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_validation_rules(make: Callable[..., GpuEndpoint], overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        make(**overrides)
    assert info.value.where.startswith("Test/Ep") or info.value.where.startswith("Test/"), info.value.where


def test_valid_edge_values_pass(make: Callable[..., GpuEndpoint]) -> None:
    ep = make(
        initial_instance_count=2,
        deployment=BlueGreenDeployment.linear(step_percent=50, max_execution_timeout=cdk.Duration.hours(8)),
        autoscaling=EndpointAutoscaling.on_gpu_utilization(100, min_capacity=2, max_capacity=2),
        off_hours=OffHoursSchedule(start_hour=0, end_hour=23, week_days="MON,WED,FRI", off_hours_capacity=1),
        model_data=_model("ssm", "/gpu/models/latest"),
        alarms=EndpointAlarms(period=cdk.Duration.seconds(30), evaluation_periods=1, datapoints_to_alarm=1),
        instance_provision_timeout=cdk.Duration.hours(1),
    )
    assert ep.deployment.shift_steps == 1 and ep.gpu_count == 1
    (variant,) = cdk.Stack.of(ep).resolve(ep.endpoint_config.production_variants)
    assert variant["variantInstanceProvisionTimeoutInSeconds"] == 3600
    # deploy-time model data: CloudFormation names the model, which it can then replace
    assert cdk.Token.is_unresolved(ep.model_name)


def test_dlc_batching_refusal_is_per_image_and_variable() -> None:
    from aws_cdk import aws_ecr as ecr

    def endpoint(name: str, image: Any, **kwargs: Any) -> GpuEndpoint:
        stack = new_stack(name=name)
        key = kms.Key(stack, "Key")
        return GpuEndpoint(
            stack,
            "Ep",
            image=image(stack) if callable(image) else image,
            model_data=ModelData.from_bucket(kms_bucket(stack, key), MODEL_KEY),
            instance_type="ml.g5.xlarge",
            encryption_key=key,
            **kwargs,
        )

    def own(stack: cdk.Stack) -> GpuImage:
        repo = ecr.Repository.from_repository_name(stack, "Own", "gpu-inference")
        return GpuImage.from_ecr_repository(repo, "v7", usage="inference", cuda_version="12.8")

    # allowed: batch size 1 on the DLC, any batching on the platform's image (gpu_serve)
    endpoint("DlcOne", dlc_image, batching=Batching(max_batch_size=1, env=TORCHSERVE_BATCHING_ENV))
    endpoint("OwnBatches", own, batching=Batching(max_batch_size=64))
    # refused: TorchServe's variable above 1 whatever the image (only the DLC's toolkit reads it) ...
    with pytest.raises(ValidationError, match=r"^Own/Ep: environment SAGEMAKER_TS_BATCH_SIZE: max_batch_size=4"):
        endpoint("Own", own, batching=Batching(max_batch_size=4, env=TORCHSERVE_BATCHING_ENV))
    # ... and batching on a DLC through gpu_serve's variables, which TorchServe would silently ignore
    with pytest.raises(ValidationError, match=r"^Dlc/Ep: batching.max_batch_size=2 is unsafe"):
        endpoint("Dlc", dlc_image, batching=Batching(max_batch_size=2))


def test_batching_env_names_match_the_runtimes() -> None:
    from gpu_serve.config import ENV_VARS

    assert {GPU_SERVE_BATCHING_ENV.max_batch_size, GPU_SERVE_BATCHING_ENV.max_batch_delay_ms} <= set(ENV_VARS)
    assert (TORCHSERVE_BATCHING_ENV.max_batch_size, TORCHSERVE_BATCHING_ENV.max_batch_delay_ms) == (
        "SAGEMAKER_TS_BATCH_SIZE",
        "SAGEMAKER_TS_MAX_BATCH_DELAY",
    )
