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

from dataclasses import replace

from aws_cdk import CfnOutput, StackProps
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs.constants import ENDPOINT_SUBNETS
from gpu_constructs.endpoint import (
    GPU_SERVE_BATCHING_ENV,
    TORCHSERVE_BATCHING_ENV,
    AsyncInference,
    GpuEndpoint,
    InferenceImage,
    LogMetricFilterSpec,
    monitoring_key,
)
from gpu_constructs.endpoint.protocols import image_runtime
from gpu_constructs.network import GpuNetwork
from gpu_constructs.storage import PlatformStorage
from gpu_constructs.topics import Publisher, notification_topic
from gpu_serve.metrics import LOG_METRIC_FILTERS
from stacks.base import WorkloadStack
from stacks.config import EndpointAsyncConfig, EndpointConfig, InferenceConfig
from stacks.context import StackContext
from stacks.image_parameter import image_from_parameter
from stacks.naming import pascal_case

#: The inference server's log metrics shown on each endpoint's dashboard (gpu_serve images only).
RUNTIME_LOG_METRICS: tuple[str, ...] = ("BatchSize", "QueueLatency", "InvocationsThrottled")

#: Key prefixes of the artifacts bucket used by endpoints.
DATA_CAPTURE_PREFIX = "data-capture/"
ASYNC_PREFIX = "async/"


def inference_stack_name(resource_prefix: str) -> str:
    return f"{resource_prefix}-inference"


def runtime_log_metric_filters(names: tuple[str, ...] = RUNTIME_LOG_METRICS) -> list[LogMetricFilterSpec]:
    """The runtime's published metric filters (``gpu_serve.metrics.LOG_METRIC_FILTERS``) named ``names``."""
    filters = {f.metric_name: f for f in LOG_METRIC_FILTERS}
    missing = [n for n in names if n not in filters]
    if missing:
        raise ValueError(f"the inference runtime publishes no metric filter named {missing}; it has {sorted(filters)}")
    return [filters[n] for n in names]


class InferenceStack(WorkloadStack):
    """SageMaker real-time and asynchronous GPU endpoints with guardrails, per ``inference`` in config.

    :param inference: the ``inference`` section; kept as ``inference``.
    :param image: the inference image (the images stack's); its ``runtime`` says which server runs in it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        inference: InferenceConfig,
        image: InferenceImage,
        network: GpuNetwork,
        storage: PlatformStorage,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, network=network, storage=storage, props=props)
        self.inference = inference
        # The platform image runs gpu_serve; a prebuilt DLC runs TorchServe (its own batching variables, and
        # none of gpu_serve's JSON log lines to turn into metrics).
        self.runtime = image_runtime(image)
        image = image_from_parameter(self, image, context, "inference")
        self.image = image

        self.monitoring_key = monitoring_key(self, "MonitoringKey", removal_policy=self.removal)
        # CloudWatch alarms of this account and region may publish to it (on the topic and the key).
        self.alarm_topic = notification_topic(
            self,
            "AlarmTopic",
            display_name=f"GPU platform ({context.env_name}) endpoint alarms",
            master_key=self.monitoring_key,
            emails=inference.alarm_emails,
            publishers=[Publisher.cloudwatch_alarms(self)],
        )
        CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic_arn)

        self.endpoints: dict[str, GpuEndpoint] = {}
        for key, settings in sorted(inference.endpoints.items()):
            self.endpoints[key] = self._endpoint(key, settings, image)

    def _endpoint(self, key: str, settings: EndpointConfig, image: InferenceImage) -> GpuEndpoint:
        """One endpoint: ``settings`` plus the shared resources (network, data key, bucket, alarm topic)."""
        context, network, storage = self.context, self.network, self.storage
        name = context.resource_name(key)
        cid = pascal_case(key)
        artifacts = storage.artifacts_bucket
        capture = async_config = None
        if settings.data_capture is not None:
            capture = replace(settings.data_capture.capture(), bucket=artifacts, prefix=DATA_CAPTURE_PREFIX)
        if settings.async_inference is not None:
            async_config = self._async_inference(cid, name, settings.async_inference, artifacts)
        gpu_serve = self.runtime != "torchserve"

        endpoint = GpuEndpoint(
            self,
            cid,
            image=image,
            production=context.production,
            endpoint_name=name,
            vpc=network.vpc,
            vpc_subnets=network.subnets(ENDPOINT_SUBNETS),
            security_groups=[network.endpoint_security_group],
            encryption_key=storage.key,
            data_capture=capture,
            async_inference=async_config,
            alarm_topic=self.alarm_topic,
            monitoring_key=self.monitoring_key,
            log_retention=context.log_retention,
            log_metric_filters=runtime_log_metric_filters() if gpu_serve else (),
            removal_policy=self.removal,
            **settings.endpoint_props(
                artifacts_bucket=artifacts,
                batching_env=GPU_SERVE_BATCHING_ENV if gpu_serve else TORCHSERVE_BATCHING_ENV,
            ),
        )
        CfnOutput(self, f"{cid}EndpointName", value=endpoint.endpoint_name)
        CfnOutput(self, f"{cid}ModelName", value=endpoint.model_name)
        if endpoint.async_input_prefix is not None:
            # The bucket is the data stack's ArtifactsBucketName output.
            CfnOutput(self, f"{cid}AsyncInputPrefix", value=endpoint.async_input_prefix)
        return endpoint

    def _async_inference(
        self, cid: str, name: str, settings: EndpointAsyncConfig, bucket: s3.IBucket
    ) -> AsyncInference:
        """The endpoint's asynchronous inference: ``settings`` plus the bucket and, if wanted, its SNS topics."""
        success = error = None
        if settings.notifications:
            success, error = (
                sns.Topic(
                    self,
                    f"{cid}Async{suffix}Topic",
                    display_name=f"{name}: asynchronous inference {what}",
                    master_key=self.monitoring_key,
                    enforce_ssl=True,
                )
                for suffix, what in (("Success", "results"), ("Error", "failures"))
            )
        return replace(
            settings.async_inference(), bucket=bucket, prefix=ASYNC_PREFIX, success_topic=success, error_topic=error
        )
