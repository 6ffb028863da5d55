"""training.instance_preferences: the fallback list of the training jobs, refused at load time with the key, the
entry and what is allowed (one test per reason the catalog or SageMaker refuses a list)."""

from __future__ import annotations

from pathlib import Path

import pytest
from unit_helpers import edited_config_problem

from stacks.config import CONFIG_DIR, load_config, parse_config

DEV_LIST = "instance_preferences: [ml.g5.xlarge, ml.g5.2xlarge, ml.g6.2xlarge]"
PROD_P4DE = "- {instance_type: ml.p4de.24xlarge, instance_count: 2}"
PROD_CUDA = 'cuda_version: "12.8"           # CUDA of the Dockerfile\'s base image'


def _dev_list(items: str) -> str:
    return edited_config_problem("dev", **{DEV_LIST: f"instance_preferences: [{items}]"})


def test_dev_and_prod_declare_a_checked_fallback_list() -> None:
    dev, prod = load_config("dev").training, load_config("prod").training
    assert dev.preference_types == ("ml.g5.xlarge", "ml.g5.2xlarge", "ml.g6.2xlarge")
    assert dev.fallback.max_cost_ratio == 1.5 and dev.fallback.keep_world_size is True
    assert [(p.instance_type, p.instance_count) for p in prod.instance_preferences or ()] == [
        ("ml.p4d.24xlarge", 2),
        ("ml.p4de.24xlarge", 2),
    ]
    assert prod.spot is False and prod.max_wait_hours is None  # preferences are on-demand only
    props = prod.pipeline_props()
    assert [p.instance_type for p in props["instance_preferences"]] == ["ml.p4d.24xlarge", "ml.p4de.24xlarge"]
    assert props["keep_world_size"] is True and props["max_cost_ratio"] is None
    assert props["training_plan_arn"] is None


def test_prod_keeps_checkpoints_on_demand_and_dev_follows_spot() -> None:
    """training.checkpoints maps onto TrainingPipeline(checkpoints=...): prod sets it (on demand, no spot), dev
    leaves it null (the library's default: checkpoints with spot only)."""
    dev, prod = load_config("dev").training, load_config("prod").training
    assert prod.checkpoints is True and prod.pipeline_props()["checkpoints"] is True
    assert dev.checkpoints is None and dev.pipeline_props()["checkpoints"] is None
    problem = edited_config_problem("prod", **{"checkpoints: true": "checkpoints: maybe"})
    assert problem.startswith("  training.checkpoints: ") and "'maybe'" in problem


def test_a_type_without_an_nvidia_gpu_is_refused() -> None:
    problem = _dev_list("ml.g5.xlarge, ml.m5.xlarge")
    assert problem.startswith("  training.instance_preferences.1.instance_type: 'ml.m5.xlarge': ")
    assert "has no NVIDIA GPU" in problem and "allowed: an NVIDIA GPU type" in problem


def test_a_type_the_images_cuda_cannot_drive_is_refused() -> None:
    problem = edited_config_problem(
        "prod",
        **{PROD_CUDA: 'cuda_version: "11.7"', PROD_P4DE: "- {instance_type: ml.p5.48xlarge, instance_count: 2}"},
    )
    assert problem == (
        "  training: instance_preferences[1]='ml.p5.48xlarge' with cuda_version='11.7': CUDA 11.7 cannot drive the "
        "NVIDIA H100 of 'p5.48xlarge' (Hopper, compute capability 9.0, sm_90); allowed: CUDA 11.8 or newer"
    )


def test_a_type_with_less_gpu_memory_is_refused() -> None:
    problem = _dev_list("ml.g5.xlarge, ml.g4dn.xlarge")
    assert problem.startswith("  training: instance_preferences[1]='ml.g4dn.xlarge' has 16.0 GiB per GPU, less than")
    assert "allowed: types with at least 22888 MiB per GPU" in problem


def test_a_type_that_changes_the_world_size_is_refused_unless_allowed() -> None:
    problem = _dev_list("ml.g5.xlarge, ml.g5.12xlarge")
    assert "instance_preferences[1]='ml.g5.12xlarge' x 1 gives 4 GPUs but the first choice 'ml.g5.xlarge' gives 1" in (
        problem
    )
    assert "or set training.fallback.keep_world_size: false if the job adapts its batch" in problem
    text = (
        (CONFIG_DIR / "dev.yaml").read_text().replace(DEV_LIST, "instance_preferences: [ml.g5.xlarge, ml.g5.12xlarge]")
    )
    text = text.replace("    max_cost_ratio: 1.5", "    keep_world_size: false\n    max_cost_ratio: 6")
    assert parse_config(text, Path("config/dev.yaml")).training.fallback.keep_world_size is False


def test_a_type_above_the_cost_ceiling_is_refused() -> None:
    problem = _dev_list("ml.g5.xlarge, ml.g5.4xlarge, ml.g5.8xlarge")
    assert problem.startswith("  training: instance_preferences[2]='ml.g5.8xlarge' x 1 costs $3.06/hour, 2.17 x")
    assert "allowed: at most max_cost_ratio=1.5 x ($2.11/hour)" in problem


def test_a_list_with_spot_is_refused_with_the_reason_and_the_choice() -> None:
    problem = edited_config_problem("dev", **{"  spot: false\n": "  spot: true\n"})
    assert problem.startswith("  training: instance_preferences and spot are exclusive: ")
    assert "'mutually exclusive with InstanceType, InstanceGroups, InstancePlacementConfig, and Enable" in problem
    assert "allowed: pick one: a fallback list on on-demand capacity" in problem


def test_more_than_five_types_are_refused() -> None:
    problem = _dev_list("ml.g5.xlarge, ml.g5.2xlarge, ml.g5.4xlarge, ml.g5.8xlarge, ml.g5.16xlarge, ml.g6.2xlarge")
    assert problem.startswith("  training: instance_preferences has 6 entries (ml.g5.xlarge, ")
    assert problem.endswith("allowed: 1 to 5 (botocore sagemaker InstancePreferenceList max 5)")


def test_a_repeated_type_is_refused() -> None:
    problem = _dev_list("ml.g5.xlarge, ml.g5.2xlarge, ml.g5.2xlarge")
    assert problem == (
        "  training: instance_preferences repeats ['ml.g5.2xlarge']; allowed: each instance type once ('An instance "
        "type can appear only once in an InstancePreferences list')"
    )


@pytest.mark.parametrize(
    ("items", "extra", "message"),
    [
        pytest.param(
            "{instance_type: ml.g5.xlarge, instance_count: 1}, ml.g5.2xlarge",
            "",
            "instance_preferences give instance_count for ['ml.g5.xlarge'] but not for ['ml.g5.2xlarge']; allowed: "
            "a count on every preference or on none",
            id="count-on-some-only",
        ),
        pytest.param(
            "{instance_type: ml.g5.xlarge, training_plan_arn: "
            "'arn:aws:sagemaker:us-east-1:123456789012:training-plan/dev-a'}, ml.g5.2xlarge",
            "\n  training_plan_arn: arn:aws:sagemaker:us-east-1:123456789012:training-plan/dev-b",
            "instance_preferences ['ml.g5.xlarge'] name training plans and training_plan_arn is set too; allowed: "
            "one of them",
            id="per-preference-and-job-level-plans",
        ),
        pytest.param(
            "ml.g5.2xlarge, ml.g5.xlarge",
            "",
            "instance_preferences starts with 'ml.g5.2xlarge' but instance_type is 'ml.g5.xlarge'; allowed: the first "
            "preference is the job's instance_type",
            id="first-entry-is-not-the-instance-type",
        ),
        pytest.param(
            "ml.g5.xlarge, ml.g5.2xlarge",
            "\n  training_plan_arn: arn:aws:sagemaker:us-east-1:123:plan/x",
            "training.training_plan_arn: 'arn:aws:sagemaker:us-east-1:123:plan/x': allowed: a SageMaker training "
            "plan ARN",
            id="not-a-training-plan-arn",
        ),
    ],
)
def test_sagemakers_other_rules_for_the_list(items: str, extra: str, message: str) -> None:
    problem = edited_config_problem("dev", **{DEV_LIST: f"instance_preferences: [{items}]{extra}"})
    assert message in problem


PREPARE_TYPE = "    instance_type: ml.m5.4xlarge\n"


def test_the_prepare_step_takes_a_processing_fallback_list() -> None:
    text = (CONFIG_DIR / "dev.yaml").read_text()
    listed = text.replace(PREPARE_TYPE, PREPARE_TYPE + "    instance_preferences: [ml.m5.4xlarge, ml.c5.4xlarge]\n")
    assert parse_config(listed, Path("config/dev.yaml")).training.prepare.instance_preferences == (
        "ml.m5.4xlarge",
        "ml.c5.4xlarge",
    )
    problem = edited_config_problem(
        "dev", **{PREPARE_TYPE: PREPARE_TYPE + "    instance_preferences: [ml.m5.4xlarge, ml.g5.4xlarge]\n"}
    )
    assert problem.startswith("  training.prepare: instance_preferences ['ml.g5.4xlarge'] have local NVMe storage")
