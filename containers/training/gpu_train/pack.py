"""Pack many small files into shards (``gpuctl shard``), preprocessing once at pack time.

Sources:

* a directory in the ImageFolder layout, ``SRC/<class name>/**/<file>``: classes are the sorted
  sub-directory names;
* a manifest, ``.csv`` (header ``path,label``) or ``.jsonl`` (``{"path": ..., "label": ...}``), with paths
  relative to the manifest; labels are class names or integers.

In ``image`` mode (the default) each image is decoded, converted to RGB, resized so that its shorter side
is ``image_size`` and centre-cropped to a square, and stored either as a ``uint8`` (H, W, 3) ``.npy`` array
(``encoding="raw"``, the default: the training workers then only copy bytes) or re-encoded as a baseline JPEG
of that size (``encoding="jpeg"``, ``<key>.jpg`` at ``quality``): 5-10x fewer bytes at rest and on the wire for
photos, decoded on the GPU in batches by nvJPEG when the trainer has one (``gpu_train.data``), else by the
loader workers. ``index.json`` records the encoding (``sample.image.encoding``), so the loader knows which it
reads. ``raw`` mode stores each file unchanged as ``<key>.<ext>``.

The sample order is shuffled once with a seeded RNG (same source + seed = byte-identical shards), so a
sequential read of any shard mixes classes.

A source file that cannot be read or decoded fails the run, naming it; with ``skip_bad`` (``--skip-bad``)
it is reported and left out, and the run fails only when more than ``max_bad_fraction`` of the files are
bad (default 1%).

A failed run (bad input, an upload error, Ctrl-C) leaves no partial dataset at the destination, and
``index.json`` is always written last, so its presence marks a complete dataset: a destination without it
is incomplete. (A process killed outright cannot clean up: it may leave the hidden staging directory, shards
without ``index.json`` on S3, and open multipart uploads, which the platform's buckets abort after 7 days
with an ``AbortIncompleteMultipartUpload`` lifecycle rule.) Per destination:

* a directory: shards are written to a hidden staging directory (``.<name>.gpuctl-shard-*`` beside a new
  destination, ``<dest>/.gpuctl-shard-*`` inside an existing one, so that both are on one file system) and
  moved into place with ``rename`` once everything is written; on failure the staging directory is removed
  and the destination is left as it was (an existing dataset is only replaced after the new one is complete).
* ``s3://bucket/prefix``: shards are staged in a local temporary directory and uploaded as soon as each is
  complete, with parallel multipart transfers. On failure the pending transfers are cancelled, multipart
  uploads of this run that are still open are aborted (``AbortMultipartUpload``: S3 then frees their parts) and
  every object this run wrote is deleted, so the prefix holds no shards of the failed run. With
  ``overwrite`` the previous dataset is deleted before the upload starts (shard names are reused), so a failed
  overwrite leaves an empty prefix, never a mix of old and new shards.

This module imports no torch.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import random
import shutil
import struct
import tempfile
import threading
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
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
ENCODINGS = ("raw", "jpeg")
DEFAULT_JPEG_QUALITY = 90


class PackError(ValueError):
    """Bad input to the packer (source, destination, options)."""


@dataclass(frozen=True)
class Item:
    path: str
    label: int


@dataclass(frozen=True)
class Skipped:
    """A source file left out by ``skip_bad``: its path and why it could not be read or decoded."""

    path: str
    reason: str


#: Default of ``max_bad_fraction``: the share of bad source files ``skip_bad`` tolerates.
DEFAULT_MAX_BAD_FRACTION = 0.01


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


def list_source(src: Path, *, mode: str, allow_missing: bool = False) -> tuple[list[Item], list[str]]:
    """The items and class names of ``src``; a manifest entry whose file is missing fails unless ``allow_missing``
    (``skip_bad``: it is then reported and skipped like any unreadable file)."""
    if not src.exists():
        raise PackError(f"source {src} does not exist")
    items, classes = list_image_folder(src, mode=mode) if src.is_dir() else read_manifest(src)
    if not items:
        raise PackError(f"source {src} holds no {'images' if mode == 'image' else 'files'} to pack")
    missing = None if allow_missing else next((i.path for i in items if not os.path.isfile(i.path)), None)
    if missing:
        raise PackError(f"source {src}: file {missing} does not exist (pass --skip-bad to skip missing files)")
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


def encode_jpeg(array: np.ndarray, quality: int) -> bytes:
    """A (H, W, 3) ``uint8`` array as a baseline JPEG (4:2:0 chroma subsampling, Pillow's default).

    Baseline, not progressive: nvJPEG decodes baseline JPEGs in batches on the GPU's hardware decoder (A100, H100)
    and sends others through its slower hybrid path (https://docs.nvidia.com/cuda/nvjpeg/index.html, "Hardware
    Acceleration"); Pillow writes baseline unless ``progressive=True`` is passed
    (https://pillow.readthedocs.io/en/stable/handbook/image-file-formats.html#jpeg-saving).
    """
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def encode_npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False)
    return buffer.getvalue()


@dataclass(frozen=True)
class _Job:
    mode: str
    image_size: int
    encoding: str = "raw"
    quality: int = DEFAULT_JPEG_QUALITY


#: What reading or decoding one bad source file raises. Pillow: ``Image.open`` raises ``FileNotFoundError``,
#: ``UnidentifiedImageError`` (an ``OSError``) or ``ValueError``; decoding a truncated or corrupt file raises
#: ``OSError``, and some format plugins ``SyntaxError`` / ``EOFError`` / ``struct.error`` / ``zlib.error``
#: (https://pillow.readthedocs.io/en/stable/reference/Image.html#PIL.Image.open); an image above
#: ``Image.MAX_IMAGE_PIXELS`` x 2 raises ``DecompressionBombError``.
BAD_FILE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)


def _prepare(args: tuple[_Job, Item]) -> tuple[list[tuple[str, bytes]], str | None]:
    """Worker: read and preprocess one item; returns (files, error)."""
    job, item = args
    try:
        if job.mode == "image" and job.encoding == "jpeg":
            files = [("jpg", encode_jpeg(load_image(item.path, job.image_size), job.quality))]
        elif job.mode == "image":
            files = [("npy", encode_npy(load_image(item.path, job.image_size)))]
        else:
            ext = os.path.basename(item.path).split(".", 1)[1] if "." in os.path.basename(item.path) else "bin"
            with open(item.path, "rb") as handle:
                files = [(ext.lower(), handle.read())]
    except BAD_FILE_ERRORS as exc:
        return [], str(exc) or type(exc).__name__
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


STAGING_PREFIX = ".gpuctl-shard-"


def _our_files(directory: Path) -> list[Path]:
    return [
        p
        for p in directory.iterdir()
        if p.name == INDEX_NAME
        or (p.name.startswith(SHARD_PREFIX) and (p.name.endswith(SHARD_SUFFIX) or p.name.endswith(".partial")))
    ]


def prepare_local(dest: Path, *, overwrite: bool) -> None:
    """Check that ``dest`` may receive a dataset; nothing there is changed until :class:`LocalTarget` commits."""
    if dest.exists() and not dest.is_dir():
        raise PackError(f"destination {dest} exists and is not a directory")
    existing = _our_files(dest) if dest.exists() else []
    if existing and not overwrite:
        raise PackError(
            f"destination {dest} already holds a dataset ({len(existing)} shard/index files); "
            "pass --overwrite to replace it"
        )


class LocalTarget:
    """A directory destination written through a staging directory on the same file system.

    A new destination is staged beside it (``<parent>/.<name>.gpuctl-shard-<id>``) and renamed into place in one
    step; an existing one (it may be a mount point, e.g. a SageMaker processing output) is staged inside it
    (``<dest>/.gpuctl-shard-<id>``), and on commit its previous shards and index are removed and the new shards
    moved in with ``rename``, ``index.json`` last. Until the commit the destination is untouched.
    """

    def __init__(self, dest: Path, *, overwrite: bool) -> None:
        prepare_local(dest, overwrite=overwrite)
        self.dest = dest
        self.fresh = not dest.exists()
        parent = dest.absolute().parent if self.fresh else dest
        parent.mkdir(parents=True, exist_ok=True)
        name = f".{dest.absolute().name}{STAGING_PREFIX}" if self.fresh else STAGING_PREFIX
        while True:  # mkdir (not mkdtemp): the directory gets the umask's mode, as a plain mkdir of dest would
            staging = parent / f"{name}{uuid.uuid4().hex[:12]}"
            try:
                staging.mkdir()
                break
            except FileExistsError:
                continue
        self.staging = staging

    def commit(self, index_json: str) -> None:
        (self.staging / INDEX_NAME).write_text(index_json)
        if self.fresh and not self.dest.exists():
            self.staging.rename(self.dest)
            return
        old = _our_files(self.dest)
        for path in sorted(old, key=lambda p: p.name != INDEX_NAME):  # the old index first: no stale marker
            path.unlink()
        for path in sorted(self.staging.iterdir(), key=lambda p: (p.name == INDEX_NAME, p.name)):  # index last
            path.replace(self.dest / path.name)
        self.staging.rmdir()

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class S3Target:
    """Uploads finished shards in the background with boto3's multipart, multi-threaded transfers.

    Multipart uploads: https://docs.aws.amazon.com/AmazonS3/latest/userguide/mpuoverview.html (an aborted
    upload's parts are freed; an upload that is neither completed nor aborted keeps its parts, and is billed).
    """

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
        self._all_futures: list[Any] = []
        self._written: list[str] = []  # every key this run may have created, index included
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

    def _delete(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

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
        # The index first: while the rest goes, the prefix is already marked incomplete.
        self._delete(sorted(ours, key=lambda k: not k.endswith(f"/{INDEX_NAME}") and k != INDEX_NAME))

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
        key = self.key(name)
        with self._lock:
            self._written.append(key)
        future = self.manager.upload(
            str(path), self.bucket, key, extra_args=dict(self.extra_args), subscribers=subscribers
        )
        with self._lock:
            self._futures.append(future)
            self._all_futures.append(future)

    def wait(self) -> None:
        with self._lock:
            futures, self._futures = self._futures, []
        for future in futures:
            future.result()

    def put_index(self, text: str) -> None:
        key = self.key(INDEX_NAME)
        with self._lock:
            self._written.append(key)
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=text.encode(),
            ContentType="application/json",
            **{k: v for k, v in self.extra_args.items() if k != "ContentType"},
        )

    def abort(self) -> list[str]:
        """Undo a failed run: cancel pending transfers, abort its open multipart uploads, delete what it wrote.

        s3transfer aborts the multipart upload of a transfer that fails or is cancelled; the multipart uploads
        still open under our keys afterwards (e.g. the abort itself failed) are aborted here. Returns the keys
        that could not be cleaned up (each error is logged); empty when the prefix is clean.
        """
        with self._lock:
            futures, written = list(self._all_futures), list(self._written)
        for future in futures:
            future.cancel()  # a finished transfer ignores it
        for future in futures:
            with contextlib.suppress(Exception):  # cancelled or failed: cleaned up below either way
                future.result()
        left: list[str] = []
        ours = set(written)
        try:
            paginator = self.client.get_paginator("list_multipart_uploads")
            prefix = f"{self.prefix}/" if self.prefix else ""
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for upload in page.get("Uploads", []):
                    if upload["Key"] in ours:
                        self.client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
        except Exception as exc:
            log.error("s3://%s/%s: could not abort the open multipart uploads: %s", self.bucket, self.prefix, exc)
            left.extend(f"multipart upload of {k}" for k in written)
        try:
            self._delete(sorted(ours))
        except Exception as exc:
            log.error("s3://%s/%s: could not delete the objects of the failed run: %s", self.bucket, self.prefix, exc)
            left.extend(sorted(ours))
        return left

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


def _too_many_bad(bad: int, total: int, max_bad_fraction: float) -> bool:
    return bad > max_bad_fraction * total


def _bad_files_error(skipped: Sequence[Skipped], total: int, max_bad_fraction: float, *, final: bool) -> PackError:
    seen = "" if final else " so far"
    return PackError(
        f"{len(skipped)} of {total} source files{seen} cannot be read ({100 * len(skipped) / total:.2f}%), "
        f"more than --max-bad-fraction {max_bad_fraction:g} ({100 * max_bad_fraction:g}%) allows; "
        f"first: {skipped[0].path}: {skipped[0].reason}"
    )


def _check_options(
    *, mode: str, encoding: str, quality: int, image_size: int, target_bytes: int, max_bad_fraction: float
) -> None:
    """Refuse options that cannot pack, before any source file is read or anything is written."""
    if mode not in MODES:
        raise PackError(f"mode={mode!r} is not allowed; allowed: {', '.join(MODES)}")
    if encoding not in ENCODINGS:
        raise PackError(f"encoding={encoding!r} is not allowed; allowed: {', '.join(ENCODINGS)}")
    if encoding != "raw" and mode != "image":
        raise PackError(f"encoding={encoding!r} needs mode='image' (mode={mode!r} stores the source files as they are)")
    if encoding == "jpeg" and not 1 <= quality <= 95:
        # Pillow: "values above 95 should be avoided; 100 disables portions of the JPEG compression algorithm".
        raise PackError(f"JPEG quality {quality} is not allowed; allowed: 1 to 95")
    if mode == "image" and not 8 <= image_size <= 4096:
        raise PackError(f"image size {image_size} is not allowed; allowed: 8 to 4096 pixels")
    if target_bytes <= 0:
        raise PackError(f"target shard size {target_bytes} is not allowed; allowed: > 0 bytes")
    if not 0.0 <= max_bad_fraction <= 1.0:
        raise PackError(f"max bad fraction {max_bad_fraction:g} is not allowed; allowed: 0 to 1 (e.g. 0.01 for 1%)")


def _open_destination(
    dest: str,
    *,
    overwrite: bool,
    s3_client: Any,
    max_concurrency: int,
    chunk_bytes: int,
    kms_key_id: str | None,
) -> tuple[S3Target | None, LocalTarget | None, Path]:
    """The S3 or local target of ``dest`` and the folder shards are staged in before they are uploaded or moved:
    a temporary folder for S3 (each shard is uploaded and deleted once written), the local target's own staging."""
    if is_s3(dest):
        target = S3Target(
            dest,
            client=s3_client,
            max_concurrency=max_concurrency,
            chunk_bytes=chunk_bytes,
            kms_key_id=kms_key_id,
        )
        target.prepare(overwrite=overwrite)
        return target, None, Path(tempfile.mkdtemp(prefix="gpuctl-shard-"))
    local = LocalTarget(Path(dest), overwrite=overwrite)
    return None, local, local.staging


@dataclass
class _Written:
    """What :func:`_write_items` wrote: the samples, the largest first file (bytes) and the files it skipped."""

    count: int = 0
    largest: int = 0
    skipped: list[Skipped] = field(default_factory=list)


def _write_items(
    writer: ShardWriter,
    ordered: Sequence[Item],
    job: _Job,
    *,
    workers: int,
    skip_bad: bool,
    max_bad_fraction: float,
    on_skip: Callable[[Skipped], None],
    on_progress: Callable[[int], None] | None,
    bar: Any,
) -> _Written:
    """Preprocess ``ordered`` (``workers`` processes) and add each readable item to ``writer`` as the next sample.

    An unreadable item fails the run unless ``skip_bad``; then it goes to ``on_skip``, and the run fails once more
    than ``max_bad_fraction`` of all items are bad.
    """
    written = _Written()
    for number, ((files, error), item) in enumerate(
        zip(_prepared(((job, item) for item in ordered), workers), ordered, strict=True)
    ):
        if error is not None:
            if not skip_bad:
                raise PackError(
                    f"cannot read source file {item.path}: {error} (pass --skip-bad to skip unreadable files)"
                )
            written.skipped.append(Skipped(item.path, error))
            on_skip(written.skipped[-1])
            if _too_many_bad(len(written.skipped), len(ordered), max_bad_fraction):
                raise _bad_files_error(
                    written.skipped, len(ordered), max_bad_fraction, final=number + 1 == len(ordered)
                )
        else:
            writer.add(f"{written.count:09d}", files)
            written.count += 1
            written.largest = max(written.largest, len(files[0][1]))
        if bar is not None:
            bar.update(1)
        if on_progress is not None:
            on_progress(number + 1)
    return written


def _sample_layout(job: _Job, kept: Sequence[Item], largest: int) -> dict[str, Any]:
    """The index's ``sample``: the files of one sample and how to decode them (``largest``: the largest encoded
    image, which sizes the loader's batch buffers; ``kept``: the source files packed, for raw mode's extensions)."""
    if job.mode == "image" and job.encoding == "jpeg":
        return {
            "image": {
                "ext": "jpg",
                "encoding": "jpeg",
                "quality": job.quality,
                "max_bytes": largest,
                "dtype": "uint8",
                "layout": "HWC",
                "shape": [job.image_size, job.image_size, 3],
            },
            "label": {"ext": "cls"},
        }
    if job.mode == "image":
        return {
            "image": {"ext": "npy", "dtype": "uint8", "layout": "HWC", "shape": [job.image_size, job.image_size, 3]},
            "label": {"ext": "cls"},
        }
    return {
        "files": sorted({os.path.basename(i.path).split(".", 1)[-1].lower() for i in kept}),
        "label": {"ext": "cls"},
    }


def _log_skipped(entry: Skipped) -> None:
    log.warning("skipped %s: %s", entry.path, entry.reason)


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
    skip_bad: bool = False,
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION,
    on_skip: Callable[[Skipped], None] | None = None,
    encoding: str = "raw",
    quality: int = DEFAULT_JPEG_QUALITY,
) -> DatasetIndex:
    """Pack ``src`` into shards at ``dest`` (a directory or ``s3://bucket/prefix``); returns the index.

    ``workers``: preprocessing processes (0: one per CPU). An unreadable or undecodable file fails the run,
    naming it; with ``skip_bad`` it is passed to ``on_skip`` (default: logged as a warning) and left out, and
    the run fails once more than ``max_bad_fraction`` of all source files are bad. On any failure the
    destination holds no part of this run (see the module docstring). ``encoding`` (image mode): ``raw`` stores
    ``uint8`` arrays, ``jpeg`` baseline JPEGs at ``quality`` (1 to 95).
    """
    _check_options(
        mode=mode,
        encoding=encoding,
        quality=quality,
        image_size=image_size,
        target_bytes=target_bytes,
        max_bad_fraction=max_bad_fraction,
    )
    items, classes = list_source(src, mode=mode, allow_missing=skip_bad)
    ordered = _ordered(items, seed, shuffle)
    workers = workers or len(os.sched_getaffinity(0))
    target, local, staging = _open_destination(
        dest,
        overwrite=overwrite,
        s3_client=s3_client,
        max_concurrency=max_concurrency,
        chunk_bytes=multipart_chunk_bytes,
        kms_key_id=kms_key_id,
    )

    def on_shard(path: Path, info: ShardInfo) -> None:
        if target is not None:
            target.upload(path, info.name)

    writer = ShardWriter(staging, target_bytes, on_shard=on_shard)
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(ordered), unit="img" if mode == "image" else "file", desc="packing", smoothing=0.1)
    job = _Job(mode=mode, image_size=image_size, encoding=encoding, quality=quality)
    try:
        written = _write_items(
            writer,
            ordered,
            job,
            workers=workers,
            skip_bad=skip_bad,
            max_bad_fraction=max_bad_fraction,
            on_skip=on_skip or _log_skipped,
            on_progress=on_progress,
            bar=bar,
        )
        if not written.count:
            raise PackError(f"source {src}: none of its {len(ordered)} files can be read")
        shards = writer.close()
        bad_paths = {entry.path for entry in written.skipped}
        index = DatasetIndex(
            shards=shards,
            sample=_sample_layout(job, [i for i in items if i.path not in bad_paths], written.largest),
            classes=classes,
            image_size=image_size if mode == "image" else None,
            seed=seed if shuffle else None,
            shuffled=shuffle,
            source=str(src),
        )
        if target is not None:
            target.wait()
            target.put_index(index.to_json())
        elif local is not None:
            local.commit(index.to_json())
        return index
    except BaseException:
        writer.abort()
        if target is not None:
            left = target.abort()
            if left:
                log.error("the failed run left %d objects under %s; delete them: %s", len(left), dest, left)
        raise
    finally:
        if bar is not None:
            bar.close()
        if target is not None:
            target.close()
            shutil.rmtree(staging, ignore_errors=True)
        elif local is not None:
            local.discard()
