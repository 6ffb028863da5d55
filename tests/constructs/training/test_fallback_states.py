"""TrainingPipeline with a fallback list (instance_preferences): the construct's checks, the rendering, and the
states that run a job on the list (the AWS SDK integration and the DescribeTrainingJob wait loop)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import aws_cdk as cdk
import pytest
from asl_runner import TaskFailed, run
from aws_cdk import assertions
from test_training import _Parts, definition, policy_statements

from gpu_constructs import ValidationError
from gpu_constructs.catalog import FallbackChoice
from gpu_constructs.training import PrepareOptions, TrainingPipeline
from gpu_constructs.training.fallback_states import MAX_POLLS, poll_interval_s
from gpu_constructs.training_spec import InstancePreference

PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/g5-plan"
LIST = ["ml.g5.2xlarge", "ml.g6.2xlarge", "ml.g5.4xlarge"]


@pytest.fixture(scope="module")
def parts() -> _Parts:
    return _Parts()


@pytest.fixture(scope="module")
def synthesized() -> tuple[TrainingPipeline, dict[str, Any]]:
    """One pipeline on a fallback list with a cost ceiling (a stack of its own, synthesized once), its template."""
    own = _Parts()
    pipeline = own.pipeline(instance_preferences=LIST, max_cost_ratio=1.5, max_runtime=cdk.Duration.hours(12))
    return pipeline, assertions.Template.from_stack(own.stack).to_json()


@pytest.fixture(scope="module")
def listed(synthesized: tuple[TrainingPipeline, dict[str, Any]]) -> dict[str, Any]:
    """The state machine's definition of that pipeline."""
    return definition(synthesized[1])


def _job(status: str, selected: str = "ml.g6.2xlarge") -> dict[str, Any]:
    return {
        "TrainingJobName": "gpu-test-train-1",
        "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/gpu-test-train-1",
        "TrainingJobStatus": status,
        "ResourceConfig": {"SelectedInstanceType": selected, "SelectedInstanceCount": 1, "VolumeSizeInGB": 100},
        "ModelArtifacts": {"S3ModelArtifacts": "s3://gpu-test-bucket/output/model.tar.gz"},
        "FailureReason": "CapacityError: no capacity for any preference",
    }


def _sagemaker(statuses: list[str]) -> Any:
    """Task results: CreateTrainingJob returns the ARN, each DescribeTrainingJob the next status."""
    calls: list[str] = []

    def results(state: str, parameters: dict[str, Any]) -> Any:
        calls.append(state)
        if state == "TrainOnPreferences":
            return {"TrainingJobArn": _job("InProgress")["TrainingJobArn"]}
        if state == "DescribeTrainingJob":
            return _job(statuses.pop(0))
        if state == "DescribeFailedTrainingJob":
            return _job("Failed")
        raise AssertionError(f"unexpected task {state}")

    results.calls = calls  # type: ignore[attr-defined]
    return results


def test_an_execution_without_a_type_runs_on_the_list_until_the_job_ends(listed: dict[str, Any]) -> None:
    results = _sagemaker(["InProgress", "InProgress", "Completed"])
    outcome = run(listed, {"hyperparameters": {"epochs": 2}}, task_results=results)
    assert outcome.status == "SUCCEEDED"
    assert results.calls == ["TrainOnPreferences", *["DescribeTrainingJob"] * 3]
    assert outcome.output["instance_type"] == "ml.g6.2xlarge"  # ResourceConfig.SelectedInstanceType
    assert outcome.output["model_artifact"] == "s3://gpu-test-bucket/output/model.tar.gz"
    sent = outcome.task("TrainOnPreferences").parameters
    assert sent["ResourceConfig"]["InstancePreferences"] == [{"InstanceType": name} for name in LIST]
    assert "InstanceType" not in sent["ResourceConfig"] and "EnableManagedSpotTraining" not in sent
    # one process per GPU on every type of the list; loader workers differ (8 or 16 vCPUs): the runtime's default
    assert sent["HyperParameters"] == {"processes_per_host": "1", "num_workers": "-1", "epochs": "2"}
    assert sent["Environment"]["GPU_TRAIN_NUM_WORKERS"] == "-1"


def test_an_execution_that_names_a_type_runs_on_that_type_only(listed: dict[str, Any]) -> None:
    outcome = run(listed, {"instance_type": "ml.g5.4xlarge"})
    call = outcome.task("Train")
    assert call.resource == "arn:aws:states:::sagemaker:createTrainingJob.sync"
    assert call.parameters["ResourceConfig"]["InstanceType"] == "ml.g5.4xlarge"
    assert "InstancePreferences" not in call.parameters["ResourceConfig"]
    assert call.parameters["HyperParameters"]["num_workers"] == "14"  # the type's own distribution


def test_a_failed_or_stopped_job_on_the_list_ends_with_its_failure_reason(listed: dict[str, Any]) -> None:
    for status in ("Failed", "Stopped"):
        outcome = run(listed, {}, task_results=_sagemaker(["InProgress", status]))
        assert outcome.status == "FAILED" and outcome.error == "TrainingJobFailed"
        assert "CapacityError: no capacity for any preference" in outcome.cause

    def refused(state: str, parameters: dict[str, Any]) -> Any:
        raise TaskFailed("SageMaker.ValidationException", "InstancePreferences is not valid")

    outcome = run(listed, {}, task_results=refused)
    assert outcome.error == "SageMaker.ValidationException"  # never created: the task's own error


def test_processes_per_host_on_the_list_fits_every_type(listed: dict[str, Any]) -> None:
    merge = listed["States"]["MergeHyperparameters"]["Output"]
    assert "the fallback list ml.g5.2xlarge, ml.g6.2xlarge, ml.g5.4xlarge" in merge
    outcome = run(listed, {"hyperparameters": {"processes_per_host": 2}})
    assert outcome.status == "FAILED" and outcome.error == "InvalidInput"
    assert "processes_per_host=2 is not allowed on the fallback list" in outcome.cause


def test_the_loop_polls_within_the_history_quota(listed: dict[str, Any], synthesized: tuple) -> None:
    assert listed["States"]["WaitForTrainingJob"]["Seconds"] == 60  # 12 h: the one-minute floor
    long = synthesized[0].spec.with_changes(max_runtime=timedelta(days=28))
    interval = poll_interval_s(long)
    assert interval * MAX_POLLS >= 28 * 24 * 3600 + 3600 and interval < 1300
    describe = listed["States"]["DescribeTrainingJob"]
    assert describe["Resource"] == "arn:aws:states:::aws-sdk:sagemaker:describeTrainingJob"
    assert describe["Catch"][0]["Next"] == "DescribeFailedTrainingJob"


def test_the_state_machine_role_may_create_and_describe_only_the_setups_jobs(synthesized: tuple) -> None:
    template = synthesized[1]
    statements = policy_statements(template, "StateMachineRoleDefaultPolicy")
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob", "sagemaker:AddTags"} <= actions
    for statement in statements:
        if "sagemaker:DescribeTrainingJob" in str(statement["Action"]):
            assert str(statement["Resource"]).count("training-job/gpu-test-train-*") >= 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"spot": True, "instance_preferences": LIST},
            "instance_preferences and spot are exclusive: SageMaker's InstancePreferences is 'mutually exclusive",
            id="with-spot",
        ),
        pytest.param(
            {"instance_preferences": ["ml.g5.2xlarge", "ml.m5.2xlarge"]}, "'ml.m5.2xlarge' has no NVIDIA GPU", id="cpu"
        ),
        pytest.param(
            {"instance_preferences": ["ml.g5.2xlarge", "ml.g4dn.2xlarge"]}, "less than the 22.4 GiB", id="memory"
        ),
        pytest.param(
            {"instance_preferences": ["ml.g5.2xlarge", "ml.g5.12xlarge"]}, "gives 4 GPUs but the first", id="world"
        ),
        pytest.param(
            {"instance_preferences": ["ml.g5.2xlarge", "ml.g5.8xlarge"], "max_cost_ratio": 1.5},
            r"costs \$3.06/hour, 2.02 x the first choice",
            id="cost",
        ),
        pytest.param(
            {"instance_preferences": ["ml.g5.2xlarge", *LIST[1:], "ml.g5.8xlarge", "ml.g5.16xlarge", "ml.g6.4xlarge"]},
            "instance_preferences has 6 entries; allowed: at most 5",
            id="six",
        ),
        pytest.param(
            {"instance_preferences": ["ml.g5.2xlarge", "ml.g6.2xlarge", "ml.g6.2xlarge"]}, "repeats", id="repeat"
        ),
        pytest.param(
            {"instance_preferences": ["ml.g6.2xlarge", "ml.g5.2xlarge"]},
            r"instance_preferences\[0\]='ml.g6.2xlarge' is not allowed; allowed: the job's instance_type",
            id="first",
        ),
        pytest.param(
            {"instance_preferences": [FallbackChoice("ml.g5.2xlarge", 1), "ml.g6.2xlarge"]},
            r"give instance_count for \['ml.g5.2xlarge'\] but not for \['ml.g6.2xlarge'\]",
            id="counts-on-some",
        ),
        pytest.param(
            {
                "instance_preferences": [InstancePreference("ml.g5.2xlarge", training_plan_arn=PLAN)],
                "training_plan_arn": PLAN,
            },
            "name training plans and training_plan_arn is set too",
            id="two-plans",
        ),
    ],
)
def test_a_list_the_catalog_or_sagemaker_refuses_fails_the_construct(
    parts: _Parts, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        parts.pipeline(**overrides)
    assert str(info.value).startswith("T/P")


def test_counts_per_type_plans_and_a_world_size_the_job_adapts_to(parts: _Parts) -> None:
    pipeline = parts.pipeline(
        instance_type="ml.g5.12xlarge",
        instance_count=2,
        instance_preferences=[
            InstancePreference("ml.g5.12xlarge", 2, training_plan_arn=PLAN),
            FallbackChoice("ml.g5.48xlarge", 1),
        ],
    )
    resources = pipeline.spec.to_request("gpu-test-train-1")["ResourceConfig"]
    assert resources["InstancePreferences"] == [
        {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 2, "TrainingPlanArns": [PLAN]},
        {"InstanceType": "ml.g5.48xlarge", "InstanceCount": 1},
    ]
    assert "InstanceCount" not in resources
    with pytest.raises(ValidationError, match=r"'ml.g5.48xlarge' x 1 gives 8 GPUs but the first choice"):
        parts.pipeline(instance_type="ml.g5.12xlarge", instance_preferences=["ml.g5.12xlarge", "ml.g5.48xlarge"])
    adapted = parts.pipeline(
        instance_type="ml.g5.12xlarge", instance_preferences=["ml.g5.12xlarge", "ml.g5.48xlarge"], keep_world_size=False
    )
    assert adapted.spec.preference_types == ("ml.g5.12xlarge", "ml.g5.48xlarge")
    planned = parts.pipeline(training_plan_arn=PLAN)
    resources = planned.spec.to_request("gpu-test-train-1")["ResourceConfig"]
    assert resources["TrainingPlanArn"] == PLAN and resources["InstanceType"] == "ml.g5.2xlarge"
    # a plan holds one type: an execution may choose no other, and a list takes its plans per entry
    assert planned.allowed_instance_types == ("ml.g5.2xlarge",)
    with pytest.raises(ValidationError, match="a plan holds one instance type"):
        parts.pipeline(training_plan_arn=PLAN, instance_preferences=LIST)
    with pytest.raises(ValidationError, match=r"allowed_instance_types=\['ml.g6.2xlarge'\] is not allowed"):
        parts.pipeline(training_plan_arn=PLAN, allowed_instance_types=["ml.g6.2xlarge"])


def test_the_prepare_step_on_a_fallback_list_creates_through_the_sdk_and_waits() -> None:
    own = _Parts()
    own.pipeline(prepare=PrepareOptions(source_prefix="raw/", instance_preferences=("ml.m5.4xlarge", "ml.c5.4xlarge")))
    states = definition(assertions.Template.from_stack(own.stack).to_json())
    shard = states["States"]["ShardDataset"]
    assert shard["Resource"] == "arn:aws:states:::aws-sdk:sagemaker:createProcessingJob"
    cluster = shard["Parameters"]["ProcessingResources"]["ClusterConfig"]
    assert cluster["InstancePreferences"] == [{"InstanceType": "ml.m5.4xlarge"}, {"InstanceType": "ml.c5.4xlarge"}]
    assert "InstanceType" not in cluster and cluster["InstanceCount"] == 1
    statuses = ["InProgress", "Completed"]

    def results(state: str, parameters: dict[str, Any]) -> Any:
        if state == "ShardDataset":
            return {"ProcessingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:processing-job/x"}
        if state == "DescribeShardDataset":
            return {"ProcessingJobName": parameters["ProcessingJobName"], "ProcessingJobStatus": statuses.pop(0)}
        assert state == "Train"
        return _job("Completed", selected="ml.g5.2xlarge")

    outcome = run(states, {"prepare": True, "instance_type": "ml.g5.2xlarge"}, task_results=results)
    assert outcome.status == "SUCCEEDED"
    assert [c.state for c in outcome.tasks] == ["ShardDataset", "DescribeShardDataset", "DescribeShardDataset", "Train"]
    failed = run(
        states,
        {"prepare": True, "instance_type": "ml.g5.2xlarge"},
        task_results=lambda state, parameters: (
            {"ProcessingJobName": "p", "ProcessingJobStatus": "Failed", "FailureReason": "no capacity"}
            if state != "ShardDataset"
            else {}
        ),
    )
    assert (failed.status, failed.error) == ("FAILED", "DataPreparationFailed")
    with pytest.raises(ValidationError, match="instance_preferences repeats"):
        own.pipeline(prepare=PrepareOptions(source_prefix="raw/", instance_preferences=("ml.m5.4xlarge",) * 2))
