"""The shard format: plain tar files in the WebDataset layout, plus an index.

A shard is a POSIX ustar archive. Each sample is a run of consecutive members that share a key,
``<key>.<ext>`` (WebDataset convention: the key is the path up to the first dot of the file name).
Images packed by ``gpuctl shard`` are stored pre-decoded and pre-resized:

* ``<key>.npy``: the image as a ``uint8`` array of shape (H, W, 3), NumPy ``.npy`` format;
* ``<key>.cls``: the class index as ASCII digits.

Each shard ends with one extra member, ``__shard__.json`` (``{"shard", "samples", "xxh3_64"}``), whose XXH3-64
checksum covers every byte before it (XXH3 runs at memory speed, ~10 GB/s a core, where CRC-32 manages 2-3
GB/s: checking every shard on every read costs the loader little). A reader can therefore check a shard it
reads as a stream (Pipe mode) as well as a file, and name it when it is corrupt. WebDataset readers see it as
one sample with the reserved key ``__shard__``; this package skips it.

The dataset directory also holds ``index.json``: format version, sample layout, classes, and per shard
its name, sample count, size in bytes and SHA-256. Shards read sequentially, so the same files serve
File, FastFile, FSx for Lustre and (concatenated by SageMaker) Pipe mode.

This module imports no torch.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np
import xxhash

from gpu_train.errors import DataError

FORMAT = "gpu-train-shards"
FORMAT_VERSION = 1
INDEX_NAME = "index.json"
TRAILER_NAME = "__shard__.json"
TRAILER_KEY = "__shard__"
SHARD_PREFIX = "shard-"
SHARD_SUFFIX = ".tar"

MiB = 1 << 20
GiB = 1 << 30
DEFAULT_SHARD_BYTES = 128 * MiB
MIN_SHARD_BYTES = 16 * MiB
MAX_SHARD_BYTES = 1 * GiB

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
END_OF_ARCHIVE = bytes(2 * BLOCK)

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def shard_name(index: int) -> str:
    return f"{SHARD_PREFIX}{index:06d}{SHARD_SUFFIX}"


def parse_size(text: str) -> int:
    """Parse ``128MB``, ``1GiB``, ``64m`` or a byte count; units are binary (1 MB = 2**20 bytes)."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"size {text!r} is not allowed; allowed: a number with an optional K, M, G or T unit")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * {"": 1, "k": 1 << 10, "m": MiB, "g": GiB, "t": 1 << 40}[unit])


def check_shard_size(target: int) -> int:
    if not MIN_SHARD_BYTES <= target <= MAX_SHARD_BYTES:
        raise ValueError(
            f"target shard size {target} bytes ({target / MiB:.1f} MB) is not allowed; "
            f"allowed: {MIN_SHARD_BYTES // MiB} MB to {MAX_SHARD_BYTES // GiB} GB"
        )
    return target


def padded(size: int) -> int:
    """Bytes a payload of ``size`` bytes takes in a tar archive (rounded up to 512)."""
    return (size + BLOCK - 1) // BLOCK * BLOCK


def member_bytes(size: int) -> int:
    """Bytes one member takes in a tar archive: header plus padded payload."""
    return BLOCK + padded(size)


# --------------------------------------------------------------------------------------------- tar write


def _octal(value: int, width: int) -> bytes:
    """A NUL-terminated octal field of ``width`` bytes (ustar), e.g. size or mode."""
    digits = f"{value:o}".encode()
    if len(digits) > width - 1:
        raise ValueError(f"value {value} does not fit a {width}-byte tar field")
    return digits.rjust(width - 1, b"0") + b"\0"


def tar_header(name: str, size: int) -> bytes:
    """A deterministic ustar header for a regular file (mode 0644, uid/gid 0, mtime 0)."""
    raw = name.encode("utf-8")
    prefix = b""
    if len(raw) > 100:
        cut = raw.rfind(b"/", 0, 156)
        if cut <= 0 or len(raw) - cut - 1 > 100:
            raise ValueError(f"member name {name!r} is too long for a ustar header (max 255 bytes)")
        prefix, raw = raw[:cut], raw[cut + 1 :]
    header = bytearray(BLOCK)
    header[0 : len(raw)] = raw
    header[100:108] = _octal(0o644, 8)
    header[108:116] = _octal(0, 8)
    header[116:124] = _octal(0, 8)
    header[124:136] = _octal(size, 12)
    header[136:148] = _octal(0, 12)
    header[148:156] = b" " * 8
    header[156:157] = b"0"
    header[257:263] = b"ustar\0"
    header[263:265] = b"00"
    header[329:337] = _octal(0, 8)
    header[337:345] = _octal(0, 8)
    header[345 : 345 + len(prefix)] = prefix
    checksum = sum(header)
    header[148:156] = f"{checksum:06o}".encode() + b"\0 "
    return bytes(header)


@dataclass
class ShardInfo:
    """One shard of the index."""

    name: str
    samples: int
    bytes: int
    sha256: str


class ShardWriter:
    """Writes samples into shards of about ``target_bytes`` each, in one directory.

    Shards are written under a temporary name and renamed when complete, so a crash never leaves a
    truncated ``shard-*.tar``. ``on_shard`` is called with each finished shard (e.g. to upload it).
    """

    def __init__(
        self,
        directory: Path,
        target_bytes: int = DEFAULT_SHARD_BYTES,
        *,
        on_shard: Any = None,
        first_index: int = 0,
    ) -> None:
        self.directory = directory
        self.target_bytes = target_bytes
        self.on_shard = on_shard
        self.shards: list[ShardInfo] = []
        self._index = first_index
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._written = 0
        self._samples = 0
        self._check = xxhash.xxh3_64()
        self._sha = hashlib.sha256()

    # Reserve room for the trailer and the end-of-archive blocks when deciding to close a shard.
    _TAIL = member_bytes(256) + len(END_OF_ARCHIVE)

    def _write(self, data: bytes) -> None:
        assert self._file is not None
        self._file.write(data)
        self._check.update(data)
        self._sha.update(data)
        self._written += len(data)

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path = self.directory / (shard_name(self._index) + ".partial")
        self._file = open(self._path, "wb")  # noqa: SIM115 - closed in _close
        self._written = 0
        self._samples = 0
        self._check = xxhash.xxh3_64()
        self._sha = hashlib.sha256()

    def _close(self) -> None:
        if self._file is None or self._path is None:
            return
        name = shard_name(self._index)
        trailer = json.dumps(
            {"shard": name, "samples": self._samples, "xxh3_64": self._check.hexdigest()}, sort_keys=True
        ).encode()
        self._write(tar_header(TRAILER_NAME, len(trailer)))
        self._write(trailer + bytes(padded(len(trailer)) - len(trailer)))
        self._write(END_OF_ARCHIVE)
        self._file.close()
        final = self.directory / name
        self._path.replace(final)
        info = ShardInfo(name=name, samples=self._samples, bytes=self._written, sha256=self._sha.hexdigest())
        self.shards.append(info)
        self._file = None
        self._path = None
        self._index += 1
        if self.on_shard is not None:
            self.on_shard(final, info)

    def add(self, key: str, files: list[tuple[str, bytes]]) -> None:
        """Append one sample: ``files`` are (extension, payload) pairs stored as ``<key>.<ext>``."""
        if "." in key.rsplit("/", 1)[-1] or not key or key.startswith(TRAILER_KEY):
            raise ValueError(f"sample key {key!r} is not allowed; allowed: a name without dots, not '__shard__'")
        size = sum(member_bytes(len(data)) for _, data in files)
        if self._file is not None and self._samples and self._written + size + self._TAIL > self.target_bytes:
            self._close()
        if self._file is None:
            self._open()
        for ext, data in files:
            self._write(tar_header(f"{key}.{ext}", len(data)))
            self._write(data)
            pad = padded(len(data)) - len(data)
            if pad:
                self._write(bytes(pad))
        self._samples += 1

    def close(self) -> list[ShardInfo]:
        self._close()
        return self.shards

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)
        self._file = None
        self._path = None


# ---------------------------------------------------------------------------------------------- tar read


@dataclass
class Member:
    """A regular file inside a tar archive: its name and where its payload is in the buffer."""

    name: str
    offset: int
    size: int


def _parse_octal(field_bytes: bytes, where: str) -> int:
    if field_bytes and field_bytes[0] & 0x80:  # GNU base-256 for very large values
        value = int.from_bytes(field_bytes[1:], "big")
        return value
    text = field_bytes.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise DataError(f"{where}: bad tar header field {field_bytes!r}") from None


def _header_checksum_ok(header: bytes) -> bool:
    stored = header[148:156].split(b"\0", 1)[0].strip()
    try:
        expected = int(stored, 8)
    except ValueError:
        return False
    actual = sum(header[:148]) + 8 * 32 + sum(header[156:])
    return actual == expected


def _parse_pax(data: bytes) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        length = int(data[pos:space])
        record = data[space + 1 : pos + length - 1].decode("utf-8", "replace")
        key, _, value = record.partition("=")
        records[key] = value
        pos += length
    return records


@dataclass
class _HeaderState:
    """Long names (GNU 'L', pax 'x') apply to the member that follows them."""

    next_name: str | None = None
    next_size: int | None = None

    def member(self, header: bytes, where: str) -> tuple[str, int, bytes]:
        """Return (name, payload size, typeflag) of a header block."""
        size = _parse_octal(header[124:136], where)
        typeflag = header[156:157]
        name_field = header[0:100].split(b"\0", 1)[0]
        if header[257:262] == b"ustar":
            prefix = header[345:500].split(b"\0", 1)[0]
            if prefix:
                name_field = prefix + b"/" + name_field
        name = name_field.decode("utf-8", "replace")
        return name, size, typeflag


def _is_regular(typeflag: bytes) -> bool:
    return typeflag in (b"0", b"\0", b"7")


def iter_members(buf: bytes | bytearray | memoryview, where: str) -> Iterator[Member]:
    """The regular files of one tar archive held in memory, in order.

    Raises :class:`DataError` naming ``where`` when the archive is truncated or malformed.
    """
    view = memoryview(buf)
    total = len(view)
    pos = 0
    state = _HeaderState()
    while True:
        if pos + BLOCK > total:
            raise DataError(f"{where}: truncated tar archive (no end-of-archive marker at byte {pos})")
        header = bytes(view[pos : pos + BLOCK])
        if header == ZERO_BLOCK:
            return
        name, size, typeflag = state.member(header, where)
        start = pos + BLOCK
        end = start + padded(size)
        if size < 0 or start + size > total:
            raise DataError(
                f"{where}: truncated tar archive: member {name!r} at byte {pos} needs {size} bytes, "
                f"{max(0, total - start)} left"
            )
        if typeflag == b"x":
            pax = _parse_pax(bytes(view[start : start + size]))
            state.next_name = pax.get("path")
            state.next_size = int(pax["size"]) if "size" in pax else None
        elif typeflag == b"L":
            state.next_name = bytes(view[start : start + size]).split(b"\0", 1)[0].decode("utf-8", "replace")
        elif typeflag == b"g":
            pass
        else:
            if state.next_size is not None:
                size = state.next_size
                end = start + padded(size)
            if state.next_name is not None:
                name = state.next_name
            state = _HeaderState()
            if _is_regular(typeflag):
                yield Member(name, start, size)
        pos = end


def verify_header_checksums(buf: bytes | bytearray | memoryview, where: str) -> None:
    """Check every tar header checksum (used for archives without a ``__shard__.json`` trailer)."""
    view = memoryview(buf)
    pos = 0
    state = _HeaderState()
    while pos + BLOCK <= len(view):
        header = bytes(view[pos : pos + BLOCK])
        if header == ZERO_BLOCK:
            return
        if not _header_checksum_ok(header):
            raise DataError(f"{where}: corrupt tar header at byte {pos} (checksum mismatch)")
        _, size, _ = state.member(header, where)
        pos += BLOCK + padded(size)


def split_key(name: str) -> tuple[str, str]:
    """WebDataset key and extension: ``dir/abc.seg.png`` -> (``dir/abc``, ``seg.png``)."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1 :]


@dataclass
class Archive:
    """One shard read into memory and checked: its samples as {ext: (offset, size)} into ``data``."""

    where: str
    data: bytes | bytearray | memoryview
    samples: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    trailer: dict[str, Any] | None = None


def parse_archive(data: bytes | bytearray | memoryview, where: str) -> Archive:
    """Group the members of an in-memory archive into samples and check it.

    With a ``__shard__.json`` trailer the checksum of everything before it and the sample count must match;
    without one (a shard from another tool) every tar header checksum is checked instead.
    """
    archive = Archive(where=where, data=data)
    current_key: str | None = None
    current: dict[str, tuple[int, int]] = {}
    trailer_member: Member | None = None
    for member in iter_members(data, where):
        key, ext = split_key(member.name)
        if key == TRAILER_KEY:
            trailer_member = member
            continue
        if key != current_key:
            if current:
                archive.samples.append(current)
            current_key, current = key, {}
        current[ext] = (member.offset, member.size)
    if current:
        archive.samples.append(current)
    if trailer_member is None:
        verify_header_checksums(data, where)
        return archive
    view = memoryview(data)
    raw = bytes(view[trailer_member.offset : trailer_member.offset + trailer_member.size])
    try:
        trailer = json.loads(raw)
        expected_samples = int(trailer["samples"])
    except (ValueError, KeyError, TypeError):
        raise DataError(f"{where}: corrupt shard trailer {TRAILER_NAME}") from None
    covered = view[: trailer_member.offset - BLOCK]
    if "xxh3_64" in trailer:
        algorithm, expected, actual = "XXH3-64", str(trailer["xxh3_64"]), xxhash.xxh3_64_hexdigest(covered)
    elif "crc32" in trailer:
        algorithm, expected, actual = "CRC-32", f"{int(trailer['crc32']):08x}", f"{zlib.crc32(covered):08x}"
    else:
        raise DataError(f"{where}: shard trailer {TRAILER_NAME} has no checksum")
    if actual != expected:
        raise DataError(
            f"{where}: corrupt shard {trailer.get('shard', '?')}: {algorithm} {actual} != {expected} "
            "recorded at pack time"
        )
    if expected_samples != len(archive.samples):
        raise DataError(f"{where}: corrupt shard: {len(archive.samples)} samples, trailer says {expected_samples}")
    archive.trailer = trailer
    return archive


class TarStream:
    """Reads concatenated tar archives from a stream (a Pipe-mode FIFO) one archive at a time.

    SageMaker Pipe mode concatenates the S3 objects of a channel into one stream; each of our shards
    is a complete archive ending with zero blocks, so archive boundaries are found without an index.
    Each archive is read fully into memory (one shard, by default 128 MB) before it is checked.
    """

    def __init__(self, stream: IO[bytes], where: str) -> None:
        self.stream = stream
        self.where = where
        self.offset = 0
        self.count = 0

    def _read_exact(self, size: int) -> bytes:
        chunks: list[bytes] = []
        remaining = size
        while remaining:
            chunk = self.stream.read(remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        self.offset += len(data)
        return data

    def archives(self) -> Iterator[Archive]:
        """Each archive of the stream, parsed and checked (:func:`parse_archive`)."""
        for buffer, where in self.buffers():
            yield parse_archive(buffer, where)

    def buffers(self) -> Iterator[tuple[bytearray, str]]:
        """The raw bytes of each archive of the stream (up to its first end-of-archive block), and where it was."""
        while True:
            header = self._read_exact(BLOCK)
            while header == ZERO_BLOCK:  # padding after the previous archive
                header = self._read_exact(BLOCK)
            if not header:
                return
            start = self.offset - len(header)
            where = f"{self.where}, archive #{self.count} at byte {start}"
            if len(header) < BLOCK:
                raise DataError(f"{where}: stream ends inside a tar header")
            buf = bytearray(header)
            next_size: int | None = None  # a pax 'x' header may override the next member's size
            while header != ZERO_BLOCK:
                if not _header_checksum_ok(header):
                    raise DataError(f"{where}: corrupt tar header at byte {self.offset - BLOCK}")
                size = _parse_octal(header[124:136], where)
                typeflag = header[156:157]
                if typeflag not in (b"x", b"g", b"L") and next_size is not None:
                    size, next_size = next_size, None
                payload = self._read_exact(padded(size))
                if len(payload) < padded(size):
                    raise DataError(f"{where}: stream ends inside a tar member at byte {self.offset}")
                if typeflag == b"x":
                    pax = _parse_pax(payload[:size])
                    next_size = int(pax["size"]) if "size" in pax else None
                buf += payload
                header = self._read_exact(BLOCK)
                if len(header) < BLOCK:
                    raise DataError(f"{where}: stream ends without an end-of-archive marker")
                buf += header
            self.count += 1
            yield buf, where


# -------------------------------------------------------------------------------------------- npy decode

_NPY_MAGIC = b"\x93NUMPY"
_npy_headers: dict[bytes, tuple[np.dtype[Any], tuple[int, ...], bool]] = {}


def npy_array(buf: bytes | bytearray | memoryview, offset: int, size: int, where: str) -> np.ndarray:
    """A read-only view of a ``.npy`` payload inside ``buf`` (no copy); headers are parsed once and cached."""
    view = memoryview(buf)
    if bytes(view[offset : offset + 6]) != _NPY_MAGIC:
        raise DataError(f"{where}: sample payload is not a .npy array")
    major = view[offset + 6]
    if major == 1:
        header_len = int.from_bytes(view[offset + 8 : offset + 10], "little")
        start = offset + 10
    else:
        header_len = int.from_bytes(view[offset + 8 : offset + 12], "little")
        start = offset + 12
    header = bytes(view[start : start + header_len])
    parsed = _npy_headers.get(header)
    if parsed is None:
        try:
            meta = ast.literal_eval(header.decode("latin1"))
            parsed = (np.dtype(meta["descr"]), tuple(meta["shape"]), bool(meta["fortran_order"]))
        except (ValueError, SyntaxError, KeyError, TypeError):
            raise DataError(f"{where}: corrupt .npy header {header[:60]!r}") from None
        if len(_npy_headers) < 64:
            _npy_headers[header] = parsed
    dtype, shape, fortran = parsed
    count = math.prod(shape)
    data_start = start + header_len
    if data_start + count * dtype.itemsize > offset + size:
        raise DataError(f"{where}: truncated .npy payload ({size} bytes for shape {shape} {dtype})")
    array = np.frombuffer(view, dtype=dtype, count=count, offset=data_start)
    return array.reshape(shape, order="F" if fortran else "C")


def _first_members(view: memoryview, count: int, where: str) -> list[tuple[str, int, int, bytes]]:
    """(name, header offset, size, typeflag) of the first ``count`` members (plain ustar headers only)."""
    out: list[tuple[str, int, int, bytes]] = []
    pos = 0
    for _ in range(count):
        if pos + BLOCK > len(view):
            return out
        header = bytes(view[pos : pos + BLOCK])
        if header == ZERO_BLOCK or header[257:262] != b"ustar":
            return out
        name = header[0:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        size = _parse_octal(header[124:136], where)
        out.append((name, pos, size, header[156:157]))
        pos += BLOCK + padded(size)
    return out


def regular_image_shard(
    data: bytes | bytearray | memoryview, where: str, image_shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
    """Fast path for shards written by :class:`ShardWriter` from ``gpuctl shard``: every sample is
    ``<key>.npy`` (same header, so same shape and dtype) then ``<key>.cls`` at a fixed stride.

    Returns ``(pixels, labels, trailer)``: ``pixels`` a zero-copy (n, H, W, 3) view into ``data``, after the
    trailer checksum and a vectorised check of every header. ``None`` when the shard is not laid out
    that way (another tool, raw files, a different shape): the caller then uses :func:`parse_archive`.
    """
    view = memoryview(data)
    first = _first_members(view, 2, where)
    if len(first) < 2:
        return None
    (npy_name, _, npy_size, npy_type), (cls_name, cls_pos, cls_size, cls_type) = first
    key, ext = split_key(npy_name)
    if ext != "npy" or split_key(cls_name) != (key, "cls") or npy_type != b"0" or cls_type != b"0":
        return None
    stride = cls_pos + BLOCK + padded(cls_size)
    if cls_size > BLOCK:
        return None
    # The trailer follows the last sample, then one or two zero blocks (a file has two; a Pipe-mode archive
    # as read by TarStream one): so the sample count follows from the total size.
    total = len(view)
    found = None
    for tail in (2 * BLOCK, BLOCK):
        for trailer_blocks in (1, 2):
            body = total - tail - BLOCK - trailer_blocks * BLOCK
            if body <= 0 or body % stride:
                continue
            at = body
            header = bytes(view[at : at + BLOCK])
            if header[0:100].split(b"\0", 1)[0] == TRAILER_NAME.encode():
                found = (at, header)
                break
        if found:
            break
    if found is None:
        return None
    at, header = found
    count = at // stride
    trailer_size = _parse_octal(header[124:136], where)
    raw = bytes(view[at + BLOCK : at + BLOCK + trailer_size])
    try:
        trailer = json.loads(raw)
        expected_samples, expected = int(trailer["samples"]), str(trailer["xxh3_64"])
    except (ValueError, KeyError, TypeError):
        return None
    if expected_samples != count:
        return None
    actual = xxhash.xxh3_64_hexdigest(view[:at])
    if actual != expected:
        raise DataError(
            f"{where}: corrupt shard {trailer.get('shard', '?')}: XXH3-64 {actual} != {expected} recorded at pack time"
        )
    rows = np.frombuffer(view, dtype=np.uint8, count=count * stride).reshape(count, stride)
    npy_header_len = int.from_bytes(view[BLOCK + 8 : BLOCK + 10], "little") + 10
    if bytes(view[BLOCK : BLOCK + 6]) != _NPY_MAGIC or view[BLOCK + 6] != 1:
        return None
    # Every sample: same .npy header bytes (dtype, shape), same member sizes, ustar magic, regular files.
    same = rows[:, BLOCK : BLOCK + npy_header_len] == rows[0, BLOCK : BLOCK + npy_header_len]
    same_size = rows[:, 124:136] == rows[0, 124:136]
    if not (same.all() and same_size.all()):
        return None
    for offset in (0, cls_pos):
        if not ((rows[:, offset + 257 : offset + 262] == np.frombuffer(b"ustar", np.uint8)).all()):
            return None
        if not (rows[:, offset + 156] == ord("0")).all():
            return None
    meta = ast.literal_eval(bytes(view[BLOCK + 10 : BLOCK + npy_header_len]).decode("latin1"))
    if np.dtype(meta["descr"]) != np.uint8 or tuple(meta["shape"]) != tuple(image_shape) or meta["fortran_order"]:
        return None
    start = BLOCK + npy_header_len
    if start + math.prod(image_shape) > BLOCK + npy_size:
        return None
    pixels = rows[:, start : start + math.prod(image_shape)].reshape(count, *image_shape)
    label_field = rows[:, cls_pos + BLOCK : cls_pos + BLOCK + 20]
    labels = np.empty(count, dtype=np.int64)
    try:
        for i in range(count):
            labels[i] = int(label_field[i].tobytes().split(b"\0", 1)[0])
    except ValueError:
        raise DataError(f"{where}: a .cls label is not an integer") from None
    return pixels, labels, trailer


# ------------------------------------------------------------------------------------------------ index


@dataclass
class DatasetIndex:
    """``index.json`` of a sharded dataset."""

    shards: list[ShardInfo]
    sample: dict[str, Any]
    classes: list[str] = field(default_factory=list)
    image_size: int | None = None
    seed: int | None = None
    shuffled: bool = True
    source: str = ""
    format: str = FORMAT
    version: int = FORMAT_VERSION

    @property
    def num_samples(self) -> int:
        return sum(s.samples for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def to_json(self) -> str:
        data = asdict(self)
        data["num_samples"] = self.num_samples
        data["total_bytes"] = self.total_bytes
        data["num_classes"] = self.num_classes
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> DatasetIndex:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not valid JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DataError(f"{where}: not a {FORMAT} index (format={data.get('format')!r})")
        if int(data.get("version", 0)) > FORMAT_VERSION:
            raise DataError(f"{where}: index version {data['version']} is newer than this reader ({FORMAT_VERSION})")
        try:
            shards = [ShardInfo(**s) for s in data["shards"]]
        except (KeyError, TypeError) as exc:
            raise DataError(f"{where}: bad shard list: {exc}") from None
        return cls(
            shards=shards,
            sample=dict(data.get("sample", {})),
            classes=list(data.get("classes", [])),
            image_size=data.get("image_size"),
            seed=data.get("seed"),
            shuffled=bool(data.get("shuffled", True)),
            source=str(data.get("source", "")),
            version=int(data.get("version", FORMAT_VERSION)),
        )

    @classmethod
    def load(cls, path: Path) -> DatasetIndex:
        return cls.from_json(path.read_text(), str(path))


def sha256_file(path: Path, chunk: int = 8 * MiB) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def list_shards(directory: Path) -> list[Path]:
    """Tar files of a dataset directory, in name order (``index.json`` order when it exists)."""
    return sorted(p for p in directory.iterdir() if p.suffix == SHARD_SUFFIX and p.is_file())
