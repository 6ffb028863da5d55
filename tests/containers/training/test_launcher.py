"""``python -m gpu_train launch``: any script from the ``code`` channel, run the way SageMaker script mode runs it.

* a script sees its hyperparameters as ``--name value`` and the training toolkit's ``SM_*`` variables, with its
  code in a .tar.gz, a .zip or a plain directory channel; the built-in trainer runs as the default code;
* torchrun with 2 processes (gloo on CPU); when rank 1 fails first, its error is the job's failure reason;
* a crash, ``sys.exit(3)`` and CUDA on a CPU instance end with exit 1 and the cause in the failure file;
* ``requirements.txt``: refused without a route to a package index, installed offline from ``wheels/``;
* SIGTERM reaches the script, which checkpoints and exits 143; the launcher exits 143 with no failure file;
* start-up problems (no code channel, a bad entry point, an unsafe archive, a bad flag) end in the failure file;
* TensorFlow (a stand-in module): ``TF_FORCE_GPU_ALLOW_GROWTH``, ``TF_CONFIG`` on 2 hosts, the GPU check;
* torchrun's EFA and NCCL variables are those the training toolkit's own torchrun launch sets for the same tree
  (EFA with and without RDMA, no EFA; 1 and 2 hosts; the job's own values), and its instance lists are the
  launcher's.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from container_helpers import toolkit_environ

from gpu_train import gpu_check, launcher, sagemaker
from gpu_train.errors import ConfigError

TRAINING_DIR = Path(__file__).resolve().parents[3] / "containers" / "training"

SEEN_SCRIPT = """
import argparse, json, os, sys
import helper  # next to the script: the script's directory is on sys.path
import gpu_train.sagemaker  # the platform's package is importable from any script

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
parser.add_argument("--optimizer")
args, _ = parser.parse_known_args()
tf = ("TF_CONFIG", "TF_FORCE_GPU_ALLOW_GROWTH")
names = sorted(k for k in os.environ if k.startswith(("SM_", "GPU_TRAIN_")) or k in tf)
seen = {
    "argv": sys.argv[1:], "lr": args.lr, "optimizer": args.optimizer, "helper": helper.VALUE,
    "env": {k: os.environ[k] for k in names + ["PYTHONPATH", "PYTHONUNBUFFERED"]},
    "cwd": os.getcwd(), "name": __name__, "path0": sys.path[0],
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
"""

FAKE_TENSORFLOW = """
__version__ = "2.99.0"

class config:
    @staticmethod
    def list_physical_devices(kind):
        return []

class test:
    @staticmethod
    def is_built_with_cuda():
        return False
"""


class Job:
    """A SageMaker tree (``GPU_TRAIN_ROOT``) with a ``code`` channel."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def code(self) -> Path:
        return self.root / "input" / "data" / "code"

    @property
    def failure(self) -> Path:
        return self.root / "output" / "failure"

    @property
    def env(self) -> dict[str, str]:
        return {"GPU_TRAIN_ROOT": str(self.root), "SM_NUM_CPUS": "1"}

    def failure_text(self) -> str:
        return self.failure.read_text().strip()

    def configure(
        self,
        hyperparameters: dict[str, str] | None = None,
        *,
        channels: tuple[str, ...] = ("code",),
        hosts: tuple[str, ...] = ("algo-1",),
        current_host: str = "algo-1",
        instance_type: str | None = None,
    ) -> Job:
        config = self.root / "input" / "config"
        config.mkdir(parents=True, exist_ok=True)
        (config / "hyperparameters.json").write_text(json.dumps(hyperparameters or {}))
        data = {name: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"} for name in channels}
        (config / "inputdataconfig.json").write_text(json.dumps(data))
        resource: dict[str, Any] = {
            "current_host": current_host,
            "hosts": list(hosts),
            "network_interface_name": "eth0",
        }
        if instance_type:
            resource["current_instance_type"] = instance_type
        (config / "resourceconfig.json").write_text(json.dumps(resource))
        for name in channels:
            (self.root / "input" / "data" / name).mkdir(parents=True, exist_ok=True)
        return self

    def script(self, text: str, name: str = "train.py") -> Job:
        (self.code / name).write_text(text)
        return self

    def seen(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "model" / "seen.json").read_text())
        return data

    def start(self, *args: str, pythonpath: str = "", **extra_env: str) -> subprocess.Popen[str]:
        """``python -m gpu_train launch ARGS`` (the job's ContainerEntrypoint) as its own process."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "GPU_TRAIN_"))}
        paths = [str(TRAINING_DIR), pythonpath, env.get("PYTHONPATH", "")]
        env.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), OMP_NUM_THREADS="1", **self.env, **extra_env)
        return subprocess.Popen(
            [sys.executable, "-m", "gpu_train", "launch", *args],
            cwd=str(TRAINING_DIR),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, *args: str, timeout: float = 60, **kwargs: str) -> tuple[int, str]:
        process = self.start(*args, **kwargs)
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output

    def launch(self, entry: str = "train.py", **kwargs: Any) -> int:
        """The ``launch`` command in this process (start-up failures; cheaper than a new process)."""
        return launcher.launch(entry, environ=self.env, install_signals=False, **kwargs)


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job(tmp_path / "opt_ml")


def _pure_wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A minimal pure-Python wheel (PEP 427: the package files, METADATA, WHEEL and RECORD)."""
    info = f"{name}-{version}.dist-info"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in contents.items():
            zf.writestr(path, text)
    return wheel


# ------------------------------------------------------------------------------------- the script's view

HP = {
    "optimizer": '"adamw"',  # the SageMaker SDK JSON-encodes string values
    "lr": "0.5",
    "sagemaker_program": '"train.py"',
    "sagemaker_submit_directory": '"s3://bucket/code/sourcedir.tar.gz"',
}
#: The launcher's settings, where the platform puts them for your own code: the request's Environment.
LAUNCHER_ENV = {"GPU_TRAIN_PROCESSES_PER_HOST": "1", "GPU_TRAIN_NUM_WORKERS": "3"}


def _pack_code(job: Job, layout: str) -> Path:
    """Put ``train.py`` and ``helper.py`` into the code channel as ``layout``; returns the code directory."""
    files = {"train.py": SEEN_SCRIPT, "helper.py": "VALUE = 42\n"}
    if layout == "directory":
        for name, text in files.items():
            job.script(text, name)
        return job.code
    if layout == "tar.gz":
        with tarfile.open(job.code / "sourcedir.tar.gz", "w:gz") as tar:
            for name, text in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(text.encode())
                tar.addfile(info, io.BytesIO(text.encode()))
    else:
        with zipfile.ZipFile(job.code / "sourcedir.zip", "w") as zf:
            for name, text in files.items():
                zf.writestr(name, text)
    return job.root / "code"


def _python_path(*entries: str | Path) -> str:
    return os.pathsep.join(dict.fromkeys(str(e) for e in entries if str(e)))


@pytest.mark.parametrize("layout", ["tar.gz", "zip", "directory"])
def test_script_gets_hyperparameters_as_arguments_and_the_sagemaker_environment(job: Job, layout: str) -> None:
    """A CPU job (ml.m5.xlarge), pinned as one: ``CUDA_VISIBLE_DEVICES=''`` hides a GPU of the machine that runs
    the test, so ``SM_NUM_GPUS`` is 0 on any host (test_training_gpu.py runs a script on the GPU)."""
    job.configure(HP, channels=("code", "train-data.v2"), instance_type="ml.m5.xlarge")
    code_dir = _pack_code(job, layout)
    # The job's Environment wins over the launcher's defaults.
    code, output = job.run(
        "--entry-point", "train.py", SM_USER_ARGS='["set by the job"]', CUDA_VISIBLE_DEVICES="", **LAUNCHER_ENV
    )  # fmt: skip
    assert code == 0, output
    seen, root = job.seen(), job.root
    args = ["--lr", "0.5", "--optimizer", "adamw"]  # sorted by name (the toolkit's order), the SDK's names left out
    assert seen["argv"] == args and seen["lr"] == 0.5 and seen["optimizer"] == "adamw" and seen["helper"] == 42
    assert seen["name"] == "__main__" and seen["cwd"] == str(code_dir) and seen["path0"] == str(code_dir)
    # The toolkit's other variables (test_toolkit_env_parity.py compares every one with the toolkit's value).
    toolkit_rest = {
        "SM_CHANNEL_TRAIN-DATA.V2", "SM_CURRENT_INSTANCE_GROUP", "SM_CURRENT_INSTANCE_GROUP_HOSTS",
        "SM_DISTRIBUTION_INSTANCE_GROUPS", "SM_FRAMEWORK_MODULE", "SM_FRAMEWORK_PARAMS", "SM_INPUT_DATA_CONFIG",
        "SM_INSTANCE_GROUPS", "SM_INSTANCE_GROUPS_DICT", "SM_IS_HETERO", "SM_LOG_LEVEL", "SM_MODULE_DIR",
        "SM_MODULE_NAME", "SM_NUM_NEURONS", "SM_OUTPUT_INTERMEDIATE_DIR", "SM_RESOURCE_CONFIG", "SM_TRAINING_ENV",
    }  # fmt: skip
    assert toolkit_rest <= set(seen["env"]) and seen["env"]["SM_MODULE_NAME"] == "train"
    assert {k: v for k, v in seen["env"].items() if k not in toolkit_rest} == {
        "GPU_TRAIN_CHECKPOINT_DIR": str(root / "checkpoints"),
        "GPU_TRAIN_NUM_WORKERS": "3",
        "GPU_TRAIN_PROCESSES_PER_HOST": "1",
        "GPU_TRAIN_ROOT": str(root),
        "PYTHONPATH": _python_path(code_dir, TRAINING_DIR, *os.environ.get("PYTHONPATH", "").split(os.pathsep)),
        "PYTHONUNBUFFERED": "1",
        "SM_CHANNELS": '["code","train-data.v2"]',  # the toolkit's compact JSON
        "SM_CHANNEL_CODE": str(job.code),
        "SM_CHANNEL_TRAIN_DATA_V2": str(root / "input" / "data" / "train-data.v2"),
        "SM_CURRENT_HOST": "algo-1",
        "SM_CURRENT_INSTANCE_TYPE": "ml.m5.xlarge",
        "SM_HOSTS": '["algo-1"]',
        "SM_HPS": '{"lr":0.5,"optimizer":"adamw"}',
        "SM_HP_LR": "0.5",
        "SM_HP_OPTIMIZER": "adamw",
        "SM_INPUT_CONFIG_DIR": str(root / "input" / "config"),
        "SM_INPUT_DIR": str(root / "input"),
        "SM_MODEL_DIR": str(root / "model"),
        "SM_NETWORK_INTERFACE_NAME": "eth0",
        "SM_NUM_CPUS": "1",
        "SM_NUM_GPUS": "0",
        "SM_OUTPUT_DATA_DIR": str(root / "output" / "data"),
        "SM_OUTPUT_DIR": str(root / "output"),
        "SM_USER_ARGS": '["set by the job"]',
        "SM_USER_ENTRY_POINT": "train.py",
    }
    assert (root / "checkpoints").is_dir() and not job.failure.exists()
    assert f"-m gpu_train.script_runner {code_dir / 'train.py'} --lr 0.5 --optimizer adamw" in output


def test_script_arguments_are_every_hyperparameter_but_the_sdks_sorted_and_decoded() -> None:
    raw = {"b": "1", "processes_per_host": "2", "a": '"x y"', "num_workers": "0", "sagemaker_region": '"r"'}
    assert launcher.script_arguments(raw) == ["-a", "x y", "-b", "1", "--num_workers", "0", "--processes_per_host", "2"]
    assert launcher.script_hyperparameters(raw) == {"b": 1, "processes_per_host": 2, "a": "x y", "num_workers": 0}


def test_a_script_with_only_its_own_options_gets_exactly_its_hyperparameters(job: Job) -> None:
    """``argparse`` with ``parse_args()`` (not ``parse_known_args``) exits 2 on any name it does not declare:
    the launcher's settings in the job's Environment never reach the script's arguments or SM_HPS."""
    script = (
        "import argparse, json, os, sys\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--lr', type=float, required=True)\n"
        "args = parser.parse_args()\n"
        "seen = {'argv': sys.argv[1:], 'lr': args.lr, 'hps': os.environ['SM_HPS'],"
        " 'user_args': os.environ['SM_USER_ARGS'], 'workers': os.environ['GPU_TRAIN_NUM_WORKERS']}\n"
        "open(os.path.join(os.environ['SM_MODEL_DIR'], 'seen.json'), 'w').write(json.dumps(seen))\n"
    )
    job.configure({"lr": "0.01"}).script(script)
    code, output = job.run("--entry-point", "train.py", CUDA_VISIBLE_DEVICES="", **LAUNCHER_ENV)
    assert code == 0, output
    assert job.seen() == {
        "argv": ["--lr", "0.01"], "lr": 0.01, "hps": '{"lr":0.01}', "user_args": '["--lr","0.01"]', "workers": "3"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("hp", "environ", "expected"),
    [
        ({}, {}, (0, -1, "auto")),  # the defaults
        (
            {},
            {"GPU_TRAIN_PROCESSES_PER_HOST": "2", "GPU_TRAIN_NUM_WORKERS": "3", "GPU_TRAIN_EXPECT_GPU": "false"},
            (2, 3, "false"),
        ),
        ({"processes_per_host": "1", "num_workers": '"0"'}, {"GPU_TRAIN_PROCESSES_PER_HOST": "2"}, (1, 0, "auto")),
    ],
    ids=["defaults", "environment", "a-named-hyperparameter-wins"],
)
def test_launcher_settings_come_from_the_hyperparameter_else_the_environment(
    hp: dict[str, str], environ: dict[str, str], expected: tuple[int, int, str]
) -> None:
    names = ("processes_per_host", "num_workers", "expect_gpu")
    assert tuple(launcher.setting(hp, environ, name) for name in names) == expected


def test_a_bad_launcher_setting_in_the_environment_names_the_variable() -> None:
    with pytest.raises(ValueError, match=r"processes_per_host \(environment GPU_TRAIN_PROCESSES_PER_HOST\)='x'"):
        launcher.setting({}, {"GPU_TRAIN_PROCESSES_PER_HOST": "x"}, "processes_per_host")


def test_torchrun_command_uses_master_addr_over_the_first_host() -> None:
    resource = sagemaker.ResourceConfig(current_host="algo-2", hosts=("algo-1", "algo-2"))
    target = ["-m", "gpu_train.script_runner", "/c/train.py", "--lr", "1"]
    cmd = launcher.torchrun_command(resource, 4, master_port=29600, master_addr="127.0.0.1", target=target)
    assert cmd[1:] == ["-m", "torch.distributed.run", "--nproc_per_node=4", "--nnodes=2", "--node_rank=1",
                       "--master_addr=127.0.0.1", "--master_port=29600", *target]  # fmt: skip
    assert "--master_addr=algo-1" in launcher.torchrun_command(resource, 1)


def _gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """The start-up GPU check reports ``count`` usable GPUs (A10G), whatever the machine running the test has."""
    devices = [gpu_check.Device(i, "NVIDIA A10G", "8.6", 22.0) for i in range(count)]

    def startup_check(**_: Any) -> gpu_check.GpuFacts:
        return gpu_check.GpuFacts(torch_version="2.8.0", torch_cuda="12.9", devices=devices, torch_checked=True)

    monkeypatch.setattr(gpu_check, "startup_check", startup_check)


@pytest.mark.parametrize(
    ("hp", "distribution", "hosts", "gpus", "expected"),
    [
        ({}, "auto", 1, 0, (1, False, 1)),  # one process in all: plain
        ({"processes_per_host": "2"}, "auto", 1, 0, (2, True, 1)),
        ({}, "auto", 2, 0, (1, True, 1)),  # two hosts: torchrun
        ({}, "torchrun", 1, 0, (1, True, 1)),
        ({}, "single", 2, 0, (1, False, 1)),
        ({"num_workers": "-1", "processes_per_host": "2"}, "auto", 1, 0, (2, True, 3)),  # SM_NUM_CPUS=8 / 2 - 1
        ({}, "auto", 1, 1, (1, False, 1)),  # one GPU: one plain process
        ({}, "auto", 1, 4, (4, True, 1)),  # one process per GPU
        ({"processes_per_host": "2"}, "auto", 2, 4, (2, True, 1)),
        ({}, "single", 1, 4, (1, False, 1)),
    ],
)
def test_processes_per_host_and_distribution(
    job: Job,
    monkeypatch: pytest.MonkeyPatch,
    hp: dict[str, str],
    distribution: str,
    hosts: int,
    gpus: int,
    expected: tuple[int, bool, int],
) -> None:
    """The plan for a host whose GPU check saw ``gpus`` GPUs (pinned: the same on a CPU and on a GPU machine)."""
    _gpus(monkeypatch, gpus)
    job.configure({"num_workers": "1", **hp}, hosts=tuple(f"algo-{i + 1}" for i in range(hosts)))
    env = sagemaker.load({**job.env, "SM_NUM_CPUS": "8"})
    plan = launcher.plan(env, job.env, framework="pytorch", distribution=distribution)
    assert (plan.processes_per_host, plan.torchrun, plan.num_workers) == expected
    assert plan.framework == "pytorch" and plan.num_gpus == gpus


def test_more_script_processes_than_gpus_are_started_with_a_warning_naming_the_gpus(
    job: Job, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A script may share one GPU between processes over gloo, so the launcher starts them; NCCL would refuse."""
    _gpus(monkeypatch, 1)
    job.configure({"processes_per_host": "2"})
    plan = launcher.plan(sagemaker.load(job.env), job.env, framework="pytorch", distribution="auto")
    assert (plan.processes_per_host, plan.torchrun, plan.num_gpus) == (2, True, 1)
    assert (
        "hyperparameter processes_per_host=2 starts more processes than the 1 GPU(s) torch sees (cuda:0 NVIDIA "
        "A10G): LOCAL_RANK 1 and up have no GPU of their own"
    ) in caplog.text


@pytest.mark.parametrize(
    ("framework", "distribution", "message"),
    [
        ("pytorch", "single", "hyperparameter processes_per_host=2 is not allowed with --distribution single"),
        ("tensorflow", "auto", "hyperparameter processes_per_host=2 is not allowed with TensorFlow; allowed: 0 or 1"),
        ("tensorflow", "torchrun", "--distribution torchrun is not allowed with TensorFlow; allowed: auto or single"),
    ],
)
def test_conflicting_process_settings_are_refused(job: Job, framework: str, distribution: str, message: str) -> None:
    job.configure({"processes_per_host": "2"})
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(")):
        launcher.plan(sagemaker.load(job.env), job.env, framework=framework, distribution=distribution)


# ------------------------------------------------------------------------------------ the default code


@pytest.mark.slow
def test_default_code_is_the_built_in_trainer(make_root: Callable[..., Any]) -> None:
    """``default_code/train.py`` through the launcher, as one plain process: the trainer reads the contract
    itself and ignores the ``--name value`` arguments."""
    hp = {"epochs": "1", "batch_size": "32", "arch": "resnet_tiny", "width": "8", "log_steps": "3",
          "checkpoint_steps": "0", "num_workers": "0"}  # fmt: skip
    root = make_root(hp, channels={"train": "File", "code": "File"})
    code = root.root / "input" / "data" / "code"
    code.mkdir()
    shutil.copy(TRAINING_DIR / "default_code" / "train.py", code / "train.py")
    job = Job(root.root)
    rc, output = job.run("--entry-point", "train.py")
    assert rc == 0, output
    assert "as 1 processes on 1 hosts" in output and "--arch resnet_tiny --batch_size 32" in output
    assert "epoch 0: 6 steps trained 192 of 192 samples of channel 'train'" in output
    assert sorted(p.name for p in root.model_dir.iterdir()) == ["code", "model.pt", "model_config.json"]


# -------------------------------------------------------------------------------------------- torchrun

RANK_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
rank = os.environ["RANK"]
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump({"world": dist.get_world_size(), "sum": total.item(), "argv": sys.argv[1:],
               "local_world": os.environ["LOCAL_WORLD_SIZE"], "workers": os.environ["GPU_TRAIN_NUM_WORKERS"]}, f)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torchrun_runs_one_script_process_per_rank(job: Job) -> None:
    job.configure({"epochs": "3"}).script(RANK_SCRIPT)
    code, output = job.run("--entry-point", "train.py", GPU_TRAIN_PROCESSES_PER_HOST="2")
    assert code == 0, output
    assert "--nproc_per_node=2 --standalone -m gpu_train.script_runner" in output
    ranks = {p.name: json.loads(p.read_text()) for p in (job.root / "model").glob("rank-*.json")}
    expected = {"world": 2, "sum": 3.0, "argv": ["--epochs", "3"], "local_world": "2", "workers": "1"}
    assert ranks == {"rank-0.json": expected, "rank-1.json": expected}


FIRST_FAILURE_SCRIPT = """
import os, time
if os.environ["RANK"] == "1":
    raise RuntimeError("rank 1 ran out of memory")
time.sleep(1.0)
raise ValueError("rank 0 saw a peer fail")  # secondary (if torchrun has not stopped it): never the cause
"""


@pytest.mark.slow
def test_the_first_rank_to_fail_names_the_cause(job: Job) -> None:
    job.configure({"processes_per_host": "2"}).script(FIRST_FAILURE_SCRIPT)
    code, output = job.run("--entry-point", "train.py")
    assert code == 1, output
    assert job.failure_text() == "RuntimeError: rank 1 ran out of memory"
    assert "Traceback (most recent call last)" in output


# -------------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("script", "failure"),
    [
        ('raise ValueError("bad lr 5")\n', "ValueError: bad lr 5"),
        ("import sys\nsys.exit(3)\n", "train.py exited with code 3"),
        ('import sys\nsys.exit("no data in /opt/ml/input")\n', "train.py exited with code 1: no data in /opt/ml/input"),
        (
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",  # what the out-of-memory killer does
            "train.py was killed by SIGKILL (exit code -9), often the kernel's out-of-memory killer; see the job log",
        ),
    ],
)
def test_a_failing_script_writes_the_failure_file(job: Job, script: str, failure: str) -> None:
    job.configure().script(script)
    code, output = job.run("--entry-point", "train.py")
    assert code == 1, output
    assert job.failure_text() == failure


def test_cuda_on_a_cpu_instance_fails_with_torchs_error(job: Job) -> None:
    """A CPU instance, pinned as one: ``CUDA_VISIBLE_DEVICES=''`` hides a GPU of the machine that runs the test.
    torch's error depends on its build: a CPU build was not compiled with CUDA, a CUDA build sees no GPU."""
    import torch

    job.configure(instance_type="ml.m5.xlarge").script('import torch\ntorch.zeros(1, device="cuda")\n')
    code, output = job.run("--entry-point", "train.py", CUDA_VISIBLE_DEVICES="")
    assert code == 1, output
    assert "expected: no GPU (" in output  # m5: the start-up check passes
    if torch.version.cuda is None:
        assert "expected: no GPU (no sign of an NVIDIA GPU on this host)" in output
        assert job.failure_text() == "AssertionError: Torch not compiled with CUDA enabled"
    else:
        assert job.failure_text() == "RuntimeError: No CUDA GPUs are available"


STOPPABLE_SCRIPT = """
import os, signal, sys, time

def stop(signum, frame):
    with open(os.path.join(os.environ["GPU_TRAIN_CHECKPOINT_DIR"], "checkpoint-7.pt"), "w") as f:
        f.write("step 7")
    sys.exit(143)

signal.signal(signal.SIGTERM, stop)
open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "ready"), "w").close()
time.sleep(60)
"""


def test_sigterm_reaches_the_script_which_checkpoints_and_exits_143(job: Job) -> None:
    job.configure().script(STOPPABLE_SCRIPT)
    process = job.start("--entry-point", "train.py")
    ready = job.root / "output" / "data" / "ready"
    deadline = time.monotonic() + 30
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists()
    process.send_signal(signal.SIGTERM)  # what SageMaker sends on StopTrainingJob / spot interruption
    output, _ = process.communicate(timeout=15)
    assert process.returncode == 143, output
    assert (job.root / "checkpoints" / "checkpoint-7.pt").read_text() == "step 7"
    assert not job.failure.exists()


# ------------------------------------------------------------------------------------ start-up failures


def test_missing_code_channel_names_the_channels(job: Job) -> None:
    job.configure(channels=("train", "validation"))
    assert job.launch() == 1
    assert job.failure_text() == (
        "ChannelError: input channel 'code' is missing: configured channels: train, validation; the launcher runs "
        "your script from a channel named 'code' (a directory of code, or one .tar.gz, .tgz or .zip file)"
    )


@pytest.mark.parametrize(
    ("entry", "why"),
    [("trian.py", "no such file"), ("../train.py", "a '..' path leads outside the code directory"),
     ("/opt/ml/code/train.py", "an absolute path"), ("run.sh", "not a .py file")],
)  # fmt: skip
def test_bad_entry_point_lists_the_scripts(job: Job, entry: str, why: str) -> None:
    job.configure().script("").script("", "prep.py").script("", "run.sh")
    assert job.launch(entry) == 1
    assert job.failure_text() == (
        f"ConfigError: entry point {entry!r} is not allowed ({why}); allowed: a relative path to a .py file in the "
        f"code directory {job.code}, whose top holds these .py files: prep.py, train.py"
    )


def _tar_with(path: Path, *members: tarfile.TarInfo) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("members", "name", "why"),
    [
        ([_member("train.py"), _member("../evil")], "../evil", "a '..' path leads outside the code directory"),
        ([_member("/etc/evil")], "/etc/evil", "an absolute path"),
        ([_member("lib", tarfile.SYMTYPE, "../../outside")], "lib", "a link to ../../outside, outside the archive"),
        ([_member("lib", tarfile.SYMTYPE, "/etc")], "lib", "a link to the absolute path /etc"),
        ([_member("fifo", tarfile.FIFOTYPE)], "fifo", "a device, FIFO or other special file"),
    ],
)
def test_unsafe_archive_members_are_refused_by_name(
    job: Job, members: list[tarfile.TarInfo], name: str, why: str
) -> None:
    job.configure()
    _tar_with(job.code / "sourcedir.tar.gz", *members)
    assert job.launch() == 1
    assert job.failure_text() == (
        f"ChannelError: code archive sourcedir.tar.gz: member {name!r} is not allowed ({why}; the code directory "
        f"is {job.root / 'code'}); allowed: relative paths inside the archive, and links that point inside it"
    )
    assert not (job.root / "evil").exists() and not (job.root / "outside").exists()


def test_links_inside_the_archive_are_kept(job: Job) -> None:
    job.configure()
    _tar_with(job.code / "code.tgz", _member("pkg/a.py"), _member("pkg/b.py", tarfile.SYMTYPE, "a.py"))
    assert launcher.prepare_code(sagemaker.load(job.env)) == job.root / "code"
    assert os.readlink(job.root / "code" / "pkg" / "b.py") == "a.py"


def test_a_bad_flag_ends_in_the_failure_file(job: Job) -> None:
    job.configure().script("")
    code, output = job.run("--entry-point", "train.py", "--distribution", "mpi")
    assert code == 1, output
    text = job.failure_text()
    assert text.startswith("ConfigError: gpu_train launch: argument --distribution: invalid choice: 'mpi'")
    assert "usage: python -m gpu_train launch [-h] --entry-point ENTRY_POINT" in text


# --------------------------------------------------------------------------------------- requirements


def test_requirements_without_wheels_or_a_package_index_fail_before_pip(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    job.configure().script("").script("# pinned\ntinypkg==1.0  # the only one\n", "requirements.txt")

    def no_pip(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("pip must not run")

    monkeypatch.setattr(launcher, "run_pip", no_pip)
    assert job.launch(package_index=False) == 1
    assert job.failure_text() == (
        "ConfigError: requirements.txt lists packages, but this job has no route to a package index (a private VPC "
        "without NAT, or network isolation) and the code has no wheels/ folder; allowed: vendor them with `gpuctl "
        "vendor <source dir>` (writes wheels/), or give the job a route to a package index, or remove requirements.txt"
    )
    (job.code / "requirements.txt").write_text("# nothing to install\n\n")
    assert launcher.requirements_command(job.code, package_index=False) is None
    assert launcher.requirements_command(job.code, package_index=True) is None


@pytest.mark.slow
def test_requirements_are_installed_offline_from_wheels(job: Job, tmp_path: Path) -> None:
    job.configure().script("tinypkg==1.0\n", "requirements.txt")
    _pure_wheel(job.code / "wheels", "tinypkg", "1.0", {"tinypkg/__init__.py": "VALUE = 'from the wheel'\n"})
    job.script(
        "import json, os, tinypkg\n"
        "seen = os.path.join(os.environ['SM_MODEL_DIR'], 'seen.json')\n"
        "json.dump([tinypkg.VALUE, tinypkg.__file__], open(seen, 'w'))\n"
    )
    target = tmp_path / "site"  # pip installs there (PIP_TARGET), not into the test's environment
    code, output = job.run("--entry-point", "train.py", pythonpath=str(target), PIP_TARGET=str(target))
    assert code == 0, output
    assert f"--no-index --find-links {job.code / 'wheels'} -r {job.code / 'requirements.txt'}" in output
    assert "Successfully installed tinypkg-1.0" in output
    assert json.loads((job.root / "model" / "seen.json").read_text()) == [
        "from the wheel",
        str(target / "tinypkg" / "__init__.py"),
    ]


def test_a_failing_pip_names_its_last_error(job: Job, tmp_path: Path) -> None:
    job.configure().script("").script("gt-no-such-package==1.0\n", "requirements.txt")
    _pure_wheel(job.code / "wheels", "tinypkg", "1.0", {"tinypkg/__init__.py": ""})
    env = {**os.environ, **job.env, "PIP_TARGET": str(tmp_path / "site")}
    assert launcher.launch("train.py", environ=env, install_signals=False) == 1
    assert job.failure_text() == (
        "ConfigError: pip install -r requirements.txt failed with exit code 1: ERROR: No matching distribution found "
        "for gt-no-such-package==1.0 (pip's whole output is in the job log)"
    )


# ----------------------------------------------------------------------------------------- TensorFlow


@pytest.fixture
def fake_tensorflow(tmp_path: Path) -> Path:
    """A directory holding a stand-in ``tensorflow`` module with the two calls the GPU check makes."""
    directory = tmp_path / "fake_tf"
    (directory / "tensorflow").mkdir(parents=True)
    (directory / "tensorflow" / "__init__.py").write_text(FAKE_TENSORFLOW)
    return directory


def test_tensorflow_gets_memory_growth_and_tf_config_on_two_hosts(job: Job, fake_tensorflow: Path) -> None:
    """The stand-in TensorFlow is a CPU build, so the job is pinned to the CPU (``CUDA_VISIBLE_DEVICES=''``): on a
    GPU machine the GPU check would rightly refuse a CPU-only TensorFlow."""
    job.configure({"epochs": "2"}, hosts=("algo-1", "algo-2"), current_host="algo-2")
    _pack_code(job, "directory")
    code, output = job.run(
        "--entry-point",
        "train.py",
        "--framework",
        "tensorflow",
        pythonpath=str(fake_tensorflow),
        CUDA_VISIBLE_DEVICES="",
    )
    assert code == 0, output
    env = job.seen()["env"]
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["algo-1:2222", "algo-2:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    assert env["SM_HOSTS"] == '["algo-1","algo-2"]' and env["SM_CURRENT_HOST"] == "algo-2"
    assert "starting train.py (tensorflow) as 2 processes on 2 hosts" in output  # one per host
    assert "torch.distributed.run" not in output and "TensorFlow not imported" in output


def test_tensorflow_env_keeps_the_jobs_own_settings() -> None:
    child = {"TF_FORCE_GPU_ALLOW_GROWTH": "false", "TF_CONFIG": "{}"}
    launcher.tensorflow_env(child, sagemaker.ResourceConfig(current_host="a", hosts=("a", "b")))
    assert child == {"TF_FORCE_GPU_ALLOW_GROWTH": "false", "TF_CONFIG": "{}"}


def test_tensorflow_without_the_expected_gpu_fails_before_the_script(job: Job, fake_tensorflow: Path) -> None:
    job.configure().script("raise SystemExit('must not run')\n")
    code, output = job.run(
        "--entry-point", "train.py", "--framework", "tensorflow", pythonpath=str(fake_tensorflow), SM_NUM_GPUS="1"
    )
    assert code == 1, output
    assert job.failure_text().startswith(
        "GpuCheckError: 1 GPU expected (SM_NUM_GPUS=1) but TensorFlow sees 0 (tf.config.list_physical_devices('GPU')): "
        "TensorFlow 2.99.0 is a CPU-only build (tf.test.is_built_with_cuda() is False); use a GPU build of TensorFlow "
        "(the AWS TensorFlow GPU training image has one). Refusing to train on the CPU."
    )


def test_auto_framework_without_torch_or_tensorflow_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        ConfigError, match=r"^no training framework found: neither torch nor tensorflow can be imported"
    ):
        launcher.detect_framework("auto")
    with pytest.raises(ConfigError, match=r"^--framework tensorflow, but tensorflow cannot be imported"):
        launcher.detect_framework("tensorflow")


def test_code_archives_are_told_by_content_not_name(tmp_path: Path) -> None:
    """A CDK file asset of ``sourcedir.tar.gz`` lands as ``<hash>.gz``; a zip asset may have any name."""
    tar_path = tmp_path / "bc637f28.gz"
    with tarfile.open(tar_path, "w:gz") as archive:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    zip_path = tmp_path / "asset.bin"
    with zipfile.ZipFile(zip_path, "w") as archive:
        archive.writestr("train.py", "print('hi')\n")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert launcher.is_code_archive(tar_path) and launcher.is_code_archive(zip_path)
    assert not launcher.is_code_archive(script)
    assert launcher.extract_archive(tar_path, tmp_path / "a") == 1 and (tmp_path / "a" / "train.py").is_file()
    assert launcher.extract_archive(zip_path, tmp_path / "b") == 1 and (tmp_path / "b" / "train.py").is_file()


# ------------------------------------------------------------------- EFA: the training toolkit's torchrun settings

# What the DLC's own training toolkit (sagemaker-training) does for a ``torch_distributed`` job: build its
# TorchDistributedRunner from the /opt/ml tree (runner.get reads resourceconfig.json through
# environment.Environment, SAGEMAKER_BASE_DIR moves the tree) and run its _setup, which writes the environment
# torchrun then inherits (process.check_error starts it with os.environ). One process for every case: the module
# `environment` reads SAGEMAKER_BASE_DIR when imported, so it is reloaded per tree.
TOOLKIT_TORCHRUN_ENV = """
import importlib, json, os, sys
from sagemaker_training import environment, runner

cases, results = json.loads(sys.argv[1]), {}
for name, environ in cases.items():
    os.environ.clear()
    os.environ.update(environ)
    importlib.reload(environment)
    torch_distributed = runner.get(runner.TorchDistributedRunnerType, user_entry_point="train.py", args=[])
    before = dict(os.environ)
    torch_distributed._setup()
    changed = sorted(k for k, v in os.environ.items() if before.get(k) != v)
    results[name] = {"environ": dict(os.environ), "changed": changed, "instance_type": torch_distributed._instance_type}
with open(sys.argv[2], "w") as out:
    json.dump(results, out)
"""

EFA_VARIABLES = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE", "NCCL_PROTO")
# (instance type, hosts, the job's own environment): EFA with RDMA, EFA without RDMA, no EFA, no instance type.
EFA_CASES: dict[str, tuple[str | None, int, dict[str, str]]] = {
    **{
        f"{instance_type}-{hosts}": (instance_type, hosts, {})
        for instance_type in ("ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.g5.48xlarge", "ml.g5.xlarge")
        for hosts in (1, 2)
    },
    "none-2": (None, 2, {}),
    "p4d-job-values": ("ml.p4d.24xlarge", 2, {"FI_PROVIDER": "tcp", "NCCL_PROTO": "LL128", "RDMAV_FORK_SAFE": "0"}),
    "g5-job-values": ("ml.g5.xlarge", 2, {"FI_PROVIDER": "tcp", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_PROTO": "LL"}),
}


def _efa_job(root: Path, name: str) -> tuple[Job, dict[str, str]]:
    """The /opt/ml tree of one case (the launcher reads it through GPU_TRAIN_ROOT, the toolkit through
    SAGEMAKER_BASE_DIR) and the job's environment."""
    instance_type, hosts, own = EFA_CASES[name]
    job = Job(root / name).configure(
        {"expect_gpu": "false"},  # no GPU here; the instance type alone says nothing about this machine
        channels=("code", "train"),
        hosts=tuple(f"algo-{i + 1}" for i in range(hosts)),
        instance_type=instance_type,
    )
    job.script("print('never started')\n")
    return job, {**job.env, **own}


@pytest.fixture(scope="module")
def toolkit_torchrun(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Per case of :data:`EFA_CASES`: the environment the toolkit's torchrun launch gets."""
    root = tmp_path_factory.mktemp("efa")
    cases = {}
    for name in EFA_CASES:
        job, environ = _efa_job(root, name)
        cases[name] = {**environ, "SAGEMAKER_BASE_DIR": str(job.root), "PATH": os.environ.get("PATH", "")}
    out = root / "toolkit.json"
    done = subprocess.run(
        [sys.executable, "-c", TOOLKIT_TORCHRUN_ENV, json.dumps(cases), str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results: dict[str, dict[str, Any]] = json.loads(out.read_text())
    return results


def _started_env(monkeypatch: pytest.MonkeyPatch, module: Any, start: Callable[[], int]) -> tuple[list[str], dict]:
    """The command and environment ``start`` hands to ``module.run_forwarding_signals`` (nothing is run)."""
    started: list[tuple[list[str], dict[str, str]]] = []

    def record(cmd: list[str], env: dict[str, str], **_: Any) -> tuple[int, bool]:
        started.append((cmd, dict(env)))
        return 0, False

    monkeypatch.setattr(module, "run_forwarding_signals", record)
    assert start() == 0
    assert len(started) == 1
    return started[0]


def _compare(toolkit: dict[str, Any], child_env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The variables the toolkit's torchrun launch sets (and the EFA ones in any case), in both environments."""
    names = sorted({*toolkit["changed"], *EFA_VARIABLES})
    return {n: child_env.get(n) for n in names}, {n: toolkit["environ"].get(n) for n in names}


@pytest.mark.parametrize("name", list(EFA_CASES))
def test_torchrun_gets_the_toolkits_efa_environment(
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    toolkit_torchrun: dict[str, dict[str, Any]],
) -> None:
    """``launch --distribution torchrun`` (the toolkit's torch_distributed also starts torchrun on one host):
    the launcher's FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA, RDMAV_FORK_SAFE, NCCL_PROTO and NCCL_SOCKET_IFNAME are
    the toolkit's for the same tree, the job's own values included."""
    _, environ = _efa_job(tmp_path, name)
    toolkit = toolkit_torchrun[name]
    assert toolkit["instance_type"] == (EFA_CASES[name][0] or "local")  # the toolkit read this tree
    cmd, child_env = _started_env(
        monkeypatch,
        launcher,
        lambda: launcher.launch("train.py", distribution="torchrun", framework="pytorch", environ=environ,
                                install_signals=False),
    )  # fmt: skip
    assert "torch.distributed.run" in cmd
    ours, theirs = _compare(toolkit, child_env)
    assert ours == theirs
    assert "NCCL_SOCKET_IFNAME" in theirs and theirs["NCCL_PROTO"] == "simple"  # what the toolkit's _setup sets
    for variable, value in EFA_CASES[name][2].items():  # a job's value that is replaced is logged
        replaced = f"{variable}={value} from the job's environment replaced by {variable}={ours[variable]}"
        assert (replaced in caplog.text) == (ours[variable] != value)


def test_the_built_in_trainers_torchrun_gets_the_toolkits_efa_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toolkit_torchrun: dict[str, dict[str, Any]]
) -> None:
    """``train`` (the image's own command) on 2 x ml.p4d.24xlarge, the production cluster."""
    from gpu_train import entrypoint

    _, environ = _efa_job(tmp_path, "ml.p4d.24xlarge-2")
    cmd, child_env = _started_env(monkeypatch, entrypoint, lambda: entrypoint.train(environ, install_signals=False))
    assert "--nnodes=2" in cmd
    ours, theirs = _compare(toolkit_torchrun["ml.p4d.24xlarge-2"], child_env)
    assert ours == theirs
    assert {n: ours[n] for n in EFA_VARIABLES} == {
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1", "NCCL_PROTO": "simple"
    }  # fmt: skip


def test_a_plain_process_gets_no_efa_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--distribution single``: the toolkit's plain ProcessRunner sets none of them either."""
    _, environ = _efa_job(tmp_path, "ml.p4d.24xlarge-2")
    cmd, child_env = _started_env(
        monkeypatch,
        launcher,
        lambda: launcher.launch("train.py", distribution="single", framework="pytorch", environ=environ,
                                install_signals=False),
    )  # fmt: skip
    assert "torch.distributed.run" not in cmd
    assert not set(EFA_VARIABLES) & set(child_env)


# What the toolkit gives a script for a hyperparameters.json (``Environment`` reads the tree of SAGEMAKER_BASE_DIR
# when the module is imported, so in a process of its own): its arguments and SM_HPS, SM_HP_*, SM_USER_ARGS.
TOOLKIT_SCRIPT_VIEW = """
import json, sys
from sagemaker_training import environment
env = environment.Environment()
names = [k for k in env.to_env_vars() if k.startswith("SM_HP") or k == "SM_USER_ARGS"]
view = {"args": env.to_cmd_args(), "vars": {k: env.to_env_vars()[k] for k in names}}
with open(sys.argv[1], "w") as out:
    json.dump(view, out)
"""

#: Values as the SageMaker SDK and gpuctl write them: numbers, JSON strings, booleans, lists, objects, plain text.
PARITY_HP = {
    "lr": "0.01", "epochs": "10", "decay": "1e-3", "name": '"adamw"', "plain": "some text", "padded": "01",
    "flag": "true", "off": "false", "sizes": "[1, 2]", "extra": '{"b": 2, "a": "x"}', "none": "null", "k": "3",
    "sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"s3://bucket/code/sourcedir.tar.gz"',
}  # fmt: skip


def test_the_scripts_arguments_and_hyperparameter_variables_are_the_toolkits(
    job: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same ``hyperparameters.json`` through the toolkit (sagemaker-training, the stock DLC's script mode) and
    through the launcher: the same arguments in the same order, and the same SM_HPS, SM_HP_<NAME>, SM_USER_ARGS."""
    job.configure(PARITY_HP, instance_type="ml.m5.xlarge").script("print('never started')\n")
    out = tmp_path / "toolkit.json"
    environ = toolkit_environ(job.root, tmp_path / "bin")
    done = subprocess.run(
        [sys.executable, "-c", TOOLKIT_SCRIPT_VIEW, str(out)], capture_output=True, text=True, timeout=120, env=environ
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    toolkit = json.loads(out.read_text())
    cmd, child_env = _started_env(
        monkeypatch,
        launcher,
        lambda: launcher.launch("train.py", distribution="single", framework="pytorch",
                                environ={**job.env, **LAUNCHER_ENV, "CUDA_VISIBLE_DEVICES": ""},
                                install_signals=False),
    )  # fmt: skip
    assert cmd[cmd.index(str(job.code / "train.py")) + 1 :] == toolkit["args"]
    ours = {k: v for k, v in child_env.items() if k.startswith("SM_HP") or k == "SM_USER_ARGS"}
    assert ours == toolkit["vars"]
    assert toolkit["args"][:6] == ["--decay", "0.001", "--epochs", "10", "--extra", "a=x,b=2"]  # what it means
    assert json.loads(ours["SM_HPS"])["lr"] == 0.01 and ours["SM_HP_FLAG"] == "true" and "-k" in toolkit["args"]


def test_efa_instance_lists_are_the_toolkits() -> None:
    """The launcher keeps its own copy (it runs in images without the toolkit); a new toolkit list fails here."""
    from sagemaker_training import SM_EFA_NCCL_INSTANCES, SM_EFA_RDMA_INSTANCES

    assert sorted(launcher.EFA_NCCL_INSTANCE_TYPES) == sorted(SM_EFA_NCCL_INSTANCES)
    assert sorted(launcher.EFA_RDMA_INSTANCE_TYPES) == sorted(SM_EFA_RDMA_INSTANCES)
