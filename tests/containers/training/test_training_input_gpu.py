"""The training input path on a CUDA device: pinned batch slots and nvJPEG batch decoding (skipped without CUDA).

``make gpu-check`` runs these on a GPU host; elsewhere the ``gpu`` marker skips them (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_train import pack
from gpu_train.data import DevicePipeline, EncodedBatch, ShardLoader, StreamConfig, discover, gpu_jpeg_problem
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
    # nvJPEG and libjpeg may round the IDCT and colour conversion differently: a few levels of 255 at most.
    levels = (x_gpu - x_cpu).abs() * torch.tensor(STD).view(1, 3, 1, 1) * 255
    assert float(levels.mean()) < 2 and float(levels.max()) < 40


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
