"""Thresholds of the alarms that notify and roll deployments back: :class:`EndpointAlarms`."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration

from gpu_constructs.endpoint.checks import DEFAULT_ALARM_PERIOD_S, DEFAULT_MODEL_LATENCY_P99_MS, check_alarm_thresholds


@dataclass(frozen=True)
class EndpointAlarms:
    """Thresholds of the alarms that notify and roll deployments back.

    :param max_5xx_percent: share of invocations answered 5xx, (0, 100] (default: 1 %).
    :param max_model_latency_p99: p99 of ModelLatency, > 0 (default: 1 s).
    :param max_gpu_memory_percent: GPU memory used, per GPU, (0, 100] (default: 90 %).
    :param period: metric period: 10 s, 30 s or a multiple of a minute (default: 1 minute).
    :param evaluation_periods: periods evaluated (default: 3).
    :param datapoints_to_alarm: breaching periods among them that fire the alarm (default: 2).

    A duration left ``None`` takes its default (:data:`~gpu_constructs.endpoint.checks.DEFAULT_MODEL_LATENCY_P99_MS`,
    :data:`~gpu_constructs.endpoint.checks.DEFAULT_ALARM_PERIOD_S`), which the config uses too, so each default is
    written once; :meth:`model_latency_p99` and :meth:`metric_period` resolve them for the endpoint.
    """

    max_5xx_percent: float = 1.0
    max_model_latency_p99: Duration | None = None
    max_gpu_memory_percent: float = 90.0
    period: Duration | None = None
    evaluation_periods: int = 3
    datapoints_to_alarm: int = 2

    def model_latency_p99(self) -> Duration:
        """The ModelLatency p99 threshold: :attr:`max_model_latency_p99`, else 1 s."""
        latency = self.max_model_latency_p99
        return Duration.millis(DEFAULT_MODEL_LATENCY_P99_MS) if latency is None else latency

    def metric_period(self) -> Duration:
        """The alarms' metric period: :attr:`period`, else 1 minute."""
        return Duration.seconds(DEFAULT_ALARM_PERIOD_S) if self.period is None else self.period

    def validate(self, where: str) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a bad value."""
        check_alarm_thresholds(
            where,
            max_5xx_percent=self.max_5xx_percent,
            max_gpu_memory_percent=self.max_gpu_memory_percent,
            latency_ms=self.model_latency_p99().to_milliseconds(),
            period_s=self.metric_period().to_seconds(),
            evaluation_periods=self.evaluation_periods,
            datapoints_to_alarm=self.datapoints_to_alarm,
        )
