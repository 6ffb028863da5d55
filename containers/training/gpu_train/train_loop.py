"""The training loop: DDP, mixed precision, channels_last, checkpoints, metric lines, export.

One :class:`Trainer` runs in each training process. Everything that decides the result (initial
weights, data order, augmentation, optimizer and scaler state) is either seeded or restored from the
checkpoint, so a run that is stopped by SIGTERM and resumed ends with the same weights as one that
was never interrupted (bit-for-bit on CPU; on GPUs up to the non-determinism of cuDNN kernels).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpu_train import export, metrics, plugins
from gpu_train.checkpoint import CheckpointManager, capture_rng, restore_rng
from gpu_train.data import (
    DataSource,
    DevicePipeline,
    LoaderState,
    ShardLoader,
    StreamConfig,
    discover,
    jpeg_decode_for,
)
from gpu_train.distributed import DistContext
from gpu_train.errors import ConfigError, DataError, HyperparameterError
from gpu_train.hyperparameters import Hyperparameters, auto_workers
from gpu_train.models import build_model, default_stem
from gpu_train.pipe import PIPE_DIR_ENV, rank_channel
from gpu_train.process import StopFlag, StopRequested
from gpu_train.sagemaker import SageMakerEnv

log = logging.getLogger(__name__)

COMPLETED = "completed"
STOPPED = "stopped"
# An epoch that trains less than this share of its samples (partial batches dropped by each loader worker,
# batches left when another process ran out first) is logged as a warning with what to change.
UNTRAINED_WARNING_SHARE = 0.10


@dataclass
class Progress:
    epoch: int = 0
    global_step: int = 0
    position: LoaderState | None = None  # loader position after the last trained batch (None: epoch start)
    aug_state: torch.Tensor | None = None  # augmentation generator state after that batch


def _print(line: str) -> None:
    print(line, flush=True)


def resolve_amp(setting: str, device: torch.device) -> torch.dtype | None:
    if setting == "off" or (setting == "auto" and device.type != "cuda"):
        return None
    if setting == "fp16":
        return torch.float16
    if setting == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


class Trainer:
    """Trains one process's share; ``run()`` returns :data:`COMPLETED` or :data:`STOPPED`."""

    def __init__(
        self,
        env: SageMakerEnv,
        hp: Hyperparameters,
        ctx: DistContext,
        stop: StopFlag,
        *,
        on_step: Callable[[Trainer], None] | None = None,
    ) -> None:
        self.env = env
        self.hp = hp
        self.ctx = ctx
        self.stop = stop
        self.on_step = on_step
        self.device = ctx.device
        self.progress = Progress()
        self._got_data = False  # a training batch has arrived in this container
        self._pipe_pass = 0
        self.checkpoints = CheckpointManager(env.paths.checkpoint_dir, keep=hp.keep_checkpoints)
        self._setup()

    # ------------------------------------------------------------------------------------------ setup

    def _setup(self) -> None:
        hp, env, ctx = self.hp, self.env, self.ctx
        random.seed(hp.seed)
        np.random.seed(hp.seed)
        torch.manual_seed(hp.seed)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

        train_channel = env.channel(hp.train_channel)
        assert train_channel is not None
        self.train_source = discover(train_channel)
        index = self.train_source.index
        self.image_size = hp.image_size or (index.image_size if index and index.image_size else 0)
        if not self.image_size:
            raise HyperparameterError(
                "hyperparameter image_size is required: the training channel has no index.json with an "
                "image size (pack the data with `gpuctl shard`, or set image_size)"
            )
        index_classes = index.num_classes if index else 0
        self.num_classes = hp.num_classes or index_classes
        if not self.num_classes:
            raise HyperparameterError(
                "hyperparameter num_classes is required: the training channel has no index.json with classes"
            )
        if index_classes and self.num_classes < index_classes:
            raise HyperparameterError(
                f"hyperparameter num_classes={self.num_classes} is not allowed: the dataset has "
                f"{index_classes} classes; allowed: >= {index_classes}"
            )
        self.classes = list(index.classes) if index and index.num_classes == self.num_classes else []
        val_channel = env.channel(hp.validation_channel, required=False)
        self.val_source: DataSource | None = discover(val_channel) if val_channel else None

        # model
        self.model_file: Path | None = None
        if hp.model_module:
            builder, self.model_file = plugins.load_callable(
                hp.model_module, what="model_module", dirs=plugins.search_dirs(env.paths.root)
            )
            model = builder(num_classes=self.num_classes, image_size=self.image_size)
            if not isinstance(model, nn.Module):
                raise HyperparameterError(
                    f"hyperparameter model_module={hp.model_module!r} returned {type(model).__name__}, not an nn.Module"
                )
            self.stem = ""
        else:
            self.stem = default_stem(self.image_size) if hp.stem == "auto" else hp.stem
            model = build_model(hp.arch, self.num_classes, width=hp.width, stem=self.stem)
        model = model.to(self.device)
        # channels_last feeds tensor cores without layout transposes; on CPUs it brings nothing (oneDNN picks
        # its own blocked layouts) and some NHWC backward kernels of CPU builds are unreliable: GPUs only.
        self.channels_last = hp.channels_last and self.device.type == "cuda"
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.net: nn.Module = model
        if ctx.distributed:
            self.net = DistributedDataParallel(
                model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                gradient_as_bucket_view=True,
            )
        if hp.compile:
            self.net = torch.compile(self.net)  # type: ignore[assignment]

        # optimizer: no weight decay on batch-norm parameters and biases
        decay: list[nn.Parameter] = []
        no_decay: list[nn.Parameter] = []
        for name, parameter in model.named_parameters():
            (no_decay if parameter.ndim <= 1 or name.endswith(".bias") else decay).append(parameter)
        groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if hp.optimizer == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                groups, lr=hp.lr, momentum=hp.momentum, nesterov=hp.nesterov and hp.momentum > 0
            )
        else:
            self.optimizer = torch.optim.AdamW(groups, lr=hp.lr)
        self.amp_dtype = resolve_amp(hp.amp, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype == torch.float16)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=hp.label_smoothing)

        # data
        self.num_workers = self._workers(self.train_source)
        if self.device.type == "cpu":
            # CPU training: leave a core to each loader worker instead of oversubscribing. A function of
            # the configuration only, so a resumed run computes exactly like the interrupted one.
            torch.set_num_threads(max(1, env.num_cpus // ctx.local_world - self.num_workers))
        self.train_loader = self._loader(self.train_source, shuffle=True, workers=self.num_workers)
        self.val_loader = (
            self._loader(self.val_source, shuffle=False, workers=self._workers(self.val_source))
            if self.val_source
            else None
        )
        self.pipeline = DevicePipeline(
            self.device,
            mean=hp.normalize_mean,
            std=hp.normalize_std,
            augment=hp.augment,
            channels_last=self.channels_last,
            seed=hp.seed * 1000 + ctx.rank,
        )
        samples = self.train_source.num_samples
        self.steps_per_epoch = samples // (hp.batch_size * ctx.world) if samples else None
        if ctx.is_leader:
            log.info(
                "training %s (%s classes, %dx%d) on %s x %d processes, batch %d/process, %d loader workers, "
                "amp=%s, %s samples",
                hp.model_module or hp.arch,
                self.num_classes,
                self.image_size,
                self.image_size,
                self.device.type,
                ctx.world,
                hp.batch_size,
                self.num_workers,
                self.amp_dtype,
                samples if samples is not None else "unknown (Pipe mode)",
            )

    def _workers(self, source: DataSource | None) -> int:
        if source is None:
            return 0
        if source.is_pipe:
            if self.ctx.local_world > 1 and not os.environ.get(PIPE_DIR_ENV):
                raise ConfigError(
                    f"channel {source.channel.name!r} is in Pipe mode with {self.ctx.local_world} processes per "
                    "host but no demultiplexer (start the job with `python -m gpu_train train`, which splits the "
                    "FIFO among the processes), or use FastFile/File mode (same shards)"
                )
            return 1  # one stream: one reader
        if self.hp.num_workers >= 0:
            return self.hp.num_workers
        return auto_workers(self.env.num_cpus, self.ctx.local_world)

    def _loader(self, source: DataSource, *, shuffle: bool, workers: int) -> ShardLoader:
        decoder = None
        if self.hp.dataset_decoder:
            decoder, _ = plugins.load_callable(
                self.hp.dataset_decoder, what="dataset_decoder", dirs=plugins.search_dirs(self.env.paths.root)
            )
        sharded = source.channel.sharded_by_key
        rank, world = (self.ctx.local_rank, self.ctx.local_world) if sharded else (self.ctx.rank, self.ctx.world)
        pipe_dir = os.environ.get(PIPE_DIR_ENV)
        if source.is_pipe and pipe_dir and self.ctx.local_world > 1:
            # The launcher's PipeDemux already gave this process its own shards on its own FIFO.
            source = DataSource(channel=rank_channel(source.channel, Path(pipe_dir), self.ctx.local_rank))
            rank, world = 0, 1
        config = StreamConfig(
            source=source,
            batch_size=self.hp.batch_size,
            image_size=self.image_size,
            num_classes=self.num_classes,
            seed=self.hp.seed,
            rank=rank,
            world=world,
            num_workers=workers,
            shuffle=shuffle,
            drop_last=shuffle,
            decoder=decoder,
            # JPEG shards: decoded in batches on the GPU (nvJPEG) when torchvision can, else in the loader workers.
            jpeg_decode=jpeg_decode_for(source, self.device) if decoder is None else "cpu",
        )
        return ShardLoader(
            config,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=self.hp.prefetch_factor,
        )

    # ------------------------------------------------------------------------------------ checkpoints

    def _validate_checkpoint(self, state: dict[str, Any]) -> None:
        if state.get("arch") != (self.hp.model_module or self.hp.arch) or state.get("num_classes") != self.num_classes:
            # Not a broken file but another job's: resuming from it (or pruning around it) would mix runs.
            raise ConfigError(
                f"checkpoint directory {self.checkpoints.directory} holds checkpoints of another model "
                f"({state.get('arch')}, {state.get('num_classes')} classes; this job: "
                f"{self.hp.model_module or self.hp.arch}, {self.num_classes} classes); give each job its own "
                "CheckpointConfig.S3Uri"
            )
        if len(state.get("ranks", [])) != self.ctx.world:
            log.warning(
                "checkpoint has %d processes, this job %d: resuming at the start of its epoch",
                len(state.get("ranks", [])),
                self.ctx.world,
            )

    def resume(self) -> Path | None:
        """Load the newest valid checkpoint (the leader chooses; every process loads the same file)."""
        choice = None
        if self.ctx.is_leader:
            found = self.checkpoints.latest(self._validate_checkpoint)
            choice = str(found[0]) if found else None
        choice = self.ctx.broadcast(choice)
        if choice is None:
            return None
        path = Path(choice)
        state = self.checkpoints.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.progress.epoch = int(state["epoch"])
        self.progress.global_step = int(state["global_step"])
        ranks = state.get("ranks", [])
        if len(ranks) == self.ctx.world:
            mine = ranks[self.ctx.rank]
            restore_rng(mine["rng"], self.device)
            self.pipeline.generator.set_state(mine["augment"])
            self.progress.aug_state = mine["augment"]
            loader = mine.get("loader")
            self.progress.position = LoaderState.from_dict(loader) if loader else None
        else:
            self.progress.position = None
        if self.ctx.is_leader:
            log.info("resumed from %s: epoch %d, step %d", path.name, self.progress.epoch, self.progress.global_step)
        return path

    def save_checkpoint(self, reason: str) -> Path | None:
        """Write a checkpoint of the current progress (collective: every process must call it)."""
        started = time.monotonic()
        aug = self.progress.aug_state if self.progress.aug_state is not None else self.pipeline.generator.get_state()
        mine = {
            "rng": capture_rng(self.device),
            "augment": aug,
            "loader": self.progress.position.as_dict() if self.progress.position else None,
        }
        ranks = self.ctx.gather(mine)
        path = None
        if self.ctx.is_leader:
            state = {
                "model": export.unwrap(self.model).state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "epoch": self.progress.epoch,
                "global_step": self.progress.global_step,
                "ranks": ranks,
                "arch": self.hp.model_module or self.hp.arch,
                "num_classes": self.num_classes,
                "hyperparameters": {k: str(v) for k, v in self.hp.as_dict().items()},
            }
            path = self.checkpoints.save(state, self.progress.global_step)
            log.info("checkpoint %s written (%s, %.1f s)", path.name, reason, time.monotonic() - started)
        return path

    # ---------------------------------------------------------------------------------------- training

    def lr_at(self, step: int, epoch: int) -> float:
        """Learning rate of optimizer step ``step`` (a pure function: nothing to restore on resume)."""
        hp = self.hp
        spe = self.steps_per_epoch
        progress = (step + 1) / spe if spe else float(epoch + 1)  # epochs completed after this step
        total = float(hp.epochs)
        if hp.max_steps and spe:
            total = min(total, hp.max_steps / spe)
        if hp.warmup_epochs and progress <= hp.warmup_epochs:
            return hp.lr * progress / hp.warmup_epochs
        if hp.lr_schedule == "constant" or total <= hp.warmup_epochs:
            return hp.lr
        fraction = min(1.0, max(0.0, (progress - hp.warmup_epochs) / (total - hp.warmup_epochs)))
        return hp.lr * 0.5 * (1.0 + math.cos(math.pi * fraction))

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _gpu_util(self) -> float:
        if self.device.type != "cuda":
            return 0.0
        try:
            return float(torch.cuda.utilization(self.device))
        except Exception:
            return float("nan")

    def _done(self) -> bool:
        hp = self.hp
        return self.progress.epoch >= hp.epochs or bool(hp.max_steps and self.progress.global_step >= hp.max_steps)

    def run(self) -> str:
        """Resume if a checkpoint exists, train to the end (or until SIGTERM), export the model."""
        self.resume()
        while not self._done():
            outcome = self._train_epoch(self.progress.epoch)
            if outcome == STOPPED:
                return self._stop()
            epoch = self.progress.epoch
            if outcome == "epoch":
                self._end_of_epoch(epoch)  # fails the job when the epoch trained nothing
            self.validate(epoch)
            if outcome == "epoch":
                self.progress.epoch = epoch + 1
                self.progress.position = None
            # A signal that arrived during validation: every process agrees, then stops.
            if self.ctx.sync_flags(self.stop.requested)[0]:
                return self._stop()
            self.save_checkpoint(f"end of epoch {epoch}" if outcome == "epoch" else "max_steps reached")
        if self.ctx.is_leader:
            self.export()
        return COMPLETED

    def _source_text(self, pipe_pass: int) -> str:
        """Where the training data comes from, for messages: the channel, its mode and its FIFO or shards."""
        channel = self.train_source.channel
        if self.train_source.is_pipe:
            return f"channel {channel.name!r} (Pipe mode, FIFO {channel.pipe_path(pipe_pass)})"
        return f"channel {channel.name!r} ({channel.mode} mode, {len(self.train_source.shards)} shards)"

    def _train_epoch(self, epoch: int) -> str:
        """Train until the data of ``epoch`` runs out ("epoch"), max_steps ("max_steps") or a stop."""
        hp, ctx = self.hp, self.ctx
        self.net.train()
        self._pipe_pass = self.train_loader.pipe_pass  # the FIFO this epoch reads (Pipe mode)
        batches = self.pipeline.batches(self.train_loader.epoch(epoch, self.progress.position), train=True)
        window_loss = torch.zeros((), device=self.device)
        window_steps, window_wait = 0, 0.0
        window_start = time.perf_counter()
        while True:
            first = not self._got_data
            if first:
                log.info("waiting for the first batch of %s", self._source_text(self._pipe_pass))
            fetch_start = time.perf_counter()
            interrupted = False
            try:
                # SIGTERM interrupts a read that blocks (an empty Pipe FIFO, a FastFile object that does not
                # arrive), so the job stops within seconds instead of at SageMaker's SIGKILL.
                with self.stop.interruptible():
                    batch = next(batches, None)
            except StopRequested:
                batch, interrupted = None, True
                log.warning(
                    "stopped by %s while waiting for the %s of %s (waited %.1f s)",
                    self.stop.signal_name,
                    "first batch" if first else "next batch",
                    self._source_text(self._pipe_pass),
                    time.perf_counter() - fetch_start,
                )
            self._got_data = self._got_data or batch is not None
            window_wait += time.perf_counter() - fetch_start
            # Every process agrees on stopping and on the end of the epoch at the same step.
            stop, exhausted = ctx.sync_flags(self.stop.requested or interrupted, batch is None and not interrupted)
            if stop:
                return STOPPED
            if exhausted or batch is None:
                return "epoch"
            x, y, (position, aug_state) = batch
            lr = self.lr_at(self.progress.global_step, epoch)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            with self._autocast():
                loss = self.criterion(self.net(x), y)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.progress.global_step += 1
            self.progress.position = position
            self.progress.aug_state = aug_state
            window_loss += loss.detach().float()
            window_steps += 1
            step = self.progress.global_step
            if step % hp.log_steps == 0:
                elapsed = max(time.perf_counter() - window_start, 1e-9)
                loss_sum, steps = ctx.sum(float(window_loss.item()), float(window_steps))
                if ctx.is_leader:
                    _print(
                        metrics.train_line(
                            epoch=epoch,
                            step=step,
                            loss=loss_sum / max(1.0, steps),
                            samples_per_sec=window_steps * hp.batch_size * ctx.world / elapsed,
                            gpu_util=self._gpu_util(),
                            lr=lr,
                            data_wait_pct=100.0 * window_wait / elapsed,
                        )
                    )
                window_loss.zero_()
                window_steps, window_wait = 0, 0.0
                window_start = time.perf_counter()
            if self.on_step is not None:
                self.on_step(self)
            if hp.checkpoint_steps and step % hp.checkpoint_steps == 0:
                self.save_checkpoint(f"every {hp.checkpoint_steps} steps")
            if hp.max_steps and step >= hp.max_steps:
                return "max_steps"

    def _end_of_epoch(self, epoch: int) -> None:
        """Count what the epoch trained and dropped (all processes, collectively); fail when it trained nothing.

        Every process ends an epoch at the same step (the *exhausted* flag), so all of them get here, agree on
        the step count and raise the same error: no process is left waiting in a collective.
        """
        hp, ctx = self.hp, self.ctx
        position = self.progress.position
        steps = sum(position.consumed) if position is not None and position.epoch == epoch else 0
        streams = self.train_loader.stats(epoch)
        channel = self.train_source.channel
        host_shards = len(self.train_source.shards) if ctx.local_rank == 0 else 0
        sums = ctx.sum(
            sum(s.samples for s in streams),
            sum(s.dropped for s in streams),
            sum(s.shards for s in streams),
            float(host_shards),
            float(sum(not s.complete for s in streams)),
        )
        samples, dropped, shards_read, host_shards_sum, partial = (int(v) for v in sums)
        (smallest,) = (int(v) for v in ctx.minimum(max(s.samples for s in streams)))
        if self.train_source.is_pipe:
            shards = shards_read
        else:
            shards = host_shards_sum if channel.sharded_by_key else len(self.train_source.shards)
        world, workers = ctx.world, self.num_workers
        per_process = f"{workers} loader worker{'s' if workers != 1 else ''}" if workers else "1 loader stream each"
        stream_count = world * max(1, workers)
        split = f"{world} process{'es' if world != 1 else ''} x {per_process}"
        if steps == 0:
            raise DataError(self._no_step_reason(epoch, samples, shards, smallest, stream_count, split))
        trained = steps * hp.batch_size * world
        untrained = max(0, samples - trained)
        unused = max(0, untrained - dropped)
        line = f"epoch {epoch}: {steps} steps trained {trained} of {'at least ' if partial else ''}{samples} samples"
        line += f" of channel {channel.name!r}"
        advice = []
        if dropped:
            line += (
                f"; {dropped} ({100 * dropped / max(1, samples):.0f}%) dropped as partial batches ({stream_count} "
                f"loader streams: {split}, each filling its own batches of batch_size={hp.batch_size} and dropping "
                "its last partial one; other samples are dropped in other epochs)"
            )
            advice.append("lower batch_size or num_workers" if workers > 1 else "lower batch_size")
        if unused and not partial:
            line += f"; {unused} unused because another process ran out of batches first"
            advice.append("give every process the same number of samples (shards of equal size, a multiple of "
                          "the process count)")  # fmt: skip
        if ctx.is_leader:
            if samples and untrained / samples >= UNTRAINED_WARNING_SHARE and advice:
                log.warning("%s. To train on more of each epoch, %s.", line, ", or ".join(advice))
            else:
                log.info("%s", line)

    def _no_step_reason(
        self, epoch: int, samples: int, shards: int, smallest: int, stream_count: int, split: str
    ) -> str:
        channel = self.train_source.channel
        head = f"no training step in epoch {epoch}: channel {channel.name!r}"
        if samples == 0 and self.train_source.is_pipe:
            fifo = channel.pipe_path(self._pipe_pass)
            got = "ended without data (0 shards)" if shards == 0 else f"delivered {shards} shards with no sample"
            return (
                f"{head} (Pipe mode) delivered no samples: the FIFO {fifo} {got}. Check that the channel's S3Uri "
                "prefix selects the shard objects (e.g. s3://bucket/dataset/shard-) and that they are not empty."
            )
        if samples == 0:
            return f"{head} ({channel.mode} mode, {shards} shards) holds no samples; re-pack the data with " \
                "`gpuctl shard SRC DEST`."  # fmt: skip
        mode = "Pipe mode" if self.train_source.is_pipe else f"{channel.mode} mode, {shards} shards"
        reason = (
            f"{head} ({mode}) gave {samples} samples, split into {stream_count} loader streams ({split}); each "
            f"stream fills its own batches of batch_size={self.hp.batch_size} and drops its last partial batch, "
        )
        if smallest == 0:
            return reason + (
                "and at least one process received no sample. Lower processes_per_host or the instance count, or "
                "add training data (at least as many shards as processes)."
            )
        workers = f", or lower num_workers (now {self.num_workers})" if self.num_workers > 1 else ""
        return reason + (
            f"and the largest stream of the process with the least data had {smallest} samples. Set batch_size "
            f"to at most {smallest}{workers}, or add training data."
        )

    def _stop(self) -> str:
        waited = time.monotonic() - self.stop.at if self.stop.at is not None else 0.0
        if self.progress.global_step > 0:
            path = self.save_checkpoint(f"{self.stop.signal_name or 'stop'} received {waited:.1f} s earlier")
            if path is not None:
                log.info("stopping after step %d; resume by restarting the job", self.progress.global_step)
        # The loader workers may be blocked in a read that never returns: end them now, not at exit.
        for loader in (self.train_loader, self.val_loader):
            if loader is not None:
                loader.terminate()
        return STOPPED

    # -------------------------------------------------------------------------------------- validation

    def validate(self, epoch: int) -> tuple[float, float] | None:
        if self.val_loader is None:
            return None
        self.net.eval()
        model = export.unwrap(self.net)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        count = 0
        criterion = nn.CrossEntropyLoss(reduction="sum")
        interrupted = False
        # The training batches' path (slots, side-stream copies or nvJPEG decoding), without augmentation.
        items = self.pipeline.batches(self.val_loader.epoch(epoch), train=False)
        with torch.no_grad():
            while True:
                try:
                    with self.stop.interruptible():  # a stop skips the rest of validation (and its metric line)
                        item = next(items, None)
                except StopRequested:
                    interrupted = True
                    break
                if item is None:
                    break
                x, y, _ = item
                with self._autocast():
                    logits = model(x)
                loss_sum += criterion(logits.float(), y).double()
                correct += (logits.argmax(1) == y).sum()
                count += int(y.numel())
        total_loss, total_correct, total, stopped = self.ctx.sum(
            float(loss_sum.item()), float(correct.item()), float(count), float(interrupted)
        )
        self.net.train()
        if total == 0 or stopped:
            return None
        loss, accuracy = total_loss / total, total_correct / total
        if self.ctx.is_leader:
            _print(metrics.validation_line(epoch=epoch, loss=loss, accuracy=accuracy, samples=int(total)))
        return loss, accuracy

    # ------------------------------------------------------------------------------------------ export

    def export(self) -> Path:
        hp = self.hp
        config = export.model_config(
            arch=hp.arch if not hp.model_module else "custom",
            num_classes=self.num_classes,
            image_size=self.image_size,
            mean=hp.normalize_mean,
            std=hp.normalize_std,
            width=hp.width,
            stem=self.stem or None,
            classes=self.classes,
            channels_last=hp.channels_last,
            trained_steps=self.progress.global_step,
        )
        if hp.model_module:
            config["builder"] = hp.model_module.rpartition(":")[2]
        model_dir = self.env.model_dir
        tarball = self.env.output_data_dir / "model.tar.gz" if hp.model_tarball else None
        export.export_model(self.model, model_dir, config, module_file=self.model_file, tarball=tarball)
        log.info("model written to %s%s", model_dir, f" and {tarball}" if tarball else "")
        return model_dir
