"""Bring your own code: a small CNN trained with plain PyTorch DDP on the platform's image shards.

The platform runs this file as one process, or under ``torchrun`` with one process per GPU on every host
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``:
https://pytorch.org/docs/stable/elastic/run.html), with each hyperparameter as a ``--name value`` argument.
What it uses from the platform's ``gpu_train`` package (on ``PYTHONPATH``):

* ``gpu_train.data``: :func:`discover` finds the shards of the training channel and checks them against
  ``index.json``; :class:`ShardLoader` reads them sequentially (rank ``r`` takes every ``world``-th shard)
  and yields ``uint8`` (N, H, W, 3) batches with the loader position after each, which the checkpoint keeps;
* ``gpu_train.checkpoint``: :class:`CheckpointManager` writes checkpoints atomically into
  ``GPU_TRAIN_CHECKPOINT_DIR`` (SageMaker syncs it with ``CheckpointConfig.S3Uri``:
  https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html) and finds the newest valid one;
* ``gpu_train.distributed``: :func:`init` joins the process group torchrun set up (NCCL on GPUs, gloo on
  CPUs; a single process without ``WORLD_SIZE`` > 1) and returns a :class:`DistContext` with this process's
  rank, world and device. Its collectives run on CPU tensors over a separate gloo group, so they never wait
  for the GPU: ``sync_flags`` (every step: *stop* and *exhausted*, ORed over all processes), ``sum`` (the loss
  of the metric line), ``gather`` (loader positions into a checkpoint) and ``broadcast`` (the checkpoint to
  resume from); :func:`shutdown` leaves the group;
* ``gpu_train.process``: :class:`StopFlag` records SIGTERM. SageMaker sends SIGTERM to stop a job and kills it
  120 s later (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html); the
  flag is checked every step, all processes agree on it (``sync_flags``), rank 0 writes a checkpoint and
  every process exits with 143;
* ``gpu_train.train_loop``: :func:`resolve_amp` picks the autocast dtype: bf16 where the GPU supports it, else
  fp16 (with a ``GradScaler``), none on CPUs (https://pytorch.org/docs/stable/amp.html).

Everything else is plain PyTorch: ``DistributedDataParallel`` (https://pytorch.org/docs/stable/notes/ddp.html)
and ``torch.autocast`` on CUDA. At the end rank 0 writes ``model.pt`` (state_dict) and ``model_config.json`` to
``SM_MODEL_DIR``, which SageMaker packs into ``model.tar.gz``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpu_train import distributed
from gpu_train.checkpoint import CheckpointManager
from gpu_train.data import LoaderState, ShardLoader, StreamConfig, auto_workers, discover
from gpu_train.distributed import DistContext
from gpu_train.errors import ConfigError
from gpu_train.process import EXIT_OK, EXIT_STOPPED, StopFlag, setup_logging
from gpu_train.sagemaker import Channel, Paths, load_channels
from gpu_train.train_loop import resolve_amp

EXAMPLE = "ddp_shards"
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

log = logging.getLogger(EXAMPLE)


# ------------------------------------------------------------------------------------ hyperparameters


def str2bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; allowed: true, false, 1, 0, yes, no, on, off")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else EXAMPLE)

    def option(name: str, **kwargs: Any) -> None:
        # SageMaker hyperparameter names use underscores; the dashed spelling works too.
        parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", dest=name, **kwargs)

    option("epochs", type=int, default=5, help="passes over the training data")
    option("max_steps", type=int, default=0, help="stop after this many optimizer steps in total (0: no limit)")
    option("batch_size", type=int, default=64, help="samples per process (per GPU) and step")
    option("lr", type=float, default=3e-3, help="AdamW learning rate")
    option("weight_decay", type=float, default=0.01, help="AdamW weight decay")
    option("width", type=int, default=32, help="channels of the first convolution (doubled twice)")
    option("num_classes", type=int, default=0, help="output classes (0: from the dataset's index.json)")
    option("image_size", type=int, default=0, help="image height and width (0: from the dataset's index.json)")
    option("seed", type=int, default=0, help="seed of the initial weights and the data order")
    option("amp", type=str2bool, default=True, help="mixed precision on CUDA (bf16 where supported, else fp16)")
    option("num_workers", type=int, default=-1, help="loader workers per process (-1: GPU_TRAIN_NUM_WORKERS)")
    option("log_steps", type=int, default=10, help="print a metric line every N steps")
    option("checkpoint_steps", type=int, default=100, help="checkpoint every N steps (0: only at epoch ends)")
    option("keep_checkpoints", type=int, default=2, help="checkpoints kept in the checkpoint directory")
    option("train_channel", default="train", help="input channel holding the training shards")
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The known hyperparameters, checked, and the arguments this script does not know (kept, not fatal)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    positive = ("epochs", "batch_size", "width", "log_steps", "keep_checkpoints")
    for name in positive:
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} is not allowed; allowed: an integer >= 1")
    for name in ("max_steps", "checkpoint_steps", "num_classes", "image_size"):
        if getattr(args, name) < 0:
            parser.error(f"--{name}={getattr(args, name)} is not allowed; allowed: an integer >= 0")
    if args.lr <= 0:
        parser.error(f"--lr={args.lr} is not allowed; allowed: a number > 0")
    return args, unknown


# --------------------------------------------------------------------------------------------- model


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU stages (``width``, 2x, 4x channels), global average pooling, a linear head."""

    def __init__(self, num_classes: int, width: int = 32) -> None:
        super().__init__()

        def stage(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *stage(3, width),
            nn.MaxPool2d(2),
            *stage(width, 2 * width),
            nn.MaxPool2d(2),
            *stage(2 * width, 4 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x))
        return out


# ---------------------------------------------------------------------------------------------- data


def find_channel(name: str) -> Channel:
    """The input channel ``name``: its folder from ``SM_CHANNEL_<NAME>``, its input mode from
    ``inputdataconfig.json`` when there is one (File when not)."""
    variable = f"SM_CHANNEL_{name.upper().replace('-', '_').replace('.', '_')}"
    configured = load_channels(Paths.from_env(), os.environ).get(name)
    folder = os.environ.get(variable)
    if folder is None and configured is None:
        known = os.environ.get("SM_CHANNELS", "[]")
        raise ConfigError(
            f"input channel {name!r} is missing: {variable} is not set (channels: {known}); add a channel named "
            f"{name!r} to the job, or pass --train_channel with one of those names"
        )
    channel = Channel(
        name=name,
        mode=configured.mode if configured else "File",
        distribution=configured.distribution if configured else "FullyReplicated",
        path=Path(folder) if folder else configured.path if configured else Path(),
    )
    if channel.is_pipe:
        raise ConfigError(
            f"input channel {name!r} is in Pipe mode; allowed for this example: File, FastFile or FSx for Lustre "
            "(FastFile streams the same shards from S3 without a download)"
        )
    if not channel.path.is_dir():
        raise ConfigError(f"input channel {name!r} ({variable}) has no folder at {channel.path}")
    return channel


def loader_workers(requested: int, local_world: int) -> int:
    """``--num_workers`` when >= 0, else the launcher's ``GPU_TRAIN_NUM_WORKERS``, else vCPUs per process - 1."""
    if requested >= 0:
        return requested
    raw = os.environ.get("GPU_TRAIN_NUM_WORKERS", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigError(f"environment variable GPU_TRAIN_NUM_WORKERS={raw!r} is not allowed; allowed: >= 0")
        return value
    cpus = int(os.environ.get("SM_NUM_CPUS") or os.cpu_count() or 1)
    return auto_workers(cpus, local_world)


class CopyFence:
    """Keeps a batch's pinned slot from being refilled before its copy to the GPU has run.

    :class:`ShardLoader` (with workers) hands out views of slots that its workers reuse: a batch stays valid until
    ``hold`` more batches have been asked for. A ``non_blocking`` copy only queues on the GPU, and the host can run
    many steps ahead of it, so before asking for the next batch this waits for the copy of the batch whose slot that
    request frees (in steady state long done: no wait). On the CPU nothing is queued and it does nothing.
    """

    def __init__(self, hold: int, device: torch.device, new_event: Any = None) -> None:
        self.hold = hold
        self.enabled = device.type == "cuda"
        self.new_event = new_event or (lambda: torch.cuda.Event())
        self.pending: collections.deque[Any] = collections.deque()

    def copied(self) -> None:
        """After the batch's host-to-device copies were queued."""
        if self.enabled:
            event = self.new_event()
            event.record()
            self.pending.append(event)

    def before_next(self) -> None:
        """Before asking the loader for the next batch."""
        while len(self.pending) >= self.hold:
            self.pending.popleft().synchronize()


def to_input(images: torch.Tensor, device: torch.device, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (N, H, W, 3) pixels -> normalised float (N, 3, H, W) on ``device`` (channels_last on CUDA)."""
    x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255.0)
    x = (x - mean) / std
    memory_format = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    return x.contiguous(memory_format=memory_format)


# ---------------------------------------------------------------------------------------------- train


class LossWindow:
    """The training loss since the previous metric line, summed on the device (no GPU sync per step)."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), device=device)
        self.steps = 0
        self.started = time.perf_counter()

    def add(self, loss: torch.Tensor) -> None:
        self.loss += loss.detach().float()
        self.steps += 1

    def report(self, ctx: DistContext, epoch: int, step: int, batch_size: int) -> None:
        """Collective: rank 0 prints the loss averaged over all processes, then the window starts again.

        The line matches the platform's MetricDefinitions (``gpu_train.metrics``): ``epoch=E step=S loss=L ...``.
        """
        loss_sum, steps = ctx.sum(float(self.loss.item()), float(self.steps))
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        if ctx.is_leader:
            print(
                f"epoch={epoch} step={step} loss={loss_sum / max(steps, 1.0):.6f} "
                f"samples_per_sec={steps * batch_size / elapsed:.1f}",
                flush=True,
            )
        self.loss.zero_()
        self.steps = 0
        self.started = time.perf_counter()


def train(args: argparse.Namespace, ctx: DistContext, stop: StopFlag) -> int:
    """Resume, train until the end or a stop; returns the exit code (0 done, 143 stopped)."""
    torch.manual_seed(args.seed)
    device = ctx.device
    channel = find_channel(args.train_channel)
    source = discover(channel)
    index = source.index
    num_classes = args.num_classes or (index.num_classes if index else 0)
    image_size = args.image_size or (index.image_size if index and index.image_size else 0)
    if not num_classes or not image_size:
        raise ConfigError(
            f"channel {channel.name!r} at {channel.path} has no index.json with classes and image size; "
            "pack it with `gpuctl shard`, or pass --num_classes and --image_size"
        )
    # With ShardedByS3Key each host holds its own shards: split them among the local processes only.
    rank, world = (ctx.local_rank, ctx.local_world) if channel.sharded_by_key else (ctx.rank, ctx.world)
    workers = loader_workers(args.num_workers, ctx.local_world)
    loader = ShardLoader(
        StreamConfig(
            source=source,
            batch_size=args.batch_size,
            image_size=image_size,
            num_classes=num_classes,
            seed=args.seed,
            rank=rank,
            world=world,
            num_workers=workers,
        ),
        pin_memory=device.type == "cuda",
    )

    model = SmallCNN(num_classes, args.width).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # missing in the stubs
    net: nn.Module = model
    if ctx.distributed:
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    dtype = resolve_amp("auto" if args.amp else "off", device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    criterion = nn.CrossEntropyLoss()
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    # ---- resume: rank 0 picks the newest checkpoint that loads, every process loads the same file
    checkpoints = CheckpointManager(
        Path(os.environ.get("GPU_TRAIN_CHECKPOINT_DIR", "/opt/ml/checkpoints")), keep=args.keep_checkpoints
    )
    identity = {"example": EXAMPLE, "num_classes": num_classes, "image_size": image_size, "width": args.width}

    def same_model(state: dict[str, Any]) -> None:
        found = {key: state.get(key) for key in identity}
        if found != identity:
            raise ConfigError(
                f"checkpoint directory {checkpoints.directory} holds checkpoints of another model ({found}; this "
                f"job: {identity}); give each job its own checkpoint location"
            )

    epoch, step = 0, 0
    position: LoaderState | None = None  # loader position after the last trained batch (None: epoch start)
    found = checkpoints.latest(same_model) if ctx.is_leader else None
    chosen = ctx.broadcast(str(found[0]) if found else None)
    if chosen is not None:
        state = checkpoints.load(Path(chosen))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if state["scaler"]:
            scaler.load_state_dict(state["scaler"])
        epoch, step = int(state["epoch"]), int(state["step"])
        positions = state["positions"]
        if len(positions) == ctx.world and positions[ctx.rank] is not None:
            position = LoaderState.from_dict(positions[ctx.rank])
        log.info("resumed from step %d (epoch %d, %s)", step, epoch, Path(chosen).name)

    def save(reason: str) -> None:
        """Collective: every process hands its loader position to rank 0, which writes the file."""
        positions = ctx.gather(position.as_dict() if position is not None else None)
        if ctx.is_leader:
            state = {
                **identity,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(),
                "epoch": epoch,
                "step": step,
                "positions": positions,
            }
            path = checkpoints.save(state, step)
            log.info("checkpoint %s written (%s)", path.name, reason)

    log.info(
        "training on %s x %d processes: %s classes, %dx%d images, batch %d/process, %d loader workers, amp=%s",
        device.type,
        ctx.world,
        num_classes,
        image_size,
        image_size,
        args.batch_size,
        workers,
        dtype,
    )
    net.train()
    window = LossWindow(device)
    fence = CopyFence(loader.hold, device)
    while epoch < args.epochs and not (args.max_steps and step >= args.max_steps):
        batches = loader.epoch(epoch, position)
        while True:
            fence.before_next()
            item = next(batches, None)
            stopping, exhausted = ctx.sync_flags(stop.requested, item is None)
            if stopping:
                if step > 0:
                    save(f"{stop.signal_name} received")
                loader.terminate()
                log.info("stopped by %s after step %d; a restarted job resumes here", stop.signal_name, step)
                return EXIT_STOPPED
            if exhausted or item is None:  # the processes end the epoch together: DDP never waits on a peer
                break
            images, labels, position = item
            x = to_input(images, device, mean, std)
            y = labels.to(device, non_blocking=True)
            fence.copied()
            with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
                loss = criterion(net(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            window.add(loss)
            if step % args.log_steps == 0:
                window.report(ctx, epoch, step, args.batch_size)
            if args.checkpoint_steps and step % args.checkpoint_steps == 0:
                save(f"every {args.checkpoint_steps} steps")
            if args.max_steps and step >= args.max_steps:
                break
        if window.steps:
            window.report(ctx, epoch, step, args.batch_size)
        trained = sum(position.consumed) if position is not None and position.epoch == epoch else 0
        if trained == 0:
            raise RuntimeError(
                f"epoch {epoch} trained no step: channel {channel.name!r} ({len(source.shards)} shards, "
                f"{source.num_samples} samples) split over {world} processes x {max(1, workers)} loader streams "
                f"gives no stream a full batch of batch_size={args.batch_size}; lower batch_size or num_workers"
            )
        if args.max_steps and step >= args.max_steps:
            save("max_steps reached")  # the position stays inside this epoch: a larger max_steps continues it
        else:
            epoch, position = epoch + 1, None
            save(f"end of epoch {epoch - 1}")

    if ctx.is_leader:
        export(model, Path(os.environ.get("SM_MODEL_DIR", "/opt/ml/model")), identity, index, step)
    return EXIT_OK


def export(model: nn.Module, model_dir: Path, identity: dict[str, Any], index: Any, step: int) -> None:
    """``model.pt`` (float32 CPU state_dict) and ``model_config.json``: what a handler needs to rebuild it."""
    model_dir.mkdir(parents=True, exist_ok=True)
    # Autocast computes in bf16/fp16 but keeps the parameters float32: the state_dict is float32 already.
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, model_dir / "model.pt")
    config = {
        "arch": "SmallCNN",
        **identity,
        "classes": list(index.classes) if index is not None else [],
        "mean": list(MEAN),
        "std": list(STD),
        "input": "float32 (N, 3, H, W): pixels / 255, minus mean, divided by std",
        "trained_steps": step,
        "torch_version": torch.__version__.split("+")[0],
    }
    (model_dir / "model_config.json").write_text(json.dumps(config, indent=2) + "\n")
    log.info("model written to %s", model_dir)


def main(argv: list[str] | None = None) -> int:
    args, unknown = parse_args(argv)
    stop = StopFlag().install()  # before anything slow: a SIGTERM during start-up is not lost
    ctx = distributed.init(torch.cuda.is_available())
    setup_logging(ctx.rank)
    if not ctx.is_leader:
        logging.getLogger().setLevel(logging.WARNING)
    if unknown:
        log.warning("ignoring arguments this script does not know: %s", " ".join(unknown))
    try:
        return train(args, ctx, stop)
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    sys.exit(main())
