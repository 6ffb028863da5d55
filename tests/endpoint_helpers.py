"""Shared helpers of the GpuEndpoint tests (test_endpoint_*.py).

Synthesis is the cost: the one small stack with four endpoints (nag off) is built once per test process by
``built_endpoints()`` and shared by every test_endpoint_* module that asserts on it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from gpu_constructs.endpoint import (
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
from gpu_constructs.images import GpuImage

REGION = "us-east-1"
MODEL_KEY = "models/classifier/v1/model.tar.gz"
#: Logical id of an immutable resource: construct id + 8-hex content hash + CDK's 8-hex path hash.
HASHED_ID = re.compile(r"^(?P<prefix>[A-Za-z]+?)(?P<content>[0-9a-f]{8})[0-9A-F]{8}$")
#: The app's feature flags (cdk.json), so these stacks synthesize like the platform's.
CONTEXT: dict[str, Any] = json.loads((Path(__file__).resolve().parents[1] / "cdk.json").read_text())["context"]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def new_stack(app: cdk.App | None = None, name: str = "Test") -> cdk.Stack:
    app = app or cdk.App(context=CONTEXT, analytics_reporting=False)
    return cdk.Stack(app, name, env=cdk.Environment(account="123456789012", region=REGION))


def dlc_image(scope: cdk.Stack, usage: str = "inference") -> GpuImage:
    version = "2.6" if usage == "inference" else "2.8"
    return GpuImage.from_dlc(scope, f"Dlc{usage.capitalize()}", framework_version=version, usage=usage)  # type: ignore[arg-type]


def kms_bucket(stack: cdk.Stack, key: kms.IKey) -> s3.Bucket:
    return s3.Bucket(stack, "Artifacts", encryption=s3.BucketEncryption.KMS, encryption_key=key)


def imported_vpc(stack: cdk.Stack) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["us-east-1a", "us-east-1b"],
        isolated_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
    )


class Built:
    def __init__(self) -> None:
        from gpu_serve.metrics import LOG_METRIC_FILTERS

        self.stack = stack = new_stack()
        self.key = kms.Key(stack, "DataKey", enable_key_rotation=True)
        self.bucket = kms_bucket(stack, self.key)
        image = dlc_image(stack)
        vpc = imported_vpc(stack)
        self.caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
        self.async_caller = iam.Role(stack, "AsyncCaller", assumed_by=iam.AccountRootPrincipal())
        # A production real-time endpoint on 4 GPUs with everything configured.
        self.realtime = GpuEndpoint(
            stack,
            "Realtime",
            image=image,
            model_data=ModelData.from_bucket(self.bucket, MODEL_KEY),
            instance_type="ml.g5.12xlarge",
            initial_instance_count=2,
            production=True,
            endpoint_name="rt",
            vpc=vpc,
            encryption_key=self.key,
            # the DLC (TorchServe) takes batch size 1 only: larger batches are refused (DlcTorchServeBatching)
            batching=Batching(max_batch_size=1, max_batch_delay_ms=8, env=TORCHSERVE_BATCHING_ENV),
            environment={"LOG_LEVEL": "info"},
            data_capture=DataCapture(bucket=self.bucket, sampling_percentage=25, capture_output=False),
            deployment=BlueGreenDeployment.canary(
                percent=50, bake=cdk.Duration.minutes(10), termination_wait=cdk.Duration.minutes(15)
            ),
            alarms=EndpointAlarms(max_5xx_percent=2, max_model_latency_p99=cdk.Duration.millis(250)),
            autoscaling=EndpointAutoscaling.on_gpu_utilization(70, min_capacity=2, max_capacity=8),
            off_hours=OffHoursSchedule(start_hour=6, end_hour=20, time_zone="Europe/Berlin", off_hours_capacity=2),
            log_metric_filters=[f for f in LOG_METRIC_FILTERS if f.metric_name == "BatchSize"],
        )
        self.realtime.grant_invoke(self.caller)
        # An asynchronous endpoint that scales to zero.
        self.success = sns.Topic(stack, "Success")
        self.errors = sns.Topic(stack, "Errors")
        self.async_ = GpuEndpoint(
            stack,
            "Async",
            image=image,
            model_data=ModelData.from_bucket(self.bucket, MODEL_KEY),
            instance_type="ml.g5.xlarge",
            endpoint_name="batch",
            vpc=vpc,
            encryption_key=self.key,
            async_inference=AsyncInference(
                bucket=self.bucket,
                success_topic=self.success,
                error_topic=self.errors,
                include_response_in_notifications=True,
                max_concurrent_invocations_per_instance=4,
            ),
            autoscaling=EndpointAutoscaling.on_backlog(5, min_capacity=0, max_capacity=3),
        )
        self.async_.grant_invoke(self.async_caller)
        # Every default; production with one instance (a warning).
        self.defaults = GpuEndpoint(
            stack,
            "Defaults",
            image=image,
            model_data=ModelData.from_bucket(self.bucket, MODEL_KEY),
            instance_type="ml.g5.xlarge",
            production=True,
        )
        # An explicit CPU variant on an EBS-only type with a volume.
        self.cpu = GpuEndpoint(
            stack,
            "Cpu",
            image=image,
            model_data=ModelData.from_uri("s3://models-elsewhere/team/model.tar.gz"),
            instance_type="ml.m5.xlarge",
            cpu_variant=True,
            volume_size=cdk.Size.gibibytes(50),
            endpoint_name="cpu",
            autoscaling=EndpointAutoscaling.on_invocations(100, min_capacity=1, max_capacity=2),
        )
        self.template = assertions.Template.from_stack(stack)
        self.annotations = assertions.Annotations.from_stack(stack)
        self.json = self.template.to_json()

    def resources(self, type_: str, prefix: str) -> dict[str, Any]:
        return {k: v for k, v in self.template.find_resources(type_).items() if k.startswith(prefix)}

    def one_id(self, type_: str, prefix: str) -> str:
        found = self.resources(type_, prefix)
        assert len(found) == 1, (type_, prefix, sorted(found))
        return next(iter(found))

    def one(self, type_: str, prefix: str) -> dict[str, Any]:
        return self.resources(type_, prefix)[self.one_id(type_, prefix)]["Properties"]

    def policy_statements(self, role_prefix: str) -> list[dict[str, Any]]:
        policy = self.one("AWS::IAM::Policy", f"{role_prefix}DefaultPolicy")
        return policy["PolicyDocument"]["Statement"]


@cache
def built_endpoints() -> Built:
    """The four-endpoint stack, synthesized once per test process."""
    return Built()
