"""The dev journey, end to end, from what the app synthesizes: train on the stock DLC, then serve the model.

1. The dev app is synthesized; its training state machine (the synthesized ASL, run by ``asl_runner``) turns an
   execution input into the ``CreateTrainingJob`` parameters its ``Train`` task sends.
2. Each request is run the way SageMaker runs it in the stock PyTorch training DLC: its ``ContainerEntrypoint`` and
   ``ContainerArguments`` in an emulated ``/opt/ml`` tree (``gpuctl.local_job``) whose channels hold what the
   request's S3 URIs point at: the code and launcher assets of the cloud assembly (what ``cdk deploy`` uploads,
   found through the stack's asset manifest) and the dataset shards the test packs. Every download and upload
   is made "as the role": the requests SageMaker makes with the execution role are evaluated against the
   synthesized policies first (``gpu_constructs.authz``), and a denied one fails the run as it fails the job.
3. The default job (the built-in trainer, the dev config) leaves ``model.tar.gz``; it is served by ``gpu_serve``
   (the platform's server, over HTTP) and by the stock inference DLC's handler (sagemaker-inference's
   ``DefaultHandlerService``); one request through each gives the same prediction.
4. A bring-your-own script job (an execution naming a package under ``code/<prefix>/``) trains the same way; two
   emulated hosts (two process groups on 127.0.0.1, rendezvous from the rendered ``resourceconfig.json``) train
   one model with ``gpuctl train --local``; failures end with the reason SageMaker would show.
5. Without the entry-point override (the request as the DLC's own toolkit would get it), the DLC's training
   toolkit (pip packages sagemaker-training and sagemaker-pytorch-training, run as the DLC runs them) stops with
   "The training entry point name is empty": what the ``TrainingDlcWithoutCode`` rule refuses.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from asl_runner import SAMPLE_ACCOUNT, SAMPLE_REGION, run, sample_value
from authz_helpers import as_role, pipeline_definition, top_level
from container_helpers import TorchServeContext, make_images

from gpu_constructs.authz import Assembly, check_requests, job_requests
from gpu_constructs.training_spec import CODE_CHANNEL, DRIVERS_CHANNEL
from gpu_constructs.training_spec.code_package import code_s3_key, package_source_dir
from gpu_serve.process import ServerProcess
from gpu_train import pack
from gpuctl.local_job import run_local_job

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_shards"
#: Small settings of the built-in trainer, merged over the dev config's by the state machine.
TINY = {"epochs": 1, "batch_size": 16, "arch": "resnet_tiny", "width": 8, "log_steps": 2, "num_workers": 0}
EXAMPLE_HP = {"epochs": 1, "batch_size": 16, "num_workers": 0, "log_steps": 2}


@pytest.fixture(scope="module")
def dev(synth: Any) -> Any:
    return synth("dev")


@pytest.fixture(scope="module")
def template(dev: Any) -> dict[str, Any]:
    return dev.template("training")


@pytest.fixture(scope="module")
def assembly(dev: Any) -> Assembly:
    """The dev app as one account: its names, ARNs and policies (gpu_constructs.authz)."""
    return Assembly(top_level(dev.outdir))


@pytest.fixture(scope="module")
def definition(assembly: Assembly) -> dict[str, Any]:
    return pipeline_definition(assembly)


@pytest.fixture(scope="module")
def assets(dev: Any) -> dict[str, Path]:
    """``s3://`` URL -> local file of every file asset of the training stack (what ``cdk deploy`` uploads)."""
    [stack] = [name for name in dev.templates if name.endswith("-training")]
    manifest = json.loads((dev.outdir / f"{stack}.assets.json").read_text())
    out: dict[str, Path] = {}
    for entry in manifest["files"].values():
        for destination in entry["destinations"].values():
            bucket = destination["bucketName"].replace("${AWS::AccountId}", SAMPLE_ACCOUNT)
            bucket = bucket.replace("${AWS::Region}", SAMPLE_REGION)
            out[f"s3://{bucket}/{destination['objectKey']}"] = dev.outdir / entry["source"]["path"]
    return out


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images = make_images(tmp_path_factory.mktemp("journey-images"), classes=3, per_class=32)
    dest = tmp_path_factory.mktemp("journey-shards") / "train"
    pack.pack(images, str(dest), image_size=32, target_bytes=64 * 1024, seed=1, progress=False)
    return dest


def train_request(definition: dict[str, Any], execution_input: dict[str, Any]) -> dict[str, Any]:
    """The CreateTrainingJob parameters the execution sends for ``execution_input``: the ``Train`` task's (an
    execution that names its instance type) or the ``TrainOnPreferences`` task's (dev's fallback list otherwise)."""
    outcome = run(definition, execution_input)
    assert outcome.status == "PAUSED_AT_TASK", (outcome.status, outcome.error, outcome.cause)
    (call,) = outcome.tasks
    listed = "instance_type" not in execution_input
    assert call.state == ("TrainOnPreferences" if listed else "Train")
    assert call.resource.endswith(
        ":states:::aws-sdk:sagemaker:createTrainingJob" if listed else ":states:::sagemaker:createTrainingJob.sync"
    )
    return copy.deepcopy(call.parameters)


def channel_data(
    request: dict[str, Any], assets: dict[str, Path], shards: Path, uploads: dict[str, Path] | None = None
) -> dict[str, Path]:
    """Local data of each channel: what the channel's S3 URI points at."""
    out: dict[str, Path] = {}
    for channel in request["InputDataConfig"]:
        name, uri = channel["ChannelName"], channel["DataSource"]["S3DataSource"]["S3Uri"]
        if name in (CODE_CHANNEL, DRIVERS_CHANNEL):
            known = {**assets, **(uploads or {})}
            assert uri in known, f"channel {name}: {uri} is neither an asset of the assembly nor an upload"
            out[name] = known[uri]
        else:
            assert uri.endswith(f"/imagenet/v1/{name}/"), uri  # the dev config's dataset layout
            out[name] = shards
    return out


def test_the_dev_job_runs_the_launcher_on_the_stock_dlc(definition: dict[str, Any], assets: dict[str, Path]) -> None:
    request = train_request(definition, {})
    algorithm = request["AlgorithmSpecification"]
    assert "/pytorch-training:" in algorithm["TrainingImage"] and algorithm["TrainingImage"].endswith("-sagemaker")
    assert algorithm["ContainerArguments"][:2] == ["--entry-point", "train.py"]
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in request["InputDataConfig"]}
    assert channels[CODE_CHANNEL] in assets and channels[DRIVERS_CHANNEL] in assets
    assert assets[channels[DRIVERS_CHANNEL]].suffix == ".pyz"


@pytest.fixture(scope="module")
def default_job(
    definition: dict[str, Any],
    assembly: Assembly,
    assets: dict[str, Path],
    shards: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Any:
    request = train_request(definition, {"hyperparameters": TINY})
    result = run_local_job(
        request,
        channel_data(request, assets, shards),
        output_dir=tmp_path_factory.mktemp("default-job"),
        authorize=as_role(assembly),
    )
    assert result.ok, result.failure
    return result


def _predict_with_gpu_serve(tarball: Path, body: bytes) -> list[list[float]]:
    import http.client

    command = [sys.executable, "-m", "gpuctl", "serve", str(tarball), "--port", "0", "--max-batch-size", "1"]
    env = {"GPU_SERVE_NUM_THREADS": "1", "GPU_SERVE_METRICS_INTERVAL_S": "0"}
    server = ServerProcess(command=command, env=env).start(timeout=90)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/invocations", body, {"Content-Type": "application/json", "Accept": "application/json"})
        response = conn.getresponse()
        payload = json.loads(response.read())
        assert response.status == 200, payload
        return list(payload["predictions"])
    finally:
        assert server.stop() == 0


@pytest.fixture()
def dlc_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stock PyTorch inference DLC's handler service (sagemaker-inference) over the extracted archive, whose
    ``code/inference.py`` the DLC imports as the user module (``SAGEMAKER_PROGRAM``, ``code/`` on ``sys.path``)."""
    from sagemaker_inference.default_handler_service import DefaultHandlerService

    monkeypatch.setenv("SAGEMAKER_PROGRAM", "inference.py")
    sys.modules.pop("inference", None)

    def serve(tarball: Path) -> tuple[Any, Path]:
        model_dir = tmp_path / "model"
        with tarfile.open(tarball) as archive:
            archive.extractall(model_dir, filter="data")
        monkeypatch.syspath_prepend(str(model_dir / "code"))
        return DefaultHandlerService(), model_dir

    yield serve
    sys.modules.pop("inference", None)


def test_the_trained_model_serves_the_same_prediction_on_gpu_serve_and_the_dlc(
    default_job: Any, dlc_handler: Any
) -> None:
    tarball = default_job.model_tarball
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    assert {"model.pt", "model_config.json", "code/inference.py"} <= names
    sample = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    body = json.dumps({"instances": sample.tolist()}).encode()

    from_gpu_serve = _predict_with_gpu_serve(tarball, body)

    service, model_dir = dlc_handler(tarball)
    context = TorchServeContext(model_dir, [{"Content-Type": "application/json", "Accept": "application/json"}])
    [answer] = service.handle([{"body": body}], context)
    from_dlc = json.loads(answer)["predictions"]

    assert np.asarray(from_gpu_serve).shape == (1, 3)
    np.testing.assert_allclose(np.asarray(from_dlc), np.asarray(from_gpu_serve), rtol=1e-5, atol=1e-6)


def _code_upload(assembly: Assembly, source_dir: Path, tmp_path: Path) -> tuple[str, Path]:
    """Where ``gpuctl train --source-dir`` would upload ``source_dir`` for this setup, and the package file."""
    [spec] = [
        p for p in assembly.resources("AWS::SSM::Parameter") if "job-spec" in json.dumps(p.properties.get("Name", ""))
    ]
    spec_json = json.loads(assembly.text(spec.properties["Value"], spec.stack))
    package = package_source_dir(source_dir, "train.py")
    bucket = spec_json["code"]["upload_prefix"].split("/")[2]
    uri = f"s3://{bucket}/{code_s3_key(spec_json['job_name_prefix'], package)}"
    path = tmp_path / "sourcedir.tar.gz"
    path.write_bytes(package.data)
    return uri, path


def test_a_bring_your_own_script_runs_from_an_execution_input(
    definition: dict[str, Any], assembly: Assembly, assets: dict[str, Path], shards: Path, tmp_path: Path
) -> None:
    uri, package = _code_upload(assembly, EXAMPLE, tmp_path)
    # The example reads the setup's dataset channels (train, validation): one flag away for code of its own.
    given = {"code": uri, "entry_point": "train.py", "hyperparameters": EXAMPLE_HP, "dataset": True}
    request = train_request(definition, given)
    assert request["AlgorithmSpecification"]["ContainerArguments"][:2] == ["--entry-point", "train.py"]
    channels = channel_data(request, assets, shards, {uri: package})
    result = run_local_job(request, channels, output_dir=tmp_path / "o", authorize=as_role(assembly))
    assert result.ok, result.failure
    with tarfile.open(result.model_tarball) as archive:
        assert {"model.pt", "model_config.json"} <= set(archive.getnames())


def test_an_execution_with_its_own_code_sends_only_its_hyperparameters(
    definition: dict[str, Any], assembly: Assembly, tmp_path: Path
) -> None:
    """The dev setup's defaults (config training.hyperparameters) are the built-in trainer's: an execution that
    names its own code package sends exactly its hyperparameters (as strings) and the launcher's settings, the
    derived distribution of the chosen type, in Environment; without a code package, the merge of before."""
    uri, _package = _code_upload(assembly, EXAMPLE, tmp_path)
    own = {"code": uri, "entry_point": "train.py", "hyperparameters": {"lr": 0.01, "epochs": 2}}
    request = train_request(definition, {**own, "instance_type": "ml.g5.12xlarge"})
    assert request["HyperParameters"] == {"lr": "0.01", "epochs": "2"}
    assert request["Environment"] == {
        "GPU_TRAIN_PROCESSES_PER_HOST": "4",
        "GPU_TRAIN_NUM_WORKERS": "10",
    }  # 4 GPUs, 48 vCPUs
    assert train_request(definition, {"code": uri, "entry_point": "train.py"})["HyperParameters"] == {}
    # on dev's fallback list (ml.g5.xlarge, 2xlarge, g6.2xlarge: one GPU each, 4 or 8 vCPUs) the loader workers are
    # the runtime's per-host default (-1)
    builtin = train_request(definition, {"hyperparameters": {"lr": 0.01}})
    assert builtin["HyperParameters"] == {
        "processes_per_host": "1", "num_workers": "-1", "arch": "resnet50", "epochs": "10", "batch_size": "128",
        "lr": "0.01",
    }  # fmt: skip
    assert builtin["Environment"] == {"GPU_TRAIN_PROCESSES_PER_HOST": "1", "GPU_TRAIN_NUM_WORKERS": "-1"}


def _datasets_bucket(definition: dict[str, Any]) -> str:
    """The dev setup's datasets bucket, as its default job reads it (config training.readable_inputs' default)."""
    [train] = [c for c in train_request(definition, {})["InputDataConfig"] if c["ChannelName"] == "train"]
    return str(train["DataSource"]["S3DataSource"]["S3Uri"]).split("/")[2]


def test_an_execution_with_its_own_code_gets_exactly_the_inputs_it_names(
    definition: dict[str, Any], assembly: Assembly, tmp_path: Path
) -> None:
    """``{"inputs": {"training": "s3://..."}}`` is the SageMaker SDK's ``fit({"training": ...})``: a code package of
    the execution's gets that channel and the runtime's code channels, nothing of the setup's dataset; the job role
    may list, read and decrypt it (config training.readable_inputs' default: the datasets bucket)."""
    uri, _package = _code_upload(assembly, EXAMPLE, tmp_path)
    data = f"s3://{_datasets_bucket(definition)}/corpora/en/"
    given = {"code": uri, "entry_point": "train.py", "inputs": {"training": data}}
    request = train_request(definition, given)
    channels = {c["ChannelName"]: c for c in request["InputDataConfig"]}
    assert list(channels) == ["training", CODE_CHANNEL, DRIVERS_CHANNEL]
    assert channels["training"] == {
        "ChannelName": "training",
        "DataSource": {
            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": data, "S3DataDistributionType": "FullyReplicated"}
        },
        "InputMode": "File",
    }
    requests = [r for r in job_requests(assembly, "training", request) if r.subject == "channel:training"]
    assert [r.action for r in requests] == ["s3:ListBucket", "s3:GetObject", "kms:Decrypt"]
    assert check_requests(assembly, requests) == []
    # The object form names the input mode; dataset: true adds the setup's dataset channels before it.
    given["inputs"] = {"training": {"s3_uri": data, "input_mode": "FastFile"}}
    request = train_request(definition, {**given, "dataset": True})
    names = [(c["ChannelName"], c["InputMode"]) for c in request["InputDataConfig"]]
    assert names == [
        ("train", "FastFile"), ("validation", "FastFile"), ("training", "FastFile"), ("code", "File"),
        ("sm_drivers", "File"),
    ]  # fmt: skip
    # Without a code package of its own, the built-in trainer keeps its dataset channels and gets the input too.
    names = [c["ChannelName"] for c in train_request(definition, {"inputs": {"extra": data}})["InputDataConfig"]]
    assert names == ["train", "validation", "extra", "code", "sm_drivers"]


def test_an_input_outside_the_readable_prefixes_is_refused_before_any_job(
    definition: dict[str, Any], assembly: Assembly, tmp_path: Path
) -> None:
    uri, _package = _code_upload(assembly, EXAMPLE, tmp_path)
    outside = "s3://someone-elses-bucket/data/"
    outcome = run(definition, {"code": uri, "entry_point": "train.py", "inputs": {"training": outside}})
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert outcome.visited[-2:] == ["ValidateHyperparameters", "InvalidHyperparameters"]
    assert not outcome.tasks  # no CreateTrainingJob
    bucket = _datasets_bucket(definition)
    assert outcome.cause == (
        f"The execution input is not valid: channel 'training': s3_uri='{outside}' is not readable by the job "
        f"role; allowed: a URI under s3://{bucket}/ (the prefixes config training.readable_inputs grants the job "
        "role)"
    )
    # Had it been sent, the job role's policies deny the listing and the read of that bucket.
    request = train_request(definition, {"code": uri, "entry_point": "train.py"})
    request["InputDataConfig"].insert(0, {**request["InputDataConfig"][0], "ChannelName": "training"})
    request["InputDataConfig"][0]["DataSource"] = {
        "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": outside, "S3DataDistributionType": "FullyReplicated"}
    }
    denied = check_requests(assembly, job_requests(assembly, "training", request))
    assert sorted(d.decision.request.action for d in denied) == ["s3:GetObject", "s3:ListBucket"]
    # Other problems of the inputs, each named, all at once.
    bad = {"code": "s3://x/", "train": f"s3://{bucket}/x/", "bad name": f"s3://{bucket}/x/"}
    outcome = run(definition, {"inputs": bad, "dataset": "yes"})
    assert outcome.status == "FAILED" and not outcome.tasks
    for problem in (
        "dataset=yes is not allowed; allowed: true or false",
        "inputs.code is a channel of the runtime (the code package and its launcher); allowed: another name",
        "inputs.train is one of the setup's dataset channels ['train', 'validation']; allowed: another name, or "
        "dataset: false",
        "channel name='bad name' is not allowed; allowed: 1 to 64 letters, digits and . - _ (SageMaker's ChannelName)",
    ):
        assert problem in (outcome.cause or ""), problem


def test_code_outside_the_setups_prefix_is_refused_before_any_job(definition: dict[str, Any]) -> None:
    outcome = run(definition, {"code": "s3://someone-elses-bucket/code.tar.gz", "entry_point": "train.py"})
    assert (outcome.status, outcome.error) == ("FAILED", "InvalidInput")
    assert 'code "s3://someone-elses-bucket/code.tar.gz" with entry_point "train.py" is not allowed' in (
        outcome.cause or ""
    )
    assert not outcome.tasks
    escaping = run(definition, {"entry_point": "../../etc/passwd.py"})
    assert escaping.status == "FAILED" and "is not allowed" in (escaping.cause or "")


@pytest.mark.parametrize(
    ("files", "failure"),
    [
        ({"train.py": "raise ValueError('learning rate 5.0 diverges')\n"}, "ValueError: learning rate 5.0 diverges"),
        (
            {"train.py": "import torch\ntorch.zeros(1, device='cuda')\n"},
            "AssertionError: Torch not compiled with CUDA enabled",
        ),
        (
            {"train.py": "print('never runs')\n", "requirements.txt": "einops==0.8.1\n"},
            "requirements.txt lists packages, but this job has no route to a package index",
        ),
    ],
    ids=["crash", "needs-a-gpu", "requirements-in-a-private-vpc"],
)
def test_failures_end_with_the_reason_sagemaker_shows(
    definition: dict[str, Any],
    assembly: Assembly,
    assets: dict[str, Path],
    shards: Path,
    tmp_path: Path,
    files: dict[str, str],
    failure: str,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name, text in files.items():
        (source / name).write_text(text)
    uri, package = _code_upload(assembly, source, tmp_path)
    request = train_request(definition, {"code": uri, "entry_point": "train.py"})
    channels = channel_data(request, assets, shards, {uri: package})
    result = run_local_job(request, channels, output_dir=tmp_path / "o", authorize=as_role(assembly))
    assert not result.ok and result.model_tarball is None
    assert failure in (result.failure or ""), result.failure


def test_two_hosts_train_one_model_with_gpuctl_local(template: dict[str, Any], shards: Path, tmp_path: Path) -> None:
    """``gpuctl train --local`` with the setup's spec: two hosts, each its own tree; torchrun's static rendezvous
    from ``resourceconfig.json`` (``--nnodes 2``, the first host as master, on 127.0.0.1)."""
    [spec] = [
        r["Properties"]["Value"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::SSM::Parameter" and "job-spec" in json.dumps(r["Properties"].get("Name", ""))
    ]
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec if isinstance(spec, str) else sample_value(spec, template))
    hp = [arg for key, value in EXAMPLE_HP.items() for arg in ("-p", f"{key}={value}")]
    command = [
        sys.executable, "-m", "gpuctl", "train", "--spec", str(spec_file), "--source-dir", str(EXAMPLE),
        "--instance-count", "2", *hp, "--local", "--channel", f"train={shards}", "--channel",
        f"validation={shards}", "--output", str(tmp_path / "out"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "algo-1: exit 0" in done.stdout and "algo-2: exit 0" in done.stdout
    logs = done.stdout + done.stderr
    assert "--nnodes=2" in logs and "training on cpu x 2 processes" in logs, logs[-3000:]
    with tarfile.open(tmp_path / "out" / "model.tar.gz") as archive:
        assert "model.pt" in archive.getnames()


def test_without_the_launcher_the_dlc_toolkit_stops_for_want_of_code(
    definition: dict[str, Any], assets: dict[str, Path], shards: Path, tmp_path: Path
) -> None:
    """The request as the DLC's own toolkit would get it (no ContainerEntrypoint, no code channels), run the way
    the DLC runs it: ``train`` (sagemaker-training's console script) with the DLC's
    ``SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main``."""
    request = train_request(definition, {"hyperparameters": TINY})
    algorithm = request["AlgorithmSpecification"]
    del algorithm["ContainerEntrypoint"], algorithm["ContainerArguments"]
    request["InputDataConfig"] = [
        c for c in request["InputDataConfig"] if c["ChannelName"] not in (CODE_CHANNEL, DRIVERS_CHANNEL)
    ]
    from gpuctl.local_job import build_tree

    root = tmp_path / "opt" / "ml"
    build_tree(root, request, channel_data(request, assets, shards), host="algo-1", hosts=["algo-1"])
    env = {
        **os.environ,
        "SAGEMAKER_BASE_DIR": str(root),
        "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
    }
    # SageMaker's DNS resolves every host name of the job (algo-1 ...); here they are this machine.
    code = (
        "import socket; resolve = socket.gethostbyname; "
        "socket.gethostbyname = lambda h: '127.0.0.1' if h.startswith('algo-') else resolve(h); "
        "from sagemaker_training.cli.train import main; main()"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    failure = (root / "output" / "failure").read_text()
    assert "The training entry point name is empty" in failure, failure
