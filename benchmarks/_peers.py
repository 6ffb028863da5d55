"""The peer loaders' side of :mod:`benchmarks.loader_peers`: their own virtual environment, and the code that
converts data for them and times them (the shard loader and the naive loader are timed the same way, in the
same environment).

WebDataset, MosaicML Streaming and LitData are not project dependencies: they live in ``.bench/peers-venv``
(git-ignored), made with ``python -m venv`` and reused while its recorded specification matches. Its torch is
the project's CPU build (2.13.0, found locally by pip) and numpy, Pillow and xxhash are pinned to the project's
versions through a constraints file, so every loader decodes with the same libraries and no peer can pull
another torch. The three peers install with ``--no-deps``: mosaicml-streaming 0.13.0 declares
``numpy<2.2`` and ``xxhash<4`` and, like LitData, cloud SDKs that local reads never import; their import-time
dependencies are listed in :data:`PEER_RUNTIME_DEPS`.

Entry points run inside the venv (``python -m benchmarks._peers COMMAND SPEC_JSON``), each printing one line
``RESULT <json>`` on stdout:

* ``measure``: build one loader, run a warm-up epoch and ``epochs`` timed epochs, and report per epoch the wall
  time, the CPU time of the whole process tree (main process, loader workers, their threads) and the samples;
* ``convert``: write an MDS (``streaming.MDSWriter``) or LitData (``litdata.optimize``) copy of packed shards;
* ``profile``: one epoch in the main process (no workers) under :mod:`cProfile`; the functions with most own
  time.

Every loader yields the same thing: ``uint8`` images ``[B, H, W, 3]`` and ``int64`` labels ``[B]``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import glob
import importlib
import importlib.util
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".bench" / "peers-venv"
WORK = ROOT / ".bench" / "loader_peers"
RESULT_PREFIX = "RESULT "

#: The project's torch (the CPU wheel pip finds locally); any other version would be a multi-gigabyte download.
TORCH_VERSION = "2.13.0"
#: Packages pinned to the version the project's own environment has, so both decode with the same code.
PINNED_FROM_PROJECT = ("numpy", "pillow", "xxhash")
#: The peers, installed with ``--no-deps`` at these exact versions.
PEERS: dict[str, str] = {"webdataset": "1.0.2", "mosaicml-streaming": "0.13.0", "litdata": "0.2.76"}
#: What the peers import when reading and writing local data (their other dependencies are cloud SDKs).
PEER_RUNTIME_DEPS: tuple[str, ...] = (
    # webdataset
    "braceexpand",
    "pyyaml",
    # mosaicml-streaming: `import streaming` also imports its text (transformers) and vision (torchvision) datasets
    "transformers<5",
    "torchvision",
    "brotli",
    "python-snappy<1",
    "zstd<2",
    "catalogue<3",
    "tqdm<5",
    # litdata
    "lightning-utilities",
    "filelock",
    "boto3<2",
    "requests",
    # process-tree CPU time
    "psutil",
)

LOADERS = ("shard", "webdataset", "mds", "litdata", "naive")
#: A what-if, pre-decoded only: the shard loader with the consumer holding its last ring_size x workers batches.
HELD = "shard-held"
VARIANTS = ("decoded", "jpeg")
PAGE = 4096


class PeerError(RuntimeError):
    """The peer environment could not be made, or a child run failed."""


# ------------------------------------------------------------------------------------ the environment


def pins(project_versions: Callable[[str], str] = version) -> dict[str, str]:
    """Exact versions for the constraints file: torch, and the project's numpy, Pillow and xxhash."""
    out = {"torch": TORCH_VERSION}
    for name in PINNED_FROM_PROJECT:
        try:
            out[name] = project_versions(name)
        except PackageNotFoundError:
            raise PeerError(f"the project's environment has no {name}; run `make setup` first") from None
    return out


def constraints_text(pinned: dict[str, str]) -> str:
    """A pip constraints file: ``name==version`` per line, sorted."""
    return "".join(f"{name}=={pinned[name]}\n" for name in sorted(pinned))


def venv_spec(pinned: dict[str, str]) -> dict[str, Any]:
    """What the venv holds; a venv whose recorded spec differs is rebuilt."""
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "pins": pinned,
        "peers": PEERS,
        "deps": list(PEER_RUNTIME_DEPS),
    }


def venv_python(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def _run(command: Sequence[str], what: str, *, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise PeerError(f"{what}: no result after {timeout:.0f} s ({' '.join(command[:6])} ...)") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        raise PeerError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def ensure_venv(venv: Path = VENV, log: Callable[[str], None] = print) -> Path:
    """The peer venv's python, made (or remade) when missing or when its recorded spec differs."""
    pinned = pins()
    spec = venv_spec(pinned)
    marker = venv / "peers-spec.json"
    python = venv_python(venv)
    if python.exists() and marker.exists() and json.loads(marker.read_text()) == spec:
        return python
    log(
        f"making the peer environment {venv} (torch {TORCH_VERSION}, {', '.join(f'{k} {v}' for k, v in PEERS.items())})"
    )
    started = time.perf_counter()
    marker.unlink(missing_ok=True)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], f"python -m venv {venv}")
    constraints = venv / "constraints.txt"
    constraints.write_text(constraints_text(pinned))
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(constraints)]
    _run([*pip, *(f"{name}=={v}" for name, v in sorted(pinned.items()))], "installing torch and the pinned packages")
    _run([*pip, "--no-deps", *(f"{name}=={v}" for name, v in PEERS.items())], "installing the peer loaders")
    _run([*pip, *PEER_RUNTIME_DEPS], "installing the peers' run-time dependencies")
    found = venv_versions(python, import_peers=True)
    wrong = {
        name: (found.get(name, "missing"), want)
        for name, want in {**pinned, **PEERS}.items()
        if str(found.get(name, "")).split("+", 1)[0] != want
    }
    if wrong:
        detail = ", ".join(f"{n} {got} (wanted {want})" for n, (got, want) in wrong.items())
        raise PeerError(f"the peer venv {venv} has the wrong versions: {detail}")
    marker.write_text(json.dumps(spec, indent=1, sort_keys=True))
    log(f"  {time.perf_counter() - started:.0f} s")
    return python


def venv_versions(python: Path, *, import_peers: bool = False) -> dict[str, str]:
    """Versions of torch, the pinned packages and the peers in the venv (after importing the peers, when asked)."""
    code = (
        "import json, sys; from importlib.metadata import version; "
        + ("import benchmarks._peers as p; p.import_peers(); " if import_peers else "")
        + "print(json.dumps({name: version(name) for name in sys.argv[1:]}))"
    )
    names = ["torch", *PINNED_FROM_PROJECT, *PEERS]
    found: dict[str, str] = json.loads(
        _run([str(python), "-c", code, *names], f"reading versions in {python}", env=child_env())
    )
    return found


def child_env() -> dict[str, str]:
    """Environment of every child: the repository and the training runtime importable, one thread per process,
    nothing fetched from the network."""
    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "containers" / "training")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env.update(
        PYTHONPATH=os.pathsep.join(paths),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
        LITDATA_DISABLE_VERSION_CHECK="1",
        LITDATA_CACHE_DIR=str(WORK / "litdata-cache"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def run_child(python: Path, command: str, spec: dict[str, Any], *, timeout: float = 1800) -> dict[str, Any]:
    """Run ``python -m benchmarks._peers COMMAND SPEC`` and return its ``RESULT`` object."""
    what = f"{command} {spec.get('loader', spec.get('format', ''))} ({spec.get('variant', '')})"
    out = _run(
        [str(python), "-m", "benchmarks._peers", command, json.dumps(spec)], what, env=child_env(), timeout=timeout
    )
    return parse_result(out, what)


def parse_result(stdout: str, what: str) -> dict[str, Any]:
    """The object of the last ``RESULT <json>`` line of a child's output."""
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise PeerError(f"{what}: the child printed no {RESULT_PREFIX.strip()} line; output ends:\n{stdout[-2000:]}")
    value = json.loads(lines[-1][len(RESULT_PREFIX) :])
    if not isinstance(value, dict):
        raise PeerError(f"{what}: RESULT is {type(value).__name__}, expected a JSON object")
    return value


# ------------------------------------------------------------------------------ inside the venv: imports


def declare_torchvision_ops() -> bool:
    """Let ``import torchvision`` succeed when its compiled ops cannot load; True when that was needed.

    ``import streaming`` imports torchvision (for its vision datasets, unused here). The torchvision wheels on
    PyPI are CUDA builds: with the CPU torch their ``_C`` library fails to load (``libc10_cuda.so`` is missing),
    which torchvision tolerates, but its ``_meta_registrations`` then registers fake kernels for ``nms`` and
    ``qnms`` unconditionally and fails with "operator torchvision::nms does not exist". Declaring the two
    schemas first (``torch.library.define``, https://pytorch.org/docs/stable/library.html) lets the pure-Python
    parts import; no torchvision op runs in this benchmark. Nothing is declared where ``_C`` loads.
    """
    import torch

    found = importlib.util.find_spec("torchvision")
    if found is None or found.origin is None:
        return False
    libraries = sorted(glob.glob(os.path.join(os.path.dirname(found.origin), "_C*.so")))
    if libraries:
        try:
            torch.ops.load_library(libraries[0])
            return False
        except OSError:
            pass
    for name in ("nms", "qnms"):
        with contextlib.suppress(RuntimeError):  # already declared by an earlier call
            torch.library.define(f"torchvision::{name}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    return True


def import_peer(module: str) -> Any:
    """``webdataset``, ``streaming`` (MosaicML) or ``litdata``, imported in this process."""
    if module == "streaming":
        declare_torchvision_ops()
    return importlib.import_module(module)


def import_peers() -> tuple[Any, Any, Any]:
    """(webdataset, streaming, litdata)."""
    return import_peer("webdataset"), import_peer("streaming"), import_peer("litdata")


# ------------------------------------------------------------------------------ inside the venv: samples


def decode_jpeg(data: bytes, size: int) -> Any:
    """The JPEG variant's decode, the same for every loader: ``gpu_train.pack.load_image`` (what the shard loader
    applies to encoded images: decode, shorter side to ``size``, centre crop) on the stored bytes."""
    from gpu_train.pack import load_image

    return load_image(io.BytesIO(data), size)


def samples_of_shard(path: Path, variant: str, image_size: int) -> Iterator[tuple[Any, int]]:
    """(image, label) of every sample of one packed shard, in stored order: a uint8 HWC array (``decoded``) or
    the stored JPEG bytes (``jpeg``)."""
    from gpu_train.shards import parse_archive, regular_image_shard

    data = path.read_bytes()
    where = f"shard {path}"
    if variant == "decoded":
        fast = regular_image_shard(data, where, (image_size, image_size, 3))
        if fast is None:
            raise PeerError(f"{where} is not a `gpuctl shard` image shard of {image_size}x{image_size}x3 uint8")
        pixels, labels, _ = fast
        for i in range(len(labels)):
            yield pixels[i].copy(), int(labels[i])
        return
    archive = parse_archive(data, where)
    view = memoryview(archive.data)
    for sample in archive.samples:
        if "jpg" not in sample or "cls" not in sample:
            raise PeerError(f"{where}: a sample has {sorted(sample)}, expected jpg and cls (gpuctl shard --mode raw)")
        offset, size = sample["jpg"]
        label_offset, label_size = sample["cls"]
        yield bytes(view[offset : offset + size]), int(bytes(view[label_offset : label_offset + label_size]))


def shard_samples(shards: Path, variant: str, image_size: int) -> Iterator[tuple[Any, int]]:
    """Every sample of a packed dataset, shard by shard in index order (see :func:`samples_of_shard`)."""
    from gpu_train.data import discover
    from gpu_train.sagemaker import Channel

    for ref in discover(Channel("train", path=shards)).shards:
        yield from samples_of_shard(ref.path, variant, image_size)


def _shard_list(shards: str) -> list[str]:
    return sorted(glob.glob(os.path.join(shards, "shard-*.tar")))


# ------------------------------------------------------------------------------ inside the venv: converting


def _litdata_item(path: str) -> Iterator[dict[str, Any]]:
    """``litdata.optimize`` fn: every sample of one shard (a generator: one input, many items)."""
    spec = json.loads(os.environ["LOADER_PEERS_CONVERT"])
    for image, label in samples_of_shard(Path(path), spec["variant"], int(spec["image_size"])):
        yield {"image" if spec["variant"] == "decoded" else "jpeg": image, "label": label}


def convert(spec: dict[str, Any]) -> dict[str, Any]:
    """Write ``spec['out']`` in ``spec['format']`` (``mds`` or ``litdata``) from the shards at ``spec['shards']``."""
    out, variant, size = Path(spec["out"]), spec["variant"], int(spec["image_size"])
    started = time.perf_counter()
    count = 0
    if spec["format"] == "mds":
        streaming = import_peer("streaming")
        columns = {"image": f"ndarray:uint8:{size},{size},3"} if variant == "decoded" else {"jpeg": "bytes"}
        columns["label"] = "int"
        with streaming.MDSWriter(
            out=str(out), columns=columns, compression=None, size_limit=int(spec["shard_bytes"]), progress_bar=False
        ) as writer:
            for image, label in shard_samples(Path(spec["shards"]), variant, size):
                writer.write({next(iter(columns)): image, "label": label})
                count += 1
    elif spec["format"] == "litdata":
        litdata = import_peer("litdata")
        # optimize() gives each input (a shard) to a worker; the workers find the spec in their environment.
        os.environ["LOADER_PEERS_CONVERT"] = json.dumps(spec)
        litdata.optimize(
            fn=_litdata_item,
            inputs=_shard_list(spec["shards"]),
            output_dir=str(out),
            chunk_bytes=int(spec["shard_bytes"]),
            num_workers=int(spec["workers"]),
            start_method="fork",
            verbose=False,
            mode="overwrite",
        )
        count = sum(int(chunk["chunk_size"]) for chunk in json.loads((out / "index.json").read_text())["chunks"])
    else:
        raise PeerError(f"format {spec['format']!r} is not allowed; allowed: mds, litdata")
    return {"samples": count, "seconds": time.perf_counter() - started}


# ------------------------------------------------------------------------------ inside the venv: loaders


Batches = Iterator[tuple[Any, Any]]


class _PerFile:
    """The naive loader's Dataset: one file per sample, read (``.npy``) or decoded (JPEG) on every access."""

    def __init__(self, files: list[tuple[str, int]], variant: str, image_size: int) -> None:
        self.files, self.variant, self.image_size = files, variant, image_size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import numpy as np

        path, label = self.files[index]
        if self.variant == "decoded":
            return np.load(path), label
        with open(path, "rb") as handle:
            return decode_jpeg(handle.read(), self.image_size), label


class _WdsJpeg:
    """WebDataset ``map`` stage of the JPEG variant: (decoded image, label) from a raw sample dict."""

    def __init__(self, image_size: int) -> None:
        self.image_size = image_size

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        return decode_jpeg(sample["jpg"], self.image_size), int(sample["cls"])


def _not_trailer(sample: dict[str, Any]) -> bool:
    """Drop the shard trailer (``__shard__.json``), which WebDataset reads as a sample of its own."""
    return bool(sample["__key__"] != "__shard__")


class _Pair:
    """MDS/LitData item -> (image, label): the stored array, or the JPEG decoded."""

    def __init__(self, variant: str, image_size: int) -> None:
        self.variant, self.image_size = variant, image_size

    def __call__(self, item: dict[str, Any]) -> tuple[Any, int]:
        if self.variant == "decoded":
            return item["image"], int(item["label"])
        return decode_jpeg(item["jpeg"], self.image_size), int(item["label"])


def _loader_kwargs(workers: int) -> dict[str, Any]:
    """The same ``DataLoader`` settings for every loader built on one (https://pytorch.org/docs/stable/data.html):
    persistent workers (kept across epochs, as in training), 4 batches prefetched per worker (as the shard
    loader), forked workers."""
    if workers == 0:
        return {"num_workers": 0}
    return {"num_workers": workers, "persistent_workers": True, "prefetch_factor": 4, "multiprocessing_context": "fork"}


def build_loader(spec: dict[str, Any]) -> Callable[[int], Batches]:
    """``epoch -> iterator of (images, labels)`` for ``spec['loader']`` on ``spec['variant']``'s data."""
    import torch
    from torch.utils.data import DataLoader

    loader, variant = spec["loader"], spec["variant"]
    batch, workers, seed, size = (
        int(spec["batch_size"]),
        int(spec["workers"]),
        int(spec["seed"]),
        int(spec["image_size"]),
    )
    data = spec["data"]
    if loader in ("shard", HELD):
        from benchmarks._shards import single_process_loader
        from gpu_train.data import discover
        from gpu_train.sagemaker import Channel

        source = discover(Channel("train", path=Path(data)))
        shard_loader = single_process_loader(
            source,
            batch_size=batch,
            image_size=size,
            num_classes=int(spec["num_classes"]),
            num_workers=workers,
            drop_last=False,
        )

        # HELD: a receiver maps a shared-memory storage it is sent and caches the mapping
        # (https://pytorch.org/docs/stable/multiprocessing.html, "file_descriptor" strategy), but the cache in
        # torch/multiprocessing/reductions.py holds it by weak reference: once the consumer drops a batch, the
        # next arrival of the same ring slot is mapped anew and its pages faulted in again when read. Holding the
        # batches of every ring slot keeps each slot mapped.
        held: deque[Any] = deque(maxlen=shard_loader.config.ring_size * max(1, workers) if loader == HELD else 0)

        def shard_epoch(epoch: int) -> Batches:
            for images, labels, _ in shard_loader.epoch(epoch):
                held.append(images)
                yield images, labels

        return shard_epoch
    if loader == "naive":
        files = [(str(path), int(label)) for path, label in json.loads(Path(data).read_text())]
        per_file: DataLoader[Any] = DataLoader(
            _PerFile(files, variant, size),  # type: ignore[arg-type]
            batch_size=batch,
            shuffle=True,
            generator=torch.Generator().manual_seed(seed),
            **_loader_kwargs(workers),
        )
        return lambda epoch: iter(per_file)
    if loader == "webdataset":
        wds = import_peer("webdataset")
        urls = _shard_list(data)
        # Training settings from the WebDataset docs: shuffle shards (per epoch, seeded) and samples (a buffer),
        # decode in the workers, batch in the workers, WebLoader(batch_size=None).
        dataset = wds.WebDataset(
            urls,
            shardshuffle=len(urls),
            detshuffle=True,
            seed=seed,
            nodesplitter=wds.single_node_only,
            workersplitter=wds.split_by_worker,
            empty_check=False,
        )
        dataset = dataset.select(_not_trailer).shuffle(1000)
        decoded = variant == "decoded"
        dataset = dataset.decode().to_tuple("npy", "cls") if decoded else dataset.map(_WdsJpeg(size))
        web = wds.WebLoader(dataset.batched(batch, partial=True), batch_size=None, **_loader_kwargs(workers))
        return lambda epoch: iter(web)
    if loader == "mds":
        streaming = import_peer("streaming")
        util = importlib.import_module("streaming.base.util")
        util.clean_stale_shared_memory()
        pair = _Pair(variant, size)

        class Mds(streaming.StreamingDataset):  # type: ignore[name-defined]
            """The documented way to transform MDS samples: override ``__getitem__``."""

            def __getitem__(self, index: int) -> tuple[Any, int]:
                return pair(super().__getitem__(index))

        mds = Mds(local=data, batch_size=batch, shuffle=True, shuffle_seed=seed)
        mds_loader = streaming.StreamingDataLoader(mds, batch_size=batch, **_loader_kwargs(workers))
        return lambda epoch: iter(mds_loader)
    if loader == "litdata":
        litdata = import_peer("litdata")
        # batch_decode=0 decodes item by item. The default ("auto") decodes 256-item windows and, with
        # shuffle=True, re-decoded each window for almost every item of it in litdata 0.2.76 (about 66 array
        # copies per sample, 20x slower here); per-item decoding is the documented alternative.
        lit = litdata.StreamingDataset(
            input_dir=data, shuffle=True, seed=seed, batch_decode=0, transform=_Pair(variant, size)
        )
        lit_loader = litdata.StreamingDataLoader(lit, batch_size=batch, **_loader_kwargs(workers))
        return lambda epoch: iter(lit_loader)
    raise PeerError(f"loader {loader!r} is not allowed; allowed: {', '.join([*LOADERS, HELD])}")


# ------------------------------------------------------------------------------ inside the venv: timing


def cpu_total(times: Iterable[Sequence[float]]) -> float:
    """CPU seconds of a process tree from each process's ``(user, system, children_user, children_system)``.

    A process's ``children_*`` hold its children that ended and were waited for; live children are listed
    themselves. Summed over the tree, every process is counted once, ended ones included.
    """
    return float(sum(sum(t[:4]) for t in times))


def tree_cpu_seconds(process: Any) -> float:
    """CPU seconds used so far by ``process`` (a ``psutil.Process``), its threads and all its descendants."""
    psutil = importlib.import_module("psutil")
    times = []
    for member in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            times.append(tuple(member.cpu_times())[:4])
    return cpu_total(times)


def _own_cpu_seconds() -> float:
    """CPU seconds of this (the main) process alone, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Warm-up epoch, then ``spec['epochs']`` timed epochs of one loader; checks every epoch's output."""
    import numpy as np
    import torch

    psutil = importlib.import_module("psutil")
    torch.set_num_threads(1)
    me = psutil.Process()
    classes = int(spec["num_classes"])
    size = int(spec["image_size"])
    started = time.perf_counter()
    epoch_batches = build_loader(spec)
    build_seconds = time.perf_counter() - started
    epochs: list[dict[str, Any]] = []
    label_counts: list[int] = []
    pixel_sum = 0
    for epoch in range(int(spec["epochs"]) + 1):
        warm_up = epoch == 0
        counts = np.zeros(classes, dtype=np.int64)
        samples = 0
        touched = 0
        main0, cpu0, wall0 = _own_cpu_seconds(), tree_cpu_seconds(me), time.perf_counter()
        for images, labels in epoch_batches(epoch):
            if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (size, size, 3) or labels.dtype != torch.int64:
                raise PeerError(
                    f"{spec['loader']} ({spec['variant']}) yielded images {images.dtype} {tuple(images.shape)} and "
                    f"labels {labels.dtype}; expected torch.uint8 [B, {size}, {size}, 3] and torch.int64"
                )
            # The consumer reads one byte of every 4 KiB page (a host-to-device copy reads them all), so costs a
            # loader defers to first access (mapping a new shared-memory batch) count for every loader.
            touched += int(images.reshape(-1)[::PAGE].sum())
            counts += np.bincount(labels.numpy(), minlength=classes)[:classes]
            samples += int(labels.shape[0])
            if warm_up:
                pixel_sum += int(images.sum(dtype=torch.int64))
        seconds = time.perf_counter() - wall0
        cpu = tree_cpu_seconds(me) - cpu0
        main_cpu = _own_cpu_seconds() - main0
        epochs.append(
            {
                "seconds": seconds,
                "cpu_seconds": cpu,
                "main_cpu_seconds": main_cpu,
                "samples": samples,
                "touched": touched,
            }
        )
        if warm_up:
            label_counts = [int(c) for c in counts]
        elif [int(c) for c in counts] != label_counts:
            raise PeerError(f"{spec['loader']} ({spec['variant']}) epoch {epoch}: labels differ from the warm-up epoch")
    return {
        "loader": spec["loader"],
        "variant": spec["variant"],
        "build_seconds": build_seconds,
        "epochs": epochs,
        "label_counts": label_counts,
        "pixel_sum": pixel_sum,
    }


def profile(spec: dict[str, Any]) -> dict[str, Any]:
    """One epoch of ``spec['loader']`` in the main process (no workers) under cProfile, after a warm-up epoch:
    the ``top`` functions by own time, with their share of the epoch."""
    spec = {**spec, "workers": 0}
    epoch_batches = build_loader(spec)
    for _ in epoch_batches(0):
        pass
    profiler = cProfile.Profile()
    samples = 0
    started = time.perf_counter()
    profiler.enable()
    for _, labels in epoch_batches(1):
        samples += int(labels.shape[0])
    profiler.disable()
    seconds = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(own for _, _, own, _, _ in raw.values()) or 1.0
    rows = sorted(
        ((own, calls, _where(file, line, name)) for (file, line, name), (_, calls, own, _, _) in raw.items()),
        reverse=True,
    )[: int(spec.get("top", 8))]
    return {
        "loader": spec["loader"],
        "variant": spec["variant"],
        "samples": samples,
        "seconds": seconds,
        "top": [{"function": where, "calls": calls, "share": own / total} for own, calls, where in rows],
    }


def _where(file: str, line: int, name: str) -> str:
    """``module.py:line(function)``, or the name alone for a built-in (pstats files those under ``~``)."""
    return name if file == "~" else f"{Path(file).name}:{line}({name})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Runs inside the peer venv; see benchmarks.loader_peers.")
    parser.add_argument("command", choices=("measure", "convert", "profile"))
    parser.add_argument("spec", help="JSON object")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec)
    run = {"measure": measure, "convert": convert, "profile": profile}[args.command]
    result = run(spec)
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
