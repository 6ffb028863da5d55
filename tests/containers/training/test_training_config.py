"""Hyperparameters and the SageMaker contract (config files, SM_* environment, channels)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpu_train import hyperparameters, sagemaker
from gpu_train.errors import ChannelError, ConfigError, HyperparameterError
from gpu_train.failure import MAX_CHARS, format_failure, write_failure

# ------------------------------------------------------------------------------------ hyperparameters


def test_defaults_when_nothing_is_given() -> None:
    hp = hyperparameters.parse({})
    assert hp.arch == "resnet50"
    assert hp.batch_size == 128
    assert hp.normalize_mean == (0.485, 0.456, 0.406)
    assert hp.amp == "auto" and hp.channels_last is True


def test_strings_and_sdk_json_encoded_values_are_typed() -> None:
    # SageMaker passes strings; the SageMaker Python SDK JSON-encodes every value.
    hp = hyperparameters.parse(
        {
            "epochs": "3",
            "batch_size": '"64"',
            "lr": "1e-3",
            "lr_schedule": '"constant"',
            "nesterov": "False",
            "channels_last": '"true"',
            "normalize_std": "[0.5, 0.5, 0.5]",
            "normalize_mean": "0.1,0.2,0.3",
            "warmup_epochs": "2",
            "sagemaker_program": '"train.py"',  # injected by the SDK: ignored
        }
    )
    assert (hp.epochs, hp.batch_size, hp.lr, hp.lr_schedule) == (3, 64, 0.001, "constant")
    assert hp.nesterov is False and hp.channels_last is True
    assert hp.normalize_std == (0.5, 0.5, 0.5) and hp.normalize_mean == (0.1, 0.2, 0.3)
    assert isinstance(hp.warmup_epochs, float) and hp.warmup_epochs == 2.0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"batch_size": "abc"}, r"batch_size='abc' is not allowed \(not an integer\); allowed: an integer >= 1"),
        ({"batch_size": "0"}, r"batch_size='0' is not allowed \(too small\); allowed: an integer >= 1"),
        ({"epochs": "2.5"}, r"epochs='2.5' is not allowed \(not an integer\)"),
        ({"lr": "nan"}, r"lr='nan' is not allowed \(not a finite number\)"),
        ({"momentum": "1.5"}, r"momentum='1.5' is not allowed \(too large\); allowed: a number >= 0 and <= 0.999"),
        ({"arch": "vgg16"}, r"arch='vgg16' is not allowed; allowed: one of 'resnet18', .*'resnet_tiny'"),
        ({"channels_last": "maybe"}, r"channels_last='maybe' is not allowed; allowed: true or false"),
        ({"normalize_mean": "0.1,0.2"}, r"normalize_mean='0.1,0.2' is not allowed \(2 values\)"),
        ({"normalize_std": "1,0,1"}, r"normalize_std=\[1.0, 0.0, 1.0\] is not allowed; allowed: three numbers > 0"),
    ],
)
def test_ill_typed_or_out_of_range_values_fail_clearly(raw: dict[str, str], message: str) -> None:
    with pytest.raises(HyperparameterError, match=message):
        hyperparameters.parse(raw)


def test_unknown_hyperparameter_names_the_closest_one() -> None:
    with pytest.raises(
        HyperparameterError, match=r"unknown hyperparameter 'bach_size' \(did you mean 'batch_size'\?\)"
    ):
        hyperparameters.parse({"bach_size": "32"})


def test_markdown_table_lists_every_hyperparameter_and_the_readme_is_current() -> None:
    table = hyperparameters.markdown_table()
    for name in hyperparameters.HYPERPARAMETERS:
        assert f"| `{name}` |" in table
    assert "| `normalize_mean` | floats | `0.485,0.456,0.406` |" in table
    readme = Path(__file__).resolve().parents[3] / "containers" / "training" / "README.md"
    assert table in readme.read_text(), "regenerate the README table from hyperparameters.markdown_table()"


# --------------------------------------------------------------------------------- SageMaker contract


def _write(root: Path, name: str, data: object) -> None:
    config = root / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / name).write_text(json.dumps(data))


def test_paths_default_to_opt_ml_and_move_with_the_root_variable(tmp_path: Path) -> None:
    assert sagemaker.Paths.from_env({}).model_dir == Path("/opt/ml/model")
    paths = sagemaker.Paths.from_env({"GPU_TRAIN_ROOT": str(tmp_path)})
    assert paths.failure_file == tmp_path / "output" / "failure"
    assert paths.checkpoint_dir == tmp_path / "checkpoints"
    assert paths.hyperparameters_file == tmp_path / "input" / "config" / "hyperparameters.json"


def test_config_files_are_read(tmp_path: Path) -> None:
    _write(tmp_path, "hyperparameters.json", {"epochs": "4", "batch_size": 8})
    _write(
        tmp_path,
        "resourceconfig.json",
        {
            "current_host": "algo-2",
            "hosts": ["algo-1", "algo-2"],
            "network_interface_name": "eth0",
            "current_instance_type": "ml.p4d.24xlarge",
        },
    )
    _write(
        tmp_path,
        "inputdataconfig.json",
        {
            "train": {"TrainingInputMode": "FastFile", "S3DistributionType": "ShardedByS3Key"},
            "validation": {"TrainingInputMode": "Pipe"},
        },
    )
    env = sagemaker.load({"GPU_TRAIN_ROOT": str(tmp_path), "SM_NUM_GPUS": "8", "SM_NUM_CPUS": "96"})
    assert env.hyperparameters == {"epochs": "4", "batch_size": "8"}
    assert env.resource.hosts == ("algo-1", "algo-2") and env.resource.host_rank == 1
    assert env.resource.leader == "algo-1" and env.resource.current_instance_type == "ml.p4d.24xlarge"
    assert env.num_gpus == 8 and env.num_cpus == 96
    train, validation = env.channels["train"], env.channels["validation"]
    assert train.mode == "FastFile" and train.sharded_by_key and train.path == tmp_path / "input" / "data" / "train"
    assert validation.is_pipe and validation.pipe_path(1) == tmp_path / "input" / "data" / "validation_1"


def test_sm_environment_overrides_files(tmp_path: Path) -> None:
    _write(tmp_path, "inputdataconfig.json", {"train": {"TrainingInputMode": "File"}})
    env = sagemaker.load(
        {
            "GPU_TRAIN_ROOT": str(tmp_path),
            "SM_HPS": '{"epochs": 7}',
            "SM_HOSTS": '["h1", "h2", "h3"]',
            "SM_CURRENT_HOST": "h3",
            "SM_CHANNEL_TRAIN": "/fsx/imagenet",
            "SM_MODEL_DIR": str(tmp_path / "m"),
        }
    )
    assert env.hyperparameters == {"epochs": "7"}
    assert env.resource.host_rank == 2 and env.resource.num_hosts == 3
    assert env.channels["train"].path == Path("/fsx/imagenet")
    assert env.model_dir == tmp_path / "m"


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("hyperparameters.json", [1, 2], "must hold a JSON object"),
        ("resourceconfig.json", {"current_host": "algo-9", "hosts": ["algo-1"]}, "current_host='algo-9' is not one of"),
        (
            "inputdataconfig.json",
            {"train": {"TrainingInputMode": "Stream"}},
            "TrainingInputMode='Stream' is not allowed",
        ),
    ],
)
def test_bad_config_files_fail_clearly(tmp_path: Path, name: str, data: object, message: str) -> None:
    _write(tmp_path, name, data)
    with pytest.raises(ConfigError, match=message):
        sagemaker.load({"GPU_TRAIN_ROOT": str(tmp_path)})


def test_missing_channel_names_the_configured_ones(tmp_path: Path) -> None:
    _write(tmp_path, "inputdataconfig.json", {"training": {"TrainingInputMode": "File"}})
    env = sagemaker.load({"GPU_TRAIN_ROOT": str(tmp_path)})
    with pytest.raises(ChannelError, match=r"input channel 'train' is missing: configured channels: training"):
        env.channel("train")
    with pytest.raises(ChannelError, match=r"channel 'training' \(File mode\) has no data directory"):
        env.channel("training")
    assert env.channel("validation", required=False) is None


# ------------------------------------------------------------------------------------------- failure


def test_failure_file_is_one_paragraph_cut_to_1024_characters_and_first_writer_wins(tmp_path: Path) -> None:
    path = tmp_path / "output" / "failure"
    text = format_failure(ValueError("x" * 5000))
    assert len(text) == MAX_CHARS and text.startswith("ValueError: xxx") and text.endswith("...")
    assert write_failure(path, "DataError: the real cause")
    assert not write_failure(path, "RuntimeError: a peer process exited")
    assert path.read_text() == "DataError: the real cause\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_dataloader_wrapped_errors_report_the_original_cause() -> None:
    wrapped = RuntimeError(
        "Caught DataError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\ngpu_train.errors.DataError: shard /d/shard-000003.tar: corrupt shard\n'
    )
    assert format_failure(wrapped) == "DataError: shard /d/shard-000003.tar: corrupt shard"
