"""``python -m gpu_train launch``: run any training script the way SageMaker script mode does.

SageMaker's framework images start a user's script through the SageMaker training toolkit (pip package
``sagemaker-training``): the code is unpacked, ``requirements.txt`` installed, the hyperparameters become
``--name value`` arguments and the script finds the job in ``SM_*`` variables (the toolkit's
`ENVIRONMENT_VARIABLES.md <https://github.com/aws/sagemaker-training-toolkit/blob/master/ENVIRONMENT_VARIABLES.md>`_
and its ``sagemaker_training.environment`` / ``mapping`` modules). This module does the same without the toolkit,
in any image with Python >= 3.10 (the platform's training image, the stock AWS PyTorch and TensorFlow training
images), for a job whose ``ContainerEntrypoint`` is overridden::

    python -m gpu_train launch --entry-point train.py [--distribution auto|torchrun|single]
                               [--framework auto|pytorch|tensorflow] [--package-index yes|no]

1. **Code**: the input channel ``code``. When it holds one ``.tar.gz``/``.tgz``/``.zip`` file, that archive is
   unpacked (refusing absolute paths, ``..`` and links that lead outside) into ``<root>/code``; otherwise the
   channel's directory is the code directory. ``--entry-point`` is a relative path to a ``.py`` file in it.
2. **requirements.txt** at the top of the code: installed from the code's own ``wheels/`` folder with
   ``pip --no-index`` (no network needed), or from the package index with ``--package-index yes``; otherwise the
   job fails at once, because a private VPC without NAT (or network isolation) has no route to PyPI and pip
   would only time out.
3. **Framework** (``auto``: torch when importable, else TensorFlow) and its GPU fail-fast check
   (:func:`gpu_check.startup_check`, :func:`gpu_check.tensorflow_startup_check`).
4. **Processes**: PyTorch runs ``processes_per_host`` (default one per GPU) processes per host, through
   ``torchrun`` when the job has more than one process in total (``--distribution auto``), always
   (``torchrun``) or never (``single``: one plain process per host). TensorFlow runs one process per host, with
   ``TF_CONFIG`` for ``MultiWorkerMirroredStrategy`` on several hosts and ``TF_FORCE_GPU_ALLOW_GROWTH=true``.
   Each process is ``python -m gpu_train.script_runner SCRIPT ARGS...``, which records the script's failure.
   The launcher's settings (:data:`LAUNCHER_SETTINGS`: ``processes_per_host``, ``num_workers``, ``expect_gpu``)
   come from the job's hyperparameter of that name when it has one, else from ``GPU_TRAIN_<NAME>`` of the job's
   environment (where the platform puts them for your own code), else their defaults.
5. **The script's view**: exactly the job's hyperparameters (less the SDK's ``sagemaker_*``), as the SageMaker
   training toolkit gives them: JSON-decoded, ``--name value`` sorted by name, ``SM_HPS``, ``SM_HP_<NAME>``,
   ``SM_USER_ARGS`` and the toolkit's other ``SM_*`` variables (:func:`script_environment`).
6. **Exit status**: ``0`` done; ``143`` stopped by SIGTERM/SIGINT (forwarded to the script, which has
   :data:`STOP_GRACE_S` seconds to checkpoint); ``1`` failed, with the cause in ``<root>/output/failure``. Every
   start-up problem (no code, a bad entry point, requirements, framework, GPUs) ends there too.

A torchrun launch also gets the training toolkit's EFA and NCCL settings (:func:`torchrun_env`).

The module also holds the process plumbing that ``train`` shares: :func:`torchrun_command`, :func:`torchrun_env`,
:func:`run_forwarding_signals`, :func:`start_pipe_demuxes` and :func:`exit_status`. It imports neither torch nor
numpy, so ``launch`` starts in any image.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import gpu_train
from gpu_train import gpu_check, hyperparameters, sagemaker, toolkit_env
from gpu_train.errors import ChannelError, ConfigError
from gpu_train.failure import (
    cause,
    format_failure,
    prepare_rank_dir,
    startup_failed,
    take_records,
    truncate,
    write_failure,
)
from gpu_train.process import EXIT_FAILED, EXIT_OK, EXIT_STOPPED, StopFlag, StopRequested, setup_logging

if TYPE_CHECKING:
    from gpu_train.pipe import PipeDemux

log = logging.getLogger("gpu_train")

DEFAULT_MASTER_PORT = 29500
# SageMaker ends a job 120 s after SIGTERM: "To stop a job, SageMaker sends the algorithm the SIGTERM signal,
# which delays job termination for 120 seconds" (SageMaker API Reference, StopTrainingJob and StoppingCondition,
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html; the same text in botocore
# 1.44.5's sagemaker model). Leave the training processes most of that window; a process waiting for data stops
# at once (see StopFlag.interruptible).
STOP_GRACE_S = 110

FRAMEWORKS = ("auto", "pytorch", "tensorflow")
DISTRIBUTIONS = ("auto", "torchrun", "single")
CODE_CHANNEL = "code"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
# The launcher's own settings: each is read from the job's hyperparameter of that name when the job names one
# (the built-in trainer's hyperparameters always do), else from the variable of the job's Environment (where the
# platform puts them for your own code, so a script gets exactly the hyperparameters its user gave), else the
# default of gpu_train.hyperparameters. Reading one never removes it from what the script sees.
PROCESSES_PER_HOST_ENV = "GPU_TRAIN_PROCESSES_PER_HOST"
NUM_WORKERS_ENV = "GPU_TRAIN_NUM_WORKERS"
EXPECT_GPU_ENV = "GPU_TRAIN_EXPECT_GPU"
LAUNCHER_SETTINGS = {
    "processes_per_host": PROCESSES_PER_HOST_ENV,
    "num_workers": NUM_WORKERS_ENV,
    "expect_gpu": EXPECT_GPU_ENV,
}
PIP_TIMEOUT_S = 900
# The port of each TensorFlow worker in TF_CONFIG (any free port works; every host uses the same one).
TF_WORKER_PORT = 2222
CHECKPOINT_DIR_ENV = "GPU_TRAIN_CHECKPOINT_DIR"
NO_PACKAGE_INDEX = (
    "requirements.txt lists packages, but this job has no route to a package index (a private VPC without NAT, "
    "or network isolation) and the code has no wheels/ folder; allowed: vendor them with `gpuctl vendor <source "
    "dir>` (writes wheels/), or give the job a route to a package index, or remove requirements.txt"
)


# ------------------------------------------------------------------ process plumbing shared with `train`


def torchrun_command(
    resource: sagemaker.ResourceConfig,
    nproc: int,
    *,
    master_port: int = DEFAULT_MASTER_PORT,
    master_addr: str | None = None,
    target: Sequence[str] = ("-m", "gpu_train.script_runner", "-m", "gpu_train.worker"),
) -> list[str]:
    """The torchrun command for this host: all hosts of the resource config, ``nproc`` processes each, each
    running ``target`` (``-m module args...``; by default the built-in trainer's process, watched by
    :mod:`gpu_train.script_runner` so that a rank killed outright is recorded). ``master_addr`` replaces the
    resource config's first host as the rendezvous address (``MASTER_ADDR``; e.g. 127.0.0.1 when two "hosts"
    share a machine).

    Static rendezvous as in PyTorch's torchrun documentation ("Stacked single-node multi-worker" uses
    ``--standalone``; several nodes use ``--nnodes``, ``--node_rank``, ``--master_addr``, ``--master_port``):
    https://docs.pytorch.org/docs/stable/elastic/run.html
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if resource.num_hosts == 1:
        cmd += ["--standalone"]
    else:
        cmd += [
            f"--nnodes={resource.num_hosts}",
            f"--node_rank={resource.host_rank}",
            f"--master_addr={master_addr or resource.leader}",
            f"--master_port={master_port}",
        ]
    return [*cmd, *target]


def distributed_env(child_env: dict[str, str], resource: sagemaker.ResourceConfig) -> None:
    """What every PyTorch launch adds (unless the job's environment sets it): torchrun waits
    :data:`STOP_GRACE_S` for its processes after SIGTERM (its default is 30 s), and NCCL and gloo use the
    resource config's network interface. Also an empty rank-record directory (:func:`failure.prepare_rank_dir`),
    from which :func:`exit_status` names the first process that failed."""
    prepare_rank_dir(sagemaker.Paths.from_env(child_env).failure_file, child_env)
    child_env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(STOP_GRACE_S))
    if resource.network_interface_name:
        child_env.setdefault("NCCL_SOCKET_IFNAME", resource.network_interface_name)
        child_env.setdefault("GLOO_SOCKET_IFNAME", resource.network_interface_name)


# The instance types on which the SageMaker training toolkit (pip package sagemaker-training 5.1.4,
# sagemaker_training/__init__.py: SM_EFA_NCCL_INSTANCES, SM_EFA_RDMA_INSTANCES) turns on EFA for NCCL, and the
# subset on which it also turns on EFA's device RDMA. Kept here because the launcher runs in images without the
# toolkit; tests/containers/training/test_launcher.py compares both lists with the toolkit's.
EFA_RDMA_INSTANCE_TYPES = frozenset(
    {
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
        "ml.p5.48xlarge",
        "ml.p5e.48xlarge",
        "ml.trn1.32xlarge",
        "ml.p6e-gb200.36xlarge",
    }
)
EFA_NCCL_INSTANCE_TYPES = EFA_RDMA_INSTANCE_TYPES | {
    "ml.g4dn.8xlarge",
    "ml.g4dn.12xlarge",
    "ml.g5.48xlarge",
    "ml.p3dn.24xlarge",
}


def torchrun_env(child_env: dict[str, str], instance_type: str | None) -> dict[str, str]:
    """What the training toolkit's torchrun launch sets (``TorchDistributedRunner._setup`` in
    sagemaker_training/torch_distributed.py, the DLC's ``torch_distributed`` distribution), for any number of
    hosts: ``FI_PROVIDER=efa`` on :data:`EFA_NCCL_INSTANCE_TYPES`; ``FI_EFA_USE_DEVICE_RDMA=1`` and
    ``RDMAV_FORK_SAFE=1`` on :data:`EFA_RDMA_INSTANCE_TYPES`; ``NCCL_PROTO=simple`` on every instance type.

    As in the toolkit, which writes them into ``os.environ`` before it starts torchrun, these values replace
    the job's own (a replaced value is logged). Returns what was set."""
    values: dict[str, str] = {}
    if instance_type in EFA_NCCL_INSTANCE_TYPES:
        values["FI_PROVIDER"] = "efa"
    if instance_type in EFA_RDMA_INSTANCE_TYPES:
        values["FI_EFA_USE_DEVICE_RDMA"] = "1"
        values["RDMAV_FORK_SAFE"] = "1"
    values["NCCL_PROTO"] = "simple"
    for name, value in values.items():
        if child_env.get(name, value) != value:
            log.warning(
                "%s=%s from the job's environment replaced by %s=%s, as the SageMaker training toolkit does for "
                "torchrun on %s",
                name, child_env[name], name, value, instance_type or "this instance type",
            )  # fmt: skip
        child_env[name] = value
    return values


def run_forwarding_signals(cmd: list[str], env: dict[str, str], *, cwd: Path | None = None) -> tuple[int, bool]:
    """Run ``cmd`` (torchrun or one script process) in a process group of its own, forwarding SIGTERM/SIGINT to
    that group (as torchrun signals each of its processes' groups: a script and the runner that watches it both
    get it); returns (exit code, whether a stop was forwarded). Processes that have not stopped
    :data:`STOP_GRACE_S` + 5 s after the signal are killed, before SageMaker's 120 s are over."""
    process = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True)
    stopped: dict[str, float] = {}

    def signal_group(signum: int) -> None:
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            if process.poll() is None:
                process.send_signal(signum)

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopped.setdefault("at", time.monotonic())
        if process.poll() is None:
            signal_group(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                return process.wait(timeout=1.0), "at" in stopped
            except subprocess.TimeoutExpired:
                if "at" in stopped and time.monotonic() - stopped["at"] > STOP_GRACE_S + 5:
                    log.error("training processes did not stop %d s after SIGTERM: killing them", STOP_GRACE_S)
                    signal_group(signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def start_pipe_demuxes(
    env: sagemaker.SageMakerEnv, names: Iterable[str], nproc: int, child_env: dict[str, str]
) -> list[PipeDemux]:
    """One demultiplexer per Pipe-mode channel among ``names`` when a host runs several processes (one FIFO
    cannot feed several readers); the processes find their FIFOs under ``GPU_TRAIN_PIPE_DIR``."""
    channels = [env.channels[n] for n in names if n in env.channels and env.channels[n].is_pipe]
    if nproc == 1 or not channels:
        return []
    from gpu_train.pipe import PIPE_DIR_ENV, PipeDemux  # shards: numpy and xxhash, only when needed

    directory = Path(tempfile.mkdtemp(prefix="gpu_train_pipes_"))
    demuxes = []
    for channel in channels:
        demux = PipeDemux(channel, directory, nproc, host_rank=env.resource.host_rank, num_hosts=env.resource.num_hosts)
        demux.start()
        demuxes.append(demux)
    child_env[PIPE_DIR_ENV] = str(directory)
    log.info("Pipe mode: splitting %s among %d processes per host", [d.channel.name for d in demuxes], nproc)
    return demuxes


def exit_status(
    code: int,
    *,
    forwarded: bool,
    stop: StopFlag,
    demuxes: Sequence[PipeDemux],
    paths: sagemaker.Paths,
    what: str,
) -> int:
    """The launcher's exit status once ``what`` (torchrun, or the script) exited with ``code``: 0 done, 143
    stopped, 1 failed with a failure file (a demultiplexer's error, the first rank that failed according to the
    rank records of :mod:`gpu_train.script_runner`, or a fallback naming ``what``). After a stop, only a rank
    that failed before it was asked to stop makes the job fail."""
    records = take_records(paths.failure_file)
    for demux in demuxes:
        demux.stop.set()
        if demux.error is not None and code != 0:
            write_failure(paths.failure_file, format_failure(demux.error))
    if code == 0:
        return EXIT_OK
    stopping = code == EXIT_STOPPED or forwarded or stop.requested
    if records and not (stopping and all(r.stopped or r.exitcode == 0 for r in records)):
        text = cause(records)
        if text is not None:
            log.error("%s", text)
            write_failure(paths.failure_file, text)
    if paths.failure_file.exists():
        return EXIT_FAILED
    if stopping:
        return EXIT_STOPPED
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    reason = (
        f"{what} {how} and no training process reported a cause; see the job log "
        "(a process killed by SIGKILL is often the kernel's out-of-memory killer)"
    )
    write_failure(paths.failure_file, truncate(reason))
    return EXIT_FAILED


# ------------------------------------------------------------------------------------------------ code


def _outside(archive: Path, name: str, dest: Path, why: str) -> ChannelError:
    return ChannelError(
        f"code archive {archive.name}: member {name!r} is not allowed ({why}; the code directory is {dest}); "
        "allowed: relative paths inside the archive, and links that point inside it"
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _check_name(archive: Path, name: str, dest: Path) -> None:
    posix = PurePosixPath(name.replace("\\", "/"))
    if posix.is_absolute() or re.match(r"^[A-Za-z]:", name):
        raise _outside(archive, name, dest, "an absolute path")
    if ".." in posix.parts:
        raise _outside(archive, name, dest, "a '..' path leads outside the code directory")


def _extract_tar(archive: Path, dest: Path) -> int:
    root = os.path.realpath(dest)
    # Python 3.12+ (and security releases back to 3.8.17) also apply tarfile's "data" filter: a second check.
    extra: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    count = 0
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            _check_name(archive, member.name, dest)
            if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                raise _outside(archive, member.name, dest, "a device, FIFO or other special file")
            # Where the member lands, following links already extracted: nothing may be written through one.
            if not _inside(os.path.realpath(os.path.join(root, os.path.dirname(member.name))), root):
                raise _outside(archive, member.name, dest, "its directory is a link that leads outside")
            if member.issym() or member.islnk():
                if PurePosixPath(member.linkname).is_absolute():
                    raise _outside(archive, member.name, dest, f"a link to the absolute path {member.linkname}")
                base = os.path.dirname(member.name) if member.issym() else ""
                if not _inside(os.path.realpath(os.path.join(root, base, member.linkname)), root):
                    raise _outside(archive, member.name, dest, f"a link to {member.linkname}, outside the archive")
            tar.extract(member, dest, **extra)
            count += member.isfile()
    for link in (p for p in dest.rglob("*") if p.is_symlink()):  # a link made outside by a later one
        if not _inside(os.path.realpath(link), root):
            name = str(link.relative_to(dest))
            raise _outside(archive, name, dest, f"a link that resolves to {os.path.realpath(link)}")
    return count


def _extract_zip(archive: Path, dest: Path) -> int:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            _check_name(archive, info.filename, dest)
        zf.extractall(dest)
    return sum(not info.is_dir() for info in infos)


def is_code_archive(path: Path) -> bool:
    """A zip or a (gzip-compressed) tar, told by its content: a CDK file asset keeps only the last suffix
    (``<hash>.gz`` for ``sourcedir.tar.gz``), so the name cannot be trusted."""
    return path.name.endswith(ARCHIVE_SUFFIXES) or zipfile.is_zipfile(path) or tarfile.is_tarfile(path)


def extract_archive(archive: Path, dest: Path) -> int:
    """Unpack a code archive into ``dest`` safely; returns the number of files. A member with an absolute path,
    a ``..`` component, a link leading outside ``dest`` or a special file fails with a :class:`ChannelError`
    naming it."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if zipfile.is_zipfile(archive):
            return _extract_zip(archive, dest)
        return _extract_tar(archive, dest)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise ChannelError(f"code archive {archive} cannot be read: {type(exc).__name__}: {exc}") from exc


def prepare_code(env: sagemaker.SageMakerEnv) -> Path:
    """The code directory: the ``code`` channel's one archive unpacked into ``<root>/code``, or the channel's
    directory itself."""
    channel = env.channels.get(CODE_CHANNEL)
    if channel is None:
        known = ", ".join(sorted(env.channels)) or "none"
        raise ChannelError(
            f"input channel {CODE_CHANNEL!r} is missing: configured channels: {known}; the launcher runs your "
            f"script from a channel named {CODE_CHANNEL!r} (a directory of code, or one .tar.gz, .tgz or .zip file)"
        )
    if channel.is_pipe:
        raise ChannelError(
            f"input channel {CODE_CHANNEL!r} is in Pipe mode; allowed: File or FastFile (code is read as files)"
        )
    if not channel.path.is_dir():
        raise ChannelError(f"input channel {CODE_CHANNEL!r} ({channel.mode} mode) has no directory at {channel.path}")
    entries = list(channel.path.iterdir())
    if len(entries) == 1 and entries[0].is_file() and is_code_archive(entries[0]):
        count = extract_archive(entries[0], env.paths.code_dir)
        log.info("code: %s unpacked into %s (%d files)", entries[0], env.paths.code_dir, count)
        return env.paths.code_dir
    log.info("code: %s", channel.path)
    return channel.path


def resolve_entry_point(code_dir: Path, entry: str) -> Path:
    """``code_dir/entry``, which must be a ``.py`` file given by a relative path inside ``code_dir``."""
    rel = PurePosixPath(entry)
    why = None
    if not entry:
        why = "empty"
    elif rel.is_absolute():
        why = "an absolute path"
    elif ".." in rel.parts:
        why = "a '..' path leads outside the code directory"
    elif rel.suffix != ".py":
        why = "not a .py file"
    elif not (code_dir / rel).is_file():
        why = "no such file"
    if why is not None:
        scripts = sorted(p.name for p in code_dir.glob("*.py") if p.is_file()) if code_dir.is_dir() else []
        raise ConfigError(
            f"entry point {entry!r} is not allowed ({why}); allowed: a relative path to a .py file in the code "
            f"directory {code_dir}, whose top holds these .py files: {', '.join(scripts) or 'none'}"
        )
    return code_dir / rel


# -------------------------------------------------------------------------------------- requirements


def lists_packages(requirements: Path) -> bool:
    """True when ``requirements.txt`` has a line other than blanks and comments (pip's rule: ``#`` at the
    start of a line or after whitespace starts a comment)."""
    return any(re.sub(r"(^|\s)#.*$", "", line).strip() for line in requirements.read_text().splitlines())


def requirements_command(code_dir: Path, *, package_index: bool) -> list[str] | None:
    """The pip command for the code's ``requirements.txt`` (None: nothing to install)."""
    requirements = code_dir / "requirements.txt"
    if not requirements.is_file() or not lists_packages(requirements):
        return None
    wheels = code_dir / "wheels"
    pip = [sys.executable, "-m", "pip", "install"]
    if wheels.is_dir() and any(wheels.glob("*.whl")):
        return [*pip, "--no-index", "--find-links", str(wheels), "-r", str(requirements)]
    if package_index:
        return [*pip, "-r", str(requirements)]
    raise ConfigError(NO_PACKAGE_INDEX)


def _pip_error(lines: Sequence[str]) -> str:
    errors = [line for line in lines if line.startswith("ERROR:")]
    rest = [line for line in lines if line.strip()]
    return (errors or rest or ["(no output)"])[-1].strip()


def run_pip(
    cmd: list[str], *, cwd: Path, env: Mapping[str, str], stop: StopFlag, timeout_s: float = PIP_TIMEOUT_S
) -> None:
    """Run pip, copying its output to the log; a failure names pip's last error line. SIGTERM stops it."""
    log.info("installing requirements: %s", " ".join(cmd))
    pip_env = dict(env)
    pip_env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    pip_env.setdefault("PYTHONUNBUFFERED", "1")
    process = subprocess.Popen(
        cmd, cwd=cwd, env=pip_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert process.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=50)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        process.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    try:
        with stop.interruptible():
            for line in process.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                tail.append(line.rstrip("\n"))
            code = process.wait()
    except StopRequested:
        process.terminate()
        process.wait(timeout=30)
        raise
    finally:
        timer.cancel()
        process.stdout.close()
    if timed_out.is_set():
        raise ConfigError(
            f"pip install -r requirements.txt did not finish in {timeout_s:g} s (last output: {_pip_error(tail)}); "
            "vendor the packages with `gpuctl vendor <source dir>` (writes wheels/) or check the route to the "
            "package index"
        )
    if code != 0:
        raise ConfigError(
            f"pip install -r requirements.txt failed with exit code {code}: {_pip_error(tail)} (pip's whole output "
            "is in the job log)"
        )


# ----------------------------------------------------------------------------------- framework, processes


def detect_framework(setting: str) -> str:
    """``pytorch`` or ``tensorflow``: ``auto`` picks torch when it is importable, else TensorFlow."""
    importlib.invalidate_caches()  # requirements.txt may just have installed one
    present = {
        "pytorch": importlib.util.find_spec("torch") is not None,
        "tensorflow": importlib.util.find_spec("tensorflow") is not None,
    }
    where = f"{sys.executable} ({_interpreter()})"
    if setting == "auto":
        for framework in ("pytorch", "tensorflow"):
            if present[framework]:
                return framework
        raise ConfigError(
            f"no training framework found: neither torch nor tensorflow can be imported by {where}; allowed: an "
            "image with PyTorch or TensorFlow, or a framework listed in requirements.txt"
        )
    if setting not in present:
        raise ConfigError(f"--framework {setting!r} is not allowed; allowed: {', '.join(FRAMEWORKS)}")
    if not present[setting]:
        module = "torch" if setting == "pytorch" else "tensorflow"
        raise ConfigError(
            f"--framework {setting}, but {module} cannot be imported by {where}; allowed: an image that has it, "
            "a requirements.txt that installs it, or --framework auto"
        )
    return setting


def _interpreter() -> str:
    import platform

    return f"{platform.python_implementation()} {sys.version_info[0]}.{sys.version_info[1]} {platform.machine()}"


@dataclass(frozen=True)
class Plan:
    """How the script runs on this host."""

    framework: str
    processes_per_host: int
    torchrun: bool
    num_gpus: int
    num_workers: int
    style: str = "plain"  # how the script starts its processes (script_style), for --distribution auto


def setting(raw: Mapping[str, str], environ: Mapping[str, str], name: str) -> Any:
    """One of :data:`LAUNCHER_SETTINGS`, parsed and checked like ``train`` does: the job's hyperparameter
    ``name`` when it has one, else the job's environment variable, else the default."""
    spec = hyperparameters.HYPERPARAMETERS[name]
    variable = LAUNCHER_SETTINGS[name]
    if name in raw:
        return hyperparameters.parse_value(name, raw[name], spec)
    text = environ.get(variable, "").strip()
    return spec.default if not text else hyperparameters.parse_value(f"{name} (environment {variable})", text, spec)


# How a PyTorch script starts its processes (script_style), which --distribution auto follows.
STYLE_TORCHRUN = "torchrun"  # reads LOCAL_RANK: torchrun starts it, one process per GPU
STYLE_OWN = "own"  # SageMaker's PyTorch examples: reads SM_HOSTS/SM_CURRENT_HOST or calls spawn(): once per host
STYLE_PLAIN = "plain"
_SPAWN = re.compile(r"\bspawn\s*\(")
_LOCAL_RANK = re.compile(r"\bLOCAL_RANK\b")
_SM_HOSTS = re.compile(r"\bSM_(HOSTS|CURRENT_HOST)\b")


def script_style(script: Path | None) -> str:
    """How the script starts its processes, told by its source: :data:`STYLE_OWN` when it starts them itself
    (``torch.multiprocessing.spawn(...)``, or one process per host that reads ``SM_HOSTS``/``SM_CURRENT_HOST`` for
    its rank, as SageMaker's PyTorch examples do), else :data:`STYLE_TORCHRUN` when it reads ``LOCAL_RANK`` (a
    process started by torchrun), else :data:`STYLE_PLAIN`."""
    try:
        text = script.read_text(encoding="utf-8", errors="replace") if script is not None else ""
    except OSError:
        return STYLE_PLAIN
    if _SPAWN.search(text):
        return STYLE_OWN
    if _LOCAL_RANK.search(text):
        return STYLE_TORCHRUN
    return STYLE_OWN if _SM_HOSTS.search(text) else STYLE_PLAIN


def plan(
    env: sagemaker.SageMakerEnv,
    environ: Mapping[str, str],
    *,
    framework: str,
    distribution: str,
    script: Path | None = None,
) -> Plan:
    """Run the GPU check of ``framework`` and size the processes (``processes_per_host``, else one per GPU).

    PyTorch with ``--distribution auto`` follows the script's style (:func:`script_style`): a script that starts
    its own processes runs once per host (the toolkit's ``pytorch`` script mode without ``torch_distributed``)
    unless ``processes_per_host`` is set; a script that reads ``LOCAL_RANK`` always runs under torchrun; any other
    under torchrun when the job has more than one process in total."""
    raw = env.hyperparameters
    per_host = int(setting(raw, environ, "processes_per_host"))
    workers = int(setting(raw, environ, "num_workers"))
    check = {"setting": setting(raw, environ, "expect_gpu"), "instance_type": env.resource.current_instance_type}
    if distribution not in DISTRIBUTIONS:
        raise ConfigError(f"--distribution {distribution!r} is not allowed; allowed: {', '.join(DISTRIBUTIONS)}")
    style = STYLE_PLAIN
    if framework == "tensorflow":
        if distribution == "torchrun":
            raise ConfigError(
                "--distribution torchrun is not allowed with TensorFlow; allowed: auto or single (TensorFlow runs "
                "one process per host; MultiWorkerMirroredStrategy uses every GPU of it)"
            )
        if per_host > 1:
            raise ConfigError(
                f"hyperparameter processes_per_host={per_host} is not allowed with TensorFlow; allowed: 0 or 1 "
                "(one process per host; MultiWorkerMirroredStrategy uses every GPU of it)"
            )
        tf_facts = gpu_check.tensorflow_startup_check(environ=environ, **check)
        nproc, torchrun, gpus = 1, False, tf_facts.device_count
    else:
        facts = gpu_check.startup_check(environ=environ, **check)
        gpus = facts.device_count
        style = script_style(script)
        if distribution == "single":
            if per_host > 1:
                raise ConfigError(
                    f"hyperparameter processes_per_host={per_host} is not allowed with --distribution single (one "
                    "plain process per host); allowed: 0 or 1, or --distribution auto or torchrun"
                )
            nproc, torchrun = 1, False
        elif distribution == "auto" and style == STYLE_OWN and not per_host:
            nproc, torchrun = 1, False
        else:
            nproc = per_host or max(1, gpus)
            auto_torchrun = style == STYLE_TORCHRUN or nproc * env.resource.num_hosts > 1
            torchrun = distribution == "torchrun" or auto_torchrun
            if 0 < gpus < nproc:
                # Allowed (a script may share GPUs over gloo), but NCCL refuses two processes on one GPU.
                log.warning(
                    "hyperparameter processes_per_host=%d starts more processes than the %d GPU(s) torch sees (%s): "
                    "LOCAL_RANK %d and up have no GPU of their own, and NCCL stops with 'Duplicate GPU detected' "
                    "when two processes use one GPU; use gloo in the script, processes_per_host at most %d, or "
                    "CUDA_VISIBLE_DEVICES='' to train on the CPU",
                    nproc, gpus, gpu_check.device_names(facts), gpus, gpus,
                )  # fmt: skip
    num_workers = workers if workers >= 0 else hyperparameters.auto_workers(env.num_cpus, nproc)
    return Plan(framework, nproc, torchrun, gpus, num_workers, style)


# ------------------------------------------------------------------------------------- the script's view


def env_name(name: str) -> str:
    """A channel or hyperparameter name as it appears in an ``SM_CHANNEL_*`` / ``SM_HP_*`` variable."""
    return name.upper().replace("-", "_").replace(".", "_")


def decode_hyperparameter(raw: str) -> Any:
    """A value of ``hyperparameters.json`` as the SageMaker training toolkit gives it to a script: JSON-decoded
    (``"0.01"`` -> 0.01, ``"\\"adamw\\""`` -> ``"adamw"``, ``"true"`` -> True), else the text itself
    (sagemaker_training/environment.py, ``read_hyperparameters``)."""
    try:
        return json.loads(raw)
    except (ValueError, TypeError):
        return raw


def script_hyperparameters(raw: Mapping[str, str]) -> dict[str, Any]:
    """The job's hyperparameters as the script sees them (``SM_HPS``): every one the job has, JSON-decoded,
    without the SageMaker SDK's ``sagemaker_*`` names (the toolkit's ``Environment.hyperparameters``)."""
    return {k: decode_hyperparameter(v) for k, v in raw.items() if not k.startswith(hyperparameters.IGNORED_PREFIXES)}


def _argument_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return "" if value is None else str(value)


def script_arguments(raw: Mapping[str, str]) -> list[str]:
    """``--name value`` (``-n value`` for a one-letter name) for every hyperparameter of
    :func:`script_hyperparameters`, sorted by name, each value as ``str()`` of its decoded form: the toolkit's
    ``mapping.to_cmd_args`` (so ``"0.01"`` arrives as ``0.01`` and ``"true"`` as ``True``)."""
    args: list[str] = []
    for name, value in sorted(script_hyperparameters(raw).items()):
        args += [f"--{name}" if len(name) > 1 else f"-{name}", _argument_value(value)]
    return args


def environment_value(value: Any) -> str:
    """A decoded hyperparameter in ``SM_HP_<NAME>`` (strings as they are, anything else compact JSON) or the
    whole ``SM_HPS`` object: the toolkit's ``mapping.to_env_vars``."""
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def gpu_train_dirs() -> list[str]:
    """The directories ``gpu_train`` was imported from (so scripts can ``from gpu_train.data import ...``)."""
    return [str(Path(p).resolve().parent) for p in gpu_train.__path__]


def script_environment(
    env: sagemaker.SageMakerEnv,
    base: Mapping[str, str],
    *,
    entry: str,
    code_dir: Path,
    args: Sequence[str],
    job: Plan,
) -> dict[str, str]:
    """``base`` plus the SageMaker training toolkit's ``SM_*`` variables (the job's own values win) and the
    platform's ``GPU_TRAIN_*``; ``PYTHONPATH`` starts with the code directory and ``gpu_train``'s directory."""
    paths = env.paths
    hps = script_hyperparameters(env.hyperparameters)
    values = {
        "SM_MODEL_DIR": str(env.model_dir),
        "SM_CHANNELS": json.dumps(sorted(env.channels)),
        **{f"SM_CHANNEL_{env_name(name)}": str(channel.path) for name, channel in env.channels.items()},
        "SM_HPS": environment_value(hps),
        **{f"SM_HP_{env_name(name)}": environment_value(value) for name, value in hps.items()},
        "SM_HOSTS": json.dumps(list(env.resource.hosts)),
        "SM_CURRENT_HOST": env.resource.current_host,
        "SM_NUM_GPUS": str(job.num_gpus),
        "SM_NUM_CPUS": str(env.num_cpus),
        "SM_OUTPUT_DIR": str(paths.output_dir),
        "SM_OUTPUT_DATA_DIR": str(env.output_data_dir),
        "SM_INPUT_DIR": str(paths.root / "input"),
        "SM_INPUT_CONFIG_DIR": str(paths.config_dir),
        "SM_USER_ENTRY_POINT": entry,
        "SM_USER_ARGS": environment_value(list(args)),
        CHECKPOINT_DIR_ENV: str(paths.checkpoint_dir),
        "PYTHONUNBUFFERED": "1",
    }
    if env.resource.current_instance_type:
        values["SM_CURRENT_INSTANCE_TYPE"] = env.resource.current_instance_type
    if env.resource.network_interface_name:
        values["SM_NETWORK_INTERFACE_NAME"] = env.resource.network_interface_name
    # The rest of the training toolkit's variables, in its formats (SM_TRAINING_ENV, SM_RESOURCE_CONFIG, ...).
    values.update(toolkit_env.variables(env, base, entry=entry, num_gpus=job.num_gpus))
    child = dict(base)
    for name, value in values.items():
        child.setdefault(name, value)
    child[NUM_WORKERS_ENV] = str(job.num_workers)  # the job's own value was read by plan(): the resolved count
    python_path = [str(code_dir), *gpu_train_dirs(), *base.get("PYTHONPATH", "").split(os.pathsep)]
    child["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in python_path if p))
    return child


def tensorflow_env(child_env: dict[str, str], resource: sagemaker.ResourceConfig) -> None:
    """``TF_FORCE_GPU_ALLOW_GROWTH=true`` ("Limiting GPU memory growth", https://www.tensorflow.org/guide/gpu:
    TensorFlow otherwise maps nearly all GPU memory at start) and, on several hosts, ``TF_CONFIG`` for
    ``MultiWorkerMirroredStrategy`` (one worker per host, "Multi-worker training with Keras",
    https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras). The job's environment wins."""
    child_env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    if resource.num_hosts > 1:
        config = {
            "cluster": {"worker": [f"{host}:{TF_WORKER_PORT}" for host in resource.hosts]},
            "task": {"type": "worker", "index": resource.host_rank},
        }
        child_env.setdefault("TF_CONFIG", json.dumps(config))


# ---------------------------------------------------------------------------------------------- launch


def launch(
    entry_point: str,
    *,
    distribution: str = "auto",
    framework: str = "auto",
    package_index: bool = False,
    environ: Mapping[str, str] | None = None,
    install_signals: bool = True,
) -> int:
    """The ``launch`` command; returns the exit status (0 done, 143 stopped, 1 failed with a failure file).

    ``environ`` replaces ``os.environ`` (tests); ``install_signals=False`` leaves the caller's SIGTERM and SIGINT
    handlers alone until the script starts.
    """
    env_vars = dict(os.environ if environ is None else environ)
    paths = sagemaker.Paths.from_env(env_vars)
    stop = StopFlag().install() if install_signals else StopFlag()
    try:
        env = sagemaker.load(env_vars)
        code_dir = prepare_code(env)
        script = resolve_entry_point(code_dir, entry_point)
        pip = requirements_command(code_dir, package_index=package_index)
        if pip is not None:
            run_pip(pip, cwd=code_dir, env=env_vars, stop=stop)
        job = plan(env, env_vars, framework=detect_framework(framework), distribution=distribution, script=script)
        for directory in (env.model_dir, env.output_data_dir, paths.checkpoint_dir):
            directory.mkdir(parents=True, exist_ok=True)
    except StopRequested:
        log.warning("stopped by %s before the training script started", stop.signal_name)
        return EXIT_STOPPED
    except Exception as exc:
        return startup_failed(exc, paths.failure_file, log)
    if stop.requested:
        log.warning("stopped by %s before the training script started", stop.signal_name)
        return EXIT_STOPPED

    args = script_arguments(env.hyperparameters)
    child_env = script_environment(env, env_vars, entry=entry_point, code_dir=code_dir, args=args, job=job)
    runner = ["-m", "gpu_train.script_runner", str(script), *args]
    demuxes: list[PipeDemux] = []
    if job.framework == "tensorflow":
        prepare_rank_dir(paths.failure_file, child_env)
        tensorflow_env(child_env, env.resource)
    else:
        distributed_env(child_env, env.resource)
        pipes = [name for name in env.channels if name != CODE_CHANNEL]
        demuxes = start_pipe_demuxes(env, pipes, job.processes_per_host, child_env)
    if job.torchrun:
        torchrun_env(child_env, env.resource.current_instance_type)
        port, addr = int(env_vars.get("MASTER_PORT") or DEFAULT_MASTER_PORT), env_vars.get("MASTER_ADDR")
        cmd = torchrun_command(env.resource, job.processes_per_host, master_port=port, master_addr=addr, target=runner)
    else:
        cmd = [sys.executable, *runner]
    world = job.processes_per_host * env.resource.num_hosts
    if job.style != STYLE_PLAIN and distribution == "auto":
        how = "starts its own processes" if job.style == STYLE_OWN else "reads LOCAL_RANK"
        log.info("%s %s: --distribution auto runs it %s", entry_point, how,
                 "once per host" if job.style == STYLE_OWN and not job.torchrun else "under torchrun")  # fmt: skip
    log.info(
        "starting %s (%s) as %d processes on %d hosts: %s", entry_point, job.framework, world, env.resource.num_hosts,
        " ".join(cmd),
    )  # fmt: skip
    code, forwarded = run_forwarding_signals(cmd, child_env, cwd=code_dir)
    what = "torchrun" if job.torchrun else entry_point
    return exit_status(code, forwarded=forwarded, stop=stop, demuxes=demuxes, paths=paths, what=what)


class _Parser(argparse.ArgumentParser):
    """Command-line mistakes are start-up problems too: they end in the failure file, not only on stderr."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"gpu_train launch: {message}; usage: {self.format_usage().strip()}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpu_train launch --entry-point PATH [...]``."""
    parser = _Parser(
        prog="python -m gpu_train launch",
        description="Run a training script from the 'code' channel the way SageMaker script mode does.",
    )
    parser.add_argument("--entry-point", required=True, help="the script: a .py path relative to the code")
    parser.add_argument(
        "--distribution",
        choices=DISTRIBUTIONS,
        default="auto",
        help="PyTorch: torchrun when the job has more than one process (auto), always (torchrun), or one plain "
        "process per host (single)",
    )
    parser.add_argument("--framework", choices=FRAMEWORKS, default="auto", help="auto: torch if importable, else TF")
    parser.add_argument(
        "--package-index",
        choices=("yes", "no"),
        default="no",
        help="yes: the job can reach a package index, so requirements.txt may be installed from it",
    )
    setup_logging()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        log.error("%s", format_failure(exc))
        write_failure(sagemaker.Paths.from_env().failure_file, format_failure(exc))
        return EXIT_FAILED
    return launch(
        args.entry_point,
        distribution=args.distribution,
        framework=args.framework,
        package_index=args.package_index == "yes",
    )
