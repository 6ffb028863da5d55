"""The shard format: writer, reader, checks, Pipe-mode streams."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from gpu_train import shards
from gpu_train import shards as _module
from gpu_train.errors import DataError
from gpu_train.pack import encode_npy


def _write(directory: Path, count: int, target: int = 10_000) -> list[shards.ShardInfo]:
    writer = shards.ShardWriter(directory, target)
    for i in range(count):
        pixels = np.full((8, 8, 3), i, dtype=np.uint8)
        writer.add(f"{i:06d}", [("npy", encode_npy(pixels)), ("cls", str(i % 3).encode())])
    return writer.close()


def test_shards_roll_over_at_the_target_size_and_are_valid_tar(tmp_path: Path) -> None:
    infos = _write(tmp_path, 20, target=4096)
    assert len(infos) > 1
    assert sum(i.samples for i in infos) == 20
    for info in infos:
        path = tmp_path / info.name
        assert info.bytes == path.stat().st_size <= 4096 or info.samples == 1
        assert info.sha256 == shards.sha256_file(path)
        # Any tar reader (and so any WebDataset reader) can read a shard.
        with tarfile.open(path) as archive:
            names = archive.getnames()
        assert names[-1] == shards.TRAILER_NAME
        assert all(n.endswith((".npy", ".cls")) for n in names[:-1])
    assert not list(tmp_path.glob("*.partial"))


def test_reader_groups_samples_and_decodes_without_copy(tmp_path: Path) -> None:
    (info,) = _write(tmp_path, 5, target=1 << 20)
    data = (tmp_path / info.name).read_bytes()
    archive = shards.parse_archive(data, info.name)
    assert archive.trailer is not None
    assert archive.trailer == {"xxh3_64": archive.trailer["xxh3_64"], "samples": 5, "shard": info.name}
    assert [sorted(s) for s in archive.samples] == [["cls", "npy"]] * 5
    offset, size = archive.samples[3]["npy"]
    pixels = shards.npy_array(data, offset, size, "x")
    assert pixels.shape == (8, 8, 3) and pixels.dtype == np.uint8 and int(pixels[0, 0, 0]) == 3
    assert not pixels.flags.writeable  # a view into the shard buffer


def test_a_flipped_byte_is_caught_and_the_shard_named(tmp_path: Path) -> None:
    (info,) = _write(tmp_path, 5, target=1 << 20)
    data = bytearray((tmp_path / info.name).read_bytes())
    data[700] ^= 0xFF  # inside the first payload
    with pytest.raises(DataError, match=rf"{info.name}: corrupt shard {info.name}: XXH3-64 [0-9a-f]{{16}} != "):
        shards.parse_archive(data, info.name)


def test_truncated_shard_is_caught(tmp_path: Path) -> None:
    (info,) = _write(tmp_path, 5, target=1 << 20)
    data = (tmp_path / info.name).read_bytes()[:1500]
    with pytest.raises(DataError, match=r"truncated tar archive"):
        shards.parse_archive(data, info.name)


def _foreign_tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, payload in members.items():
            entry = tarfile.TarInfo(name)
            entry.size = len(payload)
            archive.addfile(entry, io.BytesIO(payload))
    return buffer.getvalue()


def test_shards_from_other_tools_are_read_with_header_checks() -> None:
    long_key = "d/" + "k" * 120  # pax long names
    data = _foreign_tar({"a/x1.jpg": b"J1", "a/x1.cls": b"0", f"{long_key}.seg.png": b"P", f"{long_key}.cls": b"1"})
    archive = shards.parse_archive(data, "foreign.tar")
    assert archive.trailer is None
    assert [sorted(s) for s in archive.samples] == [["cls", "jpg"], ["cls", "seg.png"]]
    corrupt = bytearray(data)
    corrupt[corrupt.index(b"x1.cls") + 2] ^= 0x01  # a header byte
    with pytest.raises(DataError, match=r"corrupt tar header .* \(checksum mismatch\)"):
        shards.parse_archive(corrupt, "foreign.tar")


def test_tar_stream_reads_concatenated_shards_from_a_fifo(tmp_path: Path) -> None:
    infos = _write(tmp_path / "ds", 20, target=4096)
    fifo = tmp_path / "train_0"
    os.mkfifo(fifo)

    def feed() -> None:  # what SageMaker Pipe mode does: the objects back to back
        with open(fifo, "wb") as out:
            for info in infos:
                out.write((tmp_path / "ds" / info.name).read_bytes())

    writer = threading.Thread(target=feed)
    writer.start()
    with open(fifo, "rb") as stream:
        archives = list(shards.TarStream(stream, "pipe").archives())
    writer.join()
    assert [a.trailer["shard"] for a in archives if a.trailer] == [i.name for i in infos]
    assert sum(len(a.samples) for a in archives) == 20


def test_tar_stream_names_the_corrupt_archive(tmp_path: Path) -> None:
    infos = _write(tmp_path, 20, target=4096)
    blob = bytearray(b"".join((tmp_path / i.name).read_bytes() for i in infos))
    second = infos[0].bytes
    blob[second + 900] ^= 0x55
    with pytest.raises(DataError, match=rf"pipe, archive #1 at byte {second}: corrupt shard {infos[1].name}"):
        list(shards.TarStream(io.BytesIO(bytes(blob)), "pipe").archives())


@pytest.mark.parametrize(
    ("text", "size"), [("128MB", 128 << 20), ("1GiB", 1 << 30), ("16m", 16 << 20), ("1048576", 1 << 20)]
)
def test_sizes_parse_with_binary_units(text: str, size: int) -> None:
    assert shards.parse_size(text) == size


@pytest.mark.parametrize("size", [(16 << 20) - 1, (1 << 30) + 1])
def test_shard_size_must_be_between_16_mb_and_1_gb(size: int) -> None:
    with pytest.raises(ValueError, match=r"allowed: 16 MB to 1 GB"):
        shards.check_shard_size(size)


def test_index_round_trips_and_rejects_other_files(tmp_path: Path) -> None:
    infos = _write(tmp_path, 4)
    index = shards.DatasetIndex(shards=infos, sample={"image": {}}, classes=["a", "b", "c"], image_size=8)
    again = shards.DatasetIndex.from_json(index.to_json(), "index.json")
    assert again == index and again.num_samples == 4 and again.num_classes == 3
    with pytest.raises(DataError, match=r"not a gpu-train-shards index"):
        shards.DatasetIndex.from_json('{"format": "other"}', "index.json")


def test_packed_shards_take_the_zero_copy_fast_path(shards: Path) -> None:
    """The vectorised view of a packed shard equals the member-by-member decode, file or Pipe stream."""
    path = sorted(shards.glob("shard-*.tar"))[3]
    data = path.read_bytes()
    fast = _module.regular_image_shard(data, path.name, (32, 32, 3))
    assert fast is not None
    pixels, labels, trailer = fast
    archive = _module.parse_archive(data, path.name)
    assert pixels.shape == (len(archive.samples), 32, 32, 3) and trailer["samples"] == len(archive.samples)
    for i, sample in enumerate(archive.samples):
        assert np.array_equal(pixels[i], _module.npy_array(data, *sample["npy"], path.name))
        assert labels[i] == int(data[sample["cls"][0] : sample["cls"][0] + sample["cls"][1]])
    # As TarStream hands it over (one zero block after the trailer) it is recognised too.
    with open(path, "rb") as stream:
        ((buffer, _),) = list(_module.TarStream(stream, "pipe").buffers())
    assert _module.regular_image_shard(bytes(buffer), "pipe", (32, 32, 3)) is not None
    # Another image size or a foreign layout is not forced through the fast path.
    assert _module.regular_image_shard(data, path.name, (16, 16, 3)) is None
    assert (
        _module.regular_image_shard(_foreign_tar({"a.npy": data[1024:1300], "a.cls": b"1"}), "x", (32, 32, 3)) is None
    )
    corrupt = bytearray(data)
    corrupt[5000] ^= 0x10
    with pytest.raises(DataError, match=rf"{path.name}: corrupt shard {path.name}: XXH3-64"):
        _module.regular_image_shard(bytes(corrupt), path.name, (32, 32, 3))
