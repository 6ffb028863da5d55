"""The rules of the monitoring and capture value types, without ``aws_cdk``.

:class:`~gpu_constructs.endpoint.alarms.EndpointAlarms`, :class:`~gpu_constructs.endpoint.capture.DataCapture`
and :class:`~gpu_constructs.endpoint.capture.AsyncInference` check their settings with these functions, and the
config model checks its keys with the same ones without loading the CDK.
"""

from __future__ import annotations

from gpu_constructs.endpoint.base import invalid


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
