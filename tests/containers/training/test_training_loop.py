"""The training loop in-process: exact resume, checkpoints, validation, plugins, Pipe mode."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from gpu_train import hyperparameters, sagemaker
from gpu_train.checkpoint import CheckpointManager
from gpu_train.distributed import DistContext
from gpu_train.process import StopFlag
from gpu_train.serving import inference
from gpu_train.train_loop import COMPLETED, STOPPED, Trainer


def train(root: Any, stop_at: int | None = None) -> str:
    """Run one training process in this process; ``stop_at`` requests a stop after that step."""
    env = sagemaker.load(root.env)
    hp = hyperparameters.parse(env.hyperparameters)
    stop = StopFlag()

    def on_step(trainer: Trainer) -> None:
        if trainer.progress.global_step == stop_at:
            stop.request("test")

    return Trainer(env, hp, DistContext(), stop, on_step=on_step).run()


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_stopped_and_resumed_run_ends_with_the_uninterrupted_weights(
    make_root: Callable[..., Any], read_state: Callable[[Path], dict[str, Any]]
) -> None:
    hp = {"epochs": "2", "batch_size": "16", "arch": "resnet_tiny", "width": "8", "num_workers": "2",
          "log_steps": "100", "checkpoint_steps": "4", "lr": "0.05", "augment": "flip_crop"}  # fmt: skip
    baseline = make_root(hp, name="baseline")
    assert train(baseline) == COMPLETED
    resumed = make_root(hp, name="resumed")
    # Stop after step 7: mid-epoch, an odd number of batches from 2 loader workers.
    assert train(resumed, stop_at=7) == STOPPED
    assert resumed.checkpoints == ["checkpoint-000000004.pt", "checkpoint-000000007.pt"]
    assert not (resumed.model_dir / "model.pt").exists()
    state = CheckpointManager(resumed.root / "checkpoints").load(
        resumed.root / "checkpoints" / "checkpoint-000000007.pt"
    )
    assert state["global_step"] == 7 and state["epoch"] == 0
    (rank,) = state["ranks"]
    assert rank["loader"]["consumed"] == [4, 3] and rank["loader"]["next_worker"] == 1
    assert train(resumed) == COMPLETED
    weights = read_state(resumed.model_dir / "model.pt")
    assert_same_weights(read_state(baseline.model_dir / "model.pt"), weights)
    assert any(not torch.equal(weights[k], t) for k, t in state["model"].items())  # it did train after resuming


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(
    make_root: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    root = make_root({**_tiny(), "checkpoint_steps": "3", "epochs": "1"})
    assert train(root, stop_at=5) == STOPPED
    newest = root.root / "checkpoints" / "checkpoint-000000005.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, e.g. by an interrupted sync
    with caplog.at_level("INFO"):
        assert train(root) == COMPLETED
    assert "skipping checkpoint checkpoint-000000005.pt" in caplog.text
    assert "resumed from checkpoint-000000003.pt: epoch 0, step 3" in caplog.text


def _tiny(**extra: str) -> dict[str, str]:
    return {"epochs": "2", "batch_size": "16", "arch": "resnet_tiny", "width": "8", "num_workers": "0",
            "log_steps": "4", "checkpoint_steps": "0", **extra}  # fmt: skip


def test_max_steps_validation_and_exported_config(
    make_root: Callable[..., Any], shards: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(_tiny(max_steps="10", epochs="5"), channels={"train": "File", "validation": "File"})
    (root.root / "input" / "data" / "validation").symlink_to(shards)
    assert train(root) == COMPLETED
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines if " step=" in line] == ["step=4", "step=8"]
    validation = [line for line in lines if "val_loss=" in line]
    assert len(validation) == 1 and validation[0].startswith("epoch=0 val_loss=") and "val_samples=192" in validation[0]
    config = json.loads((root.model_dir / "model_config.json").read_text())
    assert config["trained_steps"] == 10 and config["classes"] == ["class_0", "class_1", "class_2"]
    assert (config["arch"], config["num_classes"], config["image_size"], config["stem"]) == (
        "resnet_tiny",
        3,
        32,
        "cifar",
    )
    assert root.checkpoints == ["checkpoint-000000010.pt"]
    # Restarting a finished job does not train again; it writes the same model.
    before = (root.model_dir / "model.pt").read_bytes()
    assert train(root) == COMPLETED and (root.model_dir / "model.pt").read_bytes() == before


MODEL_PLUGIN = """
import torch
from torch import nn


def build_model(num_classes: int, image_size: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, num_classes))
"""

DECODER_PLUGIN = """
import io

import numpy as np


def decode(sample):
    pixels = np.load(io.BytesIO(sample["npy"]))
    return 255 - pixels, int(sample["cls"])  # an inverted image, to prove this decoder ran
"""


def test_user_model_and_decoder_plugins_train_and_export(make_root: Callable[..., Any]) -> None:
    root = make_root(_tiny(model_module="my_net.py:build_model", dataset_decoder="my_decoder:decode", epochs="1"))
    code = root.root / "input" / "data" / "code"  # the 'code' channel
    code.mkdir()
    (code / "my_net.py").write_text(MODEL_PLUGIN)
    (code / "my_decoder.py").write_text(DECODER_PLUGIN)
    assert train(root) == COMPLETED
    config = json.loads((root.model_dir / "model_config.json").read_text())
    assert (config["arch"], config["module_file"], config["builder"]) == ("custom", "my_net.py", "build_model")
    assert sorted(p.name for p in (root.model_dir / "code").iterdir()) == ["inference.py", "my_net.py"]
    model = inference.model_fn(str(root.model_dir))
    logits = inference.predict_fn(torch.zeros(2, 3, 32, 32), model)
    assert logits.shape == (2, 3)


def test_unknown_plugin_function_is_a_clear_error(make_root: Callable[..., Any]) -> None:
    root = make_root(_tiny(model_module="torch.nn:no_such_builder"))
    with pytest.raises(ValueError, match=r"model_module='torch.nn:no_such_builder': torch.nn has no function"):
        train(root)


def test_pipe_mode_reads_one_fifo_per_pass(make_root: Callable[..., Any], shards: Path) -> None:
    # Pipe mode has no index.json to read image size and classes from: they are hyperparameters.
    root = make_root(_tiny(epochs="2", image_size="32", num_classes="3"), channels={"train": "Pipe"}, data=False)
    data_dir = root.root / "input" / "data"
    shard_bytes = [p.read_bytes() for p in sorted(shards.glob("shard-*.tar"))]
    os.mkfifo(data_dir / "train_0")
    fed: list[int] = []

    def sagemaker_pipe() -> None:
        # SageMaker writes the channel's objects back to back into train_<n>, and creates the next FIFO
        # when the previous one has been read to the end.
        for n in range(2):
            with open(data_dir / f"train_{n}", "wb") as fifo:
                for blob in shard_bytes:
                    fifo.write(blob)
            fed.append(n)
            if n == 0:
                os.mkfifo(data_dir / "train_1")

    feeder = threading.Thread(target=sagemaker_pipe, daemon=True)
    feeder.start()
    assert train(root) == COMPLETED
    feeder.join(timeout=10)
    assert fed == [0, 1]
    state = CheckpointManager(root.root / "checkpoints").load(root.root / "checkpoints" / "checkpoint-000000024.pt")
    assert state["epoch"] == 2 and state["global_step"] == 24  # 2 passes x 192 samples / 16


def test_checkpoints_of_another_model_stop_the_job(make_root: Callable[..., Any]) -> None:
    root = make_root({**_tiny(), "checkpoint_steps": "2", "epochs": "1"})
    assert train(root, stop_at=2) == STOPPED
    (root.root / "input" / "config" / "hyperparameters.json").write_text(json.dumps({**_tiny(), "arch": "resnet18"}))
    with pytest.raises(ValueError, match=r"holds checkpoints of another model \(resnet_tiny, 3 classes; this job"):
        train(root)
