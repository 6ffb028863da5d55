"""What :class:`~gpu_constructs.idle.IdleStop` watches: value types that validate themselves.

* :class:`IdleTrainingJobs`: the training jobs ``<job_name_prefix>-*``, stopped after ``idle_period`` of idle GPUs
  or of no progress;
* :class:`IdleFleetGroup`: an Auto Scaling group scaled to 0 when its idle-GPU alarm goes to ``ALARM``;
* :class:`NotebookSessionLimit`: a notebook instance stopped ``max_session`` after it started.

Limits: :mod:`gpu_constructs.idle.limits` (CDK-free, shared with the config model).
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from gpu_constructs.constants import SAGEMAKER_NAME_RE
from gpu_constructs.errors import fail, is_token
from gpu_constructs.idle.limits import MAX_NAME_LENGTH, idle_minutes_problem, session_minutes_problem

__all__ = ["IdleFleetGroup", "IdleTrainingJobs", "NotebookSessionLimit"]


def _minutes(duration: Duration) -> float:
    return duration.to_minutes(integral=False)


@dataclass(frozen=True)
class IdleTrainingJobs:
    """The training jobs ``<job_name_prefix>-*`` and when one of them is idle.

    :param job_name_prefix: the jobs' name prefix (a job ``<prefix>-<id>`` is watched).
    :param idle_period: a job is stopped after this long with idle GPUs or no progress; a multiple of 5 minutes,
        10 minutes to 1 day (default: 1 hour).
    :param gpu_idle_percent: idle GPUs: every host's ``GPUUtilization`` (summed over its GPUs) stays under this,
        0 < x <= 100 (default: 5).
    :param progress_metric: a metric of the jobs' ``MetricDefinitions`` that records a data point per logged step
        (e.g. ``train:loss``); no data point for ``idle_period`` stops the job (default: none, GPUs only).
    :param dry_run: publish what would be stopped and stop nothing (default: False).
    """

    job_name_prefix: str
    idle_period: Duration = Duration.hours(1)
    gpu_idle_percent: float = 5
    progress_metric: str | None = None
    dry_run: bool = False

    def validate(self, where: str) -> None:
        """Raise a ``ValidationError`` at ``where`` naming the setting that is not allowed."""
        prefix = self.job_name_prefix
        if not is_token(prefix) and not SAGEMAKER_NAME_RE.fullmatch(prefix):
            raise fail(where, "job_name_prefix", prefix, "a SageMaker name: letters, digits and single hyphens")
        problem = idle_minutes_problem(_as_whole(_minutes(self.idle_period)))
        if problem:
            raise fail(where, "idle_period", f"{_minutes(self.idle_period):g} minutes", problem)
        percent = self.gpu_idle_percent
        if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 < percent <= 100:
            raise fail(where, "gpu_idle_percent", percent, "a percentage above 0 and at most 100")
        metric = self.progress_metric
        if metric is not None and not (0 < len(metric) <= MAX_NAME_LENGTH and metric.strip() == metric):
            raise fail(where, "progress_metric", metric, "None or a metric name of 1-255 characters")


@dataclass(frozen=True)
class IdleFleetGroup:
    """An Auto Scaling group that is scaled to 0 when its idle alarm goes to ``ALARM``."""

    #: The Auto Scaling group's name.
    group_name: str
    #: The alarm whose metric has the dimension ``AutoScalingGroupName`` = ``group_name``, as
    #: :class:`~gpu_constructs.fleet.GpuFleet`'s ``IdleGpu`` alarm.
    idle_alarm: cloudwatch.IAlarm
    #: Publish what would be done and change nothing (default: False).
    dry_run: bool = False

    def validate(self, where: str) -> None:
        name = self.group_name
        if not is_token(name) and not (0 < len(name) <= MAX_NAME_LENGTH and "\n" not in name):
            raise fail(where, "group_name", name, "an Auto Scaling group name of 1-255 characters on one line")


@dataclass(frozen=True)
class NotebookSessionLimit:
    """A notebook instance stopped ``max_session`` after it started."""

    #: The notebook instance's name.
    notebook_name: str
    #: How long the notebook may run after it started: 1 hour to 7 days (default: 8 hours).
    max_session: Duration = Duration.hours(8)
    #: Publish what would be stopped and stop nothing (default: False).
    dry_run: bool = False

    def validate(self, where: str) -> None:
        name = self.notebook_name
        if not is_token(name) and not SAGEMAKER_NAME_RE.fullmatch(name):
            raise fail(where, "notebook_name", name, "a SageMaker name: letters, digits and single hyphens")
        problem = session_minutes_problem(_as_whole(_minutes(self.max_session)))
        if problem:
            raise fail(where, "max_session", f"{_minutes(self.max_session):g} minutes", problem)


def _as_whole(minutes: float) -> float:
    """``minutes`` as an ``int`` when it is whole (a ``Duration`` of seconds that make whole minutes)."""
    return int(minutes) if float(minutes).is_integer() else minutes
