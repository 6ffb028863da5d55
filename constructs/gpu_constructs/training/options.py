"""Value types of :class:`~gpu_constructs.training.TrainingPipeline`: the image it needs, the code it runs, the
prepare step, the alarms.

Durations a caller leaves out are ``None`` here and resolved by the construct, so each default is written once
(``PREPARE_MAX_RUNTIME``, ``ALARM_PERIOD``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, Size

from gpu_constructs.deprecation import deprecated_class_alias
from gpu_constructs.errors import fail, require_one_of
from gpu_constructs.images import ImageLike
from gpu_constructs.training_spec.code import (
    DEFAULT_ENTRY_POINT,
    ENTRY_POINT_ALLOWED,
    FRAMEWORKS,
    LAUNCH_DISTRIBUTIONS,
    Distribution,
    Framework,
    entry_point_problem,
)
from gpu_constructs.training_spec.rules import alarm_threshold_problems

__all__ = [
    "ALARM_PERIOD",
    "PREPARE_MAX_RUNTIME",
    "AlarmThresholds",
    "PrepareOptions",
    "ReadableInput",
    "TrainingAlarms",
    "TrainingCodeOptions",
    "TrainingImageLike",
]

#: The prepare step's run time limit when :attr:`PrepareOptions.max_runtime` is not given.
PREPARE_MAX_RUNTIME = Duration.days(1)
#: The training alarms' metric period when :attr:`TrainingAlarms.period` is not given.
ALARM_PERIOD = Duration.minutes(5)


#: What the pipeline needs from an image (``gpu_constructs.images.GpuImage`` provides it): the one image protocol.
TrainingImageLike = ImageLike


@dataclass(frozen=True)
class ReadableInput:
    """An S3 prefix the training jobs may read: the channels a user names (``gpuctl train --input``, an execution's
    ``inputs``) must lie under one of the setup's readable inputs.

    The job role is granted exactly: ``s3:ListBucket`` on the bucket with an ``s3:prefix`` condition for the prefix
    (none for the whole bucket), ``s3:GetObject`` on ``<prefix>*`` and ``kms:Decrypt`` with the bucket's key.

    :param bucket_name: the bucket (default: ``None``, the platform's datasets bucket, with its data key).
    :param prefix: the key prefix (default ``""``: the whole bucket); a non-empty prefix ends in ``/``.
    :param kms_key_arn: the bucket's SSE-KMS key (default: none: SSE-S3; the datasets bucket uses its own key).
    """

    bucket_name: str | None = None
    prefix: str = ""
    kms_key_arn: str | None = None


@dataclass(frozen=True)
class PrepareOptions:
    """The optional prepare step: shard raw files with ``gpuctl shard`` in a processing job.

    :param source_prefix: datasets-bucket prefix of the raw files; split ``<name>`` is read from
        ``<source_prefix><name>/`` (ImageFolder layout or a manifest).
    :param splits: split names (default: the names of the S3 channels). Each split's shards go to the
        matching channel's S3 URI for the execution's data version.
    :param instance_type: processing type, CPU or GPU (default ``ml.m5.4xlarge``).
    :param volume_size: volume for raw files and shards (default 200 GiB).
    :param image_size / shard_size / seed: ``gpuctl shard`` options (defaults 224, ``128MB``, 0).
    :param max_runtime: default (``None``): 1 day, ``PREPARE_MAX_RUNTIME``.
    :param run_by_default: run the step when the execution input does not say (default False).
    :param command: the program the image runs, before ``SRC DEST`` and the options (default
        ``("python3", "-m", "gpu_train", "shard")``, the training image's copy of ``gpuctl shard``).
    :param instance_preferences: a fallback list of processing types starting with ``instance_type`` (1-5; default:
        none). The processing job then asks SageMaker for the first type with capacity
        (``ProcessingClusterConfig.InstancePreferences``), created through the AWS SDK integration with a describe
        loop (:func:`gpu_constructs.training.fallback_states.prepare_on_list`).
    """

    source_prefix: str
    splits: tuple[str, ...] = ()
    instance_type: str = "ml.m5.4xlarge"
    volume_size: Size = Size.gibibytes(200)
    image_size: int = 224
    shard_size: str = "128MB"
    seed: int = 0
    max_runtime: Duration | None = None
    run_by_default: bool = False
    command: tuple[str, ...] = ("python3", "-m", "gpu_train", "shard")
    instance_preferences: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainingCodeOptions:
    """The training code a :class:`~gpu_constructs.training.TrainingPipeline` runs, and how its launcher starts it.

    The code is image-independent: the folder ships as a CDK S3 asset (the ``code`` channel) and the platform's
    launcher runs it on any image, the stock PyTorch DLC included. Executions and ``gpuctl train --source-dir``
    may run other code. The construct turns these settings into the job spec's
    :class:`~gpu_constructs.training_spec.TrainingCode` (the S3 locations of the package and the launcher).

    :param source_dir: the folder of the training code (default: the built-in trainer,
        ``containers/training/default_code``).
    :param entry_point: the script in ``source_dir`` (default ``train.py``).
    :param distribution: ``auto`` (default: torchrun over every GPU and host when there is more than one
        process), ``torchrun`` or ``single`` (one plain process per host).
    :param framework: ``auto`` (default), ``pytorch`` or ``tensorflow``: the GPU check the launcher runs first.
    :param package_index: the jobs have a route to a package index, so a ``requirements.txt`` of the code is
        installed from it (default ``None``: True only for jobs outside a VPC without network isolation; the
        platform's stacks pass what the network reaches). Without one only wheels vendored into the code are
        installed.
    """

    source_dir: str | Path | None = None
    entry_point: str = DEFAULT_ENTRY_POINT
    distribution: Distribution = "auto"
    framework: Framework = "auto"
    package_index: bool | None = None

    def validate(self, where: str) -> None:
        """Raise the first bad setting (``<where>: code.<name>=<value> is not allowed; allowed: ...``).

        Whether ``entry_point`` is a file of ``source_dir`` is checked where the folder is packaged."""
        if entry_point_problem(self.entry_point) is not None:
            raise fail(where, "code.entry_point", self.entry_point, ENTRY_POINT_ALLOWED)
        require_one_of(where, "code.distribution", self.distribution, LAUNCH_DISTRIBUTIONS)
        require_one_of(where, "code.framework", self.framework, FRAMEWORKS)


@dataclass(frozen=True)
class TrainingAlarms:
    """Thresholds of the training alarms (percentages are per GPU / per vCPU of the configured type).

    :param gpu_low_percent: input-bound alarm: GPU utilization below this ... (default 50)
    :param busy_percent: ... while CPU or disk utilization is above this (default 80).
    :param idle_gpu_percent: idle-GPU alarm: the least-used host's GPU utilization below this (default 5).
    :param period: metric period (default ``None``: 5 minutes, ``ALARM_PERIOD``).
    :param input_bound_periods: consecutive periods before the input-bound alarm fires (default 3).
    :param idle_periods: consecutive periods before the idle-GPU alarm fires (default 6 = 30 min).
    """

    gpu_low_percent: float = 50
    busy_percent: float = 80
    idle_gpu_percent: float = 5
    period: Duration | None = None
    input_bound_periods: int = 3
    idle_periods: int = 6

    def validate(self, where: str) -> None:
        """Raise the first problem (``<where>: alarms.<name>=<value> is not allowed; allowed: ...``)."""
        for name, value, allowed in alarm_threshold_problems(self):
            raise fail(where, f"alarms.{name}", value, allowed)


#: Deprecated: :class:`TrainingAlarms`, whose percentages end in ``_percent`` (``gpu_low_pct`` and the other old
#: field names are still accepted and readable, with a warning).
AlarmThresholds = deprecated_class_alias(
    "AlarmThresholds",
    TrainingAlarms,
    {"gpu_low_pct": "gpu_low_percent", "busy_pct": "busy_percent", "idle_gpu_pct": "idle_gpu_percent"},
)
