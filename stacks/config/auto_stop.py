"""The ``auto_stop`` settings of training, fleet groups and notebooks: what the idle-stop function stops.

``enabled: null`` (the default) means: on in an environment that is not production (dev), off in production
(``removal_policy: retain`` with termination protection), where each section says it explicitly. The limits are
the library's (:mod:`gpu_constructs.idle.options`), checked here by the same functions.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpu_constructs.idle.limits import (
    IDLE_MINUTES_ALLOWED,
    SESSION_MINUTES_ALLOWED,
    idle_minutes_problem,
    session_minutes_problem,
)
from stacks.config._base import Allowed, Check, StrictModel

IdleMinutes = Annotated[int, Check(lambda v: idle_minutes_problem(v) is None, f"allowed: {IDLE_MINUTES_ALLOWED}")]
SessionMinutes = Annotated[
    int, Check(lambda v: session_minutes_problem(v) is None, f"allowed: {SESSION_MINUTES_ALLOWED}")
]
_ENABLED = "Stop on idle (null: on when the environment is not production, off in production)"


class _AutoStop(StrictModel):
    enabled: bool | None = Field(None, description=_ENABLED)
    dry_run: bool = Field(False, description="Publish what would be stopped and stop nothing")

    def active(self, production: bool) -> bool:
        """Whether the idle-stop function watches this (``enabled``, or not ``production`` when it is null)."""
        return self.enabled if self.enabled is not None else not production


class TrainingAutoStopConfig(_AutoStop):
    """``training.auto_stop``: stop a job whose GPUs sit idle or whose step counter does not advance."""

    idle_minutes: IdleMinutes = Field(
        60, description="Stop after this long idle (a multiple of 5 from 10 to 1440); the job checkpoints on SIGTERM"
    )
    gpu_idle_percent: Annotated[float, Field(gt=0, le=100), Allowed()] = Field(
        5, description="Idle GPUs: every host's GPU utilization (summed over its GPUs) below this"
    )


class FleetAutoStopConfig(_AutoStop):
    """``fleets.groups[].auto_stop``: scale the group to 0 when its idle alarm fires.

    The alarm is the group's: average GPU utilization under ``idle_gpu_percent`` for ``idle_minutes``.
    """


class NotebookAutoStopConfig(_AutoStop):
    """``fleets.notebooks[].auto_stop``: stop the notebook a session limit after it started; its volume is kept.

    Notebook instances publish no utilization metric, so the rule is a session limit, not an activity check.
    """

    max_session_minutes: SessionMinutes = Field(
        480, description="Stop the notebook this long after it started (60 to 10080 minutes)"
    )
