"""gpuctl.local_job: a CreateTrainingJob request run on this machine in SageMaker's /opt/ml layout.

The requests here carry a tiny ``/bin/sh -c`` entry instead of the launcher, so each test checks one thing the
local run promises (the tree, the environment, the packed model, the failure file, the hosts) in well under a
second; the launcher itself runs through it in ``test_gpuctl_train`` and the journey tests.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuctl.local_job import (
    LOCAL_INSTANCE_TYPE,
    LocalJobError,
    LocalJobResult,
    build_tree,
    pack_model,
    run_local_job,
)

#: Leaves the arguments, the job name and three environment variables in the model folder and a nested file.
RECORD = (
    'cd "$GPU_TRAIN_ROOT" && mkdir -p model/sub && echo "$@" > model/x && '
    'echo "$TRAINING_JOB_NAME $FROM_REQUEST $FROM_CALLER" > model/env && '
    "cp input/data/train/a.txt model/sub/a.txt"
)


def request(
    script: str,
    *,
    arguments: tuple[str, ...] = ("--alpha", "1"),
    channels: tuple[dict[str, Any], ...] | None = None,
    instance_count: int = 1,
    input_mode: str = "File",
    environment: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A CreateTrainingJob request whose container runs ``/bin/sh -c script local-test arguments...``."""
    return {
        "TrainingJobName": "gpu-dev-train-local",
        "RoleArn": "arn:aws:iam::111122223333:role/placeholder",
        "AlgorithmSpecification": {
            "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312",
            "TrainingInputMode": input_mode,
            "ContainerEntrypoint": ["/bin/sh", "-c", script, "local-test"],
            "ContainerArguments": list(arguments),
        },
        "HyperParameters": {"epochs": "2", "lr": "0.1"},
        "InputDataConfig": list(channels if channels is not None else (channel("train"),)),
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": instance_count, "VolumeSizeInGB": 100},
        "Environment": environment or {"FROM_REQUEST": "request"},
    }


def channel(name: str, **extra: Any) -> dict[str, Any]:
    source = {"S3DataType": "S3Prefix", "S3Uri": f"s3://bucket/{name}/", "S3DataDistributionType": "FullyReplicated"}
    source.update(extra.pop("source", {}))
    return {"ChannelName": name, "DataSource": {"S3DataSource": source}, **extra}


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    (folder / "nested").mkdir(parents=True)
    (folder / "a.txt").write_text("alpha\n")
    (folder / "nested" / "b.txt").write_text("beta\n")
    return folder


@pytest.fixture()
def kept() -> Iterator[list[LocalJobResult]]:
    """Results of runs with ``keep_trees=True``: their trees are removed after the test."""
    results: list[LocalJobResult] = []
    yield results
    for result in results:
        for host in result.hosts:
            shutil.rmtree(host.root.parents[2], ignore_errors=True)  # <work>/<host>/opt/ml


def members(tarball: Path) -> dict[str, bytes | None]:
    """Name -> bytes (``None`` for a folder) of every member of ``tarball``."""
    with tarfile.open(tarball) as archive:
        out: dict[str, bytes | None] = {}
        for info in archive.getmembers():
            handle = archive.extractfile(info) if info.isfile() else None
            out[info.name] = handle.read() if handle is not None else None
        return out


def test_a_job_runs_its_entrypoint_and_leaves_model_tar_gz(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    result = run_local_job(request(RECORD), {"train": data}, output_dir=tmp_path / "out", env={"FROM_CALLER": "caller"})
    assert result.ok and result.failure is None
    assert [(h.host, h.exit_code, h.failure) for h in result.hosts] == [("algo-1", 0, None)]
    assert result.output_dir == tmp_path / "out"
    assert result.model_tarball == tmp_path / "out" / "model.tar.gz"
    assert members(result.model_tarball) == {
        "env": b"gpu-dev-train-local request caller\n",
        "sub": None,
        "sub/a.txt": b"alpha\n",
        "x": b"--alpha 1\n",
    }
    assert not result.hosts[0].root.exists()  # the tree is removed unless keep_trees


def test_the_tree_is_laid_out_as_sagemaker_does(data: Path, tmp_path: Path, kept: list[LocalJobResult]) -> None:
    package = tmp_path / "sourcedir.tar.gz"
    package.write_bytes(b"\x1f\x8b")
    channels = (
        channel("train", InputMode="FastFile", ContentType="application/x-shards"),
        channel("validation", source={"S3DataDistributionType": "ShardedByS3Key"}),
        channel("code", InputMode="File"),
    )
    job = request("true", channels=channels, input_mode="FastFile")
    result = run_local_job(job, {"train": data, "validation": data, "code": package}, keep_trees=True)
    kept.append(result)
    root = result.hosts[0].root
    config = root / "input" / "config"
    assert json.loads((config / "hyperparameters.json").read_text()) == {"epochs": "2", "lr": "0.1"}
    assert json.loads((config / "resourceconfig.json").read_text()) == {
        "current_host": "algo-1",
        "hosts": ["algo-1"],
        "network_interface_name": "lo",
        "current_instance_type": LOCAL_INSTANCE_TYPE,
        "current_group_name": "homogeneousCluster",
    }
    common = {"S3DistributionType": "FullyReplicated", "RecordWrappingType": "None"}
    assert json.loads((config / "inputdataconfig.json").read_text()) == {
        "train": {"TrainingInputMode": "FastFile", **common, "ContentType": "application/x-shards"},
        # a channel without its own InputMode takes the job's
        "validation": {**common, "TrainingInputMode": "FastFile", "S3DistributionType": "ShardedByS3Key"},
        "code": {"TrainingInputMode": "File", **common},
    }
    assert (root / "input" / "data" / "train" / "nested" / "b.txt").read_text() == "beta\n"
    assert (root / "input" / "data" / "code" / "sourcedir.tar.gz").read_bytes() == b"\x1f\x8b"  # a file: put inside
    assert all((root / folder).is_dir() for folder in ("model", "output/data", "checkpoints"))


def test_a_failing_job_reports_its_failure_file(data: Path, tmp_path: Path) -> None:
    script = 'echo "ValueError: learning rate 5.0 diverges" > "$GPU_TRAIN_ROOT/output/failure"; exit 3'
    result = run_local_job(request(script), {"train": data}, output_dir=tmp_path / "out")
    assert not result.ok
    assert [(h.exit_code, h.failure) for h in result.hosts] == [(3, "ValueError: learning rate 5.0 diverges")]
    assert result.failure == "ValueError: learning rate 5.0 diverges"
    assert result.model_tarball is None and not (tmp_path / "out" / "model.tar.gz").exists()
    assert (tmp_path / "out" / "failure-algo-1").read_text() == "ValueError: learning rate 5.0 diverges\n"


def test_a_failing_job_without_a_failure_file_has_only_its_exit_code(data: Path) -> None:
    result = run_local_job(request("exit 7"), {"train": data})
    assert [(h.exit_code, h.failure) for h in result.hosts] == [(7, None)]
    assert not result.ok and result.failure is None and result.model_tarball is None
    shutil.rmtree(result.output_dir)  # the default output folder is a new temp folder
    assert result.output_dir.name.startswith("gpuctl-local-")


def test_a_channel_without_local_data_is_named(data: Path) -> None:
    job = request("true", channels=(channel("train"), channel("validation")))
    with pytest.raises(LocalJobError, match=r"channels \['validation'\] have no local data; allowed: --channel NAME="):
        run_local_job(job, {"train": data})


def test_missing_channel_data_is_named(tmp_path: Path) -> None:
    with pytest.raises(LocalJobError, match=r"channel data .*nowhere does not exist; allowed: an existing folder"):
        run_local_job(request("true"), {"train": tmp_path / "nowhere"})


@pytest.mark.parametrize(
    ("channels", "job_mode"),
    [((channel("train", InputMode="Pipe"),), "File"), ((channel("train"),), "Pipe")],
    ids=["channel-mode", "job-default-mode"],
)
def test_a_pipe_mode_channel_is_refused(data: Path, channels: tuple[dict[str, Any], ...], job_mode: str) -> None:
    job = request("true", channels=channels, input_mode=job_mode)
    with pytest.raises(LocalJobError, match=r"channel 'train' is in Pipe mode; allowed locally: File or FastFile"):
        run_local_job(job, {"train": data})


def test_a_request_without_an_entrypoint_is_refused(data: Path) -> None:
    job = request("true")
    del job["AlgorithmSpecification"]["ContainerEntrypoint"]
    with pytest.raises(LocalJobError, match="the request has no ContainerEntrypoint: it runs the image's own entry"):
        run_local_job(job, {"train": data})


def test_two_hosts_share_one_master_and_each_has_its_tree(data: Path, kept: list[LocalJobResult]) -> None:
    script = 'echo "$MASTER_ADDR $MASTER_PORT" > "$GPU_TRAIN_ROOT/model/master"'
    result = run_local_job(request(script, instance_count=2), {"train": data}, keep_trees=True)
    kept.append(result)
    assert [(h.host, h.exit_code) for h in result.hosts] == [("algo-1", 0), ("algo-2", 0)]
    roots = [h.root for h in result.hosts]
    assert roots[0] != roots[1]
    masters = [(root / "model" / "master").read_text().split() for root in roots]
    assert masters[0] == masters[1] and masters[0][0] == "127.0.0.1"
    assert 0 < int(masters[0][1]) < 65536
    for host, root in zip(("algo-1", "algo-2"), roots, strict=True):
        resource = json.loads((root / "input" / "config" / "resourceconfig.json").read_text())
        assert (resource["current_host"], resource["hosts"]) == (host, ["algo-1", "algo-2"])
    assert result.model_tarball is not None  # the first host's model
    assert members(result.model_tarball) == {"master": f"127.0.0.1 {masters[0][1]}\n".encode()}
    shutil.rmtree(result.output_dir)


def test_a_host_past_the_time_limit_is_killed_with_124(data: Path) -> None:
    started: list[int] = []
    result = run_local_job(
        request("sleep 30"), {"train": data}, timeout_s=0.3, on_start=lambda ps: started.extend(p.pid for p in ps)
    )
    assert len(started) == 1
    assert [h.exit_code for h in result.hosts] == [124] and result.model_tarball is None
    shutil.rmtree(result.output_dir)


def test_pack_model_keeps_paths_relative_to_the_model_folder(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / "code").mkdir(parents=True)
    (model / "model.pt").write_bytes(b"weights")
    (model / "code" / "inference.py").write_text("def model_fn(d): ...\n")
    tarball = pack_model(model, tmp_path / "out" / "nested" / "model.tar.gz")
    assert members(tarball) == {"code": None, "code/inference.py": b"def model_fn(d): ...\n", "model.pt": b"weights"}


def test_build_tree_alone_writes_the_host_it_is_given(data: Path, tmp_path: Path) -> None:
    root = tmp_path / "opt" / "ml"
    build_tree(root, request("true"), {"train": data}, host="algo-3", hosts=["algo-1", "algo-2", "algo-3"])
    resource = json.loads((root / "input" / "config" / "resourceconfig.json").read_text())
    assert resource["current_host"] == "algo-3" and resource["hosts"] == ["algo-1", "algo-2", "algo-3"]
    assert (root / "input" / "data" / "train" / "a.txt").read_text() == "alpha\n"
