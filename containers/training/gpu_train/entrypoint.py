"""The container's entry point: ``train`` (the built-in trainer), ``launch`` (any training script),
``gpu-check`` and ``shard``.

``train``:

1. reads the SageMaker contract (config files, ``SM_*``) and validates the hyperparameters;
2. prints the GPU facts and fails at once when the instance should have GPUs but torch cannot use them;
3. checks the training channel exists;
4. runs one training process in-process when the cluster has one process in total, otherwise starts
   ``torchrun`` with one process per GPU on every host (static rendezvous on the first host of
   ``resourceconfig.json``, or on ``MASTER_ADDR`` when the job's environment sets it, as ``launch`` does: hosts
   that share a machine) with the training toolkit's EFA and NCCL settings
   (:func:`gpu_train.launcher.torchrun_env`), forwarding SIGTERM/SIGINT to it;
5. exits 0 when the model is written, 143 when stopped by SIGTERM (after a checkpoint), 1 on failure
   with the cause in ``/opt/ml/output/failure`` (also when an epoch trains no step: see
   ``Trainer._end_of_epoch``).

``launch --entry-point PATH``: runs a script from the ``code`` channel the way SageMaker script mode does
(:mod:`gpu_train.launcher`, which also holds the torchrun command, the signal forwarding and the Pipe-mode
demultiplexers that ``train`` uses).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from gpu_train import gpu_check, hyperparameters, sagemaker
from gpu_train.errors import ConfigError, TrainingError
from gpu_train.failure import startup_failed
from gpu_train.launcher import (
    DEFAULT_MASTER_PORT,
    distributed_env,
    exit_status,
    run_forwarding_signals,
    start_pipe_demuxes,
    torchrun_command,
    torchrun_env,
)
from gpu_train.process import EXIT_FAILED, EXIT_OK, StopFlag, setup_logging

log = logging.getLogger("gpu_train")


def _processes_per_host(hp: hyperparameters.Hyperparameters, facts: gpu_check.GpuFacts) -> int:
    """``processes_per_host``, else one per GPU (1 without GPUs). Where torch sees GPUs, each process needs its own
    (NCCL runs one process per GPU): more processes than GPUs is a :class:`ConfigError` naming the GPUs."""
    gpus = facts.device_count
    if not hp.processes_per_host:
        return max(1, gpus)
    if 0 < gpus < hp.processes_per_host:
        raise ConfigError(
            f"hyperparameter processes_per_host={hp.processes_per_host} is not allowed on this host: the built-in "
            f"trainer runs one process per GPU (NCCL) and torch sees {gpus} GPU{'' if gpus == 1 else 's'} "
            f"({gpu_check.device_names(facts)}); allowed: 0 (one per GPU) or at most {gpus}, or "
            "CUDA_VISIBLE_DEVICES='' in the job's environment to train on the CPU"
        )
    return hp.processes_per_host


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
        facts = gpu_check.startup_check(  # imports torch only when the host shows signs of an NVIDIA GPU
            setting=hp.expect_gpu, instance_type=env.resource.current_instance_type, environ=env_vars
        )
        env.channel(hp.train_channel)  # fail before any process starts when it is missing
        nproc = _processes_per_host(hp, facts)
        world = nproc * env.resource.num_hosts
    except Exception as exc:
        return startup_failed(exc, paths.failure_file, log)

    if world == 1:
        from gpu_train import worker

        return worker.run(env, hp, stop)

    child_env = dict(env_vars)
    distributed_env(child_env, env.resource)
    torchrun_env(child_env, env.resource.current_instance_type)
    demuxes = start_pipe_demuxes(env, (hp.train_channel, hp.validation_channel), nproc, child_env)
    port, addr = int(env_vars.get("MASTER_PORT") or DEFAULT_MASTER_PORT), env_vars.get("MASTER_ADDR")
    cmd = torchrun_command(env.resource, nproc, master_port=port, master_addr=addr)
    log.info("starting %d processes on %d hosts: %s", world, env.resource.num_hosts, " ".join(cmd))
    code, forwarded = run_forwarding_signals(cmd, child_env)
    return exit_status(code, forwarded=forwarded, stop=stop, demuxes=demuxes, paths=paths, what="torchrun")


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
    if args_list[:1] == ["launch"]:
        # `python3 -m gpu_train launch --entry-point train.py ...`: any script, SageMaker script-mode style.
        from gpu_train import launcher

        return launcher.main(args_list[1:])
    parser = argparse.ArgumentParser(prog="gpu_train", description="GPU training runtime (SageMaker contract)")
    parser.add_argument(
        "command",
        nargs="?",
        default="train",
        choices=("train", "launch", "gpu-check", "shard"),
        help="what to run (default: train, the built-in trainer; `launch --entry-point PATH ...` runs your script "
        "from the 'code' channel; `shard SRC DEST ...` packs raw files into training shards)",
    )
    args = parser.parse_args(args_list)
    setup_logging()
    if args.command == "gpu-check":
        return gpu_check_command()
    return train()
