"""How a change rolls out: :class:`BlueGreenDeployment` (traffic shifting, bake times, rollback)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sagemaker as sagemaker

from gpu_constructs.endpoint.base import (
    MAX_BAKE_S,
    MAX_EXECUTION_TIMEOUT_S,
    MIN_EXECUTION_TIMEOUT_S,
    STEP_PERCENT_RANGE,
    invalid,
)
from gpu_constructs.endpoint.capacity import (
    DEFAULT_BAKE_S,
    DEFAULT_CANARY_BAKE_S,
    DEFAULT_CANARY_PERCENT,
    DEFAULT_LINEAR_STEP_PERCENT,
    DEFAULT_TERMINATION_WAIT_S,
    check_shifting_capacity,
    step_name,
)

TrafficShift = Literal["ALL_AT_ONCE", "CANARY", "LINEAR"]


@dataclass(frozen=True)
class BlueGreenDeployment:
    """How a change rolls out: a new (green) fleet, traffic shifted to it, old (blue) fleet removed.

    Use :meth:`all_at_once`, :meth:`canary` or :meth:`linear`.

    :param traffic: ``ALL_AT_ONCE``, ``CANARY`` or ``LINEAR`` (default: ALL_AT_ONCE).
    :param step_percent: canary size (1-50) or linear step (10-50), in percent of capacity.
    :param wait_interval: baking time after each traffic shift while the rollback alarms are watched
        (default: 5 minutes; 0-1 hour).
    :param termination_wait: extra time the old fleet is kept after the shift (default: 0; at most 1 hour).
    :param max_execution_timeout: limit of the whole deployment (default: the bake times plus the model
        download and start-up timeouts plus 10 minutes, at least 10 minutes, at most 8 hours).
    :param auto_rollback: roll back when a rollback alarm fires during the deployment (default: True).

    A duration left ``None`` takes its default from :mod:`~gpu_constructs.endpoint.capacity` (the config's
    defaults come from there too), so each default is written once.
    """

    traffic: TrafficShift = "ALL_AT_ONCE"
    step_percent: int | None = None
    wait_interval: Duration | None = None
    termination_wait: Duration | None = None
    max_execution_timeout: Duration | None = None
    auto_rollback: bool = True

    @classmethod
    def all_at_once(cls, *, bake: Duration | None = None, **kwargs: Any) -> BlueGreenDeployment:
        """All traffic at once, then ``bake`` (default: 5 minutes) watching the rollback alarms."""
        return cls(traffic="ALL_AT_ONCE", wait_interval=bake, **kwargs)

    @classmethod
    def canary(
        cls, *, percent: int = DEFAULT_CANARY_PERCENT, bake: Duration | None = None, **kwargs: Any
    ) -> BlueGreenDeployment:
        """``percent`` of the capacity first (default: 10 %), ``bake`` (default: 10 minutes), then the rest."""
        wait = Duration.seconds(DEFAULT_CANARY_BAKE_S) if bake is None else bake
        return cls(traffic="CANARY", step_percent=percent, wait_interval=wait, **kwargs)

    @classmethod
    def linear(
        cls, *, step_percent: int = DEFAULT_LINEAR_STEP_PERCENT, interval: Duration | None = None, **kwargs: Any
    ) -> BlueGreenDeployment:
        """Steps of ``step_percent`` of the capacity (default: 25 %), each followed by ``interval`` (default:
        5 minutes)."""
        return cls(traffic="LINEAR", step_percent=step_percent, wait_interval=interval, **kwargs)

    @property
    def wait_seconds(self) -> int:
        """The bake time after each shift in seconds: :attr:`wait_interval`, else its default (5 minutes)."""
        return DEFAULT_BAKE_S if self.wait_interval is None else int(self.wait_interval.to_seconds())

    @property
    def termination_wait_seconds(self) -> int:
        """The termination wait in seconds: :attr:`termination_wait`, else its default (none)."""
        wait = self.termination_wait
        return DEFAULT_TERMINATION_WAIT_S if wait is None else int(wait.to_seconds())

    @property
    def shift_steps(self) -> int:
        """Traffic shifts after the first one (each followed by a bake of ``wait_interval``)."""
        if self.traffic == "CANARY":
            return 1
        if self.traffic == "LINEAR" and self.step_percent:
            return max(0, math.ceil(100 / self.step_percent) - 1)
        return 0

    @property
    def total_wait_seconds(self) -> int:
        bakes = (self.shift_steps + 1) * self.wait_seconds
        return bakes + self.termination_wait_seconds

    def execution_timeout_seconds(self, download: Duration, startup: Duration) -> int:
        """The deployment's time limit: :attr:`max_execution_timeout`, else bakes + model start-up + 10 minutes."""
        if self.max_execution_timeout is not None:
            return int(self.max_execution_timeout.to_seconds())
        budget = self.total_wait_seconds + int(download.to_seconds()) + int(startup.to_seconds()) + 600
        return min(MAX_EXECUTION_TIMEOUT_S, max(MIN_EXECUTION_TIMEOUT_S, budget))

    def bind(self, rollback_alarms: Sequence[cloudwatch.IAlarm], download: Duration, startup: Duration) -> Any:
        """The endpoint's ``DeploymentConfig`` (``download``/``startup``: the variant's timeouts)."""
        step = sagemaker.CfnEndpoint.CapacitySizeProperty(type="CAPACITY_PERCENT", value=self.step_percent or 0)
        routing = sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(
            type=self.traffic,
            wait_interval_in_seconds=self.wait_seconds,
            canary_size=step if self.traffic == "CANARY" else None,
            linear_step_size=step if self.traffic == "LINEAR" else None,
        )
        rollback = None
        if self.auto_rollback:
            rollback = sagemaker.CfnEndpoint.AutoRollbackConfigProperty(
                alarms=[sagemaker.CfnEndpoint.AlarmProperty(alarm_name=a.alarm_name) for a in rollback_alarms]
            )
        return sagemaker.CfnEndpoint.DeploymentConfigProperty(
            blue_green_update_policy=sagemaker.CfnEndpoint.BlueGreenUpdatePolicyProperty(
                traffic_routing_configuration=routing,
                termination_wait_in_seconds=self.termination_wait_seconds,
                maximum_execution_timeout_in_seconds=self.execution_timeout_seconds(download, startup),
            ),
            auto_rollback_configuration=rollback,
        )

    def validate(self, where: str, *, initial_instance_count: int) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a bad value."""
        self._validate_traffic_step(where)
        self._validate_bake_times(where)
        check_shifting_capacity(where, self.traffic, initial_instance_count)
        self._validate_max_execution_timeout(where)

    def _validate_traffic_step(self, where: str) -> None:
        if self.traffic not in ("ALL_AT_ONCE", "CANARY", "LINEAR"):
            raise invalid(where, "deployment.traffic", self.traffic, "'ALL_AT_ONCE', 'CANARY', 'LINEAR'")
        if self.traffic == "ALL_AT_ONCE":
            if self.step_percent is not None:
                raise invalid(where, "deployment.step_percent", self.step_percent, "None for ALL_AT_ONCE traffic")
            return
        low, high = STEP_PERCENT_RANGE[self.traffic]
        step = self.step_percent
        if step is None or not low <= step <= high:
            raise invalid(
                where,
                "deployment.step_percent",
                step,
                f"{low} to {high} percent of the variant's capacity",
                name=f"deployment.step_percent ({step_name(self.traffic)})",
            )

    def _validate_bake_times(self, where: str) -> None:
        for setting, value in (
            ("deployment.wait_interval", self.wait_interval),
            ("deployment.termination_wait", self.termination_wait),
        ):
            if value is None:
                continue
            seconds = value.to_seconds()
            if not 0 <= seconds <= MAX_BAKE_S:
                raise invalid(where, setting, seconds, f"0 to {MAX_BAKE_S} seconds", name=f"{setting} (seconds)")

    def _validate_max_execution_timeout(self, where: str) -> None:
        if self.max_execution_timeout is None:
            return
        seconds = self.max_execution_timeout.to_seconds()
        name = "deployment.max_execution_timeout (seconds)"
        if not MIN_EXECUTION_TIMEOUT_S <= seconds <= MAX_EXECUTION_TIMEOUT_S:
            raise invalid(
                where,
                "deployment.max_execution_timeout",
                seconds,
                f"{MIN_EXECUTION_TIMEOUT_S} to {MAX_EXECUTION_TIMEOUT_S} seconds",
                name=name,
            )
        waits = self.total_wait_seconds
        if seconds <= waits:
            raise invalid(
                where,
                "deployment.max_execution_timeout",
                seconds,
                f"more than the {waits} s of bake intervals and termination wait it must contain",
                name=name,
            )
