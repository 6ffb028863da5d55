"""The rules of the endpoint's hosting settings and of its monitoring and capture value types, without ``aws_cdk``.

:class:`~gpu_constructs.endpoint.alarms.EndpointAlarms`, :class:`~gpu_constructs.endpoint.capture.DataCapture`
and :class:`~gpu_constructs.endpoint.capture.AsyncInference` check their settings with these functions, and so
do :class:`~gpu_constructs.endpoint.GpuEndpoint` and :class:`~gpu_constructs.endpoint.ModelData` for the hosting
settings (the instance type, the ML storage volume, the model artifact); the config model checks its keys with
the same ones without loading the CDK, so a config that loads is one the endpoint accepts.
"""

from __future__ import annotations

import re
from typing import Literal

from gpu_constructs import catalog
from gpu_constructs.endpoint.base import VOLUME_SIZE_RANGE_GB, SettingError, invalid
from gpu_constructs.errors import is_token
from gpu_constructs.s3_keys import is_relative_key, split_s3_uri

#: What SageMaker hosting unpacks into ``/opt/ml/model``: a gzip-compressed tar archive (``ModelDataUrl``).
MODEL_ARCHIVE_SUFFIX = ".tar.gz"
#: The SSM parameter name of :meth:`~gpu_constructs.endpoint.ModelData.from_ssm_parameter`: letters, digits and
#: ``_.-/`` (Systems Manager's parameter name characters), optionally starting with the ``/`` of a hierarchy.
SSM_PARAMETER_NAME_RE = re.compile(r"/?[a-zA-Z0-9_.\-/]{1,2047}")

#: Default threshold of the ModelLatency p99 alarm, in milliseconds.
DEFAULT_MODEL_LATENCY_P99_MS = 1000
#: Default period of the alarms' metrics, in seconds.
DEFAULT_ALARM_PERIOD_S = 60
#: Default time SageMaker gives the model download and extraction, in seconds: 20 minutes, sized for multi-GB models.
DEFAULT_MODEL_DOWNLOAD_TIMEOUT_S = 1200
#: Default time the container has to pass ``/ping`` after start, in seconds: 10 minutes to load weights onto the GPU.
DEFAULT_STARTUP_HEALTH_CHECK_TIMEOUT_S = 600

#: Why :func:`volume_size_problem` refuses a volume size.
VolumeSizeProblem = Literal["local_nvme", "out_of_range"]


def check_hosting_instance_type(where: str, instance_type: str, cpu_variant: bool) -> catalog.InstanceType:
    """The catalog entry of ``instance_type`` when SageMaker hosting can run the variant on it, else raise.

    A GPU variant needs an NVIDIA GPU type (:func:`~gpu_constructs.catalog.require_nvidia_gpu`, usage
    ``hosting``). A ``cpu_variant`` may use any type of the catalog that SageMaker hosting accepts, in its
    SageMaker spelling (``ml.m5.xlarge``): the CreateEndpointConfig API refuses the EC2 name. A token is refused:
    the type decides the rules of the volume, the GPU metrics and the image, all at synth.
    """
    if is_token(instance_type):
        raise invalid(
            where, "instance_type", instance_type, "a literal instance type name (it is checked against the catalog)"
        )
    if not cpu_variant:
        return catalog.require_nvidia_gpu(instance_type, where=where, usage="hosting")
    it = catalog.lookup(instance_type, where=where)
    if instance_type.strip() != it.sagemaker_name:
        raise invalid(where, "instance_type", instance_type, f"the SageMaker spelling {it.sagemaker_name!r}")
    if not it.valid_for("hosting"):
        raise SettingError(
            where,
            "instance_type",
            f"instance_type={instance_type!r} is not a SageMaker hosting type; allowed: a type SageMaker hosting "
            "accepts (see docs/gpu-instances.md)",
        )
    return it


def volume_size_problem(size: int, instance: catalog.InstanceType) -> VolumeSizeProblem | None:
    """Why SageMaker hosting refuses an ML storage volume of ``size`` GB on ``instance``; None when it accepts it.

    ``"local_nvme"``: the type has NVMe instance storage, which SageMaker uses instead of an EBS volume
    (``VolumeSizeInGB`` is refused for it); ``"out_of_range"``: outside :data:`VOLUME_SIZE_RANGE_GB`. The caller
    words the error in its own terms (the endpoint's ``volume_size_gib``, the config's ``volume_size_gb: null``).
    """
    if instance.has_local_nvme:
        return "local_nvme"
    low, high = VOLUME_SIZE_RANGE_GB
    return None if low <= size <= high else "out_of_range"


def is_model_archive_key(key: str) -> bool:
    """True for a relative S3 key (:func:`~gpu_constructs.s3_keys.is_relative_key`) of a ``.tar.gz`` archive."""
    return bool(key) and is_relative_key(key) and key.endswith(MODEL_ARCHIVE_SUFFIX)


def is_model_archive_uri(uri: str) -> bool:
    """True for ``s3://<bucket>/<key>.tar.gz`` (:func:`~gpu_constructs.s3_keys.split_s3_uri`)."""
    return split_s3_uri(uri) is not None and uri.endswith(MODEL_ARCHIVE_SUFFIX)


def is_ssm_parameter_name(name: str) -> bool:
    """True for a name :data:`SSM_PARAMETER_NAME_RE` accepts (the parameter that holds a model's URI)."""
    return SSM_PARAMETER_NAME_RE.fullmatch(name) is not None


def check_alarm_thresholds(
    where: str,
    *,
    max_5xx_percent: float,
    max_gpu_memory_percent: float,
    latency_ms: float,
    period_s: float,
    evaluation_periods: int,
    datapoints_to_alarm: int,
) -> None:
    """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` for alarm thresholds that cannot fire sensibly.

    Percentages in (0, 100], a positive latency, a period CloudWatch accepts, and at most ``evaluation_periods``
    breaching datapoints.
    """
    for setting, percent in (
        ("alarms.max_5xx_percent", max_5xx_percent),
        ("alarms.max_gpu_memory_percent", max_gpu_memory_percent),
    ):
        if not 0 < percent <= 100:
            raise invalid(where, setting, percent, "a percentage in (0, 100]")
    if latency_ms <= 0:
        raise invalid(
            where, "alarms.max_model_latency_p99", latency_ms, "> 0 ms", name="alarms.max_model_latency_p99 (ms)"
        )
    if period_s not in (10, 30) and period_s % 60:
        raise invalid(
            where, "alarms.period", period_s, "10, 30 or a multiple of 60 seconds", name="alarms.period (seconds)"
        )
    if not 1 <= datapoints_to_alarm <= evaluation_periods:
        raise invalid(
            where,
            "alarms.datapoints_to_alarm",
            datapoints_to_alarm,
            f"1 to evaluation_periods ({evaluation_periods})",
        )


def check_data_capture(where: str, *, sampling_percentage: int, capture_input: bool, capture_output: bool) -> None:
    """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` for a sampling share outside 0-100 or a
    capture of neither requests nor responses."""
    if not 0 <= sampling_percentage <= 100:
        raise invalid(where, "data_capture.sampling_percentage", sampling_percentage, "an integer in [0, 100]")
    if not (capture_input or capture_output):
        raise invalid(
            where,
            "data_capture.capture_input",
            (False, False),
            "at least one of them True",
            name="data_capture capture_input/capture_output",
        )


def check_async_concurrency(where: str, max_concurrent_invocations_per_instance: int | None) -> None:
    """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` for a per-instance concurrency outside 1-1000."""
    limit = max_concurrent_invocations_per_instance
    if limit is not None and not 1 <= limit <= 1000:
        raise invalid(
            where, "async_inference.max_concurrent_invocations_per_instance", limit, "an integer in [1, 1000]"
        )
