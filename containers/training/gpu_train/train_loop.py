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
    auto_workers,
    discover,
)
from gpu_train.distributed import DistContext
from gpu_train.errors import ConfigError, HyperparameterError
from gpu_train.hyperparameters import Hyperparameters
from gpu_train.models import build_model, default_stem
from gpu_train.pipe import PIPE_DIR_ENV, rank_channel
from gpu_train.process import StopFlag
from gpu_train.sagemaker import SageMakerEnv

log = logging.getLogger(__name__)

COMPLETED = "completed"
STOPPED = "stopped"


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

    def _train_epoch(self, epoch: int) -> str:
        """Train until the data of ``epoch`` runs out ("epoch"), max_steps ("max_steps") or a stop."""
        hp, ctx = self.hp, self.ctx
        self.net.train()
        batches = self.pipeline.batches(self.train_loader.epoch(epoch, self.progress.position), train=True)
        window_loss = torch.zeros((), device=self.device)
        window_steps, window_wait = 0, 0.0
        window_start = time.perf_counter()
        while True:
            fetch_start = time.perf_counter()
            batch = next(batches, None)
            window_wait += time.perf_counter() - fetch_start
            # Every process agrees on stopping and on the end of the epoch at the same step.
            stop, exhausted = ctx.sync_flags(self.stop.requested, batch is None)
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

    def _stop(self) -> str:
        waited = time.monotonic() - self.stop.at if self.stop.at is not None else 0.0
        if self.progress.global_step > 0:
            path = self.save_checkpoint(f"{self.stop.signal_name or 'stop'} received {waited:.1f} s earlier")
            if path is not None:
                log.info("stopping after step %d; resume by restarting the job", self.progress.global_step)
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
        with torch.no_grad():
            for images, labels, _ in self.val_loader.epoch(epoch):
                x = self.pipeline.transform(images.to(self.device, non_blocking=True), train=False)
                y = labels.to(self.device, non_blocking=True)
                with self._autocast():
                    logits = model(x)
                loss_sum += criterion(logits.float(), y).double()
                correct += (logits.argmax(1) == y).sum()
                count += int(y.numel())
        total_loss, total_correct, total = self.ctx.sum(float(loss_sum.item()), float(correct.item()), float(count))
        self.net.train()
        if total == 0:
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
