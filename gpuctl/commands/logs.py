"""gpuctl logs JOB [--follow]: a training job's CloudWatch logs, every host interleaved by time.

SageMaker writes one log stream per host (<job>/algo-<n>-<timestamp>) to /aws/sagemaker/TrainingJobs.
Each line is printed with its host ([algo-1]). --follow keeps printing new lines until the job ends.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from gpuctl import training_setup as common
from gpuctl.aws_errors import explain
from gpuctl.commands import add_command
from gpuctl.commands.status import describe

LOG_GROUP = "/aws/sagemaker/TrainingJobs"


#: The command's line in ``gpuctl --help``.
SUMMARY = "print (and follow) a training job's CloudWatch logs"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "logs", SUMMARY, __doc__)
    parser.add_argument("job", help="training job name")
    common.add_setup_options(parser)
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the job ends")
    parser.add_argument("--since-minutes", type=int, help="only lines of the last N minutes")
    parser.set_defaults(func=run)


def host_of(stream: str, job: str) -> str:
    """``algo-1`` of ``<job>/algo-1-1700000000``."""
    rest = stream[len(job) + 1 :] if stream.startswith(job + "/") else stream
    parts = rest.split("-")
    return "-".join(parts[:2]) if len(parts) >= 2 and parts[0] == "algo" else rest


def events(logs: Any, job: str, *, start_time: int | None, region: str | None) -> Iterator[dict[str, Any]]:
    """All events of the job's streams from ``start_time`` (ms), oldest first, across pages."""
    kwargs: dict[str, Any] = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": f"{job}/", "interleaved": True}
    if start_time is not None:
        kwargs["startTime"] = start_time
    while True:
        try:
            response = logs.filter_log_events(**kwargs)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                return  # the log group appears with the first job of the account
            raise explain(exc, operation="FilterLogEvents", region=region, job_name=job) from exc
        yield from response.get("events", [])
        token = response.get("nextToken")
        if not token:
            return
        kwargs["nextToken"] = token


@common.exit_codes("logs")
def run(args: argparse.Namespace) -> int:
    region, _stack = common.resolve_region_and_stack(args)
    logs = common.make_client("logs", region)
    sagemaker = common.make_client("sagemaker", region) if args.follow else None
    start: int | None = None
    if args.since_minutes is not None:
        import time

        start = int((time.time() - 60 * args.since_minutes) * 1000)
    seen: set[str] = set()
    printed = 0
    while True:
        latest = start
        for event in events(logs, args.job, start_time=start, region=region):
            key = event.get("eventId") or f"{event.get('logStreamName')}:{event.get('timestamp')}"
            if key in seen:
                continue
            seen.add(key)
            printed += 1
            host = host_of(event.get("logStreamName", ""), args.job)
            print(f"[{host}] {event.get('message', '').rstrip()}", flush=True)
            latest = max(latest or 0, int(event.get("timestamp", 0)))
        if not args.follow:
            if not printed:
                print(f"no log lines yet for {args.job} in {LOG_GROUP} ({region})", file=sys.stderr)
            return 0
        job = describe(sagemaker, args.job, region)
        if job.get("TrainingJobStatus") in common.TERMINAL:
            print(f"{args.job}: {job['TrainingJobStatus']}", file=sys.stderr)
            return 0 if job["TrainingJobStatus"] == "Completed" else 1
        start = latest
        common.sleep(min(common.poll_interval(), 10.0))
