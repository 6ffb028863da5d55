"""The training data loader: sequential shard reads, batches assembled in the workers, augmentation on
the device.

Order and resumption
    Each epoch the shard list is permuted with ``(seed, epoch)``; process ``rank`` takes every
    ``world``-th shard and loader worker ``w`` every ``W``-th of those. Inside a shard the samples are
    permuted with ``(seed, epoch, shard)``. Each worker assembles whole batches from its own stream and
    the ``DataLoader`` returns them round-robin, so the batch sequence of a process is a pure function of
    (seed, epoch, rank, world size, worker count). The loader tracks how many batches it consumed from each
    worker; a checkpoint stores these counts and the next worker in the rotation, and a resumed run
    starts each worker after the batches already used (skipping whole shards by their index counts) and
    rotates worker numbers so the round-robin continues where it stopped. An interrupted and resumed
    run therefore sees exactly the batches of an uninterrupted one.

Speed
    A worker maps a whole shard (FastFile: reads it with one sequential read into a reused buffer), checks
    it (XXH3-64 checksum), and copies pre-decoded ``uint8`` pixels straight into batch tensors in shared
    memory that it reuses in turn, so the per-sample work is one ``memcpy``. Pixels travel to the GPU as
    ``uint8`` (4x fewer bytes than float) from pinned memory with non-blocking copies on a side stream;
    conversion, normalisation, random-resized-crop and flip run batched on the GPU, in channels_last layout.

Pipe mode
    The channel's FIFO for the current pass is read as one stream of concatenated shards by the first
    worker; shard boundaries and checks come from the shards themselves.

Counts
    Each worker reports through shared memory what its stream held in the epoch (shards, samples, full
    batches, samples dropped as its last partial batch); :meth:`ShardLoader.stats` completes a stream that
    was not read to its end from the index. The trainer sums them over all processes after each epoch: it
    logs what was dropped and fails a job whose epoch trained no step.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import mmap
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from gpu_train.errors import ChannelError, DataError
from gpu_train.hyperparameters import auto_workers as auto_workers  # re-exported: scripts size loaders with it
from gpu_train.sagemaker import Channel
from gpu_train.shards import (
    INDEX_NAME,
    Archive,
    DatasetIndex,
    TarStream,
    list_shards,
    npy_array,
    parse_archive,
    regular_image_shard,
)

log = logging.getLogger(__name__)

Decoder = Callable[[dict[str, bytes]], tuple[np.ndarray, int]]
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "bmp")


# ----------------------------------------------------------------------------------- dataset discovery


@dataclass(frozen=True)
class ShardRef:
    """A shard file and, when the index lists it, its expected size and sample count."""

    path: Path
    samples: int | None = None
    bytes: int | None = None


@dataclass
class DataSource:
    """What a channel holds: shard files (File, FastFile, FSx) or a FIFO per pass (Pipe)."""

    channel: Channel
    shards: list[ShardRef] = field(default_factory=list)
    index: DatasetIndex | None = None

    @property
    def is_pipe(self) -> bool:
        return self.channel.is_pipe

    @property
    def num_samples(self) -> int | None:
        if self.is_pipe or any(s.samples is None for s in self.shards):
            return None
        return sum(s.samples or 0 for s in self.shards)


def discover(channel: Channel) -> DataSource:
    """Find the shards of a channel and check them against ``index.json`` when it is present.

    With ``S3DistributionType=ShardedByS3Key`` each host holds only some shards (and maybe not the index),
    so shards listed in the index but absent are expected; otherwise a missing shard is an error.
    """
    if channel.is_pipe:
        return DataSource(channel=channel)
    index_path = channel.path / INDEX_NAME
    index = DatasetIndex.load(index_path) if index_path.exists() else None
    found = {p.name: p for p in list_shards(channel.path)}
    refs: list[ShardRef] = []
    if index is not None:
        missing = [s.name for s in index.shards if s.name not in found]
        if missing and not channel.sharded_by_key:
            raise DataError(
                f"channel {channel.name!r}: {len(missing)} shards listed in {index_path} are missing "
                f"(first: {missing[0]}); the dataset upload is incomplete"
            )
        listed = {s.name for s in index.shards}
        extra = sorted(set(found) - listed)
        if extra:
            log.warning(
                "channel %r: %d tar files not in the index are ignored (e.g. %s)", channel.name, len(extra), extra[0]
            )
        refs = [ShardRef(found[s.name], s.samples, s.bytes) for s in index.shards if s.name in found]
    else:
        refs = [ShardRef(p) for p in found.values()]
    if not refs:
        raise ChannelError(
            f"input channel {channel.name!r} at {channel.path} holds no shards (*.tar); "
            "pack the data with `gpuctl shard SRC DEST` and point the channel at DEST"
        )
    return DataSource(channel=channel, shards=refs, index=index)


# ------------------------------------------------------------------------------------------ decoding


def default_decoder(image_size: int) -> Decoder:
    """Decode ``.npy`` (pre-resized uint8 HWC) or an encoded image, and ``.cls``; used by the workers."""

    def decode(sample: dict[str, bytes]) -> tuple[np.ndarray, int]:
        from gpu_train.pack import load_image

        for ext in IMAGE_EXTS:
            if ext in sample:
                import io

                return load_image(io.BytesIO(sample[ext]), image_size), _label(sample)
        raise DataError(f"sample has no .npy or image file (has: {', '.join(sorted(sample))})")

    return decode


def _label(sample: dict[str, bytes]) -> int:
    raw = sample.get("cls")
    if raw is None:
        raise DataError(f"sample has no .cls label (has: {', '.join(sorted(sample))})")
    try:
        return int(bytes(raw).strip())
    except ValueError:
        raise DataError(f"sample label {bytes(raw)[:20]!r} is not an integer") from None


# --------------------------------------------------------------------------------------- the dataset


@dataclass(frozen=True)
class StreamConfig:
    """What every worker needs; picklable (sent to worker processes)."""

    source: DataSource
    batch_size: int
    image_size: int
    num_classes: int
    seed: int
    rank: int
    world: int
    num_workers: int
    shuffle: bool = True
    drop_last: bool = True
    decoder: Decoder | None = None
    ring_size: int = 0  # >0: loader workers reuse this many shared-memory batches in turn (see ShardLoader)


@dataclass(frozen=True)
class StreamStats:
    """What one loader worker's stream of one process held in an epoch.

    ``samples`` counts the stream's share of the epoch (also what a resumed run skipped); ``batches`` the
    batches made of it; ``dropped`` the samples of its last partial batch, which a training loader drops
    (each worker fills its own batches, so every worker of every process may drop one). ``complete``: the
    counts cover the whole share (the stream was read to its end, or the index gives them); otherwise they
    are what was read so far.
    """

    shards: int = 0
    samples: int = 0
    batches: int = 0
    dropped: int = 0
    complete: bool = False


STAT_FIELDS = 6  # per worker: epoch + 1 (0: nothing recorded), shards, samples, batches, dropped, complete


class SharedState:
    """Per-epoch settings the main process hands to (persistent) workers through shared memory, and what
    the workers report back.

    Layout: ``[epoch, rotation, pipe_pass, skip_0 .. skip_{W-1}, stats_0 .. stats_{W-1}, pid_0 .. pid_{W-1}]``
    (skips in batches; each ``stats_w`` is :data:`STAT_FIELDS` numbers, written by the worker that plays
    logical worker ``w``; ``pid_p`` the process id of physical worker ``p``, written when it starts).
    """

    def __init__(self, num_workers: int) -> None:
        self.slots = max(1, num_workers)
        self._pids = 3 + self.slots * (1 + STAT_FIELDS)
        self.tensor = torch.zeros(self._pids + self.slots, dtype=torch.int64).share_memory_()

    def set(self, epoch: int, rotation: int, pipe_pass: int, skips: Sequence[int]) -> None:
        """Settings for a new epoch; clears the workers' reports."""
        values = [epoch, rotation, pipe_pass, *list(skips)]
        values += [0] * (self._pids - len(values))
        self.tensor[: self._pids] = torch.tensor(values, dtype=torch.int64)

    def get(self) -> tuple[int, int, int, list[int]]:
        values = self.tensor[: 3 + self.slots].tolist()
        return values[0], values[1], values[2], values[3:]

    def record(self, worker: int, epoch: int, stats: StreamStats) -> None:
        start = 3 + self.slots + worker * STAT_FIELDS
        values = [epoch + 1, stats.shards, stats.samples, stats.batches, stats.dropped, int(stats.complete)]
        self.tensor[start : start + STAT_FIELDS] = torch.tensor(values, dtype=torch.int64)

    def stats(self, epoch: int) -> list[StreamStats | None]:
        """Each logical worker's report for ``epoch`` (None: it has not started that epoch)."""
        values = self.tensor[3 + self.slots : self._pids].tolist()
        out: list[StreamStats | None] = []
        for worker in range(self.slots):
            tag, shards, samples, batches, dropped, complete = values[worker * STAT_FIELDS : (worker + 1) * STAT_FIELDS]
            out.append(StreamStats(shards, samples, batches, dropped, bool(complete)) if tag == epoch + 1 else None)
        return out

    def set_pid(self, worker: int, pid: int) -> None:
        self.tensor[self._pids + worker] = pid

    def pids(self) -> list[int]:
        """Process ids of the workers that have started (none without worker processes)."""
        return [pid for pid in self.tensor[self._pids :].tolist() if pid]


class ShardStream(IterableDataset[tuple[torch.Tensor, torch.Tensor, int, int]]):
    """Yields ``(images uint8 [B,H,W,3], labels int64 [B], logical worker, batch number)``."""

    def __init__(self, config: StreamConfig, state: SharedState) -> None:
        super().__init__()
        self.config = config
        self.state = state
        self._buffer = bytearray()

    # -- which shards and samples belong to (epoch, rank, worker)

    def shard_order(self, epoch: int) -> list[int]:
        count = len(self.config.source.shards)
        if not self.config.shuffle:
            return list(range(count))
        return [int(i) for i in np.random.default_rng([self.config.seed, epoch]).permutation(count)]

    def split_by_shard(self) -> bool:
        """Split shards across processes when there are enough, else split samples inside each shard."""
        return len(self.config.source.shards) >= self.config.world

    def worker_shards(self, epoch: int, worker: int) -> list[int]:
        order = self.shard_order(epoch)
        cfg = self.config
        mine = order[cfg.rank :: cfg.world] if self.split_by_shard() else order
        return mine[worker :: max(1, cfg.num_workers)]

    def _rank_samples(self, ref: ShardRef) -> int | None:
        """How many samples of shard ``ref`` this process reads (None: the count is not known)."""
        if ref.samples is None or self.split_by_shard():
            return ref.samples
        return len(range(self.config.rank, ref.samples, self.config.world))

    def expected_stats(self, epoch: int, worker: int) -> StreamStats | None:
        """What logical worker ``worker``'s stream holds in ``epoch``, from the index (None: not known)."""
        cfg = self.config
        if cfg.source.is_pipe:
            return None
        shards = self.worker_shards(epoch, worker)
        counts = [self._rank_samples(cfg.source.shards[i]) for i in shards]
        if any(c is None for c in counts):
            return None
        samples = sum(c or 0 for c in counts)
        batches, rest = divmod(samples, cfg.batch_size)
        if not cfg.drop_last and rest:
            return StreamStats(len(shards), samples, batches + 1, 0, complete=True)
        return StreamStats(len(shards), samples, batches, rest if cfg.drop_last else 0, complete=True)

    # -- reading

    def _read_file(self, ref: ShardRef) -> memoryview:
        """The bytes of one shard, read sequentially (size checked against the index)."""
        where = f"shard {ref.path}"
        try:
            with open(ref.path, "rb", buffering=0) as handle:
                size = os.fstat(handle.fileno()).st_size
                if ref.bytes is not None and size != ref.bytes:
                    raise DataError(f"{where}: size {size} bytes, index says {ref.bytes} (truncated or replaced shard)")
                view = self._map(handle, size) if self._use_mmap else None
                if view is None:
                    view = self._read_into_buffer(handle, size, where)
        except OSError as exc:
            raise DataError(f"{where}: cannot read: {exc}") from exc
        return view

    def _shard_arrays(
        self, data: bytes | bytearray | memoryview, where: str, expected: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Check one shard and return ``(pixels (n, H, W, 3) uint8, labels (n,) int64)``.

        Shards from ``gpuctl shard`` take the fast path: a zero-copy view checked as a whole (checksum and a
        vectorised header check). Other shards (other tools, encoded images, a custom decoder) are parsed
        member by member and decoded sample by sample.
        """
        cfg = self.config
        shape = (cfg.image_size, cfg.image_size, 3)
        fast = regular_image_shard(data, where, shape) if cfg.decoder is None else None
        if fast is not None:
            pixels, labels, _ = fast
        else:
            archive = parse_archive(data, where)
            pixels = np.empty((len(archive.samples), *shape), dtype=np.uint8)
            labels = np.empty(len(archive.samples), dtype=np.int64)
            for i, sample in enumerate(archive.samples):
                labels[i] = self._decode_into(archive, sample, pixels[i])
        if expected is not None and len(labels) != expected:
            raise DataError(f"{where}: {len(labels)} samples, index says {expected}")
        if len(labels) and (labels.min() < 0 or labels.max() >= cfg.num_classes):
            bad = int(labels.max() if labels.max() >= cfg.num_classes else labels.min())
            raise DataError(f"{where}: label {bad} is outside 0..{cfg.num_classes - 1}")
        return pixels, labels

    @property
    def _use_mmap(self) -> bool:
        # FastFile is a FUSE mount streaming from S3: read it with plain sequential reads.
        return self.config.source.channel.mode == "File"

    @staticmethod
    def _map(handle: Any, size: int) -> memoryview | None:
        """Map the whole shard (pre-faulted, read-ahead): the page cache is read in place, saving a copy."""
        if size == 0:
            return None
        try:
            mapped = mmap.mmap(
                handle.fileno(),
                size,
                flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                prot=mmap.PROT_READ,
            )
        except (OSError, ValueError):
            return None
        with contextlib.suppress(AttributeError, OSError):
            mapped.madvise(mmap.MADV_SEQUENTIAL)
        return memoryview(mapped)  # unmapped when the last view of the shard is dropped

    def _read_into_buffer(self, handle: Any, size: int, where: str) -> memoryview:
        if len(self._buffer) < size:
            self._buffer = bytearray(size)
        view = memoryview(self._buffer)[:size]
        got = 0
        while got < size:
            n = handle.readinto(view[got:])
            if not n:
                raise DataError(f"{where}: file ended after {got} of {size} bytes")
            got += n
        return view

    def _shards(
        self, epoch: int, worker: int, pipe_pass: int, skip_samples: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray, int, int]]:
        """(pixels, labels, shard id for the in-shard permutation, samples to skip in it) per shard."""
        source = self.config.source
        if source.is_pipe:
            if worker != 0:
                return
            path = source.channel.pipe_path(pipe_pass)
            where = f"channel {source.channel.name!r} Pipe-mode FIFO {path}"
            if not path.exists():
                raise DataError(f"{where} does not exist")
            with open(path, "rb", buffering=1 << 20) as stream:
                for number, (buffer, archive_where) in enumerate(TarStream(stream, where).buffers()):
                    pixels, labels = self._shard_arrays(buffer, archive_where, None)
                    yield pixels, labels, number, 0
            return
        for shard_id in self.worker_shards(epoch, worker):
            ref = source.shards[shard_id]
            per_rank = self._rank_samples(ref)
            if per_rank is not None and skip_samples >= per_rank:
                skip_samples -= per_rank  # skip a whole shard without reading it
                continue
            pixels, labels = self._shard_arrays(self._read_file(ref), f"shard {ref.path}", ref.samples)
            yield pixels, labels, shard_id, skip_samples
            skip_samples = 0

    def _orders(
        self, epoch: int, worker: int, pipe_pass: int, skip: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(pixels, labels, sample order) per shard: this process's samples, permuted, resume skips applied."""
        cfg = self.config
        sample_split = cfg.source.is_pipe or not self.split_by_shard()
        pending = skip  # Pipe mode: nothing is known before reading, so skipped samples are read and dropped
        for pixels, labels, shard_id, skip_in in self._shards(
            epoch, worker, pipe_pass, 0 if cfg.source.is_pipe else skip
        ):
            count = len(labels)
            if cfg.shuffle:
                order = np.random.default_rng([cfg.seed, epoch, shard_id, 1]).permutation(count)
            else:
                order = np.arange(count)
            if sample_split and cfg.world > 1:
                order = order[cfg.rank :: cfg.world]
            if cfg.source.is_pipe:
                dropped = min(pending, len(order))
                order, pending = order[dropped:], pending - dropped
            else:
                order = order[skip_in:]
            yield pixels, labels, order

    def _decode_into(self, archive: Archive, sample: dict[str, tuple[int, int]], out: np.ndarray) -> int:
        cfg = self.config
        if cfg.decoder is None and "npy" in sample:
            offset, size = sample["npy"]
            array = npy_array(archive.data, offset, size, archive.where)
            if "cls" not in sample:
                raise DataError(f"{archive.where}: a sample has no .cls label")
            label_offset, label_size = sample["cls"]
            label_raw = bytes(memoryview(archive.data)[label_offset : label_offset + label_size])
            try:
                label = int(label_raw)
            except ValueError:
                raise DataError(f"{archive.where}: label {label_raw[:20]!r} is not an integer") from None
        else:
            view = memoryview(archive.data)
            files = {ext: bytes(view[o : o + s]) for ext, (o, s) in sample.items()}
            decoder = cfg.decoder or default_decoder(cfg.image_size)
            try:
                array, label = decoder(files)
            except DataError as exc:
                raise DataError(f"{archive.where}: {exc}") from None
            array = np.asarray(array)
        if array.shape != out.shape or array.dtype != np.uint8:
            raise DataError(
                f"{archive.where}: image of shape {tuple(array.shape)} {array.dtype}, expected "
                f"{tuple(out.shape)} uint8 (re-pack with --image-size {cfg.image_size} or set image_size)"
            )
        out[...] = array
        return int(label)

    def _new_batch(self, size: int, in_worker: bool) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.config
        shape = (size, cfg.image_size, cfg.image_size, 3)
        if in_worker:
            # Allocate straight in shared memory: handing the batch to the main process copies nothing.
            storage = torch.UntypedStorage._new_shared(math.prod(shape))
            images = torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
        else:
            images = torch.empty(shape, dtype=torch.uint8)
        return images, torch.empty(size, dtype=torch.int64)

    def _batches(self, in_worker: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batch buffers to fill: fresh ones, or (in a worker with ``ring_size``) a reused ring of them.

        A new shared-memory segment per batch costs a page fault per 4 KB on both sides of the queue (for a
        256 x 224 x 224 x 3 batch: ~9,400 in the worker and again in the trainer), several times the cost of
        copying the pixels. The ring is safe because a worker is never more than ``prefetch_factor`` batches
        ahead of what the trainer has received, and the trainer converts each batch before taking the next.
        """
        if not (in_worker and self.config.ring_size):
            while True:
                yield self._new_batch(self.config.batch_size, in_worker)
        ring: list[tuple[torch.Tensor, torch.Tensor]] = getattr(self, "_ring", [])
        self._ring = ring  # kept across epochs (persistent workers)
        slot = 0
        while True:
            if slot == len(ring) and len(ring) < self.config.ring_size:
                ring.append(self._new_batch(self.config.batch_size, in_worker))
            yield ring[slot]
            slot = (slot + 1) % self.config.ring_size

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, int, int]]:
        cfg = self.config
        info = get_worker_info()
        physical = 0 if info is None else info.id
        epoch, rotation, pipe_pass, skips = self.state.get()
        workers = max(1, cfg.num_workers)
        logical = (physical + rotation) % workers
        skip_batches = skips[logical]
        if info is not None:
            torch.set_num_threads(1)
        buffers = self._batches(info is not None)
        images, labels = next(buffers)
        pixels = images.numpy()
        label_values = labels.numpy()
        filled = 0
        seq = skip_batches
        shards = 0

        def report(finished: bool) -> None:
            dropped = filled if finished and cfg.drop_last else 0
            batches = seq + (1 if finished and filled and not cfg.drop_last else 0)
            stats = StreamStats(shards, seq * cfg.batch_size + filled, batches, dropped, finished)
            self.state.record(logical, epoch, stats)

        report(False)
        for shard_pixels, shard_labels, order in self._orders(epoch, logical, pipe_pass, skip_batches * cfg.batch_size):
            shards += 1
            position = 0
            while position < len(order):
                take = min(cfg.batch_size - filled, len(order) - position)
                chosen = order[position : position + take]
                # One memcpy per sample (np.take would first copy the whole strided shard view).
                for slot, index in enumerate(chosen.tolist(), filled):
                    pixels[slot] = shard_pixels[index]
                label_values[filled : filled + take] = shard_labels[chosen]
                filled += take
                position += take
                if filled == cfg.batch_size:
                    yield images, labels, logical, seq
                    seq += 1
                    filled = 0
                    images, labels = next(buffers)
                    pixels = images.numpy()
                    label_values = labels.numpy()
            report(False)
        # Reported before the last item: the consumer may stop asking once it has it.
        report(True)
        if filled and not cfg.drop_last:
            yield images[:filled].clone(), labels[:filled].clone(), logical, seq


# ------------------------------------------------------------------------------------------ the loader


class _WorkerInit:
    """``worker_init_fn``: record the worker's process id and move it out of its training process's group.

    torchrun stops a training process by signalling its whole process group; a loader worker killed by
    that SIGTERM would fail the very step that must write the checkpoint. Outside the group, the worker
    is shut down by its parent's DataLoader as usual (or by :meth:`ShardLoader.terminate`, or exits when
    the parent dies).
    """

    def __init__(self, state: SharedState) -> None:
        self.state = state

    def __call__(self, worker_id: int) -> None:
        self.state.set_pid(worker_id, os.getpid())
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)


@dataclass
class LoaderState:
    """Where a process is in its batch sequence (saved in checkpoints)."""

    epoch: int = 0
    consumed: list[int] = field(default_factory=list)  # batches taken from each logical worker
    next_worker: int = 0
    num_workers: int = 0
    world: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "consumed": list(self.consumed),
            "next_worker": self.next_worker,
            "num_workers": self.num_workers,
            "world": self.world,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoaderState:
        return cls(
            epoch=int(data["epoch"]),
            consumed=[int(c) for c in data["consumed"]],
            next_worker=int(data["next_worker"]),
            num_workers=int(data["num_workers"]),
            world=int(data["world"]),
        )


class ShardLoader:
    """A ``DataLoader`` over a :class:`ShardStream` that knows its position for exact resumption."""

    def __init__(
        self,
        config: StreamConfig,
        *,
        pin_memory: bool = False,
        prefetch_factor: int = 4,
        persistent_workers: bool = True,
    ) -> None:
        if config.num_workers > 0 and not config.ring_size:
            # The trainer holds at most two batches besides the ones in flight (see ShardStream._batches).
            config = replace(config, ring_size=prefetch_factor + 3)
        self.config = config
        self.state = SharedState(config.num_workers)
        self.dataset = ShardStream(config, self.state)
        kwargs: dict[str, Any] = {}
        if config.num_workers > 0:
            kwargs.update(
                prefetch_factor=prefetch_factor,
                persistent_workers=persistent_workers,
                worker_init_fn=_WorkerInit(self.state),
                multiprocessing_context="fork" if os.name == "posix" else None,
            )
        self.loader = DataLoader(
            self.dataset,
            batch_size=None,
            num_workers=config.num_workers,
            pin_memory=pin_memory,
            **kwargs,
        )
        self.pipe_pass = 0  # Pipe mode: FIFO <channel>_<n> for the n-th pass in this container
        # The ring batches received last, kept referenced: torch keeps a worker's shared-memory batch mapped in this
        # process only while something references it, so without this every reuse of a ring slot maps it again and
        # page-faults the whole batch (9,408 faults per 38.5 MB batch; +28% samples per CPU-second when kept,
        # benchmarks.loader_peers). Costs no memory: the ring's segments exist anyway. With pin_memory the pinning
        # thread drops the batch after its copy, so there is nothing to keep.
        keep = config.ring_size * config.num_workers if config.num_workers > 0 and not pin_memory else 0
        self._mapped: collections.deque[torch.Tensor] = collections.deque(maxlen=keep)

    def expected_stats(self, epoch: int) -> list[StreamStats | None]:
        """Each worker's stream in ``epoch`` as the index predicts it (None where counts are unknown)."""
        return [self.dataset.expected_stats(epoch, w) for w in range(max(1, self.config.num_workers))]

    def stats(self, epoch: int) -> list[StreamStats]:
        """Each worker's stream in ``epoch``: as read when it was read to its end, else as the index predicts,
        else what was read so far (``complete=False``: an epoch that another process ended first)."""
        out = []
        for reported, expected in zip(self.state.stats(epoch), self.expected_stats(epoch), strict=True):
            if reported is not None and reported.complete:
                out.append(reported)
            elif expected is not None:
                out.append(expected)
            else:
                out.append(reported or StreamStats())
        return out

    def terminate(self) -> None:
        """End the worker processes now (the job stops; a worker may be blocked in a read that never returns).

        SIGTERM from the parent makes a DataLoader worker exit at once with status 0 (torch's worker signal
        handler), which its DataLoader accepts as a normal end; otherwise the DataLoader's shutdown would wait
        5 s per blocked worker before killing it.
        """
        mine = set(self.state.pids())
        for child in multiprocessing.active_children():  # live children only: a recorded pid may be reused
            if child.pid in mine:
                child.terminate()

    def can_resume(self, saved: LoaderState) -> bool:
        return saved.num_workers == self.config.num_workers and saved.world == self.config.world

    def epoch(
        self, epoch: int, resume: LoaderState | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, LoaderState]]:
        """The batches of ``epoch``, each with the loader position after it (what a checkpoint stores).

        With ``resume`` (a position of the same epoch), continue after the batches it had consumed.
        """
        workers = max(1, self.config.num_workers)
        if resume is not None and resume.epoch == epoch and self.can_resume(resume):
            consumed, rotation = list(resume.consumed), resume.next_worker
        else:
            if resume is not None and resume.epoch == epoch:
                log.warning(
                    "checkpoint was taken with %d loader workers x %d processes, now %d x %d: "
                    "restarting epoch %d from its first batch",
                    resume.num_workers,
                    resume.world,
                    self.config.num_workers,
                    self.config.world,
                    epoch,
                )
            consumed, rotation = [0] * workers, 0
        # The DataLoader asks physical workers 0, 1, ... in turn; physical p plays logical (p + rotation) % W,
        # so after a resume the round-robin continues with the worker that was next.
        self.state.set(epoch, rotation, self.pipe_pass, consumed)
        if self.config.source.is_pipe:
            self.pipe_pass += 1
        for images, labels, logical, seq in self.loader:
            if seq != consumed[logical]:
                raise RuntimeError(f"loader worker {logical} produced batch {seq}, expected {consumed[logical]}")
            consumed[logical] = seq + 1
            position = LoaderState(
                epoch=epoch,
                consumed=list(consumed),
                next_worker=(logical + 1) % workers,
                num_workers=self.config.num_workers,
                world=self.config.world,
            )
            if self._mapped.maxlen:
                self._mapped.append(images)
            yield images, labels, position


# ---------------------------------------------------------------------------------- device-side work


class DevicePipeline:
    """Moves uint8 NHWC batches to the device and turns them into normalised float NCHW tensors.

    On CUDA the copy of the next batch runs on a side stream while the current one trains. Augmentation
    (random resized crop with flips, one batched ``grid_sample``) draws from its own generator, whose
    state is part of the checkpoint.
    """

    def __init__(
        self,
        device: torch.device,
        *,
        mean: Sequence[float],
        std: Sequence[float],
        augment: str = "flip_crop",
        channels_last: bool = True,
        seed: int = 0,
        crop_area: tuple[float, float] = (0.25, 1.0),
        crop_ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ) -> None:
        self.device = device
        self.augment = augment
        self.channels_last = channels_last
        self.crop_area = crop_area
        self.crop_ratio = crop_ratio
        self.mean = torch.tensor(mean, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0
        self.inv_std = 1.0 / (torch.tensor(std, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def _to_device(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.device.type == "cpu":
            return images, labels
        return images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)

    def transform(self, images: torch.Tensor, train: bool) -> torch.Tensor:
        """uint8 (N, H, W, 3) on the device -> float (N, 3, H, W), normalised, augmented when ``train``."""
        x = images.permute(0, 3, 1, 2).float()  # NHWC storage viewed as NCHW: already channels_last
        if train and self.augment != "none":
            x = self._augment(x)
        x = (x - self.mean) * self.inv_std
        if self.channels_last:
            return x.contiguous(memory_format=torch.channels_last)
        return x.contiguous()

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        g, dev = self.generator, self.device
        flip = torch.where(torch.rand(n, generator=g, device=dev) < 0.5, -1.0, 1.0)
        if self.augment == "flip":
            return torch.where(flip.view(n, 1, 1, 1) < 0, x.flip(3), x)
        lo, hi = self.crop_area
        area = lo + (hi - lo) * torch.rand(n, generator=g, device=dev)
        log_lo, log_hi = math.log(self.crop_ratio[0]), math.log(self.crop_ratio[1])
        ratio = torch.exp(log_lo + (log_hi - log_lo) * torch.rand(n, generator=g, device=dev))
        sx = torch.sqrt(area * ratio).clamp(max=1.0)
        sy = torch.sqrt(area / ratio).clamp(max=1.0)
        tx = (1 - sx) * (2 * torch.rand(n, generator=g, device=dev) - 1)
        ty = (1 - sy) * (2 * torch.rand(n, generator=g, device=dev) - 1)
        theta = torch.zeros(n, 2, 3, device=dev)
        theta[:, 0, 0] = sx * flip
        theta[:, 0, 2] = tx
        theta[:, 1, 1] = sy
        theta[:, 1, 2] = ty
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)

    def batches(
        self, loader: Iterator[tuple[torch.Tensor, torch.Tensor, Any]], train: bool = True
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, tuple[Any, torch.Tensor]]]:
        """``(inputs, labels, (meta, augmentation state after this batch))`` on the device.

        ``meta`` is passed through (the loader position). On CUDA the next batch's copy and transform
        run on a side stream while the current batch trains; the augmentation state is captured per
        batch, so a checkpoint taken after batch k resumes augmentation exactly at batch k + 1.
        """
        if self.stream is None:
            for images, labels, meta in loader:
                x = self.transform(images, train)
                yield x, labels, (meta, self.generator.get_state())
            return
        pending: tuple[torch.Tensor, torch.Tensor, tuple[Any, torch.Tensor]] | None = None
        for images, labels, meta in loader:
            with torch.cuda.stream(self.stream):
                images_dev, labels_dev = self._to_device(images, labels)
                x = self.transform(images_dev, train)
            ready = (x, labels_dev, (meta, self.generator.get_state()))
            if pending is not None:
                yield pending
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            x.record_stream(current)
            labels_dev.record_stream(current)
            pending = ready
        if pending is not None:
            yield pending
