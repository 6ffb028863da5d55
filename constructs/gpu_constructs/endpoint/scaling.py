"""How many instances serve: :class:`EndpointAutoscaling` (target tracking). Its rules, its cooldowns' defaults and
:class:`OffHoursSchedule` are in :mod:`.capacity` (no ``aws_cdk``: the config uses them) and re-exported here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration

from gpu_constructs.endpoint.capacity import OffHoursSchedule, ScalingMetric, check_target_tracking

__all__ = ["EndpointAutoscaling", "OffHoursSchedule", "ScalingMetric"]


@dataclass(frozen=True)
class EndpointAutoscaling:
    """Target-tracking autoscaling of the variant's instance count. Use a factory.

    :param metric: ``invocations_per_instance`` (per minute), ``gpu_utilization`` (percent per GPU;
        the CloudWatch metric sums GPUs, so the target is multiplied by the type's GPU count) or
        ``backlog_per_instance`` (asynchronous endpoints only).
    :param target: the metric's target value.
    :param min_capacity: fewest instances; 0 only for asynchronous endpoints (scale to zero).
    :param max_capacity: most instances.
    :param scale_in_cooldown: default: 5 minutes
        (:data:`~gpu_constructs.endpoint.capacity.DEFAULT_SCALE_IN_COOLDOWN_S`).
    :param scale_out_cooldown: default: 1 minute (GPU instances take minutes to start;
        :data:`~gpu_constructs.endpoint.capacity.DEFAULT_SCALE_OUT_COOLDOWN_S`).

    A cooldown left ``None`` is resolved by the endpoint, so its default is written once.
    """

    metric: ScalingMetric
    target: float
    min_capacity: int
    max_capacity: int
    scale_in_cooldown: Duration | None = None
    scale_out_cooldown: Duration | None = None

    @classmethod
    def on_invocations(
        cls, per_instance_per_minute: float, *, min_capacity: int, max_capacity: int, **kw: Any
    ) -> EndpointAutoscaling:
        return cls("invocations_per_instance", per_instance_per_minute, min_capacity, max_capacity, **kw)

    @classmethod
    def on_gpu_utilization(
        cls, percent_per_gpu: float, *, min_capacity: int, max_capacity: int, **kw: Any
    ) -> EndpointAutoscaling:
        return cls("gpu_utilization", percent_per_gpu, min_capacity, max_capacity, **kw)

    @classmethod
    def on_backlog(cls, per_instance: float, *, min_capacity: int, max_capacity: int, **kw: Any) -> EndpointAutoscaling:
        return cls("backlog_per_instance", per_instance, min_capacity, max_capacity, **kw)

    def validate(self, where: str, *, is_async: bool, cpu_variant: bool, initial_instance_count: int) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a bad value.

        ``is_async``, ``cpu_variant`` and ``initial_instance_count`` are the endpoint's: scale to zero and
        the backlog metric need an asynchronous endpoint, the GPU metric a GPU, the count must be in range
        (the rules: :func:`~gpu_constructs.endpoint.capacity.check_target_tracking`).
        """
        check_target_tracking(
            where,
            self.metric,
            self.target,
            self.min_capacity,
            self.max_capacity,
            is_async=is_async,
            cpu_variant=cpu_variant,
            initial_instance_count=initial_instance_count,
        )
