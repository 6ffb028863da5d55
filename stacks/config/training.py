"""The ``training`` section: the training pipeline, its prepare step and alarms.

The rules of a training job live in the library (``gpu_constructs.training_spec``: SageMaker's limits, the spot and
max-wait rules, processes per host, the alarm thresholds); this section keeps what is about the file (keys, types,
units, environment-level bounds), words the library's rules in the config's units (hours) and builds the library's
value types for the stack (:meth:`TrainingConfig.max_runtime`, :meth:`TrainingPrepareConfig.options`,
:meth:`TrainingAlarmsConfig.thresholds`, :meth:`TrainingConfig.code_options`). Nothing here imports aws_cdk at
load time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gpu_constructs import s3_keys
from gpu_constructs.catalog import require_nvidia_gpu
from gpu_constructs.deprecation import deprecated_attributes, renamed_keywords
from gpu_constructs.training_spec import (
    DATA_VERSION_PATTERN,
    HP_PROCESSES_PER_HOST,
    MAX_RETRY_ATTEMPTS,
    MAX_RUNTIME_LIMIT_S,
    MAX_WAIT_LIMIT_S,
    PROCESSING_MAX_RUNTIME_S,
    PROCESSING_TYPES_ALLOWED,
    VOLUME_SIZE_GB,
    WAIT_BELOW_RUNTIME,
    WAIT_WITHOUT_SPOT,
    alarm_threshold_problems,
    check_processes_per_host,
    processing_type_allowed,
    runtime_limit_text,
    stopping_violations,
)
from gpu_constructs.training_spec.preferences import TRAINING_PLAN_ALLOWED, TRAINING_PLAN_ARN_RE
from gpu_constructs.training_spec.rules import channel_name_problem
from stacks.config._base import Allowed, Check, EmailList, StrictModel
from stacks.config.auto_stop import TrainingAutoStopConfig

if TYPE_CHECKING:
    from pathlib import Path

    from aws_cdk import Duration

    from gpu_constructs.training import PrepareOptions, ReadableInput, TrainingAlarms, TrainingCodeOptions
    from gpu_constructs.training_spec import InstancePreference

HOUR_S = 3600


def _hours_allowed(limit_s: int, api_field: str) -> str:
    """A time limit in hours, checked against SageMaker's limit in seconds (defined once, in the library) and
    reported in hours, the unit of the config."""
    return "allowed: " + runtime_limit_text(limit_s, api_field, unit="hours", unit_s=HOUR_S)


RuntimeHours = Annotated[
    int,
    Field(ge=1, le=MAX_RUNTIME_LIMIT_S // HOUR_S),
    Allowed(message=_hours_allowed(MAX_RUNTIME_LIMIT_S, "MaxRuntimeInSeconds")),
]
WaitHours = Annotated[
    int,
    Field(ge=1, le=MAX_WAIT_LIMIT_S // HOUR_S),
    Allowed(message=_hours_allowed(MAX_WAIT_LIMIT_S, "MaxWaitTimeInSeconds")),
]
ProcessingHours = Annotated[
    int,
    Field(ge=1, le=PROCESSING_MAX_RUNTIME_S // HOUR_S),
    Allowed(message=_hours_allowed(PROCESSING_MAX_RUNTIME_S, "processing MaxRuntimeInSeconds")),
]
RetryAttempts = Annotated[
    int, Field(ge=MAX_RETRY_ATTEMPTS[0], le=MAX_RETRY_ATTEMPTS[1]), Allowed(message="allowed: null or 1..30")
]
AlarmPeriods = Annotated[int, Field(ge=1, le=100), Allowed()]
AlarmPeriodMinutes = Annotated[int, Check(lambda v: v in (1, 5, 10, 15, 30, 60), "allowed: 1, 5, 10, 15, 30, 60")]


#: Keys of ``training.alarms`` renamed with the library's ``TrainingAlarms`` (old -> new): still read, with a warning.
RENAMED_ALARM_KEYS = {"gpu_low_pct": "gpu_low_percent", "busy_pct": "busy_percent", "idle_gpu_pct": "idle_gpu_percent"}


class TrainingAlarmsConfig(StrictModel):
    """Thresholds of the training alarms (percent per GPU / per vCPU of the configured instance type)."""

    gpu_low_percent: float = Field(50, description="Input-bound alarm: GPU utilization below this ...")
    busy_percent: float = Field(80, description="... while CPU or disk utilization is above this")
    idle_gpu_percent: float = Field(5, description="Idle-GPU alarm: the least-used host's GPU utilization below this")
    period_minutes: AlarmPeriodMinutes = Field(5, description="Metric period in minutes (1, 5, 10, 15, 30 or 60)")
    input_bound_periods: AlarmPeriods = Field(3, description="Consecutive periods before the input-bound alarm fires")
    idle_periods: AlarmPeriods = Field(6, description="Consecutive periods before the idle-GPU alarm fires")

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """A file with the old keys (``gpu_low_pct`` ...) keeps loading; each old key warns with its new name."""
        if not isinstance(data, dict):
            return data
        return renamed_keywords("training.alarms", data, RENAMED_ALARM_KEYS)

    @model_validator(mode="after")
    def _thresholds(self) -> TrainingAlarmsConfig:
        for name, value, allowed in alarm_threshold_problems(self):
            raise ValueError(f"{name}: {value}: allowed: {allowed}")
        return self

    def thresholds(self) -> TrainingAlarms:
        """The library's :class:`~gpu_constructs.training.TrainingAlarms` of these settings."""
        from aws_cdk import Duration

        from gpu_constructs.training import TrainingAlarms

        return TrainingAlarms(
            gpu_low_percent=self.gpu_low_percent,
            busy_percent=self.busy_percent,
            idle_gpu_percent=self.idle_gpu_percent,
            period=Duration.minutes(self.period_minutes),
            input_bound_periods=self.input_bound_periods,
            idle_periods=self.idle_periods,
        )


def _entry_point_ok(value: str) -> bool:
    from gpu_constructs.training_spec import entry_point_problem

    return entry_point_problem(value) is None


class TrainingCodeConfig(StrictModel):
    """Your own training code, run by the platform's launcher on the training image (the stock DLC included)."""

    source_dir: str = Field(description="Folder of the training code, relative to the repository root")
    entry_point: Annotated[
        str, Check(_entry_point_ok, "allowed: a relative path to a .py file inside source_dir, e.g. train.py")
    ] = Field(
        "train.py",
        description="Script in source_dir the launcher runs; it gets training.hyperparameters and a job's own, as "
        "--name value, nothing else (the launcher's settings are in GPU_TRAIN_* variables)",
    )
    distribution: Literal["auto", "torchrun", "single"] = Field(
        "auto", description="auto: torchrun over every GPU and host when > 1 process; single: one process per host"
    )
    framework: Literal["auto", "pytorch", "tensorflow"] = Field(
        "auto", description="The GPU check run before the script (auto: PyTorch if the image has it)"
    )
    metrics: dict[str, str] = Field(
        default_factory=dict, description="Metric name -> regex SageMaker reads from the job's log"
    )

    def options(self, root: Path, *, package_index: bool | None) -> TrainingCodeOptions:
        """The library's :class:`~gpu_constructs.training.TrainingCodeOptions` that run this code.

        :param root: the folder ``source_dir`` is relative to (the repository's root).
        :param package_index: whether the jobs reach a package index (the network decides; ``None``: the library's
            default).
        """
        from gpu_constructs.training import TrainingCodeOptions

        return TrainingCodeOptions(
            source_dir=root / self.source_dir,
            entry_point=self.entry_point,
            distribution=self.distribution,
            framework=self.framework,
            package_index=package_index,
        )

    def metric_definitions(self) -> list[dict[str, str]]:
        """``metrics`` as SageMaker's MetricDefinitions, sorted by name (so templates are stable)."""
        return [{"Name": name, "Regex": regex} for name, regex in sorted(self.metrics.items())]


KMS_KEY_ARN_RE = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$")

#: ``S3_PREFIX_RE`` (deprecated): the S3 key prefix rule is ``gpu_constructs.s3_keys.is_key_prefix``.
__getattr__ = deprecated_attributes(
    __name__,
    {
        "S3_PREFIX_RE": (
            "gpu_constructs.s3_keys.is_key_prefix",
            lambda: re.compile(f"^[A-Za-z0-9{re.escape(s3_keys.KEY_PREFIX_CHARACTERS)}]*$"),
        )
    },
)


class ReadableInputConfig(StrictModel):
    """An S3 prefix jobs may read: list, get and decrypt, nothing more (inputs must lie under one)."""

    bucket: str | None = Field(
        None, description="Bucket name; null (the default): the platform's datasets bucket, read with its data key"
    )
    prefix: str = Field(
        "", description="Key prefix the jobs may read, ending in '/' (e.g. 'corpora/'); '' (the default): the bucket"
    )
    kms_key_arn: str | None = Field(
        None,
        description="ARN of the bucket's SSE-KMS key (the role gets kms:Decrypt with it); null: the bucket uses "
        "SSE-S3, or it is the datasets bucket (its data key)",
    )

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and (not s3_keys.BUCKET_NAME_RE.fullmatch(value) or ".." in value):
            raise ValueError(
                "allowed: null (the datasets bucket) or an S3 bucket name: 3-63 lowercase letters, digits, dots and "
                "hyphens, starting and ending with a letter or digit"
            )
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not s3_keys.is_key_prefix(value, require_trailing_slash=True):
            raise ValueError(
                "allowed: '' (the whole bucket) or a relative S3 key prefix ending in '/', e.g. 'corpora/'"
            )
        return value

    @field_validator("kms_key_arn")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None and not KMS_KEY_ARN_RE.match(value):
            raise ValueError("allowed: null or a KMS key ARN, arn:aws:kms:<region>:<account>:key/<key id>")
        return value

    @model_validator(mode="after")
    def _datasets_key(self) -> ReadableInputConfig:
        if self.bucket is None and self.kms_key_arn is not None:
            raise ValueError(
                "kms_key_arn is set for the datasets bucket (bucket: null), which uses the data key; "
                "allowed: kms_key_arn only with a bucket"
            )
        return self

    def readable_input(self) -> ReadableInput:
        """The library's :class:`~gpu_constructs.training.ReadableInput`."""
        from gpu_constructs.training import ReadableInput

        return ReadableInput(bucket_name=self.bucket, prefix=self.prefix, kms_key_arn=self.kms_key_arn)


TrainingPlanArn = Annotated[str, Check(lambda v: bool(TRAINING_PLAN_ARN_RE.match(v)), TRAINING_PLAN_ALLOWED)]


class InstancePreferenceConfig(StrictModel):
    """One entry of ``training.instance_preferences`` (a plain type name is this with the type alone)."""

    instance_type: str = Field(description="ml.* NVIDIA GPU training type (GPU catalog)")
    instance_count: Annotated[int, Field(ge=1, le=100), Allowed("hosts")] | None = Field(
        None, description="Hosts when this type is selected (null: training.instance_count); on every entry or none"
    )
    training_plan_arn: TrainingPlanArn | None = Field(
        None, description="A training plan of this type whose reserved capacity the job uses (null: on-demand)"
    )

    @field_validator("instance_type")
    @classmethod
    def _nvidia(cls, value: str) -> str:
        require_nvidia_gpu(value, where="training.instance_preferences", usage="training")
        return value


class TrainingFallbackConfig(StrictModel):
    """How far a fallback of ``training.instance_preferences`` may differ from the first choice."""

    keep_world_size: bool = Field(
        True,
        description="Every fallback keeps GPUs x hosts of the first choice (the global batch); false when the "
        "training code adapts its batch to the world size",
    )
    max_cost_ratio: Annotated[float, Field(gt=0), Allowed()] | None = Field(
        None,
        description="Refuse a fallback whose hourly price x count is above this multiple of the first "
        "choice's (the catalog's price table; null: no ceiling)",
    )


class TrainingPrepareConfig(StrictModel):
    """The optional prepare step: a SageMaker processing job running `gpuctl shard` in the training image."""

    enabled: bool = Field(False, description="Add the prepare step to the state machine")
    run_by_default: bool = Field(False, description="Run it when an execution's input does not set `prepare`")
    source_prefix: str = Field("raw/", description="Datasets-bucket prefix of the raw files: <prefix><split>/")
    instance_type: str = Field("ml.m5.4xlarge", description="Processing instance type (CPU or GPU)")
    volume_size_gb: int = Field(200, description="Volume for the raw files and the shards, GB")
    image_size: int = Field(224, description="gpuctl shard --image-size")
    shard_size: str = Field("128MB", description="gpuctl shard --shard-size")
    max_runtime_hours: ProcessingHours = Field(24, description="Processing job time limit, hours (1-120)")
    instance_preferences: tuple[str, ...] | None = Field(
        None,
        description="Fallback list of processing types starting with instance_type (1-5, each once, one storage "
        "kind): the job starts on the first with capacity (ProcessingClusterConfig.InstancePreferences)",
    )

    @field_validator("source_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not s3_keys.is_key_prefix(value, allow_empty=False):
            raise ValueError("must be a non-empty relative S3 key prefix such as 'raw/imagenet/'")
        return value

    @field_validator("instance_type")
    @classmethod
    def _type(cls, value: str) -> str:
        if not processing_type_allowed(value, where="training.prepare"):
            raise ValueError(f"allowed: {PROCESSING_TYPES_ALLOWED}")
        return value

    @model_validator(mode="after")
    def _preferences(self) -> TrainingPrepareConfig:
        """The fallback list, by the library's rules for it (a processing job's: types, first entry, each once,
        1-5, one storage kind)."""
        from gpu_constructs.training_spec import ShardingJobSpec, ShardSplit

        if self.instance_preferences is None:
            return self
        if not self.instance_preferences:
            raise ValueError("instance_preferences: [] is empty; allowed: null (one type) or 1 to 5 types")
        probe = ShardingJobSpec(
            image_uri="probe",
            role_arn="probe",
            splits=(ShardSplit("probe", "s3://probe-bucket/raw/", "s3://probe-bucket/shards/"),),
            instance_type=self.instance_type,
            instance_preferences=self.instance_preferences,
        )
        problems = [p for p in probe.problems() if p.startswith("instance_preferences")]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def options(self, splits: tuple[str, ...]) -> PrepareOptions | None:
        """The library's :class:`~gpu_constructs.training.PrepareOptions` (``None`` when the step is off)."""
        if not self.enabled:
            return None
        from aws_cdk import Duration, Size

        from gpu_constructs.training import PrepareOptions

        return PrepareOptions(
            source_prefix=self.source_prefix,
            instance_type=self.instance_type,
            volume_size=Size.gibibytes(self.volume_size_gb),
            image_size=self.image_size,
            shard_size=self.shard_size,
            max_runtime=Duration.hours(self.max_runtime_hours),
            run_by_default=self.run_by_default,
            splits=splits,
            instance_preferences=tuple(self.instance_preferences or ()),
        )


class TrainingConfig(StrictModel):
    """The training pipeline (training stack): state machine, job defaults, monitoring."""

    enabled: bool = Field(False, description="Create the training stack")
    name: Annotated[
        str,
        Field(pattern=r"^[a-z0-9](-?[a-z0-9]){0,15}$"),
        Allowed(message="must be 1-16 lowercase letters, digits and single hyphens (part of job names)"),
    ] = Field("train", description="Setup name; jobs are named <resource_prefix>-<name>-<id>")
    instance_type: str = Field("ml.g5.xlarge", description="Default ml.* NVIDIA GPU training type (GPU catalog)")
    instance_count: Annotated[int, Field(ge=1, le=100), Allowed("hosts")] = Field(
        1, description="Hosts per job; > 1 is multi-host training"
    )
    volume_size_gb: Annotated[int, Field(ge=VOLUME_SIZE_GB[0], le=VOLUME_SIZE_GB[1]), Allowed("GB")] = Field(
        100, description="EBS volume per host, GB (types with local NVMe use it instead)"
    )
    input: Literal["s3", "fsx"] = Field("s3", description="s3: channels read S3; fsx: the FSx for Lustre file system")
    input_mode: Literal["File", "FastFile", "Pipe"] = Field("FastFile", description="S3 channels' input mode")
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = Field(
        "FullyReplicated", description="S3 channels' distribution across hosts"
    )
    dataset_prefix: str = Field(
        "imagenet/", description="Datasets-bucket prefix of the dataset: <prefix><data_version>/<channel>/"
    )
    channels: tuple[str, ...] = Field(
        ("train", "validation"),
        description="The dataset's channel (split) names: the built-in trainer's and training.code's inputs (code "
        "given at run time gets them only when asked: gpuctl train --dataset, an execution's dataset: true)",
    )
    readable_inputs: tuple[ReadableInputConfig, ...] = Field(
        default_factory=lambda: (ReadableInputConfig(),),
        description="S3 prefixes the jobs may read: the channels a user names (gpuctl train --input NAME=S3_URI, an "
        "execution's inputs) must lie under one, or gpuctl and the state machine refuse them before any job exists. "
        "Default: the platform's datasets bucket. The dataset prefix is always readable",
    )
    data_version: Annotated[
        str,
        Field(pattern=DATA_VERSION_PATTERN),
        Allowed(message="must be 1-128 letters, digits and . _ = -, starting with a letter or digit"),
    ] = Field("v1", description="Default data version; executions and gpuctl may override it")
    hyperparameters: dict[str, str] = Field(
        default_factory=dict,
        description="Default hyperparameters of the setup's code: the built-in trainer's (see its README), or with "
        "`code` set your script's (as --name value). Code given at run time (gpuctl train --source-dir, an "
        "execution's `code`) gets only the hyperparameters given with it. processes_per_host here also sets the "
        "launcher's processes per host (GPU_TRAIN_PROCESSES_PER_HOST) for every job",
    )
    max_runtime_hours: RuntimeHours = Field(24, description="MaxRuntime in hours (1-672)")
    spot: bool = Field(False, description="Managed spot training with checkpoints")
    max_wait_hours: WaitHours | None = Field(
        None, description="Spot: runtime plus capacity wait, hours (1-672; default 2 x runtime, at most 672)"
    )
    checkpoints: bool | None = Field(
        None,
        description="Give every job a CheckpointConfig (/opt/ml/checkpoints synced with the artifacts bucket's "
        "checkpoints/<job prefix>/<job name>/) and its role the grants: null: with spot only; true: also on demand "
        "(fallback lists, training plans), so a stopped or failed job's last checkpoint stays in S3 (expired after "
        "data.checkpoint_expiration_days); false is refused with spot",
    )
    max_retry_attempts: (
        Annotated[
            int, Field(ge=MAX_RETRY_ATTEMPTS[0], le=MAX_RETRY_ATTEMPTS[1]), Allowed(message="allowed: null or 1..30")
        ]
        | None
    ) = Field(None, description="SageMaker retries of a failed job (1-30)")
    network_isolation: bool = Field(False, description="No outbound network from the training container")
    inter_container_encryption: bool = Field(True, description="Encrypt traffic between hosts")
    allowed_instance_types: tuple[str, ...] | None = Field(
        None, description="Types an execution may choose (default: every NVIDIA training type that fits)"
    )
    instance_preferences: tuple[InstancePreferenceConfig, ...] | None = Field(
        None,
        description="Fallback list, 1-5 types in priority order starting with instance_type (names, or objects with "
        "instance_type, instance_count, training_plan_arn): a job asks SageMaker for the first type with capacity "
        "(InstancePreferences; an execution or gpuctl train --instance-type naming a type runs on that type only). "
        "On-demand capacity and training plans only: exclusive with spot. Checked by the GPU catalog: NVIDIA GPU "
        "types the image's CUDA supports, at least the first choice's GPU memory, the same world size and cost "
        "ceiling of training.fallback",
    )
    training_plan_arn: TrainingPlanArn | None = Field(
        None,
        description="A SageMaker training plan whose reserved capacity the jobs use (ResourceConfig."
        "TrainingPlanArn); exclusive with per-preference plans",
    )
    fallback: TrainingFallbackConfig = Field(default_factory=lambda: TrainingFallbackConfig())
    notification_emails: EmailList = Field((), description="E-mail addresses for failure and alarm notices")
    code: TrainingCodeConfig | None = Field(
        None, description="Your own training code (default: null, the platform's built-in trainer)"
    )
    prepare: TrainingPrepareConfig = Field(default_factory=lambda: TrainingPrepareConfig())
    alarms: TrainingAlarmsConfig = Field(default_factory=lambda: TrainingAlarmsConfig())
    auto_stop: TrainingAutoStopConfig = Field(
        default_factory=lambda: TrainingAutoStopConfig(),
        description="Stop a job whose GPUs sit idle or whose step counter does not advance",
    )

    @field_validator("instance_preferences", mode="before")
    @classmethod
    def _preference_names(cls, value: Any) -> Any:
        """A plain type name is an entry with the type alone."""
        if not isinstance(value, list | tuple):
            return value
        return tuple({"instance_type": item} if isinstance(item, str) else item for item in value)

    @field_validator("hyperparameters", mode="before")
    @classmethod
    def _hp_strings(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, int | float):
                item = str(item)
            out[key] = item
        return out

    @field_validator("instance_type", "allowed_instance_types")
    @classmethod
    def _nvidia(cls, value: str | tuple[str, ...] | None, info: ValidationInfo) -> Any:
        where = "training" if info.field_name == "instance_type" else f"training.{info.field_name}"
        for item in (value,) if isinstance(value, str) else value or ():
            require_nvidia_gpu(item, where=where, usage="training")
        return value

    @field_validator("dataset_prefix")
    @classmethod
    def _dataset(cls, value: str) -> str:
        if not value.endswith("/") or not s3_keys.is_relative_key(value):
            raise ValueError("must be a relative S3 prefix ending in '/', e.g. 'imagenet/'")
        if not s3_keys.has_key_characters(value):
            raise ValueError("must use only letters, digits and !_.*'()/=- (an S3 key prefix)")
        return value

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must list at least one channel, e.g. [train, validation]")
        problems = [p for p in (channel_name_problem(c) for c in value) if p]
        if problems:
            raise ValueError("; ".join(problems))
        if len(set(value)) != len(value):
            raise ValueError(
                f"channel names must be unique (repeated: {sorted({c for c in value if value.count(c) > 1})})"
            )
        return value

    @field_validator("readable_inputs")
    @classmethod
    def _readable(cls, value: tuple[ReadableInputConfig, ...]) -> tuple[ReadableInputConfig, ...]:
        seen = [(item.bucket, item.prefix) for item in value]
        repeated = sorted({f"{b or 'datasets bucket'}/{p}" for b, p in seen if seen.count((b, p)) > 1})
        if repeated:
            raise ValueError(f"each bucket and prefix once (repeated: {repeated})")
        return value

    @model_validator(mode="after")
    def _rules(self) -> TrainingConfig:
        wait_s = None if self.max_wait_hours is None else self.max_wait_hours * HOUR_S
        violations = stopping_violations(self.max_runtime_hours * HOUR_S, wait_s, self.spot)
        if WAIT_WITHOUT_SPOT in violations:
            raise ValueError("max_wait_hours is set but spot is false; allowed: spot: true, or max_wait_hours: null")
        if WAIT_BELOW_RUNTIME in violations:
            raise ValueError(
                f"max_wait_hours: {self.max_wait_hours} is less than max_runtime_hours: {self.max_runtime_hours}; "
                "allowed: max_wait_hours >= max_runtime_hours"
            )
        if self.spot and self.checkpoints is False:
            raise ValueError(
                "checkpoints: false with spot: true; an interrupted spot job resumes from its checkpoints; "
                "allowed: checkpoints: true or null with spot, or spot: false"
            )
        if self.input == "fsx" and self.input_mode != "File":
            raise ValueError("input: fsx mounts the file system, so input_mode must be File")
        self._check_preferences()
        for instance_type in (self.instance_type, *(self.allowed_instance_types or ()), *self.preference_types):
            check_processes_per_host(
                instance_type,
                self.hyperparameters.get(HP_PROCESSES_PER_HOST),
                where="training.hyperparameters",
                param=HP_PROCESSES_PER_HOST,
            )
        return self

    @property
    def preference_types(self) -> tuple[str, ...]:
        """The types of ``instance_preferences``, in order (empty without a list)."""
        return tuple(p.instance_type for p in self.instance_preferences or ())

    def preferences(self) -> tuple[InstancePreference, ...]:
        """``instance_preferences`` as the library's :class:`~gpu_constructs.training_spec.InstancePreference`."""
        from gpu_constructs.training_spec import InstancePreference

        return tuple(
            InstancePreference(p.instance_type, p.instance_count, p.training_plan_arn)
            for p in self.instance_preferences or ()
        )

    def _check_preferences(self) -> None:
        """The fallback list's own rules (the library's: spot, 1-5 entries, first entry, counts, plans, storage
        kind), before the catalog's chain check that needs the image and the region
        (:meth:`check_fallback`)."""
        from gpu_constructs.catalog import lookup
        from gpu_constructs.training_spec.preferences import preference_problems

        if self.instance_preferences is None:
            return
        if not self.instance_preferences:
            raise ValueError("instance_preferences: [] is empty; allowed: null (one type) or 1 to 5 types")
        problems = preference_problems(
            self.preferences(),
            instance_type=self.instance_type,
            instance_count=self.instance_count,
            spot=self.spot,
            training_plan_arn=self.training_plan_arn,
            local_nvme={name: lookup(name).has_local_nvme for name in self.preference_types},
        )
        if problems:
            raise ValueError("; ".join(problems))

    def check_fallback(self, *, cuda_version: str | None, region: str) -> None:
        """The catalog's check of ``instance_preferences`` (:func:`~gpu_constructs.catalog.check_fallback_chain`):
        every type runs the image's CUDA ``cuda_version``, has at least the first choice's GPU memory, keeps the
        world size (``fallback.keep_world_size``) and costs at most ``fallback.max_cost_ratio`` x the first
        choice in ``region``. Raises the catalog's error (a ``ValueError``) naming the entry."""
        from gpu_constructs.catalog import FallbackChoice, check_fallback_chain
        from gpu_constructs.training_spec import MAX_PREFERENCES

        if not self.instance_preferences:
            return
        check_fallback_chain(
            [FallbackChoice(p.instance_type, p.instance_count) for p in self.instance_preferences],
            usage="training",
            where="training",
            param="instance_preferences",
            default_count=self.instance_count,
            cuda_version=cuda_version,
            keep_world_size=self.fallback.keep_world_size,
            max_cost_ratio=self.fallback.max_cost_ratio,
            region=region,
            max_entries=MAX_PREFERENCES,
            world_size_opt_out="set training.fallback.keep_world_size: false",
        )

    def readable(self) -> list[ReadableInput]:
        """``readable_inputs`` as the library's :class:`~gpu_constructs.training.ReadableInput` values."""
        return [item.readable_input() for item in self.readable_inputs]

    def max_runtime(self) -> Duration:
        """``max_runtime_hours`` as the library's ``max_runtime``."""
        from aws_cdk import Duration

        return Duration.hours(self.max_runtime_hours)

    def max_wait(self) -> Duration | None:
        """``max_wait_hours`` as the library's ``max_wait`` (``None``: the default, twice the runtime with spot)."""
        from aws_cdk import Duration

        return None if self.max_wait_hours is None else Duration.hours(self.max_wait_hours)

    def code_options(self, root: Path, *, package_index: bool | None) -> TrainingCodeOptions:
        """The code the jobs run: ``code``'s (:meth:`TrainingCodeConfig.options`), or the built-in trainer."""
        if self.code is not None:
            return self.code.options(root, package_index=package_index)
        from gpu_constructs.training import TrainingCodeOptions

        return TrainingCodeOptions(package_index=package_index)

    def pipeline_props(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.training.TrainingPipeline` this section sets alone.

        The stack adds what combines it with other stacks and sections: the image, the data stack's storage,
        the job-name prefix, the channels and subnets (S3 or the storage stack's file system), the network,
        the code (:meth:`code_options`) and the environment-wide settings.
        """
        from aws_cdk import Size

        return {
            "instance_type": self.instance_type,
            "instance_count": self.instance_count,
            "dataset_prefix": self.dataset_prefix,
            "readable_inputs": self.readable(),
            "volume_size": Size.gibibytes(self.volume_size_gb),
            "hyperparameters": self.hyperparameters,
            "max_runtime": self.max_runtime(),
            "spot": self.spot,
            "max_wait": self.max_wait(),
            "checkpoints": self.checkpoints,
            "max_retry_attempts": self.max_retry_attempts,
            "inter_container_encryption": self.inter_container_encryption,
            "network_isolation": self.network_isolation,
            "data_version": self.data_version,
            "allowed_instance_types": self.allowed_instance_types,
            "instance_preferences": self.preferences() or None,
            "training_plan_arn": self.training_plan_arn,
            "keep_world_size": self.fallback.keep_world_size,
            "max_cost_ratio": self.fallback.max_cost_ratio,
            "prepare": self.prepare.options(splits=self.channels),
            "notification_emails": self.notification_emails,
            "alarms": self.alarms.thresholds(),
        }
