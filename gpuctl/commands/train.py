"""gpuctl train: launch a SageMaker training job from the deployed training setup.

The job spec comes from the deployed training stack (its outputs, read with CloudFormation DescribeStacks,
name the SSM parameter that holds it) or from a local JSON file (--spec), so nobody types ARNs, bucket
names or subnet ids. The same TrainingJobSpec renders the request the state machine sends; here it is validated (GPU
catalog, SageMaker's service model, the platform's rules) and sent with boto3 CreateTrainingJob:

    gpuctl train                                   # dev: the defaults of config/dev.yaml's training section
    gpuctl train --env prod -p epochs=30 --data-version v3
    gpuctl train --instance-type ml.g5.12xlarge --dry-run     # print the exact request, send nothing
    gpuctl train --pipeline                        # run the deployed state machine instead (prepare step ...)

Errors from AWS are explained in plain words with the next step (quota, capacity, access, validation).
gpuctl status, gpuctl logs and gpuctl stop share the options to find the setup (:mod:`gpuctl.training_setup`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuctl import training_setup as common
from gpuctl.aws_errors import explain
from gpuctl.commands import add_command
from gpuctl.commands.status import wait_for
from gpuctl.training_setup import (
    OUTPUT_STATE_MACHINE,
    Setup,
    UsageError,
    add_setup_options,
    console_url,
    exit_codes,
    load_setup,
)

#: The command's line in ``gpuctl --help``.
SUMMARY = "launch a SageMaker training job from the deployed training setup"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "train", SUMMARY, __doc__)
    add_setup_options(parser)
    parser.add_argument("--spec", help="local job spec JSON (as saved by --save-spec) instead of the deployed stack")
    parser.add_argument("--job-name", help="job name (default: <prefix>-<UTC timestamp>)")
    parser.add_argument("--instance-type", help="override the instance type (an ml.* NVIDIA GPU training type)")
    parser.add_argument("--data-version", help="override the data version (the {data_version} part of the input URIs)")
    parser.add_argument(
        "-p",
        "--hyperparameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one hyperparameter (repeatable), e.g. -p epochs=30 -p lr=0.2",
    )
    parser.add_argument("--dry-run", action="store_true", help="validate and print the exact request; send nothing")
    parser.add_argument("--save-spec", metavar="FILE", help="write the job spec JSON to FILE (for --spec)")
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="start an execution of the deployed state machine instead of calling CreateTrainingJob",
    )
    parser.add_argument("--prepare", action="store_true", help="with --pipeline: run the prepare (shard) step first")
    parser.add_argument("--wait", action="store_true", help="wait for the job to end and print its status")
    parser.set_defaults(func=run)


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"-p {item!r} is not NAME=VALUE; allowed: e.g. -p epochs=30")
        overrides[name.strip()] = value.strip()
    return overrides


def check_runtime_hyperparameters(values: Mapping[str, str]) -> None:
    """The training runtime's own check of names and values, when its package is importable."""
    try:
        from gpu_train.hyperparameters import parse
    except ImportError:  # gpuctl installed without the runtime: SageMaker's job will check them
        return
    try:
        parse(dict(values))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def default_job_name(prefix: str | None, now: _dt.datetime | None = None) -> str:
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{prefix or 'train'}-{stamp}"


def build_request(setup: Setup, args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
    """(spec, validated CreateTrainingJob request, job name)."""
    from gpu_constructs.errors import ValidationError

    try:
        spec = setup.spec()
    except ValidationError as exc:
        raise UsageError(f"the job spec is not valid: {exc}") from None
    overrides = parse_overrides(args.hyperparameter)
    job_name = args.job_name or default_job_name(spec.job_name_prefix)
    try:
        request = spec.to_request(
            job_name,
            hyperparameter_overrides=overrides,
            instance_type=args.instance_type,
            data_version=args.data_version,
            where="gpuctl train",
        )
    except ValidationError as exc:
        raise UsageError(exc.detail) from None
    check_runtime_hyperparameters(request["HyperParameters"])
    return spec, request, job_name


@exit_codes("train")
def run(args: argparse.Namespace) -> int:
    setup = load_setup(args)
    if args.save_spec:
        if setup.spec_text is None:
            raise UsageError("there is no job spec to save")
        Path(args.save_spec).write_text(json.dumps(json.loads(setup.spec_text), indent=2) + "\n")
        print(f"job spec written to {args.save_spec}", file=sys.stderr)
    _spec, request, job_name = build_request(setup, args)
    if args.pipeline:
        return _start_pipeline(setup, args, job_name)
    if args.dry_run:
        print(json.dumps(request, indent=2))
        return 0
    sagemaker = common.make_client("sagemaker", setup.region)
    try:
        response = sagemaker.create_training_job(**request)
    except Exception as exc:
        raise explain(
            exc,
            operation="CreateTrainingJob",
            instance_type=request["ResourceConfig"]["InstanceType"],
            region=setup.region,
            spot=bool(request.get("EnableManagedSpotTraining")),
            job_name=job_name,
        ) from exc
    print(f"started {job_name}")
    print(f"  arn:     {response.get('TrainingJobArn', '')}")
    print(f"  type:    {request['ResourceConfig']['InstanceCount']} x {request['ResourceConfig']['InstanceType']}")
    print(f"  console: {console_url(setup.region, job_name)}")
    print(f"  watch:   gpuctl status {job_name}    gpuctl logs {job_name} --follow")
    if args.wait:
        return wait_for(sagemaker, job_name, setup.region)
    return 0


def _start_pipeline(setup: Setup, args: argparse.Namespace, job_name: str) -> int:
    """Start the deployed state machine with the runtime values (validated above with the same spec)."""
    arn = setup.outputs.get(OUTPUT_STATE_MACHINE)
    if not arn:
        raise UsageError("--pipeline needs the deployed stack (its StateMachineArn output); drop --spec")
    execution_input: dict[str, Any] = {"job_name": job_name}
    if args.instance_type:
        execution_input["instance_type"] = args.instance_type
    if args.data_version:
        execution_input["data_version"] = args.data_version
    overrides = parse_overrides(args.hyperparameter)
    if overrides:
        execution_input["hyperparameters"] = overrides
    if args.prepare:
        execution_input["prepare"] = True
    if args.dry_run:
        print(json.dumps({"stateMachineArn": arn, "name": job_name, "input": execution_input}, indent=2))
        return 0
    sfn = common.make_client("stepfunctions", setup.region)
    try:
        response = sfn.start_execution(stateMachineArn=arn, name=job_name, input=json.dumps(execution_input))
    except Exception as exc:
        raise explain(exc, operation="StartExecution", region=setup.region, job_name=job_name) from exc
    region = setup.region or ""
    print(f"started pipeline execution {job_name} (training job {job_name})")
    print(f"  execution: {response.get('executionArn', '')}")
    print(
        f"  console:   https://{region}.console.aws.amazon.com/states/home?region={region}#/v2/executions/details/"
        f"{response.get('executionArn', '')}"
    )
    print(f"  watch:     gpuctl status {job_name}    gpuctl logs {job_name} --follow")
    return 0
