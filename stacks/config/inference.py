"""The ``inference`` section: SageMaker GPU endpoints.

Each sub-section builds the library's value type for the stack (``batching()``, ``capture()``,
``async_inference()``, ``blue_green()``, ``thresholds()``, ``target_tracking()``, ``schedule()``): the stack
passes them through and only adds what comes from other stacks (buckets, topics). Nothing here imports aws_cdk
at load time; the builders import it when called.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from gpu_constructs.endpoint.base import (
    MAX_BAKE_S,
    MAX_EXECUTION_TIMEOUT_S,
    MIN_EXECUTION_TIMEOUT_S,
    PROVISION_TIMEOUT_RANGE_S,
    STEP_PERCENT_RANGE,
    TIMEOUT_RANGE_S,
    VOLUME_SIZE_RANGE_GB,
    SettingError,
)
from gpu_constructs.endpoint.capacity import (
    COOLDOWN_RANGE_S,
    DEFAULT_BAKE_S,
    DEFAULT_CANARY_PERCENT,
    DEFAULT_LINEAR_STEP_PERCENT,
    DEFAULT_SCALE_IN_COOLDOWN_S,
    DEFAULT_SCALE_OUT_COOLDOWN_S,
    DEFAULT_TERMINATION_WAIT_S,
)
from gpu_constructs.endpoint.checks import (
    DEFAULT_MODEL_DOWNLOAD_TIMEOUT_S,
    DEFAULT_MODEL_LATENCY_P99_MS,
    DEFAULT_STARTUP_HEALTH_CHECK_TIMEOUT_S,
)
from gpu_constructs.s3_keys import has_key_characters
from stacks.config._base import Allowed, StrictModel

if TYPE_CHECKING:
    from aws_cdk import aws_s3 as s3

    from gpu_constructs.endpoint import ModelData
    from gpu_constructs.endpoint.alarms import EndpointAlarms
    from gpu_constructs.endpoint.batching import Batching, BatchingEnv
    from gpu_constructs.endpoint.capacity import OffHoursSchedule
    from gpu_constructs.endpoint.capture import AsyncInference, DataCapture
    from gpu_constructs.endpoint.deployment import BlueGreenDeployment
    from gpu_constructs.endpoint.pools import InstancePool
    from gpu_constructs.endpoint.scaling import EndpointAutoscaling

#: The model download and container start-up limits, in seconds (the library's range).
TimeoutSeconds = Annotated[int, Field(ge=TIMEOUT_RANGE_S[0], le=TIMEOUT_RANGE_S[1]), Allowed("seconds")]

#: How long SageMaker keeps provisioning a variant's instances after an insufficient-capacity error, in seconds.
ProvisionSeconds = Annotated[
    int | None, Field(ge=PROVISION_TIMEOUT_RANGE_S[0], le=PROVISION_TIMEOUT_RANGE_S[1]), Allowed("seconds")
]

#: A bake time or termination wait of a deployment, in minutes (the library's limit is in seconds).
BakeMinutes = Annotated[int, Field(ge=0, le=MAX_BAKE_S // 60), Allowed("minutes")]
#: A deployment's time limit, in minutes.
ExecutionMinutes = Annotated[
    int | None, Field(ge=MIN_EXECUTION_TIMEOUT_S // 60, le=MAX_EXECUTION_TIMEOUT_S // 60), Allowed("minutes")
]
#: A scaling cooldown, in seconds.
CooldownSeconds = Annotated[int, Field(ge=COOLDOWN_RANGE_S[0], le=COOLDOWN_RANGE_S[1]), Allowed("seconds")]

_ENDPOINT_KEY = re.compile(r"[a-z0-9](-?[a-z0-9]){0,29}")


@contextmanager
def library_rules(section: str = "", keys: Mapping[str, str] | None = None) -> Iterator[None]:
    """Turn a rule of the library's value types that failed into this section's error.

    The library's message (``<setting>=<value> is not allowed; allowed: ...``) names its setting; ``keys`` maps
    it to the config's key where they differ, ``section`` is the part of it the error's location already names.
    """
    try:
        yield
    except SettingError as exc:
        name = (keys or {}).get(exc.setting, exc.setting)
        raise ValueError(exc.detail.replace(exc.setting, name, 1).removeprefix(section)) from None


class EndpointBatchingConfig(StrictModel):
    """Dynamic batching of the inference server (environment variables of the model)."""

    max_batch_size: int = Field(32, description="Most rows per forward pass (1-4096; 1 turns batching off)")
    max_batch_delay_ms: int = Field(5, description="Longest wait for a batch to fill, milliseconds (0-10000)")

    @model_validator(mode="after")
    def _rules(self) -> EndpointBatchingConfig:
        from gpu_constructs.endpoint.batching import GPU_SERVE_BATCHING_ENV

        with library_rules(section="batching."):
            self.batching(GPU_SERVE_BATCHING_ENV).validate("")
        return self

    def batching(self, env: BatchingEnv) -> Batching:
        """The library's :class:`~gpu_constructs.endpoint.Batching`; ``env``: the variables the image reads."""
        from gpu_constructs.endpoint.batching import Batching

        return Batching(max_batch_size=self.max_batch_size, max_batch_delay_ms=self.max_batch_delay_ms, env=env)


class EndpointDataCaptureConfig(StrictModel):
    """Capture of requests and responses to s3://<artifacts>/data-capture/<endpoint>/ (KMS)."""

    sampling_percentage: int = Field(100, description="Share of requests captured, 0-100")
    capture_input: bool = Field(True, description="Capture request bodies")
    capture_output: bool = Field(True, description="Capture response bodies")
    json_content_types: tuple[str, ...] = Field(
        ("application/json",),
        description="Content types captured as text instead of base64, e.g. application/jsonlines ([]: all base64)",
    )

    @model_validator(mode="after")
    def _rules(self) -> EndpointDataCaptureConfig:
        from gpu_constructs.endpoint.checks import check_data_capture

        with library_rules(section="data_capture."):
            check_data_capture(
                "",
                sampling_percentage=self.sampling_percentage,
                capture_input=self.capture_input,
                capture_output=self.capture_output,
            )
        return self

    def capture(self) -> DataCapture:
        """The library's :class:`~gpu_constructs.endpoint.DataCapture`, without its bucket (the stack's)."""
        from gpu_constructs.endpoint.capture import DataCapture

        return DataCapture(
            sampling_percentage=self.sampling_percentage,
            capture_input=self.capture_input,
            capture_output=self.capture_output,
            json_content_types=self.json_content_types,
        )


class EndpointAsyncConfig(StrictModel):
    """Asynchronous inference: requests and responses in s3://<artifacts>/async/<endpoint>/, SNS notices."""

    max_concurrent_invocations_per_instance: int | None = Field(
        None, description="Requests sent to one container at once, 1-1000 (null: SageMaker chooses)"
    )
    notifications: bool = Field(True, description="Create success and error SNS topics (KMS-encrypted)")
    include_response_in_notifications: bool = Field(
        False, description="Put responses up to 128 KB into the notifications"
    )

    @model_validator(mode="after")
    def _rules(self) -> EndpointAsyncConfig:
        from gpu_constructs.endpoint.checks import check_async_concurrency

        with library_rules(section="async_inference."):
            check_async_concurrency("", self.max_concurrent_invocations_per_instance)
        if self.include_response_in_notifications and not self.notifications:
            raise ValueError(
                "include_response_in_notifications: true needs notifications: true (the topics carry the response)"
            )
        return self

    def async_inference(self) -> AsyncInference:
        """The library's :class:`~gpu_constructs.endpoint.AsyncInference`, without bucket and topics (the stack's)."""
        from gpu_constructs.endpoint.capture import AsyncInference

        return AsyncInference(
            include_response_in_notifications=self.include_response_in_notifications,
            max_concurrent_invocations_per_instance=self.max_concurrent_invocations_per_instance,
        )


class EndpointDeploymentConfig(StrictModel):
    """Blue/green deployment of a change (new model, image or instance type) with automatic rollback."""

    traffic: Literal["all_at_once", "canary", "linear"] = Field(
        "all_at_once", description="How traffic moves to the new fleet: all_at_once, canary or linear"
    )
    step_percent: int | None = Field(
        None, description="canary: canary size 1-50 % (default 10); linear: step 10-50 % (default 25)"
    )
    wait_minutes: BakeMinutes = Field(
        DEFAULT_BAKE_S // 60, description="Bake time after each shift, minutes (0-60); alarms are watched"
    )
    termination_wait_minutes: BakeMinutes = Field(
        DEFAULT_TERMINATION_WAIT_S // 60, description="Keep the old fleet this long after the shift (0-60)"
    )
    max_execution_timeout_minutes: ExecutionMinutes = Field(
        None, description="Deployment time limit, minutes (10-480; default: bake times + model start-up + 10)"
    )
    auto_rollback: bool = Field(True, description="Roll back when a rollback alarm fires during the deployment")

    @model_validator(mode="after")
    def _step(self) -> EndpointDeploymentConfig:
        step = self.step_percent
        if self.traffic == "all_at_once" and step is not None:
            raise ValueError(f"step_percent: {step} is not used by traffic 'all_at_once'; allowed: null")
        if step is not None and self.traffic != "all_at_once":
            low, high = STEP_PERCENT_RANGE[self.traffic.upper()]
            what = "canary size" if self.traffic == "canary" else "linear step"
            if not low <= step <= high:
                raise ValueError(f"step_percent: {step} is not a {what}; allowed: {low}..{high} (% of capacity)")
        return self

    @property
    def step(self) -> int | None:
        if self.traffic == "all_at_once":
            return None
        return self.step_percent or (
            DEFAULT_CANARY_PERCENT if self.traffic == "canary" else DEFAULT_LINEAR_STEP_PERCENT
        )

    def blue_green(self) -> BlueGreenDeployment:
        """The library's :class:`~gpu_constructs.endpoint.BlueGreenDeployment` of these settings."""
        from aws_cdk import Duration

        from gpu_constructs.endpoint.deployment import BlueGreenDeployment

        timeout = self.max_execution_timeout_minutes
        return BlueGreenDeployment(
            traffic=self.traffic.upper(),  # type: ignore[arg-type]
            step_percent=self.step,
            wait_interval=Duration.minutes(self.wait_minutes),
            termination_wait=Duration.minutes(self.termination_wait_minutes),
            max_execution_timeout=Duration.minutes(timeout) if timeout else None,
            auto_rollback=self.auto_rollback,
        )


class EndpointAlarmsConfig(StrictModel):
    """Alarm thresholds: they notify the alarm topic and roll deployments back."""

    max_5xx_percent: float = Field(1.0, description="5xx responses, % of invocations (0-100]")
    max_model_latency_p99_ms: float = Field(
        DEFAULT_MODEL_LATENCY_P99_MS, description="ModelLatency p99, milliseconds (> 0)"
    )
    max_gpu_memory_percent: float = Field(90, description="GPU memory used, % per GPU (0-100]")
    evaluation_periods: Annotated[int, Field(ge=1, le=60), Allowed()] = Field(
        3, description="One-minute periods evaluated (1-60)"
    )
    datapoints_to_alarm: int = Field(2, description="Breaching periods among them that fire the alarm")

    @model_validator(mode="after")
    def _rules(self) -> EndpointAlarmsConfig:
        from gpu_constructs.endpoint.checks import check_alarm_thresholds

        with library_rules(section="alarms.", keys={"alarms.max_model_latency_p99": "alarms.max_model_latency_p99_ms"}):
            check_alarm_thresholds(
                "",
                max_5xx_percent=self.max_5xx_percent,
                max_gpu_memory_percent=self.max_gpu_memory_percent,
                latency_ms=self.max_model_latency_p99_ms,
                period_s=60,
                evaluation_periods=self.evaluation_periods,
                datapoints_to_alarm=self.datapoints_to_alarm,
            )
        return self

    def thresholds(self) -> EndpointAlarms:
        """The library's :class:`~gpu_constructs.endpoint.EndpointAlarms` of these settings."""
        from aws_cdk import Duration

        from gpu_constructs.endpoint.alarms import EndpointAlarms

        return EndpointAlarms(
            max_5xx_percent=self.max_5xx_percent,
            max_model_latency_p99=Duration.millis(self.max_model_latency_p99_ms),
            max_gpu_memory_percent=self.max_gpu_memory_percent,
            evaluation_periods=self.evaluation_periods,
            datapoints_to_alarm=self.datapoints_to_alarm,
        )


class EndpointAutoscalingConfig(StrictModel):
    """Target tracking on the variant's instance count."""

    metric: Literal["invocations_per_instance", "gpu_utilization", "backlog_per_instance"] = Field(
        description="invocations_per_instance (per minute), gpu_utilization (% per GPU) or backlog_per_instance "
        "(async endpoints)"
    )
    target: float = Field(description="Target value of the metric (> 0; at most 100 for gpu_utilization)")
    min_capacity: int = Field(description="Fewest instances (0 only for async endpoints: scale to zero)")
    max_capacity: int = Field(description="Most instances (>= min_capacity)")
    scale_in_cooldown_seconds: CooldownSeconds = Field(
        DEFAULT_SCALE_IN_COOLDOWN_S, description="Wait after a scale-in, seconds (0-3600)"
    )
    scale_out_cooldown_seconds: CooldownSeconds = Field(
        DEFAULT_SCALE_OUT_COOLDOWN_S, description="Wait after a scale-out, seconds (0-3600)"
    )

    def target_tracking(self) -> EndpointAutoscaling:
        """The library's :class:`~gpu_constructs.endpoint.EndpointAutoscaling` of these settings."""
        from aws_cdk import Duration

        from gpu_constructs.endpoint.scaling import EndpointAutoscaling

        return EndpointAutoscaling(
            metric=self.metric,
            target=self.target,
            min_capacity=self.min_capacity,
            max_capacity=self.max_capacity,
            scale_in_cooldown=Duration.seconds(self.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(self.scale_out_cooldown_seconds),
        )


class EndpointOffHoursConfig(StrictModel):
    """Scale the endpoint down outside working hours (scheduled actions)."""

    time_zone: str = Field("UTC", description="IANA time zone of the hours, e.g. Europe/Berlin")
    start_hour: int = Field(7, description="Working hours start (0-23): capacity returns to normal")
    end_hour: int = Field(19, description="Working hours end (0-23): capacity drops to `capacity`")
    week_days: str = Field("MON-FRI", description="Working days, cron day-of-week (MON-FRI, MON,WED,FRI)")
    capacity: int = Field(1, description="Instances outside working hours (0 only for async endpoints)")

    def schedule(self) -> OffHoursSchedule:
        """The library's :class:`~gpu_constructs.endpoint.OffHoursSchedule` of these settings."""
        from gpu_constructs.endpoint.capacity import OffHoursSchedule

        return OffHoursSchedule(
            start_hour=self.start_hour,
            end_hour=self.end_hour,
            week_days=self.week_days,
            time_zone=self.time_zone,
            off_hours_capacity=self.capacity,
        )


class EndpointInstancePoolConfig(StrictModel):
    """One entry of ``inference.endpoints.<key>.instance_pools`` (a plain type name is this with the type alone)."""

    instance_type: str = Field(description="ml.* NVIDIA GPU hosting type (GPU catalog)")
    model_name_override: str | None = Field(
        None,
        description="Name of another SageMaker model (created outside this app) to serve on this pool's instances, "
        "e.g. one compiled for its GPU (null: the endpoint's model)",
    )


class EndpointConfig(StrictModel):
    """One SageMaker endpoint (inference stack), named <resource_prefix>-<key>."""

    model_data: str = Field(
        description="The model.tar.gz: a key in the artifacts bucket (models/<name>/<version>/model.tar.gz), an "
        "s3://bucket/key.tar.gz URI, or ssm:<parameter name> (the URI stored there, read at each deploy)"
    )
    model_data_prefix: str = Field(
        "output/", description="ssm: model_data only: the artifacts-bucket prefix the parameter's URIs are under"
    )
    instance_type: str = Field("ml.g5.xlarge", description="ml.* hosting type from the GPU catalog")
    instance_pools: tuple[EndpointInstancePoolConfig, ...] | None = Field(
        None,
        description="Fallback list, 1-5 hosting types in priority order starting with instance_type (names, or "
        "objects with instance_type and model_name_override; instance_type defaults to the first): rendered as "
        "InstancePools, SageMaker provisions from the first type with capacity, at creation and on scale-out. "
        "Checked by the GPU catalog: NVIDIA GPU types the image's CUDA supports, each once, at least the first "
        "choice's GPU memory per GPU and exactly its GPUs per instance, and the cost ceiling max_cost_ratio",
    )
    max_cost_ratio: Annotated[float, Field(gt=0), Allowed()] | None = Field(
        None,
        description="Refuse an instance_pools entry whose hourly price is above this multiple of the first "
        "choice's (the catalog's price table; null: no ceiling)",
    )
    capacity_reservation_arn: str | None = Field(
        None,
        description="ML capacity reservation (a training plan for endpoints) the instances launch into, "
        "capacity-reservations-only; its type must be instance_type; the endpoint stops serving when it ends "
        "(null: on-demand capacity). Not with instance_pools",
    )
    cpu_variant: bool = Field(False, description="Declare a CPU-only variant (then a CPU type is allowed)")
    instance_count: int = Field(1, description="Initial instances (>= 1; production: 2+ to survive an AZ outage)")
    volume_size_gb: int | None = Field(
        None, description="EBS ML storage volume, GB (1-512), only for types without local NVMe"
    )
    model_download_timeout_seconds: TimeoutSeconds = Field(
        DEFAULT_MODEL_DOWNLOAD_TIMEOUT_S, description="Model download and extract limit (60-3600 s)"
    )
    startup_health_check_timeout_seconds: TimeoutSeconds = Field(
        DEFAULT_STARTUP_HEALTH_CHECK_TIMEOUT_S, description="Container start-up /ping limit (60-3600 s)"
    )
    instance_provision_timeout_seconds: ProvisionSeconds = Field(
        None,
        description="How long SageMaker keeps provisioning instances after an insufficient-capacity error "
        "(300-3600 s; null: SageMaker's default)",
    )
    network_isolation: bool = Field(True, description="No network access for the container")
    batching: EndpointBatchingConfig | None = Field(
        None,
        description="Server batching (null: the image's own: gpu_serve 32 rows / 5 ms; the PyTorch DLC "
        "batches nothing, and refuses max_batch_size > 1: its TorchServe handler fails a whole batch on one "
        "bad request)",
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Extra container environment variables (with an image that runs gpu_serve, GPU_SERVE_* ones "
        "are read by the server's own parser at synth: a value it would refuse fails here)",
    )
    data_capture: EndpointDataCaptureConfig | None = Field(None, description="Request/response capture (null: off)")
    async_inference: EndpointAsyncConfig | None = Field(None, description="Asynchronous endpoint (null: real-time)")
    deployment: EndpointDeploymentConfig = Field(default_factory=lambda: EndpointDeploymentConfig())
    alarms: EndpointAlarmsConfig = Field(default_factory=lambda: EndpointAlarmsConfig())
    autoscaling: EndpointAutoscalingConfig | None = Field(None, description="Target tracking (null: fixed count)")
    off_hours: EndpointOffHoursConfig | None = Field(None, description="Scale down outside working hours")

    @field_validator("model_data")
    @classmethod
    def _model_data(cls, value: str) -> str:
        from gpu_constructs.endpoint.checks import is_model_archive_key, is_model_archive_uri, is_ssm_parameter_name

        # The library's rules (ModelData.validate), plus what a config value must not have: whitespace in a
        # URI, and in a key anything but S3's safe characters.
        if value.startswith("ssm:"):
            if not is_ssm_parameter_name(value[4:]):
                raise ValueError("allowed: ssm:<parameter name>, e.g. ssm:/gpu-prod/models/classifier/latest")
            return value
        if value.startswith("s3://"):
            if not is_model_archive_uri(value) or any(ch.isspace() for ch in value):
                raise ValueError("allowed: s3://<bucket>/<key>.tar.gz")
            return value
        if not is_model_archive_key(value):
            raise ValueError(
                "allowed: a relative key of the artifacts bucket ending in .tar.gz, e.g. "
                "models/classifier/v3/model.tar.gz; or s3://bucket/key.tar.gz; or ssm:<parameter>"
            )
        if not has_key_characters(value):
            raise ValueError("allowed: S3 key characters A-Z a-z 0-9 !_.*'()/=-")
        return value

    @model_validator(mode="before")
    @classmethod
    def _pool_names(cls, data: Any) -> Any:
        """A plain type name in ``instance_pools`` is an entry with the type alone; ``instance_type`` defaults to
        the first entry's."""
        pools = data.get("instance_pools") if isinstance(data, dict) else None
        if not isinstance(pools, list | tuple):
            return data
        entries = tuple({"instance_type": item} if isinstance(item, str) else item for item in pools)
        data = {**data, "instance_pools": entries}
        first = entries[0].get("instance_type") if entries and isinstance(entries[0], dict) else None
        if "instance_type" not in data and isinstance(first, str):
            data["instance_type"] = first
        return data

    @field_validator("instance_count")
    @classmethod
    def _count(cls, value: int) -> int:
        if value < 1:
            raise ValueError("allowed: 1 or more")
        return value

    @model_validator(mode="after")
    def _environment(self) -> EndpointConfig:
        from gpu_constructs.endpoint.batching import GPU_SERVE_BATCHING_ENV, check_environment

        batching = self.batching.batching(GPU_SERVE_BATCHING_ENV) if self.batching else None
        with library_rules():
            check_environment("", self.environment, batching)
        return self

    @model_validator(mode="after")
    def _consistency(self) -> EndpointConfig:
        from gpu_constructs.endpoint.capacity import check_shifting_capacity, check_target_tracking
        from gpu_constructs.endpoint.checks import check_hosting_instance_type, volume_size_problem

        with library_rules():
            it = check_hosting_instance_type("instance_type", self.instance_type, self.cpu_variant)
        problem = None if self.volume_size_gb is None else volume_size_problem(self.volume_size_gb, it)
        if problem == "local_nvme":
            raise ValueError(
                f"volume_size_gb: {self.volume_size_gb} is not allowed for {self.instance_type} (it has "
                f"{it.local_nvme_gb} GB of local NVMe that SageMaker uses instead); allowed: null"
            )
        if problem == "out_of_range":
            low, high = VOLUME_SIZE_RANGE_GB
            raise ValueError(f"volume_size_gb: {self.volume_size_gb} is not allowed; allowed: {low}..{high}")
        self._check_capacity()
        is_async = self.async_inference is not None
        scaling = self.autoscaling
        if scaling is not None:
            with library_rules(keys={"initial_instance_count": "instance_count"}):
                check_target_tracking(
                    "",
                    scaling.metric,
                    scaling.target,
                    scaling.min_capacity,
                    scaling.max_capacity,
                    is_async=is_async,
                    cpu_variant=self.cpu_variant,
                    initial_instance_count=self.instance_count,
                )
        with library_rules(keys={"initial_instance_count": "instance_count"}):
            check_shifting_capacity(
                "", self.deployment.traffic.upper(), self.instance_count, single="traffic: all_at_once"
            )
        if self.off_hours is not None:
            high = scaling.max_capacity if scaling else self.instance_count
            with library_rules(keys={"off_hours.off_hours_capacity": "off_hours.capacity"}):
                self.off_hours.schedule().validate("", is_async=is_async, max_capacity=high)
        return self

    def _check_capacity(self) -> None:
        """Instance pools and the reservation: the library's rules (:mod:`gpu_constructs.endpoint.pools`) without
        the image's CUDA and the region's prices, which :meth:`check_pools` adds across sections."""
        from gpu_constructs.endpoint.pools import check_capacity_reservation
        from gpu_constructs.endpoint.pools import check_instance_pools as library_check

        if self.max_cost_ratio is not None and self.instance_pools is None:
            raise ValueError(
                f"max_cost_ratio: {self.max_cost_ratio:g} bounds instance_pools, which is not set; allowed: null"
            )
        if self.instance_pools is not None:
            if self.cpu_variant:
                raise ValueError("instance_pools: not for a CPU variant (cpu_variant: true); allowed: null")
            first = self.instance_pools[0].instance_type if self.instance_pools else None
            if first is not None and first != self.instance_type:
                raise ValueError(
                    f"instance_pools[0]: {first!r} is not instance_type {self.instance_type!r}; allowed: the list "
                    "starts with the first choice, instance_type (or leave instance_type out)"
                )
            with library_rules():
                library_check("", self.pools())
            self._check_pool_volumes()
        if self.capacity_reservation_arn is not None:
            with library_rules():
                check_capacity_reservation(
                    "", self.capacity_reservation_arn, instance_pools=self.instance_pools is not None
                )

    def _check_pool_volumes(self) -> None:
        """``volume_size_gb`` only when no pool's type has local NVMe (SageMaker uses that instead of a volume)."""
        from gpu_constructs.catalog import lookup

        if self.volume_size_gb is None:
            return
        for i, pool in enumerate(self.instance_pools or ()):
            it = lookup(pool.instance_type)
            if it.has_local_nvme:
                raise ValueError(
                    f"volume_size_gb: {self.volume_size_gb} is not allowed with instance_pools[{i}] "
                    f"{pool.instance_type} (it has {it.local_nvme_gb} GB of local NVMe that SageMaker uses instead); "
                    "allowed: null"
                )

    def pools(self) -> list[InstancePool]:
        """``instance_pools`` as the library's :class:`~gpu_constructs.endpoint.InstancePool` values (empty
        without a list)."""
        from gpu_constructs.endpoint.pools import InstancePool

        return [InstancePool(p.instance_type, p.model_name_override) for p in self.instance_pools or ()]

    def check_pools(self, *, cuda_version: str | None, region: str) -> None:
        """The catalog's full check of ``instance_pools``: also the image's CUDA ``cuda_version`` on every type
        and the cost ceiling ``max_cost_ratio`` with ``region``'s prices. Raises the library's error (a
        ``ValueError``) naming the entry."""
        from gpu_constructs.endpoint.pools import check_instance_pools as library_check

        if self.instance_pools:
            library_check(
                "", self.pools(), cuda_version=cuda_version, max_cost_ratio=self.max_cost_ratio, region=region
            )

    def model(self, artifacts_bucket: s3.IBucket) -> ModelData:
        """The library's :class:`~gpu_constructs.endpoint.ModelData` of ``model_data``: an SSM parameter (whose
        URIs lie under ``model_data_prefix`` of ``artifacts_bucket``), an ``s3://`` URI, or a key of
        ``artifacts_bucket``."""
        from gpu_constructs.endpoint import ModelData

        value = self.model_data
        if value.startswith("ssm:"):
            return ModelData.from_ssm_parameter(value[4:], bucket=artifacts_bucket, prefix=self.model_data_prefix)
        if value.startswith("s3://"):
            return ModelData.from_uri(value)
        return ModelData.from_bucket(artifacts_bucket, value)

    def endpoint_props(self, *, artifacts_bucket: s3.IBucket, batching_env: BatchingEnv) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.endpoint.GpuEndpoint` this endpoint's settings give.

        :param artifacts_bucket: the data stack's bucket that holds the model (see :meth:`model`).
        :param batching_env: the variables the image's server reads its batching from.

        The stack adds the image, the endpoint's name, the network, the data key, the alarm topic and
        monitoring key, data capture and asynchronous inference (they place objects and create topics), and
        the environment-wide settings. A new endpoint setting is a field here, a line below and a parameter of
        the construct.
        """
        from aws_cdk import Duration, Size

        return {
            "model_data": self.model(artifacts_bucket),
            "instance_type": self.instance_type,
            "instance_pools": self.pools() or None,
            "max_cost_ratio": self.max_cost_ratio,
            "capacity_reservation_arn": self.capacity_reservation_arn,
            "cpu_variant": self.cpu_variant,
            "initial_instance_count": self.instance_count,
            "environment": self.environment,
            "batching": self.batching.batching(batching_env) if self.batching is not None else None,
            "network_isolation": self.network_isolation,
            "volume_size": None if self.volume_size_gb is None else Size.gibibytes(self.volume_size_gb),
            "model_download_timeout": Duration.seconds(self.model_download_timeout_seconds),
            "container_startup_health_check_timeout": Duration.seconds(self.startup_health_check_timeout_seconds),
            "instance_provision_timeout": (
                None
                if self.instance_provision_timeout_seconds is None
                else Duration.seconds(self.instance_provision_timeout_seconds)
            ),
            "deployment": self.deployment.blue_green(),
            "alarms": self.alarms.thresholds(),
            "autoscaling": self.autoscaling.target_tracking() if self.autoscaling is not None else None,
            "off_hours": self.off_hours.schedule() if self.off_hours is not None else None,
        }


class InferenceConfig(StrictModel):
    """SageMaker GPU endpoints (inference stack)."""

    enabled: bool = Field(False, description="Create the inference stack")
    alarm_emails: tuple[str, ...] = Field((), description="E-mail addresses subscribed to the alarm topic")
    endpoints: dict[str, EndpointConfig] = Field(
        default_factory=dict, description="Endpoints by key (1-30 lowercase letters, digits, single hyphens)"
    )

    @field_validator("endpoints")
    @classmethod
    def _keys(cls, value: dict[str, EndpointConfig]) -> dict[str, EndpointConfig]:
        bad = [k for k in value if not _ENDPOINT_KEY.fullmatch(k)]
        if bad:
            raise ValueError(f"endpoint keys {bad} are not allowed; allowed: 1-30 lowercase letters, digits, hyphens")
        return value

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [e for e in value if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", e)]
        if bad:
            raise ValueError(f"{bad} are not e-mail addresses")
        return value

    @model_validator(mode="after")
    def _enabled(self) -> InferenceConfig:
        if self.enabled and not self.endpoints:
            raise ValueError("enabled: true needs at least one entry under endpoints")
        return self

    def check_pools(self, *, cuda_version: str | None, image: str, region: str) -> None:
        """Every endpoint's ``instance_pools`` with the inference image's CUDA ``cuda_version`` (described as
        ``image`` in the message) and ``region``'s prices (:meth:`EndpointConfig.check_pools`)."""
        from gpu_constructs.errors import ValidationError

        for key, endpoint in sorted(self.endpoints.items()):
            try:
                endpoint.check_pools(cuda_version=cuda_version, region=region)
            except ValidationError as exc:
                raise ValueError(f"inference.endpoints.{key}.{exc.detail} ({image})") from None
