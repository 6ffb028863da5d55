"""The idle-stop function: stops what keeps GPUs billed while idle, and says so on the notification topic.

This module is the code of the Lambda function that :class:`gpu_constructs.idle.IdleStop` deploys. It imports
nothing but the standard library and botocore (the Lambda Python runtime includes the AWS SDK for Python, boto3 and
its botocore; the library declares botocore), so the function's asset is this one file. Its settings come from the
``IDLE_STOP_SETTINGS`` environment variable (JSON, written by the construct); ``handler`` takes one of two events:

* the scheduled event of the function's EventBridge schedule (``detail-type`` ``Scheduled Event``): a sweep of
  the platform's training jobs and notebook instances;
* a ``CloudWatch Alarm State Change`` event of a fleet group's idle-GPU alarm in state ``ALARM``: the group is
  scaled to 0.

**Training jobs.** A job is stopped when it is ``InProgress`` under the platform's job-name prefix, its secondary
status has been ``Training`` for at least the idle period, and over that period either every host's GPUs were
idle (the ``Maximum`` of ``GPUUtilization`` of each 5-minute bucket under the threshold, with a data point in
every bucket) or the job's progress metric (a metric of its ``MetricDefinitions``, one data point per log line
with a step) recorded no data point although it had recorded some earlier in the job (a job that never logs it is
judged by its GPUs alone). A job with no data yet (just started, still downloading) is left alone: missing data
never stops anything. SageMaker publishes per-host utilization in the namespace
``/aws/sagemaker/TrainingJobs`` with the dimension ``Host``, whose value "has the format
[training-job-name]/algo-[instance-number-in-cluster]", and ``GPUUtilization`` is "The percentage of GPU units
that are used by the ML compute instances on the host. The value range is 0 to 100 and is multiplied by the
number of GPUs" (Amazon SageMaker Developer Guide, "Amazon SageMaker AI metrics in Amazon CloudWatch", "SageMaker
AI job metrics", https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html#cloudwatch-metrics-jobs);
so a host's value under the threshold means every one of its GPUs is under it. Metrics of ``MetricDefinitions``
are published with the dimension ``TrainingJobName`` ("SageMaker publishes each metric to Amazon CloudWatch",
botocore sagemaker model, ``AlgorithmSpecification.MetricDefinitions``). ``StopTrainingJob`` "Stops a training
job. To stop a job, SageMaker sends the algorithm the SIGTERM signal, which delays job termination for 120
seconds" (botocore sagemaker model, ``StopTrainingJob``): the runtime writes its checkpoint on SIGTERM.

**Notebook instances** publish no utilization metric to CloudWatch (the metric list above has none for them), so
a function outside the instance cannot see whether a kernel is busy. The sweep therefore enforces a session
limit: a notebook ``InService`` for longer than its limit since it was last modified ("A timestamp that shows when
the notebook instance was last modified", botocore sagemaker model, ``NotebookInstanceSummary.LastModifiedTime``;
a start changes its status and so this time) is stopped with
``StopNotebookInstance``, which keeps the ML storage volume: "Before terminating the instance, SageMaker
disconnects the ML storage volume from it. SageMaker preserves the ML storage volume" (botocore sagemaker model,
``StopNotebookInstance``).

**Fleet groups.** The event of an alarm state change carries the alarm's metric and its dimensions under
``detail.configuration.metrics[].metricStat.metric.dimensions`` and the new state under ``detail.state.value``
(Amazon CloudWatch User Guide, "Alarm events and EventBridge",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html). The idle alarm's
``AutoScalingGroupName`` dimension names the group; ``UpdateAutoScalingGroup`` sets its ``MinSize`` and
``DesiredCapacity`` to 0 together, because the desired capacity "must be greater than or equal to the minimum size
of the group" (botocore autoscaling model, ``UpdateAutoScalingGroupType.DesiredCapacity``): a group with a minimum
above 0 is emptied too. Only the groups named in the settings are touched.

Every action (and every failed action) is published to the topic; with ``dry_run`` (all) or ``dry_run_names`` (the
jobs of a prefix, a notebook, a group named there) the function publishes what it would stop and stops nothing. A
failed publish is logged and does not undo or repeat the action.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

import botocore.session
from botocore.exceptions import BotoCoreError, ClientError

LOG = logging.getLogger("idle_stop")
LOG.setLevel(logging.INFO)

SETTINGS_VARIABLE = "IDLE_STOP_SETTINGS"
TRAINING_NAMESPACE = "/aws/sagemaker/TrainingJobs"
#: The bucket of the utilization query: SageMaker publishes job metrics every minute; 5-minute buckets smooth
#: one slow minute (a checkpoint write) out of the decision.
BUCKET_SECONDS = 300
ALARM_EVENT = "CloudWatch Alarm State Change"
SCHEDULED_EVENT = "Scheduled Event"
#: "A single GetMetricData call can include as many as 500 MetricDataQuery structures" (botocore cloudwatch model,
#: ``GetMetricData.MetricDataQueries``): a job with more hosts is read in several requests.
QUERIES_PER_REQUEST = 500
FLEET_DIMENSION = "AutoScalingGroupName"

Clients = Mapping[str, Any]


@dataclass(frozen=True)
class TrainingSettings:
    """Which jobs are watched and when one is idle."""

    job_name_prefix: str
    idle_minutes: int
    gpu_idle_percent: float
    progress_metric: str | None = None


@dataclass(frozen=True)
class Settings:
    """The function's settings (``IDLE_STOP_SETTINGS``)."""

    topic_arn: str
    dry_run: bool = False
    #: Job-name prefixes, notebook and group names whose actions are only published (a dry run for those).
    dry_run_names: Sequence[str] = ()
    training: TrainingSettings | None = None
    #: Notebook instance name -> minutes in service after which it is stopped.
    notebooks: Mapping[str, int] = field(default_factory=dict)
    #: Auto Scaling group names that an idle alarm may scale to 0.
    fleet_groups: Sequence[str] = ()

    @classmethod
    def from_json(cls, text: str) -> Settings:
        raw = json.loads(text)
        training = raw.get("training")
        return cls(
            topic_arn=raw["topic_arn"],
            dry_run=bool(raw.get("dry_run", False)),
            dry_run_names=tuple(raw.get("dry_run_names", ())),
            training=TrainingSettings(**training) if training else None,
            notebooks=dict(raw.get("notebooks", {})),
            fleet_groups=tuple(raw.get("fleet_groups", ())),
        )

    def is_dry(self, name: str) -> bool:
        """Whether the action on ``name`` (a job-name prefix, a notebook or a group) is only published."""
        return self.dry_run or name in self.dry_run_names


@dataclass(frozen=True)
class Action:
    """One thing stopped (or, in a dry run, that would be): its kind, name and why."""

    kind: str
    name: str
    reason: str
    done: bool = True
    error: str = ""
    dry_run: bool = False

    def message(self) -> str:
        if self.error:
            return f"Idle stop FAILED for {self.kind} {self.name}: {self.error}. Reason it was due: {self.reason}"
        verb = "would stop" if self.dry_run else "stopped"
        if self.kind == "fleet group":
            verb = "would scale to 0" if self.dry_run else "scaled to 0"
        return f"Idle stop {verb} {self.kind} {self.name}: {self.reason}"


def _now() -> datetime:
    return datetime.now(timezone.utc)


# -- training jobs ---------------------------------------------------------------------------------------


def training_since(job: Mapping[str, Any]) -> datetime | None:
    """When the job's current ``Training`` secondary status began (``None``: it is not training now)."""
    if job.get("TrainingJobStatus") != "InProgress" or job.get("SecondaryStatus") != "Training":
        return None
    starts = [t["StartTime"] for t in job.get("SecondaryStatusTransitions", []) if t.get("Status") == "Training"]
    return max(starts) if starts else None


def host_count(job: Mapping[str, Any]) -> int:
    """How many hosts the job runs on: ``ResourceConfig.SelectedInstanceCount`` (the count of the type SageMaker
    picked from ``InstancePreferences``), ``InstanceCount``, or the sum of its instance groups."""
    config = job.get("ResourceConfig", {})
    for key in ("SelectedInstanceCount", "InstanceCount"):
        if config.get(key):
            return int(config[key])
    groups = config.get("InstanceGroups") or []
    return max(1, sum(int(g.get("InstanceCount", 0)) for g in groups))


def _queries(job_name: str, hosts: int, progress_metric: str | None) -> list[dict[str, Any]]:
    queries = [
        {
            "Id": f"gpu{index}",
            "MetricStat": {
                "Metric": {
                    "Namespace": TRAINING_NAMESPACE,
                    "MetricName": "GPUUtilization",
                    "Dimensions": [{"Name": "Host", "Value": f"{job_name}/algo-{index}"}],
                },
                "Period": BUCKET_SECONDS,
                "Stat": "Maximum",
            },
        }
        for index in range(1, hosts + 1)
    ]
    if progress_metric:
        queries.append(
            {
                "Id": "progress",
                "MetricStat": {
                    "Metric": {
                        "Namespace": TRAINING_NAMESPACE,
                        "MetricName": progress_metric,
                        "Dimensions": [{"Name": "TrainingJobName", "Value": job_name}],
                    },
                    "Period": BUCKET_SECONDS,
                    "Stat": "SampleCount",
                },
            }
        )
    return queries


def idle_reason(cloudwatch: Any, job: Mapping[str, Any], settings: TrainingSettings, now: datetime) -> str | None:
    """Why ``job`` (a DescribeTrainingJob response) is idle, or ``None`` when it is busy or it is too early to say."""
    since = training_since(job)
    window = timedelta(minutes=settings.idle_minutes)
    if since is None or now - since < window:
        return None
    name = job["TrainingJobName"]
    hosts = host_count(job)
    queries = _queries(name, hosts, settings.progress_metric)
    results: dict[str, list[float]] = {}
    for first in range(0, len(queries), QUERIES_PER_REQUEST):
        response = cloudwatch.get_metric_data(
            MetricDataQueries=queries[first : first + QUERIES_PER_REQUEST],
            StartTime=now - window,
            EndTime=now,
            ScanBy="TimestampAscending",
        )
        results.update({r["Id"]: r.get("Values", []) for r in response.get("MetricDataResults", [])})
    buckets = settings.idle_minutes * 60 // BUCKET_SECONDS
    gpu = [results.get(f"gpu{index}", []) for index in range(1, hosts + 1)]
    limit = settings.gpu_idle_percent
    if all(len(values) >= buckets and max(values) < limit for values in gpu):
        peak = max(max(values) for values in gpu)
        return (
            f"the GPUs of its {hosts} host(s) stayed under {limit:g}% utilization for {settings.idle_minutes} "
            f"minutes (peak {peak:g}%, summed over a host's GPUs)"
        )
    metric = settings.progress_metric
    if metric and not any(results.get("progress", [])) and _logged(cloudwatch, name, metric, since, now - window):
        return (
            f"its step counter did not advance for {settings.idle_minutes} minutes (no {metric} data point in its "
            "logs since the last one)"
        )
    return None


def _logged(cloudwatch: Any, job_name: str, metric: str, start: datetime, end: datetime) -> bool:
    """Whether the job logged ``metric`` between ``start`` and ``end``: a job that never logs it (custom code with
    other metric lines) is judged by its GPUs alone; one that logged it and stopped has stalled."""
    seconds = max(60, -(-int((end - start).total_seconds()) // 60) * 60)  # one bucket, whole minutes
    query = _queries(job_name, 0, metric)[0]
    query["Id"], query["MetricStat"]["Period"] = "history", seconds
    response = cloudwatch.get_metric_data(
        MetricDataQueries=[query], StartTime=start, EndTime=end, ScanBy="TimestampAscending"
    )
    return any(any(r.get("Values", [])) for r in response.get("MetricDataResults", []))


def _training_jobs(sagemaker: Any, prefix: str) -> list[str]:
    names: list[str] = []
    for page in sagemaker.get_paginator("list_training_jobs").paginate(StatusEquals="InProgress", NameContains=prefix):
        names.extend(s["TrainingJobName"] for s in page["TrainingJobSummaries"])
    return [n for n in names if n.startswith(f"{prefix}-")]


def sweep_training(clients: Clients, settings: TrainingSettings, dry_run: bool, now: datetime) -> list[Action]:
    """Stop the idle training jobs of ``settings.job_name_prefix`` (``dry_run``: publish only)."""
    sagemaker, cloudwatch = clients["sagemaker"], clients["cloudwatch"]
    actions: list[Action] = []
    for name in _training_jobs(sagemaker, settings.job_name_prefix):
        job = sagemaker.describe_training_job(TrainingJobName=name)
        reason = idle_reason(cloudwatch, job, settings, now)
        if reason is None:
            continue
        actions.append(
            _act(
                "training job",
                name,
                reason,
                dry_run,
                partial(sagemaker.stop_training_job, TrainingJobName=name),
            )
        )
    return actions


# -- notebooks -------------------------------------------------------------------------------------------


def sweep_notebooks(
    clients: Clients, limits: Mapping[str, int], is_dry: Callable[[str], bool], now: datetime
) -> list[Action]:
    """Stop the notebook instances of ``limits`` that have been in service longer than their limit."""
    sagemaker = clients["sagemaker"]
    actions: list[Action] = []
    for page in sagemaker.get_paginator("list_notebook_instances").paginate(StatusEquals="InService"):
        for notebook in page["NotebookInstances"]:
            name = notebook["NotebookInstanceName"]
            minutes = limits.get(name)
            if minutes is None:
                continue
            running = now - notebook["LastModifiedTime"]
            if running < timedelta(minutes=minutes):
                continue
            reason = (
                f"in service for {int(running.total_seconds() // 60)} minutes, over its session limit of {minutes} "
                "minutes (its ML storage volume is kept; start it again to continue)"
            )
            actions.append(
                _act(
                    "notebook instance",
                    name,
                    reason,
                    is_dry(name),
                    partial(sagemaker.stop_notebook_instance, NotebookInstanceName=name),
                )
            )
    return actions


# -- fleet groups ----------------------------------------------------------------------------------------


def alarm_group(event: Mapping[str, Any]) -> str | None:
    """The Auto Scaling group of an idle alarm's ``ALARM`` event (``None``: another state or no group)."""
    detail = event.get("detail", {})
    if detail.get("state", {}).get("value") != "ALARM":
        return None
    for metric in detail.get("configuration", {}).get("metrics", []):
        dimensions = metric.get("metricStat", {}).get("metric", {}).get("dimensions", {})
        if FLEET_DIMENSION in dimensions:
            return str(dimensions[FLEET_DIMENSION])
    return None


def scale_in_fleet(
    clients: Clients, event: Mapping[str, Any], groups: Sequence[str], is_dry: Callable[[str], bool]
) -> list[Action]:
    """Scale the group of an idle alarm's event to 0 (only a group of ``groups``)."""
    group = alarm_group(event)
    if group is None:
        return []
    if group not in groups:
        LOG.warning(
            "alarm %s names group %s, which is not one this function manages",
            event.get("detail", {}).get("alarmName"),
            group,
        )
        return []
    detail = event["detail"]
    reason = f"its idle-GPU alarm {detail.get('alarmName')} is in ALARM: {detail['state'].get('reason', '')}".rstrip(
        ": "
    )
    autoscaling = clients["autoscaling"]
    return [
        _act(
            "fleet group",
            group,
            reason,
            is_dry(group),
            lambda: autoscaling.update_auto_scaling_group(AutoScalingGroupName=group, MinSize=0, DesiredCapacity=0),
        )
    ]


# -- actions and notifications ---------------------------------------------------------------------------


def _act(kind: str, name: str, reason: str, dry_run: bool, stop: Callable[[], Any]) -> Action:
    if dry_run:
        return Action(kind, name, reason, done=False, dry_run=True)
    try:
        stop()
    except (ClientError, BotoCoreError) as exc:
        LOG.error("cannot stop %s %s: %s", kind, name, exc)
        return Action(kind, name, reason, done=False, error=str(exc))
    return Action(kind, name, reason)


def publish(sns: Any, topic_arn: str, actions: Sequence[Action]) -> int:
    """Publish one message per action; a failed publish is logged (the action stands). Returns how many failed."""
    failed = 0
    for action in actions:
        text = action.message()
        LOG.info("%s", text)
        try:
            sns.publish(TopicArn=topic_arn, Subject=f"GPU idle stop: {action.kind}"[:100], Message=text)
        except (ClientError, BotoCoreError) as exc:
            failed += 1
            LOG.error("cannot publish to %s: %s (message: %s)", topic_arn, exc, text)
    return failed


def run(event: Mapping[str, Any], settings: Settings, clients: Clients, now: datetime | None = None) -> dict[str, Any]:
    """Handle ``event`` with ``settings`` and ``clients`` (``sagemaker``, ``cloudwatch``, ``autoscaling``, ``sns``)."""
    now = now or _now()
    kind = event.get("detail-type")
    actions: list[Action] = []
    if kind == ALARM_EVENT:
        actions = scale_in_fleet(clients, event, settings.fleet_groups, settings.is_dry)
    elif kind == SCHEDULED_EVENT:
        if settings.training is not None:
            prefix = settings.training.job_name_prefix
            actions += sweep_training(clients, settings.training, settings.is_dry(prefix), now)
        if settings.notebooks:
            actions += sweep_notebooks(clients, settings.notebooks, settings.is_dry, now)
    else:
        LOG.warning("ignored an event of type %r", kind)
    failed = publish(clients["sns"], settings.topic_arn, actions)
    return {
        "dry_run": settings.dry_run,
        "actions": [
            {"kind": a.kind, "name": a.name, "reason": a.reason, "done": a.done, "dry_run": a.dry_run, "error": a.error}
            for a in actions
        ],
        "publish_failures": failed,
    }


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry point."""
    settings = Settings.from_json(os.environ[SETTINGS_VARIABLE])
    session = botocore.session.get_session()  # the region is the function's (AWS_DEFAULT_REGION, set by Lambda)
    clients = {name: session.create_client(name) for name in ("sagemaker", "cloudwatch", "autoscaling", "sns")}
    return run(event, settings, clients)
