"""The training input path on a CUDA device: pinned batch slots and nvJPEG batch decoding (skipped without CUDA).

``make gpu-check`` runs these on a GPU host; elsewhere the ``gpu`` marker skips them (tests/conftest.py).
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import pytest
import torch

from gpu_train import pack
from gpu_train.data import (
    DevicePipeline,
    EncodedBatch,
    ShardLoader,
    StreamConfig,
    clear_cuda_error,
    discover,
    gpu_jpeg_problem,
)
from gpu_train.sagemaker import Channel

pytestmark = pytest.mark.gpu

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _loader(directory: Path, **overrides: object) -> ShardLoader:
    values: dict[str, object] = {
        "source": discover(Channel("train", path=directory)),
        "batch_size": 8,
        "image_size": 32,
        "num_classes": 3,
        "seed": 0,
        "rank": 0,
        "world": 1,
        "num_workers": 2,
        "shuffle": False,
        "drop_last": False,
    }
    pin = bool(overrides.pop("pin_memory", False))
    values.update(overrides)
    return ShardLoader(StreamConfig(**values), pin_memory=pin)  # type: ignore[arg-type]


def _inputs(pipeline: DevicePipeline, loader: ShardLoader) -> tuple[torch.Tensor, list[int]]:
    xs, labels = [], []
    for x, y, _ in pipeline.batches(loader.epoch(0), train=False):
        xs.append(x.float().cpu())
        labels += y.cpu().tolist()
    return torch.cat(xs), labels


@pytest.fixture(scope="module")
def jpeg_shards(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("jpeg-gpu") / "train"
    pack.pack(image_folder, str(dest), image_size=32, target_bytes=16 * 1024, seed=1, progress=False,
              encoding="jpeg", quality=95)  # fmt: skip
    return dest


def test_raw_shards_through_pinned_slots_match_the_cpu_path(shards: Path) -> None:
    device = torch.device("cuda", 0)
    loader = _loader(shards, pin_memory=True)
    gpu = DevicePipeline(device, mean=MEAN, std=STD, augment="none", channels_last=True)
    cpu = DevicePipeline(torch.device("cpu"), mean=MEAN, std=STD, augment="none", channels_last=False)
    x_gpu, labels_gpu = _inputs(gpu, loader)
    x_cpu, labels_cpu = _inputs(cpu, _loader(shards))
    assert loader.slots is not None and loader.slots.pinned
    assert labels_gpu == labels_cpu
    torch.testing.assert_close(x_gpu, x_cpu, rtol=0, atol=1e-5)
    for epoch in range(1, 3):  # later epochs reuse the slots: same batches again
        again = [label for _, y, _ in gpu.batches(loader.epoch(epoch), train=False) for label in y.cpu().tolist()]
        assert again == labels_cpu


def test_jpeg_shards_decode_on_the_gpu_like_pillow_does(jpeg_shards: Path) -> None:
    pytest.importorskip("torchvision")
    device = torch.device("cuda", 0)
    assert gpu_jpeg_problem(device) is None
    loader = _loader(jpeg_shards, pin_memory=True, jpeg_decode="device")
    first = next(iter(_loader(jpeg_shards, jpeg_decode="device").epoch(0)))[0]
    assert isinstance(first, EncodedBatch)
    gpu = DevicePipeline(device, mean=MEAN, std=STD, augment="none", channels_last=True)
    cpu = DevicePipeline(torch.device("cpu"), mean=MEAN, std=STD, augment="none", channels_last=False)
    x_gpu, labels_gpu = _inputs(gpu, loader)
    x_cpu, labels_cpu = _inputs(cpu, _loader(jpeg_shards, jpeg_decode="cpu"))
    assert labels_gpu == labels_cpu and x_gpu.shape == x_cpu.shape
    # The shards are 4:2:0 JPEGs of noise, where decoders legitimately differ in how they upsample the chroma
    # planes (libjpeg's "fancy" triangle filter vs nvJPEG's): measured on an H100, the RGB levels differed by
    # 2.8 of 255 on average. Luma is stored at full resolution and the chroma terms cancel in it (BT.601:
    # Y = 0.299 R + 0.587 G + 0.114 B of the decoded RGB gives back the stored Y), so in luma the two decoders may
    # differ only by IDCT rounding (and clipping at 0): under one level on average. A swapped channel, a transposed
    # image or another sample's pixels are tens of levels off in luma and in RGB.
    rgb = (x_gpu - x_cpu) * torch.tensor(STD).view(1, 3, 1, 1) * 255
    luma = (rgb * torch.tensor((0.299, 0.587, 0.114)).view(1, 3, 1, 1)).sum(dim=1).abs()
    detail = f"luma mean {float(luma.mean()):.2f} max {float(luma.max()):.1f}, RGB max {float(rgb.abs().max()):.1f}"
    assert float(luma.mean()) < 1 and float(luma.max()) < 24 and float(rgb.abs().max()) < 40, detail


def test_slots_are_unregistered_when_collected_so_the_next_loader_pins_again(shards: Path) -> None:
    """A loader's page-locked slots are unregistered when it goes: the next loader's slots, which the allocator may
    map at the same addresses, page-lock again (a range left registered failed the next ``cudaHostRegister`` with
    ``cudaErrorHostMemoryAlreadyRegistered``, and the copy after it raised that error)."""
    device = torch.device("cuda", 0)
    for _ in range(3):
        loader = _loader(shards, pin_memory=True)
        pipeline = DevicePipeline(device, mean=MEAN, std=STD, augment="none", channels_last=True)
        assert sum(int(x.shape[0]) for x, _, _ in pipeline.batches(loader.epoch(0), train=False)) == 192
        assert loader.slots is not None and loader.slots.pinned
        del loader, pipeline
        gc.collect()


def test_a_failed_page_lock_leaves_pageable_slots_and_no_cuda_error(
    shards: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """When ``cudaHostRegister`` fails (here: the labels are registered already), the slots stay pageable with a
    warning, the ranges registered before the failure are released, and the runtime's last error is cleared, so
    the copies that follow work."""
    device = torch.device("cuda", 0)
    loader = _loader(shards, pin_memory=True)
    slots = loader.slots
    assert slots is not None
    cudart = torch.cuda.cudart()
    labels = slots.labels
    assert int(cudart.cudaHostRegister(labels.data_ptr(), labels.numel() * labels.element_size(), 0)) == 0
    try:
        with caplog.at_level(logging.WARNING, logger="gpu_train"):
            pipeline = DevicePipeline(device, mean=MEAN, std=STD, augment="none", channels_last=True)
            seen = sum(int(x.shape[0]) for x, _, _ in pipeline.batches(loader.epoch(0), train=False))
        assert seen == 192 and not slots.pinned
        assert "cannot page-lock" in caplog.text and "already" in caplog.text.lower()
        assert clear_cuda_error() == 0  # the CUDA runtime torch uses was found, and no error is left
        assert slots.images is not None  # released: registering the images again succeeds
        images = slots.images
        assert int(cudart.cudaHostRegister(images.data_ptr(), images.numel() * images.element_size(), 0)) == 0
        assert int(cudart.cudaHostUnregister(images.data_ptr())) == 0
    finally:
        assert int(cudart.cudaHostUnregister(labels.data_ptr())) == 0


def test_augmented_jpeg_training_batches_stay_finite_over_epochs(jpeg_shards: Path) -> None:
    pytest.importorskip("torchvision")
    device = torch.device("cuda", 0)
    loader = _loader(jpeg_shards, pin_memory=True, jpeg_decode="device", shuffle=True, drop_last=True)
    pipeline = DevicePipeline(device, mean=MEAN, std=STD, depth=3)
    loader.hold = pipeline.hold
    seen = 0
    for epoch in range(3):
        for x, y, _ in pipeline.batches(loader.epoch(epoch)):
            assert x.is_contiguous(memory_format=torch.channels_last) and x.shape[1:] == (3, 32, 32)
            assert bool(torch.isfinite(x).all()) and int(y.max()) < 3
            seen += x.shape[0]
    assert seen > 0
