"""Value types of :class:`~gpu_constructs.training.TrainingPipeline`: the image it needs, the prepare step, the alarm
thresholds."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, Size

from gpu_constructs.errors import fail
from gpu_constructs.images import ImageLike
from gpu_constructs.training_spec.rules import alarm_threshold_problems

__all__ = ["AlarmThresholds", "PrepareOptions", "ReadableInput", "TrainingImageLike"]


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
    :param max_runtime: default 1 day.
    :param run_by_default: run the step when the execution input does not say (default False).
    :param command: the program the image runs, before ``SRC DEST`` and the options (default
        ``("python3", "-m", "gpu_train", "shard")``, the training image's copy of ``gpuctl shard``).
    """

    source_prefix: str
    splits: tuple[str, ...] = ()
    instance_type: str = "ml.m5.4xlarge"
    volume_size: Size = Size.gibibytes(200)
    image_size: int = 224
    shard_size: str = "128MB"
    seed: int = 0
    max_runtime: Duration = Duration.days(1)
    run_by_default: bool = False
    command: tuple[str, ...] = ("python3", "-m", "gpu_train", "shard")


@dataclass(frozen=True)
class AlarmThresholds:
    """Thresholds of the training alarms (percentages are per GPU / per vCPU of the configured type).

    :param gpu_low_pct: input-bound alarm: GPU utilization below this ... (default 50)
    :param busy_pct: ... while CPU or disk utilization is above this (default 80).
    :param idle_gpu_pct: idle-GPU alarm: the least-used host's GPU utilization below this (default 5).
    :param period: metric period (default 5 minutes).
    :param input_bound_periods: consecutive periods before the input-bound alarm fires (default 3).
    :param idle_periods: consecutive periods before the idle-GPU alarm fires (default 6 = 30 min).
    """

    gpu_low_pct: float = 50
    busy_pct: float = 80
    idle_gpu_pct: float = 5
    period: Duration = Duration.minutes(5)
    input_bound_periods: int = 3
    idle_periods: int = 6

    def validate(self, where: str) -> AlarmThresholds:
        """Raise the first problem (``<where>: alarm_thresholds.<name>=<value> is not allowed; allowed: ...``)."""
        for name, value, allowed in alarm_threshold_problems(self):
            raise fail(where, f"alarm_thresholds.{name}", value, allowed)
        return self
