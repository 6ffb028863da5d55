"""Pack many small files into shards (``gpuctl shard``), preprocessing once at pack time.

Sources:

* a directory in the ImageFolder layout, ``SRC/<class name>/**/<file>``: classes are the sorted
  sub-directory names;
* a manifest, ``.csv`` (header ``path,label``) or ``.jsonl`` (``{"path": ..., "label": ...}``), with paths
  relative to the manifest; labels are class names or integers.

In ``image`` mode (the default) each image is decoded, converted to RGB, resized so that its shorter side
is ``image_size`` and centre-cropped to a square, and stored as a ``uint8`` (H, W, 3) ``.npy`` array: the
training workers then only copy bytes. ``raw`` mode stores each file unchanged as ``<key>.<ext>``.

The sample order is shuffled once with a seeded RNG (same source + seed = byte-identical shards), so a
sequential read of any shard mixes classes. Destinations are a directory or ``s3://bucket/prefix``:
shards are then staged in a temporary directory and uploaded as soon as each is complete, with
parallel multipart transfers; ``index.json`` is uploaded last, so its presence marks a complete dataset.
This module imports no torch.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import random
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from gpu_train.shards import (
    DEFAULT_SHARD_BYTES,
    INDEX_NAME,
    SHARD_PREFIX,
    SHARD_SUFFIX,
    DatasetIndex,
    ShardInfo,
    ShardWriter,
)

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")
MODES = ("image", "raw")


class PackError(ValueError):
    """Bad input to the packer (source, destination, options)."""


@dataclass(frozen=True)
class Item:
    path: str
    label: int


# ------------------------------------------------------------------------------------------- sources


def list_image_folder(src: Path, *, mode: str) -> tuple[list[Item], list[str]]:
    classes = sorted(p.name for p in src.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise PackError(
            f"source directory {src} has no class sub-directories; expected SRC/<class>/<files> "
            "(or pass a .csv/.jsonl manifest)"
        )
    items: list[Item] = []
    for label, name in enumerate(classes):
        for root, dirs, files in os.walk(src / name):
            dirs.sort()
            for file in sorted(files):
                if file.startswith("."):
                    continue
                if mode == "image" and not file.lower().endswith(IMAGE_EXTENSIONS):
                    continue
                items.append(Item(os.path.join(root, file), label))
    return items, classes


def read_manifest(manifest: Path) -> tuple[list[Item], list[str]]:
    rows: list[tuple[str, Any]] = []
    base = manifest.parent
    if manifest.suffix == ".csv":
        with open(manifest, newline="") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or "path" not in reader.fieldnames or "label" not in reader.fieldnames:
                raise PackError(f"manifest {manifest}: the header must name the columns 'path' and 'label'")
            rows = [(r["path"], r["label"]) for r in reader]
    elif manifest.suffix in (".jsonl", ".ndjson"):
        with open(manifest) as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    rows.append((record["path"], record["label"]))
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise PackError(
                        f'manifest {manifest} line {number}: expected {{"path": ..., "label": ...}}'
                    ) from None
    else:
        raise PackError(f"manifest {manifest}: suffix {manifest.suffix!r} is not allowed; allowed: .csv, .jsonl")
    labels = [str(label) for _, label in rows]
    if labels and all(label.lstrip("-").isdigit() for label in labels):
        numbers = [int(label) for label in labels]
        if min(numbers) < 0:
            raise PackError(f"manifest {manifest}: labels must be >= 0, found {min(numbers)}")
        classes = [str(i) for i in range(max(numbers) + 1)]
        items = [Item(str(base / path), n) for (path, _), n in zip(rows, numbers, strict=True)]
    else:
        classes = sorted(set(labels))
        lookup = {name: i for i, name in enumerate(classes)}
        items = [Item(str(base / path), lookup[str(label)]) for path, label in rows]
    return items, classes


def list_source(src: Path, *, mode: str) -> tuple[list[Item], list[str]]:
    if not src.exists():
        raise PackError(f"source {src} does not exist")
    items, classes = list_image_folder(src, mode=mode) if src.is_dir() else read_manifest(src)
    if not items:
        raise PackError(f"source {src} holds no {'images' if mode == 'image' else 'files'} to pack")
    missing = next((i.path for i in items if not os.path.isfile(i.path)), None)
    if missing:
        raise PackError(f"source {src}: file {missing} does not exist")
    return items, classes


# ------------------------------------------------------------------------------------- preprocessing


def resize_center_crop(image: Image.Image, size: int) -> Image.Image:
    """Resize so the shorter side is ``size`` (bilinear, antialiased), then crop the centre square.

    The inference handler (``code/inference.py``) applies the same transform to JPEG/PNG requests.
    """
    width, height = image.size
    scale = size / min(width, height)
    new_w, new_h = max(size, round(width * scale)), max(size, round(height * scale))
    if (new_w, new_h) != (width, height):
        image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
    left, top = (new_w - size) // 2, (new_h - size) // 2
    return image.crop((left, top, left + size, top + size))


def load_image(source: str | io.BytesIO, size: int) -> np.ndarray:
    """Decode an image file into a (size, size, 3) ``uint8`` array."""
    with Image.open(source) as image:
        image.draft("RGB", (size, size))  # JPEG: let the decoder downscale by 1/2, 1/4, 1/8 first
        rgb = image.convert("RGB")
    return np.asarray(resize_center_crop(rgb, size), dtype=np.uint8)


def encode_npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False)
    return buffer.getvalue()


@dataclass(frozen=True)
class _Job:
    mode: str
    image_size: int


def _prepare(args: tuple[_Job, Item]) -> tuple[list[tuple[str, bytes]], str | None]:
    """Worker: read and preprocess one item; returns (files, error)."""
    job, item = args
    try:
        if job.mode == "image":
            files = [("npy", encode_npy(load_image(item.path, job.image_size)))]
        else:
            ext = os.path.basename(item.path).split(".", 1)[1] if "." in os.path.basename(item.path) else "bin"
            with open(item.path, "rb") as handle:
                files = [(ext.lower(), handle.read())]
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        return [], f"{item.path}: {exc}"
    files.append(("cls", str(item.label).encode()))
    return files, None


# ------------------------------------------------------------------------------------------ targets


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise PackError(f"destination {uri!r} is not allowed; allowed: s3://bucket/prefix")
    return bucket, prefix.strip("/")


def _our_files(directory: Path) -> list[Path]:
    return [
        p
        for p in directory.iterdir()
        if p.name == INDEX_NAME
        or (p.name.startswith(SHARD_PREFIX) and (p.name.endswith(SHARD_SUFFIX) or p.name.endswith(".partial")))
    ]


def prepare_local(dest: Path, *, overwrite: bool) -> None:
    if dest.exists() and not dest.is_dir():
        raise PackError(f"destination {dest} exists and is not a directory")
    if not dest.exists():
        dest.mkdir(parents=True)
        return
    existing = _our_files(dest)
    if existing and not overwrite:
        raise PackError(
            f"destination {dest} already holds a dataset ({len(existing)} shard/index files); "
            "pass --overwrite to replace it"
        )
    for path in existing:
        path.unlink()


class S3Target:
    """Uploads finished shards in the background with boto3's multipart, multi-threaded transfers."""

    def __init__(
        self,
        uri: str,
        *,
        client: Any = None,
        max_concurrency: int = 16,
        chunk_bytes: int = 16 << 20,
        kms_key_id: str | None = None,
    ) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        self.bucket, self.prefix = split_s3(uri)
        self.client = client or boto3.client("s3")
        self.config = TransferConfig(
            multipart_threshold=chunk_bytes,
            multipart_chunksize=chunk_bytes,
            max_concurrency=max_concurrency,
            use_threads=True,
        )
        self.manager = create_transfer_manager(self.client, self.config)
        self.extra_args: dict[str, str] = {"ContentType": "application/x-tar"}
        if kms_key_id:
            self.extra_args.update(ServerSideEncryption="aws:kms", SSEKMSKeyId=kms_key_id)
        self._futures: list[Any] = []
        self._lock = threading.Lock()

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _existing_keys(self) -> list[str]:
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        prefix = f"{self.prefix}/" if self.prefix else ""
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return keys

    def prepare(self, *, overwrite: bool) -> None:
        keys = self._existing_keys()
        ours = [
            k
            for k in keys
            if k.rsplit("/", 1)[-1] == INDEX_NAME
            or (k.rsplit("/", 1)[-1].startswith(SHARD_PREFIX) and k.endswith(SHARD_SUFFIX))
        ]
        if ours and not overwrite:
            raise PackError(
                f"destination s3://{self.bucket}/{self.prefix} already holds a dataset ({len(ours)} objects); "
                "pass --overwrite to replace it"
            )
        others = sorted(set(keys) - set(ours))
        if others:
            log.warning(
                "s3://%s/%s holds %d other objects (e.g. %s): a training channel on this prefix reads them too",
                self.bucket,
                self.prefix,
                len(others),
                others[0],
            )
        for start in range(0, len(ours), 1000):
            batch = [{"Key": k} for k in ours[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def upload(self, path: Path, name: str, *, delete_after: bool = True) -> None:
        from s3transfer.subscribers import BaseSubscriber

        class _DeleteWhenDone(BaseSubscriber):
            def on_done(self, future: Any, **kwargs: Any) -> None:
                try:
                    future.result()
                except Exception:
                    return  # keep the staged shard; wait() re-raises the error
                path.unlink(missing_ok=True)

        subscribers = [_DeleteWhenDone()] if delete_after else []
        future = self.manager.upload(
            str(path), self.bucket, self.key(name), extra_args=dict(self.extra_args), subscribers=subscribers
        )
        with self._lock:
            self._futures.append(future)

    def wait(self) -> None:
        with self._lock:
            futures, self._futures = self._futures, []
        for future in futures:
            future.result()

    def put_index(self, text: str) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=self.key(INDEX_NAME),
            Body=text.encode(),
            ContentType="application/json",
            **{k: v for k, v in self.extra_args.items() if k != "ContentType"},
        )

    def close(self) -> None:
        self.manager.shutdown()


# -------------------------------------------------------------------------------------------- packing


def _ordered(items: Sequence[Item], seed: int, shuffle: bool) -> list[Item]:
    ordered = list(items)
    if shuffle:
        random.Random(seed).shuffle(ordered)
    return ordered


def _prepared(jobs: Iterable[tuple[_Job, Item]], workers: int) -> Iterator[tuple[list[tuple[str, bytes]], str | None]]:
    if workers <= 1:
        yield from map(_prepare, jobs)
        return
    with get_context("spawn" if os.name != "posix" else "fork").Pool(workers) as pool:
        yield from pool.imap(_prepare, jobs, chunksize=8)


def pack(
    src: Path,
    dest: str,
    *,
    image_size: int = 224,
    target_bytes: int = DEFAULT_SHARD_BYTES,
    seed: int = 0,
    shuffle: bool = True,
    mode: str = "image",
    workers: int = 0,
    overwrite: bool = False,
    progress: bool = True,
    s3_client: Any = None,
    max_concurrency: int = 16,
    multipart_chunk_bytes: int = 16 << 20,
    kms_key_id: str | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> DatasetIndex:
    """Pack ``src`` into shards at ``dest`` (a directory or ``s3://bucket/prefix``); returns the index.

    ``workers``: preprocessing processes (0: one per CPU). Unreadable files fail the run and are named.
    """
    if mode not in MODES:
        raise PackError(f"mode={mode!r} is not allowed; allowed: {', '.join(MODES)}")
    if mode == "image" and not 8 <= image_size <= 4096:
        raise PackError(f"image size {image_size} is not allowed; allowed: 8 to 4096 pixels")
    if target_bytes <= 0:
        raise PackError(f"target shard size {target_bytes} is not allowed; allowed: > 0 bytes")
    items, classes = list_source(src, mode=mode)
    ordered = _ordered(items, seed, shuffle)
    workers = workers or len(os.sched_getaffinity(0))

    target: S3Target | None = None
    staging: Path
    if is_s3(dest):
        target = S3Target(
            dest,
            client=s3_client,
            max_concurrency=max_concurrency,
            chunk_bytes=multipart_chunk_bytes,
            kms_key_id=kms_key_id,
        )
        target.prepare(overwrite=overwrite)
        staging = Path(tempfile.mkdtemp(prefix="gpuctl-shard-"))
    else:
        staging = Path(dest)
        prepare_local(staging, overwrite=overwrite)

    def on_shard(path: Path, info: ShardInfo) -> None:
        if target is not None:
            target.upload(path, info.name)

    writer = ShardWriter(staging, target_bytes, on_shard=on_shard)
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(ordered), unit="img" if mode == "image" else "file", desc="packing", smoothing=0.1)
    job = _Job(mode=mode, image_size=image_size)
    try:
        for number, (files, error) in enumerate(_prepared(((job, item) for item in ordered), workers)):
            if error is not None:
                raise PackError(f"cannot read source file {error}")
            writer.add(f"{number:09d}", files)
            if bar is not None:
                bar.update(1)
            if on_progress is not None:
                on_progress(number + 1)
        shards = writer.close()
        if mode == "image":
            sample: dict[str, Any] = {
                "image": {"ext": "npy", "dtype": "uint8", "layout": "HWC", "shape": [image_size, image_size, 3]},
                "label": {"ext": "cls"},
            }
        else:
            sample = {
                "files": sorted({os.path.basename(i.path).split(".", 1)[-1].lower() for i in items}),
                "label": {"ext": "cls"},
            }
        index = DatasetIndex(
            shards=shards,
            sample=sample,
            classes=classes,
            image_size=image_size if mode == "image" else None,
            seed=seed if shuffle else None,
            shuffled=shuffle,
            source=str(src),
        )
        if target is not None:
            target.wait()
            target.put_index(index.to_json())
        else:
            (staging / INDEX_NAME).write_text(index.to_json())
        return index
    except BaseException:
        writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
        if target is not None:
            try:
                target.wait()
            finally:
                target.close()
                shutil.rmtree(staging, ignore_errors=True)
