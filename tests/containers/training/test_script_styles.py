"""Both common PyTorch script styles run unchanged through ``python -m gpu_train launch``, on one host and on two
emulated hosts (their own /opt/ml trees and launchers on this machine, ``current_host`` algo-1 and algo-2,
rendezvous on ``MASTER_ADDR=127.0.0.1``), on the CPU with gloo (``CUDA_VISIBLE_DEVICES=''``):

* SageMaker's PyTorch examples: the script reads ``SM_HOSTS``/``SM_CURRENT_HOST``, sets ``MASTER_ADDR`` and
  ``MASTER_PORT`` itself, starts its workers with ``torch.multiprocessing.spawn`` and joins with
  ``rank = host_rank * per_host + local``: ``--distribution auto`` runs it once per host (no torchrun);
* torchrun style: the script reads ``LOCAL_RANK`` and calls ``init_process_group()`` from the environment:
  ``--distribution auto`` runs it under torchrun, also with one process in all;
* the style rule on its own (:func:`gpu_train.launcher.script_style`) and the plan it gives.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_train import launcher, sagemaker

TRAINING_DIR = Path(__file__).resolve().parents[3] / "containers" / "training"

# In the style of SageMaker's PyTorch examples (mnist.py of amazon-sagemaker-examples): the hosts and this host's
# place come from the toolkit's variables; the script starts one worker per GPU (here --workers, on the CPU).
SPAWN_SCRIPT = """
import argparse, json, os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(local_rank, args):
    host_rank = args.hosts.index(args.current_host)
    rank = host_rank * args.workers + local_rank
    world_size = len(args.hosts) * args.workers
    dist.init_process_group(backend="gloo", rank=rank, world_size=world_size)
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    seen = {"rank": rank, "world": world_size, "sum": total.item(), "host": args.current_host,
            "torchrun": "TORCHELASTIC_RUN_ID" in os.environ}
    with open(os.path.join(args.model_dir, f"rank-{rank}.json"), "w") as f:
        json.dump(seen, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--hosts", type=list, default=json.loads(os.environ["SM_HOSTS"]))
    parser.add_argument("--current-host", type=str, default=os.environ["SM_CURRENT_HOST"])
    parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", args.hosts[0])  # the job's environment wins (hosts on one machine)
    os.environ.setdefault("MASTER_PORT", "29500")
    mp.spawn(worker, args=(args,), nprocs=args.workers)
"""

TORCHRUN_SCRIPT = """
import argparse, json, os
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
seen = {"rank": rank, "world": world, "sum": total.item(), "host": os.environ["SM_CURRENT_HOST"],
        "torchrun": "TORCHELASTIC_RUN_ID" in os.environ, "local_rank": local_rank}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(seen, f)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tree(root: Path, script: str, hyperparameters: dict[str, str], host: str, hosts: tuple[str, ...]) -> Path:
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    (config / "inputdataconfig.json").write_text(json.dumps({"code": {"TrainingInputMode": "File"}}))
    resource = {"current_host": host, "hosts": list(hosts), "network_interface_name": "lo"}
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    code = root / "input" / "data" / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text(script)
    return root


def _run_hosts(
    tmp_path: Path, script: str, hyperparameters: dict[str, str], hosts: tuple[str, ...], **extra: str
) -> tuple[list[dict[str, Any]], str]:
    """One launcher per host, all at once; returns every rank's record (by rank) and the joined output."""
    port = str(_free_port())
    processes, roots = [], []
    for host in hosts:
        root = _tree(tmp_path / host / "opt_ml", script, hyperparameters, host, hosts)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "GPU_TRAIN_"))}
        env.update(
            PYTHONPATH=os.pathsep.join(p for p in (str(TRAINING_DIR), env.get("PYTHONPATH", "")) if p),
            GPU_TRAIN_ROOT=str(root), SM_NUM_CPUS="1", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **extra,
        )  # fmt: skip
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "gpu_train", "launch", "--entry-point", "train.py"],
                cwd=str(TRAINING_DIR),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        roots.append(root)
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=90)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    output = "\n".join(outputs)
    assert [p.returncode for p in processes] == [0] * len(hosts), output
    ranks = [json.loads(p.read_text()) for root in roots for p in (root / "model").glob("rank-*.json")]
    return sorted(ranks, key=lambda r: r["rank"]), output


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [("algo-1",), ("algo-1", "algo-2")], ids=["one-host", "two-hosts"])
def test_a_sagemaker_example_style_script_runs_once_per_host_and_spawns_its_workers(
    tmp_path: Path, hosts: tuple[str, ...]
) -> None:
    ranks, output = _run_hosts(tmp_path, SPAWN_SCRIPT, {"workers": "2"}, hosts)
    world = 2 * len(hosts)
    assert [r["rank"] for r in ranks] == list(range(world)), output
    assert {r["world"] for r in ranks} == {world} and {r["sum"] for r in ranks} == {world * (world + 1) / 2}
    assert [r["host"] for r in ranks] == [h for h in hosts for _ in range(2)]
    assert not any(r["torchrun"] for r in ranks) and "torch.distributed.run" not in output
    assert "train.py starts its own processes: --distribution auto runs it once per host" in output
    assert f"as {len(hosts)} processes on {len(hosts)} hosts" in output  # one per host


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hosts", "per_host"), [(("algo-1",), "1"), (("algo-1",), "2"), (("algo-1", "algo-2"), "1")],
    ids=["one-process", "one-host", "two-hosts"],
)  # fmt: skip
def test_a_torchrun_style_script_runs_under_torchrun(tmp_path: Path, hosts: tuple[str, ...], per_host: str) -> None:
    extra = {"GPU_TRAIN_PROCESSES_PER_HOST": per_host}
    ranks, output = _run_hosts(tmp_path, TORCHRUN_SCRIPT, {"epochs": "1"}, hosts, **extra)
    world = int(per_host) * len(hosts)
    assert [r["rank"] for r in ranks] == list(range(world)), output
    assert {r["world"] for r in ranks} == {world} and {r["sum"] for r in ranks} == {world * (world + 1) / 2}
    assert all(r["torchrun"] for r in ranks) and "torch.distributed.run" in output
    assert [r["local_rank"] for r in ranks] == [i for _ in hosts for i in range(int(per_host))]


@pytest.mark.parametrize(
    ("source", "style"),
    [
        (SPAWN_SCRIPT, "own"),
        ("import json, os\nhosts = json.loads(os.environ['SM_HOSTS'])\n", "own"),  # one process per host
        (TORCHRUN_SCRIPT, "torchrun"),
        (
            "import torch.multiprocessing as mp\nmp.set_start_method('spawn')\nlocal = os.environ['LOCAL_RANK']\n",
            "torchrun",
        ),
        ("print('hello')\n", "plain"),
    ],
    ids=["spawn", "sm-hosts", "local-rank", "start-method-is-not-spawn", "plain"],
)
def test_script_style(tmp_path: Path, source: str, style: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    assert launcher.script_style(script) == style
    assert launcher.script_style(tmp_path / "missing.py") == "plain"


@pytest.mark.parametrize(
    ("source", "per_host", "distribution", "expected"),
    [
        (SPAWN_SCRIPT, None, "auto", (1, False)),  # once per host, on any number of GPUs
        (SPAWN_SCRIPT, "2", "auto", (2, True)),  # the job asked for processes per host
        (SPAWN_SCRIPT, None, "torchrun", (4, True)),
        (TORCHRUN_SCRIPT, None, "auto", (4, True)),
        (TORCHRUN_SCRIPT, None, "single", (1, False)),
        ("print('hello')\n", None, "auto", (4, True)),  # as before: one per GPU
    ],
)
def test_the_plan_follows_the_style(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    per_host: str | None,
    distribution: str,
    expected: tuple[int, bool],
) -> None:
    from gpu_train import gpu_check

    devices = [gpu_check.Device(i, "NVIDIA A10G", "8.6", 22.0) for i in range(4)]
    facts = gpu_check.GpuFacts(torch_version="2.8.0", torch_cuda="12.9", devices=devices, torch_checked=True)
    monkeypatch.setattr(gpu_check, "startup_check", lambda **_: facts)
    root = _tree(tmp_path / "opt_ml", source, {}, "algo-1", ("algo-1", "algo-2"))
    environ = {"GPU_TRAIN_ROOT": str(root), "SM_NUM_CPUS": "8"}
    if per_host:
        environ["GPU_TRAIN_PROCESSES_PER_HOST"] = per_host
    script = root / "input" / "data" / "code" / "train.py"
    job = launcher.plan(sagemaker.load(environ), environ, framework="pytorch", distribution=distribution,
                        script=script)  # fmt: skip
    assert (job.processes_per_host, job.torchrun) == expected
