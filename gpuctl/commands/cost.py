"""gpuctl cost: what the synthesized app costs, and what a change adds or saves.

``gpuctl cost [--cdk-out DIR]`` prints the always-on $/month of each stack (SageMaker endpoints at their
autoscaling minimum, notebook instances while running, FSx for Lustre storage, NAT gateways, interface VPC
endpoints per Availability Zone, EC2 auto scaling groups at MinSize) and the $/hour of each training setup (its
first choice and its most expensive fallback), read from the templates in the cloud assembly (default ``cdk.out``).

``gpuctl cost diff BASE_DIR HEAD_DIR`` compares two cloud assemblies (e.g. the synth of the main branch and of a
change) and prints one line per change ("+$1,105.95/month: gpu-prod-inference: endpoint gpu-prod-classifier
ml.g5.2xlarge x2 -> x3") and the total before and after.

Prices are on-demand list prices from the dated table in ``gpu_constructs.catalog.pricing``; a month is 730
hours. Storage volumes, S3, data transfer and other usage-based charges are not included. ``--json`` prints the
same data as JSON. Exit 0; 2 when a directory holds no cloud assembly.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gpuctl.commands import add_command
from platform_tools.cost import CostError, diff_json, diff_lines, estimate_assembly, estimate_lines

#: The command's line in ``gpuctl --help``.
SUMMARY = "always-on $/month and training $/hour of a synthesized app (cdk.out), or the cost difference of two"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "cost", SUMMARY, __doc__)
    parser.add_argument(
        "--cdk-out", default="cdk.out", metavar="DIR", help="cloud assembly directory (default: cdk.out)"
    )
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="cost_command", metavar="diff")
    diff_parser = sub.add_parser(
        "diff",
        help="the cost difference from BASE_DIR to HEAD_DIR",
        description="Compare the cost of two cloud assemblies: one line per change, then the totals.",
    )
    diff_parser.add_argument("base", metavar="BASE_DIR", help="cloud assembly before the change")
    diff_parser.add_argument("head", metavar="HEAD_DIR", help="cloud assembly after the change")
    diff_parser.add_argument("--json", action="store_true", help="print the difference as JSON")
    diff_parser.set_defaults(func=run_diff)


def run(args: argparse.Namespace) -> int:
    try:
        estimate = estimate_assembly(args.cdk_out)
    except CostError as exc:
        print(f"gpuctl cost: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(estimate.to_json(), indent=2) if args.json else "\n".join(estimate_lines(estimate)))
    return 0


def run_diff(args: argparse.Namespace) -> int:
    try:
        base = estimate_assembly(args.base)
        head = estimate_assembly(args.head)
    except CostError as exc:
        print(f"gpuctl cost diff: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(diff_json(base, head), indent=2) if args.json else "\n".join(diff_lines(base, head)))
    return 0
