"""The real entry point (``python -m gpu_train train``) in a temporary SageMaker tree.

* train -> checkpoint -> SIGTERM -> resume -> model.tar.gz with the weights of an uninterrupted run (on the CPU);
* 2-process DDP (gloo, on the CPU) through torchrun, reading a Pipe-mode channel through the launcher's
  demultiplexer;
* the failure file for each kind of bad input;
* the MetricDefinitions regexes against the lines the loop really prints.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from gpu_train import entrypoint, metrics

pytestmark = pytest.mark.slow

HP = {"epochs": "2", "batch_size": "16", "arch": "resnet_tiny", "width": "8", "lr": "0.05", "log_steps": "2",
      "checkpoint_steps": "5", "num_workers": "1", "model_tarball": "true"}  # fmt: skip
# The job's environment of a CPU job: hides a GPU of the machine that runs the test from CUDA, so torch trains on
# the CPU there too (and the GPU check expects no GPU: gpu_check.gpus_hidden).
CPU = {"CUDA_VISIBLE_DEVICES": ""}


def _train(root: Any, **extra_env: str) -> int:
    """The ``train`` command in this process (cheaper than a new one); no signal handlers installed."""
    return entrypoint.train({**root.env, **extra_env}, install_signals=False)


def _tar_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _digests(members: dict[str, bytes]) -> dict[str, str]:
    """SHA-256 per member: a mismatch reads as one line per file (a byte diff of the weights takes minutes)."""
    return {name: hashlib.sha256(data).hexdigest() for name, data in members.items()}


def test_sigterm_checkpoint_resume_gives_the_uninterrupted_model(
    make_root: Callable[..., Any], entrypoint: Any, read_state: Callable[[Path], dict[str, Any]]
) -> None:
    """On the CPU (pinned with ``CUDA_VISIBLE_DEVICES=''``), where every kernel is deterministic: the resumed
    model is byte for byte the uninterrupted one. On a GPU, cuDNN's autotuned kernels and atomics make two runs
    differ in the last bits from the first step on, resumed or not, so a byte comparison says nothing there."""
    baseline, interrupted = make_root(HP, name="baseline"), make_root(HP, name="interrupted")
    process = entrypoint.start(interrupted, **CPU)  # the container's process
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("epoch=0 step=6 "):  # past the periodic checkpoint at step 5
            process.send_signal(signal.SIGTERM)  # what SageMaker sends on StopTrainingJob / spot interruption
    assert process.wait(timeout=60) == 143, "".join(lines)
    log = "".join(lines)
    assert "SIGTERM received" in log and not interrupted.failure.exists()
    assert not (interrupted.root / "output" / "data" / "model.tar.gz").exists()
    stopped_at = [n for n in interrupted.checkpoints if n != "checkpoint-000000005.pt"]
    assert interrupted.checkpoints[0] == "checkpoint-000000005.pt" and len(stopped_at) == 1
    step = int(stopped_at[0][len("checkpoint-") : -len(".pt")])
    assert 6 <= step < 24  # stopped mid-run, within a step or two of the signal

    # The restarted job (same entry point) and an uninterrupted run with the same seed: own processes, as this
    # one's torch may already see a GPU.
    for root in (interrupted, baseline):
        code, output = entrypoint.run(root, **CPU)
        assert code == 0, output
    tarballs = [root.root / "output" / "data" / "model.tar.gz" for root in (baseline, interrupted)]
    members = [_tar_members(t) for t in tarballs]
    assert sorted(members[1]) == ["code/inference.py", "code/model.py", "model.pt", "model_config.json"]
    assert _digests(members[0]) == _digests(members[1])  # byte-identical artifacts, weights included
    weights = torch.load(io.BytesIO(members[1]["model.pt"]), weights_only=True)
    config = json.loads(members[1]["model_config.json"])
    assert config["num_classes"] == 3 and config["image_size"] == 32 and config["trained_steps"] == 24
    assert weights.keys() == read_state(interrupted.model_dir / "model.pt").keys()

    # Every MetricDefinitions regex of the training loop parses the lines the process printed.
    metric_lines = [line for line in lines if line.startswith("epoch=")]
    parsed = metrics.parse(metric_lines[-1])
    assert set(parsed) == {
        "train:loss",
        "train:samples_per_sec",
        "train:gpu_util",
        "train:lr",
        "train:data_wait_pct",
        "train:epoch",
    }
    assert parsed["train:epoch"] == 0 and parsed["train:gpu_util"] == 0.0 and parsed["train:samples_per_sec"] > 0
    assert float(metric_lines[-1].split("loss=")[1].split()[0]) == parsed["train:loss"]


def test_two_process_ddp_over_torchrun_with_a_pipe_mode_channel(
    make_root: Callable[..., Any], entrypoint: Any, shards: Path
) -> None:
    """torchrun, 2 processes (gloo); training data from a Pipe-mode FIFO split between them by the
    launcher, validation from File mode split by shards. Pinned to the CPU (``CUDA_VISIBLE_DEVICES=''``): a
    machine with one GPU has no GPU for the second process (the trainer refuses that: see
    test_training_gpu_check.py), and gloo on the CPU is what this test is about."""
    hp = {**HP, "epochs": "1", "processes_per_host": "2", "checkpoint_steps": "0", "num_workers": "0",
          "image_size": "32", "num_classes": "3"}  # fmt: skip
    root = make_root(hp, channels={"train": "Pipe", "validation": "File"}, data=False)
    data_dir = root.root / "input" / "data"
    (data_dir / "validation").symlink_to(shards)
    os.mkfifo(data_dir / "train_0")
    blobs = [p.read_bytes() for p in sorted(shards.glob("shard-*.tar"))]

    def sagemaker_pipe() -> None:
        with open(data_dir / "train_0", "wb") as fifo:
            for blob in blobs:
                fifo.write(blob)

    feeder = threading.Thread(target=sagemaker_pipe, daemon=True)
    feeder.start()
    code, output = entrypoint.run(root, **CPU)
    feeder.join(timeout=10)
    assert code == 0, output
    assert "starting 2 processes on 1 hosts" in output and "--nproc_per_node=2 --standalone" in output
    assert "Pipe mode: splitting ['train'] among 2 processes per host" in output
    assert "on cpu x 2 processes" in output
    steps = [line.split()[1] for line in output.splitlines() if line.startswith("epoch=0 step=")]
    # 16 shards dealt to 2 processes -> 96 samples each / 16 per batch = 6 steps, each over both processes.
    assert steps == ["step=2", "step=4", "step=6"]
    # Counted over both processes: every sample of the epoch trained, none dropped as a partial batch.
    assert "epoch 0: 6 steps trained 192 of 192 samples of channel 'train'\n" in output
    validation = [line for line in output.splitlines() if line.startswith("epoch=0 val_loss=")]
    assert len(validation) == 1 and validation[0].endswith("val_samples=192")  # both halves counted once
    assert root.checkpoints == ["checkpoint-000000006.pt"]
    state = torch.load(root.root / "checkpoints" / "checkpoint-000000006.pt", weights_only=True)
    first, second = state["ranks"]  # one entry per process: each has its own augmentation stream
    assert state["epoch"] == 1 and first["loader"] is None and second["loader"] is None
    assert not torch.equal(first["augment"], second["augment"])
    assert (root.model_dir / "model.pt").exists() and (root.model_dir / "code" / "inference.py").exists()


# ------------------------------------------------------------------------------- failures, in-process


def test_missing_channel_writes_the_failure_file(make_root: Callable[..., Any]) -> None:
    root = make_root(channels={"training": "File"}, data=False)
    assert _train(root) == 1
    assert root.failure_text() == (
        "ChannelError: input channel 'train' is missing: configured channels: training; add a channel named "
        "'train' to InputDataConfig (or set the hyperparameter that names it)"
    )


def test_bad_hyperparameter_writes_the_failure_file_and_exits_non_zero(
    make_root: Callable[..., Any], entrypoint: Any
) -> None:
    root = make_root({"epochs": "2", "batch_size": "sixteen"})
    code, output = entrypoint.run(root)  # the real process: exit status as SageMaker sees it
    assert code == 1
    expected = "HyperparameterError: hyperparameter batch_size='sixteen' is not allowed (not an integer)"
    assert root.failure_text().startswith(expected) and expected in output


def test_gpu_expected_but_absent_fails_before_training(make_root: Callable[..., Any], entrypoint: Any) -> None:
    """``SM_NUM_GPUS=1`` where torch sees no GPU: a CPU build of torch, or (on a GPU machine) a CUDA build whose
    GPUs the job's ``CUDA_VISIBLE_DEVICES=''`` hides. Its own process, as this one's torch may already see one."""
    root = make_root()
    code, output = entrypoint.run(root, SM_NUM_GPUS="1", **CPU)
    assert code == 1, output
    text = root.failure_text()
    assert text.startswith("GpuCheckError: GPUs expected (SM_NUM_GPUS=1) but torch ")
    if torch.version.cuda is None:
        assert "is a CPU-only build" in text
    else:
        assert text.startswith(
            "GpuCheckError: GPUs expected (SM_NUM_GPUS=1) but torch sees none (torch.cuda.is_available() is False): "
            "CUDA_VISIBLE_DEVICES='' hides every GPU from CUDA (unset it). Refusing to train on the CPU."
        )
    assert len(text) <= 1024 and "epoch=" not in output
    assert not root.checkpoints and not root.model_dir.exists()


def test_corrupt_shard_is_named_in_the_failure_file(make_root: Callable[..., Any]) -> None:
    root = make_root({**HP, "epochs": "1", "num_workers": "2", "model_tarball": "false"})
    shard = root.root / "input" / "data" / "train" / "shard-000011.tar"
    data = bytearray(shard.read_bytes())
    data[3000] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert _train(root) == 1
    text = root.failure_text()
    assert text.startswith("DataError: shard ") and "shard-000011.tar: corrupt shard shard-000011.tar: XXH3-64" in text
    assert not (root.model_dir / "model.pt").exists()


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            "epoch=2 step=1200 loss=1.234500 samples_per_sec=4410.5 gpu_util=97.0 lr=0.100000 data_wait_pct=0.8",
            {"train:loss": 1.2345, "train:samples_per_sec": 4410.5, "train:gpu_util": 97.0, "train:lr": 0.1,
             "train:data_wait_pct": 0.8, "train:epoch": 2.0},
        ),
        ("epoch=2 val_loss=0.500000 val_accuracy=0.812500 val_samples=50000",
         {"validation:loss": 0.5, "validation:accuracy": 0.8125}),
        ("epoch=2 step=1 loss=nan samples_per_sec=1.0 gpu_util=nan lr=0.1 data_wait_pct=0.0",
         {"train:samples_per_sec": 1.0, "train:lr": 0.1, "train:data_wait_pct": 0.0, "train:epoch": 2.0}),
        ("2026-01-01 INFO checkpoint written (epoch=3 step=9)", {}),
    ],
)  # fmt: skip
def test_metric_definitions_parse_exactly_their_values(lines: str, expected: dict[str, float]) -> None:
    assert metrics.parse(lines) == expected


def test_formatted_lines_round_trip() -> None:
    line = metrics.train_line(
        epoch=1, step=10, loss=0.25, samples_per_sec=100.0, gpu_util=float("nan"), lr=1e-3, data_wait_pct=5.0
    )
    assert line == "epoch=1 step=10 loss=0.250000 samples_per_sec=100.0 gpu_util=nan lr=0.001000 data_wait_pct=5.0"
    assert "train:gpu_util" not in metrics.parse(line)  # unknown utilisation records no data point
    val = metrics.validation_line(epoch=1, loss=0.5, accuracy=0.75, samples=8)
    assert metrics.parse(val) == {"validation:loss": 0.5, "validation:accuracy": 0.75}
    assert all(set(d) == {"Name", "Regex"} for d in metrics.METRIC_DEFINITIONS)
