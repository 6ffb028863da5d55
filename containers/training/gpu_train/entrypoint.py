"""The container's entry point: ``train`` (what SageMaker runs) and ``gpu-check``.

``train``:

1. reads the SageMaker contract (config files, ``SM_*``) and validates the hyperparameters;
2. prints the GPU facts and fails at once when the instance should have GPUs but torch cannot use them;
3. checks the training channel exists;
4. runs one training process in-process when the cluster has one process in total, otherwise starts
   ``torchrun`` with one process per GPU on every host (static rendezvous on the first host of
   ``resourceconfig.json``), forwarding SIGTERM/SIGINT to it;
5. exits 0 when the model is written, 143 when stopped by SIGTERM (after a checkpoint), 1 on failure
   with the cause in ``/opt/ml/output/failure`` (also when an epoch trains no step: see
   ``Trainer._end_of_epoch``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from gpu_train import gpu_check, hyperparameters, sagemaker
from gpu_train.errors import TrainingError
from gpu_train.failure import format_failure, truncate, write_failure
from gpu_train.pipe import PIPE_DIR_ENV, PipeDemux
from gpu_train.process import EXIT_FAILED, EXIT_OK, EXIT_STOPPED, StopFlag, setup_logging

log = logging.getLogger("gpu_train")

DEFAULT_MASTER_PORT = 29500
# SageMaker ends a job 120 s after SIGTERM: "To stop a job, SageMaker sends the algorithm the SIGTERM signal,
# which delays job termination for 120 seconds" (SageMaker API Reference, StopTrainingJob and StoppingCondition,
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html; the same text in botocore
# 1.44.5's sagemaker model). Leave the training processes most of that window; a process waiting for data stops
# at once (see StopFlag.interruptible).
STOP_GRACE_S = 110


def _processes_per_host(hp: hyperparameters.Hyperparameters, facts: gpu_check.GpuFacts) -> int:
    if hp.processes_per_host:
        return hp.processes_per_host
    return max(1, facts.device_count)


def torchrun_command(
    resource: sagemaker.ResourceConfig, nproc: int, *, master_port: int = DEFAULT_MASTER_PORT
) -> list[str]:
    """The torchrun command for this host: all hosts of the resource config, ``nproc`` processes each."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if resource.num_hosts == 1:
        cmd += ["--standalone"]
    else:
        cmd += [
            f"--nnodes={resource.num_hosts}",
            f"--node_rank={resource.host_rank}",
            f"--master_addr={resource.leader}",
            f"--master_port={master_port}",
        ]
    return [*cmd, "-m", "gpu_train.worker"]


def _launch(cmd: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run torchrun, forwarding SIGTERM/SIGINT; returns (exit code, whether a stop was forwarded)."""
    process = subprocess.Popen(cmd, env=env)
    stopped: dict[str, float] = {}

    def forward(signum: int, _frame: FrameType | None) -> None:
        stopped.setdefault("at", time.monotonic())
        if process.poll() is None:
            process.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                return process.wait(timeout=1.0), "at" in stopped
            except subprocess.TimeoutExpired:
                if "at" in stopped and time.monotonic() - stopped["at"] > STOP_GRACE_S + 5:
                    log.error("training processes did not stop %d s after SIGTERM: killing them", STOP_GRACE_S)
                    process.kill()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_pipe_demuxes(
    env: sagemaker.SageMakerEnv, hp: hyperparameters.Hyperparameters, nproc: int, child_env: dict[str, str]
) -> list[PipeDemux]:
    """One demultiplexer per Pipe-mode channel the job reads, when a host runs several processes."""
    if nproc == 1:
        return []
    demuxes = []
    directory = Path(tempfile.mkdtemp(prefix="gpu_train_pipes_"))
    for name in (hp.train_channel, hp.validation_channel):
        channel = env.channels.get(name)
        if channel is None or not channel.is_pipe:
            continue
        demux = PipeDemux(channel, directory, nproc, host_rank=env.resource.host_rank, num_hosts=env.resource.num_hosts)
        demux.start()
        demuxes.append(demux)
    if demuxes:
        child_env[PIPE_DIR_ENV] = str(directory)
        log.info("Pipe mode: splitting %s among %d processes per host", [d.channel.name for d in demuxes], nproc)
    return demuxes


def train(environ: dict[str, str] | None = None, *, install_signals: bool = True) -> int:
    """The ``train`` command; returns the process exit code.

    ``environ`` replaces ``os.environ`` (tests); ``install_signals=False`` leaves the caller's SIGTERM and
    SIGINT handlers alone (the stop flag then only reacts to code).
    """
    env_vars = dict(os.environ if environ is None else environ)
    paths = sagemaker.Paths.from_env(env_vars)
    stop = StopFlag().install() if install_signals else StopFlag()
    try:
        env = sagemaker.load(env_vars)
        hp = hyperparameters.parse(env.hyperparameters)
        facts = gpu_check.collect()  # imports torch only when the host shows signs of an NVIDIA GPU
        expectation = gpu_check.expected_gpus(
            setting=hp.expect_gpu,
            instance_type=env.resource.current_instance_type,
            environ=env_vars,
            facts=facts,
        )
        if expectation.count != 0 and not facts.torch_checked:
            facts = gpu_check.collect(import_torch=True)
        log.info("%s", gpu_check.report(facts, expectation))
        gpu_check.check(expectation, facts)
        env.channel(hp.train_channel)  # fail before any process starts when it is missing
        nproc = _processes_per_host(hp, facts)
        world = nproc * env.resource.num_hosts
    except Exception as exc:
        if not isinstance(exc, TrainingError):
            log.exception("start-up failed")
        log.error("%s", format_failure(exc))
        write_failure(paths.failure_file, format_failure(exc))
        return EXIT_FAILED

    if world == 1:
        from gpu_train import worker

        return worker.run(env, hp, stop)

    child_env = dict(env_vars)
    child_env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(STOP_GRACE_S))
    if env.resource.network_interface_name:
        child_env.setdefault("NCCL_SOCKET_IFNAME", env.resource.network_interface_name)
        child_env.setdefault("GLOO_SOCKET_IFNAME", env.resource.network_interface_name)
    demuxes = _start_pipe_demuxes(env, hp, nproc, child_env)
    cmd = torchrun_command(env.resource, nproc, master_port=int(env_vars.get("MASTER_PORT", DEFAULT_MASTER_PORT)))
    log.info("starting %d processes on %d hosts: %s", world, env.resource.num_hosts, " ".join(cmd))
    code, forwarded = _launch(cmd, child_env)
    for demux in demuxes:
        demux.stop.set()
        if demux.error is not None and not paths.failure_file.exists():
            write_failure(paths.failure_file, format_failure(demux.error))
    if code == 0:
        return EXIT_OK
    if paths.failure_file.exists():
        return EXIT_FAILED
    if forwarded or stop.requested:
        return EXIT_STOPPED
    reason = (
        f"torchrun exited with code {code} and no training process reported a cause; see the job log "
        "(a process killed by SIGKILL is often the kernel's out-of-memory killer)"
    )
    write_failure(paths.failure_file, truncate(reason))
    return EXIT_FAILED


def gpu_check_command(environ: dict[str, str] | None = None) -> int:
    facts = gpu_check.collect()
    expectation = gpu_check.expected_gpus(environ=environ, facts=facts)
    print(gpu_check.report(facts, expectation))
    try:
        gpu_check.check(expectation, facts)
    except TrainingError as exc:
        print(f"FAILED: {exc}")
        return EXIT_FAILED
    print("OK")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["shard"]:
        # `python3 -m gpu_train shard SRC DEST ...`: the training pipeline's prepare step (processing job).
        from gpu_train import shard_cli

        return shard_cli.main(args_list[1:])
    parser = argparse.ArgumentParser(prog="gpu_train", description="GPU training runtime (SageMaker contract)")
    parser.add_argument(
        "command",
        nargs="?",
        default="train",
        choices=("train", "gpu-check", "shard"),
        help="what to run (default: train; `shard SRC DEST ...` packs raw files into training shards)",
    )
    args = parser.parse_args(args_list)
    setup_logging()
    if args.command == "gpu-check":
        return gpu_check_command()
    return train()
