"""The limits of what :class:`~gpu_constructs.idle.IdleStop` watches, without the CDK (the config model checks
with them).

Limits (the project's own, each with its reason): the function reads utilization in 5-minute buckets, so an idle
period is a whole number of buckets, 10 minutes (two buckets: one slow bucket alone never stops a job) to 1 day;
a notebook session is 1 hour to 7 days. The function reads a job with one ``GetMetricData`` request ("A single
``GetMetricData`` call can include as many as 500 ``MetricDataQuery`` structures", botocore cloudwatch model,
``GetMetricData.MetricDataQueries``): one query per host plus one for the progress metric, so it reads jobs of up to
499 hosts and splits larger ones (the handler's ``QUERIES_PER_REQUEST``).
"""

from __future__ import annotations

__all__ = [
    "BUCKET_MINUTES",
    "IDLE_MINUTES_ALLOWED",
    "MAX_NAME_LENGTH",
    "SESSION_MINUTES_ALLOWED",
    "idle_minutes_problem",
    "session_minutes_problem",
]

#: The function's utilization bucket (minutes).
BUCKET_MINUTES = 5
MIN_IDLE_MINUTES, MAX_IDLE_MINUTES = 10, 1440
MIN_SESSION_MINUTES, MAX_SESSION_MINUTES = 60, 7 * 1440
IDLE_MINUTES_ALLOWED = f"a multiple of {BUCKET_MINUTES} minutes from {MIN_IDLE_MINUTES} to {MAX_IDLE_MINUTES} (1 day)"
SESSION_MINUTES_ALLOWED = f"whole minutes from {MIN_SESSION_MINUTES} (1 hour) to {MAX_SESSION_MINUTES} (7 days)"
#: The longest metric name of MetricDefinitions and Auto Scaling group name (botocore sagemaker model,
#: ``MetricName``, and autoscaling model, ``XmlStringMaxLen255``: at most 255 characters).
MAX_NAME_LENGTH = 255


def idle_minutes_problem(minutes: float) -> str | None:
    """Why ``minutes`` is not an idle period (``None``: it is one)."""
    whole = isinstance(minutes, int) and not isinstance(minutes, bool)
    if not whole or not MIN_IDLE_MINUTES <= minutes <= MAX_IDLE_MINUTES or minutes % BUCKET_MINUTES:
        return IDLE_MINUTES_ALLOWED
    return None


def session_minutes_problem(minutes: float) -> str | None:
    """Why ``minutes`` is not a notebook session limit (``None``: it is one)."""
    whole = isinstance(minutes, int) and not isinstance(minutes, bool)
    if not whole or not MIN_SESSION_MINUTES <= minutes <= MAX_SESSION_MINUTES:
        return SESSION_MINUTES_ALLOWED
    return None
