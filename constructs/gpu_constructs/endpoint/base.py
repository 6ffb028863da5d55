"""Names, limits and the error of the endpoint's value types, shared by the modules of the package."""

from __future__ import annotations

import re
from typing import Any

from gpu_constructs import s3_keys
from gpu_constructs.deprecation import deprecated_attributes, warn_deprecated
from gpu_constructs.errors import ValidationError, fail

#: CloudWatch namespace of SageMaker's invocation metrics (Invocations, 5xx, ModelLatency, backlog).
INVOCATION_METRICS_NAMESPACE = "AWS/SageMaker"
#: CloudWatch namespace of the per-instance utilization metrics (CPU, memory, GPU, GPU memory, disk).
INSTANCE_METRICS_NAMESPACE = "/aws/sagemaker/Endpoints"
#: Id of the warning annotation for a production endpoint that can run on a single instance.
SINGLE_INSTANCE_WARNING_ID = "@gpu-platform/endpoint:singleInstanceInProduction"
#: Log group name prefix of SageMaker endpoints.
LOG_GROUP_PREFIX = "/aws/sagemaker/Endpoints/"

#: CloudWatch units a log metric filter may name.
UNIT_NAMES = ("Count", "Milliseconds", "Seconds", "Bytes", "Percent", "None")

#: Timeouts of the model download and the container's start-up health check, in seconds.
TIMEOUT_RANGE_S = (60, 3600)
#: ``ProductionVariant.VariantInstanceProvisionTimeoutInSeconds``, in seconds: how long SageMaker keeps provisioning
#: a variant's instances after an insufficient-capacity error (retrying the next instance pool, if any). The botocore
#: sagemaker service model: "Valid values: 300 to 3600" (min 300, max 3600).
PROVISION_TIMEOUT_RANGE_S = (300, 3600)
#: Size of the EBS ML storage volume (types without local NVMe), in GB.
VOLUME_SIZE_RANGE_GB = (1, 512)

#: Bounds of a blue/green deployment's whole run (SageMaker's MaximumExecutionTimeoutInSeconds), in seconds.
MIN_EXECUTION_TIMEOUT_S = 600
MAX_EXECUTION_TIMEOUT_S = 28_800
#: Longest bake time after a traffic shift and longest termination wait, in seconds.
MAX_BAKE_S = 3600
#: Allowed canary sizes and linear steps, in percent of the variant's capacity.
STEP_PERCENT_RANGE = {"CANARY": (1, 50), "LINEAR": (10, 50)}


class SettingError(ValidationError):
    """A rule of an endpoint value type failed; ``setting`` is the dotted setting (``deployment.wait_interval``).

    A config that builds the value types turns ``setting`` back into its own key (see ``stacks.config``).
    """

    def __init__(self, where: str, setting: str, message: str) -> None:
        super().__init__(where, message)
        self.setting = setting


def invalid(where: str, setting: str, value: Any, allowed: str, *, name: str | None = None) -> SettingError:
    """The standard error (``<where>: <name>=<value!r> is not allowed; allowed: <allowed>``) of ``setting``.

    ``name`` (default: ``setting``) is what the message calls it, e.g. ``deployment.wait_interval (seconds)``.
    """
    detail = fail(where, name or setting, value, allowed).detail
    return SettingError(where, setting, detail)


def check_prefix(where: str, setting: str, prefix: str) -> None:
    """Refuse an S3 key prefix that :func:`gpu_constructs.s3_keys.is_key_prefix` refuses, as a
    :class:`SettingError` of ``setting`` (the config model maps it onto its own key)."""
    if not s3_keys.is_key_prefix(prefix):
        raise invalid(where, setting, prefix, s3_keys.KEY_PREFIX_ALLOWED)


def join_prefix(prefix: str, name: str) -> str:
    """Deprecated: use :func:`gpu_constructs.s3_keys.join_key_prefix` (same result)."""
    warn_deprecated("gpu_constructs.endpoint.base.join_prefix", "gpu_constructs.s3_keys.join_key_prefix")
    return s3_keys.join_key_prefix(prefix, name)


#: ``PREFIX_RE`` (deprecated): the S3 key prefix rule is :func:`gpu_constructs.s3_keys.is_key_prefix`.
__getattr__ = deprecated_attributes(
    __name__,
    {
        "PREFIX_RE": (
            "gpu_constructs.s3_keys.is_key_prefix",
            lambda: re.compile(f"^[A-Za-z0-9{re.escape(s3_keys.KEY_PREFIX_CHARACTERS)}]*$"),
        )
    },
)
