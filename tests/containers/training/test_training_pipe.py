"""Pipe mode with several processes per host: the launcher's demultiplexer."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from gpu_train.pipe import PipeDemux
from gpu_train.sagemaker import Channel
from gpu_train.shards import TarStream


def _feed(fifo: Path, blobs: list[bytes]) -> threading.Thread:
    """What SageMaker does in Pipe mode: the channel's objects back to back into the FIFO."""

    def write() -> None:
        with open(fifo, "wb") as out:
            for blob in blobs:
                out.write(blob)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def _read(path: Path, out: list[str], stop_after: int | None = None) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as stream:
            for archive in TarStream(stream, str(path)).archives():
                assert archive.trailer is not None
                out.append(archive.trailer["shard"])
                if stop_after is not None and len(out) == stop_after:
                    return  # a process whose epoch ended early closes its FIFO

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _run(tmp_path: Path, shards: Path, *, outputs: int, host_rank: int = 0, num_hosts: int = 1,
         stop_after: int | None = None) -> list[list[str]]:  # fmt: skip
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "train_0")
    blobs = [p.read_bytes() for p in sorted(shards.glob("shard-*.tar"))]
    channel = Channel("train", mode="Pipe", path=data / "train")
    demux = PipeDemux(channel, tmp_path / "pipes", outputs, host_rank=host_rank, num_hosts=num_hosts, wait_s=0.2)
    received: list[list[str]] = [[] for _ in range(outputs)]
    readers = [_read(demux.fifo(r, 0), received[r], stop_after if r == outputs - 1 else None) for r in range(outputs)]
    feeder = _feed(data / "train_0", blobs)
    demux.start()
    for thread in [feeder, *readers]:
        thread.join(timeout=30)
    demux.join(timeout=30)
    assert demux.error is None and demux.passes == 1 and not demux.is_alive()
    assert all(demux.fifo(r, 1).exists() for r in range(outputs))  # the next pass is ready for its readers
    return received


def test_shards_are_dealt_round_robin_to_the_local_processes(tmp_path: Path, shards: Path) -> None:
    first, second = _run(tmp_path, shards, outputs=2)
    names = [f"shard-{i:06d}.tar" for i in range(16)]
    assert first == names[0::2] and second == names[1::2]


def test_a_host_keeps_its_share_of_a_fully_replicated_stream(tmp_path: Path, shards: Path) -> None:
    (only,) = _run(tmp_path, shards, outputs=1, host_rank=1, num_hosts=2)
    assert only == [f"shard-{i:06d}.tar" for i in range(1, 16, 2)]


def test_a_reader_that_stops_early_does_not_block_the_others(tmp_path: Path, shards: Path) -> None:
    first, second = _run(tmp_path, shards, outputs=2, stop_after=1)
    assert len(first) == 8 and second == ["shard-000001.tar"]
