"""gpuctl train / status / logs / stop wiring, with botocore's Stubber as a call recorder (no AWS)."""

from __future__ import annotations

import datetime as dt
import json
import tarfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from gpu_constructs.training_spec import S3Channel, TrainingJobSpec, service_model_problems
from gpu_constructs.training_spec.code import TrainingCode
from gpu_constructs.training_spec.code_package import code_s3_key, package_source_dir
from gpu_train.metrics import METRIC_DEFINITIONS
from gpuctl import training_setup
from gpuctl.aws_errors import explain, explain_failure_reason, quota_name, service_quotas_url
from gpuctl.cli import main
from gpuctl.commands import train as train_command

REGION = "us-east-1"
STACK = "gpu-dev-training"
SPEC = TrainingJobSpec(
    image_uri="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker",
    role_arn="arn:aws:iam::123456789012:role/gpu-dev-training-PipelineExecutionRole",
    instance_type="ml.g5.xlarge",
    output_s3_uri="s3://gpu-dev-artifacts/output/gpu-dev-train/",
    channels=(S3Channel("train", "s3://gpu-dev-datasets/imagenet/{data_version}/train/"),),
    hyperparameters={"epochs": "10"},
    metric_definitions=tuple(METRIC_DEFINITIONS),
    job_name_prefix="gpu-dev-train",
)
STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:PipelineStateMachine"
PARAMETER = "/gpu-dev-train/job-spec"
OUTPUTS = [
    {"OutputKey": "JobSpecParameter", "OutputValue": PARAMETER},
    {"OutputKey": "JobNamePrefix", "OutputValue": "gpu-dev-train"},
    {"OutputKey": "StateMachineArn", "OutputValue": STATE_MACHINE},
]
SETUP = ["--stack", STACK, "--region", REGION]


class Recorder:
    """Real boto3 clients with Stubbers; records every call as ``service.Operation`` in order."""

    def __init__(self) -> None:
        self.session: Any = boto3.session.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        self.clients: dict[str, Any] = {}
        self.stubbers: dict[str, Stubber] = {}
        self.calls: list[str] = []

    def client(self, service: str, region: str | None) -> Any:
        assert region == REGION
        if service not in self.clients:
            client = self.session.client(service)
            name = client.meta.service_model.service_name
            client.meta.events.register("before-call.*.*", lambda model, **_: self.calls.append(f"{name}.{model.name}"))
            self.clients[service] = client
            self.stubbers[service] = Stubber(client)
            self.stubbers[service].activate()
        return self.clients[service]

    def stub(self, service: str) -> Stubber:
        self.client(service, REGION)
        return self.stubbers[service]

    def verify(self) -> None:
        for stubber in self.stubbers.values():
            stubber.assert_no_pending_responses()


@pytest.fixture()
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()
    monkeypatch.setattr(training_setup, "make_client", recorder.client)
    monkeypatch.setattr(training_setup, "sleep", lambda seconds: None)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "GPUCTL_STACK", "GPUCTL_ENV"):
        monkeypatch.delenv(name, raising=False)
    yield recorder
    recorder.verify()


def _describe_stack(recorder: Recorder) -> None:
    """The setup's stack, as describe_stacks answers it."""
    recorder.stub("cloudformation").add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": STACK,
                    "CreationTime": dt.datetime(2025, 1, 1),
                    "StackStatus": "CREATE_COMPLETE",
                    "Outputs": OUTPUTS,
                }
            ]
        },
        {"StackName": STACK},
    )


def _stack(recorder: Recorder) -> None:
    _describe_stack(recorder)
    recorder.stub("ssm").add_response(
        "get_parameter",
        {"Parameter": {"Name": PARAMETER, "Type": "String", "Value": json.dumps(SPEC.to_dict())}},
        {"Name": PARAMETER},
    )


# --------------------------------------------------------------------------------------------------
# gpuctl train
# --------------------------------------------------------------------------------------------------


def test_train_reads_the_stack_then_creates_the_validated_job(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    _stack(aws)
    expected = SPEC.to_request("gpu-dev-train-run1", hyperparameter_overrides={"epochs": "3"}, data_version="v2")
    aws.stub("sagemaker").add_response(
        "create_training_job",
        {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/gpu-dev-train-run1"},
        expected,
    )
    code = main(["train", *SETUP, "--job-name", "gpu-dev-train-run1", "-p", "epochs=3", "--data-version", "v2"])
    assert code == 0
    assert aws.calls == ["cloudformation.DescribeStacks", "ssm.GetParameter", "sagemaker.CreateTrainingJob"]
    out = capsys.readouterr().out
    assert "started gpu-dev-train-run1" in out
    assert "https://us-east-1.console.aws.amazon.com/sagemaker/home?region=us-east-1#/jobs/gpu-dev-train-run1" in out


def test_dry_run_prints_the_exact_request_and_sends_nothing(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    _stack(aws)
    code = main(["train", *SETUP, "--job-name", "gpu-dev-train-dry", "--instance-type", "ml.g5.12xlarge", "--dry-run"])
    assert code == 0
    assert aws.calls == ["cloudformation.DescribeStacks", "ssm.GetParameter"]
    request = json.loads(capsys.readouterr().out)
    assert service_model_problems("CreateTrainingJob", request) == []
    assert request == SPEC.to_request("gpu-dev-train-dry", instance_type="ml.g5.12xlarge")
    assert request["HyperParameters"]["processes_per_host"] == "4"  # 4 GPUs on ml.g5.12xlarge


def test_dry_run_from_a_local_spec_file_needs_no_aws(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC.to_dict()))
    code = main(["train", "--spec", str(spec_file), "--region", REGION, "--job-name", "gpu-dev-train-x", "--dry-run"])
    assert code == 0 and aws.calls == []
    request = json.loads(capsys.readouterr().out)
    assert service_model_problems("CreateTrainingJob", request) == []
    assert request["TrainingJobName"] == "gpu-dev-train-x"


def test_default_job_name_has_the_prefix_and_a_timestamp() -> None:
    name = train_command.default_job_name("gpu-dev-train", dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.UTC))
    assert name == "gpu-dev-train-20250304-050607"


def test_env_reads_the_stack_name_and_region_from_the_config(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    _stack(aws)
    assert main(["train", "--env", "dev", "--job-name", "gpu-dev-train-env", "--dry-run"]) == 0
    assert aws.calls == ["cloudformation.DescribeStacks", "ssm.GetParameter"]


def test_pipeline_starts_the_state_machine_with_the_runtime_values(aws: Recorder) -> None:
    _stack(aws)
    aws.stub("stepfunctions").add_response(
        "start_execution",
        {"executionArn": f"{STATE_MACHINE}:gpu-dev-train-p", "startDate": dt.datetime(2025, 1, 1)},
        {
            "stateMachineArn": STATE_MACHINE,
            "name": "gpu-dev-train-p",
            "input": json.dumps(
                {
                    "job_name": "gpu-dev-train-p",
                    "instance_type": "ml.g6.xlarge",
                    "hyperparameters": {"lr": "0.2"},
                    "prepare": True,
                }
            ),
        },
    )
    code = main(
        [
            "train",
            *SETUP,
            "--pipeline",
            "--prepare",
            "--job-name",
            "gpu-dev-train-p",
            "--instance-type",
            "ml.g6.xlarge",
            "-p",
            "lr=0.2",
        ]
    )
    assert code == 0
    assert aws.calls == ["cloudformation.DescribeStacks", "ssm.GetParameter", "stepfunctions.StartExecution"]


def test_processes_per_host_within_the_gpus_of_the_chosen_type_is_accepted(
    aws: Recorder, capsys: pytest.CaptureFixture
) -> None:
    _stack(aws)
    argv = ["train", *SETUP, "--dry-run", "--instance-type", "ml.g5.12xlarge", "-p", "processes_per_host=4"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["HyperParameters"]["processes_per_host"] == "4"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "epochs"], "-p 'epochs' is not NAME=VALUE"),
        (["--instance-type", "ml.m5.xlarge"], "has no NVIDIA GPU"),
        (["--instance-type", "ml.g5.xlarg"], "did you mean 'ml.g5.xlarge'"),
        (["--job-name", "someone-else-1"], "allowed: a name starting with 'gpu-dev-train'"),
        (["-p", "epochz=3"], "unknown hyperparameter 'epochz' (did you mean 'epochs'?)"),
        (["-p", "epochs=zero"], "hyperparameter epochs='zero' is not allowed"),
        # the GPU-count rule of the typed field, applied to the hyperparameter (ml.g5.xlarge: one GPU)
        (["-p", "processes_per_host=16"], "processes_per_host=16 needs 16 GPUs but 'ml.g5.xlarge' has a single GPU"),
        (["-p", "processes_per_host=2", "--pipeline"], "processes_per_host=2 needs 2 GPUs"),
        (["-p", "processes_per_host=four"], "processes_per_host='four' is not an integer; allowed: 0 (one process"),
        (
            ["-p", "processes_per_host=8", "--instance-type", "ml.g5.12xlarge"],
            "processes_per_host=8 is more than the 4 GPUs of 'ml.g5.12xlarge'",
        ),
    ],
)
def test_bad_input_is_a_usage_error_before_any_job_call(
    aws: Recorder, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    _stack(aws)
    assert main(["train", *SETUP, *argv]) == 2
    assert message in capsys.readouterr().err
    assert aws.calls == ["cloudformation.DescribeStacks", "ssm.GetParameter"]


def test_quota_error_names_the_quota_and_the_service_quotas_link(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    _stack(aws)
    aws.stub("sagemaker").add_client_error(
        "create_training_job",
        service_error_code="ResourceLimitExceeded",
        service_message="The account-level service limit 'ml.g5.xlarge for training job usage' is 0 Instances",
        expected_params={
            "TrainingJobName": "gpu-dev-train-q",
            **{k: ANY for k in SPEC.to_request("gpu-dev-train-q") if k != "TrainingJobName"},
        },
    )
    assert main(["train", *SETUP, "--job-name", "gpu-dev-train-q"]) == 1
    err = capsys.readouterr().err
    assert "request a quota increase for 'ml.g5.xlarge for training job usage'" in err
    assert "https://us-east-1.console.aws.amazon.com/servicequotas/home/services/sagemaker/quotas" in err


def test_missing_stack_says_how_to_deploy_it(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    aws.stub("cloudformation").add_client_error(
        "describe_stacks", service_error_code="ValidationError", service_message=f"Stack with id {STACK} does not exist"
    )
    assert main(["train", *SETUP]) == 1
    err = capsys.readouterr().err
    assert f"The training stack '{STACK}' is not deployed in {REGION}" in err
    assert f"npx cdk deploy {STACK}" in err


# --------------------------------------------------------------------------------------------------
# gpuctl status / logs / stop
# --------------------------------------------------------------------------------------------------

FAILED_JOB = {
    "TrainingJobName": "gpu-dev-train-f",
    "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/gpu-dev-train-f",
    "TrainingJobStatus": "Failed",
    "SecondaryStatus": "Failed",
    "FailureReason": "CapacityError: Unable to provision requested ML compute capacity. Please retry using a "
    "different ML instance type.",
    "AlgorithmSpecification": {"TrainingInputMode": "FastFile"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    "CreationTime": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    "ModelArtifacts": {"S3ModelArtifacts": ""},
}


def test_status_surfaces_the_failure_reason_in_plain_words(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    aws.stub("sagemaker").add_response("describe_training_job", FAILED_JOB, {"TrainingJobName": "gpu-dev-train-f"})
    assert main(["status", "gpu-dev-train-f", *SETUP]) == 1
    assert aws.calls == ["sagemaker.DescribeTrainingJob"]
    out = capsys.readouterr().out
    assert "gpu-dev-train-f: Failed (Failed)" in out
    assert "CapacityError: Unable to provision requested ML compute capacity" in out
    assert "SageMaker could not get ml.g5.xlarge capacity in us-east-1" in out
    assert "next step: retry later" in out


def test_train_then_status_in_order(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    _stack(aws)
    aws.stub("sagemaker").add_response("create_training_job", {"TrainingJobArn": FAILED_JOB["TrainingJobArn"]})
    aws.stub("sagemaker").add_response("describe_training_job", FAILED_JOB, {"TrainingJobName": "gpu-dev-train-f"})
    assert main(["train", *SETUP, "--job-name", "gpu-dev-train-f"]) == 0
    assert main(["status", "gpu-dev-train-f", *SETUP]) == 1
    assert aws.calls == [
        "cloudformation.DescribeStacks",
        "ssm.GetParameter",
        "sagemaker.CreateTrainingJob",
        "sagemaker.DescribeTrainingJob",
    ]
    assert "CapacityError" in capsys.readouterr().out


def test_status_shows_progress_and_metrics(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    start = dt.datetime(2025, 1, 1, 10, 0, tzinfo=dt.UTC)
    job = {
        **FAILED_JOB,
        "TrainingJobStatus": "Completed",
        "SecondaryStatus": "Completed",
        "TrainingStartTime": start,
        "TrainingEndTime": start + dt.timedelta(minutes=30),
        "FinalMetricDataList": [{"MetricName": "train:samples_per_sec", "Value": 4410.5}],
        "ModelArtifacts": {"S3ModelArtifacts": "s3://gpu-dev-artifacts/output/gpu-dev-train/x/output/model.tar.gz"},
        "SecondaryStatusTransitions": [{"Status": "Training", "StartTime": start, "StatusMessage": "Training"}],
    }
    del job["FailureReason"]
    aws.stub("sagemaker").add_response("describe_training_job", job, {"TrainingJobName": "gpu-dev-train-f"})
    assert main(["status", "gpu-dev-train-f", *SETUP]) == 0
    out = capsys.readouterr().out
    assert "training time: 30m00s of 1h00m00s max (50%)" in out
    assert "train:samples_per_sec: 4410.5" in out
    assert "model: s3://gpu-dev-artifacts/output/gpu-dev-train/x/output/model.tar.gz" in out


def test_status_shows_the_type_selected_from_a_fallback_list(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    listed = {
        "InstancePreferences": [
            {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
            {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 2},
        ],
        "VolumeSizeInGB": 100,
    }
    waiting = {**FAILED_JOB, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting", "ResourceConfig": listed}
    del waiting["FailureReason"]
    selected = {**listed, "SelectedInstanceType": "ml.p4de.24xlarge", "SelectedInstanceCount": 2}
    failed = {**FAILED_JOB, "ResourceConfig": selected}
    for job in (waiting, failed):
        aws.stub("sagemaker").add_response("describe_training_job", job, {"TrainingJobName": "gpu-dev-train-f"})
    assert main(["status", "gpu-dev-train-f", *SETUP]) == 0
    assert "instances: first with capacity of ml.p4d.24xlarge x 2, ml.p4de.24xlarge x 2" in capsys.readouterr().out
    assert main(["status", "gpu-dev-train-f", *SETUP]) == 1
    out = capsys.readouterr().out
    assert "instances: 2 x ml.p4de.24xlarge (selected from ml.p4d.24xlarge x 2, ml.p4de.24xlarge x 2)" in out
    assert "SageMaker could not get ml.p4de.24xlarge capacity" in out  # the selected type's quota and capacity


def test_status_without_a_job_lists_the_setups_jobs(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    _describe_stack(aws)
    aws.stub("sagemaker").add_response(
        "list_training_jobs",
        {
            "TrainingJobSummaries": [
                {
                    "TrainingJobName": "gpu-dev-train-b",
                    "TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/b",
                    "CreationTime": dt.datetime(2025, 1, 2),
                    "TrainingJobStatus": "InProgress",
                },
            ]
        },
        {"SortBy": "CreationTime", "SortOrder": "Descending", "MaxResults": 10, "NameContains": "gpu-dev-train"},
    )
    assert main(["status", *SETUP]) == 0
    assert aws.calls == ["cloudformation.DescribeStacks", "sagemaker.ListTrainingJobs"]
    assert "gpu-dev-train-b" in capsys.readouterr().out


def test_logs_print_each_host(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    aws.stub("logs").add_response(
        "filter_log_events",
        {
            "events": [
                {
                    "logStreamName": "gpu-dev-train-f/algo-1-1700000000",
                    "timestamp": 1,
                    "message": "epoch=1 step=50 loss=2.3\n",
                    "eventId": "1",
                },
                {
                    "logStreamName": "gpu-dev-train-f/algo-2-1700000000",
                    "timestamp": 2,
                    "message": "ready",
                    "eventId": "2",
                },
            ]
        },
        {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamNamePrefix": "gpu-dev-train-f/", "interleaved": True},
    )
    assert main(["logs", "gpu-dev-train-f", *SETUP]) == 0
    assert capsys.readouterr().out.splitlines() == ["[algo-1] epoch=1 step=50 loss=2.3", "[algo-2] ready"]


def test_stop_stops_the_job(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    aws.stub("sagemaker").add_response("stop_training_job", {}, {"TrainingJobName": "gpu-dev-train-f"})
    assert main(["stop", "gpu-dev-train-f", *SETUP]) == 0
    assert aws.calls == ["sagemaker.StopTrainingJob"]
    assert "checkpoints on SIGTERM" in capsys.readouterr().out


def test_access_denied_on_stop_names_the_next_step(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    aws.stub("sagemaker").add_client_error(
        "stop_training_job", service_error_code="AccessDeniedException", service_message="not authorized"
    )
    assert main(["stop", "gpu-dev-train-f", *SETUP]) == 1
    err = capsys.readouterr().err
    assert "Your AWS identity may not call StopTrainingJob" in err and "grant_run_jobs" in err


# --------------------------------------------------------------------------------------------------
# Plain words for AWS errors
# --------------------------------------------------------------------------------------------------


class _ClientError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.response = {"Error": {"Code": code, "Message": message}}


def test_explanations_have_a_next_step() -> None:
    assert quota_name("ml.p5.48xlarge", spot=True) == "ml.p5.48xlarge for spot training job usage"
    assert service_quotas_url("eu-west-1").startswith("https://eu-west-1.console.aws.amazon.com/servicequotas/")
    cases = {
        ("InsufficientCapacityException", "no capacity"): "retry later",
        ("ValidationException", "Invalid S3 path"): "gpuctl train --dry-run prints the exact request",
        ("ThrottlingException", "slow down"): "wait a minute",
        ("ResourceInUse", "exists"): "choose another name",
        ("ExpiredTokenException", "expired"): "aws sso login",
    }
    for (code, message), hint in cases.items():
        problem = explain(_ClientError(code, message), operation="CreateTrainingJob", instance_type="ml.g5.xlarge")
        assert hint in problem.next_step, code
        assert problem.code == code

    class NoCredentialsError(Exception):
        pass

    assert "aws sso login" in explain(NoCredentialsError()).next_step


def test_failure_reasons_in_plain_words() -> None:
    quota = explain_failure_reason(
        "ResourceLimitExceeded: account-level service limit", instance_type="ml.p4d.24xlarge"
    )
    assert "'ml.p4d.24xlarge for training job usage'" in quota.next_step
    algo = explain_failure_reason("AlgorithmError: ExecuteUserScriptError", job_name="gpu-dev-train-a")
    assert "gpuctl logs gpu-dev-train-a" in algo.next_step
    data = explain_failure_reason("ClientError: No S3 objects found under S3 URL given")
    assert "gpuctl shard" in data.next_step


def test_train_wait_polls_until_the_job_ends(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    _stack(aws)
    running = {**FAILED_JOB, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Downloading"}
    done = {**FAILED_JOB, "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed"}
    del running["FailureReason"], done["FailureReason"]
    sagemaker = aws.stub("sagemaker")
    sagemaker.add_response("create_training_job", {"TrainingJobArn": FAILED_JOB["TrainingJobArn"]})
    sagemaker.add_response("describe_training_job", running, {"TrainingJobName": "gpu-dev-train-f"})
    sagemaker.add_response("describe_training_job", done, {"TrainingJobName": "gpu-dev-train-f"})
    assert main(["train", *SETUP, "--job-name", "gpu-dev-train-f", "--wait"]) == 0
    assert aws.calls[-2:] == ["sagemaker.DescribeTrainingJob", "sagemaker.DescribeTrainingJob"]
    out = capsys.readouterr().out
    assert "gpu-dev-train-f: InProgress (Downloading)" in out and "gpu-dev-train-f: Completed (Completed)" in out


def test_logs_follow_stops_when_the_job_ends(aws: Recorder, capsys: pytest.CaptureFixture) -> None:
    logs = aws.stub("logs")
    prefix = {"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamNamePrefix": "gpu-dev-train-f/"}
    first = {"logStreamName": "gpu-dev-train-f/algo-1-1", "timestamp": 5, "message": "one", "eventId": "a"}
    second = {"logStreamName": "gpu-dev-train-f/algo-1-1", "timestamp": 9, "message": "two", "eventId": "b"}
    logs.add_response("filter_log_events", {"events": [first]}, {**prefix, "interleaved": True})
    aws.stub("sagemaker").add_response(
        "describe_training_job",
        {**FAILED_JOB, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"},
        {"TrainingJobName": "gpu-dev-train-f"},
    )
    logs.add_response("filter_log_events", {"events": [first, second]}, {**prefix, "interleaved": True, "startTime": 5})
    aws.stub("sagemaker").add_response("describe_training_job", FAILED_JOB, {"TrainingJobName": "gpu-dev-train-f"})
    assert main(["logs", "gpu-dev-train-f", *SETUP, "--follow"]) == 1  # the job failed
    assert capsys.readouterr().out.splitlines() == ["[algo-1] one", "[algo-1] two"]  # no line twice


# --------------------------------------------------------------------------------------------------
# gpuctl train: your own code (--source-dir), its upload, and --local
# --------------------------------------------------------------------------------------------------

ARTIFACTS = "gpu-dev-artifacts"
CODE = TrainingCode(
    source_s3_uri=f"s3://{ARTIFACTS}/code/gpu-dev-train/builtin/sourcedir.tar.gz",
    drivers_s3_uri=f"s3://{ARTIFACTS}/drivers/gpu_train_driver.pyz",
    upload_prefix=f"s3://{ARTIFACTS}/code/gpu-dev-train/",
    builtin=True,
)
CODE_SPEC = SPEC.with_changes(code=CODE)
#: A script that leaves its arguments and its train channel's files in the model folder.
SCRIPT = """import os, pathlib, sys
model = pathlib.Path(os.environ["SM_MODEL_DIR"])
files = sorted(p.name for p in pathlib.Path(os.environ["SM_CHANNEL_TRAIN"]).iterdir())
(model / "result.txt").write_text(" ".join(sys.argv[1:]) + " | " + ",".join(files))
"""


def _spec_file(tmp_path: Path, spec: TrainingJobSpec = CODE_SPEC) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec.to_dict()))
    return path


def _source(tmp_path: Path, files: dict[str, str] | None = None, name: str = "src") -> Path:
    root = tmp_path / name
    for relative, text in (files or {"train.py": SCRIPT, "lib/util.py": "X = 1\n"}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def _code_uri(source: Path, entry_point: str = "train.py") -> str:
    return f"s3://{ARTIFACTS}/{code_s3_key('gpu-dev-train', package_source_dir(source, entry_point))}"


def _dry_run(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Run ``gpuctl train ... --dry-run``: the "would upload" lines (on stderr, so stdout is only the JSON a
    pipe reads), and the JSON."""
    assert main(["train", *argv, "--dry-run"]) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if line.startswith("would upload")]
    return notes, json.loads(captured.out)


def _code_channel(request: dict[str, Any]) -> str:
    [channel] = [c for c in request["InputDataConfig"] if c["ChannelName"] == "code"]
    return str(channel["DataSource"]["S3DataSource"]["S3Uri"])


def test_source_dir_dry_run_names_the_content_addressed_package_and_runs_it(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = _source(tmp_path)
    package = package_source_dir(source, "train.py")
    spec = ["--spec", str(_spec_file(tmp_path)), "--region", REGION, "--job-name", "gpu-dev-train-own"]
    lines, request = _dry_run(capsys, [*spec, "--source-dir", str(source), "--entry-point", "train.py"])
    uri = f"s3://{ARTIFACTS}/code/gpu-dev-train/{package.sha256}/sourcedir.tar.gz"
    assert lines == [f"would upload 2 files ({len(package.data)} bytes) to {uri}"]
    assert _code_channel(request) == uri
    algorithm = request["AlgorithmSpecification"]
    assert algorithm["ContainerArguments"] == [
        *("--entry-point", "train.py", "--distribution", "auto"),
        *("--framework", "auto", "--package-index", "no"),
    ]
    assert algorithm["ContainerEntrypoint"][:2] == ["/bin/sh", "-c"]
    assert service_model_problems("CreateTrainingJob", request) == []
    assert aws.calls == []  # a dry run asks S3 nothing


def test_the_upload_uri_changes_with_the_content_only(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = _source(tmp_path)
    argv = ["--spec", str(_spec_file(tmp_path)), "--region", REGION, "--job-name", "gpu-dev-train-own"]

    def uri() -> str:
        return _code_channel(_dry_run(capsys, [*argv, "--source-dir", str(source)])[1])

    first = uri()
    assert uri() == first  # the same folder: the same package, the same key
    (source / "__pycache__").mkdir()
    (source / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    assert uri() == first  # a built-in exclusion is not part of the package
    (source / "lib" / "util.py").write_text("X = 2\n")
    changed = uri()
    assert changed != first and changed == _code_uri(source)


def test_entry_point_distribution_and_framework_reach_the_launcher(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = _source(tmp_path, {"src/fit.py": "print('fit')\n"})
    argv = ["--spec", str(_spec_file(tmp_path)), "--region", REGION, "--source-dir", str(source)]
    argv += ["--entry-point", "src/fit.py", "--distribution", "single", "--framework", "pytorch"]
    _, request = _dry_run(capsys, argv)
    assert request["AlgorithmSpecification"]["ContainerArguments"] == [
        *("--entry-point", "src/fit.py", "--distribution", "single"),
        *("--framework", "pytorch", "--package-index", "no"),
    ]
    assert _code_channel(request) == _code_uri(source, "src/fit.py")


def test_metrics_replace_the_setups_and_instance_count_sets_the_hosts(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["--spec", str(_spec_file(tmp_path)), "--region", REGION, "--source-dir", str(_source(tmp_path))]
    argv += ["--metric", "loss=loss=([0-9.]+)", "--metric", "acc = acc=([0-9.]+)", "--instance-count", "2"]
    _, request = _dry_run(capsys, argv)
    assert request["AlgorithmSpecification"]["MetricDefinitions"] == [
        {"Name": "loss", "Regex": "loss=([0-9.]+)"},
        {"Name": "acc", "Regex": "acc=([0-9.]+)"},
    ]
    assert request["ResourceConfig"]["InstanceCount"] == 2
    # without the options the setup's own values stay
    _, plain = _dry_run(capsys, ["--spec", str(_spec_file(tmp_path)), "--region", REGION])
    assert plain["AlgorithmSpecification"]["MetricDefinitions"] == [dict(m) for m in METRIC_DEFINITIONS]
    assert plain["ResourceConfig"]["InstanceCount"] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--metric", "x"], "--metric 'x' is not NAME=VALUE; allowed: e.g. --metric loss='loss=([0-9.]+)'"),
        (["--metric", "loss="], "--metric 'loss=' is not NAME=VALUE"),
        (["--metric", "=loss=(.*)"], "--metric '=loss=(.*)' is not NAME=VALUE"),
        (["--instance-count", "0"], "instance_count=0 is not allowed; allowed: an integer >= 1"),
        (["--entry-point", "fit.py"], "entry_point='fit.py' is not a file in"),
        (["--entry-point", "../train.py"], "entry_point='../train.py' is not allowed"),
    ],
)
def test_bad_code_options_exit_2_naming_the_option(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    source = _source(tmp_path)
    code = main(["train", "--spec", str(_spec_file(tmp_path)), "--region", REGION, "--source-dir", str(source), *argv])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuctl train: ") and message in err
    assert aws.calls == []


@pytest.mark.parametrize(
    ("package_index", "files", "accepted"),
    [
        (False, {"requirements.txt": "einops==0.8.1\n"}, False),
        (False, {"requirements.txt": "einops==0.8.1\n", "wheels/README": "not a wheel\n"}, False),
        (False, {"requirements.txt": "einops==0.8.1\n", "wheels/x.whl": "PK"}, True),
        (True, {"requirements.txt": "einops==0.8.1\n"}, True),
        (False, {}, True),  # no requirements.txt: nothing to install
    ],
    ids=["private-no-wheels", "private-wheels-folder-without-wheels", "private-vendored", "index", "no-requirements"],
)
def test_requirements_need_a_package_index_or_vendored_wheels(
    aws: Recorder,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    package_index: bool,
    files: dict[str, str],
    accepted: bool,
) -> None:
    source = _source(tmp_path, {"train.py": "print(1)\n", **files})
    spec_file = _spec_file(tmp_path, SPEC.with_changes(code=replace(CODE, package_index=package_index)))
    code = main(["train", "--spec", str(spec_file), "--region", REGION, "--source-dir", str(source), "--dry-run"])
    captured = capsys.readouterr()
    if accepted:
        assert code == 0, captured.err
        assert json.loads(captured.out[captured.out.index("{") :])["AlgorithmSpecification"]["ContainerArguments"][
            -1
        ] == ("yes" if package_index else "no")
    else:
        assert code == 2
        assert f"{source}/requirements.txt lists packages, but this setup's jobs have no route" in captured.err
        assert f"gpuctl vendor {source}" in captured.err


@pytest.mark.parametrize(
    ("spec", "argv", "message"),
    [
        (SPEC, ["--source-dir", "SRC"], "this setup's jobs run the image's own entry (its spec has no code)"),
        (SPEC, ["--distribution", "single"], "allowed: deploy the training stack of this version"),
        (SPEC, ["--local", "--channel", "train=SRC"], "--local needs a setup whose jobs run code through the launcher"),
        (CODE_SPEC, ["--entry-point", "train.py"], "--entry-point needs --source-dir (the setup's default code is"),
        (
            SPEC.with_changes(code=replace(CODE, upload_prefix=None)),
            ["--source-dir", "SRC"],
            "the setup publishes no code upload prefix; allowed: redeploy the training stack",
        ),
    ],
    ids=["no-code-source-dir", "no-code-distribution", "no-code-local", "entry-point-alone", "no-upload-prefix"],
)
def test_code_options_the_setup_cannot_run_exit_2(
    aws: Recorder,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    spec: TrainingJobSpec,
    argv: list[str],
    message: str,
) -> None:
    source = _source(tmp_path)
    argv = [str(source) if a == "SRC" else a.replace("=SRC", f"={source}") for a in argv]
    assert main(["train", "--spec", str(_spec_file(tmp_path, spec)), "--region", REGION, *argv, "--dry-run"]) == 2
    assert message in capsys.readouterr().err
    assert aws.calls == []


def test_the_runtime_checks_hyperparameters_of_the_built_in_code_only(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["train", "--spec", str(_spec_file(tmp_path)), "--region", REGION, "-p", "foo=1", "--dry-run"]
    assert main(argv) == 2
    assert "unknown hyperparameter 'foo'; allowed: " in capsys.readouterr().err
    _, request = _dry_run(capsys, [*argv[1:-1], "--source-dir", str(_source(tmp_path))])
    assert request["HyperParameters"]["foo"] == "1"  # the script's own argument, not the runtime's


def _code_stack(recorder: Recorder, spec: TrainingJobSpec = CODE_SPEC) -> None:
    _describe_stack(recorder)
    recorder.stub("ssm").add_response(
        "get_parameter",
        {"Parameter": {"Name": PARAMETER, "Type": "String", "Value": json.dumps(spec.to_dict())}},
        {"Name": PARAMETER},
    )


def test_pipeline_dry_run_passes_the_upload_and_entry_point(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _code_stack(aws)
    source = _source(tmp_path)
    argv = [*SETUP, "--pipeline", "--job-name", "gpu-dev-train-p", "--source-dir", str(source), "-p", "lr=0.2"]
    lines, started = _dry_run(capsys, argv)
    uri = _code_uri(source)
    assert lines == [f"would upload 2 files ({len(package_source_dir(source, 'train.py').data)} bytes) to {uri}"]
    assert started == {
        "stateMachineArn": STATE_MACHINE,
        "name": "gpu-dev-train-p",
        "input": {
            "job_name": "gpu-dev-train-p",
            "code": uri,
            "entry_point": "train.py",
            "hyperparameters": {"lr": "0.2"},
        },
    }
    assert aws.calls == ["cloudformation.DescribeStacks", "ssm.GetParameter"]


@pytest.mark.parametrize(
    "argv",
    [["--instance-count", "2"], ["--metric", "loss=loss=(.*)"], ["--framework", "pytorch"]],
    ids=["instance-count", "metric", "framework"],
)
def test_pipeline_refuses_what_the_state_machine_fixes(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str]
) -> None:
    assert main(["train", *SETUP, "--pipeline", "--source-dir", str(_source(tmp_path)), *argv, "--dry-run"]) == 2
    assert aws.calls == []  # refused before the setup is read or anything is packaged
    assert "--pipeline takes the setup's instance count, metrics, distribution and framework" in (
        capsys.readouterr().err
    )


def test_pipeline_refuses_instance_count_before_uploading(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["train", *SETUP, "--pipeline", "--source-dir", str(_source(tmp_path)), "--instance-count", "2"]
    assert main(argv) == 2
    assert aws.calls == []


@pytest.fixture()
def s3(aws: Recorder, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """Moto's S3 and KMS (the artifacts bucket and its key) behind ``make_client('s3')``; the recorder's stubbed
    clients for the rest. Yields (S3 client, key ARN)."""
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=ARTIFACTS)
        key_arn = boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["Arn"]
        client.meta.events.register("before-call.s3.*", lambda model, **_: aws.calls.append(f"s3.{model.name}"))

        def make_client(service: str, region: str | None) -> Any:
            return client if service == "s3" else aws.client(service, region)

        monkeypatch.setattr(training_setup, "make_client", make_client)
        yield client, key_arn


def test_source_dir_is_uploaded_once_with_the_setups_kms_key(
    aws: Recorder, s3: tuple[Any, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    client, key_arn = s3
    spec = CODE_SPEC.with_changes(output_kms_key=key_arn)
    spec_file = _spec_file(tmp_path, spec)
    source = _source(tmp_path)
    package = package_source_dir(source, "train.py")
    uri = _code_uri(source)
    key = uri.removeprefix(f"s3://{ARTIFACTS}/")
    sent = replace(CODE, source_s3_uri=uri, entry_point="train.py", builtin=False)
    for name in ("gpu-dev-train-u1", "gpu-dev-train-u2"):
        aws.stub("sagemaker").add_response(
            "create_training_job",
            {"TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}"},
            spec.with_other_code(sent).with_inputs(dataset=False).to_request(name),  # your code: only your inputs
        )
    argv = ["train", "--spec", str(spec_file), "--region", REGION, "--source-dir", str(source)]

    assert main([*argv, "--job-name", "gpu-dev-train-u1"]) == 0
    assert aws.calls == ["s3.ListObjectsV2", "s3.PutObject", "sagemaker.CreateTrainingJob"]
    assert f"code package uploaded: {uri} (2 files)" in capsys.readouterr().err
    head = client.head_object(Bucket=ARTIFACTS, Key=key)
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", key_arn)
    assert head["ContentType"] == "application/gzip"
    assert client.get_object(Bucket=ARTIFACTS, Key=key)["Body"].read() == package.data

    aws.calls.clear()
    assert main([*argv, "--job-name", "gpu-dev-train-u2"]) == 0
    assert aws.calls == ["s3.ListObjectsV2", "sagemaker.CreateTrainingJob"]  # same content: no second PutObject
    captured = capsys.readouterr()
    assert f"code package already uploaded (same content): {uri}" in captured.err
    assert "started gpu-dev-train-u2" in captured.out


def test_local_runs_the_request_with_the_source_dir(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.bin").write_bytes(b"\0")
    monkeypatch.chdir(tmp_path)  # the default --output is ./local-output/<job name>
    argv = ["train", "--spec", str(_spec_file(tmp_path)), "--region", REGION, "--job-name", "gpu-dev-train-l"]
    argv += ["--source-dir", str(_source(tmp_path)), "--local", "--channel", f"train={data}", "-p", "lr=0.1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    tarball = tmp_path / "local-output" / "gpu-dev-train-l" / "model.tar.gz"
    assert "algo-1: exit 0" in out and f"model: {Path('local-output') / 'gpu-dev-train-l' / 'model.tar.gz'}" in out
    with tarfile.open(tarball) as archive:
        assert archive.getnames() == ["result.txt"]
        result = archive.extractfile("result.txt")
        assert result is not None
        assert result.read().decode() == "--lr 0.1 | shard-0.bin"  # the -p given, not the setup's epochs
    assert aws.calls == []


def test_local_failure_exits_1_with_the_scripts_reason(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = _source(tmp_path, {"train.py": "raise ValueError('learning rate 5.0 diverges')\n"})
    argv = ["train", "--spec", str(_spec_file(tmp_path)), "--region", REGION, "--source-dir", str(source)]
    argv += ["--local", "--channel", f"train={tmp_path}", "--output", str(tmp_path / "out")]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "algo-1: exit 1: " in out and "ValueError: learning rate 5.0 diverges" in out
    assert not (tmp_path / "out" / "model.tar.gz").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset"], "channels ['train'] have no local data; allowed: --channel NAME=FOLDER for each of them"),
        (["--channel", "train"], "--channel 'train' is not NAME=VALUE; allowed: e.g. --channel train=./data"),
        (["--channel", "train=MISSING"], "does not exist; allowed: an existing folder or file"),
        (["--channel", "train=SRC", "--pipeline"], "allowed: --local or --pipeline, not both"),
    ],
    ids=["no-channel", "bad-channel", "missing-folder", "pipeline"],
)
def test_local_usage_errors_exit_2(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    source = _source(tmp_path)
    argv = [a.replace("=SRC", f"={source}").replace("=MISSING", f"={tmp_path / 'missing'}") for a in argv]
    base = ["train", "--spec", str(_spec_file(tmp_path)), "--region", REGION, "--source-dir", str(source)]
    assert main([*base, "--local", "--output", str(tmp_path / "out"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_entry_point_alone_on_a_setup_with_its_own_code_is_not_dropped(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    own = SPEC.with_changes(code=replace(CODE, builtin=False))
    argv = ["train", "--spec", str(_spec_file(tmp_path, own)), "--region", REGION, "--entry-point", "other.py"]
    code = main([*argv, "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["AlgorithmSpecification"]["ContainerArguments"][1] == "other.py"


def test_a_requirements_file_without_packages_needs_no_route(
    aws: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = _source(tmp_path, {"train.py": "print(1)\n", "requirements.txt": "# none yet\n\n"})
    argv = ["train", "--spec", str(_spec_file(tmp_path)), "--region", REGION, "--source-dir", str(source)]
    assert main([*argv, "--dry-run"]) == 0
