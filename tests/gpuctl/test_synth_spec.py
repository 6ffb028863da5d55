"""gpuctl.synth_spec: the job spec of a synthesized app, deploy-time values as placeholders of the right shape.

The spec read from the dev app's cloud assembly must load as a TrainingJobSpec and render a request that
SageMaker's service model accepts (no placeholder may break a botocore pattern), so ``gpuctl train --synth``
works on a fresh clone without an AWS account.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_constructs.training_spec import TrainingJobSpec, service_model_problems
from gpu_constructs.training_spec.code_package import code_s3_key, package_source_dir
from gpuctl.cli import main
from gpuctl.synth_spec import PLACEHOLDER_ACCOUNT, SynthSpecError, load_synth_spec

STACK = "gpu-dev-training"
REGION = "us-east-1"


@pytest.fixture(scope="module")
def outdir(synth: Any) -> Path:
    return Path(synth("dev").outdir)


@pytest.fixture(scope="module")
def spec_text(outdir: Path) -> str:
    return load_synth_spec(outdir, STACK, REGION)


def test_the_synthesized_spec_loads_and_renders_a_valid_request(spec_text: str) -> None:
    assert "Fn::" not in spec_text and '"Ref"' not in spec_text  # every reference resolved
    spec = TrainingJobSpec.from_json(spec_text)
    request = spec.to_request("gpu-dev-train-x")
    assert service_model_problems("CreateTrainingJob", request) == []
    assert request["RoleArn"].startswith(f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/")
    assert spec.job_name_prefix == "gpu-dev-train"
    assert spec.subnets and all(re.fullmatch(r"subnet-[0-9a-f]{17}", s) for s in spec.subnets)
    assert spec.security_group_ids and all(re.fullmatch(r"sg-[0-9a-f]{17}", s) for s in spec.security_group_ids)
    assert spec.output_kms_key is not None
    assert re.fullmatch(rf"arn:aws:kms:{REGION}:{PLACEHOLDER_ACCOUNT}:key/[0-9a-f-]{{36}}", spec.output_kms_key)
    assert spec.code is not None and spec.code.builtin
    # one bucket, one placeholder: the output and the code upload prefix are both in the artifacts bucket
    output_bucket = spec.output_s3_uri.split("/")[2]
    assert re.fullmatch(r"placeholder-[0-9a-f]{12}", output_bucket)
    assert spec.code.upload_prefix == f"s3://{output_bucket}/code/gpu-dev-train/"


def test_the_prod_spec_with_fsx_and_two_hosts_renders_a_valid_request(synth: Any) -> None:
    text = load_synth_spec(Path(synth("prod").outdir), "gpu-prod-training", "us-west-2")
    spec = TrainingJobSpec.from_json(text)
    request = spec.to_request(spec.sample_job_name())
    assert service_model_problems("CreateTrainingJob", request) == []
    assert spec.uses_fsx and spec.is_multi_host
    sources = [c["DataSource"] for c in request["InputDataConfig"]]
    fsx = [source["FileSystemDataSource"] for source in sources if "FileSystemDataSource" in source]
    assert fsx and all(re.fullmatch(r"fs-[0-9a-f]{17}", source["FileSystemId"]) for source in fsx)
    assert all(re.fullmatch(r"/[0-9a-f]{8}/datasets/.+", source["DirectoryPath"]) for source in fsx)  # /<mount name>/
    assert request["OutputDataConfig"]["KmsKeyId"].startswith(f"arn:aws:kms:us-west-2:{PLACEHOLDER_ACCOUNT}:key/")


def test_the_placeholders_are_stable_and_follow_the_region(outdir: Path, spec_text: str) -> None:
    assert load_synth_spec(outdir, STACK, REGION) == spec_text
    other = json.loads(load_synth_spec(outdir, STACK, "eu-west-1"))
    assert other["output_kms_key"].startswith(f"arn:aws:kms:eu-west-1:{PLACEHOLDER_ACCOUNT}:key/")


def test_a_missing_folder_or_stack_says_to_synthesize(outdir: Path, tmp_path: Path) -> None:
    with pytest.raises(SynthSpecError, match=r"does not exist; allowed: synthesize first \(make synth ENV=<env>\)"):
        load_synth_spec(tmp_path / "no-cdk-out", STACK, REGION)
    with pytest.raises(SynthSpecError, match=r"gpu-qa-training.template.json does not exist; .*make synth"):
        load_synth_spec(outdir, "gpu-qa-training", REGION)
    with pytest.raises(SynthSpecError, match="holds no training job spec parameter; allowed: a training stack"):
        load_synth_spec(outdir, "gpu-dev-network", REGION)


def test_references_resolve_to_placeholders_of_their_shape(tmp_path: Path) -> None:
    """Each intrinsic the training template uses, in a minimal template."""
    value = {
        "Fn::Join": [
            "",
            [
                '{"role": "',
                {"Fn::GetAtt": ["JobRole1234", "Arn"]},
                '", "key": "',
                {"Fn::ImportValue": "gpu-dev-data:ExportsOutputFnGetAttArtifactsKeyArn"},
                '", "bucket": "',
                {"Ref": "Bucket83908E77"},
                '", "subnet": "',
                {"Fn::Select": [0, {"Fn::Split": [",", {"Fn::ImportValue": "gpu-dev-network:TrainingSubnets"}]}]},
                '", "sub": "',
                {"Fn::Sub": "arn:${AWS::Partition}:s3:::x-${AWS::AccountId}-${AWS::Region}"},
                '"}',
            ],
        ]
    }
    template = {
        "Resources": {
            "JobRole1234": {"Type": "AWS::IAM::Role"},
            "Bucket83908E77": {"Type": "AWS::S3::Bucket"},
            "Spec": {"Type": "AWS::SSM::Parameter", "Properties": {"Name": "/gpu-x/job-spec", "Value": value}},
        }
    }
    (tmp_path / "gpu-x-training.template.json").write_text(json.dumps(template))
    resolved = json.loads(load_synth_spec(tmp_path, "gpu-x-training", "eu-central-1"))
    assert resolved["role"] == f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/JobRole1234"
    assert re.fullmatch(rf"arn:aws:kms:eu-central-1:{PLACEHOLDER_ACCOUNT}:key/[0-9a-f-]{{36}}", resolved["key"])
    assert re.fullmatch(r"placeholder-[0-9a-f]{12}", resolved["bucket"])
    assert re.fullmatch(r"subnet-[0-9a-f]{17}", resolved["subnet"])
    assert resolved["sub"] == f"arn:aws:s3:::x-{PLACEHOLDER_ACCOUNT}-eu-central-1"


def test_gpuctl_train_synth_dry_run_needs_no_account(outdir: Path, no_aws: None, capsys: pytest.CaptureFixture) -> None:
    assert main(["train", "--synth", str(outdir), "--job-name", "gpu-dev-train-s", "--dry-run"]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["TrainingJobName"] == "gpu-dev-train-s"
    assert request["RoleArn"].split(":")[4] == PLACEHOLDER_ACCOUNT
    # config/dev.yaml's training section: the fallback list, SageMaker picks the first type with capacity
    assert [p["InstanceType"] for p in request["ResourceConfig"]["InstancePreferences"]] == [
        "ml.g5.xlarge",
        "ml.g5.2xlarge",
        "ml.g6.2xlarge",
    ]
    assert "InstanceType" not in request["ResourceConfig"] and "EnableManagedSpotTraining" not in request
    assert service_model_problems("CreateTrainingJob", request) == []
    # --instance-type: that type only
    argv = ["train", "--synth", str(outdir), "--job-name", "gpu-dev-train-s", "--instance-type", "ml.g6.2xlarge"]
    assert main([*argv, "--dry-run"]) == 0
    one = json.loads(capsys.readouterr().out)["ResourceConfig"]
    assert (one["InstanceType"], one["InstanceCount"]) == ("ml.g6.2xlarge", 1) and "InstancePreferences" not in one


def test_gpuctl_train_synth_with_a_source_dir_names_the_upload(
    outdir: Path, spec_text: str, no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('own code')\n")
    assert main(["train", "--synth", str(outdir), "--source-dir", str(source), "--dry-run"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    upload_prefix = json.loads(spec_text)["code"]["upload_prefix"]
    bucket = upload_prefix.split("/")[2]
    uri = f"s3://{bucket}/{code_s3_key('gpu-dev-train', package_source_dir(source, 'train.py'))}"
    assert uri.startswith(upload_prefix)  # what the state machine's code-prefix check admits
    [note] = [line for line in captured.err.splitlines() if line.startswith("would upload")]
    assert note.startswith("would upload 1 files (") and note.endswith(f"to {uri}")
    request = json.loads(out)  # stdout is only the request: a pipe reads it
    [code] = [c for c in request["InputDataConfig"] if c["ChannelName"] == "code"]
    assert code["DataSource"]["S3DataSource"]["S3Uri"] == uri


def test_gpuctl_train_synth_without_a_cloud_assembly_exits_2(
    no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["train", "--synth", str(tmp_path / "cdk.out"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"gpuctl train: --synth {tmp_path / 'cdk.out'}: " in err and "make synth ENV=<env>" in err


# --------------------------------------------------------------------------------------------------
# gpuctl train --synth --local: whose hyperparameters a job gets (your own script: yours only)
# --------------------------------------------------------------------------------------------------

#: A script that declares only its own option and parses strictly: any other argument exits 2 ("unrecognized
#: arguments"). It leaves what it got in the model folder.
ARGPARSE_SCRIPT = """import argparse, json, os, sys
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
names = ("SM_HPS", "SM_USER_ARGS", "SM_HP_LR", "GPU_TRAIN_PROCESSES_PER_HOST", "GPU_TRAIN_NUM_WORKERS")
seen = {"argv": sys.argv[1:], "lr": args.lr, **{name: os.environ.get(name) for name in names}}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as out:
    json.dump(seen, out)
"""


@pytest.fixture()
def kept_trees(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The hosts of each ``--local`` run, their ``/opt/ml`` trees kept for the test to read (removed after it)."""
    from gpuctl import local_job

    results: list[Any] = []
    run_local_job = local_job.run_local_job

    def keeping(*args: Any, **kwargs: Any) -> Any:
        result = run_local_job(*args, **{**kwargs, "keep_trees": True})
        results.append(result)
        return result

    monkeypatch.setattr(local_job, "run_local_job", keeping)
    yield results
    for result in results:
        for host in result.hosts:  # <work>/<host>/opt/ml
            shutil.rmtree(host.root.parents[2], ignore_errors=True)


def test_gpuctl_train_synth_local_gives_your_script_only_your_hyperparameters(
    outdir: Path, no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture, kept_trees: list[Any]
) -> None:
    """The dev setup's defaults (config training.hyperparameters: arch, epochs, batch_size) are the built-in
    trainer's, and the launcher's settings travel in the request's Environment: ``-p lr=0.01`` is all the
    script gets, as the SageMaker training toolkit would give it."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(ARGPARSE_SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    # one type (dev's first choice): its derived distribution, not the fallback list's per-host defaults
    base = [
        "train",
        "--synth",
        str(outdir),
        "--source-dir",
        str(source),
        "-p",
        "lr=0.01",
        "--instance-type",
        "ml.g5.xlarge",
    ]
    assert main([*base, "--dry-run"]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["HyperParameters"] == {"lr": "0.01"}
    assert request["Environment"] == {"GPU_TRAIN_PROCESSES_PER_HOST": "1", "GPU_TRAIN_NUM_WORKERS": "2"}  # g5.xlarge

    out = tmp_path / "out"
    local = ["--local", "--channel", f"train={data}", "--channel", f"validation={data}", "--output", str(out)]
    assert main([*base, *local]) == 0, capsys.readouterr()
    assert "algo-1: exit 0" in capsys.readouterr().out
    with tarfile.open(out / "model.tar.gz") as archive:
        member = archive.extractfile("seen.json")
        assert member is not None
        seen = json.loads(member.read())
    assert seen == {
        "argv": ["--lr", "0.01"],
        "lr": 0.01,
        "SM_HPS": '{"lr":0.01}',
        "SM_USER_ARGS": '["--lr","0.01"]',
        "SM_HP_LR": "0.01",
        "GPU_TRAIN_PROCESSES_PER_HOST": "1",
        "GPU_TRAIN_NUM_WORKERS": "2",
    }
    [result] = kept_trees
    [host] = result.hosts
    assert json.loads(host.root.joinpath("input", "config", "hyperparameters.json").read_text()) == {"lr": "0.01"}
    assert json.loads(seen["SM_HPS"]) == {"lr": 0.01}


@pytest.mark.slow
def test_gpuctl_train_synth_local_gives_the_built_in_trainer_its_defaults(
    outdir: Path, no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture, kept_trees: list[Any]
) -> None:
    """No --source-dir: the setup's default code, the built-in trainer, with the dev config's defaults and the
    derived distribution in its hyperparameters as before; a tiny model and two steps so it runs on a CPU."""
    from container_helpers import make_images

    from gpu_train import pack

    images = make_images(tmp_path / "images", classes=3, per_class=16)
    shards = tmp_path / "shards"
    pack.pack(images, str(shards), image_size=32, target_bytes=64 * 1024, seed=1, progress=False)
    tiny = {"arch": "resnet_tiny", "width": "8", "batch_size": "8", "max_steps": "2", "log_steps": "1"}
    argv = ["train", "--synth", str(outdir), "--instance-type", "ml.g5.xlarge"]
    argv += [a for k, v in tiny.items() for a in ("-p", f"{k}={v}")]
    argv += ["--local", "--channel", f"train={shards}", "--channel", f"validation={shards}"]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 0, capsys.readouterr()
    assert "algo-1: exit 0" in capsys.readouterr().out
    [result] = kept_trees
    [host] = result.hosts
    hyperparameters = json.loads(host.root.joinpath("input", "config", "hyperparameters.json").read_text())
    # config/dev.yaml's epochs (arch and batch_size overridden above) and the derived distribution of ml.g5.xlarge
    assert hyperparameters == {"processes_per_host": "1", "num_workers": "2", "epochs": "10", **tiny}
    assert (tmp_path / "out" / "model.tar.gz").is_file()


# --------------------------------------------------------------------------------------------------
# gpuctl train --synth: the input channels a user names (your own script: yours only)
# --------------------------------------------------------------------------------------------------

#: The SageMaker examples' script: its data in the channel its user named ``training`` (``fit({"training": ...})``).
CHANNEL_SCRIPT = """import json, os
folder = os.environ["SM_CHANNEL_TRAINING"]
seen = {
    "files": sorted(os.listdir(folder)),
    "channels": json.loads(os.environ["SM_CHANNELS"]),
    "first": open(os.path.join(folder, "part-0.csv")).read(),
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as out:
    json.dump(seen, out)
"""


def _seen(out: Path) -> Any:
    with tarfile.open(out / "model.tar.gz") as archive:
        member = archive.extractfile("seen.json")
        assert member is not None
        return json.loads(member.read())


def test_gpuctl_train_synth_local_your_script_reads_the_channel_you_name(
    outdir: Path, no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture, kept_trees: list[Any]
) -> None:
    """``--channel training=FOLDER`` adds the channel the script reads (SM_CHANNEL_TRAINING), and the setup's
    dataset channels (train, validation) are not given: your own code gets exactly the channels you name."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(CHANNEL_SCRIPT)
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.csv").write_text("x,y\n1,2\n")
    out = tmp_path / "out"
    argv = ["train", "--synth", str(outdir), "--source-dir", str(source), "--local", "--channel", f"training={data}"]
    assert main([*argv, "--output", str(out)]) == 0, capsys.readouterr()
    assert "algo-1: exit 0" in capsys.readouterr().out
    assert _seen(out) == {
        "files": ["part-0.csv"],
        "channels": ["code", "sm_drivers", "training"],
        "first": "x,y\n1,2\n",
    }
    [result] = kept_trees
    [host] = result.hosts
    config = json.loads(host.root.joinpath("input", "config", "inputdataconfig.json").read_text())
    assert sorted(config) == ["code", "sm_drivers", "training"]
    assert config["training"]["TrainingInputMode"] == "File"  # SageMaker's default for a channel you name


def test_gpuctl_train_synth_local_a_script_that_reads_no_data_needs_no_channel(
    outdir: Path, no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(
        "import os\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'seen.json'), 'w').write(os.environ['SM_CHANNELS'])\n"
    )
    out = tmp_path / "out"
    argv = ["train", "--synth", str(outdir), "--source-dir", str(source), "--local", "--output", str(out)]
    assert main(argv) == 0, capsys.readouterr()
    assert _seen(out) == ["code", "sm_drivers"]
    # --dataset: the setup's dataset channels again, each then needs its folder.
    assert main([*argv, "--dataset"]) == 2
    assert "channels ['train', 'validation'] have no local data" in capsys.readouterr().err


def test_gpuctl_train_synth_input_under_a_readable_prefix_is_the_jobs_channel(
    outdir: Path, spec_text: str, no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('own code')\n")
    [readable] = json.loads(spec_text)["readable_inputs"]  # config/dev.yaml: the default, the datasets bucket
    assert readable.startswith("s3://placeholder-") and readable.endswith("/")
    base = ["train", "--synth", str(outdir), "--source-dir", str(source), "--dry-run"]
    given = ["--input", f"training={readable}corpora/en/", "--input-mode", "training=FastFile"]
    assert main([*base, *given]) == 0
    request = json.loads(capsys.readouterr().out)
    channels = {c["ChannelName"]: c for c in request["InputDataConfig"]}
    assert list(channels) == ["training", "code", "sm_drivers"]
    assert channels["training"]["DataSource"]["S3DataSource"]["S3Uri"] == f"{readable}corpora/en/"
    assert channels["training"]["InputMode"] == "FastFile"
    assert main([*base, *given, "--dataset"]) == 0
    names = [c["ChannelName"] for c in json.loads(capsys.readouterr().out)["InputDataConfig"]]
    assert names == ["train", "validation", "training", "code", "sm_drivers"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            ["--input", "training=s3://someone-elses-bucket/data/"],
            "channel 'training': s3_uri='s3://someone-elses-bucket/data/' is not readable by the job role; allowed: "
            "a URI under s3://placeholder-",
        ),
        (["--input", "bad name=s3://x/"], "channel name='bad name' is not allowed; allowed: 1 to 64 letters"),
        (["--input", "code=s3://x/"], "channel names ['code'] are the launcher's"),
        (["--input-mode", "training=File"], "--input-mode training: no such --input"),
    ],
    ids=["outside-readable", "bad-name", "runtime-channel", "mode-without-input"],
)
def test_gpuctl_train_synth_refuses_an_input_before_any_job(
    outdir: Path, no_aws: None, tmp_path: Path, capsys: pytest.CaptureFixture, given: list[str], message: str
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text("print('own code')\n")
    assert main(["train", "--synth", str(outdir), "--source-dir", str(source), "--dry-run", *given]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    if "readable" in message:
        assert "(the prefixes config training.readable_inputs grants the job role)" in err
