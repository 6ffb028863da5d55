"""The training runtime on a real NVIDIA GPU (``make gpu-check`` runs these on a GPU host; skipped elsewhere).

* the built-in trainer through the launcher (the default code), ``SM_NUM_GPUS=1``: trains on ``cuda`` with the
  trainer's mixed precision (bf16 where the GPU supports it, else fp16), writes the model, the loss stays finite;
* a bring-your-own script under torchrun sees CUDA, takes its GPU from ``LOCAL_RANK`` and runs an NCCL all-reduce;
* ``SM_NUM_GPUS`` above the GPUs torch sees fails before the script, naming the GPUs;
* the built-in trainer refuses more processes per host than GPUs, and two hosts of a job that share one GPU
  (``gpuctl train --local`` with ``InstanceCount`` 2 on a one-GPU machine), with errors naming the GPU instead of
  CUDA's "invalid device ordinal" or NCCL's "Duplicate GPU detected".

Each runs the real processes in a few seconds to a few tens of seconds.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

TRAINING_DIR = Path(__file__).resolve().parents[3] / "containers" / "training"

HP = {"epochs": "1", "batch_size": "32", "arch": "resnet_tiny", "width": "8", "log_steps": "2",
      "checkpoint_steps": "0", "num_workers": "0"}  # fmt: skip


def _env(root: Path, **extra: str) -> dict[str, str]:
    """A job's environment: the repository's runtime importable, no SM_/GPU_TRAIN_ leftovers, one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "GPU_TRAIN_"))}
    paths = [str(TRAINING_DIR), env.get("PYTHONPATH", "")]
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        GPU_TRAIN_ROOT=str(root),
        SM_NUM_CPUS="1",
        **extra,
    )
    return env


def _run(cmd: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run(
        cmd, cwd=str(TRAINING_DIR), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stdout, time.monotonic() - started


def _launch(root: Path, *args: str, **extra: str) -> tuple[int, str, float]:
    """``python -m gpu_train launch ARGS`` (a job's ContainerEntrypoint)."""
    return _run([sys.executable, "-m", "gpu_train", "launch", *args], _env(root, **extra))


def _code(root: Path, files: dict[str, str]) -> None:
    code = root / "input" / "data" / "code"
    code.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (code / name).write_text(text)


def _config(root: Path, channels: tuple[str, ...], *, hyperparameters: dict[str, str], host: str = "algo-1",
            hosts: tuple[str, ...] = ("algo-1",)) -> None:  # fmt: skip
    config = root / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    data = {name: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"} for name in channels}
    (config / "inputdataconfig.json").write_text(json.dumps(data))
    resource = {"current_host": host, "hosts": list(hosts), "network_interface_name": "lo"}
    (config / "resourceconfig.json").write_text(json.dumps(resource))


def _visible() -> str:
    """How the GPU check reports this machine's ``CUDA_VISIBLE_DEVICES`` (the jobs here inherit it)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "CUDA_VISIBLE_DEVICES is not set" if listed is None else f"CUDA_VISIBLE_DEVICES={listed!r}"


def _failure(root: Path) -> str:
    path = root / "output" / "failure"
    return path.read_text().strip() if path.exists() else ""


def test_built_in_trainer_trains_on_the_gpu_with_mixed_precision(make_root: Callable[..., Any]) -> None:
    root = make_root(HP, channels={"train": "File", "code": "File"})
    code_dir = root.root / "input" / "data" / "code"
    code_dir.mkdir()
    shutil.copy(TRAINING_DIR / "default_code" / "train.py", code_dir / "train.py")
    rc, output, _ = _launch(root.root, "--entry-point", "train.py", SM_NUM_GPUS="1")
    assert rc == 0, output
    assert "expected: 1 GPUs (SM_NUM_GPUS=1)" in output and "cuda:0 " in output
    amp = "torch.bfloat16" if torch.cuda.is_bf16_supported() else "torch.float16"
    assert "on cuda x 1 processes, batch 32/process" in output and f"amp={amp}, 192 samples" in output, output
    losses = [float(line.split("loss=")[1].split()[0]) for line in output.splitlines() if line.startswith("epoch=")]
    assert losses and all(math.isfinite(loss) for loss in losses), output
    assert "epoch 0: 6 steps trained 192 of 192 samples of channel 'train'" in output
    state = torch.load(root.model_dir / "model.pt", map_location="cpu", weights_only=True)
    weights = [t for t in state.values() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    assert weights and all(bool(torch.isfinite(t).all()) for t in weights)
    assert not root.failure.exists(), output


GPU_SCRIPT = """
import json, os
import torch
import torch.distributed as dist

assert torch.cuda.is_available(), "torch sees no GPU"
local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun
device = torch.device("cuda", local_rank)
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)
total = torch.ones(4, device=device) * (dist.get_rank() + 1)
dist.all_reduce(total)
seen = {"local_rank": local_rank, "device": str(torch.cuda.current_device()), "sum": total.sum().item(),
        "world": dist.get_world_size(), "backend": dist.get_backend(), "gpus": os.environ["SM_NUM_GPUS"],
        "name": torch.cuda.get_device_name(device)}
dist.destroy_process_group()
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
"""


def test_a_script_under_torchrun_gets_its_gpu_from_local_rank(tmp_path: Path) -> None:
    root = tmp_path / "opt_ml"
    _config(root, ("code",), hyperparameters={"processes_per_host": "1"})
    _code(root, {"train.py": GPU_SCRIPT})
    rc, output, _ = _launch(root, "--entry-point", "train.py", "--distribution", "torchrun", SM_NUM_GPUS="1")
    assert rc == 0, output
    assert "--nproc_per_node=1 --standalone -m gpu_train.script_runner" in output
    seen = json.loads((root / "model" / "seen.json").read_text())
    assert seen == {"local_rank": 0, "device": "0", "sum": 4.0, "world": 1, "backend": "nccl", "gpus": "1",
                    "name": torch.cuda.get_device_name(0)}  # fmt: skip
    assert not _failure(root), output


def test_more_gpus_expected_than_torch_sees_fails_before_the_script_naming_them(tmp_path: Path) -> None:
    seen = torch.cuda.device_count()
    root = tmp_path / "opt_ml"
    _config(root, ("code",), hyperparameters={})
    _code(root, {"train.py": "raise SystemExit('must not run')\n"})
    rc, output, seconds = _launch(root, "--entry-point", "train.py", SM_NUM_GPUS=str(seen + 1))
    assert rc == 1, output
    names = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(seen))
    assert _failure(root).startswith(
        f"GpuCheckError: {seen + 1} GPUs expected (SM_NUM_GPUS={seen + 1}) but torch sees {seen}: {names} "
        f"({_visible()}); allowed: expect at most {seen} here (SM_NUM_GPUS, expect_gpu), or an "
        f"instance with {seen + 1} GPUs."
    )
    assert "must not run" not in output and seconds < 30, output


def test_the_built_in_trainer_refuses_more_processes_per_host_than_gpus(make_root: Callable[..., Any]) -> None:
    seen = torch.cuda.device_count()
    root = make_root({**HP, "processes_per_host": str(seen + 1)})
    rc, output, seconds = _run([sys.executable, "-m", "gpu_train", "train"], _env(root.root))
    assert rc == 1, output
    names = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(seen))
    assert root.failure_text() == (
        f"ConfigError: hyperparameter processes_per_host={seen + 1} is not allowed on this host: the built-in trainer "
        f"runs one process per GPU (NCCL) and torch sees {seen} GPU{'' if seen == 1 else 's'} ({names}); allowed: 0 "
        f"(one per GPU) or at most {seen}, or CUDA_VISIBLE_DEVICES='' in the job's environment to train on the CPU"
    )
    assert "torch.distributed.run" not in output and seconds < 30, output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_hosts_of_a_job_on_one_gpu_fail_naming_the_shared_gpu(tmp_path: Path, shards: Path) -> None:
    """Two "hosts" (their own trees and ``train`` processes, rendezvous on 127.0.0.1) on this machine, one
    process each on its cuda:0: every process fails before NCCL with the GPU they would share."""
    hosts = ("algo-1", "algo-2")
    roots = [tmp_path / host / "opt_ml" for host in hosts]
    port = str(_free_port())
    processes = []
    for host, root in zip(hosts, roots, strict=True):
        _config(root, ("train",), hyperparameters={**HP, "processes_per_host": "1"}, host=host, hosts=hosts)
        shutil.copytree(shards, root / "input" / "data" / "train")
        env = _env(root, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable, "-m", "gpu_train", "train"]
        out = subprocess.PIPE
        processes.append(
            subprocess.Popen(cmd, cwd=TRAINING_DIR, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        )
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=60)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    output = "\n".join(outputs)
    assert [p.returncode for p in processes] == [1, 1], output
    for root in roots:
        assert _failure(root).startswith(
            f"GpuCheckError: training processes (ranks 0, 1) would share GPU cuda:0 {torch.cuda.get_device_name(0)} "
            f"of machine {socket.gethostname()}: NCCL runs one process per GPU"
        ), output
    assert "epoch=" not in output
