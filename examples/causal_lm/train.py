"""Bring your own code: a small character-level causal transformer trained from scratch on text files.

The platform runs this file as one process, or under ``torchrun`` with one process per GPU on every host
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``: https://pytorch.org/docs/stable/elastic/run.html), with each
hyperparameter as a ``--name value`` argument.

* Data: every file matching ``--train_files`` (default ``*.txt``) in the ``train`` channel
  (``SM_CHANNEL_TRAIN``), read as UTF-8 and joined; the vocabulary is the set of characters in it.
* Model: token + position embeddings, pre-norm transformer blocks with causal self-attention
  (``F.scaled_dot_product_attention(is_causal=True)``, which picks flash or memory-efficient kernels on
  GPUs: https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html),
  a head tied to the token embedding; random initialisation.
* Batches: each epoch the text is cut into windows of ``block_size + 1`` characters at a random offset, the
  windows are permuted with ``(seed, epoch)`` and process ``rank`` takes every ``world``-th one. Every process
  gets the same number of batches, and a batch is a pure function of (seed, epoch, rank, world, batch
  number), so a checkpoint only needs the epoch and the batch number to resume.
* ``DistributedDataParallel`` when ``WORLD_SIZE`` > 1 (https://pytorch.org/docs/stable/notes/ddp.html). The
  platform's ``gpu_train.distributed.init`` joins the process group torchrun set up (NCCL on GPUs, gloo on
  CPUs) and returns a ``DistContext`` (rank, world, device) whose small collectives (``sync_flags``, ``sum``,
  ``broadcast``) run on CPU tensors over a separate gloo group; ``gpu_train.distributed.shutdown`` leaves it.
* Autocast on CUDA with the dtype ``gpu_train.train_loop.resolve_amp`` picks: bf16 where supported, else fp16
  with a ``GradScaler`` (https://pytorch.org/docs/stable/amp.html).
* Checkpoints every ``--checkpoint_steps`` steps, at each epoch end and on SIGTERM, written by rank 0 with the
  platform's ``gpu_train.checkpoint.CheckpointManager`` into ``GPU_TRAIN_CHECKPOINT_DIR`` (SageMaker syncs it
  with ``CheckpointConfig.S3Uri``: https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html);
  a start resumes from the newest one that loads. SageMaker sends SIGTERM to stop a job and kills it 120 s
  later (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html): the flag is
  checked every step, the processes agree on it (``DistContext.sync_flags``), and they exit with 143 after the
  checkpoint.
* Export (rank 0) to ``SM_MODEL_DIR``: ``model.pt`` (float32 state_dict), ``config.json``, ``vocab.json``.
  :func:`generate` loads that folder and continues a prompt; it needs only torch (no ``gpu_train``)::

      python -c "from train import generate; print(generate('model', 'The river ', 200))"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

if TYPE_CHECKING:
    from gpu_train.distributed import DistContext
    from gpu_train.process import StopFlag

EXAMPLE = "causal_lm"

log = logging.getLogger(EXAMPLE)


# --------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd={self.n_embd} is not allowed with n_head={self.n_head}; allowed: a multiple of it"
            )


class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention, then a 4x GELU MLP."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.dropout),
        )
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, channels = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(channels, dim=2)
        q, k, v = (t.view(batch, length, self.n_head, channels // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(batch, length, channels)))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


class CharTransformer(nn.Module):
    """(batch, length) token ids -> (batch, length, vocab) next-token logits; ``length <= block_size``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied input and output embeddings
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        length = idx.shape[1]
        if length > self.config.block_size:
            raise ValueError(
                f"input of {length} tokens is not allowed; allowed: at most block_size={self.config.block_size}"
            )
        positions = torch.arange(length, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(positions))
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln_f(x))
        return logits


# ---------------------------------------------------------------------------------------------- text


class Vocab:
    """Characters <-> ids; ``vocab.json`` is the JSON list of characters in id order."""

    def __init__(self, chars: list[str]) -> None:
        self.chars = chars
        self.ids = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> Vocab:
        return cls(sorted(set(text)))

    def encode(self, text: str) -> list[int]:
        unknown = sorted({c for c in text if c not in self.ids})
        if unknown:
            raise ValueError(
                f"text has characters that are not in the vocabulary: {''.join(unknown)!r}; allowed: the "
                f"{len(self.chars)} characters of vocab.json ({''.join(self.chars)!r})"
            )
        return [self.ids[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)


def read_corpus(folder: Path, pattern: str) -> str:
    """Every file in ``folder`` (recursively) matching ``pattern``, in name order, joined with newlines."""
    files = sorted(p for p in folder.rglob(pattern) if p.is_file())
    if not files:
        present = sorted(p.name for p in folder.iterdir())[:10] if folder.is_dir() else []
        raise ValueError(
            f"channel folder {folder} has no file matching --train_files={pattern!r} (it holds: "
            f"{present or 'nothing'}); upload UTF-8 text files or pass --train_files with a pattern that matches them"
        )
    parts = []
    for path in files:
        try:
            parts.append(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path} is not UTF-8 text ({exc}); allowed: UTF-8 text files") from None
    return "\n".join(parts)


class Windows:
    """This process's training windows: the same count per process, a pure function of the arguments."""

    def __init__(self, data: torch.Tensor, block_size: int, batch_size: int, seed: int, rank: int, world: int) -> None:
        self.data = data
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world = world
        # The offset shifts the cut each epoch; the smallest count (offset block_size - 1) sets the epoch length.
        windows = (len(data) - block_size) // block_size
        self.steps_per_epoch = (windows // world) // batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"the text has {len(data)} characters: {max(windows, 0)} windows of block_size={block_size} + 1, "
                f"split over {world} processes, give no process a batch of batch_size={batch_size}; lower "
                "batch_size or block_size, or add text"
            )

    def batch(self, epoch: int, number: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (batch_size, block_size) of batch ``number`` of ``epoch`` for this process."""
        rng = np.random.default_rng([self.seed, epoch])
        offset = int(rng.integers(self.block_size))
        count = (len(self.data) - offset - 1) // self.block_size
        order = rng.permutation(count)[: (count // self.world) * self.world][self.rank :: self.world]
        chosen = order[number * self.batch_size : (number + 1) * self.batch_size]
        starts = torch.from_numpy(offset + chosen * self.block_size)
        rows = self.data[starts[:, None] + torch.arange(self.block_size + 1)]
        return rows[:, :-1], rows[:, 1:]


# ------------------------------------------------------------------------------------ hyperparameters


def str2bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; allowed: true, false, 1, 0, yes, no, on, off")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Train a small character-level causal transformer.")

    def option(name: str, **kwargs: Any) -> None:
        # SageMaker hyperparameter names use underscores; the dashed spelling works too.
        parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", dest=name, **kwargs)

    option("epochs", type=int, default=20, help="passes over the text")
    option("max_steps", type=int, default=0, help="stop after this many optimizer steps in total (0: no limit)")
    option("batch_size", type=int, default=32, help="windows per process (per GPU) and step")
    option("block_size", type=int, default=128, help="context length in characters")
    option("n_layer", type=int, default=4, help="transformer blocks")
    option("n_head", type=int, default=4, help="attention heads (n_embd must be a multiple)")
    option("n_embd", type=int, default=128, help="embedding width")
    option("dropout", type=float, default=0.1, help="dropout rate")
    option("lr", type=float, default=3e-3, help="peak AdamW learning rate")
    option("min_lr_ratio", type=float, default=0.1, help="final learning rate as a share of lr (cosine decay)")
    option("warmup_steps", type=int, default=20, help="linear learning-rate warm-up steps")
    option("weight_decay", type=float, default=0.1, help="AdamW weight decay (matrices only)")
    option("grad_clip", type=float, default=1.0, help="gradient-norm clip (0: off)")
    option("seed", type=int, default=0, help="seed of the initial weights and the window order")
    option("amp", type=str2bool, default=True, help="mixed precision on CUDA (bf16 where supported, else fp16)")
    option("log_steps", type=int, default=10, help="print a metric line every N steps")
    option("checkpoint_steps", type=int, default=100, help="checkpoint every N steps (0: only at epoch ends)")
    option("keep_checkpoints", type=int, default=2, help="checkpoints kept in the checkpoint directory")
    option("train_channel", default="train", help="input channel holding the text files")
    option("train_files", default="*.txt", help="glob of the text files in the channel (searched recursively)")
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The known hyperparameters, checked, and the arguments this script does not know (kept, not fatal)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    for name in ("epochs", "batch_size", "block_size", "n_layer", "n_head", "n_embd", "log_steps", "keep_checkpoints"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)} is not allowed; allowed: an integer >= 1")
    for name in ("max_steps", "warmup_steps", "checkpoint_steps"):
        if getattr(args, name) < 0:
            parser.error(f"--{name}={getattr(args, name)} is not allowed; allowed: an integer >= 0")
    if args.n_embd % args.n_head:
        parser.error(f"--n_embd={args.n_embd} is not allowed with --n_head={args.n_head}; allowed: a multiple of it")
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout={args.dropout} is not allowed; allowed: 0 <= dropout < 1")
    if args.lr <= 0 or not 0.0 <= args.min_lr_ratio <= 1.0:
        parser.error(f"--lr={args.lr} --min_lr_ratio={args.min_lr_ratio} are not allowed; allowed: lr > 0, ratio 0..1")
    return args, unknown


# ---------------------------------------------------------------------------------------------- train


def learning_rate(step: int, total: int, args: argparse.Namespace) -> float:
    """Linear warm-up, then cosine decay to ``lr * min_lr_ratio`` at ``total`` steps (from the step alone)."""
    if step < args.warmup_steps:
        return float(args.lr * (step + 1) / args.warmup_steps)
    fraction = min(1.0, (step - args.warmup_steps) / max(1, total - args.warmup_steps))
    floor = args.lr * args.min_lr_ratio
    return float(floor + (args.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * fraction)))


def channel_folder(name: str) -> Path:
    variable = f"SM_CHANNEL_{name.upper().replace('-', '_').replace('.', '_')}"
    folder = os.environ.get(variable)
    if not folder:
        raise ValueError(
            f"input channel {name!r} is missing: {variable} is not set (channels: "
            f"{os.environ.get('SM_CHANNELS', '[]')}); add a channel named {name!r} to the job, or pass "
            "--train_channel with one of those names"
        )
    return Path(folder)


def train(args: argparse.Namespace, ctx: DistContext, stop: StopFlag) -> int:
    """Resume, train until the end or a stop; returns the exit code (0 done, 143 stopped)."""
    # The platform's helpers are imported here and in main(): generate() works without gpu_train.
    from gpu_train.checkpoint import CheckpointManager
    from gpu_train.process import EXIT_OK, EXIT_STOPPED
    from gpu_train.train_loop import resolve_amp

    device = ctx.device
    text = read_corpus(channel_folder(args.train_channel), args.train_files)
    vocab = Vocab.from_text(text)
    data = torch.tensor(vocab.encode(text), dtype=torch.long)
    windows = Windows(data, args.block_size, args.batch_size, args.seed, ctx.rank, ctx.world)
    total_steps = args.epochs * windows.steps_per_epoch
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)

    torch.manual_seed(args.seed)
    config = ModelConfig(len(vocab.chars), args.block_size, args.n_layer, args.n_head, args.n_embd, args.dropout)
    model = CharTransformer(config).to(device)
    net: nn.Module = model
    if ctx.distributed:
        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    dtype = resolve_amp("auto" if args.amp else "off", device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

    # ---- resume: rank 0 picks the newest checkpoint that loads, every process loads the same file
    checkpoints = CheckpointManager(
        Path(os.environ.get("GPU_TRAIN_CHECKPOINT_DIR", "/opt/ml/checkpoints")), keep=args.keep_checkpoints
    )
    identity = {"example": EXAMPLE, "model": asdict(config), "vocab": vocab.chars}

    def same_run(state: dict[str, Any]) -> None:
        from gpu_train.errors import ConfigError

        if state.get("example") != EXAMPLE or state.get("model") != identity["model"]:
            raise ConfigError(
                f"checkpoint directory {checkpoints.directory} holds checkpoints of another model "
                f"({state.get('example')}: {state.get('model')}; this job: {identity['model']}); give each job its "
                "own checkpoint location"
            )
        if state.get("vocab") != vocab.chars:
            raise ConfigError(
                f"checkpoint directory {checkpoints.directory} holds a model trained on text with another "
                f"vocabulary ({len(state.get('vocab') or [])} characters; this job's text: {len(vocab.chars)}); "
                "train on the same files or give the job its own checkpoint location"
            )

    epoch, batch, step = 0, 0, 0  # batch: batches of `epoch` already trained
    found = checkpoints.latest(same_run) if ctx.is_leader else None
    chosen = ctx.broadcast(str(found[0]) if found else None)
    if chosen is not None:
        state = checkpoints.load(Path(chosen))
        model.load_state_dict(state["model_state"])
        optimizer.load_state_dict(state["optimizer"])
        if state["scaler"]:
            scaler.load_state_dict(state["scaler"])
        epoch, batch, step = int(state["epoch"]), int(state["batch"]), int(state["step"])
        if int(state["world"]) != ctx.world:
            log.warning(
                "checkpoint was written by %d processes, now %d: epoch %d restarts", state["world"], ctx.world, epoch
            )
            batch = 0
        log.info("resumed from step %d (epoch %d, batch %d, %s)", step, epoch, batch, Path(chosen).name)

    def save(reason: str) -> None:
        if ctx.is_leader:
            state = {
                **identity,
                "model_state": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(),
                "epoch": epoch,
                "batch": batch,
                "step": step,
                "world": ctx.world,
            }
            path = checkpoints.save(state, step)
            log.info("checkpoint %s written (%s)", path.name, reason)

    log.info(
        "training on %s x %d processes: %d characters, vocabulary %d, %d steps per epoch, %d parameters, amp=%s",
        device.type,
        ctx.world,
        len(text),
        len(vocab.chars),
        windows.steps_per_epoch,
        sum(p.numel() for p in model.parameters()),
        dtype,
    )
    net.train()
    window_loss, window_steps, started = torch.zeros((), device=device), 0, time.perf_counter()
    while epoch < args.epochs and not (args.max_steps and step >= args.max_steps):
        while batch < windows.steps_per_epoch and not (args.max_steps and step >= args.max_steps):
            if ctx.sync_flags(stop.requested)[0]:
                if step > 0:
                    save(f"{stop.signal_name} received")
                log.info("stopped by %s after step %d; a restarted job resumes here", stop.signal_name, step)
                return EXIT_STOPPED
            x, y = (t.to(device, non_blocking=True) for t in windows.batch(epoch, batch))
            lr = learning_rate(step, total_steps, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
                logits = net(x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if args.grad_clip:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            step, batch = step + 1, batch + 1
            window_loss += loss.detach()
            window_steps += 1
            if step % args.log_steps == 0 or batch == windows.steps_per_epoch:
                tokens = window_steps * args.batch_size * args.block_size * ctx.world
                report(ctx, epoch, step, float(window_loss.item()) / window_steps, lr, tokens, started)
                window_loss.zero_()
                window_steps, started = 0, time.perf_counter()
            if args.checkpoint_steps and step % args.checkpoint_steps == 0 and batch < windows.steps_per_epoch:
                save(f"every {args.checkpoint_steps} steps")  # (an epoch end saves just below)
        if batch >= windows.steps_per_epoch:
            epoch, batch = epoch + 1, 0
            save(f"end of epoch {epoch - 1}")
        else:
            save("max_steps reached")

    if ctx.is_leader:
        export(model, vocab, Path(os.environ.get("SM_MODEL_DIR", "/opt/ml/model")), step)
    return EXIT_OK


def report(ctx: DistContext, epoch: int, step: int, loss: float, lr: float, tokens: int, started: float) -> None:
    """Collective: rank 0 prints the loss averaged over all processes in the platform's metric line format
    (``gpu_train.metrics``: ``epoch=E step=S loss=L ...``, which the job's MetricDefinitions parse)."""
    mean_loss = ctx.sum(loss)[0] / ctx.world
    if ctx.is_leader:
        rate = tokens / max(time.perf_counter() - started, 1e-9)
        print(f"epoch={epoch} step={step} loss={mean_loss:.6f} lr={lr:.6f} tokens_per_sec={rate:.1f}", flush=True)


def export(model: CharTransformer, vocab: Vocab, model_dir: Path, step: int) -> None:
    """``model.pt`` (float32 CPU state_dict), ``config.json`` (the :class:`ModelConfig`) and ``vocab.json``."""
    model_dir.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, model_dir / "model.pt")
    config = {**asdict(model.config), "arch": "CharTransformer", "trained_steps": step}
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (model_dir / "vocab.json").write_text(json.dumps(vocab.chars, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("model written to %s", model_dir)


# -------------------------------------------------------------------------------------------- generate


def load_model(model_dir: str | Path, device: str | torch.device = "cpu") -> tuple[CharTransformer, Vocab]:
    """The exported model (in eval mode) and its vocabulary."""
    folder = Path(model_dir)
    raw = json.loads((folder / "config.json").read_text())
    fields = ModelConfig.__dataclass_fields__
    config = ModelConfig(**{k: v for k, v in raw.items() if k in fields})
    vocab = Vocab(json.loads((folder / "vocab.json").read_text(encoding="utf-8")))
    model = CharTransformer(config)
    model.load_state_dict(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
    return model.to(device).eval(), vocab


@torch.no_grad()
def generate(
    model_dir: str | Path,
    prompt: str,
    n: int,
    *,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> str:
    """The ``n`` characters the exported model in ``model_dir`` writes after ``prompt`` (sampled, seeded).

    ``prompt`` must be non-empty and use only characters of the training text; the model sees its last
    ``block_size`` characters. ``temperature`` > 0 scales the logits; ``top_k`` keeps the k likeliest.
    """
    if n < 0:
        raise ValueError(f"n={n} is not allowed; allowed: n >= 0")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} is not allowed; allowed: > 0")
    if not prompt:
        raise ValueError("prompt '' is not allowed; allowed: at least one character of the training text")
    model, vocab = load_model(model_dir, device)
    if top_k is not None and not 1 <= top_k <= len(vocab.chars):
        raise ValueError(f"top_k={top_k} is not allowed; allowed: 1..{len(vocab.chars)} (the vocabulary size)")
    idx = torch.tensor([vocab.encode(prompt)], dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    out: list[int] = []
    for _ in range(n):
        logits = model(idx[:, -model.config.block_size :])[:, -1, :] / temperature
        if top_k is not None:
            threshold = torch.topk(logits, top_k).values[:, -1:]
            logits = logits.masked_fill(logits < threshold, float("-inf"))
        token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
        idx = torch.cat([idx, token], dim=1)
        out.append(int(token))
    return vocab.decode(out)


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    from gpu_train import distributed
    from gpu_train.process import StopFlag, setup_logging

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
