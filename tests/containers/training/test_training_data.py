"""The shard data loader: splitting across processes and workers, exact resumption, device transform."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpu_train.data import DevicePipeline, EncodedBatch, LoaderState, ShardLoader, StreamConfig, discover
from gpu_train.errors import ChannelError, DataError
from gpu_train.hyperparameters import auto_workers
from gpu_train.sagemaker import Channel


def _config(source_dir: Path, **overrides: object) -> StreamConfig:
    values: dict[str, object] = {
        "source": discover(Channel("train", path=source_dir)),
        "batch_size": 8,
        "image_size": 32,
        "num_classes": 3,
        "seed": 0,
        "rank": 0,
        "world": 1,
        "num_workers": 0,
    }
    values.update(overrides)
    return StreamConfig(**values)  # type: ignore[arg-type]


def _fingerprints(images: torch.Tensor | EncodedBatch) -> list[int]:
    """A per-sample id: the sum of its pixels (distinct for the random test images)."""
    assert isinstance(images, torch.Tensor)
    return [int(v) for v in images.reshape(images.shape[0], -1).sum(1)]


def _epoch(loader: ShardLoader, epoch: int, resume: LoaderState | None = None) -> list[list[int]]:
    return [_fingerprints(images) for images, _, _ in loader.epoch(epoch, resume)]


def _flat(batches: list[list[int]]) -> list[int]:
    return [v for batch in batches for v in batch]


def test_processes_and_workers_read_disjoint_shards_covering_the_dataset(shards: Path) -> None:
    everything = sorted(v for batch in _epoch(ShardLoader(_config(shards, drop_last=False)), 0) for v in batch)
    assert len(everything) == 192
    seen: list[int] = []
    for rank in range(2):
        for batch in _epoch(ShardLoader(_config(shards, rank=rank, world=2, num_workers=2, drop_last=False)), 0):
            seen.extend(batch)
    assert sorted(seen) == everything  # each sample exactly once over 2 processes x 2 workers


def test_each_epoch_has_its_own_order(shards: Path) -> None:
    loader = ShardLoader(_config(shards))
    first, second = _epoch(loader, 0), _epoch(loader, 1)
    assert first == _epoch(ShardLoader(_config(shards)), 0)  # same seed, same order
    assert first != second and len(first) == len(second) == 24
    assert sorted(_flat(first)) == sorted(_flat(second))


def test_fewer_shards_than_processes_split_samples_instead(shards: Path, tmp_path: Path) -> None:
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(shards / "shard-000000.tar", one)  # no index: 12 samples, 1 shard, 2 processes
    per_rank = [_flat(_epoch(ShardLoader(_config(one, rank=r, world=2, batch_size=2)), 0)) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1]) == 6 and not set(per_rank[0]) & set(per_rank[1])


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize(("workers", "stop_after"), [(0, 5), (2, 5), (2, 6), (3, 7)])
def test_resuming_from_a_position_continues_the_exact_batch_sequence(
    shards: Path, workers: int, stop_after: int
) -> None:
    config = _config(shards, num_workers=workers)
    full = _epoch(ShardLoader(config), 3)
    interrupted = ShardLoader(config)
    taken: list[list[int]] = []
    saved = None
    for images, _, position in interrupted.epoch(3):
        taken.append(_fingerprints(images))
        if len(taken) == stop_after:
            saved = LoaderState.from_dict(position.as_dict())  # what a checkpoint stores
            break
    assert saved is not None
    rest = _epoch(ShardLoader(config), 3, saved)  # a new process
    assert taken + rest == full


def test_position_from_another_worker_count_restarts_the_epoch(shards: Path) -> None:
    saved = LoaderState(epoch=0, consumed=[3, 2], next_worker=1, num_workers=2, world=1)
    loader = ShardLoader(_config(shards, num_workers=0))
    assert not loader.can_resume(saved)
    assert _epoch(loader, 0, saved) == _epoch(ShardLoader(_config(shards)), 0)


def test_missing_listed_shard_and_empty_channel_are_errors(shards: Path, tmp_path: Path) -> None:
    copy = tmp_path / "train"
    shutil.copytree(shards, copy)
    (copy / "shard-000004.tar").unlink()
    with pytest.raises(DataError, match=r"1 shards listed in .*index.json are missing \(first: shard-000004.tar\)"):
        discover(Channel("train", path=copy))
    # With ShardedByS3Key each host holds only part of the dataset: that is expected.
    assert len(discover(Channel("train", distribution="ShardedByS3Key", path=copy)).shards) == 15
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChannelError, match=r"holds no shards \(\*.tar\); pack the data with `gpuctl shard"):
        discover(Channel("train", path=tmp_path / "empty"))


def test_wrong_image_size_and_label_range_are_named(shards: Path) -> None:
    with pytest.raises(
        DataError, match=r"shard-0000\d\d.tar: image of shape \(32, 32, 3\) uint8, expected \(16, 16, 3\)"
    ):
        next(iter(ShardLoader(_config(shards, image_size=16)).epoch(0)))
    with pytest.raises(DataError, match=r"label [12] is outside 0..0"):
        _epoch(ShardLoader(_config(shards, num_classes=1)), 0)


def test_truncated_shard_is_named_before_use(shards: Path, tmp_path: Path) -> None:
    copy = tmp_path / "train"
    shutil.copytree(shards, copy)
    data = (copy / "shard-000002.tar").read_bytes()
    (copy / "shard-000002.tar").write_bytes(data[:-1024])
    with pytest.raises(DataError, match=r"shard-000002.tar: size \d+ bytes, index says \d+ \(truncated or replaced"):
        _epoch(ShardLoader(_config(copy)), 0)


def test_auto_workers_follow_vcpus_per_gpu() -> None:
    assert auto_workers(96, 8) == 11  # ml.p4d.24xlarge
    assert auto_workers(4, 1) == 3  # ml.g5.xlarge
    assert auto_workers(2, 2) == 1 and auto_workers(192, 1) == 16


def test_device_pipeline_normalises_augments_and_keeps_channels_last() -> None:
    pixels = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8))
    plain = DevicePipeline(torch.device("cpu"), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), augment="none")
    x = plain.transform(pixels, train=True)
    assert x.shape == (4, 3, 32, 32) and x.is_contiguous(memory_format=torch.channels_last)
    expected = (pixels.permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.25
    assert torch.allclose(x, expected, atol=1e-5)
    assert torch.equal(plain.transform(pixels, train=False), x)

    first = DevicePipeline(torch.device("cpu"), mean=(0.5,) * 3, std=(0.25,) * 3, augment="flip_crop", seed=7)
    second = DevicePipeline(torch.device("cpu"), mean=(0.5,) * 3, std=(0.25,) * 3, augment="flip_crop", seed=7)
    a = first.transform(pixels, train=True)
    state = first.generator.get_state()
    b = first.transform(pixels, train=True)
    assert not torch.allclose(a, x) and not torch.allclose(a, b)  # random, and different each batch
    assert torch.equal(second.transform(pixels, train=True), a)  # seeded
    second.generator.set_state(state)
    assert torch.equal(second.transform(pixels, train=True), b)  # the state is all a resume needs
    assert torch.equal(first.transform(pixels, train=False), x)  # evaluation is never augmented


# ------------------------------------------------------------------------------------------- batch slots


def test_a_batch_stays_intact_while_the_consumer_holds_it(shards: Path) -> None:
    """Workers reuse their slots; a batch is given back only once `hold` more batches were asked for."""
    loader = ShardLoader(_config(shards, num_workers=2, batch_size=4), prefetch_factor=2, hold=3)
    assert loader.slots is not None and loader.slots.ring == 2 + 3 + 1
    held: list[tuple[torch.Tensor | EncodedBatch, list[int]]] = []
    for epoch in range(2):
        for images, _, _ in loader.epoch(epoch):
            held.append((images, _fingerprints(images)))
            held = held[-3:]
            assert all(_fingerprints(kept) == seen for kept, seen in held)  # not overwritten while held
    assert _epoch(loader, 1) == _epoch(ShardLoader(_config(shards, num_workers=2, batch_size=4)), 1)


# ------------------------------------------------------------------------------------------- JPEG shards


@pytest.fixture(scope="module")
def jpeg_shards(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `shards` dataset (same images, seed and shard count) packed as JPEG q95."""
    from gpu_train import pack

    dest = tmp_path_factory.mktemp("jpeg") / "train"
    pack.pack(image_folder, str(dest), image_size=32, target_bytes=64 * 1024 // 6, seed=1, progress=False,
              encoding="jpeg", quality=95)  # fmt: skip
    return dest


def _labels_and_pixels(loader: ShardLoader) -> tuple[list[int], np.ndarray]:
    labels, pixels = [], []
    for images, batch_labels, _ in loader.epoch(0):
        assert isinstance(images, torch.Tensor)
        labels += batch_labels.tolist()
        pixels.append(images.numpy().astype(np.int16))
    return labels, np.concatenate(pixels)


def test_jpeg_shards_decode_in_the_workers_as_the_raw_ones_read(shards: Path, jpeg_shards: Path) -> None:
    from gpu_train.data import image_encoding, jpeg_decode_for

    source = discover(Channel("train", path=jpeg_shards))
    assert image_encoding(source.index) == "jpeg" and jpeg_decode_for(source, torch.device("cpu")) == "cpu"
    # In pack order (no shuffle, one stream): the same images, up to JPEG's loss.
    raw_labels, raw_pixels = _labels_and_pixels(ShardLoader(_config(shards, shuffle=False, drop_last=False)))
    labels, pixels = _labels_and_pixels(ShardLoader(_config(jpeg_shards, shuffle=False, drop_last=False)))
    assert labels == raw_labels
    assert np.abs(pixels - raw_pixels).mean() < 8
    # Shuffled, in worker processes: every sample once.
    labels, pixels = _labels_and_pixels(ShardLoader(_config(jpeg_shards, num_workers=2, drop_last=False)))
    assert sorted(labels) == sorted(raw_labels) and len(pixels) == len(raw_pixels)


def test_device_decoding_hands_over_the_jpeg_bytes_of_each_batch(jpeg_shards: Path) -> None:
    """jpeg_decode="device": workers put each batch's JPEG bytes in its slot (DevicePipeline decodes them)."""
    from PIL import Image

    expected, _ = _labels_and_pixels(ShardLoader(_config(jpeg_shards, num_workers=2)))
    loader = ShardLoader(_config(jpeg_shards, num_workers=2, jpeg_decode="device"))
    index = discover(Channel("t", path=jpeg_shards)).index
    assert index is not None and loader.config.encoded_bytes == index.sample["image"]["max_bytes"]
    labels = []
    for images, batch_labels, _ in loader.epoch(0):
        assert isinstance(images, EncodedBatch) and len(images) == 8
        for part in images.parts():
            with Image.open(io.BytesIO(part.numpy().tobytes())) as image:
                assert image.format == "JPEG" and image.size == (32, 32)
        labels += batch_labels.tolist()
    assert labels == expected


def test_missing_decoders_are_named(jpeg_shards: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_train.data import gpu_jpeg_problem, image_encoding
    from gpu_train.shards import DatasetIndex

    assert "not a CUDA device" in (gpu_jpeg_problem(torch.device("cpu")) or "")
    pipeline = DevicePipeline(torch.device("cpu"), mean=(0.5,) * 3, std=(0.5,) * 3)
    batch = EncodedBatch(torch.zeros(16, dtype=torch.uint8), torch.tensor([16]))
    with pytest.raises(DataError, match="decoded on the device only on CUDA"):
        list(pipeline.batches(iter([(batch, torch.tensor([0]), None)])))
    monkeypatch.setitem(sys.modules, "torchvision", None)  # a training image without torchvision
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    pipeline.device = torch.device("cuda")  # what a CUDA trainer would do with it (no CUDA call before the import)
    with pytest.raises(DataError, match="torchvision \\(nvJPEG\\) is not installed"):
        pipeline._decode(batch)
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(DataError, match=r"shard .*shard-\d+.tar holds JPEG images .* needs Pillow"):
        next(iter(ShardLoader(_config(jpeg_shards)).epoch(0)))
    index = DatasetIndex(shards=[], sample={"image": {"encoding": "webp"}})
    with pytest.raises(DataError, match="image encoding 'webp' is not supported by this reader; supported: raw, jpeg"):
        image_encoding(index)


def test_device_pipeline_prefetches_and_profiles_on_the_cpu(shards: Path) -> None:
    from gpu_train.data import PipelineTimes

    loader = ShardLoader(_config(shards, num_workers=2))
    pipeline = DevicePipeline(torch.device("cpu"), mean=(0.5,) * 3, std=(0.5,) * 3, augment="none",
                              channels_last=False, profile=True)  # fmt: skip
    same = ShardLoader(_config(shards, num_workers=2))
    direct = [
        pipeline.transform(images, train=False) for images, _, _ in same.epoch(0) if isinstance(images, torch.Tensor)
    ]
    got = [x for x, _, _ in pipeline.batches(loader.epoch(0), train=False)]
    assert len(got) == len(direct) and all(torch.equal(a, b) for a, b in zip(got, direct, strict=True))
    assert isinstance(pipeline.times, PipelineTimes) and pipeline.times.batches == len(got)
    with pytest.raises(ValueError, match="prefetch depth -1 is not allowed"):
        DevicePipeline(torch.device("cpu"), mean=(0.5,) * 3, std=(0.5,) * 3, depth=-1)


class _FakeCudart:
    """``torch.cuda.cudart()`` as far as :meth:`BatchSlots.pin` uses it; ``fail_at``: the registration that fails."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at, self.registered, self.calls = fail_at, set[int](), 0

    def cudaHostRegister(self, pointer: int, size: int, flags: int) -> int:
        self.calls += 1
        if self.calls == self.fail_at:
            return 712  # cudaErrorHostMemoryAlreadyRegistered
        self.registered.add(pointer)
        return 0

    def cudaHostUnregister(self, pointer: int) -> int:
        self.registered.remove(pointer)
        return 0

    def cudaGetErrorString(self, error: int) -> str:
        return "part or all of the requested memory range is already mapped"


@pytest.mark.parametrize("fail_at", [None, 2])
def test_pinned_slots_are_unregistered_on_collection_or_failure(
    shards: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fail_at: int | None
) -> None:
    """Every range page-locked is unregistered again: when the slots are collected (before their memory is
    unmapped, or the next registration at that address fails), or at once when a later registration fails; a
    failure is tried once, not every epoch."""
    import gc

    from gpu_train import data

    fake = _FakeCudart(fail_at)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "cudart", lambda: fake)
    monkeypatch.setattr(data, "clear_cuda_error", lambda: 0)
    slots = data.BatchSlots(_config(shards, num_workers=2, ring_size=3))
    slots.pin()
    slots.pin()
    if fail_at is None:
        assert slots.pinned and len(fake.registered) == 2 and fake.calls == 2  # images and labels, once
        del slots
        gc.collect()
    else:
        assert not slots.pinned and slots.pin_failed and fake.calls == 2
        assert "cannot page-lock" in caplog.text and "already mapped" in caplog.text
    assert fake.registered == set()


def test_the_cuda_error_reset_needs_a_loaded_cuda_runtime() -> None:
    """On a host whose torch loaded no ``libcudart`` (a CPU build) there is no error to reset: -1 says so."""
    from gpu_train.data import clear_cuda_error

    if torch.cuda.is_available():
        pytest.skip("this host's torch loaded a CUDA runtime (the GPU tests reset a real error)")
    assert clear_cuda_error() == -1
