"""TrainingImageCudaArchitecture: the image's CUDA version cannot build for the GPU's architecture."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import request, state_machine, training_job

RULE = "TrainingImageCudaArchitecture"
CU130 = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.9.0-gpu-py312-cu130-ubuntu22.04-sagemaker"
CU117 = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.13.1-gpu-py39-cu117-ubuntu20.04-sagemaker"


def _on(instance_type: object, image: object) -> dict:
    return request(
        AlgorithmSpecification={"TrainingImage": image, "TrainingInputMode": "File"},
        ResourceConfig={"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 50},
    )


def test_cuda_outside_the_architecture_window_is_a_finding() -> None:
    # CUDA 13.0 dropped Volta (V100 of ml.p3); CUDA 11.7 predates Hopper (H100 of ml.p5, needs 11.8)
    tpl = template(
        Machine=state_machine(_on("ml.g5.xlarge", CU130), _on("ml.p3.2xlarge", CU130)),
        Job=training_job(_on("ml.p5.48xlarge", CU117)),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Job", "GpuPlatform::GpuPlatform-TrainingImageCudaArchitecture"),
        ("Machine", "GpuPlatform::GpuPlatform-TrainingImageCudaArchitecture[Train1:cu130]"),
    ]


def test_supported_architectures_and_unknown_values_are_compliant() -> None:
    partitioned = {"Fn::Join": ["", ["763104351884.dkr.ecr.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"},
                                     "/pytorch-training:2.9.0-gpu-py312-cu130-ubuntu22.04-sagemaker"]]}  # fmt: skip
    tpl = template(
        A=state_machine(_on("ml.g5.xlarge", CU130), _on("ml.p3.2xlarge", CU117), _on("ml.p5.48xlarge", CU130)),
        B=state_machine(_on({"Ref": "Type"}, CU130), _on("ml.p3.2xlarge", {"Ref": "Image"})),
        C=training_job(_on("ml.m5.xlarge", CU130)),  # no NVIDIA GPU: the other rule's finding
        D=training_job(_on("ml.g5.xlarge", partitioned)),
    )
    assert findings(RULE, tpl) == []
    # a literal tag behind deploy-time registry parts is still read
    assert [f.logical_id for f in findings(RULE, template(E=training_job(_on("ml.p3.2xlarge", partitioned))))] == ["E"]


def test_a_fallback_the_cuda_version_cannot_build_for_is_a_finding() -> None:
    def listed(*names: str, image: str = CU117) -> dict:
        preferences = [{"InstanceType": name, "InstanceCount": 1} for name in names]
        return request(
            AlgorithmSpecification={"TrainingImage": image, "TrainingInputMode": "File"},
            ResourceConfig={"InstancePreferences": preferences, "VolumeSizeInGB": 50},
        )

    # CUDA 11.7 builds for the A100 of ml.p4d but not for the H100 of ml.p5 (Hopper needs 11.8)
    tpl = template(
        Machine=state_machine(
            listed("ml.p4d.24xlarge", "ml.p4de.24xlarge"), listed("ml.p4d.24xlarge", "ml.p5.48xlarge")
        )
    )
    assert [f.finding for f in findings(RULE, tpl)] == ["Train1:cu117"]
