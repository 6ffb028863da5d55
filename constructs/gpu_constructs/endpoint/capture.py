"""Where requests and responses go in S3: :class:`DataCapture` and :class:`AsyncInference`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns

from gpu_constructs.deprecation import warn_deprecated
from gpu_constructs.endpoint.acknowledgments import ASYNC_PREFIX_REASON, CAPTURE_PREFIX_REASON
from gpu_constructs.endpoint.base import check_prefix, invalid
from gpu_constructs.endpoint.checks import check_async_concurrency, check_data_capture
from gpu_constructs.s3_keys import join_key_prefix
from gpu_constructs.storage import grant_objects

#: Object-key patterns with a wildcard that a binding granted, each with the reason it is safe.
WildcardObjects = dict[str, str]


@dataclass(frozen=True)
class DataCapture:
    """Capture of requests and responses to S3 (KMS-encrypted), for Model Monitor and debugging.

    :param bucket: destination bucket (the platform's artifacts bucket). Required by ``GpuEndpoint``; a
        config that only describes the setting leaves it to the stack (``dataclasses.replace``).
    :param prefix: key prefix; the endpoint name is appended (default: ``data-capture/``).
    :param sampling_percentage: share of requests captured, 0-100 (default: 100).
    :param capture_input: capture request bodies (default: True).
    :param capture_output: capture response bodies (default: True).
    :param json_content_types: content types stored as text instead of base64 (default: application/json).
    :param encryption_key: KMS key of the captured objects (default: the bucket's key, else the endpoint's).
    """

    bucket: s3.IBucket | None = None
    prefix: str = "data-capture/"
    sampling_percentage: int = 100
    capture_input: bool = True
    capture_output: bool = True
    json_content_types: Sequence[str] = ("application/json",)
    encryption_key: kms.IKey | None = None

    def validate(self, where: str) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a bad value."""
        check_data_capture(
            where,
            sampling_percentage=self.sampling_percentage,
            capture_input=self.capture_input,
            capture_output=self.capture_output,
        )
        check_prefix(where, "data_capture.prefix", self.prefix)

    def bind(self, role: iam.IRole, endpoint_name: str, default_key: kms.IKey) -> tuple[Any, WildcardObjects]:
        """Let ``role`` write the captured objects; the ``DataCaptureConfig`` and the wildcard it granted."""
        bucket = self.bucket
        assert bucket is not None  # validated by the endpoint
        prefix = join_key_prefix(self.prefix, endpoint_name)
        grant_objects(role, bucket, f"{prefix}*", write=True)
        key = self.encryption_key or bucket.encryption_key or default_key
        key.grant(role, "kms:Encrypt", "kms:GenerateDataKey")
        modes = [m for m, on in (("Input", self.capture_input), ("Output", self.capture_output)) if on]
        config = sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
            enable_capture=True,
            initial_sampling_percentage=self.sampling_percentage,
            destination_s3_uri=f"s3://{bucket.bucket_name}/{prefix}",
            kms_key_id=key.key_arn,
            capture_options=[sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode=m) for m in modes],
            capture_content_type_header=(
                sagemaker.CfnEndpointConfig.CaptureContentTypeHeaderProperty(
                    json_content_types=list(self.json_content_types)
                )
                if self.json_content_types
                else None
            ),
        )
        return config, {f"{prefix}*": CAPTURE_PREFIX_REASON}


@dataclass(frozen=True)
class AsyncInference:
    """Asynchronous inference: requests are read from S3, responses written to S3, SNS notified.

    :param bucket: bucket of inputs, outputs and failures (the platform's artifacts bucket). Required by
        ``GpuEndpoint``; a config that only describes the setting leaves it to the stack.
    :param prefix: key prefix; ``<endpoint name>/{input,output,failure}/`` is appended (default: ``async/``).
    :param success_topic: SNS topic notified on success (default: none).
    :param error_topic: SNS topic notified on failure (default: none).
    :param include_response_in_notifications: put responses up to 128 KB in the notifications (default: False).
    :param max_concurrent_invocations_per_instance: requests the SageMaker client sends to one
        container at once, 1-1000 (default: SageMaker chooses).
    :param encryption_key: KMS key of outputs (default: the bucket's key, else the endpoint's).
    """

    bucket: s3.IBucket | None = None
    prefix: str = "async/"
    success_topic: sns.ITopic | None = None
    error_topic: sns.ITopic | None = None
    include_response_in_notifications: bool = False
    max_concurrent_invocations_per_instance: int | None = None
    encryption_key: kms.IKey | None = None

    def validate(self, where: str) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a bad value.

        A response in the notifications needs a topic to carry it. The config, which creates the topics in the
        stack, checks its own ``notifications`` key instead and calls the rules of the other settings directly.
        """
        check_async_concurrency(where, self.max_concurrent_invocations_per_instance)
        check_prefix(where, "async_inference.prefix", self.prefix)
        self._validate_topics(where)

    def validate_topics(self, where: str) -> None:
        """Deprecated: :meth:`validate` checks the topics too."""
        warn_deprecated("gpu_constructs.endpoint.AsyncInference.validate_topics", "AsyncInference.validate")
        self._validate_topics(where)

    def _validate_topics(self, where: str) -> None:
        if self.include_response_in_notifications and not (self.success_topic or self.error_topic):
            raise invalid(
                where,
                "async_inference.include_response_in_notifications",
                True,
                "True only with a success_topic or error_topic to carry the response",
            )

    def key_prefix(self, endpoint_name: str, kind: str) -> str:
        """``<prefix>/<endpoint name>/<kind>/``: where the ``input``, ``output`` or ``failure`` objects are."""
        return f"{join_key_prefix(self.prefix, endpoint_name)}{kind}/"

    def bind(self, role: iam.IRole, endpoint_name: str, default_key: kms.IKey) -> tuple[Any, WildcardObjects]:
        """Let ``role`` read inputs, write outputs and notify; the ``AsyncInferenceConfig`` and its wildcards."""
        bucket = self.bucket
        assert bucket is not None  # validated by the endpoint
        wildcards: WildcardObjects = {}
        for kind, write in (("input", False), ("output", True), ("failure", True)):
            pattern = f"{self.key_prefix(endpoint_name, kind)}*"
            grant_objects(role, bucket, pattern, read=not write, write=write)
            wildcards[pattern] = ASYNC_PREFIX_REASON
        key = self.encryption_key or bucket.encryption_key or default_key
        key.grant(role, "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey")
        client = None
        if self.max_concurrent_invocations_per_instance is not None:
            client = sagemaker.CfnEndpointConfig.AsyncInferenceClientConfigProperty(
                max_concurrent_invocations_per_instance=self.max_concurrent_invocations_per_instance
            )
        config = sagemaker.CfnEndpointConfig.AsyncInferenceConfigProperty(
            client_config=client,
            output_config=sagemaker.CfnEndpointConfig.AsyncInferenceOutputConfigProperty(
                s3_output_path=f"s3://{bucket.bucket_name}/{self.key_prefix(endpoint_name, 'output')}",
                s3_failure_path=f"s3://{bucket.bucket_name}/{self.key_prefix(endpoint_name, 'failure')}",
                kms_key_id=key.key_arn,
                notification_config=self._notifications(role),
            ),
        )
        return config, wildcards

    def _notifications(self, role: iam.IRole) -> Any:
        """``role`` may publish to the topics (and use their keys); the notification config names them."""
        for topic in (self.success_topic, self.error_topic):
            if topic is not None:
                iam.Grant.add_to_principal(grantee=role, actions=["sns:Publish"], resource_arns=[topic.topic_arn])
                topic_key = getattr(topic, "master_key", None)
                if topic_key is not None:
                    topic_key.grant(role, "kms:Decrypt", "kms:GenerateDataKey")
        if not (self.success_topic or self.error_topic):
            return None
        include = []
        if self.include_response_in_notifications:
            if self.success_topic:
                include.append("SUCCESS_NOTIFICATION_TOPIC")
            if self.error_topic:
                include.append("ERROR_NOTIFICATION_TOPIC")
        return sagemaker.CfnEndpointConfig.AsyncInferenceNotificationConfigProperty(
            success_topic=self.success_topic.topic_arn if self.success_topic else None,
            error_topic=self.error_topic.topic_arn if self.error_topic else None,
            include_inference_response_in=include or None,
        )
