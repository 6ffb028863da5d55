"""The project's rules for training and processing jobs, each written once (the spec, the construct, the config and
``gpuctl`` call them). No ``aws_cdk`` import: unresolved CDK tokens are recognised by their text."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from gpu_constructs.catalog import check_gpu_count, lookup, processes_per_host_limit
from gpu_constructs.errors import ValidationError, is_token
from gpu_constructs.training_spec.limits import (
    CHANNEL_NAME_ALLOWED,
    CHANNEL_RE,
    DATA_VERSION_PATTERN,
    DATA_VERSION_PLACEHOLDER,
    HP_PROCESSES_PER_HOST,
    JOB_NAME_MAX,
    JOB_NAME_PATTERN,
    JOB_NAME_RE,
    MAX_RUNTIME_LIMIT_S,
    MAX_WAIT_LIMIT_S,
    PROCESSES_RE,
    S3_URI_RE,
    WHERE,
)

__all__ = [
    "PROCESSING_TYPES_ALLOWED",
    "alarm_threshold_problems",
    "channel_name_problem",
    "check_processes_per_host",
    "processing_type_allowed",
    "readable_problem",
    "runtime_limit_text",
    "seconds_of",
    "stopping_problems",
    "stopping_violations",
    "validate_job_name",
]


def seconds_of(value: Any) -> Any:
    """Whole seconds of a duration: a ``datetime.timedelta`` or an ``aws_cdk.Duration`` (``to_seconds()``).

    Anything else (an unresolved token, a wrong type) is returned as is, for the rules to report.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        return int(seconds) if seconds == int(seconds) else seconds
    to_seconds = getattr(value, "to_seconds", None)
    if callable(to_seconds):
        return int(to_seconds())
    return value


def as_timedelta(value: Any) -> Any:
    """``value`` as a ``timedelta`` when it is a CDK ``Duration`` (the spec stores the standard type)."""
    if value is None or isinstance(value, timedelta) or not callable(getattr(value, "to_seconds", None)):
        return value
    return timedelta(seconds=int(value.to_seconds()))


def runtime_limit_text(limit_s: int, api_field: str, *, unit: str = "s", unit_s: int = 1) -> str:
    """``1..<limit> <unit> (SageMaker <api_field> limit <limit_s> s = <days> days)``: one wording for every unit."""
    return f"1..{limit_s // unit_s} {unit} (SageMaker {api_field} limit {limit_s} s = {limit_s // 86400} days)"


#: What :func:`stopping_violations` reports (each caller words it in its own units and names).
RUNTIME_RANGE = "runtime_range"
WAIT_WITHOUT_SPOT = "wait_without_spot"
WAIT_BELOW_RUNTIME = "wait_below_runtime"
WAIT_RANGE = "wait_range"


def stopping_violations(runtime_s: Any, wait_s: Any, spot: bool) -> list[str]:
    """The rules of ``StoppingCondition``, in seconds: MaxRuntime within SageMaker's 28 days; MaxWait only with spot,
    at least MaxRuntime (it counts the spot wait plus the runtime) and at most 28 days. The spec and the config
    (hours) both apply it."""
    out = []
    if not isinstance(runtime_s, int) or not 1 <= runtime_s <= MAX_RUNTIME_LIMIT_S:
        out.append(RUNTIME_RANGE)
    if wait_s is not None and not spot:
        out.append(WAIT_WITHOUT_SPOT)
    if spot and wait_s is not None:
        if isinstance(runtime_s, int) and wait_s < runtime_s:
            out.append(WAIT_BELOW_RUNTIME)
        if wait_s > MAX_WAIT_LIMIT_S:
            out.append(WAIT_RANGE)
    return out


def stopping_problems(runtime_s: Any, wait_s: Any, spot: bool) -> list[str]:
    """:func:`stopping_violations` worded for the spec (``max_runtime`` / ``max_wait``, in seconds)."""
    wording = {
        RUNTIME_RANGE: f"max_runtime={runtime_s!r} s is not allowed; allowed: "
        + runtime_limit_text(MAX_RUNTIME_LIMIT_S, "MaxRuntimeInSeconds"),
        WAIT_WITHOUT_SPOT: f"max_wait={wait_s!r} s is not allowed without spot; allowed: set spot=True, or leave "
        "max_wait unset",
        WAIT_BELOW_RUNTIME: f"max_wait={wait_s} s is less than max_runtime={runtime_s} s; allowed: max_wait >= "
        "max_runtime (MaxWait counts the spot wait plus the runtime)",
        WAIT_RANGE: f"max_wait={wait_s} s is not allowed; allowed: "
        + runtime_limit_text(MAX_WAIT_LIMIT_S, "MaxWaitTimeInSeconds"),
    }
    return [wording[code] for code in stopping_violations(runtime_s, wait_s, spot)]


#: Instance types of the prepare (processing) step.
PROCESSING_TYPES_ALLOWED = "an ml.* type valid for processing jobs, e.g. 'ml.m5.4xlarge' (CPU) or 'ml.g5.2xlarge' (GPU)"


def processing_type_allowed(instance_type: str, *, where: str, param: str = "instance_type") -> bool:
    """Whether SageMaker processing accepts ``instance_type`` (an unknown type raises the catalog's error)."""
    it = lookup(instance_type, where=where, param=param)
    return instance_type.startswith("ml.") and it.valid_for("processing")


def alarm_threshold_problems(thresholds: Any) -> list[tuple[str, Any, str]]:
    """``(name, value, allowed)`` of every bad training alarm threshold: percentages in (0, 100], idle below
    input-bound, at least one period. ``thresholds`` has ``gpu_low_percent``, ``busy_percent``,
    ``idle_gpu_percent``, ``input_bound_periods`` and ``idle_periods``: ``gpu_constructs.training.TrainingAlarms``
    and the config's ``training.alarms`` apply the same rule."""
    gpu_low_percent, idle_gpu_percent = thresholds.gpu_low_percent, thresholds.idle_gpu_percent
    busy_percent = thresholds.busy_percent
    input_bound_periods, idle_periods = thresholds.input_bound_periods, thresholds.idle_periods
    out: list[tuple[str, Any, str]] = []
    for name, value in (
        ("gpu_low_percent", gpu_low_percent),
        ("busy_percent", busy_percent),
        ("idle_gpu_percent", idle_gpu_percent),
    ):
        if not 0 < value <= 100:
            out.append((name, value, "a percentage in (0, 100]"))
    if idle_gpu_percent >= gpu_low_percent:
        out.append(
            (
                "idle_gpu_percent",
                idle_gpu_percent,
                f"less than gpu_low_percent={gpu_low_percent} (idle means lower than input-bound)",
            )
        )
    for name, count in (("input_bound_periods", input_bound_periods), ("idle_periods", idle_periods)):
        if count < 1:
            out.append((name, count, "an integer >= 1"))
    return out


def validate_job_name(name: str, *, where: str = WHERE, param: str = "job_name", prefix: str | None = None) -> str:
    """Raise unless ``name`` is a valid SageMaker job name (and starts with ``prefix`` when given)."""
    if not isinstance(name, str) or not JOB_NAME_RE.match(name) or len(name) > JOB_NAME_MAX:
        raise ValidationError(
            where,
            f"{param}={name!r} is not allowed; allowed: 1 to {JOB_NAME_MAX} letters, digits and hyphens, "
            f"starting and ending with a letter or digit (pattern {JOB_NAME_PATTERN})",
        )
    if prefix and not name.lower().startswith(prefix.lower()):
        raise ValidationError(
            where,
            f"{param}={name!r} is not allowed; allowed: a name starting with {prefix!r} "
            "(the platform's roles may only create jobs with that prefix)",
        )
    return name


def check_processes_per_host(
    instance_type: str, value: int | str | None, *, where: str = WHERE, param: str = HP_PROCESSES_PER_HOST
) -> int | None:
    """The one rule for processes per host, whichever way it is given; returns the number (``None``: the default).

    * the typed field (an ``int``): 1..GPUs of the type (:func:`~gpu_constructs.catalog.check_gpu_count`);
    * a hyperparameter (a ``str``: the spec's, the construct's, ``gpuctl train -p``, the config): an integer
      matching :data:`PROCESSES_PER_HOST_PATTERN`, 0 (the runtime starts one process per GPU) or 1..GPUs.

    The training state machine checks execution input against the same pattern and the same per-type limit
    (:func:`~gpu_constructs.catalog.processes_per_host_limit`). Raises :class:`ValidationError` naming the value,
    the type and what is allowed.
    """
    if value is None or is_token(value):
        return None
    if isinstance(value, str):
        if not PROCESSES_RE.match(value):
            limit = processes_per_host_limit(lookup(instance_type, where=where))
            raise ValidationError(
                where,
                f"{param}={value!r} is not an integer; allowed: 0 (one process per GPU) or 1..{limit} "
                f"on {instance_type}",
            )
        number = int(value)
        if number == 0:
            return None
        check_gpu_count(instance_type, number, where=where, param=param)
        return number
    check_gpu_count(instance_type, value, where=where, param=param)
    return value


def valid_processes(instance_type: str, value: Any) -> int | None:
    """The processes-per-host hyperparameter as a number when it is valid for the type (else ``None``)."""
    try:
        return check_processes_per_host(instance_type, value) if isinstance(value, str) else None
    except ValidationError:
        return None


def s3_problem(name: str, uri: Any) -> str | None:
    if is_token(uri):
        return None
    if not isinstance(uri, str) or not S3_URI_RE.match(uri.replace(DATA_VERSION_PLACEHOLDER, "v")):
        return f"{name}={uri!r} is not an S3 URI; allowed: s3://<bucket>/<prefix>"
    return None


#: Where a setup declares what its jobs may read (named in the refusals of gpuctl and of the state machine).
READABLE_WHERE = "the prefixes config training.readable_inputs grants the job role"


def channel_name_problem(name: Any, *, what: str = "channel name") -> str | None:
    """Why ``name`` cannot name a SageMaker input channel (``None`` when it can): the pattern and maximum of
    botocore's ``ChannelName`` shape (:data:`~gpu_constructs.training_spec.limits.CHANNEL_RE`)."""
    if isinstance(name, str) and is_token(name):
        return None
    if not isinstance(name, str) or not CHANNEL_RE.match(name):
        return f"{what}={name!r} is not allowed; allowed: {CHANNEL_NAME_ALLOWED}"
    return None


def readable_problem(what: str, uri: Any, readable: Sequence[str]) -> str | None:
    """Why the job role cannot read ``uri`` (``None`` when it can, or when that is only known at deployment):
    every S3 input lies under one of ``readable``, the ``s3://bucket/prefix`` prefixes the setup grants its job role
    (``s3:ListBucket`` with an ``s3:prefix`` condition, ``s3:GetObject`` on ``prefix*``, ``kms:Decrypt``). The
    training state machine's input check words the same rule (``gpu_constructs.training.definition``)."""
    if not readable or not isinstance(uri, str):
        return None
    if any(uri.startswith(prefix) for prefix in readable):
        return None
    if is_token(uri):
        return None  # a deploy-time bucket name none of the prefixes spells: checked where it is resolved
    return (
        f"{what}={uri!r} is not readable by the job role; allowed: a URI under {', '.join(readable)} ({READABLE_WHERE})"
    )


def data_version_problem(version: str) -> str | None:
    if not isinstance(version, str) or not re.match(DATA_VERSION_PATTERN, version):
        return (
            f"data_version={version!r} is not allowed; allowed: 1 to 128 letters, digits and . _ = -, "
            "starting with a letter or digit (it becomes part of an S3 prefix)"
        )
    return None


def job_name_problems(job_name: str, *, where: str, param: str, prefix: str | None) -> list[str]:
    """:func:`validate_job_name` as a list of problems."""
    try:
        validate_job_name(job_name, where=where, param=param, prefix=prefix)
    except ValidationError as exc:
        return [exc.detail]
    return []


def hp_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    return json.dumps(value)


def raise_problems(where: str, problems: Sequence[str]) -> None:
    if not problems:
        return
    if len(problems) == 1:
        raise ValidationError(where, problems[0])
    raise ValidationError(where, f"{len(problems)} problems:\n  - " + "\n  - ".join(problems))
