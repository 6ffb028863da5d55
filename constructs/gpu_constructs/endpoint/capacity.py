"""How many instances may serve, and how fast that changes: the endpoint's scaling rules, written once.

* target tracking: :func:`check_target_tracking` (used by
  :class:`~gpu_constructs.endpoint.scaling.EndpointAutoscaling`), the cooldowns' defaults and limit
  (:data:`DEFAULT_SCALE_IN_COOLDOWN_S`, :data:`DEFAULT_SCALE_OUT_COOLDOWN_S`, :data:`COOLDOWN_RANGE_S`);
* shifting traffic: :func:`check_shifting_capacity` (used by
  :class:`~gpu_constructs.endpoint.deployment.BlueGreenDeployment`), the canary and linear step defaults and the
  default bake time;
* :class:`OffHoursSchedule`.

No ``aws_cdk`` here: the config model checks its settings with these rules and takes its defaults from these
constants without loading the CDK; the value types leave a ``Duration`` they are not given as ``None`` and the
construct resolves it from the same constants.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from typing import Literal

from gpu_constructs.endpoint.base import invalid
from gpu_constructs.errors import is_token

ScalingMetric = Literal["invocations_per_instance", "gpu_utilization", "backlog_per_instance"]
_WEEK_DAYS_RE = re.compile(r"^(MON|TUE|WED|THU|FRI|SAT|SUN)([-,](MON|TUE|WED|THU|FRI|SAT|SUN))*$")

#: Wait after a scale-in before the next one, in seconds: 5 minutes, so a dip in traffic does not drain the fleet.
DEFAULT_SCALE_IN_COOLDOWN_S = 300
#: Wait after a scale-out, in seconds: 1 minute (a new GPU instance takes minutes to start serving).
DEFAULT_SCALE_OUT_COOLDOWN_S = 60
#: The cooldowns the config accepts, in seconds (up to an hour).
COOLDOWN_RANGE_S = (0, 3600)

#: Bake time after a traffic shift while the rollback alarms are watched, in seconds (all at once, linear steps).
DEFAULT_BAKE_S = 300
#: Bake time of a canary, in seconds: longer, since the canary carries a small share of the traffic.
DEFAULT_CANARY_BAKE_S = 600
#: Extra time the old fleet is kept after the last shift, in seconds.
DEFAULT_TERMINATION_WAIT_S = 0
#: Default canary size and linear step, in percent of the variant's capacity.
DEFAULT_CANARY_PERCENT = 10
DEFAULT_LINEAR_STEP_PERCENT = 25


def check_target_tracking(
    where: str,
    metric: ScalingMetric,
    target: float,
    min_capacity: int,
    max_capacity: int,
    *,
    is_async: bool,
    cpu_variant: bool,
    initial_instance_count: int,
) -> None:
    """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` for target tracking the endpoint cannot use.

    ``min_capacity`` 0 (scale to zero) and the backlog metric need an asynchronous endpoint, the GPU metric a GPU
    (and a target of at most 100 %), and ``initial_instance_count`` must lie in the range.
    """
    _check_range(where, min_capacity, max_capacity, is_async)
    _check_count(where, min_capacity, max_capacity, initial_instance_count)
    if target <= 0:
        raise invalid(where, "autoscaling.target", target, "a positive number")
    _check_metric(where, metric, target, min_capacity, is_async=is_async, cpu_variant=cpu_variant)


def _check_range(where: str, lo: int, hi: int, is_async: bool) -> None:
    if lo < 0 or hi < 1:
        raise invalid(
            where,
            "autoscaling.min_capacity",
            (lo, hi),
            "min_capacity >= 0 and max_capacity >= 1",
            name="autoscaling min_capacity/max_capacity",
        )
    if lo > hi:
        raise invalid(where, "autoscaling.min_capacity", lo, f"at most max_capacity ({hi})")
    if lo == 0 and not is_async:
        raise invalid(
            where,
            "autoscaling.min_capacity",
            0,
            "1 or more for a real-time endpoint; scale to zero is only for asynchronous endpoints",
        )


def _check_count(where: str, lo: int, hi: int, count: int) -> None:
    if is_token(count):
        return
    low = max(lo, 1)
    if not low <= count <= hi:
        raise invalid(
            where,
            "initial_instance_count",
            count,
            f"within the autoscaling range [{low}, {hi}]",
        )


def _check_metric(
    where: str, metric: ScalingMetric, target: float, min_capacity: int, *, is_async: bool, cpu_variant: bool
) -> None:
    allowed = (
        ("gpu_utilization", "backlog_per_instance") if is_async else ("invocations_per_instance", "gpu_utilization")
    )
    if metric not in allowed:
        kind = "an asynchronous" if is_async else "a real-time"
        raise invalid(where, "autoscaling.metric", metric, f"{', '.join(map(repr, allowed))} for {kind} endpoint")
    if metric == "gpu_utilization" and cpu_variant:
        raise invalid(
            where, "autoscaling.metric", metric, "'invocations_per_instance' for a CPU variant (it has no GPU)"
        )
    if metric == "gpu_utilization" and target > 100:
        raise invalid(
            where,
            "autoscaling.target",
            target,
            "a percentage in (0, 100]",
            name="autoscaling.target (percent per GPU)",
        )
    if min_capacity == 0 and metric != "backlog_per_instance":
        raise invalid(
            where,
            "autoscaling.metric",
            metric,
            "'backlog_per_instance' when min_capacity is 0 (only a backlog can wake a scaled-to-zero endpoint)",
        )


def step_name(traffic: str) -> str:
    """What a step of ``CANARY`` or ``LINEAR`` traffic is called in messages."""
    return "canary size" if traffic == "CANARY" else "linear step"


def check_shifting_capacity(
    where: str, traffic: str, count: int, *, single: str = "BlueGreenDeployment.all_at_once()"
) -> None:
    """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` when ``CANARY`` or ``LINEAR`` traffic starts on
    fewer than 2 instances (``single``: what the message offers for a single instance instead)."""
    if traffic == "ALL_AT_ONCE" or is_token(count) or count >= 2:
        return
    raise invalid(
        where,
        "initial_instance_count",
        count,
        f"2 or more instances: a {step_name(traffic)} of at most 50 % cannot be carved out of one instance; "
        f"use {single} for a single instance",
        name=f"initial_instance_count with {traffic} traffic",
    )


@dataclass(frozen=True)
class OffHoursSchedule:
    """Scale the variant down outside working hours (Application Auto Scaling scheduled actions).

    At ``end_hour`` on each of ``week_days`` the capacity becomes ``off_hours_capacity``; at
    ``start_hour`` it returns to the autoscaling range (or the initial instance count).

    :param start_hour: hour working hours start, 0-23 (default: 7).
    :param end_hour: hour they end, 0-23 (default: 19).
    :param week_days: cron day-of-week field (default: ``MON-FRI``; weekends stay scaled down).
    :param time_zone: IANA time zone (default: ``UTC``).
    :param off_hours_capacity: instances outside working hours (default: 1; 0 only for async endpoints).
    """

    start_hour: int = 7
    end_hour: int = 19
    week_days: str = "MON-FRI"
    time_zone: str = "UTC"
    off_hours_capacity: int = 1

    def validate(self, where: str, *, is_async: bool, max_capacity: int) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a bad value.

        ``max_capacity`` is the endpoint's (autoscaling maximum, else its instance count); zero
        instances outside working hours only for an asynchronous endpoint.
        """
        for setting, hour in (("off_hours.start_hour", self.start_hour), ("off_hours.end_hour", self.end_hour)):
            if not 0 <= hour <= 23:
                raise invalid(where, setting, hour, "an hour in [0, 23]")
        if self.start_hour == self.end_hour:
            raise invalid(
                where, "off_hours.end_hour", self.end_hour, f"an hour other than start_hour ({self.start_hour})"
            )
        if not _WEEK_DAYS_RE.match(self.week_days):
            raise invalid(
                where, "off_hours.week_days", self.week_days, "a cron day-of-week field such as MON-FRI or MON,WED,FRI"
            )
        if self.time_zone not in zoneinfo.available_timezones():
            raise invalid(
                where, "off_hours.time_zone", self.time_zone, "an IANA time zone such as UTC or Europe/Berlin"
            )
        low = 0 if is_async else 1
        if not is_token(max_capacity) and not low <= self.off_hours_capacity <= max_capacity:
            why = "" if is_async else " (a real-time endpoint cannot scale to zero)"
            raise invalid(
                where,
                "off_hours.off_hours_capacity",
                self.off_hours_capacity,
                f"an integer in [{low}, {max_capacity}]{why}",
            )
