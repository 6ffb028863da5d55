"""Training throughput of the default model with real data vs. synthetic data (the GPU ceiling).

    .venv/bin/python -m benchmarks.training_gpu                       # on a GPU machine: ResNet-50, AMP
    .venv/bin/python -m benchmarks.training_gpu --device cpu --arch resnet_tiny --steps 6 --warmup 2 \\
        --batch-size 32                                                # a CPU smoke run (no report)

Both runs train the same model with the same step (channels_last, AMP, SGD, GPU augmentation and
normalisation). *Synthetic* feeds one uint8 batch that already sits in GPU memory, so it measures the
GPU alone; *real* reads the shards of ``benchmarks.training_data`` (``.bench/training_data/shards-*``,
made by that benchmark) through ``gpu_train.data.ShardLoader`` (workers, pinned memory, side-stream copies),
exactly as the training image does. The target is real >= 95% of synthetic. On CUDA the result goes to the
``training-gpu`` section of docs/benchmarks.md and docs/img/training_gpu.png (``--no-report`` to skip).

1 to 2 minutes on one GPU (240 training steps of batch 256; ``--quick``: 50 steps, no report), plus about
a minute on 16 vCPUs the first time, to generate and pack the shards. ``--device cuda`` (``make bench-gpu``) stops at
once with a message when torch sees no CUDA device.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from benchmarks._report import write_section
from benchmarks._shards import single_process_loader
from gpu_train.data import DevicePipeline, ShardLoader, auto_workers, discover
from gpu_train.models import build_model, default_stem
from gpu_train.sagemaker import Channel
from gpu_train.train_loop import resolve_amp

ROOT = Path(__file__).resolve().parent.parent

FIGURE = ROOT / "docs" / "img" / "training_gpu.png"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def cuda_problem() -> str | None:
    """Why this process cannot use an NVIDIA GPU, or None when torch sees one.

    ``torch.cuda.is_available()`` is False on a CPU-only torch build (``torch.version.cuda`` is None) and when
    no driver or device is visible (https://pytorch.org/docs/stable/generated/torch.cuda.is_available.html).
    """
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return (
            f"torch {torch.__version__} is a CPU-only build: install a CUDA build of torch "
            "(https://pytorch.org/get-started/locally/) on a machine with an NVIDIA GPU"
        )
    return (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no NVIDIA GPU: run on a GPU instance "
        "(e.g. g5, p4d, p5) with the NVIDIA driver installed (`nvidia-smi` lists the GPUs)"
    )


def default_data() -> Path | None:
    candidates = sorted((ROOT / ".bench" / "training_data").glob("shards-*"), key=lambda p: p.stat().st_mtime)
    return candidates[-1] if candidates else None


class Step:
    """One training step of the default model, as the training loop runs it."""

    def __init__(self, args: argparse.Namespace, device: torch.device, num_classes: int, image_size: int) -> None:
        torch.manual_seed(0)
        stem = default_stem(image_size)
        model = build_model(args.arch, num_classes, width=args.width, stem=stem).to(device)
        if device.type == "cuda":  # as the training loop: NHWC on GPUs only
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model = model
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
        self.amp = resolve_amp(args.amp, device)
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp == torch.float16)
        self.criterion = nn.CrossEntropyLoss()
        self.device = device
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = True

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            loss = self.criterion(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_synthetic(
    step: Step, pipeline: DevicePipeline, args: argparse.Namespace, image_size: int, classes: int
) -> float:
    device = step.device
    images = torch.randint(0, 256, (args.batch_size, image_size, image_size, 3), dtype=torch.uint8, device=device)
    labels = torch.randint(0, classes, (args.batch_size,), device=device)
    for _ in range(args.warmup):
        step(pipeline.transform(images, train=True), labels)
    _sync(device)
    started = time.perf_counter()
    for _ in range(args.steps):
        step(pipeline.transform(images, train=True), labels)
    _sync(device)
    return args.steps * args.batch_size / (time.perf_counter() - started)


def run_real(
    step: Step, pipeline: DevicePipeline, loader: ShardLoader, args: argparse.Namespace
) -> tuple[float, float]:
    """Images/s with real data, and the share of wall time spent waiting for input."""
    device = step.device

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = 0
        while True:
            for x, y, _ in pipeline.batches(loader.epoch(epoch), train=True):
                yield x, y
            epoch += 1

    stream = batches()
    for _ in range(args.warmup):
        step(*next(stream))
    _sync(device)
    waited = 0.0
    started = time.perf_counter()
    for _ in range(args.steps):
        fetch = time.perf_counter()
        x, y = next(stream)
        waited += time.perf_counter() - fetch
        step(x, y)
    _sync(device)
    elapsed = time.perf_counter() - started
    return args.steps * args.batch_size / elapsed, waited / elapsed


def plot(device_name: str, synthetic: float, real: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 3.6))
    axis.bar(["synthetic\n(GPU ceiling)", "real shards"], [synthetic, real], color=["#444444", "#2a7ab9"])
    axis.set_ylabel("images / s")
    axis.axhline(0.95 * synthetic, color="#c0392b", linestyle="--", linewidth=1)
    axis.text(0.55, 0.95 * synthetic * 1.01, "95% target", color="#c0392b", fontsize=8)
    axis.set_title(f"ResNet training throughput, {device_name}", fontsize=10)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto")
    parser.add_argument("--workers", type=int, default=-1, help="loader workers (-1: vCPUs - 1, at most 16)")
    parser.add_argument("--data", type=Path, default=None, help="shard directory (default: the training_data cache)")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20 steps after 5 warm-up steps; implies --no-report")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.no_report = min(args.steps, 20), min(args.warmup, 5), True

    if args.device == "cuda" and (problem := cuda_problem()) is not None:
        print(f"training_gpu needs an NVIDIA GPU: {problem}", file=sys.stderr)
        return 2
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    data = args.data or default_data()
    if data is None and args.data is None:
        from benchmarks.training_data import DEFAULT_SAMPLES, ensure_data

        print("no shards yet: making them with benchmarks.training_data (once; cached in .bench/)", flush=True)
        data = ensure_data(DEFAULT_SAMPLES, len(os.sched_getaffinity(0)))[1]
    if data is None or not data.is_dir():
        print(f"no shards at {data}: pass --data DIR (a `gpuctl shard` output directory)", file=sys.stderr)
        return 2
    print(
        f"training_gpu: {args.arch}, batch {args.batch_size}, {args.steps} steps after {args.warmup} warm-up steps, "
        f"synthetic then real data from {data}",
        flush=True,
    )
    source = discover(Channel("train", path=data))
    index = source.index
    image_size = index.image_size if index and index.image_size else 224
    classes = index.num_classes if index and index.num_classes else 10
    workers = args.workers if args.workers >= 0 else auto_workers(len(os.sched_getaffinity(0)), 1)
    loader = single_process_loader(
        source,
        batch_size=args.batch_size,
        image_size=image_size,
        num_classes=classes,
        num_workers=workers,
        pin_memory=use_cuda,
    )
    pipeline = DevicePipeline(device, mean=MEAN, std=STD, augment="flip_crop", channels_last=use_cuda)
    step = Step(args, device, classes, image_size)
    device_name = torch.cuda.get_device_name(device) if use_cuda else "CPU"

    synthetic = run_synthetic(step, pipeline, args, image_size, classes)
    real, wait = run_real(step, pipeline, loader, args)
    ratio = real / synthetic
    print(f"{device_name}: synthetic {synthetic:,.0f} img/s, real {real:,.0f} img/s ({100 * ratio:.1f}%), "
          f"input wait {100 * wait:.1f}% of wall time, {workers} loader workers")  # fmt: skip
    if use_cuda and not args.no_report:
        text = "\n".join(
            [
                f"Command: `.venv/bin/python -m benchmarks.training_gpu` on {device_name} "
                f"({os.cpu_count()} vCPUs), torch {torch.__version__}, {args.arch}, batch {args.batch_size}, "
                f"AMP {step.amp}, channels_last, {args.steps} steps after {args.warmup} warm-up steps, "
                f"{workers} loader workers, data: {data.name} ({image_size}x{image_size}).",
                "",
                "| input | images/s | of synthetic |",
                "| --- | ---: | ---: |",
                f"| synthetic (batch already in GPU memory) | {synthetic:,.0f} | 100% |",
                f"| real shards (ShardLoader, pinned memory, side-stream copies) | {real:,.0f} | {100 * ratio:.1f}% |",
                "",
                f"Target: real >= 95% of synthetic: {'met' if ratio >= 0.95 else 'NOT met'}; the trainer waited for "
                f"input {100 * wait:.1f}% of the time.",
                "",
                "![training GPU throughput](img/training_gpu.png)",
            ]
        )
        plot(device_name, synthetic, real)
        write_section("training-gpu", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
