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
gpuctl status, gpuctl logs and gpuctl stop share the options to find the setup.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.aws_errors import AwsProblem, explain

STACK_SUFFIX = "-training"
OUTPUT_SPEC_PARAMETER = "JobSpecParameter"
OUTPUT_PREFIX = "JobNamePrefix"
OUTPUT_STATE_MACHINE = "StateMachineArn"
TERMINAL = ("Completed", "Failed", "Stopped")
DEFAULT_ENV = "dev"

# Tests replace this with a factory that returns stubbed clients.
ClientFactory = Callable[[str, str | None], Any]


def _boto3_client(service: str, region: str | None) -> Any:
    import boto3

    session: Any = boto3.session.Session(region_name=region)
    return session.client(service)


make_client: ClientFactory = _boto3_client


class UsageError(Exception):
    """Bad command-line input (exit code 2)."""


# --------------------------------------------------------------------------------------------------
# Finding the deployed setup
# --------------------------------------------------------------------------------------------------


def config_dirs() -> list[Path]:
    """Where ``config/<env>.yaml`` is looked for: the working directory, then the repository of gpuctl."""
    return [Path.cwd() / "config", Path(__file__).resolve().parents[2] / "config"]


def read_env_config(env: str) -> dict[str, Any]:
    """``resource_prefix`` and ``region`` of ``config/<env>.yaml``, read by the app's own typed loader.

    The same validation as ``cdk synth`` applies, so a file the app would refuse is refused here with the same
    message (file, key, value and what is allowed).
    """
    if not re.fullmatch(r"[a-z][a-z0-9-]*", env):
        raise UsageError(f"--env {env!r} is not an environment name; allowed: e.g. dev, prod")
    for directory in config_dirs():
        path = directory / f"{env}.yaml"
        if path.is_file():
            try:
                from stacks.config import ConfigError, parse_config
            except ModuleNotFoundError as exc:  # a gpuctl installed without the platform's config package
                raise UsageError(
                    f"--env {env!r} needs the platform's config loader ({exc.name}), which is not installed here; "
                    "run gpuctl from the repository's virtual environment (make setup), or pass --stack and --region"
                ) from None
            try:
                config = parse_config(path.read_text(), path, env)
            except ConfigError as exc:
                raise UsageError(f"configuration error: {exc}") from None
            return {"path": path, "resource_prefix": config.resource_prefix, "region": config.region}
    searched = ", ".join(str(d) for d in config_dirs())
    raise UsageError(f"--env {env!r}: no {env}.yaml in {searched}; pass --stack and --region instead")


@dataclass
class Setup:
    """A deployed (or locally described) training setup."""

    region: str | None
    stack_name: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    spec_text: str | None = None

    @property
    def job_name_prefix(self) -> str | None:
        return self.outputs.get(OUTPUT_PREFIX)

    def spec(self) -> Any:
        from gpu_constructs.training_spec import TrainingJobSpec

        if self.spec_text is None:
            raise UsageError(
                f"stack {self.stack_name!r} has no {OUTPUT_SPEC_PARAMETER} output; is it a training stack?"
            )
        return TrainingJobSpec.from_json(self.spec_text)


def add_setup_options(parser: argparse.ArgumentParser) -> None:
    """The options that find the training setup (shared by train, status, logs, stop)."""
    where = parser.add_argument_group("which training setup")
    where.add_argument(
        "--env",
        default=os.environ.get("GPUCTL_ENV", DEFAULT_ENV),
        help="environment: reads resource_prefix and region from config/<env>.yaml (default: $GPUCTL_ENV or dev)",
    )
    where.add_argument(
        "--stack", default=os.environ.get("GPUCTL_STACK"), help="training stack name (default: <prefix>-training)"
    )
    where.add_argument("--region", help="AWS region (default: $AWS_REGION, else the config's region)")


def resolve_region_and_stack(args: argparse.Namespace) -> tuple[str | None, str]:
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    stack = args.stack
    if stack is None or region is None:
        config = read_env_config(args.env)
        stack = stack or f"{config['resource_prefix']}{STACK_SUFFIX}"
        region = region or config["region"]
    return region, stack


def describe_setup(region: str | None, stack: str, *, with_spec: bool = True) -> Setup:
    """The stack's outputs (CloudFormation DescribeStacks) and the job spec they point to (SSM GetParameter)."""
    cfn = make_client("cloudformation", region)
    try:
        response = cfn.describe_stacks(StackName=stack)
    except Exception as exc:
        raise explain(exc, operation="DescribeStacks", region=region, stack_name=stack) from exc
    stacks = response.get("Stacks", [])
    if not stacks:
        raise AwsProblem(f"The training stack {stack!r} is not deployed in {region}.", "deploy it or pass --stack")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    spec_text = None
    parameter = outputs.get(OUTPUT_SPEC_PARAMETER)
    if parameter and with_spec:
        ssm = make_client("ssm", region)
        try:
            spec_text = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        except Exception as exc:
            raise explain(exc, operation="GetParameter", region=region) from exc
    return Setup(region=region, stack_name=stack, outputs=outputs, spec_text=spec_text)


def load_setup(args: argparse.Namespace, *, with_spec: bool = True) -> Setup:
    """From ``--spec FILE`` (no AWS call) or from the deployed stack."""
    spec_file = getattr(args, "spec", None)
    if spec_file:
        path = Path(spec_file)
        if not path.is_file():
            raise UsageError(f"--spec {spec_file}: no such file")
        region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region is None:
            try:
                region = read_env_config(args.env)["region"]
            except UsageError:
                region = None
        text = path.read_text()
        spec_prefix = json.loads(text).get("job_name_prefix") if text.strip().startswith("{") else None
        outputs = {OUTPUT_PREFIX: spec_prefix} if spec_prefix else {}
        return Setup(region=region, stack_name=None, outputs=outputs, spec_text=text)
    region, stack = resolve_region_and_stack(args)
    return describe_setup(region, stack, with_spec=with_spec)


def console_url(region: str | None, job_name: str) -> str:
    host = f"{region}.console.aws.amazon.com" if region else "console.aws.amazon.com"
    return f"https://{host}/sagemaker/home?region={region or ''}#/jobs/{job_name}"


# --------------------------------------------------------------------------------------------------
# gpuctl train
# --------------------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "train",
        help="launch a SageMaker training job from the deployed training setup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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


def run(args: argparse.Namespace) -> int:
    try:
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
        sagemaker = make_client("sagemaker", setup.region)
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
            from gpuctl.commands.status import wait_for

            return wait_for(sagemaker, job_name, setup.region)
        return 0
    except UsageError as exc:
        print(f"gpuctl train: {exc}", file=sys.stderr)
        return 2
    except AwsProblem as exc:
        print(f"gpuctl train: {exc}", file=sys.stderr)
        return 1


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
    sfn = make_client("stepfunctions", setup.region)
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


def poll_interval() -> float:
    return float(os.environ.get("GPUCTL_POLL_SECONDS", "30"))


def sleep(seconds: float) -> None:
    time.sleep(seconds)
