"""gpuctl train: launch a SageMaker training job from the deployed training setup.

The job spec comes from the deployed training stack (its outputs, read with CloudFormation DescribeStacks,
name the SSM parameter that holds it) or from a local JSON file (--spec), so nobody types ARNs, bucket
names or subnet ids. The same TrainingJobSpec renders the request the state machine sends; here it is validated (GPU
catalog, SageMaker's service model, the platform's rules) and sent with boto3 CreateTrainingJob:

    gpuctl train                                   # dev: the defaults of config/dev.yaml's training section
    gpuctl train --env prod -p epochs=30 --data-version v3
    gpuctl train --instance-type ml.g5.12xlarge --dry-run     # print the exact request, send nothing
    gpuctl train --pipeline                        # run the deployed state machine instead (prepare step ...)
    gpuctl train --source-dir ./src --entry-point train.py -p lr=0.1 --instance-count 2   # your own script
    gpuctl train --source-dir ./src --input training=s3://my-bucket/data/   # your own script, your own channels
    gpuctl train --synth --local --source-dir ./src --channel training=./data  # the request on this machine, no AWS

Your own code (``--source-dir``) is packaged (``.gpuignore`` honoured, 100 MiB at most), content-addressed and
uploaded once with the artifacts KMS key to ``code/<prefix>/<sha256>/sourcedir.tar.gz``; the platform's launcher
runs it on the setup's image (the stock PyTorch DLC too) with torchrun over every GPU and host. It gets exactly the
input channels you name (--input NAME=s3://...; --dataset adds the setup's dataset channels), each under a prefix
the job role may read (config training.readable_inputs); the setup's own code keeps the dataset channels.

Errors from AWS are explained in plain words with the next step (quota, capacity, access, validation).
gpuctl status, gpuctl logs and gpuctl stop share the options to find the setup (:mod:`gpuctl.training_setup`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpu_constructs.training_spec.preferences import placement, placement_text
from gpuctl import training_setup as common
from gpuctl.aws_errors import AwsProblem, explain
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
    parser.add_argument(
        "--synth",
        nargs="?",
        const="cdk.out",
        metavar="CDK_OUT",
        help="the job spec of the synthesized app (make synth; default cdk.out), deploy-time values as placeholders: "
        "--dry-run and --local without an AWS account",
    )
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
    parser.add_argument(
        "--save-spec",
        metavar="FILE",
        help="write the job spec JSON to FILE (for --spec) and stop; with --dry-run or --local, go on to those",
    )
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="start an execution of the deployed state machine instead of calling CreateTrainingJob",
    )
    parser.add_argument("--prepare", action="store_true", help="with --pipeline: run the prepare (shard) step first")
    code = parser.add_argument_group("your own code (default: the setup's code, the built-in trainer)")
    code.add_argument("--source-dir", type=Path, help="folder of your training code (packaged and uploaded)")
    code.add_argument("--entry-point", help="script in --source-dir to run (default: train.py)")
    code.add_argument("--distribution", choices=("auto", "torchrun", "single"), help="how the launcher starts it")
    code.add_argument("--framework", choices=("auto", "pytorch", "tensorflow"), help="the GPU check before it")
    code.add_argument("--instance-count", type=int, help="hosts of the job (multi-host: torchrun on every host)")
    code.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="a metric SageMaker reads from the log (repeatable; replaces the setup's metric definitions)",
    )
    inputs = parser.add_argument_group("input channels (default: the setup's dataset channels for its own code)")
    inputs.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=S3_URI",
        help="an input channel of the job (repeatable), e.g. --input training=s3://bucket/prefix/: /opt/ml/input/"
        "data/NAME, SM_CHANNEL_NAME; under a prefix the job role may read (config training.readable_inputs)",
    )
    inputs.add_argument(
        "--input-mode",
        action="append",
        default=[],
        metavar="NAME=MODE",
        help="the input mode of a channel: File (default for --input), FastFile or Pipe (repeatable)",
    )
    inputs.add_argument(
        "--dataset",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the setup's dataset channels as well (default: yes for the setup's own code, no for --source-dir)",
    )
    local = parser.add_argument_group("local run (no AWS, no Docker)")
    local.add_argument("--local", action="store_true", help="run the exact request on this machine in a temp /opt/ml")
    local.add_argument(
        "--channel",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="--local: the local folder of an input channel, one of the job's or a new one (repeatable)",
    )
    local.add_argument("--output", type=Path, help="--local: where model.tar.gz is left (default: ./local-output/JOB)")
    parser.add_argument("--wait", action="store_true", help="wait for the job to end and print its status")
    parser.set_defaults(func=run)


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    return parse_pairs(items, "-p", "epochs=30", allow_empty=True)


def parse_pairs(items: Sequence[str], option: str, example: str, *, allow_empty: bool = False) -> dict[str, str]:
    """``NAME=VALUE`` options as a dict (``-p``, ``--metric``, ``--channel``)."""
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not (value.strip() or allow_empty):
            raise UsageError(f"{option} {item!r} is not NAME=VALUE; allowed: e.g. {option} {example}")
        pairs[name.strip()] = value.strip()
    return pairs


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


@dataclass
class CodeUpload:
    """A packaged ``--source-dir``: where it goes and its bytes (uploaded only when not there yet)."""

    bucket: str
    key: str
    data: bytes
    files: int
    sha256: str


def with_code(spec: Any, args: argparse.Namespace) -> tuple[Any, CodeUpload | None]:
    """The spec with the command line's code options; a packaged ``--source-dir`` to upload."""
    from gpu_constructs.errors import ValidationError
    from gpu_constructs.training_spec.code import DEFAULT_ENTRY_POINT
    from gpu_constructs.training_spec.code_package import code_s3_key, package_source_dir

    code = spec.code
    changes: dict[str, Any] = {}
    if args.instance_count is not None:
        changes["instance_count"] = args.instance_count
    if args.metric:
        metrics = parse_pairs(args.metric, "--metric", "loss='loss=([0-9.]+)'")
        changes["metric_definitions"] = tuple({"Name": k, "Regex": v} for k, v in metrics.items())
    wants_code = args.source_dir is not None or args.entry_point or args.distribution or args.framework
    if code is None and wants_code:
        raise UsageError(
            "this setup's jobs run the image's own entry (its spec has no code); allowed: deploy the training "
            "stack of this version (its jobs run code through the launcher), or leave out the code options"
        )
    upload = None
    if code is not None:
        code_changes: dict[str, Any] = {}
        if args.entry_point and args.source_dir is None and code.builtin:
            raise UsageError("--entry-point needs --source-dir (the setup's default code is the built-in trainer)")
        if args.source_dir is not None:
            entry_point = args.entry_point or DEFAULT_ENTRY_POINT
            try:
                package = package_source_dir(args.source_dir, entry_point)
            except ValidationError as exc:
                raise UsageError(f"--source-dir {args.source_dir}: {exc.detail}") from None
            check_requirements_route(args.source_dir, package.files, code.package_index)
            bucket, _prefix = _split_s3(code.upload_prefix or "")
            if not bucket or not spec.job_name_prefix:
                raise UsageError("the setup publishes no code upload prefix; allowed: redeploy the training stack")
            key = code_s3_key(spec.job_name_prefix, package)
            upload = CodeUpload(bucket, key, package.data, len(package.files), package.sha256)
            code_changes.update(source_s3_uri=f"s3://{bucket}/{key}", entry_point=entry_point, builtin=False)
        elif args.entry_point:  # another script of the setup's own code package
            code_changes["entry_point"] = args.entry_point
        if args.distribution:
            code_changes["distribution"] = args.distribution
        if args.framework:
            code_changes["framework"] = args.framework
        if upload is not None:
            # Another code package: the setup's hyperparameters are its own code's defaults (the built-in
            # trainer's, or the configured script's) and stay behind; the job gets only the user's -p.
            spec = spec.with_other_code(replace(code, **code_changes))
        elif code_changes:
            changes["code"] = replace(code, **code_changes)
    return (spec.with_changes(**changes) if changes else spec), upload


def with_inputs(spec: Any, args: argparse.Namespace, *, own_code: bool) -> Any:
    """The spec with the channels of ``--input`` (and, with ``--local``, the new channels of ``--channel``): after
    the setup's dataset channels when ``--dataset`` says so, or by default when the job runs the setup's own code;
    code given at run time gets exactly the channels its user names."""
    from gpu_constructs.errors import ValidationError
    from gpu_constructs.training_spec import input_channel

    given = parse_pairs(args.input, "--input", "training=s3://bucket/prefix/")
    modes = parse_pairs(args.input_mode, "--input-mode", "training=FastFile")
    dataset = args.dataset if args.dataset is not None else own_code
    names = {c.name for c in spec.channels} if dataset else set()
    local = {} if not args.local else parse_pairs(args.channel, "--channel", "train=./data")
    added = [name for name in local if name not in names and name not in given and not _reserved(name)]
    unknown = sorted(set(modes) - set(given) - set(added))
    if unknown:
        raise UsageError(f"--input-mode {', '.join(unknown)}: no such --input; allowed: the name of an --input")
    try:
        channels = [input_channel(name, {"s3_uri": uri, **_mode(modes, name)}) for name, uri in given.items()]
        # --local: a folder given for a channel the job does not have becomes one (its data never leaves here).
        channels += [input_channel(name, {"s3_uri": _local_uri(spec), **_mode(modes, name)}) for name in added]
    except ValidationError as exc:
        raise UsageError(exc.detail) from None
    if given and not spec.readable_inputs:
        print("note: this setup publishes no readable prefixes: SageMaker checks the inputs' access", file=sys.stderr)
    return spec.with_inputs(channels, dataset=dataset) if (channels or not dataset) else spec


def _mode(modes: Mapping[str, str], name: str) -> dict[str, str]:
    return {"input_mode": modes[name]} if name in modes else {}


def _reserved(name: str) -> bool:
    from gpu_constructs.training_spec.code import RESERVED_CHANNELS

    return name in RESERVED_CHANNELS


def _local_uri(spec: Any) -> str:
    """The S3 URI a ``--local``-only channel stands at in the request: the first prefix the role may read."""
    return spec.readable_inputs[0] if spec.readable_inputs else "s3://local-channel/"


def check_requirements_route(source_dir: Path, files: Sequence[str], package_index: bool) -> None:
    """Refuse, before any job exists, a ``requirements.txt`` the job could not install."""
    from gpu_train.launcher import lists_packages  # the launcher's own rule of what it would install

    if "requirements.txt" not in files or package_index or not lists_packages(source_dir / "requirements.txt"):
        return
    if any(name.startswith("wheels/") and name.endswith(".whl") for name in files):
        return
    raise UsageError(
        f"{source_dir}/requirements.txt lists packages, but this setup's jobs have no route to a package index "
        "(a private VPC without NAT, or network isolation) and the folder has no wheels/ folder; allowed: "
        f"gpuctl vendor {source_dir} (downloads the wheels into wheels/), or remove requirements.txt"
    )


def _split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        return "", ""
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def build_request(setup: Setup, args: argparse.Namespace) -> tuple[Any, dict[str, Any], str, CodeUpload | None]:
    """(spec, validated CreateTrainingJob request, job name, code package to upload)."""
    from gpu_constructs.errors import ValidationError

    try:
        spec = setup.spec()
    except ValidationError as exc:
        raise UsageError(f"the job spec is not valid: {exc}") from None
    spec, upload = with_code(spec, args)
    spec = with_inputs(spec, args, own_code=upload is None)
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
    if spec.code is None or spec.code.builtin:
        check_runtime_hyperparameters(request["HyperParameters"])
    return spec, request, job_name, upload


def offline_setup(args: argparse.Namespace) -> Setup:
    """The deployed setup; for ``--dry-run``, ``--local`` and ``--save-spec``, when it cannot be read (no
    credentials, not deployed yet), the synthesized app in ``cdk.out`` instead (``--synth``), with a note saying so
    and which values are stand-ins."""
    if args.spec or args.synth or not (args.dry_run or args.local or args.save_spec):
        return load_setup(args)
    try:
        return load_setup(args)
    except AwsProblem as problem:
        _region, stack = common.resolve_region_and_stack(args)
        if not (Path("cdk.out") / f"{stack}.template.json").is_file():
            raise AwsProblem(
                problem.what,
                f"{problem.next_step}; or, without an account, synthesize first (make synth ENV={args.env}) and "
                "run this again: --dry-run, --local and --save-spec then use the synthesized app",
                problem.code,
            ) from None
        print(
            f"note: {problem.what.rstrip('.')}: using the synthesized app (cdk.out, stack {stack}) instead. "
            "Stand-ins for what only a deployment knows: account 111122223333, bucket names placeholder-<hash>, "
            "subnet-/sg- ids, role and key ARNs",
            file=sys.stderr,
        )
        args.synth = "cdk.out"
        return load_setup(args)


@exit_codes("train")
def run(args: argparse.Namespace) -> int:
    if args.pipeline:
        check_pipeline_options(args)  # before anything is packaged or uploaded
    setup = offline_setup(args)
    if args.save_spec:
        if setup.spec_text is None:
            raise UsageError("there is no job spec to save")
        Path(args.save_spec).write_text(json.dumps(json.loads(setup.spec_text), indent=2) + "\n")
        print(f"job spec written to {args.save_spec}", file=sys.stderr)
        if not (args.dry_run or args.local):  # saving a spec (of --synth: placeholders) starts no job
            return 0
    spec, request, job_name, upload = build_request(setup, args)
    if args.local:
        return _run_local(spec, request, args, job_name)
    if upload is not None and not args.dry_run:
        _upload(setup, spec, upload)
    elif upload is not None:
        print(
            f"would upload {upload.files} files ({len(upload.data)} bytes) to s3://{upload.bucket}/{upload.key}",
            file=sys.stderr,
        )
    if args.pipeline:
        return _start_pipeline(setup, args, job_name, spec)
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
            instance_type=placement(request["ResourceConfig"])[0],
            region=setup.region,
            spot=bool(request.get("EnableManagedSpotTraining")),
            job_name=job_name,
        ) from exc
    print(f"started {job_name}")
    print(f"  arn:     {response.get('TrainingJobArn', '')}")
    print(f"  type:    {placement_text(request['ResourceConfig'])}")
    print(f"  console: {console_url(setup.region, job_name)}")
    print(f"  watch:   gpuctl status {job_name}    gpuctl logs {job_name} --follow")
    if args.wait:
        return wait_for(sagemaker, job_name, setup.region)
    return 0


def _upload(setup: Setup, spec: Any, upload: CodeUpload) -> None:
    from gpuctl.code_upload import upload_package

    s3 = common.make_client("s3", setup.region)
    sent = upload_package(s3, upload.bucket, upload.key, upload.data, spec.output_kms_key)
    state = "uploaded" if sent else "already uploaded (same content)"
    print(f"code package {state}: s3://{upload.bucket}/{upload.key} ({upload.files} files)", file=sys.stderr)


def _run_local(spec: Any, request: dict[str, Any], args: argparse.Namespace, job_name: str) -> int:
    """``--local``: the rendered request on this machine (code from --source-dir or the setup's default code)."""
    from gpuctl.local_job import LocalJobError, local_code_channels, run_local_job

    if spec.code is None:
        raise UsageError("--local needs a setup whose jobs run code through the launcher; redeploy the stack")
    if args.source_dir is None and not spec.code.builtin:
        raise UsageError(
            "--local needs --source-dir: this setup's default code package is in S3; allowed: --source-dir FOLDER"
        )
    if args.dry_run:
        print(json.dumps(request, indent=2))
        return 0
    channels: dict[str, Path] = {k: Path(v) for k, v in parse_pairs(args.channel, "--channel", "train=./data").items()}
    output = args.output or Path("local-output") / job_name
    try:  # the code and the launcher: from the runtime folder of a checkout, else from this installation
        channels.update(local_code_channels(args.source_dir, spec.code.entry_point))
        result = run_local_job(request, channels, output_dir=output)
    except LocalJobError as exc:
        raise UsageError(str(exc)) from None
    for host in result.hosts:
        print(f"{host.host}: exit {host.exit_code}" + (f": {host.failure}" if host.failure else ""))
    if result.model_tarball is not None:
        print(f"model: {result.model_tarball}")
    return 0 if result.ok else 1


def check_pipeline_options(args: argparse.Namespace) -> None:
    """What an execution of the state machine cannot change (they are fixed in its Train state)."""
    if args.local:
        raise UsageError("--local runs the job request itself; allowed: --local or --pipeline, not both")
    if args.instance_count is not None or args.metric or args.distribution or args.framework:
        raise UsageError(
            "--pipeline takes the setup's instance count, metrics, distribution and framework; allowed with "
            "--pipeline: --source-dir, --entry-point, --instance-type, --data-version, -p, --input, --input-mode, "
            "--dataset"
        )


def _start_pipeline(setup: Setup, args: argparse.Namespace, job_name: str, spec: Any) -> int:
    """Start the deployed state machine with the runtime values (validated above with the same spec)."""
    arn = setup.outputs.get(OUTPUT_STATE_MACHINE)
    if not arn:
        raise UsageError("--pipeline needs the deployed stack (its StateMachineArn output); drop --spec")
    execution_input: dict[str, Any] = {"job_name": job_name}
    if args.source_dir is not None:
        execution_input["code"] = spec.code.source_s3_uri
        execution_input["entry_point"] = spec.code.entry_point
    if args.instance_type:
        execution_input["instance_type"] = args.instance_type
    if args.data_version:
        execution_input["data_version"] = args.data_version
    overrides = parse_overrides(args.hyperparameter)
    if overrides:
        execution_input["hyperparameters"] = overrides
    inputs = parse_pairs(args.input, "--input", "training=s3://bucket/prefix/")
    if inputs:
        modes = parse_pairs(args.input_mode, "--input-mode", "training=FastFile")
        execution_input["inputs"] = {name: {"s3_uri": uri, **_mode(modes, name)} for name, uri in inputs.items()}
    if args.dataset is not None:
        execution_input["dataset"] = args.dataset
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
