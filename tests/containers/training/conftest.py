"""Fixtures of the training-runtime tests: a small packed image dataset and SageMaker directory trees.

The dataset (3 classes x 64 images, 32x32 after packing, 16 shards of 12 samples) is packed once per
session; each test builds its own ``/opt/ml``-like tree under ``tmp_path`` and points
``GPU_TRAIN_ROOT`` at it, so nothing touches the real ``/opt/ml``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from container_helpers import make_images

from gpu_train import pack

REPO = Path(__file__).resolve().parents[3]
TRAINING_DIR = REPO / "containers" / "training"
NUM_CLASSES = 3
PER_CLASS = 64
IMAGE_SIZE = 32
SHARD_BYTES = 64 * 1024  # 12 samples of 32x32x3 per shard: many shards from little data

# Small, fast settings every training test starts from.
TINY_HP: dict[str, str] = {
    "epochs": "2",
    "batch_size": "16",
    "arch": "resnet_tiny",
    "width": "8",
    "lr": "0.05",
    "log_steps": "2",
    "checkpoint_steps": "0",
    "num_workers": "0",
}


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_images(tmp_path_factory.mktemp("images"), classes=NUM_CLASSES, per_class=PER_CLASS)


@pytest.fixture(scope="session")
def shards(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packed dataset directory (index.json + shard-*.tar)."""
    dest = tmp_path_factory.mktemp("shards") / "train"
    pack.pack(image_folder, str(dest), image_size=IMAGE_SIZE, target_bytes=SHARD_BYTES, seed=1, progress=False)
    return dest


@dataclass
class SmRoot:
    """A SageMaker directory tree (what the container sees under /opt/ml)."""

    root: Path

    @property
    def env(self) -> dict[str, str]:
        # One vCPU: one torch thread per training process, the same in every process of a test (so
        # runs compare bit for bit) and no thread oversubscription on a busy machine.
        return {"GPU_TRAIN_ROOT": str(self.root), "SM_NUM_CPUS": "1"}

    @property
    def failure(self) -> Path:
        return self.root / "output" / "failure"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def checkpoints(self) -> list[str]:
        directory = self.root / "checkpoints"
        return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []

    def failure_text(self) -> str:
        return self.failure.read_text().strip()

    def write_config(
        self,
        hyperparameters: dict[str, str],
        channels: dict[str, str] | None = None,
        hosts: tuple[str, ...] = ("algo-1",),
    ) -> None:
        config = self.root / "input" / "config"
        config.mkdir(parents=True, exist_ok=True)
        (config / "hyperparameters.json").write_text(json.dumps(hyperparameters))
        channels = {"train": "File"} if channels is None else channels
        (config / "inputdataconfig.json").write_text(
            json.dumps(
                {
                    name: {
                        "TrainingInputMode": mode,
                        "S3DistributionType": "FullyReplicated",
                        "RecordWrapperType": "None",
                    }
                    for name, mode in channels.items()
                }
            )
        )
        (config / "resourceconfig.json").write_text(
            json.dumps({"current_host": hosts[0], "hosts": list(hosts), "network_interface_name": "eth0"})
        )


@pytest.fixture
def make_root(tmp_path: Path, shards: Path) -> Callable[..., SmRoot]:
    """``make_root(hp, channels=..., data=True, name=...)``: a fresh tree with the dataset as channel 'train'."""

    def make(
        hyperparameters: dict[str, str] | None = None,
        *,
        channels: dict[str, str] | None = None,
        data: bool | Path = True,
        name: str = "opt_ml",
    ) -> SmRoot:
        root = SmRoot(tmp_path / name)
        root.write_config(dict(TINY_HP if hyperparameters is None else hyperparameters), channels)
        data_dir = root.root / "input" / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        if data:
            source = shards if data is True else Path(data)
            shutil.copytree(source, data_dir / "train")
        return root

    return make


def subprocess_env(extra: dict[str, str]) -> dict[str, str]:
    """Environment for a real entry-point process: the repository's packages importable, one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "GPU_TRAIN_"))}
    paths = [str(TRAINING_DIR), env.get("PYTHONPATH", "")]
    env.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class Entrypoint:
    """Runs ``python -m gpu_train train`` (the image's ENTRYPOINT + CMD) against a SageMaker tree."""

    def start(self, root: SmRoot, **extra_env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "gpu_train", "train"],
            cwd=str(TRAINING_DIR),
            env=subprocess_env({**root.env, **extra_env}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, root: SmRoot, timeout: float = 120, **extra_env: str) -> tuple[int, str]:
        process = self.start(root, **extra_env)
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output


@pytest.fixture(scope="session")
def entrypoint() -> Entrypoint:
    return Entrypoint()


def load_state(path: Path) -> dict[str, Any]:
    import torch

    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


@pytest.fixture(scope="session")
def read_state() -> Callable[[Path], dict[str, Any]]:
    """``read_state(path)``: a state_dict saved with torch.save."""
    return load_state
