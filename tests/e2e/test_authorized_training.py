"""Training journeys, authorized: every AWS request they make, evaluated against the policies the app synthesizes.

For the dev and prod apps, the state machine (the synthesized ASL, run by ``asl_runner`` with the cloud assembly's
names) renders the ``CreateTrainingJob`` / ``CreateProcessingJob`` request of an execution; the requests SageMaker
then makes with the execution role (``gpu_constructs.authz.journeys``: every channel's listing and reads, the output
and checkpoint writes, KMS, logs) and the state machine's own (create the job, pass the role) are evaluated against
the identity policies of each role and the policies of the buckets and keys they touch (``gpu_constructs.authz``).
A bring-your-own-script job is launched by ``gpuctl train --source-dir`` as a role granted exactly
``TrainingPipeline.grant_run_jobs``: every API call gpuctl sends is recorded and evaluated. The local ``/opt/ml``
run of the default job downloads "as the role" (``run_local_job(authorize=...)``).

Each journey also has a failing example: one permission it needs removed from the synthesized template.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asl_runner import run
from authz_helpers import as_role, denied, pipeline_definition, pipeline_machine, top_level, without
from aws_cdk import aws_iam as iam

from gpu_constructs.authz import Assembly, AuthRequest, check_requests, job_requests, start_job_requests
from gpu_constructs.authz.api_calls import api_call_requests
from gpu_constructs.templates import StackView
from gpuctl.local_job import LocalJobError, run_local_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_shards"


def task_calls(assembly: Assembly, execution_input: dict[str, Any]) -> list[Any]:
    outcome = run(pipeline_definition(assembly), execution_input)
    assert outcome.status == "PAUSED_AT_TASK", (outcome.status, outcome.error, outcome.cause)
    return list(outcome.tasks)


def journey(assembly: Assembly, execution_input: dict[str, Any]) -> list[AuthRequest]:
    """Every request of the execution's first SageMaker task: the job role's and the state machine role's."""
    [call] = task_calls(assembly, execution_input)
    kind = "training" if "TrainingJob" in call.resource else "processing"
    located = pipeline_machine(assembly)
    machine_role = str(assembly.resolve(located.properties["RoleArn"], located.stack))
    return [
        *job_requests(assembly, kind, call.parameters),
        *start_job_requests(assembly, machine_role, kind, call.parameters),
    ]


# -- dev and prod: the default job and the prepare step --------------------------------------------------------


@pytest.fixture(scope="module")
def dev_stacks(tmp_path_factory: pytest.TempPathFactory) -> list[StackView]:
    """The dev app with one more role in its training stack: an operator granted ``grant_run_jobs`` (what a team
    gives the people or CI that run ``gpuctl train``)."""
    from stacks.app_builder import build_app

    outdir = tmp_path_factory.mktemp("authorized-dev")
    platform = build_app("dev", outdir=str(outdir), nag=False)
    assert platform.training is not None
    operator = iam.Role(
        platform.training, "Operator", role_name="gpu-dev-operator", assumed_by=iam.AccountRootPrincipal()
    )
    platform.training.pipeline.grant_run_jobs(operator)
    platform.app.synth()
    return top_level(outdir)


@pytest.fixture(scope="module")
def prod_stacks(synth: Any) -> list[StackView]:
    return top_level(synth("prod").outdir)


@pytest.mark.parametrize("execution_input", [{}, {"prepare": True}], ids=["train", "prepare"])
@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_request_of_the_default_job_is_allowed(
    env: str, execution_input: dict[str, Any], dev_stacks: list[StackView], prod_stacks: list[StackView]
) -> None:
    assembly = Assembly(dev_stacks if env == "dev" else prod_stacks)
    requests = journey(assembly, execution_input)
    [call] = task_calls(assembly, execution_input)
    if execution_input:
        inputs = {f"input:{i['InputName']}" for i in call.parameters["ProcessingInputs"] if "S3Input" in i}
        outputs = {f"output:{o['OutputName']}" for o in call.parameters["ProcessingOutputConfig"]["Outputs"]}
    else:
        channels = call.parameters["InputDataConfig"]
        inputs = {f"channel:{c['ChannelName']}" for c in channels if "S3DataSource" in c["DataSource"]}
        outputs = {"output"}
        fsx = {c["ChannelName"] for c in channels if "FileSystemDataSource" in c["DataSource"]}
        assert fsx == ({"train", "validation"} if env == "prod" else set())  # FSx channels make no S3 request
    assert {"input:sm_drivers"} <= inputs if execution_input else {"channel:code", "channel:sm_drivers"} <= inputs
    assert {r.subject for r in requests} >= inputs | outputs | {"logs", "pass-role"}
    assert {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "kms:GenerateDataKey", "iam:PassRole"} <= {
        r.action for r in requests
    }
    assert denied(assembly, requests) == []


def test_without_the_listing_of_the_code_channel_the_job_is_denied(dev_stacks: list[StackView]) -> None:
    # The grants before this check existed: the role could read the code asset but not list it.
    assembly = without(dev_stacks, "s3:ListBucket", "cdk-hnb659fds-assets")
    assert denied(assembly, journey(assembly, {})) == ["channel:code:s3:ListBucket", "channel:sm_drivers:s3:ListBucket"]


def test_without_decrypting_the_data_key_the_dataset_download_is_denied(dev_stacks: list[StackView]) -> None:
    assembly = without(dev_stacks, "kms:Decrypt", "DataKey")
    # The datasets are SSE-KMS objects; the model upload is multipart, which decrypts the data key too.
    assert denied(assembly, journey(assembly, {})) == [
        "channel:train:kms:Decrypt",
        "channel:validation:kms:Decrypt",
        "output:kms:Decrypt",
    ]


def test_without_pass_role_the_state_machine_cannot_start_the_prepare_step(prod_stacks: list[StackView]) -> None:
    assembly = without(prod_stacks, "iam:PassRole", "PrepareRole")
    assert denied(assembly, journey(assembly, {"prepare": True})) == ["pass-role:iam:PassRole"]


# -- the default job, run locally as the role ---------------------------------------------------------------


def test_the_local_run_downloads_as_the_role(dev_stacks: list[StackView], tmp_path: Path) -> None:
    """run_local_job refuses, before placing any channel, a request whose downloads the role may not make."""
    assembly = without(dev_stacks, "s3:ListBucket", "cdk-hnb659fds-assets")
    [call] = task_calls(assembly, {})

    with pytest.raises(LocalJobError, match=r"is denied 2 request\(s\): .* may not s3:ListBucket on arn:aws:s3:::cdk"):
        run_local_job(call.parameters, {}, output_dir=tmp_path, authorize=as_role(assembly))
    allowed = Assembly(dev_stacks)
    assert check_requests(allowed, job_requests(allowed, "training", call.parameters)) == []


# -- bring your own script: gpuctl train --source-dir as a grant_run_jobs principal -------------------------


class Recorder:
    """boto3 clients whose every call is recorded (service, operation, API parameters) and answered without AWS."""

    ANSWERS: dict[str, dict[str, Any]] = {
        "ListObjectsV2": {"KeyCount": 0},
        "PutObject": {},
        "CreateTrainingJob": {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/x"},
    }

    def __init__(self) -> None:
        import boto3

        self.session = boto3.session.Session(
            region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def client(self, service: str, region: str | None) -> Any:
        client = self.session.client(service, region_name=region)
        name = client.meta.service_model.service_name
        service_id = client.meta.service_model.service_id.hyphenize()

        def record(model: Any, params: dict[str, Any], **_: Any) -> None:
            self.calls.append((name, model.name, copy.deepcopy(params)))

        def answer(model: Any, **_: Any) -> Any:
            return _Ok(), self.ANSWERS[model.name]

        client.meta.events.register(f"before-parameter-build.{service_id}", record)
        client.meta.events.register(f"before-call.{service_id}", answer)
        return client


class _Ok:
    status_code = 200
    headers: dict[str, str] = {}


@pytest.fixture()
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    from gpuctl import training_setup

    recorder = Recorder()
    monkeypatch.setattr(training_setup, "make_client", recorder.client)
    yield recorder


def _spec_file(assembly: Assembly, tmp_path: Path) -> Path:
    [parameter] = [
        p for p in assembly.resources("AWS::SSM::Parameter") if "job-spec" in json.dumps(p.properties.get("Name", ""))
    ]
    path = tmp_path / "spec.json"
    path.write_text(str(assembly.resolve(parameter.properties["Value"], parameter.stack)))
    return path


def _gpuctl_requests(assembly: Assembly, recorder: Recorder, principal: str) -> list[AuthRequest]:
    return [
        request
        for service, operation, params in recorder.calls
        for request in api_call_requests(assembly, principal, service, operation, params, "us-east-1")
    ]


OPERATOR = "arn:aws:iam::123456789012:role/gpu-dev-operator"


def test_gpuctl_train_source_dir_as_a_grant_run_jobs_principal(
    dev_stacks: list[StackView], recorder: Recorder, tmp_path: Path
) -> None:
    from gpuctl.cli import main

    assembly = Assembly(dev_stacks)
    argv = ["train", "--spec", str(_spec_file(assembly, tmp_path)), "--region", "us-east-1"]
    assert main([*argv, "--source-dir", str(EXAMPLE), "--job-name", "gpu-dev-train-byo"]) == 0
    operations = [f"{s}.{o}" for s, o, _ in recorder.calls]
    assert operations == ["s3.ListObjectsV2", "s3.PutObject", "sagemaker.CreateTrainingJob"]
    requests = _gpuctl_requests(assembly, recorder, OPERATOR)
    assert {r.action for r in requests} >= {"s3:ListBucket", "s3:PutObject", "kms:GenerateDataKey", "iam:PassRole"}
    assert denied(assembly, requests) == []
    # The job it started: the execution role may list and read the package gpuctl uploaded.
    [(_, _, create)] = [c for c in recorder.calls if c[1] == "CreateTrainingJob"]
    code = [c for c in create["InputDataConfig"] if c["ChannelName"] == "code"]
    assert code and code[0]["DataSource"]["S3DataSource"]["S3Uri"].endswith("/sourcedir.tar.gz")
    assert denied(assembly, job_requests(assembly, "training", create)) == []
    # Failing example: without the listing grant_run_jobs gives, S3 answers the package check with 403.
    narrowed = without(dev_stacks, "s3:ListBucket", "gpu-dev-train")
    assert denied(narrowed, requests) == [":s3:ListBucket"]


def test_the_readme_states_the_calls_of_each_role_as_generated(synth: Any) -> None:
    from platform_tools.authorization import BEGIN, END, journeys, load, table

    outdir = synth("dev").outdir
    assembly = load(outdir)
    readme = (ROOT / "README.md").read_text()
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == "\n" + table(assembly, journeys(assembly, outdir)), (
        "README's authorization table is stale: run `python -m platform_tools.authorization cdk.out --readme README.md`"
    )
    assert "`s3:ListBucket`, `s3:GetObject`" in block and "channel code (S3Prefix) is downloaded" in block


def test_the_authorization_command_fails_on_a_denied_request(
    synth: Any, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    import shutil

    from platform_tools.authorization import main

    outdir = synth("dev").outdir
    assert main([str(outdir)]) == 0
    assert "0 denied" in capsys.readouterr().out
    copy_dir = tmp_path / "cdk.out"
    shutil.copytree(outdir, copy_dir, ignore=shutil.ignore_patterns("asset.*"))
    [training] = copy_dir.glob("*-training.template.json")
    template = json.loads(training.read_text())
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy":
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            resource["Properties"]["PolicyDocument"]["Statement"] = [
                s for s in statements if not (s["Action"] == "s3:ListBucket" and "cdk-hnb659fds" in json.dumps(s))
            ]
    training.write_text(json.dumps(template))
    assert main([str(copy_dir)]) == 1
    err = capsys.readouterr().err
    assert "DENIED" in err and "may not s3:ListBucket on arn:aws:s3:::cdk-hnb659fds-assets" in err
    assert main([str(tmp_path / "none")]) == 2
