"""Atomic checkpoints in ``/opt/ml/checkpoints`` and resumption from the newest valid one.

SageMaker synchronises this directory with ``CheckpointConfig.S3Uri`` and copies it back when a
(spot-)interrupted job restarts. A checkpoint is written to a hidden temporary file in the same
directory, flushed to disk and renamed, so a reader never sees a half-written ``checkpoint-*.pt``; a
file that still fails to load (e.g. cut short by an upload) is skipped in favour of the previous one.

Everything in a checkpoint loads with ``torch.load(..., weights_only=True)``: tensors, numbers,
strings, lists and dicts only.
"""

from __future__ import annotations

import logging
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpu_train.errors import TrainingError

log = logging.getLogger(__name__)

FORMAT = "gpu-train-checkpoint"
VERSION = 1
_NAME = re.compile(r"^checkpoint-(\d{9})\.pt$")


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step:09d}.pt"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def capture_rng(device: torch.device) -> dict[str, Any]:
    """The global RNG states of this process (Python, NumPy, torch CPU and CUDA)."""
    np_state: tuple[Any, ...] = tuple(np.random.get_state())
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class CheckpointManager:
    """Saves, prunes and finds checkpoints in one directory."""

    def __init__(self, directory: Path, keep: int = 2) -> None:
        self.directory = directory
        self.keep = keep

    def list(self) -> list[tuple[int, Path]]:
        """(step, path) of every checkpoint file, newest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = _NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found, reverse=True)

    def save(self, state: dict[str, Any], step: int) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / checkpoint_name(step)
        tmp = self.directory / f".{final.name}.tmp-{os.getpid()}"
        payload = {"format": FORMAT, "version": VERSION, **state}
        with open(tmp, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.directory)
        self.prune()
        return final

    def prune(self) -> None:
        for _, path in self.list()[self.keep :]:
            path.unlink(missing_ok=True)
        for stale in self.directory.glob(".checkpoint-*.tmp-*"):
            stale.unlink(missing_ok=True)

    def load(self, path: Path) -> dict[str, Any]:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"{path} is not a {FORMAT} file")
        if int(state.get("version", 0)) > VERSION:
            raise ValueError(f"{path} has version {state['version']}, newer than this runtime ({VERSION})")
        return state

    def latest(self, validate: Callable[[dict[str, Any]], None] | None = None) -> tuple[Path, dict[str, Any]] | None:
        """The newest checkpoint that loads (and passes ``validate``); broken ones are logged and skipped."""
        for _, path in self.list():
            try:
                state = self.load(path)
                if validate is not None:
                    validate(state)
            except TrainingError:
                raise  # a readable checkpoint that must not be used: a configuration problem, not a broken file
            except Exception as exc:
                log.warning("skipping checkpoint %s: %s: %s", path.name, type(exc).__name__, exc)
                continue
            return path, state
        return None
