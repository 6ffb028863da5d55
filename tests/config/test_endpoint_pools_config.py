"""inference.endpoints.<key>.instance_pools and capacity_reservation_arn: the endpoints' fallback list and ML
reservation, refused at load time with the key, the entry and what is allowed (one test per reason)."""

from __future__ import annotations

from pathlib import Path

import pytest
from unit_helpers import edited_config_problem

from stacks.config import CONFIG_DIR, load_config, parse_config

DEV_POOLS = "instance_pools: [ml.g5.xlarge, ml.g6.xlarge]"
PROD_POOLS = "instance_pools: [ml.g5.2xlarge, ml.g6.2xlarge, ml.g6e.2xlarge]"
PROD_CUDA = 'cuda_version: "12.8"\n  max_image_count'
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/classifier-inference"


def _dev_pools(items: str, extra: str = "") -> str:
    return edited_config_problem("dev", **{DEV_POOLS: f"instance_pools: [{items}]{extra}"})


def test_dev_and_prod_declare_a_checked_fallback_list() -> None:
    dev = load_config("dev").inference.endpoints["classifier"]
    assert dev.instance_type == "ml.g5.xlarge"
    assert [p.instance_type for p in dev.pools()] == ["ml.g5.xlarge", "ml.g6.xlarge"]
    prod = load_config("prod").inference.endpoints["classifier"]
    assert [p.instance_type for p in prod.pools()] == ["ml.g5.2xlarge", "ml.g6.2xlarge", "ml.g6e.2xlarge"]
    assert prod.max_cost_ratio == 2
    assert load_config("prod").inference.endpoints["classifier-async"].instance_pools is None


def test_the_config_maps_onto_the_construct() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_s3 as s3

    from gpu_constructs.endpoint import GPU_SERVE_BATCHING_ENV, InstancePool

    bucket = s3.Bucket.from_bucket_name(Stack(App(), "S"), "B", "artifacts")
    prod = load_config("prod").inference.endpoints["classifier"]
    props = prod.endpoint_props(artifacts_bucket=bucket, batching_env=GPU_SERVE_BATCHING_ENV)
    assert props["instance_type"] == "ml.g5.2xlarge"
    assert props["instance_pools"] == [
        InstancePool("ml.g5.2xlarge"),
        InstancePool("ml.g6.2xlarge"),
        InstancePool("ml.g6e.2xlarge"),
    ]
    assert props["max_cost_ratio"] == 2 and props["capacity_reservation_arn"] is None
    async_props = (
        load_config("prod")
        .inference.endpoints["classifier-async"]
        .endpoint_props(artifacts_bucket=bucket, batching_env=GPU_SERVE_BATCHING_ENV)
    )
    assert async_props["instance_pools"] is None


def test_objects_with_a_model_override_and_a_default_instance_type() -> None:
    text = (CONFIG_DIR / "dev.yaml").read_text()
    text = text.replace("      instance_type: ml.g5.xlarge  #", "      #")
    text = text.replace(
        DEV_POOLS, "instance_pools: [ml.g5.xlarge, {instance_type: ml.g6.xlarge, model_name_override: cls-l4}]"
    )
    endpoint = parse_config(text, Path("config/dev.yaml")).inference.endpoints["classifier"]
    assert endpoint.instance_type == "ml.g5.xlarge"  # the first pool's
    assert [(p.instance_type, p.model_name_override) for p in endpoint.pools()] == [
        ("ml.g5.xlarge", None),
        ("ml.g6.xlarge", "cls-l4"),
    ]


def test_a_type_without_an_nvidia_gpu_is_refused() -> None:
    problem = _dev_pools("ml.g5.xlarge, ml.m5.xlarge")
    assert problem.startswith("  inference.endpoints.classifier: instance_pools[1]='ml.m5.xlarge' has no NVIDIA GPU")
    assert "allowed: an NVIDIA GPU type" in problem


def test_a_type_the_images_cuda_cannot_drive_is_refused() -> None:
    problem = edited_config_problem(
        "prod",
        **{
            PROD_CUDA: 'cuda_version: "13.0"\n  max_image_count',
            PROD_POOLS: "instance_pools: [ml.g4dn.2xlarge, ml.p3.2xlarge]",
            "instance_type: ml.g5.2xlarge #": "instance_type: ml.g4dn.2xlarge #",
        },
    )
    assert problem.startswith(
        "  inference.endpoints.classifier.instance_pools[1]='ml.p3.2xlarge' with cuda_version='13.0': CUDA 13.0 "
        "cannot drive the NVIDIA V100"
    )
    assert problem.endswith("(images.inference: kind codebuild, CUDA 13.0)")


def test_a_type_with_less_gpu_memory_is_refused() -> None:
    problem = _dev_pools("ml.g5.xlarge, ml.g4dn.xlarge")
    assert "instance_pools[1]='ml.g4dn.xlarge' has 16.0 GiB per GPU, less than the 22.4 GiB" in problem
    assert "allowed: types with at least 22888 MiB per GPU" in problem


def test_a_type_with_another_gpu_count_is_refused() -> None:
    problem = _dev_pools("ml.g5.xlarge, ml.g5.12xlarge")
    assert "instance_pools[1] (GPUs per instance)='ml.g5.12xlarge' is not allowed; allowed: a type with 1 GPU(s)" in (
        problem
    )


def test_a_type_above_the_cost_ceiling_is_refused() -> None:
    problem = edited_config_problem("prod", **{"max_cost_ratio: 2 ": "max_cost_ratio: 1.5 "})
    assert problem.startswith(
        "  inference.endpoints.classifier.instance_pools[2]='ml.g6e.2xlarge' x 1 costs $2.80/hour, 1.85 x the first "
        "choice 'ml.g5.2xlarge' x 1 ($1.51/hour); allowed: at most max_cost_ratio=1.5 x"
    )


def test_more_than_five_types_are_refused() -> None:
    problem = _dev_pools("ml.g5.xlarge, ml.g6.xlarge, ml.g5.2xlarge, ml.g6.2xlarge, ml.g5.4xlarge, ml.g6.4xlarge")
    assert "allowed: 1 to 5 instance types (SageMaker's InstancePools limit), first choice first" in problem


def test_a_repeated_type_is_refused() -> None:
    problem = _dev_pools("ml.g5.xlarge, ml.g6.xlarge, ml.g6.xlarge")
    assert "instance_pools[2]='ml.g6.xlarge' repeats instance_pools[1]" in problem


@pytest.mark.parametrize(
    ("items", "extra", "message"),
    [
        pytest.param(
            "ml.g6.xlarge, ml.g5.xlarge", "", "instance_pools[0]: 'ml.g6.xlarge' is not instance_type", id="first"
        ),
        pytest.param("", "", "instance_pools=[] is not allowed; allowed: 1 to 5", id="empty"),
        pytest.param(
            "ml.g5.xlarge, ml.g6.xlarge",
            f"\n      capacity_reservation_arn: {PLAN}",
            "no reservation with instance_pools",
            id="reservation-with-pools",
        ),
        pytest.param(
            "ml.g5.xlarge, {instance_type: ml.g6.xlarge, model_name_override: bad_name}",
            "",
            "instance_pools[1].model_name_override='bad_name'",
            id="model-name",
        ),
        pytest.param(
            "ml.g5.xlarge, ml.g6.xlarge",
            "\n      volume_size_gb: 100",
            "volume_size_gb: 100 is not allowed",
            id="volume",
        ),
    ],
)
def test_other_refusals(items: str, extra: str, message: str) -> None:
    assert message in _dev_pools(items, extra)


def test_reservation_and_cost_ceiling_without_pools() -> None:
    body = f"capacity_reservation_arn: {PLAN}"
    endpoint = parse_config(
        (CONFIG_DIR / "dev.yaml").read_text().replace(DEV_POOLS, body), Path("config/dev.yaml")
    ).inference.endpoints["classifier"]
    assert endpoint.capacity_reservation_arn == PLAN and endpoint.instance_pools is None
    assert "capacity_reservation_arn='arn:aws:sagemaker:us-east-1:123:x/y' is not allowed" in edited_config_problem(
        "dev", **{DEV_POOLS: "capacity_reservation_arn: arn:aws:sagemaker:us-east-1:123:x/y"}
    )
    assert "max_cost_ratio: 2 bounds instance_pools, which is not set; allowed: null" in edited_config_problem(
        "dev", **{DEV_POOLS: "max_cost_ratio: 2"}
    )
