"""The inference stack: the SageMaker GPU endpoints of one environment (``inference`` in config).

Each entry of ``inference.endpoints`` becomes a :class:`~gpu_constructs.endpoint.GpuEndpoint` named
``<resource_prefix>-<key>``: the inference image of the images stack, the model artifact from config (a key
of the artifacts bucket, an ``s3://`` URI or an SSM parameter), the network stack's endpoint subnets and
security group, the data stack's KMS key and artifacts bucket (data capture, asynchronous inputs and
outputs). Alarms of every endpoint go to one KMS-encrypted SNS topic.

Promoting a model is a config change: commit a new ``model_data`` and let the pipeline apply it. A new
model and endpoint config replace the old ones (their logical ids carry a hash of their content); the
endpoint keeps its logical id and name and is updated through SageMaker's blue/green deployment (canary
or linear traffic shifting in prod), which rolls back on its own when a rollback alarm fires.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs.constants import ENDPOINT_SUBNETS
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
    InferenceImage,
    LogMetricFilterSpec,
    ModelData,
    OffHoursSchedule,
    monitoring_key,
)
from gpu_constructs.network import GpuNetwork
from gpu_constructs.retention import retention_days
from gpu_constructs.storage import PlatformStorage
from gpu_constructs.topics import Publisher, notification_topic
from stacks.config import EndpointConfig, EnvConfig
from stacks.image_parameter import image_from_parameter
from stacks.network_stack import removal_policy

ROOT = Path(__file__).resolve().parent.parent
INFERENCE_RUNTIME = ROOT / "containers" / "inference"

#: The inference server's log metrics shown on each endpoint's dashboard (gpu_serve images only).
RUNTIME_LOG_METRICS: tuple[str, ...] = ("BatchSize", "QueueLatency", "InvocationsThrottled")

#: Key prefixes of the artifacts bucket used by endpoints.
DATA_CAPTURE_PREFIX = "data-capture/"
ASYNC_PREFIX = "async/"


def inference_stack_name(resource_prefix: str) -> str:
    return f"{resource_prefix}-inference"


def runtime_module(name: str) -> ModuleType:
    """``gpu_serve.<name>`` from the inference runtime (containers/inference), installed or not."""
    try:
        return importlib.import_module(f"gpu_serve.{name}")
    except ModuleNotFoundError:
        if str(INFERENCE_RUNTIME) not in sys.path:
            sys.path.append(str(INFERENCE_RUNTIME))
        return importlib.import_module(f"gpu_serve.{name}")


def runtime_log_metric_filters(names: tuple[str, ...] = RUNTIME_LOG_METRICS) -> list[LogMetricFilterSpec]:
    """The runtime's published metric filters (``gpu_serve.metrics.LOG_METRIC_FILTERS``) named ``names``."""
    filters = {f.metric_name: f for f in runtime_module("metrics").LOG_METRIC_FILTERS}
    missing = [n for n in names if n not in filters]
    if missing:
        raise ValueError(f"the inference runtime publishes no metric filter named {missing}; it has {sorted(filters)}")
    return [filters[n] for n in names]


def _pascal(key: str) -> str:
    return "".join(part.capitalize() for part in key.split("-"))


class InferenceStack(Stack):
    """SageMaker real-time and asynchronous GPU endpoints with guardrails, per ``inference`` in config."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        network: GpuNetwork,
        storage: PlatformStorage,
        image: InferenceImage,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        inference = config.inference
        policy = removal_policy(config)
        # The platform image runs gpu_serve; a prebuilt DLC runs TorchServe (its own batching variables, and
        # none of gpu_serve's JSON log lines to turn into metrics).
        self.runtime = "torchserve" if getattr(image, "kind", None) == "dlc" else "gpu_serve"
        image = image_from_parameter(self, image, config, "inference")
        self.image = image

        self.monitoring_key = monitoring_key(self, "MonitoringKey", removal_policy=policy)
        # CloudWatch alarms of this account and region may publish to it (on the topic and the key).
        self.alarm_topic = notification_topic(
            self,
            "AlarmTopic",
            display_name=f"GPU platform ({config.env_name}) endpoint alarms",
            master_key=self.monitoring_key,
            emails=inference.alarm_emails,
            publishers=[Publisher.cloudwatch_alarms(self)],
        )
        CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic_arn)

        self.endpoints: dict[str, GpuEndpoint] = {}
        for key, settings in sorted(inference.endpoints.items()):
            self.endpoints[key] = self._endpoint(key, settings, network, storage, image)

    def _endpoint(
        self,
        key: str,
        settings: EndpointConfig,
        network: GpuNetwork,
        storage: PlatformStorage,
        image: InferenceImage,
    ) -> GpuEndpoint:
        config = self.config
        name = f"{config.resource_prefix}-{key}"
        cid = _pascal(key)
        artifacts = storage.artifacts_bucket

        async_config = None
        if settings.async_inference is not None:
            a = settings.async_inference
            success = errors = None
            if a.notifications:
                success = sns.Topic(
                    self,
                    f"{cid}AsyncSuccessTopic",
                    display_name=f"{name}: asynchronous inference results",
                    master_key=self.monitoring_key,
                    enforce_ssl=True,
                )
                errors = sns.Topic(
                    self,
                    f"{cid}AsyncErrorTopic",
                    display_name=f"{name}: asynchronous inference failures",
                    master_key=self.monitoring_key,
                    enforce_ssl=True,
                )
            async_config = AsyncInference(
                bucket=artifacts,
                prefix=ASYNC_PREFIX,
                success_topic=success,
                error_topic=errors,
                include_response_in_notifications=a.include_response_in_notifications,
                max_concurrent_invocations_per_instance=a.max_concurrent_invocations_per_instance,
            )

        capture = None
        if settings.data_capture is not None:
            c = settings.data_capture
            capture = DataCapture(
                bucket=artifacts,
                prefix=DATA_CAPTURE_PREFIX,
                sampling_percentage=c.sampling_percentage,
                capture_input=c.capture_input,
                capture_output=c.capture_output,
            )

        dep = settings.deployment
        deployment = BlueGreenDeployment(
            traffic=dep.traffic.upper(),  # type: ignore[arg-type]
            step_percent=dep.step,
            wait_interval=Duration.minutes(dep.wait_minutes),
            termination_wait=Duration.minutes(dep.termination_wait_minutes),
            max_execution_timeout=(
                Duration.minutes(dep.max_execution_timeout_minutes) if dep.max_execution_timeout_minutes else None
            ),
            auto_rollback=dep.auto_rollback,
        )
        al = settings.alarms
        alarms = EndpointAlarms(
            max_5xx_percent=al.max_5xx_percent,
            max_model_latency_p99=Duration.millis(al.max_model_latency_p99_ms),
            max_gpu_memory_percent=al.max_gpu_memory_percent,
            evaluation_periods=al.evaluation_periods,
            datapoints_to_alarm=al.datapoints_to_alarm,
        )
        scaling = None
        if settings.autoscaling is not None:
            s = settings.autoscaling
            scaling = EndpointAutoscaling(
                metric=s.metric,
                target=s.target,
                min_capacity=s.min_capacity,
                max_capacity=s.max_capacity,
                scale_in_cooldown=Duration.seconds(s.scale_in_cooldown_seconds),
                scale_out_cooldown=Duration.seconds(s.scale_out_cooldown_seconds),
            )
        off_hours = None
        if settings.off_hours is not None:
            o = settings.off_hours
            off_hours = OffHoursSchedule(
                start_hour=o.start_hour,
                end_hour=o.end_hour,
                week_days=o.week_days,
                time_zone=o.time_zone,
                off_hours_capacity=o.capacity,
            )
        batching = None
        if settings.batching is not None:
            batching = Batching(
                max_batch_size=settings.batching.max_batch_size,
                max_batch_delay_ms=settings.batching.max_batch_delay_ms,
                env=TORCHSERVE_BATCHING_ENV if self.runtime == "torchserve" else GPU_SERVE_BATCHING_ENV,
            )

        endpoint = GpuEndpoint(
            self,
            cid,
            image=image,
            model_data=self._model_data(settings, storage),
            instance_type=settings.instance_type,
            cpu_variant=settings.cpu_variant,
            initial_instance_count=settings.instance_count,
            production=config.is_production,
            endpoint_name=name,
            environment=settings.environment,
            batching=batching,
            network_isolation=settings.network_isolation,
            vpc=network.vpc,
            vpc_subnets=network.subnets(ENDPOINT_SUBNETS),
            security_groups=[network.endpoint_security_group],
            encryption_key=storage.key,
            volume_size_gib=settings.volume_size_gb,
            model_download_timeout=Duration.seconds(settings.model_download_timeout_seconds),
            container_startup_health_check_timeout=Duration.seconds(settings.startup_health_check_timeout_seconds),
            data_capture=capture,
            async_inference=async_config,
            deployment=deployment,
            alarms=alarms,
            autoscaling=scaling,
            off_hours=off_hours,
            alarm_topic=self.alarm_topic,
            monitoring_key=self.monitoring_key,
            log_retention=retention_days(config.data.log_retention_days, "data.log_retention_days"),
            log_metric_filters=runtime_log_metric_filters() if self.runtime == "gpu_serve" else (),
            removal_policy=removal_policy(config),
        )
        CfnOutput(self, f"{cid}EndpointName", value=endpoint.endpoint_name)
        CfnOutput(self, f"{cid}ModelName", value=endpoint.model_name)
        if endpoint.async_input_prefix is not None:
            # The bucket is the data stack's ArtifactsBucketName output.
            CfnOutput(self, f"{cid}AsyncInputPrefix", value=endpoint.async_input_prefix)
        return endpoint

    @staticmethod
    def _model_data(settings: EndpointConfig, storage: PlatformStorage) -> ModelData:
        value = settings.model_data
        if value.startswith("ssm:"):
            return ModelData.from_ssm_parameter(
                value[4:], bucket=storage.artifacts_bucket, prefix=settings.model_data_prefix
            )
        if value.startswith("s3://"):
            return ModelData.from_uri(value)
        return ModelData.from_bucket(storage.artifacts_bucket, value)
