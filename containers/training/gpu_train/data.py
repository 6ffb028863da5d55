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
    it (XXH3-64 checksum), and copies pre-decoded ``uint8`` pixels straight into a batch slot: shared memory
    that the main process allocated before the workers started (:class:`BatchSlots`), a ring of slots per
    worker, page-locked (pinned) for the GPU's copy engine once the workers run. So the per-sample work is one
    ``memcpy``, and the main process receives only ``(worker, slot, ...)`` numbers per batch: no tensor
    pickling, no shared-memory mapping, no pinning copy (``DataLoader(pin_memory=True)`` copied every batch
    again into pinned memory, in a thread of the training process), no per-batch allocation. A slot goes back
    to its worker once the batch's host-to-device copy is known to be done (``hold`` batches later, see
    :class:`ShardLoader`). Pixels travel to the GPU as ``uint8`` (4x fewer bytes than float) with non-blocking
    copies on a side stream, ``depth`` batches ahead of the training step (:class:`DevicePipeline`);
    conversion, normalisation, random-resized-crop and flip run batched on the GPU, in channels_last layout.

JPEG shards
    Shards packed with ``gpuctl shard --format jpeg`` hold baseline JPEGs of the training size (``index.json``:
    ``sample.image.encoding = "jpeg"``). With a CUDA device and torchvision the workers put each batch's JPEG
    bytes into the slot and the main process decodes the batch on the GPU with nvJPEG
    (``torchvision.io.decode_jpeg(list, device="cuda")``); otherwise the workers decode them with Pillow into
    pixels, and the rest is as for raw shards (:func:`jpeg_decode_for` picks).

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
import ctypes
import logging
import math
import mmap
import multiprocessing
import os
import time
import weakref
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
ENCODINGS = ("raw", "jpeg")  # sample.image.encoding in index.json (gpu_train.pack)
JPEG_EXTS = ("jpg", "jpeg")
JPEG_DECODERS = ("cpu", "device")
#: Batches the device pipeline copies (or decodes) ahead of the training step.
PREFETCH_DEPTH = 2


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


def image_encoding(index: DatasetIndex | None, where: str = "index.json") -> str:
    """How a dataset stores its images: ``raw`` (``uint8`` arrays, also datasets without an index) or ``jpeg``."""
    spec = (index.sample.get("image") if index is not None else None) or {}
    encoding = str(spec.get("encoding", "raw"))
    if encoding not in ENCODINGS:
        raise DataError(
            f"{where}: image encoding {encoding!r} is not supported by this reader; supported: {', '.join(ENCODINGS)} "
            "(re-pack with this version of `gpuctl shard`, or update the training image)"
        )
    return encoding


def gpu_jpeg_problem(device: torch.device) -> str | None:
    """Why batches of JPEGs cannot be decoded on ``device`` with nvJPEG, or None when they can.

    ``torchvision.io.decode_jpeg`` takes a list of CPU ``uint8`` tensors and ``device="cuda"`` and decodes them as
    one batch with nvJPEG (https://pytorch.org/vision/stable/generated/torchvision.io.decode_jpeg.html); a
    torchvision built without nvJPEG raises. A one-pixel JPEG is decoded once to find out.
    """
    if device.type != "cuda":
        return f"device {device} is not a CUDA device"
    try:
        import torchvision.io
    except ImportError as exc:
        return f"torchvision is not installed ({exc}); install the torchvision build that matches torch"
    from gpu_train.pack import encode_jpeg

    probe = torch.frombuffer(bytearray(encode_jpeg(np.zeros((8, 8, 3), np.uint8), 90)), dtype=torch.uint8)
    try:
        torchvision.io.decode_jpeg([probe], device=device)
    except (RuntimeError, ValueError) as exc:
        return f"torchvision {torchvision.__version__} cannot decode JPEGs on {device}: {exc}"
    return None


def jpeg_decode_for(source: DataSource, device: torch.device) -> str:
    """Where the JPEG images of ``source`` are decoded: ``device`` (nvJPEG, batched, in the training process) when
    the index says they are JPEGs of one size and ``device`` can, else ``cpu`` (Pillow, in the loader workers)."""
    where = f"channel {source.channel.name!r} index.json"
    if image_encoding(source.index, where) != "jpeg":
        return "cpu"
    problem = gpu_jpeg_problem(device)
    if problem is not None:
        log.info("channel %r holds JPEG shards: decoding them in the loader workers (%s)", source.channel.name, problem)
        return "cpu"
    return "device"


def _decode_jpeg_cpu(data: np.ndarray | bytes, shape: tuple[int, ...], where: str) -> np.ndarray:
    """One JPEG as a ``uint8`` (H, W, 3) array (Pillow); resized and centre-cropped when it is not ``shape``."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError(
            f"{where} holds JPEG images and decoding them on the CPU needs Pillow, which is not installed "
            "(pip install Pillow)"
        ) from None
    import io

    from gpu_train.pack import load_image

    raw = data.tobytes() if isinstance(data, np.ndarray) else data
    try:
        with Image.open(io.BytesIO(raw)) as image:
            if image.size == (shape[1], shape[0]) and image.mode == "RGB":
                return np.asarray(image)
        return load_image(io.BytesIO(raw), shape[0])
    except (OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"{where}: a JPEG image cannot be decoded: {exc}") from None


@dataclass
class EncodedBatch:
    """The JPEG bytes of a batch, back to back in ``data``, image ``i`` taking ``sizes[i]`` bytes.

    What :meth:`ShardLoader.epoch` yields in place of pixels when the device decodes (``jpeg_decode="device"``);
    :class:`DevicePipeline` decodes it.
    """

    data: torch.Tensor  # uint8, flat
    sizes: torch.Tensor  # int64 (n,)

    def __len__(self) -> int:
        return int(self.sizes.shape[0])

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self),)

    def parts(self) -> list[torch.Tensor]:
        """One 1-D ``uint8`` tensor (a view) per image."""
        sizes = self.sizes.tolist()
        return list(torch.split(self.data[: sum(sizes)], sizes))


@dataclass
class _ShardSamples:
    """One checked shard: labels, and either pixels (n, H, W, 3) or each sample's encoded image in ``data``."""

    labels: np.ndarray
    pixels: np.ndarray | None = None
    data: np.ndarray | None = None  # the shard's bytes (uint8)
    offsets: np.ndarray | None = None
    sizes: np.ndarray | None = None
    where: str = ""

    def __len__(self) -> int:
        return len(self.labels)


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
    ring_size: int = 0  # >0: batch slots per loader worker, reused in turn (see ShardLoader, BatchSlots)
    jpeg_decode: str = "cpu"  # JPEG shards: "cpu" (Pillow, in the workers) or "device" (DevicePipeline, nvJPEG)
    encoded_bytes: int = 0  # jpeg_decode="device": room per image in a batch slot (0: the raw image size)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return (self.image_size, self.image_size, 3)

    @property
    def slot_image_bytes(self) -> int:
        """Bytes per image in a batch slot: pixels, or (device decoding) the largest JPEG allowed."""
        if self.jpeg_decode == "device":
            return self.encoded_bytes or math.prod(self.image_shape)
        return math.prod(self.image_shape)


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


def _shared_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory (no page is touched: memory is committed as it is written)."""
    count = math.prod(shape)
    storage = torch.UntypedStorage._new_shared(count * torch.empty(0, dtype=dtype).element_size())
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


def _unpin(cudart: Any, tensors: list[torch.Tensor]) -> None:
    """Undo :meth:`BatchSlots.pin` for ``tensors`` (which this call keeps mapped until it returns)."""
    failed = [error for error in (cudart.cudaHostUnregister(t.data_ptr()) for t in tensors) if int(error) != 0]
    if failed:
        clear_cuda_error()
        log.warning("cudaHostUnregister of loader batch slots failed: %s", cudart.cudaGetErrorString(failed[0]))


def clear_cuda_error() -> int:
    """Reset the CUDA runtime's last error (``cudaGetLastError``) and return what it was (0: none; -1: no CUDA
    runtime library is loaded in this process). torch has no Python binding for it and checks the last error after
    each kernel launch, so an error left by a failed ``cudaHostRegister`` would fail an unrelated copy later. The
    runtime is the ``libcudart`` torch loaded (found in ``/proc/self/maps``): the last error belongs to it."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return -1
    paths = {line.split()[-1] for line in maps.splitlines() if "libcudart.so" in line.rsplit("/", 1)[-1]}
    if not paths:
        return -1
    get_last_error = ctypes.CDLL(sorted(paths)[0]).cudaGetLastError
    get_last_error.restype = ctypes.c_int
    return int(get_last_error())


class BatchSlots:
    """The batch buffers of a loader's workers: ``ring`` slots per worker, in shared memory made by the main
    process before it starts the workers, so a worker fills a slot that the training process already maps.

    A worker hands over ``(worker, slot)``; the main process counts, per worker, the batches whose slots it gave
    back (``control``: ``[generation, (generation_w, released_w) per worker]``), and a worker waits before
    filling a slot whose previous batch is not given back yet. Each epoch is a new generation: the counts start
    again, and a worker still finishing the previous epoch (its batches are discarded) does not wait.

    :meth:`pin` page-locks the slots (``cudaHostRegister``) so host-to-device copies from them are asynchronous
    DMA transfers; it is called once the workers have started, so the registration never meets a ``fork``
    (the CUDA driver may mark page-locked ranges not to be inherited by child processes).
    """

    def __init__(self, config: StreamConfig) -> None:
        self.workers, self.ring, self.batch_size = max(1, config.num_workers), config.ring_size, config.batch_size
        head = (self.workers, self.ring, self.batch_size)
        self.encoded = config.jpeg_decode == "device"
        self.image_bytes = config.slot_image_bytes
        if self.encoded:
            self.data: torch.Tensor | None = _shared_tensor(
                (*head[:2], self.batch_size * self.image_bytes), torch.uint8
            )
            self.sizes: torch.Tensor | None = _shared_tensor(head, torch.int64)
            self.images: torch.Tensor | None = None
        else:
            self.data = self.sizes = None
            self.images = _shared_tensor((*head, *config.image_shape), torch.uint8)
        self.labels = _shared_tensor(head, torch.int64)
        self.control = torch.zeros(1 + 2 * self.workers, dtype=torch.int64).share_memory_()
        self._control = self.control.numpy()
        self.pinned = self.pin_failed = False

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.images, self.data, self.sizes, self.labels) if t is not None
        )

    # -- main process

    def new_generation(self) -> None:
        """A new epoch: every slot is free (the caller has no copy from one in flight)."""
        generation = int(self._control[0]) + 1
        self._control[1::2] = generation
        self._control[2::2] = 0
        self._control[0] = generation  # last: a worker that sees it sees the reset counts too

    def release(self, worker: int) -> None:
        """Give back the oldest slot of ``worker`` that was not given back yet."""
        self._control[2 + 2 * worker] += 1

    def views(self, worker: int, slot: int, count: int) -> tuple[torch.Tensor | EncodedBatch, torch.Tensor]:
        labels = self.labels[worker, slot, :count]
        if self.encoded:
            assert self.data is not None and self.sizes is not None
            return EncodedBatch(self.data[worker, slot], self.sizes[worker, slot, :count]), labels
        assert self.images is not None
        return self.images[worker, slot, :count], labels

    def pin(self) -> None:
        """Page-lock the slots for the GPU (https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html,
        ``cudaHostRegister``); a failure (e.g. a locked-memory limit) leaves them pageable, with a warning.

        The registration is undone (``cudaHostUnregister``) when the slots are collected, before their memory is
        unmapped: a range left registered makes the next ``cudaHostRegister`` of memory mapped at the same address
        fail with ``cudaErrorHostMemoryAlreadyRegistered``. A failed call also leaves the runtime's last error set,
        which the next kernel launch would raise as its own; it is cleared here (:func:`clear_cuda_error`)."""
        if self.pinned or self.pin_failed or not torch.cuda.is_available():
            return
        cudart = torch.cuda.cudart()
        registered: list[torch.Tensor] = []
        for tensor in (self.images, self.data, self.sizes, self.labels):
            if tensor is None:
                continue
            size = tensor.numel() * tensor.element_size()
            error = cudart.cudaHostRegister(tensor.data_ptr(), size, 0)
            if int(error) != 0:
                _unpin(cudart, registered)
                clear_cuda_error()
                self.pin_failed = True  # not tried again each epoch
                log.warning(
                    "cannot page-lock %.1f MiB of loader batch slots (cudaHostRegister: %s): host-to-device copies "
                    "from them are synchronous",
                    size / 2**20,
                    cudart.cudaGetErrorString(error),
                )
                return
            registered.append(tensor)
        self._unpin = weakref.finalize(self, _unpin, cudart, registered)
        self._unpin.atexit = False  # at exit the process's memory goes with it
        self.pinned = True

    # -- worker

    def wait(self, worker: int, generation: int, released: int) -> None:
        """Wait until the main process gave back ``released`` batches of ``worker`` in ``generation``."""
        control = self._control
        while control[0] == generation:
            if control[1 + 2 * worker] == generation and control[2 + 2 * worker] >= released:
                return
            time.sleep(0.0002)


class ShardStream(IterableDataset[tuple[Any, ...]]):
    """Yields ``(images uint8 [B,H,W,3], labels int64 [B], logical worker, batch number)`` in process, and
    ``(physical worker, slot, logical worker, batch number, batch size)`` from a worker that fills
    :class:`BatchSlots`."""

    def __init__(self, config: StreamConfig, state: SharedState, slots: BatchSlots | None = None) -> None:
        super().__init__()
        self.config = config
        self.state = state
        self.slots = slots
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

    def _shard_samples(self, data: bytes | bytearray | memoryview, where: str, expected: int | None) -> _ShardSamples:
        """Check one shard and return its samples: labels (n,) int64, and pixels (n, H, W, 3) uint8 or, for a
        shard of JPEGs, where each one is (decoded as the batches are filled, or on the device).

        Raw shards from ``gpuctl shard`` take the fast path: a zero-copy view checked as a whole (checksum and a
        vectorised header check). Other shards (other tools, encoded images, a custom decoder) are parsed
        member by member; shards whose samples are each one JPEG and a label keep the JPEG bytes, other
        images are decoded sample by sample here.
        """
        cfg = self.config
        shape = cfg.image_shape
        fast = regular_image_shard(data, where, shape) if cfg.decoder is None else None
        if fast is not None:
            shard = _ShardSamples(labels=fast[1], pixels=fast[0], where=where)
        else:
            archive = parse_archive(data, where)
            jpegs = self._jpeg_samples(archive) if cfg.decoder is None else None
            if jpegs is not None:
                shard = jpegs
            else:
                pixels = np.empty((len(archive.samples), *shape), dtype=np.uint8)
                labels = np.empty(len(archive.samples), dtype=np.int64)
                for i, sample in enumerate(archive.samples):
                    labels[i] = self._decode_into(archive, sample, pixels[i])
                shard = _ShardSamples(labels=labels, pixels=pixels, where=where)
        labels = shard.labels
        if expected is not None and len(labels) != expected:
            raise DataError(f"{where}: {len(labels)} samples, index says {expected}")
        if len(labels) and (labels.min() < 0 or labels.max() >= cfg.num_classes):
            bad = int(labels.max() if labels.max() >= cfg.num_classes else labels.min())
            raise DataError(f"{where}: label {bad} is outside 0..{cfg.num_classes - 1}")
        return shard

    @staticmethod
    def _jpeg_samples(archive: Archive) -> _ShardSamples | None:
        """The samples of a shard whose every sample is one JPEG and a ``.cls`` label (None: another layout)."""
        count = len(archive.samples)
        if not count:
            return None
        offsets, sizes = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
        labels = np.empty(count, dtype=np.int64)
        view = memoryview(archive.data)
        for i, sample in enumerate(archive.samples):
            if len(sample) != 2 or "cls" not in sample:
                return None
            ext = next(e for e in sample if e != "cls")
            if ext not in JPEG_EXTS:
                return None
            offsets[i], sizes[i] = sample[ext]
            label_offset, label_size = sample["cls"]
            raw = bytes(view[label_offset : label_offset + label_size])
            try:
                labels[i] = int(raw)
            except ValueError:
                raise DataError(f"{archive.where}: label {raw[:20]!r} is not an integer") from None
        data = np.frombuffer(view, dtype=np.uint8)
        return _ShardSamples(labels=labels, data=data, offsets=offsets, sizes=sizes, where=archive.where)

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
    ) -> Iterator[tuple[_ShardSamples, int, int]]:
        """(samples, shard id for the in-shard permutation, samples to skip in it) per shard."""
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
                    yield self._shard_samples(buffer, archive_where, None), number, 0
            return
        for shard_id in self.worker_shards(epoch, worker):
            ref = source.shards[shard_id]
            per_rank = self._rank_samples(ref)
            if per_rank is not None and skip_samples >= per_rank:
                skip_samples -= per_rank  # skip a whole shard without reading it
                continue
            yield self._shard_samples(self._read_file(ref), f"shard {ref.path}", ref.samples), shard_id, skip_samples
            skip_samples = 0

    def _orders(self, epoch: int, worker: int, pipe_pass: int, skip: int) -> Iterator[tuple[_ShardSamples, np.ndarray]]:
        """(samples, sample order) per shard: this process's samples, permuted, resume skips applied."""
        cfg = self.config
        sample_split = cfg.source.is_pipe or not self.split_by_shard()
        pending = skip  # Pipe mode: nothing is known before reading, so skipped samples are read and dropped
        for shard, shard_id, skip_in in self._shards(epoch, worker, pipe_pass, 0 if cfg.source.is_pipe else skip):
            count = len(shard)
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
            yield shard, order

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

    def _buffers(self, physical: int, in_worker: bool) -> Iterator[tuple[int, _Fill]]:
        """``(slot, buffers)`` to fill with the next batch: a slot of :class:`BatchSlots` (in a worker), else
        fresh tensors.

        A worker fills its slots in turn and waits, before reusing one, until the main process has given its
        previous batch back (:meth:`BatchSlots.wait`); in one epoch its ``n``-th batch goes to slot ``n % ring``.
        """
        cfg = self.config
        slots = self.slots if in_worker else None
        if slots is None:
            while True:
                yield -1, _Fill.fresh(cfg)
        generation = int(slots.control[0])
        ring = slots.ring
        number = 0
        while True:
            slot = number % ring
            if number >= ring:
                slots.wait(physical, generation, number - ring + 1)
            yield slot, _Fill.of_slot(slots, physical, slot)
            number += 1

    def _fill(self, batch: _Fill, filled: int, shard: _ShardSamples, chosen: np.ndarray) -> None:
        """Put the samples ``chosen`` of ``shard`` at positions ``filled, filled + 1, ...`` of ``batch``."""
        cfg = self.config
        if shard.pixels is not None:
            if batch.pixels is None:
                raise DataError(
                    f"{shard.where} holds raw pixels, but index.json says the dataset holds JPEGs "
                    "(a shard from another packing run?): re-pack the whole dataset with one --format"
                )
            # One memcpy per sample (np.take would first copy the whole strided shard view).
            for position, index in enumerate(chosen.tolist(), filled):
                batch.pixels[position] = shard.pixels[index]
        else:
            assert shard.data is not None and shard.offsets is not None and shard.sizes is not None
            offsets, sizes = shard.offsets, shard.sizes
            if batch.pixels is not None:  # decoded here, with Pillow
                shape = cfg.image_shape
                for position, index in enumerate(chosen.tolist(), filled):
                    start = int(offsets[index])
                    image = shard.data[start : start + int(sizes[index])]
                    batch.pixels[position] = _decode_jpeg_cpu(image, shape, shard.where)
            else:  # the JPEG bytes, for the device to decode
                assert batch.data is not None and batch.sizes is not None
                for position, index in enumerate(chosen.tolist(), filled):
                    start, size = int(offsets[index]), int(sizes[index])
                    if batch.used + size > len(batch.data):
                        raise DataError(
                            f"{shard.where}: the JPEGs of one batch need more than its {len(batch.data)} bytes "
                            f"({cfg.batch_size} x {cfg.slot_image_bytes}, from max_bytes in index.json): an image "
                            f"of {size} bytes is larger than index.json says; re-pack the dataset"
                        )
                    batch.data[batch.used : batch.used + size] = shard.data[start : start + size]
                    batch.sizes[position] = size
                    batch.used += size
        batch.labels[filled : filled + len(chosen)] = shard.labels[chosen]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        cfg = self.config
        info = get_worker_info()
        physical = 0 if info is None else info.id
        epoch, rotation, pipe_pass, skips = self.state.get()
        workers = max(1, cfg.num_workers)
        logical = (physical + rotation) % workers
        skip_batches = skips[logical]
        in_worker = info is not None and self.slots is not None
        if info is not None:
            torch.set_num_threads(1)
        buffers = self._buffers(physical, in_worker)
        slot, batch = next(buffers)
        filled = 0
        seq = skip_batches
        shards = 0

        def report(finished: bool) -> None:
            dropped = filled if finished and cfg.drop_last else 0
            batches = seq + (1 if finished and filled and not cfg.drop_last else 0)
            stats = StreamStats(shards, seq * cfg.batch_size + filled, batches, dropped, finished)
            self.state.record(logical, epoch, stats)

        def item(count: int) -> tuple[Any, ...]:
            if in_worker:
                return physical, slot, logical, seq, count
            images, labels = batch.tensors(count)
            return images, labels, logical, seq

        report(False)
        for shard, order in self._orders(epoch, logical, pipe_pass, skip_batches * cfg.batch_size):
            shards += 1
            position = 0
            while position < len(order):
                take = min(cfg.batch_size - filled, len(order) - position)
                self._fill(batch, filled, shard, order[position : position + take])
                filled += take
                position += take
                if filled == cfg.batch_size:
                    yield item(filled)
                    seq += 1
                    filled = 0
                    slot, batch = next(buffers)
            report(False)
        # Reported before the last item: the consumer may stop asking once it has it.
        report(True)
        if filled and not cfg.drop_last:
            yield item(filled)


@dataclass
class _Fill:
    """The buffers one batch is filled into (numpy views of tensors): pixels, or JPEG bytes and their sizes."""

    labels_tensor: torch.Tensor
    pixels_tensor: torch.Tensor | None
    data_tensor: torch.Tensor | None
    sizes_tensor: torch.Tensor | None
    used: int = 0  # bytes of ``data`` filled

    def __post_init__(self) -> None:
        self.labels = self.labels_tensor.numpy()
        self.pixels = None if self.pixels_tensor is None else self.pixels_tensor.numpy()
        self.data = None if self.data_tensor is None else self.data_tensor.numpy()
        self.sizes = None if self.sizes_tensor is None else self.sizes_tensor.numpy()

    @classmethod
    def fresh(cls, cfg: StreamConfig) -> _Fill:
        labels = torch.empty(cfg.batch_size, dtype=torch.int64)
        if cfg.jpeg_decode == "device":
            data = torch.empty(cfg.batch_size * cfg.slot_image_bytes, dtype=torch.uint8)
            return cls(labels, None, data, torch.empty(cfg.batch_size, dtype=torch.int64))
        return cls(labels, torch.empty((cfg.batch_size, *cfg.image_shape), dtype=torch.uint8), None, None)

    @classmethod
    def of_slot(cls, slots: BatchSlots, worker: int, slot: int) -> _Fill:
        pick = (worker, slot)
        return cls(
            slots.labels[pick],
            None if slots.images is None else slots.images[pick],
            None if slots.data is None else slots.data[pick],
            None if slots.sizes is None else slots.sizes[pick],
        )

    def tensors(self, count: int) -> tuple[torch.Tensor | EncodedBatch, torch.Tensor]:
        """The first ``count`` samples (in process: fresh buffers, so they are the caller's)."""
        if self.pixels_tensor is not None:
            return self.pixels_tensor[:count], self.labels_tensor[:count]
        assert self.data_tensor is not None and self.sizes_tensor is not None
        return EncodedBatch(self.data_tensor, self.sizes_tensor[:count]), self.labels_tensor[:count]


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
    """A ``DataLoader`` over a :class:`ShardStream` that knows its position for exact resumption.

    With workers, batches are views of :class:`BatchSlots` that the workers reuse: a batch :meth:`epoch` yielded
    stays valid until ``hold`` more batches have been asked for (then its slot goes back to its worker). A consumer
    that copies batches asynchronously must have finished the copy of a batch by then; :class:`DevicePipeline`
    with ``depth = hold - 1`` does (it waits for the copy event of that batch, long done in steady state).
    ``pin_memory`` page-locks the slots once the workers have started (persistent workers only).
    """

    def __init__(
        self,
        config: StreamConfig,
        *,
        pin_memory: bool = False,
        prefetch_factor: int = 4,
        persistent_workers: bool = True,
        hold: int = PREFETCH_DEPTH + 1,
    ) -> None:
        if hold < 1:
            raise ValueError(f"hold={hold} is not allowed; allowed: >= 1 (batches a consumer keeps using)")
        if config.jpeg_decode not in JPEG_DECODERS:
            raise ValueError(f"jpeg_decode={config.jpeg_decode!r} is not allowed; allowed: {', '.join(JPEG_DECODERS)}")
        if config.jpeg_decode == "device" and not config.encoded_bytes and config.source.index is not None:
            largest = int((config.source.index.sample.get("image") or {}).get("max_bytes") or 0)
            config = replace(config, encoded_bytes=largest)
        if config.num_workers > 0 and not config.ring_size:
            # A worker may be prefetch_factor batches ahead of what the trainer received, which holds `hold` more.
            config = replace(config, ring_size=prefetch_factor + hold + 1)
        self.config = config
        self.hold = hold
        self.state = SharedState(config.num_workers)
        self.slots = BatchSlots(config) if config.num_workers > 0 else None
        self._pin = pin_memory and persistent_workers and self.slots is not None
        self.dataset = ShardStream(config, self.state, self.slots)
        kwargs: dict[str, Any] = {}
        if config.num_workers > 0:
            kwargs.update(
                prefetch_factor=prefetch_factor,
                persistent_workers=persistent_workers,
                worker_init_fn=_WorkerInit(self.state),
                multiprocessing_context="fork" if os.name == "posix" else None,
            )
        # No DataLoader pin_memory: its thread would copy every batch once more, into pinned memory, in this
        # process; the workers write into (pinned) slots instead and only numbers cross the queue.
        self.loader = DataLoader(self.dataset, batch_size=None, num_workers=config.num_workers, **kwargs)
        self.pipe_pass = 0  # Pipe mode: FIFO <channel>_<n> for the n-th pass in this container

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
    ) -> Iterator[tuple[torch.Tensor | EncodedBatch, torch.Tensor, LoaderState]]:
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
        slots = self.slots
        if slots is not None:
            slots.new_generation()
        batches = iter(self.loader)
        if self._pin and slots is not None:
            slots.pin()  # after the workers started (BatchSlots.pin)
        held: collections.deque[int] = collections.deque()  # the worker of each batch still held, oldest first
        while True:
            if slots is not None:
                while len(held) >= self.hold:
                    slots.release(held.popleft())
            item = next(batches, None)
            if item is None:
                return
            if slots is not None:
                physical, slot, logical, seq, count = item
                images, labels = slots.views(physical, slot, count)
                held.append(physical)
            else:
                images, labels, logical, seq = item
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
            yield images, labels, position


# ---------------------------------------------------------------------------------- device-side work


@dataclass
class PipelineTimes:
    """Where the training process spent its time in :meth:`DevicePipeline.batches` (seconds, summed)."""

    batches: int = 0
    wait: float = 0.0  # blocked until the loader handed over the next batch
    issue: float = 0.0  # queueing its copy (or decode) and transform
    release: float = 0.0  # waiting for an old batch's copy to finish before its slot goes back

    def add(self, other: PipelineTimes) -> None:
        self.batches += other.batches
        self.wait += other.wait
        self.issue += other.issue
        self.release += other.release


class DevicePipeline:
    """Moves uint8 NHWC batches to the device and turns them into normalised float NCHW tensors.

    On CUDA each batch is copied (``uint8``, from the loader's pinned slots, non-blocking) or, for JPEG shards,
    decoded with nvJPEG, then converted and augmented, all on a side stream, ``depth`` batches ahead of the
    batch being trained; the training stream waits for that batch's event only, and nothing here synchronises
    the host with the device except waiting for a copy issued ``depth`` batches earlier (done long before in
    steady state) before its slot goes back to the loader. Augmentation (random resized crop with flips, one
    batched ``grid_sample``) draws from its own generator, whose state is part of the checkpoint. With
    ``profile``, :attr:`times` adds up where the host spent its time.
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
        depth: int = PREFETCH_DEPTH,
        profile: bool = False,
    ) -> None:
        if depth < 0:
            raise ValueError(f"prefetch depth {depth} is not allowed; allowed: >= 0 batches")
        self.device = device
        self.augment = augment
        self.channels_last = channels_last
        self.crop_area = crop_area
        self.crop_ratio = crop_ratio
        self.depth = depth
        self.mean = torch.tensor(mean, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0
        self.inv_std = 1.0 / (torch.tensor(std, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.times: PipelineTimes | None = PipelineTimes() if profile else None

    @property
    def hold(self) -> int:
        """How many batches the loader must keep valid for this pipeline (``ShardLoader(hold=...)``)."""
        return self.depth + 1

    def _decode(self, batch: EncodedBatch) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """nvJPEG decode of a batch: uint8 (N, H, W, 3) (a channels_last view of N, 3, H, W), and the decoded
        images (kept until the stack that reads them is done: see :meth:`batches`)."""
        if self.device.type != "cuda":
            raise DataError(
                f"a batch of JPEG bytes reached the {self.device} pipeline; JPEGs are decoded on the device only "
                "on CUDA (set jpeg_decode='cpu' to decode them in the loader workers)"
            )
        try:
            from torchvision.io import decode_jpeg
        except ImportError:
            raise DataError(
                "the shards hold JPEG images to decode on the GPU, and torchvision (nvJPEG) is not installed: "
                "install the torchvision build that matches torch, or decode in the loader workers "
                "(jpeg_decode='cpu')"
            ) from None
        images = decode_jpeg(batch.parts(), device=self.device)
        shape = tuple(images[0].shape) if images else ()
        if any(tuple(image.shape) != shape for image in images) or len(shape) != 3 or shape[0] != 3:
            odd = next((tuple(i.shape) for i in images if tuple(i.shape) != shape), shape)
            raise DataError(
                f"a batch of JPEGs decodes to images of shapes {shape} and {odd}; expected (3, H, W), all one size "
                "(re-pack with `gpuctl shard --format jpeg --image-size N`)"
            )
        return torch.stack(images).permute(0, 2, 3, 1), images

    def _stage(
        self, images: torch.Tensor | EncodedBatch, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """The batch on the device (uint8 NHWC, labels), and what must live until its copy is done."""
        if isinstance(images, EncodedBatch):
            pixels, keep = self._decode(images)
            return pixels, labels.to(self.device, non_blocking=True), keep
        if self.device.type == "cpu":
            return images, labels.clone(), None
        return images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True), None

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
        self, loader: Iterator[tuple[torch.Tensor | EncodedBatch, torch.Tensor, Any]], train: bool = True
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, tuple[Any, torch.Tensor]]]:
        """``(inputs, labels, (meta, augmentation state after this batch))`` on the device.

        ``meta`` is passed through (the loader position). The augmentation state is captured per batch, so a
        checkpoint taken after batch k resumes augmentation exactly at batch k + 1. The loader must keep each
        batch valid for :attr:`hold` batches (``ShardLoader(hold=pipeline.hold)``).
        """
        times = self.times if self.times is not None else PipelineTimes()
        clock = time.perf_counter
        if self.stream is None:
            while True:
                started = clock()
                item = next(loader, None)
                fetched = clock()
                if item is None:
                    return
                images, labels, meta = item
                pixels, labels, _ = self._stage(images, labels)
                x = self.transform(pixels, train)
                times.batches += 1
                times.wait += fetched - started
                times.issue += clock() - fetched
                yield x, labels, (meta, self.generator.get_state())
        current = torch.cuda.current_stream(self.device)
        ready: collections.deque[tuple[torch.Tensor, torch.Tensor, tuple[Any, torch.Tensor], torch.cuda.Event]]
        ready = collections.deque()
        copies: collections.deque[tuple[torch.cuda.Event, Any]] = collections.deque()  # oldest first
        try:
            while True:
                started = clock()
                # Asking for the next batch gives the slot of the one `hold` back to the loader: its copy must be done.
                while len(copies) >= self.hold:
                    copies.popleft()[0].synchronize()
                waited = clock()
                item = next(loader, None)
                fetched = clock()
                if item is None:
                    break
                images, labels, meta = item
                with torch.cuda.stream(self.stream):
                    pixels, labels_dev, keep = self._stage(images, labels)
                    copied = torch.cuda.Event()
                    copied.record(self.stream)
                    x = self.transform(pixels, train)
                    done = torch.cuda.Event()
                    done.record(self.stream)
                copies.append((copied, keep))
                ready.append((x, labels_dev, (meta, self.generator.get_state()), done))
                times.batches += 1
                times.release += waited - started
                times.wait += fetched - waited
                times.issue += clock() - fetched
                if len(ready) > self.depth:
                    yield self._hand_over(ready.popleft(), current)
            while ready:
                yield self._hand_over(ready.popleft(), current)
        finally:
            # The loader reuses the slots once this ends (its next epoch): no copy from them may be left running.
            for event, _ in copies:
                event.synchronize()

    @staticmethod
    def _hand_over(
        entry: tuple[torch.Tensor, torch.Tensor, tuple[Any, torch.Tensor], torch.cuda.Event], current: torch.cuda.Stream
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[Any, torch.Tensor]]:
        """The batch for the training stream: it waits for this batch's work only, and owns its memory from here."""
        x, labels, state, done = entry
        current.wait_event(done)
        x.record_stream(current)
        labels.record_stream(current)
        return x, labels, state
