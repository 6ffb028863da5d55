"""gpuctl stop JOB: stop a training job.

SageMaker sends SIGTERM to the training processes and SIGKILL 120 seconds later; the platform's training
runtime writes a checkpoint on SIGTERM, which SageMaker copies to the job's own checkpoint location
(``<checkpoint prefix><job name>/``) when the job has a CheckpointConfig; a later job does not read it by itself.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuctl import training_setup as common
from gpuctl.aws_errors import explain
from gpuctl.commands import add_command

#: The command's line in ``gpuctl --help``.
SUMMARY = "stop a training job (it checkpoints on SIGTERM)"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "stop", SUMMARY, __doc__)
    parser.add_argument("job", help="training job name")
    common.add_setup_options(parser)
    parser.set_defaults(func=run)


@common.exit_codes("stop")
def run(args: argparse.Namespace) -> int:
    region, _stack = common.resolve_region_and_stack(args)
    sagemaker = common.make_client("sagemaker", region)
    try:
        sagemaker.stop_training_job(TrainingJobName=args.job)
    except Exception as exc:
        raise explain(exc, operation="StopTrainingJob", region=region, job_name=args.job) from exc
    print(f"stopping {args.job}: the job checkpoints on SIGTERM; follow it with gpuctl status {args.job} --wait")
    return 0
