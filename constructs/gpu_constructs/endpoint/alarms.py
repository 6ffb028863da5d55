"""Thresholds of the alarms that notify and roll deployments back: :class:`EndpointAlarms`."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration

from gpu_constructs.endpoint.checks import check_alarm_thresholds


@dataclass(frozen=True)
class EndpointAlarms:
    """Thresholds of the alarms that notify and roll deployments back.

    :param max_5xx_percent: share of invocations answered 5xx, (0, 100] (default: 1 %).
    :param max_model_latency_p99: p99 of ModelLatency, > 0 (default: 1 s).
    :param max_gpu_memory_percent: GPU memory used, per GPU, (0, 100] (default: 90 %).
    :param period: metric period: 10 s, 30 s or a multiple of a minute (default: 1 minute).
    :param evaluation_periods: periods evaluated (default: 3).
    :param datapoints_to_alarm: breaching periods among them that fire the alarm (default: 2).
    """

    max_5xx_percent: float = 1.0
    max_model_latency_p99: Duration = Duration.seconds(1)
    max_gpu_memory_percent: float = 90.0
    period: Duration = Duration.minutes(1)
    evaluation_periods: int = 3
    datapoints_to_alarm: int = 2

    def validate(self, where: str) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a bad value."""
        check_alarm_thresholds(
            where,
            max_5xx_percent=self.max_5xx_percent,
            max_gpu_memory_percent=self.max_gpu_memory_percent,
            latency_ms=self.max_model_latency_p99.to_milliseconds(),
            period_s=self.period.to_seconds(),
            evaluation_periods=self.evaluation_periods,
            datapoints_to_alarm=self.datapoints_to_alarm,
        )
