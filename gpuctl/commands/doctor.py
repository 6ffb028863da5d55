"""``gpuctl doctor``: is this host's NVIDIA GPU stack usable by torch?

Prints the GPU facts (devices, compute capability, driver and CUDA versions, torch's CUDA build, cuDNN,
NCCL) and checks them the way the training image does at start. Exit code 0 when healthy (or when no
GPU is expected), 1 when GPUs are expected but unusable, so it fits boot scripts and notebooks alike.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from gpuctl.commands import add_command

#: The command's line in ``gpuctl --help``.
SUMMARY = "check that NVIDIA GPUs are visible and usable by torch (driver, CUDA, devices)"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "doctor", SUMMARY, __doc__)
    parser.add_argument(
        "--expect-gpus",
        type=int,
        default=None,
        metavar="N",
        help="fail unless at least N GPUs are usable (default: expect GPUs when the host shows signs of them)",
    )
    parser.add_argument("--instance-type", help="instance type to infer the expectation from (e.g. ml.g5.xlarge)")
    parser.add_argument("--no-probe", action="store_true", help="do not run a test kernel on each GPU")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpu_train import gpu_check
    from gpu_train.errors import GpuCheckError

    if args.expect_gpus is not None and args.expect_gpus < 0:
        print("gpuctl doctor: --expect-gpus must be >= 0")
        return 2
    facts = gpu_check.collect(probe=not args.no_probe)
    setting = "auto" if args.expect_gpus is None else ("false" if args.expect_gpus == 0 else str(args.expect_gpus))
    expectation = gpu_check.expected_gpus(
        setting=setting,
        instance_type=args.instance_type or os.environ.get("SM_CURRENT_INSTANCE_TYPE"),
        facts=facts,
    )
    problem = None
    try:
        gpu_check.check(expectation, facts)
    except GpuCheckError as exc:
        problem = str(exc)
    if args.json:
        print(gpu_check.as_json(facts, expectation, problem))
    else:
        print(gpu_check.report(facts, expectation))
        print(f"FAILED: {problem}" if problem else "OK")
    return 1 if problem else 0
