"""Training throughput of the default model with real data vs. synthetic data (the GPU ceiling).

    .venv/bin/python -m benchmarks.training_gpu                       # on a GPU machine: ResNet-50, AMP
    python3 -m benchmarks.training_gpu --profile                      # a GPU host with only torch, torchvision,
                                                                      # numpy, Pillow, xxhash (no project venv)
    .venv/bin/python -m benchmarks.training_gpu --device cpu --arch resnet_tiny --steps 6 --warmup 2 \\
        --batch-size 32 --no-report                                    # a CPU smoke run

Every variant trains the same model with the same step (channels_last, AMP, SGD, GPU augmentation and
normalisation), one after the other in one run:

* *synthetic*: one uint8 batch that already sits in GPU memory: the GPU alone (the ceiling);
* *raw shards*: ``uint8`` shards (``gpuctl shard``) through ``gpu_train.data.ShardLoader`` (workers fill pinned
  batch slots) and ``DevicePipeline`` (side-stream copies ``--prefetch-depth`` batches ahead), exactly as the
  training image reads them;
* *JPEG shards*: the same images packed with ``gpuctl shard --format jpeg`` (quality 90), decoded on the GPU in
  batches with nvJPEG (``torchvision.io.decode_jpeg``); with no torchvision or no CUDA, by the loader workers.

Targets: raw >= 98% of synthetic, JPEG >= 95%. The report also gives the bytes per sample of each format at rest
and the input bandwidth 8 GPUs (a p5.48xlarge) need at the measured rate. ``--profile`` splits the training
process's time per batch: waiting for the loader, giving slots back, queueing copies/decodes, queueing the step,
and (CUDA) the GPU's own step time, so a run shows where input time goes. On CUDA the result goes to the
``training-gpu`` section of docs/benchmarks.md and docs/img/training_gpu.png (``--no-report`` to skip).

Data (made once, cached in ``.bench/``): ``--samples`` (default 20,000; a modest set) synthetic JPEG photos of
``benchmarks.training_data``, packed at 224x224 into raw and JPEG shards small enough that every loader worker
reads several. About 1.5 minutes on one H100 with 16 vCPUs the first time (generating and packing the images is
about 45 s of it), about a minute afterwards. ``--device cuda`` (``make bench-gpu``) stops at once with a message
when torch sees no CUDA device.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from benchmarks._report import write_section
from benchmarks._shards import single_process_loader
from gpu_train.data import (
    PREFETCH_DEPTH,
    DataSource,
    DevicePipeline,
    PipelineTimes,
    ShardLoader,
    auto_workers,
    discover,
    gpu_jpeg_problem,
)
from gpu_train.models import build_model, default_stem
from gpu_train.sagemaker import Channel
from gpu_train.train_loop import resolve_amp

ROOT = Path(__file__).resolve().parent.parent

CACHE = ROOT / ".bench" / "training_gpu"
DEFAULT_SAMPLES, CPU_SAMPLES = 20_000, 1_000
IMAGE_SIZE, CLASSES, JPEG_QUALITY = 224, 10, 90
P5_GPUS = 8  # p5.48xlarge: 8 H100 (https://aws.amazon.com/ec2/instance-types/p5/)

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


def ensure_shards(samples: int, workers: int, loader_workers: int) -> tuple[Path, Path]:
    """Raw and JPEG shards of the same ``samples`` images (made once), each split into about 4 shards per loader
    worker so that every worker reads a share (pack() takes any target size; gpuctl shard's minimum is 16 MB)."""
    from benchmarks.training_data import ensure_jpegs
    from gpu_train import pack

    jpegs = ensure_jpegs(samples, workers)
    shards = max(8, 4 * max(1, loader_workers))
    out = []
    for encoding, per_sample in (("raw", IMAGE_SIZE * IMAGE_SIZE * 3 + 1024), ("jpeg", 24 * 1024)):
        dest = CACHE / f"{encoding}-{samples}-{shards}"
        if not (dest / "index.json").exists():
            print(f"packing {samples:,} images into {dest} ({encoding}) ...", flush=True)
            started = time.perf_counter()
            pack.pack(jpegs, str(dest), image_size=IMAGE_SIZE, seed=0, workers=workers, progress=False,
                      overwrite=True, target_bytes=max(1 << 20, samples * per_sample // shards),
                      encoding=encoding, quality=JPEG_QUALITY)  # fmt: skip
            print(f"  {time.perf_counter() - started:.0f} s", flush=True)
        out.append(dest)
    return out[0], out[1]


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


@dataclass
class Result:
    """One variant: images/s, and where the training process spent its time (per batch, with --profile)."""

    name: str
    rate: float
    wait_share: float = 0.0  # of wall time, blocked in the pipeline (loader, slot release, copy/decode queueing)
    bytes_per_sample: float = 0.0  # at rest (shard bytes / samples)
    times: PipelineTimes | None = None
    step_s: float = 0.0  # summed: queueing the step (host)
    gpu_step_s: float = 0.0  # summed: the step on the GPU (CUDA events)
    wall_s: float = 0.0
    steps: int = 0
    decode: str = ""


def run_synthetic(
    step: Step, pipeline: DevicePipeline, args: argparse.Namespace, image_size: int, classes: int
) -> Result:
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
    elapsed = time.perf_counter() - started
    return Result("synthetic", args.steps * args.batch_size / elapsed, wall_s=elapsed, steps=args.steps)


def run_real(name: str, step: Step, pipeline: DevicePipeline, loader: ShardLoader, args: argparse.Namespace) -> Result:
    """Images/s with real data through the trainer's input path, and where the training process spent its time.

    The timed loop is the training loop's: take the next batch from ``DevicePipeline.batches``, queue the step.
    ``--profile`` adds two CUDA events around each step (no synchronisation until the end).
    """
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
    pipeline.times = PipelineTimes()
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    waited = stepped = 0.0
    clock = time.perf_counter
    started = clock()
    for _ in range(args.steps):
        fetch = clock()
        x, y = next(stream)
        issued = clock()
        if args.profile and device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            step(x, y)
            end.record()
            events.append((begin, end))
        else:
            step(x, y)
        waited += issued - fetch
        stepped += clock() - issued
    _sync(device)
    elapsed = clock() - started
    gpu = sum(b.elapsed_time(e) for b, e in events) / 1000.0
    source = loader.config.source
    per_sample = source.index.total_bytes / max(1, source.index.num_samples) if source.index else 0.0
    return Result(name, args.steps * args.batch_size / elapsed, waited / elapsed, per_sample, pipeline.times,
                  stepped, gpu, elapsed, args.steps, loader.config.jpeg_decode)  # fmt: skip


def profile_lines(results: list[Result]) -> list[str]:
    """Per-batch time split of the training process (milliseconds), as a Markdown table."""
    lines = [
        "| input | wall / step | loader wait | slot release | copy/decode + transform queued | step queued "
        "| GPU step (events) | GPU idle |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if r.times is None or not r.steps:
            continue
        t, n = r.times, r.steps
        idle = f"{100 * max(0.0, 1 - r.gpu_step_s / r.wall_s):.1f}%" if r.gpu_step_s else "-"
        gpu = f"{1000 * r.gpu_step_s / n:.2f}" if r.gpu_step_s else "-"
        lines.append(
            f"| {r.name} | {1000 * r.wall_s / n:.2f} | {1000 * t.wait / n:.2f} | {1000 * t.release / n:.2f} | "
            f"{1000 * t.issue / n:.2f} | {1000 * r.step_s / n:.2f} | {gpu} | {idle} |"
        )
    return lines


def bandwidth(rate: float, per_sample: float, gpus: int = P5_GPUS) -> float:
    """Input bytes/s that ``gpus`` GPUs training at ``rate`` images/s each need: gpus x rate x bytes per sample."""
    return gpus * rate * per_sample


def plot(device_name: str, results: list[Result]) -> bool:
    """The bar chart (False: matplotlib is not installed, e.g. on a bare GPU host)."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    synthetic = results[0].rate
    fig, axis = plt.subplots(figsize=(7, 3.6))
    labels = ["synthetic\n(GPU ceiling)", *(r.name.replace(" (", "\n(") for r in results[1:])]
    colors = ["#444444", "#2a7ab9", "#5aa469", "#b0b0b0"][: len(results)]
    axis.bar(labels, [r.rate for r in results], color=colors)
    axis.set_ylabel("images / s")
    for share, text in ((0.98, "98% (raw target)"), (0.95, "95% (JPEG target)")):
        axis.axhline(share * synthetic, color="#c0392b", linestyle="--", linewidth=1)
        axis.text(len(results) - 0.5, share * synthetic, text, color="#c0392b", fontsize=7, ha="right", va="bottom")
    axis.set_title(f"ResNet training throughput, {device_name}", fontsize=10)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)
    return True


def report(args: argparse.Namespace, device_name: str, step: Step, workers: int, results: list[Result],
           figure: bool) -> str:  # fmt: skip
    synthetic = results[0].rate
    lines = [
        "## Training throughput on the GPU: synthetic vs real shards, raw and JPEG",
        "",
        f"Command: `python3 -m benchmarks.training_gpu{' --profile' if args.profile else ''}` on {device_name} "
        f"({os.cpu_count()} vCPUs), torch {torch.__version__}, {args.arch}, batch {args.batch_size}, AMP {step.amp}, "
        f"channels_last, {args.steps} steps after {args.warmup} warm-up steps per input, {workers} loader workers, "
        f"prefetch depth {args.prefetch_depth}; data: {args.samples:,} synthetic photos "
        f"(benchmarks.training_data) packed at {IMAGE_SIZE}x{IMAGE_SIZE}, as raw uint8 and as JPEG q{JPEG_QUALITY}.",
        "",
        "| input | images/s | of synthetic | target | bytes/sample at rest | input for 8 GPUs at this rate |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    targets = {"raw": 0.98, "jpeg": 0.95}
    for r in results:
        kind = "raw" if r.name.startswith("raw") else "jpeg" if r.name.startswith("JPEG") else ""
        target = targets.get(kind)
        verdict = (
            "-" if target is None else f">= {100 * target:.0f}%: {'met' if r.rate >= target * synthetic else 'NOT met'}"
        )
        need = bandwidth(r.rate, r.bytes_per_sample)
        lines.append(
            f"| {r.name} | {r.rate:,.0f} | {100 * r.rate / synthetic:.1f}% | {verdict} | "
            f"{r.bytes_per_sample / 1024:,.1f} KiB | {need / 1e9:.2f} GB/s ({8 * need / 1e9:.1f} Gbit/s) |"
            if r.bytes_per_sample
            else f"| {r.name} | {r.rate:,.0f} | 100% | - | - (already in GPU memory) | - |"
        )
    raw = next((r for r in results if r.name.startswith("raw")), None)
    jpeg = next((r for r in results if r.name.startswith("JPEG")), None)
    lines += [
        "",
        f"Input bandwidth = {P5_GPUS} GPUs x images/s per GPU x bytes per sample at rest (shard bytes / samples, tar "
        "headers included): what the file system or S3 must deliver to a p5.48xlarge training at this rate.",
    ]
    if raw and jpeg and jpeg.bytes_per_sample:
        lines.append(
            f"JPEG shards hold {raw.bytes_per_sample / jpeg.bytes_per_sample:.1f}x fewer bytes per sample than raw "
            f"({jpeg.decode} decoding)."
        )
    if args.profile:
        lines += [
            "",
            "Where the training process spent each step (milliseconds per batch; the step is queued, the GPU runs "
            "it asynchronously):",
            "",
            *profile_lines(results[1:]),
        ]
    if figure:
        lines += ["", "![training GPU throughput](img/training_gpu.png)"]
    return "\n".join(lines)


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
    parser.add_argument(
        "--samples", type=int, default=0, help=f"images (default {DEFAULT_SAMPLES:,}; {CPU_SAMPLES:,} on the CPU)"
    )
    parser.add_argument("--prefetch-depth", type=int, default=PREFETCH_DEPTH, help="batches copied ahead of the step")
    parser.add_argument("--inputs", default="raw,jpeg", help="real inputs to time: raw, jpeg or both (default)")
    parser.add_argument("--profile", action="store_true", help="split the training process's time per batch")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20 steps after 5 warm-up steps; implies --no-report")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.no_report = min(args.steps, 20), min(args.warmup, 5), True
    inputs = [i.strip() for i in args.inputs.split(",") if i.strip()]
    if not inputs or any(i not in ("raw", "jpeg") for i in inputs):
        print(f"--inputs {args.inputs!r} is not allowed; allowed: raw, jpeg or raw,jpeg", file=sys.stderr)
        return 2

    if args.device == "cuda" and (problem := cuda_problem()) is not None:
        print(f"training_gpu needs an NVIDIA GPU: {problem}", file=sys.stderr)
        return 2
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    cpus = len(os.sched_getaffinity(0))
    workers = args.workers if args.workers >= 0 else auto_workers(cpus, 1)
    args.samples = args.samples or (DEFAULT_SAMPLES if use_cuda else CPU_SAMPLES)
    raw_dir, jpeg_dir = ensure_shards(args.samples, cpus, workers)
    print(
        f"training_gpu: {args.arch}, batch {args.batch_size}, {args.steps} steps after {args.warmup} warm-up steps, "
        f"synthetic then {' then '.join(inputs)} shards of {args.samples:,} images, {workers} loader workers",
        flush=True,
    )
    pipeline = DevicePipeline(device, mean=MEAN, std=STD, augment="flip_crop", channels_last=use_cuda,
                              depth=args.prefetch_depth, profile=args.profile)  # fmt: skip
    step = Step(args, device, CLASSES, IMAGE_SIZE)
    device_name = torch.cuda.get_device_name(device) if use_cuda else "CPU"

    results = [run_synthetic(step, pipeline, args, IMAGE_SIZE, CLASSES)]
    print(f"synthetic: {results[0].rate:,.0f} img/s", flush=True)
    for kind in inputs:
        source: DataSource = discover(Channel("train", path=raw_dir if kind == "raw" else jpeg_dir))
        decode = "cpu"
        if kind == "jpeg":
            problem = gpu_jpeg_problem(device)
            decode = "device" if problem is None else "cpu"
            if problem is not None:
                print(f"JPEG shards are decoded in the loader workers: {problem}", flush=True)
        name = "raw shards" if kind == "raw" else f"JPEG shards ({'nvJPEG' if decode == 'device' else 'CPU'} decode)"
        loader = single_process_loader(source, batch_size=args.batch_size, image_size=IMAGE_SIZE, num_classes=CLASSES,
                                       num_workers=workers, pin_memory=use_cuda, jpeg_decode=decode,
                                       hold=pipeline.hold)  # fmt: skip
        try:
            result = run_real(name, step, pipeline, loader, args)
        finally:
            loader.terminate()
        results.append(result)
        print(f"{name}: {result.rate:,.0f} img/s ({100 * result.rate / results[0].rate:.1f}% of synthetic), "
              f"input wait {100 * result.wait_share:.1f}% of wall time", flush=True)  # fmt: skip
    text = report(args, device_name, step, workers, results, figure=False)
    if use_cuda and not args.no_report:
        text = report(args, device_name, step, workers, results, figure=plot(device_name, results))
        write_section("training-gpu", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
