"""Training input loaders side by side: the shard loader vs the loaders a user would pick instead, one run.

    .venv/bin/python -m benchmarks.loader_peers [--quick] [--samples 20000] [--jpeg-samples 2000]
        [--rounds 5] [--epochs 2] [--workers N] [--batch-size 256] [--profile] [--no-report | --report]

Time on the 2-core development machine: the full run about 25 minutes (plus about 15 minutes once to generate,
pack and convert the data, cached in ``.bench/``; and about 3 minutes once to make the peer venv); ``--quick``
about 1 minute once the data and the venv exist.

Loaders, each with the same worker count, batch size, prefetch (4 batches per worker, persistent workers) and
output (``uint8`` images ``[B, 224, 224, 3]`` and ``int64`` labels), shuffling as for training:

* ``shard``: ``gpu_train.data.ShardLoader`` over shards packed by ``gpuctl shard``;
* ``webdataset``: ``webdataset.WebDataset`` + ``WebLoader`` over the *same* tar files (shard shuffle, a
  1,000-sample shuffle buffer, decode and batch in the workers);
* ``mds``: MosaicML Streaming, written with ``streaming.MDSWriter``, read with ``StreamingDataset`` (local
  only) + ``StreamingDataLoader``;
* ``litdata``: written with ``litdata.optimize``, read with ``StreamingDataset`` (local only, per-item decoding)
  + ``StreamingDataLoader``;
* ``naive``: one file per sample (``.npy`` or JPEG), a map-style ``Dataset`` + ``DataLoader(shuffle=True)``:
  the floor;
* ``cat``: ``cat`` of each loader's files to ``/dev/null``: the ceiling;
* ``shard-held`` (pre-decoded only), a what-if: the shard loader with the consumer keeping a reference to the
  batches of every ring slot, which measures what ``ShardLoader`` would gain by doing that itself.

Two variants of the same images: ``decoded`` (uint8 HWC arrays, 224x224, as ``gpuctl shard`` stores them; all
``--samples`` images) and ``jpeg`` (the original JPEG files of the first ``--jpeg-samples`` images, decoded,
resized and centre-cropped in the loader workers by the same function for every loader: decoding is ~30x slower
than copying). All formats use the same shard size: 128 MB, or less so that every worker gets at least 4 shards.

Method. Data and conversions are made once into ``.bench/loader_peers/`` (git-ignored). Peer packages live in
their own venv, ``.bench/peers-venv`` (see :mod:`benchmarks._peers`); every loader is timed in a fresh child
process of that venv. Each round runs every loader of a variant in turn, in an order rotated every round (drift
and neighbours on a shared machine spread over all loaders). Before a loader's turn its files are read once
with ``cat`` (page cache warm) and then read again with ``cat``, timed: that loader's ceiling in that round.
The child then runs one warm-up epoch (worker start, first touches; it also sums every pixel and counts the
labels, which must agree between loaders) and ``--epochs`` timed epochs; a round keeps each metric's best
epoch. The consumer reads one byte of every 4 KiB page of each batch, as the copy to the GPU would read them
all, so costs that a loader leaves to the first access count. The table shows the median over rounds and the
range. "Per core" is samples per CPU-second of the whole process tree (main process, loader workers, their
threads: user + system time), which depends much less than samples/s on how busy the machine's other cores are.

Results go to the ``loader-peers`` section of docs/benchmarks.md (not with ``--no-report``, nor with ``--quick``
unless ``--report`` is given). The exit status is 1 when a measurement failed twice or the loaders' outputs differ.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks import _peers
from benchmarks._peers import HELD, LOADERS, VARIANTS

ROOT = Path(__file__).resolve().parent.parent
WORK = _peers.WORK
SECTION = "loader-peers"
IMAGE_SIZE = 224
CLASSES = 10
SEED = 0
MAX_SHARD_BYTES = 128 * 1000 * 1000  # the shard loader's default (128 MB)
MIN_SHARD_BYTES = 1 << 20
SHARDS_PER_WORKER = 4
CHILD_TIMEOUT = 1800  # seconds for one loader's warm-up and timed epochs
PEERS = ("webdataset", "mds", "litdata")
LABELS = {
    "shard": "shard loader (gpu_train)",
    "webdataset": "WebDataset + WebLoader",
    "mds": "MosaicML Streaming (MDS)",
    "litdata": "LitData",
    "naive": "naive per-file Dataset",
    "cat": "`cat` (ceiling)",
    HELD: "what-if: shard loader, ring batches held in the main process",
}
VARIANT_LABELS = {"decoded": "pre-decoded", "jpeg": "JPEG"}
FULL = {"samples": 20_000, "jpeg_samples": 2_000, "rounds": 5, "epochs": 2}
QUICK = {"samples": 2_000, "jpeg_samples": 300, "rounds": 1, "epochs": 1}


# ------------------------------------------------------------------------------------------ pure logic


def shard_target_bytes(total_bytes: int, workers: int) -> int:
    """Shard size for a dataset of ``total_bytes``: 128 MB, or less so each worker gets 4 shards (1 MiB min)."""
    if total_bytes <= 0 or workers < 0:
        raise ValueError(f"total_bytes={total_bytes}, workers={workers}: need total_bytes > 0 and workers >= 0")
    wanted = total_bytes // (SHARDS_PER_WORKER * max(1, workers))
    return max(MIN_SHARD_BYTES, min(MAX_SHARD_BYTES, wanted))


def loaders_for(variant: str, *, what_if: bool = False) -> tuple[str, ...]:
    """Who runs on a variant: every loader; with ``what_if``, on pre-decoded data also the consumer-held variant
    (:data:`HELD`). ``ShardLoader`` now keeps its ring batches referenced itself (the finding of that what-if), so
    the two rows measure the same thing and the what-if is off by default."""
    return (*LOADERS, HELD) if what_if and variant == "decoded" else LOADERS


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """``names`` rotated left by ``round_index``: each loader takes every position once in len(names) rounds."""
    if not names:
        return []
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


@dataclass(frozen=True)
class Spread:
    """Median and range of one metric over rounds."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        items = sorted(values)
        if not items:
            raise ValueError("no values to summarize")
        return cls(statistics.median(items), items[0], items[-1])

    def show(self, digits: int = 0, scale: float = 1.0, suffix: str = "") -> str:
        """``median (low-high)``; just the median when there was one round."""
        fmt = f"{{:,.{digits}f}}"
        median = fmt.format(self.median * scale) + suffix
        if self.low == self.high:
            return median
        return f"{median} ({fmt.format(self.low * scale)}-{fmt.format(self.high * scale)})"


@dataclass(frozen=True)
class RoundResult:
    """One loader's best timed epoch of one round (each metric on its own), and that round's ``cat`` of its files."""

    round: int
    variant: str
    loader: str
    samples: int
    bytes: int
    samples_per_sec: float
    samples_per_cpu_sec: float
    busy_cores: float
    main_share: float  # the main process's part of the CPU time
    cat_mb_per_sec: float

    @property
    def mb_per_sec(self) -> float:
        return self.samples_per_sec * self.bytes / self.samples / 1e6

    @property
    def of_cat(self) -> float:
        return self.mb_per_sec / self.cat_mb_per_sec


def best_of_epochs(
    round_index: int,
    variant: str,
    loader: str,
    data_bytes: int,
    cat_mb_per_sec: float,
    epochs: Sequence[dict[str, Any]],
) -> RoundResult:
    """A round's result from a child's epochs: the first (warm-up) is left out; every metric takes its best.
    (Sample counts are checked by :func:`check_outputs`.)"""
    timed = list(epochs[1:])
    if not timed:
        raise ValueError(f"{loader} ({variant}): no timed epoch after the warm-up")
    rate = max(e["samples"] / e["seconds"] for e in timed)
    per_cpu = max(e["samples"] / max(e["cpu_seconds"], 1e-9) for e in timed)
    fastest = max(timed, key=lambda e: e["samples"] / e["seconds"])
    return RoundResult(
        round=round_index,
        variant=variant,
        loader=loader,
        samples=int(epochs[0]["samples"]),
        bytes=data_bytes,
        samples_per_sec=rate,
        samples_per_cpu_sec=per_cpu,
        busy_cores=fastest["cpu_seconds"] / fastest["seconds"],
        main_share=fastest["main_cpu_seconds"] / max(fastest["cpu_seconds"], 1e-9),
        cat_mb_per_sec=cat_mb_per_sec,
    )


@dataclass(frozen=True)
class Row:
    variant: str
    loader: str
    samples: int
    bytes: int
    samples_per_sec: Spread
    per_core: Spread
    mb_per_sec: Spread
    of_cat: Spread
    busy_cores: Spread
    main_share: Spread


def summarize(results: Sequence[RoundResult]) -> list[Row]:
    """One row per (variant, loader), in the order of :data:`VARIANTS` and :data:`LOADERS` (the what-if last)."""
    rows = []
    for variant in VARIANTS:
        for loader in (*LOADERS, HELD):
            mine = [r for r in results if r.variant == variant and r.loader == loader]
            if not mine:
                continue
            rows.append(
                Row(
                    variant=variant,
                    loader=loader,
                    samples=mine[0].samples,
                    bytes=mine[0].bytes,
                    samples_per_sec=Spread.of(r.samples_per_sec for r in mine),
                    per_core=Spread.of(r.samples_per_cpu_sec for r in mine),
                    mb_per_sec=Spread.of(r.mb_per_sec for r in mine),
                    of_cat=Spread.of(r.of_cat for r in mine),
                    busy_cores=Spread.of(r.busy_cores for r in mine),
                    main_share=Spread.of(r.main_share for r in mine),
                )
            )
    return rows


def _paired(
    results: Sequence[RoundResult], numerator: tuple[str, str], denominators: Sequence[tuple[str, str]], metric: str
) -> Spread | None:
    """Per round: ``metric`` of ``numerator`` over the largest of the ``denominators`` in the same round."""
    ratios = []
    for round_index in sorted({r.round for r in results}):
        by_key = {(r.variant, r.loader): r for r in results if r.round == round_index}
        if numerator not in by_key or not any(d in by_key for d in denominators):
            continue
        top = max(getattr(by_key[d], metric) for d in denominators if d in by_key)
        ratios.append(getattr(by_key[numerator], metric) / top)
    return Spread.of(ratios) if ratios else None


@dataclass(frozen=True)
class Target:
    name: str
    value: Spread
    goal: str  # the threshold as shown, e.g. ">= 50%"
    met: bool
    show: str  # the value as shown


def targets(results: Sequence[RoundResult]) -> list[Target]:
    """The standing targets and the issue's target, each as a per-round ratio (the median decides)."""
    shard = ("decoded", "shard")
    out = []
    of_cat = _paired_self(results, shard)
    if of_cat is not None:
        name = "shard loader MB/s / `cat` MB/s of the same shards (pre-decoded)"
        out.append(Target(name, of_cat, ">= 50%", of_cat.median >= 0.5, of_cat.show(0, 100, "%")))
    vs_naive = _paired(results, shard, [("jpeg", "naive")], "samples_per_sec")
    if vs_naive is not None:
        name = "shard loader (pre-decoded) samples/s / naive per-file JPEG loader samples/s"
        out.append(Target(name, vs_naive, ">= 10x", vs_naive.median >= 10.0, vs_naive.show(1, suffix="x")))
    vs_peers = _paired(results, shard, [("decoded", p) for p in PEERS], "samples_per_cpu_sec")
    if vs_peers is not None:
        name = "shard loader samples per CPU-second / best peer's (pre-decoded)"
        out.append(Target(name, vs_peers, "> 1x", vs_peers.median > 1.0, vs_peers.show(2, suffix="x")))
    return out


def _paired_self(results: Sequence[RoundResult], key: tuple[str, str]) -> Spread | None:
    values = [r.of_cat for r in results if (r.variant, r.loader) == key]
    return Spread.of(values) if values else None


def check_outputs(outcomes: Sequence[dict[str, Any]]) -> list[str]:
    """Problems with what the loaders delivered: every loader of a variant must yield the same labels and the
    same pixels (sum over the warm-up epoch) as the shard loader, and every sample of the variant once."""
    problems = []
    for variant in VARIANTS:
        mine = [o for o in outcomes if o["variant"] == variant]
        reference = next((o for o in mine if o["loader"] == "shard"), None)
        for outcome in mine:
            expected = outcome["expected_samples"]
            got = {int(e["samples"]) for e in outcome["epochs"]}
            if got != {expected}:
                problems.append(
                    f"{outcome['loader']} ({variant}): epochs delivered {sorted(got)} samples, not {expected}"
                )
            if reference is None or outcome is reference:
                continue
            if outcome["label_counts"] != reference["label_counts"]:
                problems.append(f"{outcome['loader']} ({variant}): label counts differ from the shard loader's")
            if outcome["pixel_sum"] != reference["pixel_sum"]:
                problems.append(
                    f"{outcome['loader']} ({variant}): pixel sum {outcome['pixel_sum']} != shard loader's "
                    f"{reference['pixel_sum']}"
                )
    return sorted(set(problems))


# --------------------------------------------------------------------------------------------- data


@dataclass
class VariantData:
    """Where each loader's copy of one variant lives."""

    variant: str
    samples: int
    shard_bytes: int
    shards: Path
    mds: Path
    litdata: Path
    manifest: Path  # naive loader: JSON [[path, label], ...]
    naive_files: list[Path] = field(default_factory=list)

    def location(self, loader: str) -> str:
        places = {"shard": self.shards, HELD: self.shards, "webdataset": self.shards, "mds": self.mds}
        return str({**places, "litdata": self.litdata}.get(loader, self.manifest))

    def files(self, loader: str) -> list[Path]:
        """The files the loader reads (what ``cat`` reads for it, and what its MB/s counts)."""
        if loader in ("shard", HELD, "webdataset"):
            return sorted(self.shards.glob("shard-*.tar"))
        if loader == "mds":
            return sorted(self.mds.glob("*.mds"))
        if loader == "litdata":
            return sorted(self.litdata.glob("*.bin"))
        return self.naive_files


def _fingerprint(**parts: Any) -> str:
    return json.dumps(parts, sort_keys=True)


def _done(directory: Path, fingerprint: str) -> bool:
    marker = directory / ".complete"
    return marker.exists() and marker.read_text() == fingerprint


def _mark(directory: Path, fingerprint: str) -> None:
    (directory / ".complete").write_text(fingerprint)


def _fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def _subset_tree(jpegs: Path, count: int, dest: Path) -> Path:
    """The first ``count`` images of the generated set (file ``{i:06d}.jpg``, i < count) as their own
    ImageFolder tree, hard-linked (copied across file systems)."""
    fingerprint = _fingerprint(source=str(jpegs), count=count)
    if _done(dest, fingerprint):
        return dest
    _fresh(dest)
    for path in sorted(jpegs.glob("class_*/*.jpg")):
        if int(path.stem) >= count:
            continue
        target = dest / path.parent.name / path.name
        target.parent.mkdir(exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
    _mark(dest, fingerprint)
    return dest


def _pack(src: Path, dest: Path, *, mode: str, target: int, workers: int, log: Callable[[str], None]) -> Path:
    from gpu_train import pack

    fingerprint = _fingerprint(source=str(src), mode=mode, target=target, size=IMAGE_SIZE)
    if _done(dest, fingerprint):
        return dest
    log(f"packing {src} into {dest} ({mode}, {target / 1e6:.1f} MB shards) ...")
    shutil.rmtree(dest, ignore_errors=True)
    pack.pack(
        src,
        str(dest),
        image_size=IMAGE_SIZE,
        target_bytes=target,
        seed=SEED,
        mode=mode,
        workers=workers,
        progress=False,
        overwrite=True,
    )
    _mark(dest, fingerprint)
    return dest


def _labelled_files(tree: Path, pattern: str) -> list[tuple[Path, int]]:
    """ImageFolder files with the label ``gpuctl shard`` gives them (index of the sorted class folder name)."""
    classes = sorted(p.name for p in tree.iterdir() if p.is_dir())
    return sorted((path, classes.index(path.parent.name)) for path in tree.glob(f"*/{pattern}"))


def _npy_files(shards: Path, dest: Path) -> list[tuple[Path, int]]:
    """One ``.npy`` per sample, the very arrays of the packed shards, with their labels (listed in
    ``dest/files.json``)."""
    from gpu_train.data import discover
    from gpu_train.sagemaker import Channel
    from gpu_train.shards import INDEX_NAME, regular_image_shard

    listing = dest / "files.json"
    fingerprint = _fingerprint(index=(shards / INDEX_NAME).read_text())
    if not (_done(dest, fingerprint) and listing.exists()):
        import numpy as np

        _fresh(dest)
        written: list[list[Any]] = []
        for ref in discover(Channel("train", path=shards)).shards:
            found = regular_image_shard(ref.path.read_bytes(), str(ref.path), (IMAGE_SIZE, IMAGE_SIZE, 3))
            if found is None:
                raise RuntimeError(f"{ref.path} is not an image shard of {IMAGE_SIZE}x{IMAGE_SIZE}x3 uint8")
            pixels, labels, _ = found
            for i in range(len(labels)):
                path = dest / f"{ref.path.stem}-{i:05d}.npy"
                np.save(path, pixels[i])
                written.append([str(path), int(labels[i])])
        listing.write_text(json.dumps(written))
        _mark(dest, fingerprint)
    return [(Path(path), int(label)) for path, label in json.loads(listing.read_text())]


def _convert(
    python: Path,
    fmt: str,
    variant: str,
    shards: Path,
    dest: Path,
    target: int,
    workers: int,
    log: Callable[[str], None],
) -> Path:
    from gpu_train.shards import INDEX_NAME

    versions = _peers.PEERS
    fingerprint = _fingerprint(index=(shards / INDEX_NAME).read_text(), format=fmt, target=target, peers=versions)
    if _done(dest, fingerprint):
        return dest
    log(f"converting {shards.name} to {fmt} ({variant}) ...")
    shutil.rmtree(dest, ignore_errors=True)
    spec = {
        "format": fmt,
        "variant": variant,
        "shards": str(shards),
        "out": str(dest),
        "shard_bytes": target,
        "image_size": IMAGE_SIZE,
        "workers": workers,
    }
    done = _peers.run_child(python, "convert", spec)
    log(f"  {done['samples']:,} samples, {done['seconds']:.0f} s")
    _mark(dest, fingerprint)
    return dest


def prepare(
    python: Path, samples: int, jpeg_samples: int, workers: int, log: Callable[[str], None]
) -> list[VariantData]:
    """Make (or reuse) every loader's copy of both variants."""
    from benchmarks.training_data import ensure_data

    cpus = len(os.sched_getaffinity(0))
    jpegs, default_shards = ensure_data(samples, cpus)
    out = []
    decoded_bytes = samples * (IMAGE_SIZE * IMAGE_SIZE * 3 + 1024 + 1024)  # pixels + .npy/.cls members
    target = shard_target_bytes(decoded_bytes, workers)
    base = WORK / f"decoded-{samples}"
    shards = (
        default_shards
        if target == MAX_SHARD_BYTES
        else _pack(jpegs, base / f"shards-{target}", mode="image", target=target, workers=cpus, log=log)
    )
    files = _npy_files(shards, base / "files")
    out.append(_variant("decoded", samples, target, shards, base, files, python, workers, log))

    subset = _subset_tree(jpegs, jpeg_samples, WORK / f"jpeg-{jpeg_samples}" / "src")
    jpeg_bytes = sum(p.stat().st_size for p in subset.glob("*/*.jpg"))
    target = shard_target_bytes(jpeg_bytes, workers)
    base = WORK / f"jpeg-{jpeg_samples}"
    shards = _pack(subset, base / f"shards-{target}", mode="raw", target=target, workers=cpus, log=log)
    files = _labelled_files(subset, "*.jpg")
    out.append(_variant("jpeg", jpeg_samples, target, shards, base, files, python, workers, log))
    return out


def _variant(
    variant: str,
    samples: int,
    target: int,
    shards: Path,
    base: Path,
    labelled: list[tuple[Path, int]],
    python: Path,
    workers: int,
    log: Callable[[str], None],
) -> VariantData:
    """The MDS and LitData copies of ``shards`` (made or reused), and the naive loader's file list."""
    mds = _convert(python, "mds", variant, shards, base / f"mds-{target}", target, workers, log)
    lit = _convert(python, "litdata", variant, shards, base / f"litdata-{target}", target, workers, log)
    if len(labelled) != samples:
        raise RuntimeError(f"the naive loader's {variant} copy has {len(labelled)} files, expected {samples}")
    manifest = base / "naive-files.json"
    manifest.write_text(json.dumps([[str(path), label] for path, label in labelled]))
    return VariantData(variant, samples, target, shards, mds, lit, manifest, [p for p, _ in labelled])


# --------------------------------------------------------------------------------------------- timing


def time_cat(files: Sequence[Path]) -> tuple[float, float]:
    """(seconds, CPU seconds) of ``cat`` reading ``files`` to /dev/null (``xargs -0 cat``: any number of files)."""
    with tempfile.TemporaryFile() as listing:
        listing.write(b"\0".join(os.fsencode(p) for p in files))
        listing.seek(0)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(["xargs", "-0", "cat"], stdin=listing, stdout=subprocess.DEVNULL, check=True)
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure_spec(variant: VariantData, loader: str, *, epochs: int, workers: int, batch: int) -> dict[str, Any]:
    """What a child needs to build and time one loader on one variant."""
    return {
        "loader": loader,
        "variant": variant.variant,
        "data": variant.location(loader),
        "batch_size": batch,
        "workers": workers,
        "epochs": epochs,
        "seed": SEED,
        "image_size": IMAGE_SIZE,
        "num_classes": CLASSES,
    }


def run_rounds(
    python: Path,
    data: Sequence[VariantData],
    *,
    rounds: int,
    epochs: int,
    workers: int,
    batch: int,
    log: Callable[[str], None],
) -> tuple[list[RoundResult], list[dict[str, Any]], list[str]]:
    """(round results, raw child outcomes, failures). A child that fails is tried once more; one that fails
    twice is recorded as a failure and the run goes on with the next loader."""
    results: list[RoundResult] = []
    outcomes: list[dict[str, Any]] = []
    failures: list[str] = []
    for round_index in range(rounds):
        for variant in data:
            for loader in round_order(loaders_for(variant.variant), round_index):
                files = variant.files(loader)
                size = sum(p.stat().st_size for p in files)
                spec = measure_spec(variant, loader, epochs=epochs, workers=workers, batch=batch)
                outcome: dict[str, Any] | None = None
                for attempt in (1, 2):
                    time_cat(files)  # warm the page cache
                    cat_seconds, cat_cpu = time_cat(files)
                    try:
                        outcome = _peers.run_child(python, "measure", spec, timeout=CHILD_TIMEOUT)
                        break
                    except _peers.PeerError as exc:
                        log(f"round {round_index + 1} {variant.variant} {loader}: attempt {attempt} failed: {exc}")
                        if attempt == 2:
                            failures.append(f"round {round_index + 1}, {loader} ({variant.variant}): {exc}")
                if outcome is None:
                    continue
                outcome.update(
                    expected_samples=variant.samples,
                    round=round_index,
                    cat={"seconds": cat_seconds, "cpu_seconds": cat_cpu, "bytes": size},
                )
                outcomes.append(outcome)
                result = best_of_epochs(
                    round_index, variant.variant, loader, size, size / cat_seconds / 1e6, outcome["epochs"]
                )
                results.append(result)
                log(
                    f"round {round_index + 1}/{rounds} {variant.variant:7s} {loader:10s} "
                    f"{result.samples_per_sec:9,.0f} samples/s {result.samples_per_cpu_sec:9,.0f} per CPU-s "
                    f"{result.mb_per_sec:7,.0f} MB/s ({100 * result.of_cat:3.0f}% of cat {result.cat_mb_per_sec:,.0f})"
                )
    return results, outcomes, failures


def cat_rows(outcomes: Sequence[dict[str, Any]]) -> list[tuple[str, int, int, Spread, Spread, Spread]]:
    """``cat`` of the shard loader's files per variant: (variant, samples, bytes, samples/s, per CPU-s, MB/s)."""
    rows = []
    for variant in VARIANTS:
        cats = [o for o in outcomes if o["variant"] == variant and o["loader"] == "shard"]
        if not cats:
            continue
        samples, size = cats[0]["expected_samples"], cats[0]["cat"]["bytes"]
        rows.append(
            (
                variant,
                samples,
                size,
                Spread.of(samples / o["cat"]["seconds"] for o in cats),
                Spread.of(samples / max(o["cat"]["cpu_seconds"], 1e-9) for o in cats),
                Spread.of(size / o["cat"]["seconds"] / 1e6 for o in cats),
            )
        )
    return rows


# --------------------------------------------------------------------------------------------- report


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def format_table(rows: Sequence[Row], cats: Sequence[tuple[str, int, int, Spread, Spread, Spread]]) -> list[str]:
    lines = [
        "| variant | loader | samples | samples/s | samples/s per core | busy cores | main process's share of the CPU "
        "| MB/s read | % of `cat` MB/s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for variant in VARIANTS:
        for row in (r for r in rows if r.variant == variant):
            name = f"**{LABELS[row.loader]}**" if row.loader == "shard" else LABELS[row.loader]
            cells = [VARIANT_LABELS[variant], name, f"{row.samples:,}", row.samples_per_sec.show(), row.per_core.show()]
            cells += [row.busy_cores.show(2), row.main_share.show(0, 100, "%"), row.mb_per_sec.show()]
            cells += [row.of_cat.show(0, 100, "%")]
            lines.append(f"| {' | '.join(cells)} |")
        for cat_variant, samples, _, rate, per_cpu, mbps in cats:
            if cat_variant == variant:
                cells = [VARIANT_LABELS[variant], LABELS["cat"], f"{samples:,}", rate.show(), per_cpu.show()]
                cells += ["-", "-", mbps.show(), "100%"]
                lines.append(f"| {' | '.join(cells)} |")
    return lines


def findings(rows: Sequence[Row], goals: Sequence[Target], batch: int) -> list[str]:
    """Bullet points computed from the medians."""
    out = []
    for goal in goals:
        out.append(f"* {goal.name}: **{goal.show}** (target {goal.goal}: {'met' if goal.met else 'NOT met'}).")
    for variant in VARIANTS:
        mine = [r for r in rows if r.variant == variant and r.loader in ("shard", *PEERS)]
        if not mine:
            continue
        by_core = sorted(mine, key=lambda r: r.per_core.median, reverse=True)
        by_rate = sorted(mine, key=lambda r: r.samples_per_sec.median, reverse=True)
        order = ", ".join(f"{LABELS[r.loader]} {r.per_core.median:,.0f}" for r in by_core)
        out.append(
            f"* {VARIANT_LABELS[variant]}: samples per CPU-second, best first: {order}; fastest in samples/s: "
            f"{LABELS[by_rate[0].loader]} ({by_rate[0].samples_per_sec.median:,.0f})."
        )
    shard = next((r for r in rows if (r.variant, r.loader) == ("decoded", "shard")), None)
    held = next((r for r in rows if (r.variant, r.loader) == ("decoded", HELD)), None)
    if shard is not None and held is not None:
        batch_bytes = batch * IMAGE_SIZE * IMAGE_SIZE * 3
        pages = -(-batch_bytes // 4096)
        out.append(
            "* What-if (pre-decoded): when the consumer keeps a reference to the batches of every ring slot, the "
            f"shard loader's main process takes {held.main_share.median:.0%} of the CPU time instead of "
            f"{shard.main_share.median:.0%}, and the loader delivers {held.per_core.median:,.0f} samples per "
            f"CPU-second (vs {shard.per_core.median:,.0f}) and {held.of_cat.median:.0%} of `cat` MB/s (vs "
            f"{shard.of_cat.median:.0%}). torch.multiprocessing keeps a received shared-memory storage mapped only "
            "while something references it, so each time a worker sends a ring slot again the main process maps "
            f"it anew and faults in its pages ({pages:,} per {batch_bytes / 1e6:.1f} MB batch) as soon as the batch "
            "is read; `ShardLoader` could hold them itself."
        )
    return out


def report(
    args: argparse.Namespace,
    data: Sequence[VariantData],
    results: Sequence[RoundResult],
    outcomes: Sequence[dict[str, Any]],
    versions: dict[str, str],
    load: tuple[str, str],
    minutes: float,
    profiles: Sequence[dict[str, Any]],
    failures: Sequence[str],
) -> str:
    rows = summarize(results)
    goals = targets(results)
    problems = check_outputs(outcomes)
    decoded, jpeg = data
    flags = "".join(f" {a}" for a in args.argv if a not in ("--report", "--no-report"))
    smoke = ""
    if args.quick:
        smoke = " **Smoke run** (`--quick`: small data, one round, one timed epoch): it shows that the harness works"
    elif any(getattr(args, name) < value for name, value in FULL.items()):
        smoke = " **Preliminary run** (fewer samples, rounds or epochs than the defaults)"
    if smoke:
        smoke += ", not settled figures; the full run (`.venv/bin/python -m benchmarks.loader_peers`) replaces it."
    lines = [
        "## Training input: shard loader vs WebDataset, MosaicML Streaming and LitData",
        "",
        f"Command: `.venv/bin/python -m benchmarks.loader_peers{flags}` (measured {date.today().isoformat()}, "
        f"{minutes:.0f} min; {len(os.sched_getaffinity(0))} CPU cores, {_cpu_model()}; 1-minute load average "
        f"{load[0]} at start, {load[1]} at end: the machine is shared, so compare rows of the same run).{smoke}",
        "",
        f"Same {args.workers} loader worker processes, batch {args.batch_size}, shuffling on, output `uint8` "
        f"[B, {IMAGE_SIZE}, {IMAGE_SIZE}, 3] + `int64` labels for every loader. Pre-decoded: {decoded.samples:,} "
        f"images stored as uint8 arrays; JPEG: the first {jpeg.samples:,} of them as their original JPEG files, "
        f"decoded, resized and centre-cropped in the loader workers by the same function. Shards, MDS shards and "
        f"LitData chunks of {decoded.shard_bytes / 1e6:.0f} MB (pre-decoded) and {jpeg.shard_bytes / 1e6:.1f} MB "
        f"(JPEG). {_count(args.rounds, 'round')}, loaders interleaved (order rotated each round), each loader's "
        f"files read once before its turn; per round the best of {_count(args.epochs, 'epoch')} after a warm-up "
        "epoch; cells show the median over rounds (range). Per core = samples per CPU-second of the loader's whole "
        "process tree (main process + workers, user + system); busy cores = CPU-seconds per second; the main "
        "process's share is the part of that CPU time spent in the process that consumes the batches. MB/s counts "
        "each loader's stored bytes; % of `cat` divides by `cat` of the same files in the same round.",
        "",
        f"Versions: {', '.join(f'{k} {v}' for k, v in versions.items())} (peers in their own venv, "
        "`.bench/peers-venv`).",
        "",
        *format_table(rows, cat_rows(outcomes)),
        "",
        *findings(rows, goals, args.batch_size),
    ]
    if failures:
        lines += ["", "**Failed measurements** (left out above): " + "; ".join(f.splitlines()[0] for f in failures)]
    if problems:
        lines += ["", "**Output check failed**: " + "; ".join(problems)]
    else:
        lines += [
            "* Output check: every loader delivered every sample once per epoch, with the same labels and the "
            "same pixels (sum over the warm-up epoch) as the shard loader."
        ]
    if profiles:
        lines += ["", "Where the time goes (pre-decoded, one epoch in the main process under cProfile, own time):", ""]
        for prof in profiles:
            top = "; ".join(f"`{t['function']}` {100 * t['share']:.0f}%" for t in prof["top"][:5])
            lines.append(f"* {LABELS[prof['loader']]} ({prof['samples'] / prof['seconds']:,.0f} samples/s): {top}")
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke test: small data, one round; docs/ left alone")
    parser.add_argument("--samples", type=int, help=f"pre-decoded images (default {FULL['samples']:,})")
    parser.add_argument("--jpeg-samples", type=int, help=f"JPEG images (default {FULL['jpeg_samples']:,})")
    parser.add_argument("--rounds", type=int, help=f"rounds over all loaders (default {FULL['rounds']})")
    parser.add_argument("--epochs", type=int, help=f"timed epochs per loader and round (default {FULL['epochs']})")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="loader workers")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--profile", action="store_true", help="also profile each pre-decoded loader (cProfile)")
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--report", action="store_true", help="write docs/ even with --quick")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    defaults = QUICK if args.quick else FULL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("samples", "jpeg_samples", "rounds", "epochs", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)} is not allowed; allowed: 1 or more")
    if args.jpeg_samples > args.samples:
        parser.error(f"--jpeg-samples {args.jpeg_samples} is not allowed; allowed: at most --samples ({args.samples})")
    if args.workers < 1:
        parser.error(f"--workers {args.workers} is not allowed; allowed: 1 or more")

    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {message}", flush=True)

    python = _peers.ensure_venv(log=log)
    data = prepare(python, args.samples, args.jpeg_samples, args.workers, log)
    load_start = _load()
    log(f"timing: {_count(args.rounds, 'round')} over both variants' loaders, load average {load_start}")
    results, outcomes, failures = run_rounds(
        python, data, rounds=args.rounds, epochs=args.epochs, workers=args.workers, batch=args.batch_size, log=log
    )
    profiles = []
    if args.profile:
        for loader in LOADERS:
            spec = measure_spec(data[0], loader, epochs=1, workers=0, batch=args.batch_size)
            profiles.append(_peers.run_child(python, "profile", spec))
            log(f"profiled {loader}")
    text = report(
        args,
        data,
        results,
        outcomes,
        _peers.venv_versions(python),
        (load_start, _load()),
        (time.perf_counter() - started) / 60,
        profiles,
        failures,
    )
    print(text)
    if args.report or not (args.quick or args.no_report):
        from benchmarks._report import write_section

        write_section(SECTION, text)
        log(f"wrote the {SECTION} section of docs/benchmarks.md")
    return 1 if failures or check_outputs(outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
