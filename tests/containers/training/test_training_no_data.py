"""A job that would train nothing fails with the reason; a job waiting for data stops on SIGTERM.

* an empty Pipe stream, or a batch larger than every loader stream's share of the samples, trains zero
  steps: the job fails (exit 1) with ``/opt/ml/output/failure`` saying which channel, how many samples,
  the batch size, processes x loader workers and what to change, on every process of a DDP job;
* samples dropped as partial batches are counted per epoch in the log (a warning from 10 % on);
* SIGTERM while the loader still waits for its first data (a Pipe FIFO nobody writes, a read that blocks)
  stops the job within seconds, exit 143, no failure file, no checkpoint (nothing was trained).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpu_train import entrypoint
from gpu_train.data import ShardLoader, StreamConfig, discover
from gpu_train.sagemaker import Channel

# SageMaker ends a job 120 s after SIGTERM; this one must be gone within seconds, interpreter exit included
# (measured ~1 s for one process, ~3 s through torchrun; a loader worker left blocked in its read would add
# the DataLoader's 5 s shutdown wait).
STOP_WITHIN_S = 5.0
# The job's environment of the 2-process DDP tests: hides a GPU of the machine that runs the test from CUDA, so both
# processes train on the CPU over gloo (a machine with one GPU has none for the second process: the trainer refuses
# that before torchrun starts), which is what these tests are about.
CPU = {"CUDA_VISIBLE_DEVICES": ""}


def _hp(**extra: str) -> dict[str, str]:
    return {"epochs": "1", "batch_size": "16", "arch": "resnet_tiny", "width": "8", "lr": "0.05", "log_steps": "100",
            "checkpoint_steps": "0", "num_workers": "0", **extra}  # fmt: skip


def _train(root: Any) -> int:
    """The ``train`` command in this process; no signal handlers installed."""
    return entrypoint.train(root.env, install_signals=False)


def _empty_pipe(fifo: Path) -> threading.Thread:
    """What SageMaker does for a channel whose S3 prefix matches no object: open the FIFO, write nothing."""
    os.mkfifo(fifo)

    def write_nothing() -> None:
        with open(fifo, "wb"):
            pass

    thread = threading.Thread(target=write_nothing, daemon=True)
    thread.start()
    return thread


# ----------------------------------------------------------------------------------- the loader's counts


def test_the_loader_counts_samples_and_dropped_partial_batches_per_stream(shards: Path) -> None:
    from gpu_train.data import StreamStats

    source = discover(Channel("train", path=shards))
    config = StreamConfig(source=source, batch_size=64, image_size=32, num_classes=3, seed=0, rank=0, world=1,
                          num_workers=2)  # fmt: skip
    loader = ShardLoader(config)
    assert loader.expected_stats(0) == [StreamStats(shards=8, samples=96, batches=1, dropped=32, complete=True)] * 2
    batches = list(loader.epoch(0))
    assert len(batches) == 2  # 96 samples per worker: one batch of 64 each, 32 dropped each
    assert loader.stats(0) == [StreamStats(shards=8, samples=96, batches=1, dropped=32, complete=True)] * 2
    # A loader that was not read to its end (another process ran out first) reports what it will hold.
    unfinished = ShardLoader(config)
    next(iter(unfinished.epoch(0)))
    assert [s.samples for s in unfinished.stats(0)] == [96, 96]
    assert [s.dropped for s in unfinished.stats(0)] == [32, 32]


# ------------------------------------------------------------------------------------- zero training steps


def test_a_batch_larger_than_each_loader_streams_share_fails_with_the_reason(make_root: Callable[..., Any]) -> None:
    root = make_root(_hp(batch_size="128", num_workers="2"))  # 192 samples: 96 per worker
    assert _train(root) == 1
    assert root.failure_text() == (
        "DataError: no training step in epoch 0: channel 'train' (File mode, 16 shards) gave 192 samples, split "
        "into 2 loader streams (1 process x 2 loader workers); each stream fills its own batches of "
        "batch_size=128 and drops its last partial batch, and the largest stream of the process with the least "
        "data had 96 samples. Set batch_size to at most 96, or lower num_workers (now 2), or add training data."
    )
    assert not (root.model_dir / "model.pt").exists() and not root.checkpoints


def test_an_empty_pipe_stream_fails_with_the_reason(make_root: Callable[..., Any]) -> None:
    root = make_root(_hp(image_size="32", num_classes="3"), channels={"train": "Pipe"}, data=False)
    fifo = root.root / "input" / "data" / "train_0"
    feeder = _empty_pipe(fifo)
    assert _train(root) == 1
    feeder.join(timeout=10)
    assert root.failure_text() == (
        f"DataError: no training step in epoch 0: channel 'train' (Pipe mode) delivered no samples: the FIFO "
        f"{fifo} ended without data (0 shards). Check that the channel's S3Uri prefix selects the shard objects "
        "(e.g. s3://bucket/dataset/shard-) and that they are not empty."
    )
    assert not (root.model_dir / "model.pt").exists() and not root.checkpoints


# ---------------------------------------------------------------------------- partial batches in the log


def test_dropped_partial_batches_are_counted_in_the_log(
    make_root: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    root = make_root(_hp(batch_size="64", num_workers="2"))  # 96 per worker: 1 batch of 64, 32 dropped
    with caplog.at_level(logging.INFO, logger="gpu_train"):
        assert _train(root) == 0
    (record,) = [r for r in caplog.records if r.getMessage().startswith("epoch 0: ")]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "epoch 0: 2 steps trained 128 of 192 samples of channel 'train'; 64 (33%) dropped as partial batches "
        "(2 loader streams: 1 process x 2 loader workers, each filling its own batches of batch_size=64 and "
        "dropping its last partial one; other samples are dropped in other epochs). To train on more of each "
        "epoch, lower batch_size or num_workers."
    )
    assert (root.model_dir / "model.pt").exists()


def test_an_epoch_without_drops_is_one_info_line(
    make_root: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    root = make_root(_hp(num_workers="2"))  # 96 per worker = 6 batches of 16 each
    with caplog.at_level(logging.INFO, logger="gpu_train"):
        assert _train(root) == 0
    (record,) = [r for r in caplog.records if r.getMessage().startswith("epoch 0: ")]
    assert record.levelno == logging.INFO
    assert record.getMessage() == "epoch 0: 12 steps trained 192 of 192 samples of channel 'train'"


@pytest.mark.slow
def test_every_ddp_process_fails_on_zero_steps_without_hanging(make_root: Callable[..., Any], entrypoint: Any) -> None:
    """Two processes on the CPU (:data:`CPU`)."""
    root = make_root(_hp(batch_size="128", processes_per_host="2"))  # 8 shards = 96 samples per process
    started = time.monotonic()
    code, output = entrypoint.run(root, timeout=120, **CPU)
    assert code == 1, output
    assert time.monotonic() - started < 90
    assert output.count("no training step in epoch 0") >= 2, output  # both processes reached the same verdict
    assert root.failure_text() == (
        "DataError: no training step in epoch 0: channel 'train' (File mode, 16 shards) gave 192 samples, split "
        "into 2 loader streams (2 processes x 1 loader stream each); each stream fills its own batches of "
        "batch_size=128 and drops its last partial batch, and the largest stream of the process with the least "
        "data had 96 samples. Set batch_size to at most 96, or add training data."
    )


# ----------------------------------------------------------------------------- SIGTERM while waiting


BLOCKING_DECODER = """
import time


def decode(sample):
    time.sleep(3600)  # a read that never returns (e.g. a FastFile object that does not arrive)
"""


def _stop_while_waiting(
    entrypoint: Any, root: Any, marker: str = "waiting for the first batch", **extra_env: str
) -> tuple[int, float, str]:
    """Start the real entry point (``extra_env`` added to its environment), SIGTERM it once it logs ``marker``;
    (exit code, seconds, log)."""
    process = entrypoint.start(root, **extra_env)
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def read(stream: Any) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, args=(process.stdout,), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not any(marker in line for line in seen):
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, "the job ended before waiting for data:\n" + "".join(seen)
            seen.append(line)
        time.sleep(0.5)  # let the loader block for real
        stopped_at = time.monotonic()
        process.send_signal(signal.SIGTERM)  # SageMaker: StopTrainingJob or a spot interruption
        code = process.wait(timeout=STOP_WITHIN_S * 3)
        seconds = time.monotonic() - stopped_at
    except (queue.Empty, subprocess.TimeoutExpired):
        raise AssertionError("the job did not stop after SIGTERM:\n" + "".join(seen)) from None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    while (line := lines.get(timeout=10)) is not None:
        seen.append(line)
    return code, seconds, "".join(seen)


@pytest.mark.slow
def test_sigterm_while_a_pipe_fifo_never_gets_data_stops_the_job_within_seconds(
    make_root: Callable[..., Any], entrypoint: Any
) -> None:
    root = make_root(_hp(image_size="32", num_classes="3"), channels={"train": "Pipe"}, data=False)
    fifo = root.root / "input" / "data" / "train_0"
    os.mkfifo(fifo)  # SageMaker made the FIFO; no data arrives
    try:
        code, seconds, output = _stop_while_waiting(entrypoint, root)
    finally:
        with contextlib.suppress(OSError):  # a reader left behind by a failed run: give it end-of-file
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert code == 143, output
    assert seconds < STOP_WITHIN_S, output
    assert "stopped by SIGTERM while waiting for the first batch of channel 'train'" in output
    assert not root.failure.exists() and not root.checkpoints and not (root.model_dir / "model.pt").exists()


@pytest.mark.slow
def test_sigterm_reaches_every_ddp_process_waiting_behind_the_pipe_demultiplexer(
    make_root: Callable[..., Any], entrypoint: Any
) -> None:
    """Two processes on the CPU (:data:`CPU`)."""
    hp = _hp(image_size="32", num_classes="3", processes_per_host="2")
    root = make_root(hp, channels={"train": "Pipe"}, data=False)
    fifo = root.root / "input" / "data" / "train_0"
    os.mkfifo(fifo)
    try:
        code, seconds, output = _stop_while_waiting(
            entrypoint, root, **CPU
        )  # SIGTERM to the launcher, as SageMaker does
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert code == 143, output
    assert seconds < STOP_WITHIN_S, output
    assert output.count("stopped by SIGTERM while waiting for the first batch of channel 'train'") == 2, output
    assert not root.failure.exists() and not root.checkpoints and not (root.model_dir / "model.pt").exists()


@pytest.mark.slow
def test_sigterm_while_validation_waits_for_its_pipe_checkpoints_the_trained_epoch(
    make_root: Callable[..., Any], entrypoint: Any
) -> None:
    root = make_root(_hp(), channels={"train": "File", "validation": "Pipe"})
    fifo = root.root / "input" / "data" / "validation_0"
    os.mkfifo(fifo)  # the validation stream never gets data
    try:
        code, seconds, output = _stop_while_waiting(entrypoint, root, marker="epoch 0: 12 steps trained")
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert code == 143, output
    assert seconds < STOP_WITHIN_S, output
    assert "val_loss=" not in output and not root.failure.exists()
    assert root.checkpoints == ["checkpoint-000000012.pt"]  # the trained epoch is kept, validation skipped
    assert not (root.model_dir / "model.pt").exists()


@pytest.mark.slow
def test_sigterm_while_a_read_blocks_in_the_training_process_stops_the_job_within_seconds(
    make_root: Callable[..., Any], entrypoint: Any
) -> None:
    # num_workers=0: the training process reads (and here blocks) itself; a custom decoder that never returns.
    root = make_root(_hp(dataset_decoder="stuck.py:decode"))
    code_dir = root.root / "input" / "data" / "code"
    code_dir.mkdir()
    (code_dir / "stuck.py").write_text(BLOCKING_DECODER)
    code, seconds, output = _stop_while_waiting(entrypoint, root)
    assert code == 143, output
    assert seconds < STOP_WITHIN_S, output
    assert "stopped by SIGTERM while waiting for the first batch of channel 'train'" in output
    assert not root.failure.exists() and not root.checkpoints and not (root.model_dir / "model.pt").exists()


def test_batches_left_by_uneven_processes_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Two processes end the epoch together when the first runs out: the other one's extra batches are unused.

    The epoch-end accounting alone, with a peer process simulated in the collectives (rank 0: 96 samples,
    6 batches of 16; its peer: 72 samples, 4 batches and 8 dropped; so 4 steps).
    """
    from types import SimpleNamespace

    from gpu_train.data import LoaderState, StreamStats
    from gpu_train.train_loop import Trainer

    peer = {"sum": [72.0, 8.0, 6.0, 0.0, 0.0], "minimum": [72.0]}

    class TwoProcesses:
        world, rank, local_rank, is_leader = 2, 0, 0, True

        def sum(self, *values: float) -> list[float]:
            return [v + p for v, p in zip(values, peer["sum"], strict=True)]

        def minimum(self, *values: float) -> list[float]:
            return [min(v, p) for v, p in zip(values, peer["minimum"], strict=True)]

    channel = Channel("train", path=Path("/opt/ml/input/data/train"))
    trainer = SimpleNamespace(
        hp=SimpleNamespace(batch_size=16),
        ctx=TwoProcesses(),
        progress=SimpleNamespace(position=LoaderState(epoch=0, consumed=[4], num_workers=0, world=2)),
        train_loader=SimpleNamespace(stats=lambda epoch: [StreamStats(8, 96, 6, 0, complete=True)]),
        train_source=SimpleNamespace(channel=channel, is_pipe=False, shards=[None] * 16),
        num_workers=0,
    )
    with caplog.at_level(logging.INFO, logger="gpu_train"):
        Trainer._end_of_epoch(trainer, 0)  # type: ignore[arg-type]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "epoch 0: 4 steps trained 128 of 168 samples of channel 'train'; 8 (5%) dropped as partial batches "
        "(2 loader streams: 2 processes x 1 loader stream each, each filling its own batches of batch_size=16 and "
        "dropping its last partial one; other samples are dropped in other epochs); 32 unused because another "
        "process ran out of batches first. To train on more of each epoch, lower batch_size, or give every "
        "process the same number of samples (shards of equal size, a multiple of the process count)."
    )
