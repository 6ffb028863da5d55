"""Run a rendered ``CreateTrainingJob`` request on this machine, the way SageMaker runs it, without Docker.

``gpuctl train --local`` and the journey tests use it. For each host of the request (``algo-1`` ...) it builds
a temporary ``/opt/ml`` tree as SageMaker lays it out for a training container ("How Amazon SageMaker Provides
Training Information", SageMaker developer guide): ``input/config/hyperparameters.json`` (the request's
``HyperParameters``), ``resourceconfig.json`` (``current_host``, ``hosts``, ``network_interface_name``),
``inputdataconfig.json`` (one entry per channel: ``TrainingInputMode``, ``S3DistributionType``, ``ContentType``),
and the File-mode channel folders ``input/data/<channel>``; then it starts the request's own
``ContainerEntrypoint`` + ``ContainerArguments`` with ``GPU_TRAIN_ROOT`` pointing at the tree and the request's
``Environment``. After the run it packs ``model/`` into ``model.tar.gz`` as SageMaker does at the end of a job,
and reads ``output/failure`` (SageMaker's ``FailureReason``).

What stays different from SageMaker, on purpose: channel data comes from local folders (``channels``), not
S3; ``python3`` of the entry point is the Python that runs this code (its folder goes first on ``PATH``: it plays
the image's Python, so it needs the framework); the instance type in ``resourceconfig.json`` is ``local``, so the
launcher expects the GPUs this machine has rather than those of the requested type; hosts of a multi-host request
run as processes on 127.0.0.1 (``MASTER_ADDR``), each with its own tree.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_constructs.training_spec.preferences import placement

__all__ = ["LocalHostResult", "LocalJobError", "LocalJobResult", "local_code_channels", "run_local_job"]

#: The instance type the local tree reports: the launcher then expects the GPUs this machine shows.
LOCAL_INSTANCE_TYPE = "local"


class LocalJobError(ValueError):
    """The request cannot run locally as given (a channel without a local folder, ...)."""


@dataclass(frozen=True)
class LocalHostResult:
    """One host's run; ``root`` is its ``/opt/ml`` tree (removed after the run unless ``keep_trees``)."""

    host: str
    root: Path
    exit_code: int
    failure: str | None


@dataclass(frozen=True)
class LocalJobResult:
    """What a local run left: each host's exit code and failure text, and the packed model of the first host."""

    hosts: tuple[LocalHostResult, ...]
    model_tarball: Path | None
    output_dir: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(h.exit_code == 0 for h in self.hosts)

    @property
    def failure(self) -> str | None:
        """The first host's failure text (what SageMaker would show as ``FailureReason``)."""
        return next((h.failure for h in self.hosts if h.failure), None)


def local_code_channels(source_dir: Path | None, entry_point: str) -> dict[str, Path]:
    """The ``code`` and ``sm_drivers`` channels of a local run: the package of ``source_dir`` (``None``: the
    built-in trainer's code) and the launcher zipapp.

    The launcher is built from the platform's training runtime folder where the library has one (a checkout of
    the repository, or gpu-constructs installed from it), else from the ``gpu_train`` package installed next to
    this gpuctl (the ``make wheel`` wheel, used from any folder): that zipapp holds no vendored wheels, as the
    Python that runs it locally has the wheel's own requirements (xxhash). The built-in trainer's code ships
    only with the runtime folder, so without it a local run needs ``source_dir``.
    """
    from gpu_constructs.errors import ValidationError
    from gpu_constructs.training_spec import CODE_CHANNEL, DRIVERS_CHANNEL
    from gpu_constructs.training_spec import code_package as packages

    if source_dir is None and not packages.DEFAULT_CODE_DIR.is_dir():
        raise LocalJobError(
            f"the built-in trainer's code ({packages.DEFAULT_CODE_DIR.name}/) is not installed: it ships with a "
            "checkout of the platform's repository (containers/training) and with gpu-constructs installed from "
            "one, not with the gpuctl wheel; allowed: --source-dir FOLDER (your own training code), or run gpuctl "
            "from a checkout"
        )
    try:
        package_file, _ = packages.ensure_source_package(
            packages.DEFAULT_CODE_DIR if source_dir is None else source_dir, entry_point
        )
        driver = packages.ensure_driver() if packages.DEFAULT_RUNTIME_DIR.is_dir() else _installed_driver()
    except ValidationError as exc:
        raise LocalJobError(str(exc)) from None
    return {CODE_CHANNEL: package_file, DRIVERS_CHANNEL: driver}


def _installed_driver() -> Path:
    """The launcher zipapp of the ``gpu_train`` package this Python imports (no vendored wheels)."""
    import importlib.util

    from gpu_constructs.training_spec.code_package import ensure_driver

    found = importlib.util.find_spec("gpu_train")
    if found is None or found.origin is None:
        raise LocalJobError(
            "the platform's training runtime (the gpu_train package) is not installed with this gpuctl; allowed: "
            "pip install the wheel of make wheel (dist/gpu_platform-*.whl), which holds it"
        )
    with tempfile.TemporaryDirectory(prefix="gpuctl-no-wheels-") as no_wheels:
        return ensure_driver(Path(found.origin).parent.parent, Path(no_wheels))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _channel_config(channel: Mapping[str, Any], default_mode: str) -> dict[str, Any]:
    source = channel.get("DataSource", {}).get("S3DataSource", {})
    config = {
        "TrainingInputMode": channel.get("InputMode", default_mode),
        "S3DistributionType": source.get("S3DataDistributionType", "FullyReplicated"),
        "RecordWrappingType": "None",
    }
    if channel.get("ContentType"):
        config["ContentType"] = channel["ContentType"]
    return config


def _place(source: Path, target: Path) -> None:
    """Put a channel's local data at ``target``: a folder's contents, or one file (a code package)."""
    if source.is_dir():
        shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True)
    elif source.is_file():
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / source.name)
    else:
        raise LocalJobError(f"channel data {source} does not exist; allowed: an existing folder or file")


def build_tree(
    root: Path,
    request: Mapping[str, Any],
    channels: Mapping[str, Path],
    *,
    host: str,
    hosts: list[str],
) -> None:
    """Lay out one host's ``/opt/ml`` tree for ``request`` under ``root``."""
    algorithm = request.get("AlgorithmSpecification", {})
    default_mode = algorithm.get("TrainingInputMode", "File")
    config_dir = root / "input" / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "hyperparameters.json").write_text(json.dumps(dict(request.get("HyperParameters", {}))))
    resource = {
        "current_host": host,
        "hosts": hosts,
        "network_interface_name": "lo",
        "current_instance_type": LOCAL_INSTANCE_TYPE,
        "current_group_name": "homogeneousCluster",
    }
    (config_dir / "resourceconfig.json").write_text(json.dumps(resource))
    data_config = {}
    for channel in request.get("InputDataConfig", []):
        name = channel["ChannelName"]
        data_config[name] = _channel_config(channel, default_mode)
        if data_config[name]["TrainingInputMode"] == "Pipe":
            raise LocalJobError(f"channel {name!r} is in Pipe mode; allowed locally: File or FastFile channels")
        _place(channels[name], root / "input" / "data" / name)
    (config_dir / "inputdataconfig.json").write_text(json.dumps(data_config))
    for folder in ("model", "output/data", "checkpoints"):
        (root / folder).mkdir(parents=True, exist_ok=True)


def missing_channels(request: Mapping[str, Any], channels: Mapping[str, Path]) -> list[str]:
    return [c["ChannelName"] for c in request.get("InputDataConfig", []) if c["ChannelName"] not in channels]


def _command(request: Mapping[str, Any]) -> list[str]:
    algorithm = request.get("AlgorithmSpecification", {})
    entry = list(algorithm.get("ContainerEntrypoint") or [])
    if not entry:
        raise LocalJobError(
            "the request has no ContainerEntrypoint: it runs the image's own entry, which needs the image; "
            "allowed locally: jobs with code (gpuctl train --source-dir, or the setup's default code)"
        )
    return entry + list(algorithm.get("ContainerArguments") or [])


def pack_model(model_dir: Path, tarball: Path) -> Path:
    """``model.tar.gz`` of ``model_dir`` as SageMaker packs ``/opt/ml/model`` at the end of a job (members
    relative to the folder)."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball, "w:gz") as archive:
        for path in sorted(model_dir.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(model_dir)), recursive=False)
    return tarball


def run_local_job(
    request: Mapping[str, Any],
    channels: Mapping[str, str | os.PathLike[str]],
    *,
    output_dir: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    on_start: Callable[[list[subprocess.Popen[bytes]]], None] | None = None,
    keep_trees: bool = False,
    authorize: Callable[[Mapping[str, Any]], Sequence[str]] | None = None,
) -> LocalJobResult:
    """Run ``request`` locally: one process tree per host, each with its own ``/opt/ml`` tree.

    :param channels: channel name -> local folder (or, for ``code``/``sm_drivers``, a package file).
    :param output_dir: where ``model.tar.gz`` and each host's ``failure`` are left (default: a new temp folder).
    :param env: extra environment of the container (after the request's ``Environment``).
    :param on_start: called with the host processes once started (tests send signals through it).
    :param authorize: the downloads and uploads "as the role": called with the request before any channel is
        placed, it returns each request SageMaker would make with the execution role and AWS would deny (for
        example ``gpu_constructs.authz`` evaluating them against a synthesized app's policies); any denial stops the
        run with :class:`LocalJobError`, as SageMaker stops the job while it downloads its input.
    """
    if authorize is not None:
        denied = list(authorize(request))
        if denied:
            raise LocalJobError(
                f"SageMaker would stop job {request.get('TrainingJobName')} before its code runs: the execution role "
                f"{request.get('RoleArn')} is denied {len(denied)} request(s): " + "; ".join(denied)
            )
    paths = {name: Path(value) for name, value in channels.items()}
    missing = missing_channels(request, paths)
    if missing:
        raise LocalJobError(f"channels {missing} have no local data; allowed: --channel NAME=FOLDER for each of them")
    command = _command(request)
    # On a fallback list the local run is the first type's: capacity is always free here.
    count = int(placement(request.get("ResourceConfig", {}))[1] or 1)
    hosts = [f"algo-{i + 1}" for i in range(count)]
    out = Path(output_dir) if output_dir is not None else Path(tempfile.mkdtemp(prefix="gpuctl-local-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpuctl-local-job-"))
    port = str(_free_port())
    processes: list[subprocess.Popen[bytes]] = []
    roots: list[Path] = []
    try:
        for host in hosts:
            root = work / host / "opt" / "ml"
            build_tree(root, request, paths, host=host, hosts=hosts)
            roots.append(root)
            child_env = {**os.environ, **dict(request.get("Environment", {})), **dict(env or {})}
            child_env.update({"GPU_TRAIN_ROOT": str(root), "TRAINING_JOB_NAME": str(request["TrainingJobName"])})
            child_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), child_env.get("PATH", "")])
            if count > 1:
                child_env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
            processes.append(subprocess.Popen(command, env=child_env, start_new_session=True))
        if on_start is not None:
            on_start(processes)
        codes = _wait_all(processes, timeout_s)
        results = []
        for host, root, code in zip(hosts, roots, codes, strict=True):
            failure_file = root / "output" / "failure"
            failure = failure_file.read_text().strip() if failure_file.is_file() else None
            if failure is not None:
                (out / f"failure-{host}").write_text(failure + "\n")
            results.append(LocalHostResult(host, root, code, failure))
        tarball = pack_model(roots[0] / "model", out / "model.tar.gz") if codes[0] == 0 else None
        return LocalJobResult(tuple(results), tarball, out)
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        if not keep_trees:
            shutil.rmtree(work, ignore_errors=True)


#: After one host fails, how long the others may take to notice before they are stopped (a peer of a failed torchrun
#: rendezvous can otherwise wait for its whole timeout).
PEER_GRACE_S = 30.0


def _wait_all(processes: list[subprocess.Popen[bytes]], timeout_s: float | None) -> list[int]:
    """Every host's exit code; a host past ``timeout_s`` is killed (124), and once one host has failed the others
    get :data:`PEER_GRACE_S` to end before they are killed too."""
    start = time.monotonic()
    failed_at: float | None = None
    while any(p.poll() is None for p in processes):
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in processes):
            failed_at = now
        late = timeout_s is not None and now - start > timeout_s
        if late or (failed_at is not None and now - failed_at > PEER_GRACE_S):
            for process in processes:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    process.returncode = 124 if late else process.returncode
            reason = f"ran past {timeout_s} s" if late else f"outlived a failed host by {PEER_GRACE_S:.0f} s"
            print(f"local job: hosts still running {reason} were killed", file=sys.stderr)
            break
        time.sleep(0.2)
    return [int(p.returncode) for p in processes]
