"""One typed SageMaker training job spec, rendered two ways from the same code.

:class:`TrainingJobSpec` holds everything a training job needs: image, role, instance type and count,
volume size and KMS key, input channels (S3 in File / FastFile / Pipe mode, FullyReplicated or
ShardedByS3Key, or FSx for Lustre), output path and key, hyperparameters, environment, metric
definitions, max runtime, managed spot with MaxWait and checkpoints, VPC, inter-container traffic
encryption, network isolation and distribution (processes per host, data-loader workers, hosts).

It renders one request tree, finalized two ways:

* :meth:`TrainingJobSpec.to_request` — the ``CreateTrainingJob`` request for boto3 (``gpuctl train``);
* :meth:`TrainingJobSpec.to_sfn_parameters` — the ``Parameters`` of a Step Functions task on
  ``arn:aws:states:::sagemaker:createTrainingJob.sync``, where the runtime values (job name,
  hyperparameters after overrides, instance type, data version) are JSONPath references to the
  execution state (``"TrainingJobName.$": "$.args.job_name"``).

Both are validated before they leave this module: against botocore's SageMaker service model
(:func:`service_model_problems`: required members, types and ranges via botocore's ``ParamValidator``,
plus enums, maximum lengths and patterns, which ``ParamValidator`` does not check) and against the
project's stricter rules (:meth:`TrainingJobSpec.problems`): MaxWait >= MaxRuntime, spot needs
checkpoints, ``s3://`` URIs, the job-name pattern and length, FSx needs a VPC, multi-host needs
inter-container traffic encryption in production, and the GPU catalog's guards. The Step Functions
rendering is validated after substituting sample values for every ``.$`` reference.

:class:`ShardingJobSpec` does the same for the optional data-preparation step: a SageMaker processing
job that runs ``gpuctl shard`` in the training image (``CreateProcessingJob``).

This module imports no ``aws_cdk``: the CLI uses it as is. Values that are unresolved CDK tokens
(``${Token[...]}``) are not validated; they are checked again by ``gpuctl`` with the deployed values.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from gpu_constructs.catalog import (
    check_cuda_supports,
    check_gpu_count,
    default_dataloader_workers,
    default_processes_per_host,
    lookup,
    processes_per_host_limit,
    require_nvidia_gpu,
)
from gpu_constructs.errors import ValidationError

__all__ = [
    "CHECKPOINT_LOCAL_PATH",
    "DATA_VERSION_PLACEHOLDER",
    "HP_NUM_WORKERS",
    "HP_PROCESSES_PER_HOST",
    "JOB_NAME_PATTERN",
    "MAX_RUNTIME_LIMIT_S",
    "MAX_WAIT_LIMIT_S",
    "PROCESSES_PER_HOST_PATTERN",
    "Dynamic",
    "FsxChannel",
    "S3Channel",
    "SfnPaths",
    "ShardSplit",
    "ShardingJobSpec",
    "TrainingJobSpec",
    "channel_from_dict",
    "check_processes_per_host",
    "hyperparameter_limits",
    "service_model_problems",
    "states_format",
    "validate_job_name",
]

#: SageMaker job names: ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$``, at most 63 characters.
JOB_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
_JOB_NAME_RE = re.compile(JOB_NAME_PATTERN)
JOB_NAME_MAX = 63
#: Placeholder in channel URIs and FSx paths that is replaced by the data version.
DATA_VERSION_PLACEHOLDER = "{data_version}"
DATA_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,127}$"
#: Where SageMaker syncs ``CheckpointConfig.S3Uri`` inside the container (the runtime writes there).
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
#: Hyperparameter names the training runtime (``gpu_train``) reads for the distribution defaults.
HP_PROCESSES_PER_HOST = "processes_per_host"
HP_NUM_WORKERS = "num_workers"

INPUT_MODES = ("File", "FastFile", "Pipe")
DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
FSX_ACCESS_MODES = ("ro", "rw")
COMPRESSIONS = ("None", "Gzip")
#: SageMaker's limit on ``StoppingCondition.MaxRuntimeInSeconds``: 28 days = 2,419,200 s (botocore 1.44.5, sagemaker,
#: StoppingCondition.MaxRuntimeInSeconds: "The default value is 1 day. The maximum value is 28 days."; the shape
#: itself declares only ``min: 1``, so botocore's validator does not catch it). The config (hours) imports it.
MAX_RUNTIME_LIMIT_S = 28 * 24 * 3600
#: The ceiling the platform applies to ``MaxWaitTimeInSeconds`` (spot wait plus runtime): the same 28 days. botocore
#: 1.44.5 declares no maximum for it (``min: 1``); its sibling ``MaxPendingTimeInSeconds`` has ``max: 2419200``.
MAX_WAIT_LIMIT_S = MAX_RUNTIME_LIMIT_S
#: A ``processes_per_host`` hyperparameter: a plain integer without sign or leading zeros, where 0 lets the training
#: runtime start one process per GPU. The training state machine's input check uses the same pattern (JSONata).
PROCESSES_PER_HOST_PATTERN = r"^(0|[1-9][0-9]*)$"
_PROCESSES_RE = re.compile(PROCESSES_PER_HOST_PATTERN)
_S3_URI_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
_CHANNEL_RE = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
_FSX_ID_RE = re.compile(r"^fs-[0-9a-f]{8,}$")
_TOKEN_RE = re.compile(r"\$\{Token\[[^\]]+\]\}|#\{Token\[[^\]]+\]\}")
_WHERE = "TrainingJobSpec"


# --------------------------------------------------------------------------------------------------
# Tokens, dynamic values and the two finalizations
# --------------------------------------------------------------------------------------------------


def _is_token(value: Any) -> bool:
    """True for (strings containing) unresolved CDK tokens. Never imports aws_cdk itself."""
    if isinstance(value, str) and _TOKEN_RE.search(value):
        return True
    if isinstance(value, int | float) and not isinstance(value, bool) and "aws_cdk" in sys.modules:
        from aws_cdk import Token

        return bool(Token.is_unresolved(value))
    return False


@dataclass(frozen=True)
class Dynamic:
    """A value the Step Functions execution supplies at run time.

    ``path`` is a JSONPath (``$.args.job_name``) or an intrinsic function (``States.Format(...)``);
    ``sample`` is a representative value, substituted to validate the rendering.
    """

    path: str
    sample: Any


@dataclass(frozen=True)
class _Concat:
    """A string made of literal parts and dynamic parts (rendered with ``States.Format``)."""

    parts: tuple[str | Dynamic, ...]


def states_format(parts: Sequence[str | Dynamic]) -> str | Dynamic:
    """Join ``parts``; with any :class:`Dynamic` part, a ``States.Format(...)`` :class:`Dynamic`.

    Literal ``' { } \\`` are escaped for the intrinsic function, except inside CDK tokens, which the
    CDK replaces at synth (a bucket name cannot contain those characters).
    """
    if not any(isinstance(p, Dynamic) for p in parts):
        return "".join(str(p) for p in parts)
    template: list[str] = []
    args: list[str] = []
    sample: list[str] = []
    for part in parts:
        if isinstance(part, Dynamic):
            template.append("{}")
            args.append(part.path)
            sample.append(str(part.sample))
        else:
            template.append(_escape_format(part))
            sample.append(part)
    return Dynamic(f"States.Format('{''.join(template)}', {', '.join(args)})", "".join(sample))


def _escape_format(text: str) -> str:
    out: list[str] = []
    last = 0
    for match in _TOKEN_RE.finditer(text):
        out.append(re.sub(r"([\\'{}])", r"\\\1", text[last : match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(re.sub(r"([\\'{}])", r"\\\1", text[last:]))
    return "".join(out)


def _to_asl(tree: Any) -> Any:
    """Step Functions form: a :class:`Dynamic` value becomes ``"<key>.$": <path>``."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            if isinstance(value, _Concat):
                value = states_format(value.parts)
            if isinstance(value, Dynamic):
                out[f"{key}.$"] = value.path
            else:
                out[key] = _to_asl(value)
        return out
    if isinstance(tree, list):
        if any(isinstance(v, Dynamic | _Concat) for v in tree):
            raise ValueError("a list item cannot be dynamic in Step Functions Parameters; use a dynamic list")
        return [_to_asl(v) for v in tree]
    return tree


def _to_sample(tree: Any) -> Any:
    """Every dynamic value replaced by its sample: what SageMaker receives for a typical execution."""
    if isinstance(tree, dict):
        return {k: _to_sample(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_to_sample(v) for v in tree]
    if isinstance(tree, _Concat):
        return _to_sample(states_format(tree.parts))
    if isinstance(tree, Dynamic):
        return tree.sample
    return tree


def substitute_sfn_samples(parameters: Any, samples: Mapping[str, Any]) -> Any:
    """Replace each ``"<key>.$": <path>`` of rendered Step Functions ``Parameters`` by ``samples[path]``.

    Raises ``KeyError`` naming a path that has no sample, so every runtime value is validated.
    """
    if isinstance(parameters, dict):
        out: dict[str, Any] = {}
        for key, value in parameters.items():
            if key.endswith(".$"):
                if value not in samples:
                    raise KeyError(f"no sample value for {key}={value!r}")
                out[key[:-2]] = samples[value]
            else:
                out[key] = substitute_sfn_samples(value, samples)
        return out
    if isinstance(parameters, list):
        return [substitute_sfn_samples(v, samples) for v in parameters]
    return parameters


def _collect_samples(tree: Any, found: dict[str, Any]) -> dict[str, Any]:
    if isinstance(tree, dict):
        for value in tree.values():
            _collect_samples(value, found)
    elif isinstance(tree, list):
        for value in tree:
            _collect_samples(value, found)
    elif isinstance(tree, _Concat):
        _collect_samples(states_format(tree.parts), found)
    elif isinstance(tree, Dynamic):
        found[tree.path] = tree.sample
    return found


# --------------------------------------------------------------------------------------------------
# botocore service-model validation
# --------------------------------------------------------------------------------------------------


@functools.cache
def _sagemaker_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:  # Java-only syntax (\p{L} ...): botocore's patterns are documentation here
        return None


def service_model_problems(operation: str, params: Mapping[str, Any]) -> list[str]:
    """Problems of ``params`` as a request of SageMaker ``operation`` per botocore's service model.

    botocore's ``ParamValidator`` checks required members, unknown members, types and minimum
    lengths/values; this adds what it leaves out: enums, maximum lengths and values, and patterns
    (full match). Unresolved CDK tokens are skipped.
    """
    from botocore.validate import ParamValidator

    shape = _sagemaker_model().operation_model(operation).input_shape
    report = ParamValidator().validate(_without_tokens(params), shape)
    problems = [line.strip() for line in report.generate_report().splitlines() if line.strip()]
    _strict_walk(params, shape, operation, problems)
    return problems


def _without_tokens(value: Any) -> Any:
    """Stand-ins for unresolved tokens: their real length and value are unknown until deployment
    (token numbers, which the CDK encodes as huge floats, would also fail the integer type check)."""
    if isinstance(value, dict):
        return {k: _without_tokens(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_tokens(v) for v in value]
    if _is_token(value):
        return value.ljust(256, "x") if isinstance(value, str) else 1
    return value


def _strict_walk(value: Any, shape: Any, path: str, problems: list[str]) -> None:
    if value is None or _is_token(value):
        return
    meta = shape.metadata
    kind = shape.type_name
    if kind == "structure" and isinstance(value, Mapping):
        for name, member in shape.members.items():
            if name in value:
                _strict_walk(value[name], member, f"{path}.{name}", problems)
    elif kind == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: {len(value)} items, more than the maximum {meta['max']}")
        for index, item in enumerate(value):
            _strict_walk(item, shape.member, f"{path}[{index}]", problems)
    elif kind == "map" and isinstance(value, Mapping):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: {len(value)} entries, more than the maximum {meta['max']}")
        for key, item in value.items():
            _strict_walk(key, shape.key, f"{path} key {key!r}", problems)
            _strict_walk(item, shape.value, f"{path}[{key!r}]", problems)
    elif kind == "string" and isinstance(value, str):
        enum = getattr(shape, "enum", None) or []
        if enum and value not in enum:
            problems.append(f"{path}: {value!r} is not one of the allowed values {_short_list(enum)}")
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: {len(value)} characters, more than the maximum {meta['max']}")
        pattern = _compiled(meta["pattern"]) if "pattern" in meta else None
        if pattern is not None and not pattern.fullmatch(value):
            problems.append(f"{path}: {value!r} does not match the pattern {meta['pattern']}")
    elif (
        kind in ("integer", "long")
        and isinstance(value, int)
        and not isinstance(value, bool)
        and "max" in meta
        and value > meta["max"]
    ):
        problems.append(f"{path}: {value} is more than the maximum {meta['max']}")


def _short_list(values: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(v) for v in list(values)[:limit])
    return f"[{shown}, ... ({len(values)} in all)]" if len(values) > limit else f"[{shown}]"


# --------------------------------------------------------------------------------------------------
# Small shared rules
# --------------------------------------------------------------------------------------------------


def validate_job_name(name: str, *, where: str = _WHERE, param: str = "job_name", prefix: str | None = None) -> str:
    """Raise unless ``name`` is a valid SageMaker job name (and starts with ``prefix`` when given)."""
    if not isinstance(name, str) or not _JOB_NAME_RE.match(name) or len(name) > JOB_NAME_MAX:
        raise ValidationError(
            where,
            f"{param}={name!r} is not allowed; allowed: 1 to {JOB_NAME_MAX} letters, digits and hyphens, "
            f"starting and ending with a letter or digit (pattern {JOB_NAME_PATTERN})",
        )
    if prefix and not name.lower().startswith(prefix.lower()):
        raise ValidationError(
            where,
            f"{param}={name!r} is not allowed; allowed: a name starting with {prefix!r} "
            "(the platform's roles may only create jobs with that prefix)",
        )
    return name


def check_processes_per_host(
    instance_type: str, value: int | str | None, *, where: str = _WHERE, param: str = HP_PROCESSES_PER_HOST
) -> int | None:
    """The one rule for processes per host, whichever way it is given; returns the number (``None``: the default).

    * the typed field (an ``int``): 1..GPUs of the type (:func:`~gpu_constructs.catalog.check_gpu_count`);
    * a hyperparameter (a ``str``: the spec's, the construct's, ``gpuctl train -p``, the config): an integer
      matching :data:`PROCESSES_PER_HOST_PATTERN`, 0 (the runtime starts one process per GPU) or 1..GPUs.

    The training state machine checks execution input against the same pattern and the same per-type limit
    (:func:`~gpu_constructs.catalog.processes_per_host_limit`). Raises :class:`ValidationError` naming the value,
    the type and what is allowed.
    """
    if value is None or _is_token(value):
        return None
    if isinstance(value, str):
        if not _PROCESSES_RE.match(value):
            limit = processes_per_host_limit(lookup(instance_type, where=where))
            raise ValidationError(
                where,
                f"{param}={value!r} is not an integer; allowed: 0 (one process per GPU) or 1..{limit} "
                f"on {instance_type}",
            )
        number = int(value)
        if number == 0:
            return None
        check_gpu_count(instance_type, number, where=where, param=param)
        return number
    check_gpu_count(instance_type, value, where=where, param=param)
    return value


@functools.cache
def hyperparameter_limits() -> tuple[int, int, int]:
    """(most entries, longest key, longest value) of ``CreateTrainingJob.HyperParameters`` per botocore's model.

    botocore 1.44.5, sagemaker: ``HyperParameters`` map ``max: 100``, ``HyperParameterKey`` ``max: 256``,
    ``HyperParameterValue`` ``max: 2500`` (the member's prose still says 256 per value; the shape wins).
    """
    shape = _sagemaker_model().shape_for("HyperParameters")
    return int(shape.metadata["max"]), int(shape.key.metadata["max"]), int(shape.value.metadata["max"])


def _s3_problem(name: str, uri: Any) -> str | None:
    if _is_token(uri):
        return None
    if not isinstance(uri, str) or not _S3_URI_RE.match(uri.replace(DATA_VERSION_PLACEHOLDER, "v")):
        return f"{name}={uri!r} is not an S3 URI; allowed: s3://<bucket>/<prefix>"
    return None


def _data_version_problem(version: str) -> str | None:
    if not isinstance(version, str) or not re.match(DATA_VERSION_PATTERN, version):
        return (
            f"data_version={version!r} is not allowed; allowed: 1 to 128 letters, digits and . _ = -, "
            "starting with a letter or digit (it becomes part of an S3 prefix)"
        )
    return None


def _split_version(template: str) -> tuple[str, ...]:
    pieces = template.split(DATA_VERSION_PLACEHOLDER)
    return tuple(pieces)


def _with_version(template: str, version: str | Dynamic) -> str | _Concat:
    pieces = _split_version(template)
    if len(pieces) == 1:
        return template
    parts: list[str | Dynamic] = []
    for index, piece in enumerate(pieces):
        if index:
            parts.append(version)
        if piece:
            parts.append(piece)
    if isinstance(version, Dynamic):
        return _Concat(tuple(parts))
    return "".join(str(p) for p in parts)


# --------------------------------------------------------------------------------------------------
# Input channels
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Channel:
    """An S3 input channel.

    :param name: channel name; the container sees ``/opt/ml/input/data/<name>`` (``SM_CHANNEL_<NAME>``).
    :param s3_uri: ``s3://bucket/prefix/``; may contain ``{data_version}``, replaced per job.
    :param input_mode: File (download first), FastFile (stream S3 objects as files) or Pipe (FIFO).
        Default: FastFile.
    :param distribution: FullyReplicated (every host reads everything) or ShardedByS3Key (each host
        gets 1/N of the objects). Default: FullyReplicated.
    :param content_type: MIME type passed to the container (default: none).
    :param compression: ``None`` or ``Gzip`` (Pipe mode only; default: not set).
    :param shuffle_seed: Pipe mode: shuffle the object list with this seed on each pass (default: off).
    :param type: the channel kind, always ``s3`` (set by the class; it tells channels apart in JSON).
    """

    name: str
    s3_uri: str
    input_mode: Literal["File", "FastFile", "Pipe"] = "FastFile"
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    content_type: str | None = None
    compression: Literal["None", "Gzip"] | None = None
    shuffle_seed: int | None = None
    type: Literal["s3"] = "s3"

    def problems(self) -> list[str]:
        where = f"channel {self.name!r}"
        out: list[str] = []
        if self.input_mode not in INPUT_MODES:
            out.append(f"{where}: input_mode={self.input_mode!r} is not allowed; allowed: {', '.join(INPUT_MODES)}")
        if self.distribution not in DISTRIBUTIONS:
            out.append(
                f"{where}: distribution={self.distribution!r} is not allowed; allowed: {', '.join(DISTRIBUTIONS)}"
            )
        problem = _s3_problem(f"{where}: s3_uri", self.s3_uri)
        if problem:
            out.append(problem)
        if self.compression not in (None, *COMPRESSIONS):
            out.append(f"{where}: compression={self.compression!r} is not allowed; allowed: None, Gzip")
        if self.compression == "Gzip" and self.input_mode != "Pipe":
            out.append(f"{where}: compression='Gzip' is not allowed with input_mode={self.input_mode!r}; allowed: Pipe")
        if self.shuffle_seed is not None and self.input_mode != "Pipe":
            out.append(
                f"{where}: shuffle_seed={self.shuffle_seed!r} is not allowed with input_mode={self.input_mode!r}; "
                "allowed: Pipe (File and FastFile readers shuffle themselves)"
            )
        return out

    def render(self, data_version: str | Dynamic) -> dict[str, Any]:
        source: dict[str, Any] = {
            "S3DataType": "S3Prefix",
            "S3Uri": _with_version(self.s3_uri, data_version),
            "S3DataDistributionType": self.distribution,
        }
        channel: dict[str, Any] = {
            "ChannelName": self.name,
            "DataSource": {"S3DataSource": source},
            "InputMode": self.input_mode,
        }
        if self.content_type:
            channel["ContentType"] = self.content_type
        if self.compression:
            channel["CompressionType"] = self.compression
        if self.shuffle_seed is not None:
            channel["ShuffleConfig"] = {"Seed": self.shuffle_seed}
        return channel


@dataclass(frozen=True)
class FsxChannel:
    """An FSx for Lustre input channel (mounted; SageMaker reads it in File mode).

    :param name: channel name.
    :param file_system_id: ``fs-...``.
    :param directory_path: ``/<mount_name>/<path>``; may contain ``{data_version}``.
    :param access_mode: ``ro`` (default) or ``rw``.
    :param file_system_type: ``FSxLustre`` (default).
    :param type: the channel kind, always ``fsx`` (set by the class; it tells channels apart in JSON).
    """

    name: str
    file_system_id: str
    directory_path: str
    access_mode: Literal["ro", "rw"] = "ro"
    file_system_type: Literal["FSxLustre"] = "FSxLustre"
    type: Literal["fsx"] = "fsx"

    @property
    def input_mode(self) -> str:
        return "File"

    def problems(self) -> list[str]:
        where = f"channel {self.name!r}"
        out: list[str] = []
        if not _is_token(self.file_system_id) and not _FSX_ID_RE.match(str(self.file_system_id)):
            out.append(
                f"{where}: file_system_id={self.file_system_id!r} is not allowed; allowed: fs- and 8+ hex digits"
            )
        if not _is_token(self.directory_path) and not str(self.directory_path).startswith("/"):
            out.append(
                f"{where}: directory_path={self.directory_path!r} is not allowed; allowed: an absolute path "
                "starting with the file system's mount name, /<mount_name>/<path>"
            )
        if self.access_mode not in FSX_ACCESS_MODES:
            out.append(f"{where}: access_mode={self.access_mode!r} is not allowed; allowed: ro, rw")
        if self.file_system_type != "FSxLustre":
            out.append(f"{where}: file_system_type={self.file_system_type!r} is not allowed; allowed: FSxLustre")
        return out

    def render(self, data_version: str | Dynamic) -> dict[str, Any]:
        return {
            "ChannelName": self.name,
            "DataSource": {
                "FileSystemDataSource": {
                    "FileSystemId": self.file_system_id,
                    "FileSystemType": self.file_system_type,
                    "DirectoryPath": _with_version(self.directory_path, data_version),
                    "FileSystemAccessMode": self.access_mode,
                }
            },
            "InputMode": "File",
        }


Channel = S3Channel | FsxChannel


def channel_from_dict(data: Mapping[str, Any]) -> Channel:
    """The channel of a ``to_dict()`` serialization (``type`` = ``s3`` or ``fsx``)."""
    kind = data.get("type", "s3")
    cls: type[S3Channel] | type[FsxChannel]
    if kind == "s3":
        cls = S3Channel
    elif kind == "fsx":
        cls = FsxChannel
    else:
        raise ValidationError(_WHERE, f"channel type={kind!r} is not allowed; allowed: 's3', 'fsx'")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(_WHERE, f"channel keys {unknown} are not allowed; allowed: {', '.join(sorted(known))}")
    return cls(**dict(data))


# --------------------------------------------------------------------------------------------------
# The training job spec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SfnPaths:
    """Where the Step Functions rendering reads each runtime value (the training state machine's layout)."""

    job_name: str = "$.args.job_name"
    instance_type: str = "$.args.instance_type"
    data_version: str = "$.args.data_version"
    hyperparameters: str = "$.hyperparameters"


@dataclass(frozen=True)
class TrainingJobSpec:
    """A SageMaker training job, typed and validated. Defaults are documented per field.

    :param image_uri: training image (``<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>``).
    :param role_arn: SageMaker execution role.
    :param instance_type: ``ml.*`` training type from the GPU catalog.
    :param output_s3_uri: where SageMaker writes ``<job>/output/model.tar.gz``.
    :param channels: input channels (at least one).
    :param instance_count: hosts (default 1); more than one is multi-host training.
    :param volume_size_gb: EBS volume per host, GB (default 100; ignored by SageMaker on types with
        local NVMe, which it uses instead).
    :param volume_kms_key: KMS key of the volume (default: none — SageMaker's default encryption).
    :param output_kms_key: KMS key of the output artifacts (default: the bucket's default encryption).
    :param hyperparameters: every value a string (SageMaker's contract). The derived distribution
        defaults (:data:`HP_PROCESSES_PER_HOST`, :data:`HP_NUM_WORKERS`) are added unless set here.
    :param environment: container environment variables (default: none).
    :param metric_definitions: ``[{"Name", "Regex"}]`` SageMaker parses from the logs (default: none;
        the platform passes the training runtime's ``METRIC_DEFINITIONS``).
    :param max_runtime_s: MaxRuntimeInSeconds (default 1 day).
    :param spot: managed spot training (default False).
    :param max_wait_s: MaxWaitTimeInSeconds, spot only, >= max_runtime_s (default: 2 x max_runtime_s
        with spot).
    :param checkpoint_s3_uri: checkpoint prefix; each job uses ``<prefix><job name>/`` (required with spot).
    :param subnets / security_group_ids: VPC of the job (default: none — SageMaker's network; FSx
        needs a VPC).
    :param inter_container_encryption: encrypt traffic between hosts (default True).
    :param network_isolation: no outbound network from the container (default False).
    :param processes_per_host: training processes per host (default: one per GPU, from the catalog).
    :param dataloader_workers: data-loader workers per process (default: from vCPUs per GPU).
    :param data_version: default version substituted for ``{data_version}`` (default ``v1``).
    :param cuda_version: the image's CUDA version, checked against the GPU architecture (default: unchecked).
    :param require_gpu: the workload needs an NVIDIA GPU (default True).
    :param production: apply the production rules, e.g. multi-host needs inter-container encryption
        (default False).
    :param max_retry_attempts: RetryStrategy (default: none; 1-30).
    :param job_name_prefix: names of jobs made from this spec start with it (default: none).
    :param tags: tags of the job (default: none).
    """

    image_uri: str
    role_arn: str
    instance_type: str
    output_s3_uri: str
    channels: tuple[Channel, ...]
    instance_count: int = 1
    volume_size_gb: int = 100
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    hyperparameters: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    metric_definitions: tuple[Mapping[str, str], ...] = ()
    max_runtime_s: int = 24 * 3600
    spot: bool = False
    max_wait_s: int | None = None
    checkpoint_s3_uri: str | None = None
    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    inter_container_encryption: bool = True
    network_isolation: bool = False
    processes_per_host: int | None = None
    dataloader_workers: int | None = None
    data_version: str = "v1"
    cuda_version: str | None = None
    require_gpu: bool = True
    production: bool = False
    max_retry_attempts: int | None = None
    job_name_prefix: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    # -- derived values -------------------------------------------------------------------------------

    @property
    def effective_max_wait_s(self) -> int | None:
        if not self.spot:
            return self.max_wait_s
        if self.max_wait_s is not None:
            return self.max_wait_s
        if not isinstance(self.max_runtime_s, int):
            return self.max_runtime_s
        return min(2 * self.max_runtime_s, MAX_WAIT_LIMIT_S)

    @property
    def is_multi_host(self) -> bool:
        return not _is_token(self.instance_count) and self.instance_count > 1

    @property
    def uses_fsx(self) -> bool:
        return any(isinstance(c, FsxChannel) for c in self.channels)

    def distribution_for(self, instance_type: str) -> dict[str, str]:
        """The derived hyperparameters for ``instance_type``: processes per host and loader workers.

        Explicit ``processes_per_host`` / ``dataloader_workers`` win; otherwise one process per GPU and
        ``floor(vCPUs / processes) - reserve`` workers (see the catalog).
        """
        it = lookup(instance_type, where=_WHERE, param="instance_type")
        procs = self.processes_per_host
        if procs is None:
            procs = _valid_processes(it.sagemaker_name, self.hyperparameters.get(HP_PROCESSES_PER_HOST))
        if procs is None:
            procs = default_processes_per_host(it)
        workers = (
            self.dataloader_workers
            if self.dataloader_workers is not None
            else default_dataloader_workers(it, min(procs, it.vcpus), where=_WHERE)
        )
        return {HP_PROCESSES_PER_HOST: str(procs), HP_NUM_WORKERS: str(workers)}

    def hyperparameters_for(
        self, instance_type: str | None = None, overrides: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """Base hyperparameters, then the derived distribution defaults, then ``overrides`` (strings)."""
        merged = {**self.distribution_for(instance_type or self.instance_type), **dict(self.hyperparameters)}
        for key, value in (overrides or {}).items():
            merged[str(key)] = _hp_string(value)
        return merged

    # -- validation -----------------------------------------------------------------------------------

    def problems(self, *, instance_type: str | None = None, data_version: str | None = None) -> list[str]:
        """Every violation of the project's rules (empty when the spec is valid)."""
        it_name = instance_type or self.instance_type
        checks = (
            self._check_instance(it_name),
            self._check_counts(),
            self._check_channels(),
            self._check_uris(),
            self._check_runtime_and_spot(),
            self._check_vpc(),
            self._check_multi_host(),
            self._check_strings(),
            self._check_data_version(data_version or self.data_version),
        )
        return [problem for check in checks for problem in check]

    def validate(self, where: str = _WHERE, **kwargs: Any) -> TrainingJobSpec:
        """Raise :class:`ValidationError` listing every problem; return ``self`` when there is none."""
        _raise(where, self.problems(**kwargs))
        return self

    def _check_instance(self, instance_type: str) -> list[str]:
        if _is_token(instance_type):
            return []
        try:
            if self.require_gpu:
                require_nvidia_gpu(instance_type, where=_WHERE, usage="training")
            else:
                it = lookup(instance_type, where=_WHERE)
                if not it.valid_for("training") or not instance_type.startswith("ml."):
                    return [f"instance_type={instance_type!r} is not a SageMaker training type"]
            check_processes_per_host(instance_type, self.processes_per_host)
            check_processes_per_host(
                instance_type,
                self.hyperparameters.get(HP_PROCESSES_PER_HOST),
                param=f"hyperparameters[{HP_PROCESSES_PER_HOST!r}]",
            )
            if self.cuda_version:
                check_cuda_supports(instance_type, self.cuda_version, where=_WHERE)
            self.distribution_for(instance_type)
            it = lookup(instance_type, where=_WHERE)
        except ValidationError as exc:
            return [exc.detail]
        if self.volume_kms_key and it.has_local_nvme:
            return [
                f"volume_kms_key is set, but {instance_type!r} has local NVMe storage ({it.local_nvme_gb} GB) that "
                "SageMaker uses instead of an EBS volume and encrypts with a hardware module; CreateTrainingJob "
                "rejects a VolumeKmsKeyId there. Allowed: no volume_kms_key on NVMe types, or an EBS-only type"
            ]
        return []

    def _check_counts(self) -> list[str]:
        out = []
        given = self.hyperparameters.get(HP_PROCESSES_PER_HOST)
        if self.processes_per_host is not None and given is not None and given != str(self.processes_per_host):
            out.append(
                f"processes_per_host={self.processes_per_host!r} and hyperparameters[{HP_PROCESSES_PER_HOST!r}]="
                f"{given!r} disagree; allowed: one of them, or the same value in both"
            )
        if not _is_token(self.instance_count) and (
            isinstance(self.instance_count, bool) or not isinstance(self.instance_count, int) or self.instance_count < 1
        ):
            out.append(f"instance_count={self.instance_count!r} is not allowed; allowed: an integer >= 1")
        if not _is_token(self.volume_size_gb) and not (
            isinstance(self.volume_size_gb, int) and 1 <= self.volume_size_gb <= 16384
        ):
            out.append(f"volume_size_gb={self.volume_size_gb!r} is not allowed; allowed: 1..16384")
        if self.dataloader_workers is not None and (
            not isinstance(self.dataloader_workers, int) or self.dataloader_workers < 0
        ):
            out.append(f"dataloader_workers={self.dataloader_workers!r} is not allowed; allowed: an integer >= 0")
        if self.max_retry_attempts is not None and not 1 <= self.max_retry_attempts <= 30:
            out.append(f"max_retry_attempts={self.max_retry_attempts!r} is not allowed; allowed: 1..30")
        return out

    def _check_channels(self) -> list[str]:
        out: list[str] = []
        if not self.channels:
            out.append("channels=() is not allowed; allowed: at least one input channel")
        names = [c.name for c in self.channels]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            out.append(f"channel names {dupes} are repeated; allowed: each name once")
        for channel in self.channels:
            if not _CHANNEL_RE.match(channel.name):
                out.append(f"channel name={channel.name!r} is not allowed; allowed: 1-64 of A-Z a-z 0-9 . - _")
            out.extend(channel.problems())
        return out

    def _check_uris(self) -> list[str]:
        out = []
        for name, uri in (("output_s3_uri", self.output_s3_uri), ("checkpoint_s3_uri", self.checkpoint_s3_uri)):
            if uri is not None:
                problem = _s3_problem(name, uri)
                if problem:
                    out.append(problem)
        return out

    def _check_runtime_and_spot(self) -> list[str]:
        out = []
        runtime, wait = self.max_runtime_s, self.effective_max_wait_s
        if not isinstance(runtime, int) or not 1 <= runtime <= MAX_RUNTIME_LIMIT_S:
            out.append(
                f"max_runtime_s={runtime!r} is not allowed; allowed: 1..{MAX_RUNTIME_LIMIT_S} "
                "(SageMaker MaxRuntimeInSeconds limit, 28 days)"
            )
        if wait is not None and not self.spot:
            out.append(
                f"max_wait_s={wait!r} is not allowed without spot; allowed: set spot=True, or leave max_wait_s unset"
            )
        if self.spot:
            if wait is not None and isinstance(runtime, int) and wait < runtime:
                out.append(
                    f"max_wait_s={wait} is less than max_runtime_s={runtime}; allowed: max_wait_s >= max_runtime_s "
                    "(MaxWait counts the spot wait plus the runtime)"
                )
            if wait is not None and wait > MAX_WAIT_LIMIT_S:
                out.append(
                    f"max_wait_s={wait} is not allowed; allowed: up to {MAX_WAIT_LIMIT_S} "
                    "(SageMaker MaxWaitTimeInSeconds limit, 28 days)"
                )
            if not self.checkpoint_s3_uri:
                out.append(
                    "spot=True requires checkpoint_s3_uri: an interrupted spot job resumes from its checkpoints; "
                    "allowed: an s3:// prefix such as s3://<artifacts bucket>/checkpoints/"
                )
        return out

    def _check_vpc(self) -> list[str]:
        out = []
        if bool(self.subnets) != bool(self.security_group_ids):
            out.append(
                f"subnets={list(self.subnets)} and security_group_ids={list(self.security_group_ids)}: "
                "allowed: both set (a VPC job) or both empty"
            )
        if self.uses_fsx and not (self.subnets and self.security_group_ids):
            fsx = [c.name for c in self.channels if isinstance(c, FsxChannel)]
            out.append(
                f"FSx channel(s) {fsx} require a VPC: SageMaker mounts FSx for Lustre over the VPC; "
                "allowed: set subnets and security_group_ids (the file system's VPC and a group it admits)"
            )
        return out

    def _check_multi_host(self) -> list[str]:
        if self.production and self.is_multi_host and not self.inter_container_encryption:
            return [
                f"instance_count={self.instance_count} with inter_container_encryption=False is not allowed in "
                "production; allowed: inter_container_encryption=True (traffic between hosts is encrypted)"
            ]
        return []

    def _check_strings(self) -> list[str]:
        out = []
        for key, value in self.hyperparameters.items():
            if not isinstance(value, str):
                out.append(
                    f"hyperparameters[{key!r}]={value!r} is not allowed; allowed: a string (SageMaker's contract)"
                )
        for key, value in self.environment.items():
            if not isinstance(value, str):
                out.append(f"environment[{key!r}]={value!r} is not allowed; allowed: a string")
        prefix = self.job_name_prefix
        if prefix is not None and not _is_token(prefix) and not re.match(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,40}$", prefix):
            out.append(
                f"job_name_prefix={prefix!r} is not allowed; allowed: up to 41 letters, digits and hyphens "
                "(22 characters are left for the rest of the job name)"
            )
        return out

    def _check_data_version(self, version: str) -> list[str]:
        if not any(DATA_VERSION_PLACEHOLDER in _channel_template(c) for c in self.channels):
            return []
        problem = _data_version_problem(version)
        return [problem] if problem else []

    # -- rendering ------------------------------------------------------------------------------------

    def _render(
        self,
        *,
        job_name: str | Dynamic,
        instance_type: str | Dynamic,
        hyperparameters: Mapping[str, str] | Dynamic,
        data_version: str | Dynamic,
    ) -> dict[str, Any]:
        input_modes = {c.input_mode for c in self.channels}
        request: dict[str, Any] = {
            "TrainingJobName": job_name,
            "RoleArn": self.role_arn,
            "AlgorithmSpecification": {
                "TrainingImage": self.image_uri,
                # The job-level default; every channel sets its own InputMode explicitly.
                "TrainingInputMode": input_modes.pop() if len(input_modes) == 1 else "File",
                **(
                    {"MetricDefinitions": [dict(m) for m in self.metric_definitions]} if self.metric_definitions else {}
                ),
            },
            "HyperParameters": hyperparameters if isinstance(hyperparameters, Dynamic) else dict(hyperparameters),
            "InputDataConfig": [c.render(data_version) for c in self.channels],
            "OutputDataConfig": {
                "S3OutputPath": self.output_s3_uri,
                **({"KmsKeyId": self.output_kms_key} if self.output_kms_key else {}),
            },
            "ResourceConfig": {
                "InstanceType": instance_type,
                "InstanceCount": self.instance_count,
                "VolumeSizeInGB": self.volume_size_gb,
                **({"VolumeKmsKeyId": self.volume_kms_key} if self.volume_kms_key else {}),
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": self.max_runtime_s},
            "EnableNetworkIsolation": self.network_isolation,
            "EnableInterContainerTrafficEncryption": self.inter_container_encryption,
            "EnableManagedSpotTraining": self.spot,
        }
        if self.effective_max_wait_s is not None:
            request["StoppingCondition"]["MaxWaitTimeInSeconds"] = self.effective_max_wait_s
        if self.checkpoint_s3_uri:
            prefix = self.checkpoint_s3_uri if self.checkpoint_s3_uri.endswith("/") else self.checkpoint_s3_uri + "/"
            request["CheckpointConfig"] = {
                "S3Uri": _Concat((prefix, job_name, "/")) if isinstance(job_name, Dynamic) else f"{prefix}{job_name}/",
                "LocalPath": CHECKPOINT_LOCAL_PATH,
            }
        if self.subnets:
            request["VpcConfig"] = {"Subnets": list(self.subnets), "SecurityGroupIds": list(self.security_group_ids)}
        if self.environment:
            request["Environment"] = dict(self.environment)
        if self.max_retry_attempts is not None:
            request["RetryStrategy"] = {"MaximumRetryAttempts": self.max_retry_attempts}
        if self.tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())]
        return request

    def to_request(
        self,
        job_name: str,
        *,
        hyperparameter_overrides: Mapping[str, Any] | None = None,
        instance_type: str | None = None,
        data_version: str | None = None,
        where: str = _WHERE,
    ) -> dict[str, Any]:
        """The boto3 ``CreateTrainingJob`` request, validated (raises :class:`ValidationError`)."""
        it = instance_type or self.instance_type
        version = data_version or self.data_version
        problems = self.problems(instance_type=it, data_version=version)
        try:
            validate_job_name(job_name, where=where, prefix=self.job_name_prefix)
        except ValidationError as exc:
            problems.append(exc.detail)
        problems += self.override_problems(it, hyperparameter_overrides)
        _raise(where, problems)
        request = self._render(
            job_name=job_name,
            instance_type=it,
            hyperparameters=self.hyperparameters_for(it, hyperparameter_overrides),
            data_version=version,
        )
        _raise(where, [f"botocore: {p}" for p in service_model_problems("CreateTrainingJob", request)])
        return request

    def override_problems(self, instance_type: str, overrides: Mapping[str, Any] | None) -> list[str]:
        """Problems of hyperparameter overrides (``gpuctl train -p``) on ``instance_type``: the same
        processes-per-host rule as the spec's own hyperparameters, and SageMaker's limits on keys and values."""
        out: list[str] = []
        if not overrides or _is_token(instance_type):
            return out
        count, key_max, value_max = hyperparameter_limits()
        for key, value in overrides.items():
            text = _hp_string(value)
            if len(str(key)) > key_max or len(text) > value_max:
                out.append(
                    f"hyperparameter {str(key)[:40]!r}: {len(str(key))}-character name, {len(text)}-character value; "
                    f"allowed: names up to {key_max} and values up to {value_max} characters (CreateTrainingJob)"
                )
            if key == HP_PROCESSES_PER_HOST:
                try:
                    check_processes_per_host(instance_type, text, param=f"hyperparameter {HP_PROCESSES_PER_HOST}")
                except ValidationError as exc:
                    out.append(exc.detail)
        merged = self.hyperparameters_for(instance_type, overrides) if not out else {}
        if len(merged) > count:
            out.append(f"{len(merged)} hyperparameters; allowed: at most {count} (CreateTrainingJob)")
        return out

    def sample_job_name(self) -> str:
        return f"{self.job_name_prefix or 'train'}-20250101-000000"

    def sfn_tree(self, paths: SfnPaths = SfnPaths()) -> dict[str, Any]:
        """The request with :class:`Dynamic` runtime values (before finalization)."""
        return self._render(
            job_name=Dynamic(paths.job_name, self.sample_job_name()),
            instance_type=Dynamic(paths.instance_type, self.instance_type),
            hyperparameters=Dynamic(paths.hyperparameters, self.hyperparameters_for(self.instance_type)),
            data_version=Dynamic(paths.data_version, self.data_version),
        )

    def to_sfn_parameters(self, paths: SfnPaths = SfnPaths(), *, where: str = _WHERE) -> dict[str, Any]:
        """``Parameters`` of a ``sagemaker:createTrainingJob.sync`` task, validated with sample values."""
        _raise(where, self.problems())
        tree = self.sfn_tree(paths)
        parameters = _to_asl(tree)
        resolved = substitute_sfn_samples(parameters, _collect_samples(tree, {}))
        _raise(where, [f"botocore: {p}" for p in service_model_problems("CreateTrainingJob", resolved)])
        return parameters

    def sfn_samples(self, paths: SfnPaths = SfnPaths()) -> dict[str, Any]:
        """``{path or intrinsic: sample value}`` of every runtime value of :meth:`to_sfn_parameters`."""
        return _collect_samples(self.sfn_tree(paths), {})

    # -- serialization --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the training stack publishes for ``gpuctl``)."""
        data = asdict(self)
        data["channels"] = [asdict(c) for c in self.channels]
        data["metric_definitions"] = [dict(m) for m in self.metric_definitions]
        for key in ("subnets", "security_group_ids"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingJobSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValidationError(_WHERE, f"unknown keys {unknown}; allowed: {', '.join(sorted(known))}")
        values = dict(data)
        values["channels"] = tuple(channel_from_dict(c) for c in values.get("channels", ()))
        values["metric_definitions"] = tuple(dict(m) for m in values.get("metric_definitions", ()))
        for key in ("subnets", "security_group_ids"):
            values[key] = tuple(values.get(key, ()))
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> TrainingJobSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(_WHERE, f"the job spec is not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValidationError(_WHERE, "the job spec must be a JSON object")
        return cls.from_dict(data)

    def with_changes(self, **changes: Any) -> TrainingJobSpec:
        return replace(self, **changes)


def _channel_template(channel: Channel) -> str:
    return channel.s3_uri if isinstance(channel, S3Channel) else channel.directory_path


def _valid_processes(instance_type: str, value: Any) -> int | None:
    """The processes-per-host hyperparameter as a number when it is valid for the type (else ``None``)."""
    try:
        return check_processes_per_host(instance_type, value) if isinstance(value, str) else None
    except ValidationError:
        return None


def _hp_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    return json.dumps(value)


def _raise(where: str, problems: Sequence[str]) -> None:
    if not problems:
        return
    if len(problems) == 1:
        raise ValidationError(where, problems[0])
    raise ValidationError(where, f"{len(problems)} problems:\n  - " + "\n  - ".join(problems))


# --------------------------------------------------------------------------------------------------
# The data-preparation (sharding) processing job
# --------------------------------------------------------------------------------------------------

PROCESSING_INPUT_ROOT = "/opt/ml/processing/input"
PROCESSING_OUTPUT_ROOT = "/opt/ml/processing/output"


@dataclass(frozen=True)
class ShardSplit:
    """One split to shard: raw files under ``source_s3_uri`` -> shards under ``dest_s3_uri``.

    ``dest_s3_uri`` may contain ``{data_version}`` (it usually is the training channel's URI).
    """

    name: str
    source_s3_uri: str
    dest_s3_uri: str


@dataclass(frozen=True)
class ShardingJobSpec:
    """A SageMaker processing job that runs ``gpuctl shard`` in the training image, once per split.

    :param image_uri: the training image (it contains ``gpuctl``).
    :param role_arn: role of the processing job (reads the raw prefix, writes the dataset prefix).
    :param instance_type: ``ml.*`` processing type, CPU or GPU (default ``ml.m5.4xlarge``).
    :param splits: the splits to shard (at least one).
    :param instance_count: hosts (default 1).
    :param volume_size_gb: EBS volume for the raw download and the shards (default 200).
    :param volume_kms_key / output_kms_key: KMS keys (default: none).
    :param image_size / shard_size / seed: ``gpuctl shard`` options (defaults 224, ``128MB``, 0).
    :param command: the program (default ``("python3", "-m", "gpu_train", "shard")``: the image's ``gpuctl shard``).
    :param max_runtime_s: default 1 day.
    :param subnets / security_group_ids / inter_container_encryption / network_isolation: as for training.
    :param data_version: default version for ``{data_version}`` (default ``v1``).
    :param job_name_prefix: processing job names start with it (default: none).
    :param tags: tags of every processing job (default: none).
    """

    image_uri: str
    role_arn: str
    splits: tuple[ShardSplit, ...]
    instance_type: str = "ml.m5.4xlarge"
    instance_count: int = 1
    volume_size_gb: int = 200
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    image_size: int = 224
    shard_size: str = "128MB"
    seed: int = 0
    command: tuple[str, ...] = ("python3", "-m", "gpu_train", "shard")
    max_runtime_s: int = 24 * 3600
    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    inter_container_encryption: bool = True
    network_isolation: bool = False
    data_version: str = "v1"
    job_name_prefix: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    def problems(self) -> list[str]:
        out: list[str] = []
        try:
            it = lookup(self.instance_type, where="ShardingJobSpec")
            if not self.instance_type.startswith("ml.") or not it.valid_for("processing"):
                out.append(
                    f"instance_type={self.instance_type!r} is not accepted by SageMaker processing; allowed: an ml.* "
                    "type valid for processing jobs, e.g. 'ml.m5.4xlarge' (CPU) or 'ml.g5.2xlarge' (GPU)"
                )
        except ValidationError as exc:
            out.append(exc.detail)
        if not self.splits:
            out.append("splits=() is not allowed; allowed: at least one split to shard")
        names = [s.name for s in self.splits]
        for split in self.splits:
            if not re.match(r"^[A-Za-z0-9._-]{1,64}$", split.name) or names.count(split.name) > 1:
                out.append(f"split name={split.name!r} is not allowed; allowed: unique names of A-Z a-z 0-9 . _ -")
            for name, uri in (("source_s3_uri", split.source_s3_uri), ("dest_s3_uri", split.dest_s3_uri)):
                problem = _s3_problem(f"split {split.name!r}: {name}", uri)
                if problem:
                    out.append(problem)
        if not 8 <= self.image_size <= 4096:
            out.append(f"image_size={self.image_size!r} is not allowed; allowed: 8..4096")
        if not re.match(r"^[0-9]+(\.[0-9]+)?[KMG]i?B$", self.shard_size):
            out.append(f"shard_size={self.shard_size!r} is not allowed; allowed: a size such as '128MB'")
        if not 1 <= self.max_runtime_s <= 5 * 24 * 3600:
            out.append(f"max_runtime_s={self.max_runtime_s!r} is not allowed; allowed: 1..432000 (5 days)")
        if bool(self.subnets) != bool(self.security_group_ids):
            out.append("subnets and security_group_ids: allowed: both set or both empty")
        return out

    def _script(self) -> str:
        """One shell line (SageMaker allows 256 characters per entrypoint item): shard each split given as an
        argument, ``<input root>/<split>`` -> ``<output root>/<split>``."""
        command = " ".join(_shell_quote(a) for a in self.command)
        options = f"--image-size {self.image_size} --shard-size {_shell_quote(self.shard_size)} --seed {self.seed}"
        return (
            f'set -eu; for split in "$@"; do {command} "{PROCESSING_INPUT_ROOT}/$split" '
            f'"{PROCESSING_OUTPUT_ROOT}/$split" {options} --quiet; done'
        )

    def _render(self, *, job_name: str | Dynamic, data_version: str | Dynamic) -> dict[str, Any]:
        request: dict[str, Any] = {
            "ProcessingJobName": job_name,
            "RoleArn": self.role_arn,
            "AppSpecification": {
                "ImageUri": self.image_uri,
                # sh -c SCRIPT NAME ARGS...: the split names become "$@".
                "ContainerEntrypoint": ["/bin/sh", "-c", self._script(), "gpuctl-shard"],
                "ContainerArguments": [split.name for split in self.splits],
            },
            "ProcessingResources": {
                "ClusterConfig": {
                    "InstanceCount": self.instance_count,
                    "InstanceType": self.instance_type,
                    "VolumeSizeInGB": self.volume_size_gb,
                    **({"VolumeKmsKeyId": self.volume_kms_key} if self.volume_kms_key else {}),
                }
            },
            "ProcessingInputs": [
                {
                    "InputName": split.name,
                    "S3Input": {
                        "S3Uri": split.source_s3_uri,
                        "LocalPath": f"{PROCESSING_INPUT_ROOT}/{split.name}",
                        "S3DataType": "S3Prefix",
                        "S3InputMode": "File",
                        "S3DataDistributionType": "FullyReplicated",
                    },
                }
                for split in self.splits
            ],
            "ProcessingOutputConfig": {
                "Outputs": [
                    {
                        "OutputName": split.name,
                        "S3Output": {
                            "S3Uri": _with_version(split.dest_s3_uri, data_version),
                            "LocalPath": f"{PROCESSING_OUTPUT_ROOT}/{split.name}",
                            "S3UploadMode": "EndOfJob",
                        },
                    }
                    for split in self.splits
                ],
                **({"KmsKeyId": self.output_kms_key} if self.output_kms_key else {}),
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": self.max_runtime_s},
            "NetworkConfig": {
                "EnableInterContainerTrafficEncryption": self.inter_container_encryption,
                "EnableNetworkIsolation": self.network_isolation,
                **(
                    {"VpcConfig": {"Subnets": list(self.subnets), "SecurityGroupIds": list(self.security_group_ids)}}
                    if self.subnets
                    else {}
                ),
            },
        }
        if self.tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())]
        return request

    def to_request(self, job_name: str, *, data_version: str | None = None, where: str = "ShardingJobSpec") -> dict:
        problems = self.problems()
        try:
            validate_job_name(job_name, where=where, param="processing_job_name", prefix=self.job_name_prefix)
        except ValidationError as exc:
            problems.append(exc.detail)
        version = data_version or self.data_version
        problem = _data_version_problem(version)
        if problem:
            problems.append(problem)
        _raise(where, problems)
        request = self._render(job_name=job_name, data_version=version)
        _raise(where, [f"botocore: {p}" for p in service_model_problems("CreateProcessingJob", request)])
        return request

    def to_sfn_parameters(
        self,
        *,
        job_name_path: str = "$.args.prepare_job_name",
        data_version_path: str = "$.args.data_version",
        where: str = "ShardingJobSpec",
    ) -> dict[str, Any]:
        """``Parameters`` of a ``sagemaker:createProcessingJob.sync`` task, validated with sample values."""
        _raise(where, self.problems())
        tree = self._render(
            job_name=Dynamic(job_name_path, f"{self.job_name_prefix or 'shard'}-20250101-000000"),
            data_version=Dynamic(data_version_path, self.data_version),
        )
        parameters = _to_asl(tree)
        resolved = substitute_sfn_samples(parameters, _collect_samples(tree, {}))
        _raise(where, [f"botocore: {p}" for p in service_model_problems("CreateProcessingJob", resolved)])
        return parameters


def _shell_quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def iter_dynamic_paths(parameters: Any) -> Iterator[tuple[str, str]]:
    """``(key, path)`` of every ``.$`` entry of rendered Step Functions ``Parameters``."""
    if isinstance(parameters, dict):
        for key, value in parameters.items():
            if key.endswith(".$"):
                yield key, value
            else:
                yield from iter_dynamic_paths(value)
    elif isinstance(parameters, list):
        for value in parameters:
            yield from iter_dynamic_paths(value)
