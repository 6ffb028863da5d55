"""The bring-your-own-code examples (``examples/ddp_shards``, ``examples/causal_lm``) run as a job runs them.

Each test builds a SageMaker-like tree under ``tmp_path``: the example copied as the ``code`` channel, a
``train`` channel, the model, output and checkpoint folders, and the environment the platform's launcher
gives a script (``SM_*``, ``GPU_TRAIN_CHECKPOINT_DIR``, ``GPU_TRAIN_NUM_WORKERS``, ``gpu_train`` on
``PYTHONPATH``). :func:`script_command` is the one place that says how a script is started (``python
train.py`` or ``torchrun``), so the tests switch to the launcher there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from gpu_train import metrics
from gpu_train.pack import encode_npy
from gpu_train.sagemaker import Paths
from gpu_train.shards import INDEX_NAME, DatasetIndex, ShardWriter

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TRAINING_DIR = REPO / "containers" / "training"
TINY_TEXT = EXAMPLES / "causal_lm" / "data" / "tiny.txt"
CHECKPOINT = re.compile(r"^checkpoint-(\d+)\.pt$")
# Variables of the launcher's contract (and torchrun's) that must come from the test, never from the caller.
CONTRACT_PREFIXES = ("SM_", "GPU_TRAIN_", "TORCHELASTIC_")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# ddp_shards data: 3 classes told apart by their dominant colour, 16x16 pixels, 24 shards of 4 samples.
IMAGE_SIZE = 16
CLASSES = ("red", "green", "blue")
SAMPLES = 96
SHARD_BYTES = 12 * 1024


# ------------------------------------------------------------------------------------ running a script


def script_command(example_dir: Path, args: dict[str, str], nproc: int) -> list[str]:
    """How the platform starts ``train.py``: one plain process, or torchrun with ``nproc`` processes."""
    argv = [item for name, value in args.items() for item in (f"--{name}", value)]
    if nproc == 1:
        return [sys.executable, "train.py", *argv]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "train.py",
        *argv,
    ]


def start_script(
    example_dir: Path, args: dict[str, str], env: dict[str, str], nproc: int = 1, *, log: Path
) -> subprocess.Popen[bytes]:
    """Start the example in ``example_dir`` (its working directory, like SageMaker's code folder); output to ``log``."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            script_command(example_dir, args, nproc), cwd=example_dir, env=env, stdout=handle, stderr=subprocess.STDOUT
        )


def run_script(
    example_dir: Path, args: dict[str, str], env: dict[str, str], nproc: int = 1, *, timeout: float = 120
) -> tuple[int, str]:
    """Run the example to its end: (exit code, stdout and stderr)."""
    log = example_dir.parent / f"run-{time.monotonic_ns()}.log"
    process = start_script(example_dir, args, env, nproc, log=log)
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, log.read_text(errors="replace")


class Job(Paths):
    """A SageMaker-like tree for one example under ``root``, laid out as :class:`gpu_train.sagemaker.Paths` says:
    ``code_dir``, the ``train`` channel, ``model_dir``, ``output_data_dir`` and ``checkpoint_dir``."""

    @property
    def channel(self) -> Path:
        return self.data_dir / "train"

    def checkpoint_steps(self) -> list[int]:
        """Steps of the checkpoints on disk, newest first."""
        if not self.checkpoint_dir.is_dir():
            return []
        found = (CHECKPOINT.match(p.name) for p in self.checkpoint_dir.iterdir())
        return sorted((int(m.group(1)) for m in found if m), reverse=True)

    def env(self, args: dict[str, str], *, workers: int = 0) -> dict[str, str]:
        """The launcher's environment for this tree (one host, no GPU, one vCPU per process)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(CONTRACT_PREFIXES) and k not in TORCHRUN_VARS}
        python_path = [str(TRAINING_DIR), env.get("PYTHONPATH", "")]
        env.update(
            PYTHONPATH=os.pathsep.join(p for p in python_path if p),
            PYTHONUNBUFFERED="1",
            PYTHONDONTWRITEBYTECODE="1",
            OMP_NUM_THREADS="1",
            SM_MODEL_DIR=str(self.model_dir),
            SM_OUTPUT_DATA_DIR=str(self.output_data_dir),
            SM_CHANNELS='["train"]',
            SM_CHANNEL_TRAIN=str(self.channel),
            SM_HPS=json.dumps(args),
            SM_HOSTS='["algo-1"]',
            SM_CURRENT_HOST="algo-1",
            SM_NUM_GPUS="0",
            SM_NUM_CPUS="1",
            GPU_TRAIN_CHECKPOINT_DIR=str(self.checkpoint_dir),
            GPU_TRAIN_NUM_WORKERS=str(workers),
        )
        return env


def make_job(tmp_path: Path, example: str, data: Callable[[Path], None]) -> Job:
    job = Job(tmp_path / "opt_ml")
    shutil.copytree(EXAMPLES / example, job.code_dir, ignore=shutil.ignore_patterns("__pycache__"))
    job.channel.mkdir(parents=True)
    data(job.channel)
    for folder in (job.model_dir, job.checkpoint_dir, job.output_data_dir):
        folder.mkdir(parents=True)
    return job


def losses(output: str) -> list[float]:
    """The training losses of the metric lines, parsed with the platform's MetricDefinitions."""
    values = [metrics.parse(line).get("train:loss") for line in output.splitlines()]
    return [v for v in values if v is not None]


def wait_for_checkpoint(job: Job, process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not job.checkpoint_steps():
        if process.poll() is not None:
            pytest.fail(f"script exited with {process.returncode} before its first checkpoint:\n{log.read_text()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no checkpoint within {timeout} s:\n{log.read_text()}")
        time.sleep(0.05)


def stop_and_resume(job: Job, args: dict[str, str], env: dict[str, str], tmp_path: Path) -> tuple[int, str]:
    """SIGTERM after the first checkpoint (expect 143 and a checkpoint), then a run to ``step + 3``.

    Returns the step of the checkpoint the first run stopped at and the second run's output.
    """
    log = tmp_path / "stopped.log"
    process = start_script(job.code_dir, args, env, log=log)
    wait_for_checkpoint(job, process, log)
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert code == 143, output
    assert "stopped by SIGTERM" in output
    stopped_at = job.checkpoint_steps()[0]
    assert stopped_at > 0
    # The newest checkpoint is the one written on SIGTERM, not only a periodic one.
    assert re.search(rf"checkpoint checkpoint-{stopped_at:09d}\.pt written \(SIGTERM received\)", output), output
    assert not (job.model_dir / "model.pt").exists()  # a stopped job exports nothing

    code, output = run_script(job.code_dir, {**args, "max_steps": str(stopped_at + 3)}, env)
    assert code == 0, output
    assert re.search(rf"resumed from step {stopped_at}\b", output), output
    return stopped_at, output


def import_example(example: str) -> ModuleType:
    """An example's ``train.py`` imported under a private name (both examples are called ``train``)."""
    spec = importlib.util.spec_from_file_location(f"example_{example}_train", EXAMPLES / example / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------ ddp_shards


def colour_samples(count: int = SAMPLES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(count, 16, 16, 3) uint8 noise whose class channel is brighter, and the labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(len(CLASSES), size=count)
    pixels = (rng.random((count, IMAGE_SIZE, IMAGE_SIZE, 3)) * 60 + 30).astype(np.uint8)
    pixels[np.arange(count), :, :, labels] += 150
    return pixels, labels


def write_shards(folder: Path) -> None:
    """The samples as ``gpuctl shard`` writes them: ``.npy`` + ``.cls`` members, and ``index.json``."""
    pixels, labels = colour_samples()
    writer = ShardWriter(folder, SHARD_BYTES)
    for number, (image, label) in enumerate(zip(pixels, labels, strict=True)):
        writer.add(f"{number:09d}", [("npy", encode_npy(image)), ("cls", str(int(label)).encode())])
    index = DatasetIndex(
        shards=writer.close(),
        sample={
            "image": {"ext": "npy", "dtype": "uint8", "layout": "HWC", "shape": [IMAGE_SIZE, IMAGE_SIZE, 3]},
            "label": {"ext": "cls"},
        },
        classes=list(CLASSES),
        image_size=IMAGE_SIZE,
    )
    (folder / INDEX_NAME).write_text(index.to_json())


DDP_ARGS = {"epochs": "3", "batch_size": "8", "width": "8", "log_steps": "2", "checkpoint_steps": "0"}


@pytest.mark.slow
def test_ddp_shards_trains_two_processes_and_exports(tmp_path: Path) -> None:
    import torch

    job = make_job(tmp_path, "ddp_shards", write_shards)
    args = {**DDP_ARGS, "sagemaker_region": "eu-west-1"}  # a name the script does not know: logged, not fatal
    code, output = run_script(job.code_dir, args, job.env(args), nproc=2)

    assert code == 0, output
    assert "training on cpu x 2 processes" in output
    assert "ignoring arguments this script does not know: --sagemaker_region eu-west-1" in output
    # 24 shards of 4 samples, 12 per process: 6 steps of 8 per epoch.
    config = json.loads((job.model_dir / "model_config.json").read_text())
    assert config["trained_steps"] == 18
    assert (config["num_classes"], config["image_size"], config["classes"]) == (3, IMAGE_SIZE, list(CLASSES))
    values = losses(output)
    assert len(values) == 9, output
    assert values[-1] < 0.5 * values[0], values
    assert job.checkpoint_steps()[0] == 18

    example = import_example("ddp_shards")
    model = example.SmallCNN(config["num_classes"], config["width"])
    model.load_state_dict(torch.load(job.model_dir / "model.pt", map_location="cpu", weights_only=True))
    pixels, labels = colour_samples()
    mean, std = torch.tensor(config["mean"]).view(1, 3, 1, 1), torch.tensor(config["std"]).view(1, 3, 1, 1)
    with torch.no_grad():
        predicted = model.eval()(example.to_input(torch.from_numpy(pixels), torch.device("cpu"), mean, std))
    accuracy = float((predicted.argmax(1).numpy() == labels).mean())
    assert accuracy > 0.9


@pytest.mark.slow
def test_ddp_shards_sigterm_checkpoints_and_resumes(tmp_path: Path) -> None:
    job = make_job(tmp_path, "ddp_shards", write_shards)
    # Enough epochs never to finish on its own; one loader worker process, as on a real instance.
    args = {**DDP_ARGS, "epochs": "1000", "checkpoint_steps": "3", "log_steps": "3"}
    stopped_at, output = stop_and_resume(job, args, job.env(args, workers=1), tmp_path)

    config = json.loads((job.model_dir / "model_config.json").read_text())
    assert config["trained_steps"] == stopped_at + 3
    assert losses(output)


# ------------------------------------------------------------------------------------------- causal_lm


def copy_text(folder: Path) -> None:
    shutil.copyfile(TINY_TEXT, folder / "tiny.txt")


LM_ARGS = {
    "epochs": "4",
    "batch_size": "8",
    "block_size": "64",
    "n_layer": "2",
    "n_head": "4",
    "n_embd": "64",
    "warmup_steps": "5",
    "log_steps": "5",
    "checkpoint_steps": "0",
}


@pytest.fixture(scope="module")
def lm_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Job, int, str]:
    """causal_lm trained by two processes under torchrun: (job, exit code, output)."""
    job = make_job(tmp_path_factory.mktemp("causal_lm"), "causal_lm", copy_text)
    code, output = run_script(job.code_dir, LM_ARGS, job.env(LM_ARGS), nproc=2)
    return job, code, output


@pytest.mark.slow
def test_causal_lm_trains_two_processes_and_exports(lm_job: tuple[Job, int, str]) -> None:
    job, code, output = lm_job
    assert code == 0, output
    assert "training on cpu x 2 processes" in output
    for name in ("model.pt", "config.json", "vocab.json"):
        assert (job.model_dir / name).is_file(), name
    vocab = json.loads((job.model_dir / "vocab.json").read_text(encoding="utf-8"))
    assert vocab == sorted(set(TINY_TEXT.read_text(encoding="utf-8")))
    config = json.loads((job.model_dir / "config.json").read_text())
    assert (config["vocab_size"], config["block_size"], config["n_layer"]) == (len(vocab), 64, 2)
    # 5679 characters: 87 windows of 65, 43 per process, 5 batches of 8 per epoch, 4 epochs.
    assert config["trained_steps"] == 20
    values = losses(output)
    assert len(values) == 4, output
    assert values[-1] < 0.85 * values[0], values


@pytest.mark.slow
def test_causal_lm_generate_loads_the_exported_model(lm_job: tuple[Job, int, str]) -> None:
    job, code, output = lm_job
    assert code == 0, output
    example = import_example("causal_lm")
    vocab = set(json.loads((job.model_dir / "vocab.json").read_text(encoding="utf-8")))

    text = example.generate(job.model_dir, "The miller ", 80)
    assert isinstance(text, str) and len(text) == 80
    assert set(text) <= vocab
    assert example.generate(job.model_dir, "The miller ", 80) == text  # seeded
    assert len(example.generate(job.model_dir, "the " * 30, 5, top_k=3)) == 5  # prompt longer than block_size
    with pytest.raises(ValueError, match=r"not in the vocabulary: 'Z'"):
        example.generate(job.model_dir, "Zebra", 5)


@pytest.mark.slow
def test_causal_lm_sigterm_checkpoints_and_resumes(tmp_path: Path) -> None:
    job = make_job(tmp_path, "causal_lm", copy_text)
    args = {**LM_ARGS, "epochs": "1000", "checkpoint_steps": "3", "log_steps": "3"}
    stopped_at, output = stop_and_resume(job, args, job.env(args), tmp_path)

    config = json.loads((job.model_dir / "config.json").read_text())
    assert config["trained_steps"] == stopped_at + 3
    assert losses(output)


# ----------------------------------------------------------------------------------------- in process


@pytest.mark.parametrize("example", ["ddp_shards", "causal_lm"])
def test_arguments_tolerate_unknown_names_and_check_values(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = import_example(example)
    args, unknown = module.parse_args(["--epochs", "3", "--batch-size", "4", "--amp", "false", "--sagemaker_x", "1"])
    assert (args.epochs, args.batch_size, args.amp) == (3, 4, False)
    assert unknown == ["--sagemaker_x", "1"]

    with pytest.raises(SystemExit):
        module.parse_args(["--amp", "maybe"])
    assert "'maybe' is not a boolean; allowed: true, false" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.parse_args(["--batch_size", "0"])
    assert "--batch_size=0 is not allowed; allowed: an integer >= 1" in capsys.readouterr().err


def test_causal_lm_windows_split_the_text_between_processes() -> None:
    import torch

    example = import_example("causal_lm")
    data = torch.arange(1000)  # token i at position i: a window's start is its first value
    splits = [example.Windows(data, 16, 4, seed=3, rank=rank, world=2) for rank in (0, 1)]
    assert [w.steps_per_epoch for w in splits] == [7, 7]  # 61 windows, 30 per process, 7 full batches
    starts: list[set[int]] = []
    for windows in splits:
        x, y = windows.batch(epoch=0, number=2)
        assert x.shape == y.shape == (4, 16)
        assert torch.equal(y, x + 1)  # targets are the inputs shifted by one
        seen = {int(windows.batch(0, n)[0][row, 0]) for n in range(windows.steps_per_epoch) for row in range(4)}
        assert len(seen) == 28
        starts.append(seen)
    assert not starts[0] & starts[1]
    assert len({s % 16 for s in starts[0] | starts[1]}) == 1  # one cut (offset) per epoch
    assert torch.equal(splits[0].batch(1, 0)[0], splits[0].batch(1, 0)[0])
    assert not torch.equal(splits[0].batch(0, 0)[0], splits[0].batch(1, 0)[0])

    with pytest.raises(ValueError, match=r"give no process a batch of batch_size=64"):
        example.Windows(data, 16, 64, seed=0, rank=0, world=2)


def test_causal_lm_reads_every_text_file_and_names_a_missing_one(tmp_path: Path) -> None:
    example = import_example("causal_lm")
    (tmp_path / "b.txt").write_text("second")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "a.txt").write_text("first")
    (tmp_path / "notes.md").write_text("ignored")
    assert example.read_corpus(tmp_path, "*.txt") == "second\nfirst"  # path order: b.txt < nested/a.txt
    with pytest.raises(ValueError, match=r"no file matching --train_files='\*\.csv'"):
        example.read_corpus(tmp_path, "*.csv")


def test_ddp_shards_waits_for_the_copy_of_the_batch_whose_slot_the_next_request_frees() -> None:
    """The loader keeps a batch valid until ``hold`` more are asked for; on a GPU the example's ``non_blocking``
    copies only queue, so before each request it waits for the copy of the batch that request frees."""
    import torch

    train = import_example("ddp_shards")
    log: list[str] = []

    class Event:
        count = 0

        def __init__(self) -> None:
            Event.count += 1
            self.name = f"copy{Event.count}"

        def record(self) -> None:
            log.append(f"record {self.name}")

        def synchronize(self) -> None:
            log.append(f"wait {self.name}")

    fence = train.CopyFence(3, torch.device("cuda", 0), new_event=Event)
    for batch in range(1, 6):
        fence.before_next()
        log.append(f"next {batch}")
        fence.copied()
    assert log == [
        "next 1", "record copy1", "next 2", "record copy2", "next 3", "record copy3",
        "wait copy1", "next 4", "record copy4", "wait copy2", "next 5", "record copy5",
    ]  # fmt: skip
    cpu = train.CopyFence(3, torch.device("cpu"), new_event=Event)
    for _ in range(5):
        cpu.before_next()
        cpu.copied()
    assert not cpu.pending  # nothing is queued on the CPU: nothing to wait for
