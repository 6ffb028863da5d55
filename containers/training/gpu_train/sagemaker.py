"""The SageMaker training contract: directory layout, config files and ``SM_*`` environment.

SageMaker starts the image as ``docker run IMAGE train`` and provides:

* ``/opt/ml/input/config/hyperparameters.json``: every value a string;
* ``/opt/ml/input/config/resourceconfig.json``: ``current_host``, ``hosts``, ``network_interface_name``
  (and, on newer platforms, ``current_instance_type`` and ``instance_groups``);
* ``/opt/ml/input/config/inputdataconfig.json``: per channel ``TrainingInputMode`` (File, FastFile, Pipe),
  ``S3DistributionType``, ``ContentType``;
* channel data under ``/opt/ml/input/data/<channel>``; in Pipe mode a FIFO per pass,
  ``/opt/ml/input/data/<channel>_<n>`` for the n-th pass (n counts from 0 in each container start);
* ``/opt/ml/model`` (packed into ``model.tar.gz`` after the job), ``/opt/ml/output/data``,
  ``/opt/ml/output/failure`` (first 1024 characters become ``FailureReason``) and ``/opt/ml/checkpoints``
  (synchronised with ``CheckpointConfig.S3Uri``).

The ``SM_*`` variables are set by the SageMaker training toolkit or by the job's ``Environment``; when
present they override what the files say (``SM_NUM_GPUS``, ``SM_NUM_CPUS``, ``SM_HOSTS``,
``SM_CURRENT_HOST``, ``SM_MODEL_DIR``, ``SM_CHANNEL_<NAME>``, ``SM_OUTPUT_DATA_DIR``, ``SM_HPS``).

``GPU_TRAIN_ROOT`` moves the whole tree (default ``/opt/ml``), so the same code runs in a temporary
directory in tests and on a workstation.

This module imports no torch.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_train.errors import ChannelError, ConfigError

DEFAULT_ROOT = "/opt/ml"
ROOT_ENV = "GPU_TRAIN_ROOT"

INPUT_MODES = ("File", "FastFile", "Pipe")


@dataclass(frozen=True)
class Paths:
    """Every SageMaker path, relative to one root (``/opt/ml`` by default)."""

    root: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Paths:
        env = os.environ if environ is None else environ
        return cls(Path(env.get(ROOT_ENV) or DEFAULT_ROOT))

    @property
    def config_dir(self) -> Path:
        return self.root / "input" / "config"

    @property
    def hyperparameters_file(self) -> Path:
        return self.config_dir / "hyperparameters.json"

    @property
    def resource_config_file(self) -> Path:
        return self.config_dir / "resourceconfig.json"

    @property
    def input_data_config_file(self) -> Path:
        return self.config_dir / "inputdataconfig.json"

    @property
    def data_dir(self) -> Path:
        return self.root / "input" / "data"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.output_dir / "data"

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def code_dir(self) -> Path:
        return self.root / "code"


@dataclass(frozen=True)
class ResourceConfig:
    """The cluster this container is part of (``resourceconfig.json``)."""

    current_host: str = "algo-1"
    hosts: tuple[str, ...] = ("algo-1",)
    network_interface_name: str | None = None
    current_instance_type: str | None = None

    @property
    def host_rank(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    @property
    def leader(self) -> str:
        return self.hosts[0]


@dataclass(frozen=True)
class Channel:
    """One input channel: its name, input mode and where its data is."""

    name: str
    mode: str = "File"
    distribution: str = "FullyReplicated"
    content_type: str | None = None
    path: Path = field(default_factory=Path)

    @property
    def is_pipe(self) -> bool:
        return self.mode == "Pipe"

    @property
    def sharded_by_key(self) -> bool:
        """True when S3 objects were split across hosts (``ShardedByS3Key``): each host sees a subset."""
        return self.distribution == "ShardedByS3Key"

    def pipe_path(self, pass_index: int) -> Path:
        """The FIFO SageMaker opens for the ``pass_index``-th read of this channel (Pipe mode)."""
        return self.path.parent / f"{self.name}_{pass_index}"


@dataclass(frozen=True)
class SageMakerEnv:
    """Everything the runtime learns from SageMaker, read once at start."""

    paths: Paths
    hyperparameters: dict[str, str]
    resource: ResourceConfig
    channels: dict[str, Channel]
    num_gpus: int | None
    num_cpus: int
    model_dir: Path
    output_data_dir: Path
    job_name: str | None

    def channel(self, name: str, *, required: bool = True) -> Channel | None:
        """The channel called ``name``; a :class:`ChannelError` names what exists when it is missing."""
        channel = self.channels.get(name)
        if channel is None:
            if not required:
                return None
            known = ", ".join(sorted(self.channels)) or "none"
            raise ChannelError(
                f"input channel {name!r} is missing: configured channels: {known}; "
                f"add a channel named {name!r} to InputDataConfig (or set the hyperparameter that names it)"
            )
        if channel.is_pipe:
            first = channel.pipe_path(0)
            if not first.exists():
                raise ChannelError(f"input channel {name!r} is in Pipe mode but its FIFO {first} does not exist")
        elif not channel.path.is_dir():
            raise ChannelError(f"input channel {name!r} ({channel.mode} mode) has no data directory at {channel.path}")
        return channel


def _read_json(path: Path, what: str) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} {path} is not valid JSON: {exc}") from exc


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from exc
    if value < 0:
        raise ConfigError(f"environment variable {name}={raw!r} must be >= 0")
    return value


def load_hyperparameters(paths: Paths, env: Mapping[str, str]) -> dict[str, str]:
    """Raw hyperparameters: ``hyperparameters.json``, or ``SM_HPS`` (JSON) when the file is absent."""
    data = _read_json(paths.hyperparameters_file, "hyperparameters file")
    if data is None and env.get("SM_HPS"):
        try:
            data = json.loads(env["SM_HPS"])
        except json.JSONDecodeError as exc:
            raise ConfigError(f"environment variable SM_HPS is not valid JSON: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"hyperparameters file {paths.hyperparameters_file} must hold a JSON object, got {type(data).__name__}"
        )
    # SageMaker passes strings; the SDK and SM_HPS may pass JSON values: keep them as text.
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}


def load_resource_config(paths: Paths, env: Mapping[str, str]) -> ResourceConfig:
    data = _read_json(paths.resource_config_file, "resource config")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"resource config {paths.resource_config_file} must hold a JSON object")
    hosts_raw: Any = data.get("hosts")
    if env.get("SM_HOSTS"):
        try:
            hosts_raw = json.loads(env["SM_HOSTS"])
        except json.JSONDecodeError as exc:
            raise ConfigError(f"environment variable SM_HOSTS is not a JSON list: {exc}") from exc
    current = env.get("SM_CURRENT_HOST") or data.get("current_host") or "algo-1"
    hosts = tuple(str(h) for h in hosts_raw) if hosts_raw else (str(current),)
    if not all(hosts) or len(set(hosts)) != len(hosts):
        raise ConfigError(f"resource config hosts={list(hosts)!r} must be distinct, non-empty host names")
    if current not in hosts:
        raise ConfigError(f"resource config current_host={current!r} is not one of hosts={list(hosts)!r}")
    instance_type = data.get("current_instance_type") or env.get("SM_CURRENT_INSTANCE_TYPE")
    return ResourceConfig(
        current_host=str(current),
        hosts=hosts,
        network_interface_name=data.get("network_interface_name"),
        current_instance_type=str(instance_type) if instance_type else None,
    )


def load_channels(paths: Paths, env: Mapping[str, str]) -> dict[str, Channel]:
    """Channels from ``inputdataconfig.json``; without that file, every directory under ``input/data``."""
    data = _read_json(paths.input_data_config_file, "input data config")
    channels: dict[str, Channel] = {}
    if data is None:
        if paths.data_dir.is_dir():
            for child in sorted(paths.data_dir.iterdir()):
                if child.is_dir():
                    channels[child.name] = Channel(name=child.name, path=child)
        return channels
    if not isinstance(data, dict):
        raise ConfigError(f"input data config {paths.input_data_config_file} must hold a JSON object")
    for name, spec in data.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"input data config channel {name!r} must be a JSON object, got {spec!r}")
        mode = spec.get("TrainingInputMode", "File")
        if mode not in INPUT_MODES:
            raise ConfigError(
                f"input data config channel {name!r}: TrainingInputMode={mode!r} is not allowed; "
                f"allowed: {', '.join(INPUT_MODES)}"
            )
        override = env.get(f"SM_CHANNEL_{name.upper().replace('-', '_').replace('.', '_')}")
        path = Path(override) if override and mode != "Pipe" else paths.data_dir / name
        channels[name] = Channel(
            name=name,
            mode=mode,
            distribution=spec.get("S3DistributionType", "FullyReplicated"),
            content_type=spec.get("ContentType"),
            path=path,
        )
    return channels


def load(environ: Mapping[str, str] | None = None) -> SageMakerEnv:
    """Read the SageMaker contract from the files under the root and the environment."""
    env = os.environ if environ is None else environ
    paths = Paths.from_env(env)
    num_cpus = _int_env(env, "SM_NUM_CPUS") or len(os.sched_getaffinity(0))
    return SageMakerEnv(
        paths=paths,
        hyperparameters=load_hyperparameters(paths, env),
        resource=load_resource_config(paths, env),
        channels=load_channels(paths, env),
        num_gpus=_int_env(env, "SM_NUM_GPUS"),
        num_cpus=num_cpus,
        model_dir=Path(env.get("SM_MODEL_DIR") or paths.model_dir),
        output_data_dir=Path(env.get("SM_OUTPUT_DATA_DIR") or paths.output_data_dir),
        job_name=env.get("TRAINING_JOB_NAME"),
    )


def is_fifo(path: Path) -> bool:
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except FileNotFoundError:
        return False
