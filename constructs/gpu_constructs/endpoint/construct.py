"""``GpuEndpoint``: the construct (model, endpoint config, endpoint) and the rules that need all its inputs.

Its value types validate themselves (``validate``); its monitoring, autoscaling and nag acknowledgments are
in :mod:`~gpu_constructs.endpoint.monitoring`, :mod:`~gpu_constructs.endpoint.autoscaling` and
:mod:`~gpu_constructs.endpoint.acknowledgments`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jsii
from aws_cdk import Annotations, Duration, Names, RemovalPolicy, Size, SizeRoundingBehavior, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs import catalog
from gpu_constructs.constants import SAGEMAKER_NAME_RE
from gpu_constructs.deprecation import warn_deprecated
from gpu_constructs.dlc import TORCHSERVE_BATCH_SIZE_ENV, dlc_batching_problem, is_pytorch_inference_dlc
from gpu_constructs.endpoint.acknowledgments import MODEL_PREFIX_REASON, acknowledge_role_policy
from gpu_constructs.endpoint.alarms import EndpointAlarms
from gpu_constructs.endpoint.autoscaling import add_autoscaling
from gpu_constructs.endpoint.base import (
    LOG_GROUP_PREFIX,
    PROVISION_TIMEOUT_RANGE_S,
    SINGLE_INSTANCE_WARNING_ID,
    TIMEOUT_RANGE_S,
    VOLUME_SIZE_RANGE_GB,
)
from gpu_constructs.endpoint.batching import Batching, check_environment
from gpu_constructs.endpoint.capture import AsyncInference, DataCapture
from gpu_constructs.endpoint.checks import (
    DEFAULT_MODEL_DOWNLOAD_TIMEOUT_S,
    DEFAULT_STARTUP_HEALTH_CHECK_TIMEOUT_S,
    check_hosting_instance_type,
    volume_size_problem,
)
from gpu_constructs.endpoint.deployment import BlueGreenDeployment
from gpu_constructs.endpoint.model_data import ModelData
from gpu_constructs.endpoint.monitoring import (
    EndpointMetrics,
    check_log_metric_filters,
    create_alarms,
    create_dashboard,
    create_metric_filters,
)
from gpu_constructs.endpoint.monitoring import monitoring_key as _new_monitoring_key
from gpu_constructs.endpoint.pools import (
    CAPACITY_RESERVATIONS_ONLY,
    InstancePool,
    as_pools,
    check_capacity_reservation,
    check_instance_pools,
)
from gpu_constructs.endpoint.protocols import InferenceImage, LogMetricFilterSpec, image_runtime
from gpu_constructs.endpoint.scaling import EndpointAutoscaling, OffHoursSchedule
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.keys import given_or_new_key
from gpu_constructs.network import select_subnets
from gpu_constructs.removal import named_log_group
from gpu_constructs.security_groups import cluster_security_group
from gpu_constructs.storage import grant_objects
from gpu_constructs.topics import notification_topic

_MAX_NAME = 63
_HASH_CHARS = 8


def _timeouts(download: Duration | None, startup: Duration | None) -> tuple[Duration, Duration]:
    """The model download and start-up health check timeouts: each given one, else its default from
    :mod:`~gpu_constructs.endpoint.checks` (the config takes its defaults from there too)."""
    return (
        Duration.seconds(DEFAULT_MODEL_DOWNLOAD_TIMEOUT_S) if download is None else download,
        Duration.seconds(DEFAULT_STARTUP_HEALTH_CHECK_TIMEOUT_S) if startup is None else startup,
    )


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class GpuEndpoint(Construct):
    """A SageMaker real-time or asynchronous endpoint on GPU instances with deployment guardrails.

    :param image: the inference image (``GpuImage``; any object with its members). Must be an
        inference image whose CUDA version can drive the instance type's GPU.
    :param model_data: the model artifact (:class:`ModelData`).
    :param instance_type: SageMaker hosting type, e.g. ``ml.g5.xlarge``; must have an NVIDIA GPU
        unless ``cpu_variant`` is True (checked against the catalog). Required unless ``instance_pools`` is given
        (then default: the first pool's type; another type is an error).
    :param instance_pools: fallback instance types, first choice first (default: none, the one ``instance_type``):
        1-5 names or :class:`~gpu_constructs.endpoint.pools.InstancePool` (with a model name override), rendered as
        ``InstancePools`` with priorities 1..n in list order and no ``InstanceType``. SageMaker provisions from the
        first pool and moves to the next on an insufficient-capacity error, at creation and on scale-out. Checked
        against the catalog (:func:`~gpu_constructs.endpoint.pools.check_instance_pools`): NVIDIA GPU types for
        hosting, each once, the image's CUDA able to drive each GPU, at least the first choice's GPU memory per
        device and exactly its GPUs per instance. Not for a CPU variant, nor with ``capacity_reservation_arn``.
    :param max_cost_ratio: cost ceiling of ``instance_pools``: each pool's hourly price at most this many times
        the first choice's (the catalog's price table for the stack's region; default: none).
    :param cpu_variant: declare a CPU-only variant (default: False; a CPU type is then allowed).
    :param initial_instance_count: instances at creation (default: 1; in production, use 2 or more:
        one instance is a warning because an AZ outage takes the endpoint down).
    :param production: this is a production endpoint, which turns the single-instance warning on
        (default: False).
    :param endpoint_name: endpoint name (default: derived from the construct path; 1-63 characters
        of letters, digits and hyphens). Models and endpoint configs get names generated by
        CloudFormation (they are replaced on every change).
    :param variant_name: production variant name (default: ``AllTraffic``). Keep it stable: blue/green
        deployments require the same variant name in the old and new config.
    :param role: execution role (default: a new role that SageMaker assumes, with only the grants below).
    :param environment: container environment (default: none). At most 100 variables.
    :param batching: the server's dynamic batching (default: none — the image's own defaults). On the AWS
        PyTorch inference DLC a ``max_batch_size`` above 1 is refused (its TorchServe handler fails a whole
        batch for one bad request; see :func:`gpu_constructs.dlc.dlc_batching_problem`): batch with the
        platform's inference image (containers/inference, gpu_serve) instead.
    :param network_isolation: no network access for the container (default: True).
    :param vpc: VPC of the model (default: none). Required for production use.
    :param vpc_subnets: subnets of the model (default: the VPC's private subnets).
    :param security_groups: security groups of the model (default: a new group with HTTPS egress only).
    :param encryption_key: KMS key of the ML storage volume and of outputs without a key of their own
        (default: a new key with rotation).
    :param volume_size: EBS ML storage volume per instance, 1-512 GiB in whole GiB (default: SageMaker's default).
        Only for types without local NVMe (those store the model on the instance store).
    :param volume_size_gib: deprecated: ``volume_size=Size.gibibytes(...)``.
    :param model_download_timeout: time to download and extract the model, 60 s-1 h (default: 20 minutes,
        sized for multi-GB GPU models).
    :param container_startup_health_check_timeout: time for ``/ping`` to pass after start, 60 s-1 h
        (default: 10 minutes, time to load weights onto the GPU).
    :param instance_provision_timeout: how long SageMaker keeps provisioning the variant's instances after an
        insufficient-capacity error before the deployment fails, 5 minutes-1 hour (default: SageMaker's).
    :param capacity_reservation_arn: an ML capacity reservation (a training plan for endpoints) to launch the
        instances into, with preference ``capacity-reservations-only`` (default: none, on-demand capacity). Its
        instance type must be ``instance_type``; when the reservation ends, the endpoint stops serving.
    :param data_capture: request/response capture (default: none).
    :param async_inference: asynchronous inference (default: none — a real-time endpoint).
    :param deployment: blue/green deployment (default: all at once, 5-minute bake, auto rollback).
    :param alarms: alarm thresholds (default: :class:`EndpointAlarms`).
    :param autoscaling: target-tracking autoscaling (default: none — a fixed instance count).
    :param off_hours: scale down outside working hours (default: none).
    :param alarm_topic: SNS topic for alarm notifications (default: a new topic encrypted with the
        monitoring key). CloudWatch alarms are admitted on its policy and on its key's policy; an imported
        topic or key gets a warning naming the statements to add.
    :param monitoring_key: KMS key of the log group and the default topic (default: a new key from
        :func:`monitoring_key`; a key you pass needs the same key policy).
    :param log_retention: retention of the endpoint's log group (default: 3 months).
    :param log_metric_filters: metric filters over the server's log lines, e.g.
        ``gpu_serve.metrics.LOG_METRIC_FILTERS`` (default: none).
    :param log_metrics_namespace: CloudWatch namespace of those metrics; the endpoint name is
        appended (default: ``GpuServe``).
    :param removal_policy: policy of the log group and default keys (default: RETAIN).
    :param dashboard: create a CloudWatch dashboard (default: True).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        image: InferenceImage,
        model_data: ModelData,
        instance_type: str | None = None,
        instance_pools: Sequence[str | InstancePool] | None = None,
        max_cost_ratio: float | None = None,
        cpu_variant: bool = False,
        initial_instance_count: int = 1,
        production: bool = False,
        endpoint_name: str | None = None,
        variant_name: str = "AllTraffic",
        role: iam.IRole | None = None,
        environment: Mapping[str, str] | None = None,
        batching: Batching | None = None,
        network_isolation: bool = True,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        encryption_key: kms.IKey | None = None,
        volume_size: Size | None = None,
        volume_size_gib: int | None = None,
        model_download_timeout: Duration | None = None,
        container_startup_health_check_timeout: Duration | None = None,
        instance_provision_timeout: Duration | None = None,
        capacity_reservation_arn: str | None = None,
        data_capture: DataCapture | None = None,
        async_inference: AsyncInference | None = None,
        deployment: BlueGreenDeployment | None = None,
        alarms: EndpointAlarms | None = None,
        autoscaling: EndpointAutoscaling | None = None,
        off_hours: OffHoursSchedule | None = None,
        alarm_topic: sns.ITopic | None = None,
        monitoring_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
        log_metric_filters: Sequence[LogMetricFilterSpec] = (),
        log_metrics_namespace: str = "GpuServe",
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        dashboard: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        self.deployment = deployment or BlueGreenDeployment()
        self.alarm_thresholds = alarms or EndpointAlarms()
        self.is_async = async_inference is not None
        self._async = async_inference
        self.variant_name = variant_name
        self.autoscaling = autoscaling
        env: dict[str, str] = dict(environment or {})
        timeouts = _timeouts(model_download_timeout, container_startup_health_check_timeout)
        volume_gib = self._volume_gib(volume_size, volume_size_gib)

        # -- eager validation: the value types' own rules, then those across inputs ---------------------
        self._validate_capacity(image, instance_type, instance_pools, max_cost_ratio, cpu_variant)
        self._validate_model(image, model_data, self.instance.sagemaker_name, cpu_variant, initial_instance_count)
        self._validate_reservation(capacity_reservation_arn)
        self.endpoint_name = self._validate_endpoint_name(endpoint_name)
        self._validate_container(variant_name, env, batching, image)
        self._validate_hosting(vpc, vpc_subnets, security_groups, volume_gib, timeouts)
        self._validate_provision_timeout(instance_provision_timeout)
        self._provision_timeout = instance_provision_timeout
        self._validate_traffic(data_capture, async_inference, initial_instance_count)
        self._validate_scaling(autoscaling, off_hours, cpu_variant, initial_instance_count)
        check_log_metric_filters(path_of(self), log_metric_filters)
        self._warn_single_instance(production, initial_instance_count, autoscaling, off_hours)
        self.gpu_count = self.instance.nvidia_gpu_count if not cpu_variant else 0
        self._metrics = EndpointMetrics(self.endpoint_name, variant_name, self.alarm_thresholds.metric_period())

        # -- keys, role, network, log group, grants ------------------------------------------------------
        self._create_keys_and_role(encryption_key, monitoring_key, role, removal_policy)
        self.security_groups = self._security_groups(vpc, security_groups)
        self._connections = ec2.Connections(security_groups=self.security_groups)
        # Created here so it is encrypted and expires.
        log_group_name = f"{LOG_GROUP_PREFIX}{self.endpoint_name}"
        self.log_group = named_log_group(
            self, "LogGroup", log_group_name, self.monitoring_key, log_retention, removal_policy
        )
        self._wildcard_objects: dict[str, str] = {}
        model_data_url, patterns = model_data.bind(self, self.role)
        for pattern in patterns:
            self._wildcard_objects[pattern] = MODEL_PREFIX_REASON
        image.grant_pull(self.role)
        self._grant_runtime(vpc)

        # -- model, endpoint config, alarms (before the endpoint, which names them for rollback), endpoint --
        if batching is not None:
            env.update(batching.environment())
        self._create_model(image.image_uri, model_data_url, env, network_isolation, vpc, vpc_subnets)
        self._create_endpoint_config(initial_instance_count, volume_gib, timeouts, data_capture, async_inference)
        if alarm_topic is None:
            alarm_topic = notification_topic(
                self,
                "AlarmTopic",
                display_name=f"Alarms of SageMaker endpoint {self.endpoint_name}",
                master_key=self.monitoring_key,
            )
        self.alarm_topic: sns.ITopic = alarm_topic
        self.rollback_alarms: list[cloudwatch.Alarm] = create_alarms(
            self, self._metrics, self.alarm_thresholds, self.alarm_topic, self.gpu_count
        )
        self._grant_rollback_alarms()
        self._create_endpoint(timeouts, retain_variant_properties=bool(autoscaling or off_hours))

        # -- autoscaling, monitoring, acknowledgments ----------------------------------------------------
        self.scalable_target = add_autoscaling(
            self,
            self._metrics,
            self.resource,
            scaling=autoscaling,
            schedule=off_hours,
            count=initial_instance_count,
            gpu_count=self.gpu_count,
        )
        self._create_monitoring(log_metric_filters, log_metrics_namespace, dashboard=dashboard)
        acknowledge_role_policy(self, self.role, self._wildcard_objects)

    # ----------------------------------------------------------------------------------------------
    # Interfaces
    # ----------------------------------------------------------------------------------------------

    @property
    def connections(self) -> ec2.Connections:
        return self._connections

    @property
    def grant_principal(self) -> iam.IPrincipal:
        return self.role

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow ``grantee`` to invoke the endpoint (real-time, streaming or, for async, InvokeEndpointAsync).

        For an asynchronous endpoint, callers also get write access to the input prefix and read
        access to the output and failure prefixes, which invoking it requires.
        """
        actions = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
        if self._async is not None:
            actions = ["sagemaker:InvokeEndpointAsync"]
        grant = iam.Grant.add_to_principal(grantee=grantee, actions=actions, resource_arns=[self.endpoint_arn])
        if self._async is not None and self._async.bucket is not None:
            for kind in ("input", "output", "failure"):
                pattern = f"{self._async.key_prefix(self.endpoint_name, kind)}*"
                write = kind == "input"
                grant = grant.combine(grant_objects(grantee, self._async.bucket, pattern, read=not write, write=write))
        return grant

    @property
    def async_input_prefix(self) -> str | None:
        """Key prefix (in the async bucket) where callers upload requests; None for real-time."""
        return self._async.key_prefix(self.endpoint_name, "input") if self._async is not None else None

    # -- metrics --------------------------------------------------------------------------------------

    def metric(self, metric_name: str, **options: Any) -> cloudwatch.Metric:
        """A CloudWatch metric of this endpoint (dimensions EndpointName and, by default, VariantName).

        ``options``: ``namespace`` (default: ``AWS/SageMaker``), ``statistic`` (default: Sum), ``period``
        (default: the alarms' period), ``variant_dimension`` (default: True), ``label``; see
        :meth:`~gpu_constructs.endpoint.monitoring.EndpointMetrics.metric`.
        """
        return self._metrics.metric(metric_name, **options)

    def metric_instance(self, metric_name: str, *, statistic: str = "Average") -> cloudwatch.Metric:
        """A per-instance utilization metric (GPUUtilization, GPUMemoryUtilization, CPUUtilization, ...)."""
        return self._metrics.instance(metric_name, statistic=statistic)

    # ----------------------------------------------------------------------------------------------
    # Validation: the value types check themselves; here what needs the endpoint's other inputs
    # ----------------------------------------------------------------------------------------------

    def _validate_model(
        self, image: InferenceImage, model_data: ModelData, instance_type: str, cpu_variant: bool, count: int
    ) -> None:
        where = path_of(self)
        image.require_usage("inference", where)
        if not cpu_variant:
            image.check_instance(instance_type, where)
        model_data.validate(where)
        if not is_token(count) and (not isinstance(count, int) or count < 1):
            raise fail(self, "initial_instance_count", count, "an integer >= 1")

    def _validate_instance_type(self, instance_type: str, cpu_variant: bool) -> catalog.InstanceType:
        return check_hosting_instance_type(path_of(self), instance_type, cpu_variant)

    def _validate_capacity(
        self,
        image: InferenceImage,
        instance_type: str | None,
        pools: Sequence[str | InstancePool] | None,
        max_cost_ratio: float | None,
        cpu_variant: bool,
    ) -> None:
        """The variant's instance type, or its instance pools checked as a fallback chain (``self.instance`` is
        the first choice, ``self.instance_pools`` every pool's catalog entry, in priority order)."""
        self._pools: list[InstancePool] = []
        if pools is None:
            if max_cost_ratio is not None:
                raise fail(self, "max_cost_ratio", max_cost_ratio, "no value without instance_pools (it bounds them)")
            if instance_type is None:
                raise fail(self, "instance_type", None, "an instance type, or instance_pools (first choice first)")
            self.instance = self._validate_instance_type(instance_type, cpu_variant)
            self.instance_pools: list[catalog.InstanceType] = []
            return
        where = path_of(self)
        if cpu_variant:
            raise fail(self, "instance_pools", list(pools), "none for a CPU variant (the pools are checked as GPUs)")
        self._pools = as_pools(where, pools)
        region = Stack.of(self).region
        self.instance_pools = check_instance_pools(
            where,
            self._pools,
            cuda_version=image.cuda_version,
            max_cost_ratio=max_cost_ratio,
            region="us-east-1" if is_token(region) else region,
        )
        self.instance = self.instance_pools[0]
        if instance_type is not None and instance_type.strip() != self.instance.sagemaker_name:
            raise fail(
                self,
                "instance_type",
                instance_type,
                f"none or the first pool's type {self.instance.sagemaker_name!r} when instance_pools is given",
            )

    def _validate_reservation(self, arn: str | None) -> None:
        self._reservation_arn = arn
        if arn is not None:
            check_capacity_reservation(path_of(self), arn, instance_pools=bool(self._pools))

    def _validate_endpoint_name(self, name: str | None) -> str:
        if name is None:
            return Names.unique_resource_name(self, max_length=_MAX_NAME, separator="-").lower()
        if not SAGEMAKER_NAME_RE.match(name) or len(name) > _MAX_NAME:
            raise fail(
                self, "endpoint_name", name, "1-63 letters, digits and single hyphens, starting and ending alphanumeric"
            )
        return name

    def _validate_container(
        self, variant_name: str, env: Mapping[str, str], batching: Batching | None, image: InferenceImage
    ) -> None:
        if not SAGEMAKER_NAME_RE.match(variant_name):
            raise fail(self, "variant_name", variant_name, "1-63 letters, digits and hyphens, starting alphanumeric")
        check_environment(path_of(self), env, batching)
        if batching is not None:
            batching.validate(path_of(self))
        self._validate_dlc_batching(image, env, batching)

    def _validate_dlc_batching(self, image: InferenceImage, env: Mapping[str, str], batching: Batching | None) -> None:
        """No TorchServe batching above 1 on the PyTorch inference DLC (see ``dlc.dlc_batching_problem``).

        Refused (not silently forced to 1): on a DLC image, ``batching.max_batch_size`` above 1; on any image,
        a ``SAGEMAKER_TS_BATCH_SIZE`` above 1 (the variable only the DLC's TorchServe toolkit reads).
        """
        uri = image.image_uri
        is_dlc = image_runtime(image) == "torchserve" or (not is_token(uri) and is_pytorch_inference_dlc(uri))
        if batching is not None and is_dlc:
            problem = dlc_batching_problem(batching.max_batch_size)
            if problem is not None:
                raise ValidationError(path_of(self), f"batching.{problem}")
        merged = {**env, **(batching.environment() if batching is not None else {})}
        raw = merged.get(TORCHSERVE_BATCH_SIZE_ENV)
        if raw is None or is_token(raw):
            return
        try:
            size = int(raw)
        except ValueError:
            raise fail(
                self, f"environment {TORCHSERVE_BATCH_SIZE_ENV}", raw, "an integer (TorchServe batch size)"
            ) from None
        problem = dlc_batching_problem(size)
        if problem is not None:
            raise ValidationError(path_of(self), f"environment {TORCHSERVE_BATCH_SIZE_ENV}: {problem}")

    def _validate_hosting(
        self,
        vpc: ec2.IVpc | None,
        subnets: ec2.SubnetSelection | None,
        security_groups: Sequence[ec2.ISecurityGroup] | None,
        volume_size_gib: int | None,
        timeouts: tuple[Duration, Duration],
    ) -> None:
        if vpc is None and (subnets is not None or security_groups):
            raise fail(self, "vpc", None, "a VPC whenever vpc_subnets or security_groups are given")
        if security_groups is not None and len(security_groups) > 5:
            raise fail(self, "security_groups (count)", len(security_groups), "1 to 5 security groups")
        self._validate_volume_size(volume_size_gib)
        low, high = TIMEOUT_RANGE_S
        for name, value in zip(
            ("model_download_timeout", "container_startup_health_check_timeout"), timeouts, strict=True
        ):
            seconds = value.to_seconds()
            if not low <= seconds <= high:
                raise fail(self, f"{name} (seconds)", seconds, f"{low} to {high} seconds")

    def _validate_provision_timeout(self, timeout: Duration | None) -> None:
        if timeout is None or is_token(timeout.to_seconds()):
            return
        low, high = PROVISION_TIMEOUT_RANGE_S
        seconds = timeout.to_seconds()
        if not low <= seconds <= high:
            raise fail(self, "instance_provision_timeout (seconds)", seconds, f"{low} to {high} seconds")

    def _volume_gib(self, size: Size | None, deprecated_gib: int | None) -> int | None:
        """The ML storage volume in GiB: ``volume_size`` in whole GiB, or the deprecated ``volume_size_gib``."""
        if deprecated_gib is not None:
            if size is not None:
                raise fail(
                    self, "volume_size_gib", deprecated_gib, "no value when volume_size is given (the same setting)"
                )
            warn_deprecated("GpuEndpoint(volume_size_gib=...)", "volume_size=Size.gibibytes(...)")
            return deprecated_gib
        if size is None:
            return None
        try:
            return int(size.to_gibibytes(rounding=SizeRoundingBehavior.FAIL))
        except RuntimeError as error:  # jsii raises a RuntimeError for a fractional GiB
            raise fail(self, "volume_size", str(size), "a whole number of GiB") from error

    def _validate_volume_size(self, size: int | None) -> None:
        """A volume size every type of the variant takes (with instance pools, each pool's type)."""
        if size is None or is_token(size):
            return
        for it in self.instance_pools or [self.instance]:
            problem = volume_size_problem(size, it)
            if problem == "local_nvme":
                raise fail(
                    self,
                    "volume_size (GiB)",
                    size,
                    f"none for {it.sagemaker_name}: it has {it.local_nvme_gb} GB of local NVMe, "
                    "which SageMaker uses instead of an EBS volume",
                )
            if problem == "out_of_range":
                low, high = VOLUME_SIZE_RANGE_GB
                raise fail(self, "volume_size (GiB)", size, f"an integer in [{low}, {high}]")

    def _validate_traffic(self, capture: DataCapture | None, async_config: AsyncInference | None, count: int) -> None:
        where = path_of(self)
        for name, value in (("data_capture", capture), ("async_inference", async_config)):
            if value is not None and value.bucket is None:
                raise fail(self, f"{name}.bucket", None, "a bucket (of this app or imported)")
        if capture is not None:
            capture.validate(where)
        if async_config is not None:
            async_config.validate(where)
        self.deployment.validate(where, initial_instance_count=count)
        self.alarm_thresholds.validate(where)

    def _validate_scaling(
        self,
        scaling: EndpointAutoscaling | None,
        schedule: OffHoursSchedule | None,
        cpu_variant: bool,
        count: int,
    ) -> None:
        where = path_of(self)
        if scaling is not None:
            scaling.validate(where, is_async=self.is_async, cpu_variant=cpu_variant, initial_instance_count=count)
        if schedule is not None:
            high = scaling.max_capacity if scaling else count
            schedule.validate(where, is_async=self.is_async, max_capacity=high)

    def _warn_single_instance(
        self,
        production: bool,
        count: int,
        scaling: EndpointAutoscaling | None,
        off_hours: OffHoursSchedule | None,
    ) -> None:
        if not production or self.is_async or is_token(count):
            return
        floor = min(count, scaling.min_capacity) if scaling else count
        if off_hours is not None:
            floor = min(floor, off_hours.off_hours_capacity)
        if floor < 2:
            Annotations.of(self).add_warning_v2(
                SINGLE_INSTANCE_WARNING_ID,
                f"production endpoint {self.endpoint_name} can run on {floor} instance: an Availability Zone "
                "outage takes it down. Use initial_instance_count (and autoscaling min_capacity, off-hours "
                "capacity) of 2 or more, so SageMaker spreads instances over AZs.",
            )

    # ----------------------------------------------------------------------------------------------
    # Resources
    # ----------------------------------------------------------------------------------------------

    def _create_monitoring(self, filters: Sequence[LogMetricFilterSpec], namespace: str, *, dashboard: bool) -> None:
        """Metric filters over the server's log lines (in ``<namespace>/<endpoint name>``) and the dashboard."""
        self.log_metrics = create_metric_filters(self, self.log_group, filters, f"{namespace}/{self.endpoint_name}")
        self.dashboard = (
            create_dashboard(
                self,
                self._metrics,
                is_async=self.is_async,
                gpu_count=self.gpu_count,
                log_metrics=self.log_metrics,
                alarms=self.rollback_alarms,
            )
            if dashboard
            else None
        )

    def _create_keys_and_role(
        self,
        encryption_key: kms.IKey | None,
        monitoring_key: kms.IKey | None,
        role: iam.IRole | None,
        removal_policy: RemovalPolicy,
    ) -> None:
        """The given keys and role, or new ones (a key with rotation, :func:`monitoring_key`, a SageMaker role)."""
        description = f"Encrypts the ML storage volume and outputs of {self.node.path}"
        encryption_key = given_or_new_key(
            encryption_key, self, "Key", description=description, removal_policy=removal_policy
        )
        self.encryption_key: kms.IKey = encryption_key
        if monitoring_key is None:
            monitoring_key = _new_monitoring_key(self, "MonitoringKey", removal_policy=removal_policy)
        self.monitoring_key: kms.IKey = monitoring_key
        if role is None:
            role = iam.Role(
                self,
                "ExecutionRole",
                assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                description=f"SageMaker execution role of the endpoint {self.endpoint_name}",
            )
        self.role: iam.IRole = role

    def _security_groups(
        self, vpc: ec2.IVpc | None, given: Sequence[ec2.ISecurityGroup] | None
    ) -> list[ec2.ISecurityGroup]:
        """The given groups; in a VPC without any, a new group with no ingress and HTTPS egress only."""
        groups = list(given or [])
        if vpc is not None and not groups:
            description = f"SageMaker endpoint {self.endpoint_name}: no ingress, HTTPS egress"
            groups.append(cluster_security_group(self, "SecurityGroup", vpc=vpc, description=description))
        return groups

    def _fingerprint(self, props: Mapping[str, Any]) -> str:
        """A hash of the resolved properties of an immutable resource, for its construct id.

        SageMaker cannot change a model or an endpoint config. Any change that shows in the template
        gives the resource a new logical id, so CloudFormation creates a new one, *updates* the endpoint
        to it (a blue/green deployment) and deletes the old one. A value that only changes at deploy
        time (an SSM parameter, an imported image tag) keeps the logical id: CloudFormation then
        replaces the resource itself, which works because the names are generated, never fixed.
        """
        resolved = Stack.of(self).resolve({k: v for k, v in props.items() if v is not None})
        text = json.dumps(resolved, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]

    def _grant_runtime(self, vpc: ec2.IVpc | None) -> None:
        """Logs, metrics and (in a VPC) network interfaces: what SageMaker hosting needs from the role."""
        iam.Grant.add_to_principal(
            grantee=self.role,
            actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams", "logs:CreateLogGroup"],
            # The log group's ARN attribute ends in ":*", which covers its log streams.
            resource_arns=[self.log_group.log_group_arn],
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
            )
        )
        if vpc is not None:
            self._grant_network_interfaces(vpc)
        # The ML storage volume and outputs without their own key are encrypted with this key.
        self.encryption_key.grant(self.role, "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey")

    def _grant_rollback_alarms(self) -> None:
        """SageMaker reads the auto-rollback alarms with the execution role while it shifts traffic: "If you plan to
        use the SageMaker deployment guardrails feature for model deployment in production, ensure that your
        execution role has permission to perform the ``cloudwatch:DescribeAlarms`` action on your auto-rollback
        alarms" (SageMaker Developer Guide, "CreateModel API: Execution Role Permissions",
        https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html#sagemaker-roles-createmodel-perms).
        """
        if self.rollback_alarms:
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["cloudwatch:DescribeAlarms"],
                    resources=[alarm.alarm_arn for alarm in self.rollback_alarms],
                )
            )

    def _grant_network_interfaces(self, vpc: ec2.IVpc) -> None:
        """SageMaker attaches the model to the VPC through network interfaces it creates with this role.

        The Describe actions support no resource-level permissions; the mutating ones are held to this
        region and, where the request names one, to this VPC.
        """
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                ],
                resources=["*"],
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                ],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:RequestedRegion": Stack.of(self).region},
                    "ArnEqualsIfExists": {"ec2:Vpc": vpc.vpc_arn},
                },
            )
        )

    def _create_model(
        self,
        image_uri: str,
        model_data_url: str,
        env: Mapping[str, str],
        network_isolation: bool,
        vpc: ec2.IVpc | None,
        vpc_subnets: ec2.SubnetSelection | None,
    ) -> None:
        vpc_config = None
        if vpc is not None:
            subnets = select_subnets(vpc, vpc_subnets)
            vpc_config = sagemaker.CfnModel.VpcConfigProperty(
                security_group_ids=[sg.security_group_id for sg in self.security_groups],
                subnets=subnets.subnet_ids,
            )
        model_props: dict[str, Any] = {
            "execution_role_arn": self.role.role_arn,
            "primary_container": sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image_uri,
                model_data_url=model_data_url,
                environment=dict(sorted(env.items())) or None,
                mode="SingleModel",
            ),
            "enable_network_isolation": network_isolation,
            "vpc_config": vpc_config,
        }
        self.model = sagemaker.CfnModel(self, f"Model{self._fingerprint(model_props)}", **model_props)
        self.model.node.add_dependency(self.role)
        self.model_name: str = self.model.attr_model_name

    def _create_endpoint_config(
        self,
        count: int,
        volume_size_gib: int | None,
        timeouts: tuple[Duration, Duration],
        capture: DataCapture | None,
        async_config: AsyncInference | None,
    ) -> None:
        download, startup = timeouts
        variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=self.variant_name,
            model_name=self.model_name,
            initial_instance_count=count,
            # With instance pools the variant names no InstanceType (see gpu_constructs.endpoint.pools).
            instance_type=None if self._pools else self.instance.sagemaker_name,
            instance_pools=[
                sagemaker.CfnEndpointConfig.InstancePoolProperty(
                    instance_type=it.sagemaker_name, priority=priority, model_name_override=pool.model_name_override
                )
                for priority, (pool, it) in enumerate(zip(self._pools, self.instance_pools, strict=True), start=1)
            ]
            or None,
            capacity_reservation_config=(
                None
                if self._reservation_arn is None
                else sagemaker.CfnEndpointConfig.CapacityReservationConfigProperty(
                    capacity_reservation_preference=CAPACITY_RESERVATIONS_ONLY,
                    ml_reservation_arn=self._reservation_arn,
                )
            ),
            initial_variant_weight=1,
            volume_size_in_gb=volume_size_gib,
            model_data_download_timeout_in_seconds=int(download.to_seconds()),
            container_startup_health_check_timeout_in_seconds=int(startup.to_seconds()),
            variant_instance_provision_timeout_in_seconds=(
                None if self._provision_timeout is None else int(self._provision_timeout.to_seconds())
            ),
        )
        config_props: dict[str, Any] = {
            "production_variants": [variant],
            "kms_key_id": self.encryption_key.key_arn,
            "data_capture_config": self._bind(capture),
            "async_inference_config": self._bind(async_config),
        }
        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self, f"EndpointConfig{self._fingerprint(config_props)}", **config_props
        )
        self.endpoint_config_name: str = self.endpoint_config.attr_endpoint_config_name

    def _bind(self, setting: DataCapture | AsyncInference | None) -> Any:
        """Bind data capture or asynchronous inference: grants to the role, its wildcards noted for cdk-nag."""
        if setting is None:
            return None
        config, wildcards = setting.bind(self.role, self.endpoint_name, self.encryption_key)
        self._wildcard_objects.update(wildcards)
        return config

    def _create_endpoint(self, timeouts: tuple[Duration, Duration], *, retain_variant_properties: bool) -> None:
        """The endpoint; with autoscaling or a schedule it keeps the instance count they set on updates."""
        self.resource = sagemaker.CfnEndpoint(
            self,
            "Resource",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config_name,
            deployment_config=self.deployment.bind(self.rollback_alarms, *timeouts),
            retain_all_variant_properties=True if retain_variant_properties else None,
            exclude_retained_variant_properties=(
                [
                    sagemaker.CfnEndpoint.VariantPropertyProperty(variant_property_type="DesiredWeight"),
                    sagemaker.CfnEndpoint.VariantPropertyProperty(variant_property_type="DataCaptureConfig"),
                ]
                if retain_variant_properties
                else None
            ),
        )
        self.resource.node.add_dependency(self.endpoint_config)
        self.resource.node.add_dependency(self.role)
        self.resource.node.add_dependency(self.log_group)
        self.endpoint_arn: str = self.resource.ref
