"""GpuWorkloadInstanceType: GPU images and GPU DLAMIs on types with an NVIDIA GPU their CUDA can drive."""

from __future__ import annotations

from typing import Any

from rule_helpers import findings, template

RULE = "GpuWorkloadInstanceType"
ID = "GpuPlatform::GpuPlatform-GpuWorkloadInstanceType"
GPU_DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.6.0-gpu-py312-cu124-ubuntu22.04-sagemaker"
CPU_DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.6.0-cpu-py312-ubuntu22.04-sagemaker"
CU130 = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.9.0-gpu-py312-cu130-ubuntu22.04-sagemaker"
DLAMI = "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-24.04/latest/ami-id"


def model(image: Any) -> dict[str, Any]:
    return {"Type": "AWS::SageMaker::Model", "Properties": {"PrimaryContainer": {"Image": image}}}


def config(model_id: str, instance_type: Any) -> dict[str, Any]:
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": {"Fn::GetAtt": [model_id, "ModelName"]},
        "InstanceType": instance_type,
        "InitialInstanceCount": 1,
    }
    return {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [variant]}}


def launch_template(image_id: Any, instance_type: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {"ImageId": image_id}
    if instance_type is not None:
        data["InstanceType"] = instance_type
    return {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": data}}


def group(template_id: str, *types: str) -> dict[str, Any]:
    spec = {"LaunchTemplateId": {"Ref": template_id}, "Version": "1"}
    policy = {
        "LaunchTemplate": {"LaunchTemplateSpecification": spec, "Overrides": [{"InstanceType": t} for t in types]}
    }
    return {
        "Type": "AWS::AutoScaling::AutoScalingGroup",
        "Properties": {"MinSize": "0", "MaxSize": "2", "MixedInstancesPolicy": policy},
    }


def test_gpu_image_on_a_cpu_type_and_cuda_13_on_volta_are_findings() -> None:
    tpl = template(
        Gpu=model(GPU_DLC),
        Cuda13=model(CU130),
        OnCpu=config("Gpu", "ml.m5.xlarge"),
        OnVolta=config("Cuda13", "ml.p3.2xlarge"),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("OnCpu", f"{ID}[AllTraffic:ml.m5.xlarge:no-NVIDIA-GPU]"),
        ("OnVolta", f"{ID}[AllTraffic:ml.p3.2xlarge:CUDA-13.0]"),
    ]


def test_gpu_dlami_on_a_cpu_type_is_a_finding_in_the_template_and_the_group_overrides() -> None:
    tpl = template(
        AmiParam=launch_template({"Ref": "DlamiParameter"}, "c5.xlarge"),
        AmiResolve=launch_template(f"{{{{resolve:ssm:{DLAMI}}}}}", "g5.xlarge"),
        Group=group("AmiResolve", "g5.xlarge", "t3.large", "g6.xlarge"),
    )
    tpl["Parameters"] = {
        "DlamiParameter": {"Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>", "Default": DLAMI}
    }
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("AmiParam", f"{ID}[LaunchTemplate:c5.xlarge:no-NVIDIA-GPU]"),
        ("Group", f"{ID}[Override1:t3.large:no-NVIDIA-GPU]"),
    ]


def test_known_gpu_workloads_on_fitting_types_and_unknown_workloads_are_clean() -> None:
    tpl = template(
        Gpu=model(GPU_DLC),
        Cpu=model(CPU_DLC),
        Own=model({"Fn::Join": ["", [{"Ref": "AWS::AccountId"}, ".dkr.ecr.us-east-1.amazonaws.com/own:abc"]]}),
        Fits=config("Gpu", "ml.g5.xlarge"),
        CpuImageOnCpu=config("Cpu", "ml.m5.xlarge"),
        UnknownImageOnCpu=config("Own", "ml.m5.xlarge"),
        NotInCatalog=config("Gpu", "ml.r5.large"),
        TypeFromParameter=config("Gpu", {"Ref": "InstanceType"}),
        PinnedAmi=launch_template("ami-0123456789abcdef0", "c5.xlarge"),
        NeuronAmi=launch_template(
            "{{resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-neuron-ubuntu-22.04/latest/ami-id}}", "c5.xlarge"
        ),
    )
    assert findings(RULE, tpl) == []


def pooled(model_id: str, *pools: tuple[str, str | None]) -> dict[str, Any]:
    """An endpoint config whose variant lists ``(instance type, model override id)`` pools instead of a type."""
    entries: list[dict[str, Any]] = []
    for priority, (instance_type, override) in enumerate(pools, start=1):
        entry: dict[str, Any] = {"InstanceType": instance_type, "Priority": priority}
        if override is not None:
            entry["ModelNameOverride"] = {"Fn::GetAtt": [override, "ModelName"]}
        entries.append(entry)
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": {"Fn::GetAtt": [model_id, "ModelName"]},
        "InstancePools": entries,
        "InitialInstanceCount": 1,
    }
    return {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [variant]}}


def test_every_instance_pool_is_checked_with_its_own_model() -> None:
    tpl = template(
        Gpu=model(GPU_DLC),
        Cuda13=model(CU130),
        Fits=pooled("Gpu", ("ml.g5.xlarge", None), ("ml.g6.xlarge", None)),
        CpuPool=pooled("Gpu", ("ml.g5.xlarge", None), ("ml.m5.xlarge", None)),
        # the variant's model (CUDA 12.4) fits the V100; the pool's override (CUDA 13.0) does not
        OverrideOnVolta=pooled("Gpu", ("ml.g4dn.xlarge", None), ("ml.p3.2xlarge", "Cuda13")),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("CpuPool", f"{ID}[AllTraffic:ml.m5.xlarge:no-NVIDIA-GPU]"),
        ("OverrideOnVolta", f"{ID}[AllTraffic:ml.p3.2xlarge:CUDA-13.0]"),
    ]
