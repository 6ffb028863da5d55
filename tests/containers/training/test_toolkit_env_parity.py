"""The launcher gives a script the same ``SM_*`` variables as the SageMaker training toolkit (``sagemaker-training``,
the stock DLCs' script mode) for the same ``/opt/ml`` tree, name by name and value by value: the toolkit's own
``Environment().to_env_vars()`` runs on the tree (in a process of its own: the module reads
``SAGEMAKER_BASE_DIR`` when imported) and its map is compared with what the launcher hands the script, for a
single host and the second of two hosts, with hyperparameters of every JSON type. Every difference is listed below
with its reason; any other fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from container_helpers import toolkit_environ

from gpu_train import launcher

TOOLKIT_VARIABLES = """
import json, sys
from sagemaker_training import environment
with open(sys.argv[1], "w") as out:
    json.dump(environment.Environment().to_env_vars(), out)
"""

HYPERPARAMETERS = {
    "lr": "0.01", "epochs": "3", "flag": "true", "name": '"adamw"', "plain": "some text", "sizes": "[1, 2]",
    "extra": '{"b": 2, "a": "x"}', "none": "null", "train-split.v2": "0.9",
    "sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"s3://bucket/code/sourcedir.tar.gz"',
    "sagemaker_container_log_level": "30", "sagemaker_distribution_instance_groups": '["homogeneousCluster"]',
}  # fmt: skip
CHANNELS = {
    "code": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"},
    "train-data.v2": {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key", "ContentType": "x/y"},
}

#: Variables whose value differs where the machine makes it differ, with the reason.
MACHINE_DEPENDENT = {
    "SM_NUM_GPUS": "the GPUs torch can use (CUDA_VISIBLE_DEVICES applies); the toolkit counts nvidia-smi --list-gpus",
}
#: Variables only the launcher sets, with the reason (each checked to be there).
LAUNCHER_ONLY = {
    "SM_CHANNEL_TRAIN_DATA_V2": "the channel with '-' and '.' as '_', a name a shell can read (the toolkit's "
    "SM_CHANNEL_TRAIN-DATA.V2 is there too)",
    "SM_HP_TRAIN_SPLIT_V2": "the hyperparameter likewise (the toolkit's SM_HP_TRAIN-SPLIT.V2 is there too)",
}


def _tree(root: Path, host: str, hosts: list[str]) -> Path:
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps(HYPERPARAMETERS))
    (config / "inputdataconfig.json").write_text(json.dumps(CHANNELS))
    resource = {"current_host": host, "hosts": hosts, "network_interface_name": "eth0",
                "current_instance_type": "ml.g5.12xlarge"}  # fmt: skip
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    for name in CHANNELS:
        (root / "input" / "data" / name).mkdir(parents=True)
    (root / "input" / "data" / "code" / "train.py").write_text("print('never started')\n")
    return root


def _toolkit(root: Path, tmp_path: Path) -> dict[str, str]:
    out = tmp_path / "toolkit.json"
    environ = toolkit_environ(root, tmp_path / "bin")
    done = subprocess.run(
        [sys.executable, "-c", TOOLKIT_VARIABLES, str(out)], capture_output=True, text=True, timeout=120, env=environ
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    variables: dict[str, str] = json.loads(out.read_text())
    return variables


def _launcher(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    started: list[dict[str, str]] = []

    def record(cmd: list[str], env: dict[str, str], **_: Any) -> tuple[int, bool]:
        started.append(dict(env))
        return 0, False

    monkeypatch.setattr(launcher, "run_forwarding_signals", record)
    environ = {"GPU_TRAIN_ROOT": str(root), "CUDA_VISIBLE_DEVICES": "", "GPU_TRAIN_EXPECT_GPU": "false"}
    code = launcher.launch("train.py", distribution="single", framework="pytorch", environ=environ,
                           install_signals=False)  # fmt: skip
    assert code == 0 and len(started) == 1
    return {k: v for k, v in started[0].items() if k.startswith("SM_")}


@pytest.mark.parametrize(
    ("host", "hosts"), [("algo-1", ["algo-1"]), ("algo-2", ["algo-1", "algo-2"])], ids=["one-host", "two-hosts"]
)
def test_every_toolkit_variable_has_the_toolkits_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, hosts: list[str]
) -> None:
    root = _tree(tmp_path / "opt_ml", host, hosts)
    theirs, ours = _toolkit(root, tmp_path), _launcher(root, monkeypatch)
    machine = set(MACHINE_DEPENDENT) if shutil.which("nvidia-smi") else set()
    missing = sorted(set(theirs) - set(ours))
    assert not missing, missing
    different = {
        k: (ours[k], theirs[k]) for k in theirs if ours[k] != theirs[k] and k not in machine | {"SM_TRAINING_ENV"}
    }
    assert not different, different
    # SM_TRAINING_ENV, property by property.
    our_env, their_env = json.loads(ours["SM_TRAINING_ENV"]), json.loads(theirs["SM_TRAINING_ENV"])
    machine_props = {"num_gpus"} if machine else set()
    assert sorted(our_env) == sorted(their_env)
    assert {k: our_env[k] for k in our_env if k not in machine_props} == {
        k: their_env[k] for k in their_env if k not in machine_props
    }
    assert sorted(set(ours) - set(theirs)) == sorted(LAUNCHER_ONLY)
    # What the values are: the test fails on a launcher that drops or changes them, whatever the toolkit does.
    assert ours["SM_CURRENT_HOST"] == host and json.loads(ours["SM_HOSTS"]) == hosts
    assert ours["SM_HOSTS"] == json.dumps(hosts, separators=(",", ":"))
    assert json.loads(ours["SM_RESOURCE_CONFIG"])["current_instance_type"] == "ml.g5.12xlarge"
    assert json.loads(ours["SM_INPUT_DATA_CONFIG"])["train-data.v2"]["S3DistributionType"] == "ShardedByS3Key"
    assert ours["SM_FRAMEWORK_PARAMS"] == '{"sagemaker_distribution_instance_groups":["homogeneousCluster"]}'
    assert ours["SM_MODULE_NAME"] == "train" and ours["SM_MODULE_DIR"] == "s3://bucket/code/sourcedir.tar.gz"
    assert ours["SM_LOG_LEVEL"] == "30" and ours["SM_NUM_CPUS"] == str(os.cpu_count())
    assert ours["SM_CHANNEL_TRAIN-DATA.V2"] == str(root / "input" / "data" / "train-data.v2")
    assert ours["SM_OUTPUT_INTERMEDIATE_DIR"] == str(root / "output" / "intermediate")
    assert our_env["is_master"] == (host == "algo-1") and our_env["master_hostname"] == "algo-1"
    assert our_env["hyperparameters"]["extra"] == {"a": "x", "b": 2} and our_env["hyperparameters"]["none"] is None
    assert ours["SM_HP_FLAG"] == "true" and ours["SM_HP_NONE"] == "" and ours["SM_HP_SIZES"] == "[1,2]"
