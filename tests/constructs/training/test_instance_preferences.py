"""TrainingJobSpec.instance_preferences and training_plan_arn: SageMaker's rules for a fallback list, its two
renderings (boto3 and Step Functions) and the JSON form gpuctl reads."""

from __future__ import annotations

import json

import pytest

from gpu_constructs import ValidationError
from gpu_constructs.training_spec import InstancePreference, S3Channel, TrainingJobSpec, service_model_problems

ROLE = "arn:aws:iam::123456789012:role/gpu-dev-train-execution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p4d-plan"


def _spec(**changes: object) -> TrainingJobSpec:
    values: dict = {
        "image_uri": IMAGE,
        "role_arn": ROLE,
        "instance_type": "ml.p4d.24xlarge",
        "instance_count": 2,
        "output_s3_uri": "s3://gpu-dev-artifacts/output/",
        "channels": (S3Channel("train", "s3://gpu-dev-datasets/imagenet/v1/train/"),),
        "instance_preferences": (
            {"instance_type": "ml.p4d.24xlarge", "instance_count": 2},
            InstancePreference("ml.p4de.24xlarge", 2),
        ),
        "job_name_prefix": "gpu-dev-train",
    }
    values.update(changes)
    return TrainingJobSpec(**values)


def test_a_request_without_a_type_asks_for_the_list_and_validates() -> None:
    request = _spec().to_request("gpu-dev-train-1")
    assert request["ResourceConfig"] == {
        "InstancePreferences": [
            {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
            {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 2},
        ],
        "VolumeSizeInGB": 100,
    }
    assert "EnableManagedSpotTraining" not in request
    assert request["HyperParameters"] == {"processes_per_host": "8", "num_workers": "10"}  # the types agree
    assert service_model_problems("CreateTrainingJob", request) == []


def test_a_request_for_a_type_runs_on_that_type_only() -> None:
    request = _spec(training_plan_arn=None).to_request("gpu-dev-train-1", instance_type="ml.p4de.24xlarge")
    assert request["ResourceConfig"]["InstanceType"] == "ml.p4de.24xlarge"
    assert request["ResourceConfig"]["InstanceCount"] == 2
    assert request["EnableManagedSpotTraining"] is False


def test_a_plan_renders_per_entry_or_for_the_job() -> None:
    planned = _spec(instance_preferences=(InstancePreference("ml.p4d.24xlarge", 2, PLAN), ("ml.p4de.24xlarge")))
    problems = planned.problems()
    assert any("give instance_count for ['ml.p4d.24xlarge'] but not for ['ml.p4de.24xlarge']" in p for p in problems)
    planned = _spec(
        instance_preferences=(InstancePreference("ml.p4d.24xlarge", 2, PLAN), InstancePreference("ml.p4de.24xlarge", 2))
    )
    listed = planned.to_request("gpu-dev-train-1")["ResourceConfig"]["InstancePreferences"]
    assert listed[0]["TrainingPlanArns"] == [PLAN] and "TrainingPlanArns" not in listed[1]
    one = _spec(instance_preferences=(), training_plan_arn=PLAN).to_request("gpu-dev-train-1")["ResourceConfig"]
    assert (one["InstanceType"], one["TrainingPlanArn"]) == ("ml.p4d.24xlarge", PLAN)
    # a plan holds one type ("must match the InstanceType of your training plan"): not for a whole list
    assert any("a plan holds one instance type" in p for p in _spec(training_plan_arn=PLAN).problems())
    with pytest.raises(ValidationError, match="TrainingPlanArn"):  # botocore's pattern
        _spec(instance_preferences=(), training_plan_arn="arn:aws:sagemaker:us-east-1:123456789012:plan/x").to_request(
            "gpu-dev-train-1"
        )


def test_the_step_functions_rendering_has_the_list_and_no_type() -> None:
    parameters = _spec().to_sfn_parameters(preferences=True)
    assert "InstanceType" not in parameters["ResourceConfig"]
    assert "InstanceType.$" not in parameters["ResourceConfig"]
    assert [p["InstanceType"] for p in parameters["ResourceConfig"]["InstancePreferences"]] == [
        "ml.p4d.24xlarge",
        "ml.p4de.24xlarge",
    ]
    assert _spec().to_sfn_parameters()["ResourceConfig"]["InstanceType.$"] == "$.args.instance_type"


def test_the_json_form_keeps_the_list() -> None:
    spec = _spec(training_plan_arn=None)
    again = TrainingJobSpec.from_json(json.dumps(spec.to_dict()))
    assert again == spec
    assert again.instance_preferences[1] == InstancePreference("ml.p4de.24xlarge", 2)


def test_an_on_demand_job_on_the_list_keeps_its_checkpoints() -> None:
    """What gpuctl sends from the published spec: a checkpoint prefix without spot still gives the job its
    CheckpointConfig (the pipeline's ``checkpoints=True``), through the JSON form as well."""
    spec = _spec(checkpoint_s3_uri="s3://gpu-dev-artifacts/checkpoints/gpu-dev-train/")
    again = TrainingJobSpec.from_json(json.dumps(spec.to_dict()))
    for request in (
        again.to_request("gpu-dev-train-1"),
        again.to_request("gpu-dev-train-1", instance_type="ml.p4de.24xlarge"),
    ):
        assert request["CheckpointConfig"] == {
            "S3Uri": "s3://gpu-dev-artifacts/checkpoints/gpu-dev-train/gpu-dev-train-1/",
            "LocalPath": "/opt/ml/checkpoints",
        }
        assert request.get("EnableManagedSpotTraining") in (None, False)
        assert service_model_problems("CreateTrainingJob", request) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"spot": True, "checkpoint_s3_uri": "s3://gpu-dev-artifacts/c/"}, "instance_preferences and spot are"),
        ({"instance_preferences": ("ml.p4de.24xlarge", "ml.p4d.24xlarge")}, "starts with 'ml.p4de.24xlarge'"),
        ({"instance_preferences": ("ml.p4d.24xlarge", "ml.p4d.24xlarge")}, "repeats ['ml.p4d.24xlarge']"),
        (
            {"instance_preferences": (InstancePreference("ml.p4d.24xlarge", 1), "ml.p4de.24xlarge")},
            "give instance_count for ['ml.p4d.24xlarge'] but not for ['ml.p4de.24xlarge']",
        ),
        (
            {
                "instance_preferences": (
                    InstancePreference("ml.p4d.24xlarge", 1),
                    InstancePreference("ml.p4de.24xlarge", 1),
                )
            },
            "instance_preferences start with 'ml.p4d.24xlarge' x 1 but instance_count is 2",
        ),
        (
            {"instance_preferences": ("ml.p4d.24xlarge", "ml.p3.16xlarge")},
            "instance_preferences ['ml.p3.16xlarge'] have no local NVMe storage, unlike 'ml.p4d.24xlarge'",
        ),
        (
            {"instance_preferences": ("ml.p4d.24xlarge", "ml.c5.18xlarge")},
            "instance_preferences: instance_type='ml.c5.18xlarge' has no NVIDIA GPU",
        ),
        (
            {
                "instance_preferences": tuple(
                    f"ml.{n}"
                    for n in (
                        "p4d.24xlarge",
                        "p4de.24xlarge",
                        "p5.48xlarge",
                        "p5e.48xlarge",
                        "p5en.48xlarge",
                        "g6e.48xlarge",
                    )
                )
            },
            "instance_preferences has 6 entries",
        ),
        (
            {
                "instance_preferences": (InstancePreference("ml.p4d.24xlarge", training_plan_arn=PLAN),),
                "training_plan_arn": PLAN,
            },
            "name training plans and training_plan_arn is set too",
        ),
    ],
)
def test_sagemakers_rules_for_the_list(changes: dict, message: str) -> None:
    assert any(message in problem for problem in _spec(**changes).problems()), _spec(**changes).problems()


def test_a_list_entry_must_be_a_type_an_entry_or_a_choice() -> None:
    with pytest.raises(ValidationError, match="allowed: an instance type name, an InstancePreference or a Fallback"):
        _spec(instance_preferences=(42,))
    with pytest.raises(ValidationError, match="allowed: instance_type and optionally instance_count and training_plan"):
        _spec(instance_preferences=({"type": "ml.p4d.24xlarge"},))


def test_hyperparameter_overrides_are_checked_on_every_type_of_the_list() -> None:
    spec = _spec(
        instance_type="ml.g5.12xlarge", instance_count=1, instance_preferences=("ml.g5.12xlarge", "ml.g5.48xlarge")
    )
    assert spec.preference_distribution() == {"processes_per_host": "0", "num_workers": "-1"}  # 4 vs 8 GPUs
    with pytest.raises(ValidationError, match=r"processes_per_host=8 is more than the 4 GPUs of 'ml\.g5\.12xlarge'"):
        spec.to_request("gpu-dev-train-1", hyperparameter_overrides={"processes_per_host": 8})


def test_a_processing_job_on_a_fallback_list() -> None:
    from gpu_constructs.training_spec import ShardingJobSpec, ShardSplit

    split = ShardSplit("train", "s3://gpu-dev-datasets/raw/train/", "s3://gpu-dev-datasets/imagenet/v1/train/")
    spec = ShardingJobSpec(
        image_uri=IMAGE,
        role_arn=ROLE,
        splits=(split,),
        instance_preferences=("ml.m5.4xlarge", "ml.c5.4xlarge"),
        job_name_prefix="gpu-dev-train-shard",
    )
    cluster = spec.to_request("gpu-dev-train-shard-1")["ProcessingResources"]["ClusterConfig"]
    assert cluster == {
        "InstanceCount": 1,
        "InstancePreferences": [{"InstanceType": "ml.m5.4xlarge"}, {"InstanceType": "ml.c5.4xlarge"}],
        "VolumeSizeInGB": 200,
    }
    bad = ShardingJobSpec(
        image_uri=IMAGE, role_arn=ROLE, splits=(split,), instance_preferences=("ml.m5.4xlarge", "ml.inf2.xlarge")
    )
    assert any(
        "instance_preferences: 'ml.inf2.xlarge' is not accepted by SageMaker processing" in p for p in bad.problems()
    )
