"""``gpuctl shard``: packing, deterministic shuffle, index, overwrite protection, S3 upload."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from PIL import Image

from gpu_train import pack, shards
from gpu_train.serving import inference
from gpuctl.cli import main as gpuctl


def _packed_keys(directory: Path) -> list[tuple[int, int]]:
    """(label, first pixel) of every sample, in shard order: identifies the sample order."""
    index = shards.DatasetIndex.load(directory / shards.INDEX_NAME)
    out = []
    for info in index.shards:
        data = (directory / info.name).read_bytes()
        for sample in shards.parse_archive(data, info.name).samples:
            pixels = shards.npy_array(data, *sample["npy"], info.name)
            out.append((int(data[sample["cls"][0] : sum(sample["cls"])]), int(pixels[5, 5, 0])))
    return out


def test_cli_packs_an_image_folder_with_index(image_folder: Path, tmp_path: Path, capsys: Any) -> None:
    code = gpuctl(["shard", str(image_folder), str(tmp_path / "ds"), "--image-size", "24", "--quiet", "--seed", "3"])
    assert code == 0
    index = shards.DatasetIndex.load(tmp_path / "ds" / "index.json")
    assert index.num_samples == 192 and index.classes == ["class_0", "class_1", "class_2"]
    assert index.image_size == 24 and index.seed == 3 and index.shuffled
    assert index.sample["image"] == {"ext": "npy", "dtype": "uint8", "layout": "HWC", "shape": [24, 24, 3]}
    (info,) = index.shards  # 192 x 1.8 KB fits one 128 MB shard
    assert info.sha256 == shards.sha256_file(tmp_path / "ds" / info.name)
    assert "192 samples, 3 classes, 1 shards" in capsys.readouterr().out


def test_shuffle_is_deterministic_and_mixes_classes(image_folder: Path, tmp_path: Path) -> None:
    kwargs: dict[str, Any] = {"image_size": 16, "target_bytes": 16 * 1024, "progress": False, "workers": 1}
    pack.pack(image_folder, str(tmp_path / "a"), seed=5, **kwargs)
    pack.pack(image_folder, str(tmp_path / "b"), seed=5, **{**kwargs, "workers": 2})
    pack.pack(image_folder, str(tmp_path / "c"), seed=6, **kwargs)
    a, b = (sorted((tmp_path / d).glob("shard-*.tar")) for d in "ab")
    assert len(a) > 3 and [p.read_bytes() for p in a] == [p.read_bytes() for p in b]  # byte-identical
    order_a, order_c = _packed_keys(tmp_path / "a"), _packed_keys(tmp_path / "c")
    assert order_a != order_c and sorted(order_a) == sorted(order_c)
    first_shard_labels = {label for label, _ in order_a[:12]}
    assert len(first_shard_labels) == 3  # a sequential read of one shard sees every class


def test_packed_pixels_match_the_inference_image_transform(image_folder: Path, tmp_path: Path) -> None:
    source = image_folder / "class_1" / "img_000.png"
    stored = pack.load_image(str(source), 32)
    served = inference.decode_image(source.read_bytes(), 32)
    assert stored.shape == (32, 32, 3) and np.array_equal(stored, served)


def test_manifests_with_names_or_numbers(image_folder: Path, tmp_path: Path) -> None:
    files = sorted(image_folder.glob("class_*/img_00[0-2].png"))
    csv = tmp_path / "m.csv"
    csv.write_text("path,label\n" + "".join(f"{f},{f.parent.name}\n" for f in files))
    index = pack.pack(csv, str(tmp_path / "csv"), image_size=16, progress=False, workers=1)
    assert index.classes == ["class_0", "class_1", "class_2"] and index.num_samples == 9
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("".join(json.dumps({"path": f.name, "label": 4}) + "\n" for f in files[:3]))
    (tmp_path / files[0].name).write_bytes(files[0].read_bytes())
    for f in files[1:3]:
        (tmp_path / f.name).write_bytes(f.read_bytes())
    index = pack.pack(jsonl, str(tmp_path / "jsonl"), image_size=16, progress=False, workers=1, mode="raw")
    assert index.num_classes == 5 and index.sample["files"] == ["png"]


def test_refuses_to_overwrite_unless_asked(image_folder: Path, tmp_path: Path, capsys: Any) -> None:
    dest = tmp_path / "ds"
    args = ["shard", str(image_folder), str(dest), "--image-size", "16", "--quiet"]
    assert gpuctl(args) == 0
    before = (dest / "index.json").read_text()
    assert gpuctl(args) == 1
    err = capsys.readouterr().err
    assert "already holds a dataset" in err and "pass --overwrite to replace it" in err
    assert (dest / "index.json").read_text() == before
    (dest / "notes.txt").write_text("kept")
    assert gpuctl([*args, "--overwrite", "--seed", "9"]) == 0
    assert json.loads((dest / "index.json").read_text())["seed"] == 9 and (dest / "notes.txt").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard-size", "8MB"], "allowed: 16 MB to 1 GB"),
        (["--image-size", "4"], "image size 4 is not allowed"),
    ],
)
def test_bad_options_are_named(image_folder: Path, tmp_path: Path, capsys: Any, args: list[str], message: str) -> None:
    assert gpuctl(["shard", str(image_folder), str(tmp_path / "x"), "--quiet", *args]) in (1, 2)
    assert message in capsys.readouterr().err


def test_unreadable_source_file_is_named(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "broken.jpg").write_bytes(b"not a jpeg")
    assert gpuctl(["shard", str(tmp_path / "src"), str(tmp_path / "out"), "--quiet", "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "cannot read source file" in err and "broken.jpg" in err


def test_s3_transfer_settings() -> None:
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    target = pack.S3Target("s3://data/sets/x", client=client, max_concurrency=4, chunk_bytes=8 << 20, kms_key_id="k1")
    assert (target.bucket, target.prefix, target.key("index.json")) == ("data", "sets/x", "sets/x/index.json")
    config: Any = target.config
    assert config.use_threads and config.max_concurrency == 4
    assert config.multipart_threshold == config.multipart_chunksize == 8 << 20
    assert target.extra_args == {
        "ContentType": "application/x-tar",
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": "k1",
    }
    target.close()


@mock_aws
def test_s3_destination_uploads_multipart_with_the_index_last(tmp_path: Path) -> None:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="data")
    src = tmp_path / "src" / "noise"  # incompressible images: one ~6.5 MB shard, two 5 MB parts
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (600, 600, 3), dtype=np.uint8)).save(src / f"{i}.bmp")
    uploaded: list[str] = []
    original_put = pack.S3Target.put_index

    def put_index(self: pack.S3Target, text: str) -> None:  # record what exists when the index goes up
        uploaded.extend(o["Key"] for o in client.list_objects_v2(Bucket="data")["Contents"])
        original_put(self, text)

    pack.S3Target.put_index = put_index  # type: ignore[method-assign]
    try:
        index = pack.pack(
            tmp_path / "src",
            "s3://data/sets/noise",
            image_size=600,
            progress=False,
            workers=1,
            s3_client=client,
            max_concurrency=4,
            multipart_chunk_bytes=5 << 20,
        )
    finally:
        pack.S3Target.put_index = original_put  # type: ignore[method-assign]
    (info,) = index.shards
    assert uploaded == ["sets/noise/shard-000000.tar"]  # every shard is up before the index
    head = client.head_object(Bucket="data", Key="sets/noise/shard-000000.tar")
    assert head["ContentLength"] == info.bytes > 5 << 20
    assert head["ETag"].strip('"').endswith("-2")  # a two-part multipart upload
    body = client.get_object(Bucket="data", Key="sets/noise/shard-000000.tar")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == info.sha256
    stored = shards.DatasetIndex.from_json(
        client.get_object(Bucket="data", Key="sets/noise/index.json")["Body"].read().decode(), "s3"
    )
    assert stored.num_samples == 6 and stored.image_size == 600
    # The prefix now holds a dataset: refuse, then replace with --overwrite (old shards deleted).
    with pytest.raises(pack.PackError, match=r"s3://data/sets/noise already holds a dataset"):
        pack.pack(tmp_path / "src", "s3://data/sets/noise", image_size=16, progress=False, workers=1, s3_client=client)
    client.put_object(Bucket="data", Key="sets/noise/shard-000007.tar", Body=b"stale")
    pack.pack(
        tmp_path / "src",
        "s3://data/sets/noise",
        image_size=16,
        progress=False,
        workers=1,
        s3_client=client,
        overwrite=True,
    )
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="data", Prefix="sets/noise/")["Contents"])
    assert keys == ["sets/noise/index.json", "sets/noise/shard-000000.tar"]
    index_body = io.BytesIO(client.get_object(Bucket="data", Key="sets/noise/index.json")["Body"].read())
    assert json.load(index_body)["image_size"] == 16


# -- bad source files (--skip-bad) and no partial destination on failure -----------------------------------------


def _source_with_bad_files(root: Path, good: int = 18) -> tuple[Path, list[Path]]:
    """ImageFolder with ``good`` 8x8 PNGs and two bad files: a text file named .jpg and a truncated PNG."""
    rng = np.random.default_rng(1)
    for i in range(good):
        directory = root / f"class_{i % 2}"
        directory.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(directory / f"img_{i:02d}.png")
    text = root / "class_0" / "notes.jpg"
    text.write_bytes(b"this is not a JPEG")
    whole = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(whole, format="PNG")
    truncated = root / "class_1" / "cut.png"
    truncated.write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
    return root, [text, truncated]


def _samples_in(directory: Path) -> int:
    index = shards.DatasetIndex.load(directory / shards.INDEX_NAME)
    return sum(len(shards.parse_archive((directory / i.name).read_bytes(), i.name).samples) for i in index.shards)


def test_skip_bad_reports_each_file_and_the_count(tmp_path: Path, capsys: Any) -> None:
    src, bad = _source_with_bad_files(tmp_path / "src")
    dest = tmp_path / "ds"
    args = ["shard", str(src), str(dest), "--image-size", "8", "--quiet", "--workers", "1", "--skip-bad"]
    assert gpuctl([*args, "--max-bad-fraction", "0.1"]) == 0
    captured = capsys.readouterr()
    for path in bad:
        assert f"gpuctl shard: skipped {path}: " in captured.err
    assert "cannot identify image file" in captured.err  # the text file; the truncated PNG names its own error
    assert "skipped 2 of 20 source files that cannot be read (10.00%; --max-bad-fraction 0.1 allows 10%)" in (
        captured.out
    )
    assert "18 samples, 2 classes" in captured.out
    assert shards.DatasetIndex.load(dest / "index.json").num_samples == 18 == _samples_in(dest)
    assert [p.name for p in dest.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_too_many_bad_files_fail_and_leave_no_destination(tmp_path: Path, capsys: Any) -> None:
    src, bad = _source_with_bad_files(tmp_path / "src")
    dest = tmp_path / "ds"
    args = ["shard", str(src), str(dest), "--image-size", "8", "--quiet", "--workers", "1", "--no-shuffle"]
    assert gpuctl([*args, "--skip-bad"]) == 1  # default --max-bad-fraction 0.01: 1 of 20 is already too many
    err = capsys.readouterr().err
    assert f"gpuctl shard: skipped {bad[0]}" in err
    assert "1 of 20 source files so far cannot be read (5.00%), more than --max-bad-fraction 0.01 (1%) allows" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # neither DEST nor a staging directory

    assert gpuctl([*args, "--max-bad-fraction", "0.1"]) == 2
    assert "--max-bad-fraction 0.1 needs --skip-bad" in capsys.readouterr().err
    assert gpuctl([*args, "--skip-bad", "--max-bad-fraction", "1.5"]) == 2
    assert "--max-bad-fraction 1.5 is not allowed; allowed: 0 to 1" in capsys.readouterr().err


def test_a_failed_run_keeps_the_previous_dataset_and_no_staging(tmp_path: Path) -> None:
    src, _ = _source_with_bad_files(tmp_path / "src")
    dest = tmp_path / "ds"
    kwargs: dict[str, Any] = {"image_size": 8, "progress": False, "workers": 1, "shuffle": False}
    pack.pack(src, str(dest), skip_bad=True, max_bad_fraction=0.1, target_bytes=1024, **kwargs)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    assert len(before) > 3  # index + several shards
    # Shards are written before the bad file comes (no shuffle: class_0/notes.jpg sorts after class_0/img_*).
    written: list[int] = []
    with pytest.raises(pack.PackError, match=r"cannot read source file .*notes\.jpg: .*pass --skip-bad"):
        pack.pack(src, str(dest), overwrite=True, target_bytes=512, on_progress=written.append, **kwargs)
    assert written[-1] == 9  # nine good images packed into shards before the failure
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    # A new destination: the failure leaves nothing at all.
    with pytest.raises(pack.PackError):
        pack.pack(src, str(tmp_path / "new" / "ds"), target_bytes=512, **kwargs)
    assert list((tmp_path / "new").iterdir()) == []


def test_manifest_with_a_missing_file(tmp_path: Path, capsys: Any) -> None:
    src, _ = _source_with_bad_files(tmp_path / "src")
    files = sorted(src.glob("class_*/img_*.png"))
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,label\n" + "".join(f"{f},{f.parent.name}\n" for f in files) + "gone.png,class_0\n")
    args = ["shard", str(manifest), str(tmp_path / "ds"), "--image-size", "8", "--quiet", "--workers", "1"]
    assert gpuctl(args) == 1
    assert "gone.png does not exist (pass --skip-bad to skip missing files)" in capsys.readouterr().err
    assert gpuctl([*args, "--skip-bad", "--max-bad-fraction", "0.1"]) == 0
    captured = capsys.readouterr()
    assert f"skipped {tmp_path / 'gone.png'}: [Errno 2] No such file or directory" in captured.err
    assert "skipped 1 of 19 source files" in captured.out


@mock_aws
def test_s3_failure_aborts_uploads_and_deletes_what_it_wrote(tmp_path: Path) -> None:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="data")
    client.put_object(Bucket="data", Key="sets/raw/README", Body=b"not ours: stays")
    src = tmp_path / "src" / "blobs"  # raw mode: three 6 MB files, one shard each, two 5 MB parts each
    src.mkdir(parents=True)
    rng = np.random.default_rng(2)
    for i in range(3):
        (src / f"{i}.bin").write_bytes(rng.bytes(6 << 20))
    created: list[str] = []

    def fail_second_part_of_shard_1(params: dict[str, Any], **_: Any) -> None:
        if params["Key"].endswith("shard-000001.tar") and params["PartNumber"] == 2:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "UploadPart")

    client.meta.events.register("before-parameter-build.s3.UploadPart", fail_second_part_of_shard_1)
    client.meta.events.register(
        "before-parameter-build.s3.CreateMultipartUpload", lambda params, **_: created.append(params["Key"])
    )
    with pytest.raises(ClientError, match="injected"):
        pack.pack(
            tmp_path / "src",
            "s3://data/sets/raw",
            mode="raw",
            target_bytes=7 << 20,
            shuffle=False,
            progress=False,
            workers=1,
            s3_client=client,
            max_concurrency=2,
            multipart_chunk_bytes=5 << 20,
        )
    assert "sets/raw/shard-000001.tar" in created  # a multipart upload was open when its part failed
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="data", Prefix="sets/raw/").get("Contents", [])]
    assert keys == ["sets/raw/README"]  # the shards that did go up were deleted, no index.json
    assert client.list_multipart_uploads(Bucket="data").get("Uploads", []) == []


@mock_aws
def test_s3_bad_source_file_leaves_an_empty_prefix(tmp_path: Path) -> None:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="data")
    src, _ = _source_with_bad_files(tmp_path / "src")
    with pytest.raises(pack.PackError, match=r"notes\.jpg"):
        pack.pack(
            src,
            "s3://data/sets/bad",
            image_size=8,
            target_bytes=512,
            shuffle=False,
            progress=False,
            workers=1,
            s3_client=client,
        )
    assert client.list_objects_v2(Bucket="data", Prefix="sets/bad/")["KeyCount"] == 0


# ------------------------------------------------------------------------------------------- JPEG at rest


def _photos(root: Path, count: int = 24, classes: int = 2) -> Path:
    """Photo-like images (smooth gradients, a few flat shapes, mild sensor noise), as JPEG sources compress them."""
    from PIL import ImageDraw

    rng = np.random.default_rng(3)
    for i in range(count):
        directory = root / f"class_{i % classes}"
        directory.mkdir(parents=True, exist_ok=True)
        yy, xx = np.mgrid[0:120, 0:160].astype(np.float32)
        pixels = (
            rng.uniform(0, 255, 3)
            + xx[..., None] * rng.uniform(-0.6, 0.6, 3)
            + yy[..., None] * rng.uniform(-0.6, 0.6, 3)
        )
        pixels += rng.normal(0, 4, pixels.shape)
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(image)
        for _ in range(4):
            x0, y0 = int(rng.integers(0, 120)), int(rng.integers(0, 80))
            draw.ellipse((x0, y0, x0 + 40, y0 + 30), fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
        image.save(directory / f"{i:03d}.png")
    return root


def test_jpeg_encoding_stores_jpegs_and_records_them_in_the_index(image_folder: Path, tmp_path: Path) -> None:
    raw = pack.pack(image_folder, str(tmp_path / "raw"), image_size=24, seed=2, progress=False, workers=1)
    jpeg = pack.pack(image_folder, str(tmp_path / "jpeg"), image_size=24, seed=2, progress=False, workers=1,
                     encoding="jpeg", quality=90)  # fmt: skip
    spec = jpeg.sample["image"]
    assert {k: spec[k] for k in ("ext", "encoding", "quality", "shape")} == {
        "ext": "jpg", "encoding": "jpeg", "quality": 90, "shape": [24, 24, 3]
    }  # fmt: skip
    assert 0 < spec["max_bytes"] < 24 * 24 * 3 and "encoding" not in raw.sample["image"]
    assert jpeg.num_samples == raw.num_samples
    # Same order as the raw shards; each JPEG decodes to the raw pixels up to JPEG's loss.
    raw_pixels, jpeg_pixels = [], []
    for directory, info_list, ext in ((tmp_path / "raw", raw.shards, "npy"), (tmp_path / "jpeg", jpeg.shards, "jpg")):
        for info in info_list:
            data = (directory / info.name).read_bytes()
            for sample in shards.parse_archive(data, info.name).samples:
                offset, size = sample[ext]
                if ext == "npy":
                    raw_pixels.append(shards.npy_array(data, offset, size, info.name).astype(np.int16))
                else:
                    with Image.open(io.BytesIO(data[offset : offset + size])) as image:
                        assert image.format == "JPEG" and image.size == (24, 24)
                        jpeg_pixels.append(np.asarray(image.convert("RGB")).astype(np.int16))
    assert len(raw_pixels) == len(jpeg_pixels)
    error = np.mean([np.abs(a - b).mean() for a, b in zip(raw_pixels, jpeg_pixels, strict=True)])
    assert error < 12  # noisy test images at q90 (photo-like images: far less)


def test_jpeg_shards_take_5x_fewer_bytes_than_raw_on_photo_like_images(tmp_path: Path) -> None:
    photos = _photos(tmp_path / "photos")
    raw = pack.pack(photos, str(tmp_path / "raw"), image_size=96, progress=False, workers=1)
    jpeg = pack.pack(photos, str(tmp_path / "jpeg"), image_size=96, progress=False, workers=1, encoding="jpeg")
    assert raw.total_bytes / jpeg.total_bytes >= 5, (raw.total_bytes, jpeg.total_bytes)


def test_bad_encoding_options_are_named(image_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(pack.PackError, match="encoding='png' is not allowed; allowed: raw, jpeg"):
        pack.pack(image_folder, str(tmp_path / "a"), encoding="png", progress=False)
    with pytest.raises(pack.PackError, match="needs mode='image'"):
        pack.pack(image_folder, str(tmp_path / "b"), mode="raw", encoding="jpeg", progress=False)
    with pytest.raises(pack.PackError, match="JPEG quality 100 is not allowed; allowed: 1 to 95"):
        pack.pack(image_folder, str(tmp_path / "c"), encoding="jpeg", quality=100, progress=False)


def test_gpuctl_shard_format_jpeg(image_folder: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    code = gpuctl(["shard", str(image_folder), str(dest), "--image-size", "16", "--format", "jpeg", "--quality", "80",
                   "--quiet", "--workers", "1"])  # fmt: skip
    assert code == 0
    spec = json.loads((dest / shards.INDEX_NAME).read_text())["sample"]["image"]
    assert spec["encoding"] == "jpeg" and spec["quality"] == 80
