"""gpuctl stop JOB: stop a training job.

SageMaker sends SIGTERM to the training processes and SIGKILL 120 seconds later; the platform's training
runtime writes a checkpoint on SIGTERM, so a later job with the same checkpoint prefix can resume.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuctl.aws_errors import AwsProblem, explain
from gpuctl.commands import train as common


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "stop",
        help="stop a training job (it checkpoints on SIGTERM)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", help="training job name")
    common.add_setup_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        region, _stack = common.resolve_region_and_stack(args)
        sagemaker = common.make_client("sagemaker", region)
        try:
            sagemaker.stop_training_job(TrainingJobName=args.job)
        except Exception as exc:
            raise explain(exc, operation="StopTrainingJob", region=region, job_name=args.job) from exc
        print(f"stopping {args.job}: the job checkpoints on SIGTERM; follow it with gpuctl status {args.job} --wait")
        return 0
    except common.UsageError as exc:
        print(f"gpuctl stop: {exc}", file=sys.stderr)
        return 2
    except AwsProblem as exc:
        print(f"gpuctl stop: {exc}", file=sys.stderr)
        return 1
