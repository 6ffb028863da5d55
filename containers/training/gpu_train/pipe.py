"""Pipe mode with several training processes on one host.

SageMaker gives each channel one FIFO per pass (``<channel>_<n>``), and one FIFO cannot feed several
readers. :class:`PipeDemux` runs in the launcher: it reads the channel's stream archive by archive (each
shard is a complete tar archive) and hands whole shards round-robin to one FIFO per local process,
``<dir>/<channel>_r<rank>_<n>``, which the training processes read as if SageMaker had made them. With
``S3DistributionType=FullyReplicated`` every host receives the whole stream, so a host keeps only every
``num_hosts``-th shard; with ``ShardedByS3Key`` the hosts' streams are already disjoint.

A process that stops reading early (the epoch ended on another process) closes its FIFO; its shards are
then dropped and the rest of the pass is still read to its end, as SageMaker expects before it opens the
next pass. No torch here: the demultiplexer runs before torchrun starts the training processes.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

from gpu_train.sagemaker import Channel
from gpu_train.shards import ZERO_BLOCK, TarStream

log = logging.getLogger(__name__)

PIPE_DIR_ENV = "GPU_TRAIN_PIPE_DIR"


def rank_channel(channel: Channel, directory: Path, local_rank: int) -> Channel:
    """The channel as one training process sees it behind a :class:`PipeDemux`."""
    name = f"{channel.name}_r{local_rank}"
    return Channel(name=name, mode="Pipe", distribution=channel.distribution, content_type=channel.content_type,
                   path=directory / name)  # fmt: skip


class _Output:
    """One reader's FIFO for one pass, opened for writing once its reader is there."""

    def __init__(self, path: Path, stop: threading.Event) -> None:
        self.path = path
        self.stop = stop
        self.fd: int | None = None
        self.closed = False

    def _open(self) -> bool:
        while not self.stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader yet
                    time.sleep(0.01)
                    continue
                raise
            os.set_blocking(fd, True)
            self.fd = fd
            return True
        return False

    def write(self, data: bytes | bytearray) -> None:
        if self.closed or (self.fd is None and not self._open()):
            return
        assert self.fd is not None
        view = memoryview(data)
        try:
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
        except BrokenPipeError:  # the reader stopped early: drop the rest of this pass for it
            self.close()

    def close(self) -> None:
        """Close (after opening, so a reader that got nothing still sees end-of-file)."""
        if self.closed:
            return
        if self.fd is None:
            self._open()
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None
        self.closed = True


class PipeDemux(threading.Thread):
    """Splits one Pipe-mode channel among ``outputs`` local processes, pass after pass."""

    def __init__(
        self,
        channel: Channel,
        directory: Path,
        outputs: int,
        *,
        host_rank: int = 0,
        num_hosts: int = 1,
        wait_s: float = 3600.0,
    ) -> None:
        super().__init__(name=f"pipe-demux-{channel.name}", daemon=True)
        self.channel = channel
        self.directory = directory
        self.outputs = outputs
        self.keep_every = 1 if channel.sharded_by_key else num_hosts
        self.keep_offset = 0 if channel.sharded_by_key else host_rank
        self.wait_s = wait_s
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.passes = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._make_fifos(0)

    def fifo(self, rank: int, pass_index: int) -> Path:
        return rank_channel(self.channel, self.directory, rank).pipe_path(pass_index)

    def _make_fifos(self, pass_index: int) -> None:
        for rank in range(self.outputs):
            path = self.fifo(rank, pass_index)
            if not path.exists():
                os.mkfifo(path, 0o600)

    def _wait_for(self, path: Path) -> bool:
        deadline = time.monotonic() + self.wait_s
        while not path.exists():
            if self.stop.is_set() or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                source = self.channel.pipe_path(self.passes)
                if not self._wait_for(source):
                    return
                self._make_fifos(self.passes + 1)  # ready before any reader asks for the next pass
                self._one_pass(source)
                self.passes += 1
        except BaseException as exc:  # reported by the launcher; the readers see their FIFOs end
            self.error = exc
            log.error("Pipe-mode demultiplexer for channel %r failed: %s", self.channel.name, exc)

    def _one_pass(self, source: Path) -> None:
        outputs = [_Output(self.fifo(rank, self.passes), self.stop) for rank in range(self.outputs)]
        kept = 0
        try:
            with open(source, "rb", buffering=1 << 20) as stream:
                where = f"channel {self.channel.name!r} Pipe-mode FIFO {source}"
                for number, (archive, _) in enumerate(TarStream(stream, where).buffers()):
                    if number % self.keep_every != self.keep_offset:
                        continue
                    outputs[kept % self.outputs].write(archive + ZERO_BLOCK)
                    kept += 1
        finally:
            for output in outputs:
                output.close()
        log.info("Pipe-mode pass %d of channel %r: %d shards to %d processes", self.passes, self.channel.name,
                 kept, self.outputs)  # fmt: skip
