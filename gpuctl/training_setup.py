"""Finding a deployed training setup, shared by ``gpuctl train``, ``status``, ``logs`` and ``stop``.

The setup is the training stack of an environment: its outputs (CloudFormation DescribeStacks) name the
state machine, the job-name prefix and the SSM parameter that holds the job spec; ``--env`` reads the stack
name and region from ``config/<env>.yaml`` with the app's own typed loader. AWS clients come from
:data:`make_client` and waiting goes through :func:`sleep`, so tests replace both in this one module.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import time
from collections.abc import Callable
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

#: Makes the boto3 client of a service in a region; tests swap in clients that replay recorded responses.
ClientFactory = Callable[[str, str | None], Any]


def boto3_client(service: str, region: str | None) -> Any:
    """A boto3 client of ``service`` in ``region`` (None: the default chain's), from a session of its own."""
    import boto3

    session: Any = boto3.session.Session(region_name=region)
    return session.client(service)


make_client: ClientFactory = boto3_client


class UsageError(Exception):
    """Bad command-line input (exit code 2)."""


Command = Callable[[argparse.Namespace], int]


def exit_codes(command: str) -> Callable[[Command], Command]:
    """Decorate a command's ``run`` with the commands' exit codes and messages.

    A :class:`UsageError` exits 2 and an :class:`AwsProblem` 1, each printed on stderr as
    ``gpuctl <command>: <message>`` (no traceback).
    """

    def decorate(run: Command) -> Command:
        @functools.wraps(run)
        def wrapper(args: argparse.Namespace) -> int:
            try:
                return run(args)
            except UsageError as exc:
                print(f"gpuctl {command}: {exc}", file=sys.stderr)
                return 2
            except AwsProblem as exc:
                print(f"gpuctl {command}: {exc}", file=sys.stderr)
                return 1

        return wrapper

    return decorate


# --------------------------------------------------------------------------------------------------
# Finding the deployed setup
# --------------------------------------------------------------------------------------------------


def config_dirs() -> list[Path]:
    """Where ``config/<env>.yaml`` is looked for: the working directory, then the repository of gpuctl."""
    return [Path.cwd() / "config", Path(__file__).resolve().parents[1] / "config"]


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
    synth_dir = getattr(args, "synth", None)
    if synth_dir:
        from gpuctl.synth_spec import SynthSpecError, load_synth_spec

        region, stack = resolve_region_and_stack(args)
        try:
            text = load_synth_spec(Path(synth_dir), stack, region or "us-east-1")
        except SynthSpecError as exc:
            raise UsageError(f"--synth {synth_dir}: {exc}") from None
        prefix = json.loads(text).get("job_name_prefix")
        return Setup(region=region, stack_name=None, outputs={OUTPUT_PREFIX: prefix} if prefix else {}, spec_text=text)
    region, stack = resolve_region_and_stack(args)
    return describe_setup(region, stack, with_spec=with_spec)


def console_url(region: str | None, job_name: str) -> str:
    host = f"{region}.console.aws.amazon.com" if region else "console.aws.amazon.com"
    return f"https://{host}/sagemaker/home?region={region or ''}#/jobs/{job_name}"


def poll_interval() -> float:
    return float(os.environ.get("GPUCTL_POLL_SECONDS", "30"))


def sleep(seconds: float) -> None:
    time.sleep(seconds)
