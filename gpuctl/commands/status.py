"""gpuctl status [JOB]: progress, metrics and, for a failed job, the reason in plain words.

Without JOB, the latest jobs of the setup (names starting with its prefix) are listed. With --wait,
the command polls until the job ends and exits 0 for Completed, 1 for Failed or Stopped.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from typing import Any

from gpu_constructs.training_spec.preferences import placement, placement_text
from gpuctl import training_setup as common
from gpuctl.aws_errors import explain, explain_failure_reason
from gpuctl.commands import add_command

#: The command's line in ``gpuctl --help``.
SUMMARY = "show a training job's progress, metrics and failure reason"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "status", SUMMARY, __doc__)
    parser.add_argument("job", nargs="?", help="training job name (default: list the setup's latest jobs)")
    common.add_setup_options(parser)
    parser.add_argument("--wait", action="store_true", help="poll until the job ends")
    parser.set_defaults(func=run)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _elapsed(job: dict[str, Any]) -> float | None:
    start = job.get("TrainingStartTime")
    if not isinstance(start, _dt.datetime):
        return None
    end = job.get("TrainingEndTime")
    if not isinstance(end, _dt.datetime):
        end = _dt.datetime.now(start.tzinfo or _dt.timezone.utc)
    return max(0.0, (end - start).total_seconds())


def format_job(job: dict[str, Any], region: str | None) -> str:
    """A readable summary of a DescribeTrainingJob response."""
    name = job.get("TrainingJobName", "?")
    resources = job.get("ResourceConfig", {})
    lines = [
        f"{name}: {job.get('TrainingJobStatus', '?')} ({job.get('SecondaryStatus', '?')})",
        f"  instances: {placement_text(resources)}"
        + ("  (managed spot)" if job.get("EnableManagedSpotTraining") else ""),
    ]
    elapsed = _elapsed(job)
    limit = job.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
    if elapsed is not None:
        progress = f" of {_duration(limit)} max ({100 * elapsed / limit:.0f}%)" if limit else ""
        lines.append(f"  training time: {_duration(elapsed)}{progress}")
    if job.get("BillableTimeInSeconds"):
        lines.append(f"  billable: {_duration(job['BillableTimeInSeconds'])}")
    transitions = job.get("SecondaryStatusTransitions", [])
    if transitions:
        lines.append("  history:")
        for transition in transitions[-5:]:
            message = transition.get("StatusMessage", "")
            lines.append(f"    {transition.get('Status', '?')}: {message}".rstrip(": "))
    metrics = job.get("FinalMetricDataList", [])
    if metrics:
        lines.append("  metrics:")
        for metric in metrics:
            lines.append(f"    {metric.get('MetricName')}: {metric.get('Value'):g}")
    artifact = job.get("ModelArtifacts", {}).get("S3ModelArtifacts")
    if artifact:
        lines.append(f"  model: {artifact}")
    reason = job.get("FailureReason")
    if reason:
        problem = explain_failure_reason(
            reason,
            instance_type=placement(resources)[0],
            region=region,
            spot=bool(job.get("EnableManagedSpotTraining")),
            job_name=name,
        )
        lines.append(f"  failure: {problem.what}")
        lines.append(f"  next step: {problem.next_step}")
    lines.append(f"  console: {common.console_url(region, name)}")
    return "\n".join(lines)


def describe(sagemaker: Any, job_name: str, region: str | None) -> dict[str, Any]:
    try:
        return dict(sagemaker.describe_training_job(TrainingJobName=job_name))
    except Exception as exc:
        raise explain(exc, operation="DescribeTrainingJob", region=region, job_name=job_name) from exc


def wait_for(sagemaker: Any, job_name: str, region: str | None) -> int:
    """Poll until the job ends; print each status change; 0 for Completed, 1 otherwise."""
    last = None
    while True:
        job = describe(sagemaker, job_name, region)
        status = (job.get("TrainingJobStatus"), job.get("SecondaryStatus"))
        if status != last:
            print(f"{job_name}: {status[0]} ({status[1]})", flush=True)
            last = status
        if job.get("TrainingJobStatus") in common.TERMINAL:
            print(format_job(job, region))
            return 0 if job.get("TrainingJobStatus") == "Completed" else 1
        common.sleep(common.poll_interval())


def list_jobs(sagemaker: Any, prefix: str | None, region: str | None) -> str:
    kwargs: dict[str, Any] = {"SortBy": "CreationTime", "SortOrder": "Descending", "MaxResults": 10}
    if prefix:
        kwargs["NameContains"] = prefix
    try:
        response = sagemaker.list_training_jobs(**kwargs)
    except Exception as exc:
        raise explain(exc, operation="ListTrainingJobs", region=region) from exc
    jobs = [
        j for j in response.get("TrainingJobSummaries", []) if not prefix or j["TrainingJobName"].startswith(prefix)
    ]
    if not jobs:
        return f"no training jobs named {prefix}-* in {region}" if prefix else f"no training jobs in {region}"
    rows = [f"{'job':<48} {'status':<11} created"]
    for job in jobs:
        created = job.get("CreationTime")
        when = created.strftime("%Y-%m-%d %H:%M") if isinstance(created, _dt.datetime) else ""
        rows.append(f"{job['TrainingJobName']:<48} {job.get('TrainingJobStatus', '?'):<11} {when}")
    return "\n".join(rows)


@common.exit_codes("status")
def run(args: argparse.Namespace) -> int:
    if args.job:
        region, _stack = common.resolve_region_and_stack(args)
        sagemaker = common.make_client("sagemaker", region)
        if args.wait:
            return wait_for(sagemaker, args.job, region)
        job = describe(sagemaker, args.job, region)
        print(format_job(job, region))
        return 1 if job.get("TrainingJobStatus") == "Failed" else 0
    setup = common.load_setup(args, with_spec=False)
    sagemaker = common.make_client("sagemaker", setup.region)
    print(list_jobs(sagemaker, setup.job_name_prefix, setup.region))
    return 0
