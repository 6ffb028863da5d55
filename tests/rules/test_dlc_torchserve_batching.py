"""DlcTorchServeBatching: TorchServe batching above 1 on the AWS PyTorch inference DLC."""

from __future__ import annotations

from typing import Any

from rule_helpers import findings, template

RULE = "DlcTorchServeBatching"
DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.6.0-gpu-py312-cu124-ubuntu22.04-sagemaker"


def model(image: Any, env: dict[str, Any] | None, *, extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"Image": image, "ModelDataUrl": "s3://b/model.tar.gz"}
    if env is not None:
        container["Environment"] = env
    props: dict[str, Any] = {"ExecutionRoleArn": "arn:aws:iam::123456789012:role/r", "PrimaryContainer": container}
    if extra is not None:
        props = {"ExecutionRoleArn": props["ExecutionRoleArn"], "Containers": extra}
    return {"Type": "AWS::SageMaker::Model", "Properties": props}


def test_batch_size_above_one_on_the_dlc_is_a_finding() -> None:
    found = findings(RULE, template(Model=model(DLC, {"SAGEMAKER_TS_BATCH_SIZE": "16"})))
    assert [(f.logical_id, f.id) for f in found] == [
        ("Model", "GpuPlatform::GpuPlatform-DlcTorchServeBatching[PrimaryContainer:SAGEMAKER_TS_BATCH_SIZE=16]")
    ]


def test_each_container_of_an_inference_pipeline_is_checked() -> None:
    cn = "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-inference:2.6.0-cpu-py312-ubuntu22.04-sagemaker"
    containers = [
        {"Image": DLC, "Environment": {"SAGEMAKER_TS_BATCH_SIZE": 1}},
        {"Image": cn, "Environment": {"SAGEMAKER_TS_BATCH_SIZE": 8}},
    ]
    found = findings(RULE, template(Model=model(None, None, extra=containers)))
    assert [f.id for f in found] == [
        "GpuPlatform::GpuPlatform-DlcTorchServeBatching[Containers.1:SAGEMAKER_TS_BATCH_SIZE=8]"
    ]


def test_a_dlc_uri_assembled_from_tokens_is_recognised() -> None:
    # The shape of sagemaker-alpha's ContainerImage.fromDlc: account from a mapping, region and suffix pseudo refs.
    joined = {
        "Fn::Join": [
            "",
            [
                {"Fn::FindInMap": ["DlcRepositoryAccountMap", {"Ref": "AWS::Region"}, "value"]},
                ".dkr.ecr.",
                {"Ref": "AWS::Region"},
                ".",
                {"Ref": "AWS::URLSuffix"},
                "/pytorch-inference:2.6.0-gpu-py312",
            ],
        ]
    }
    assert len(findings(RULE, template(Model=model(joined, {"SAGEMAKER_TS_BATCH_SIZE": "4"})))) == 1


def test_compliant_and_not_applicable_models() -> None:
    own = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu-inference:v7"
    tpl = template(
        One=model(DLC, {"SAGEMAKER_TS_BATCH_SIZE": "1", "SAGEMAKER_TS_MAX_BATCH_DELAY": "100"}),
        Unset=model(DLC, None),
        GpuServe=model(own, {"GPU_SERVE_MAX_BATCH_SIZE": "32", "SAGEMAKER_TS_BATCH_SIZE": "32"}),
        LookAlike=model(
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:mine", {"SAGEMAKER_TS_BATCH_SIZE": "8"}
        ),
        FromParameter=model({"Ref": "ImageUri"}, {"SAGEMAKER_TS_BATCH_SIZE": "8"}),
        SizeFromParameter=model(DLC, {"SAGEMAKER_TS_BATCH_SIZE": {"Ref": "BatchSize"}}),
    )
    assert findings(RULE, tpl) == []
