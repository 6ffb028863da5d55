"""TrainingInstanceNotNvidiaGpu: a GPU (CUDA) training image on a type without an NVIDIA GPU."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import DLC_CPU, DLC_GPU, request, state_machine, training_job

RULE = "TrainingInstanceNotNvidiaGpu"


def _on(instance_type: object, image: object = DLC_GPU) -> dict:
    return request(
        AlgorithmSpecification={"TrainingImage": image, "TrainingInputMode": "File"},
        ResourceConfig={"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 50},
    )


def test_a_gpu_image_on_cpu_or_trainium_is_a_finding() -> None:
    tpl = template(
        Machine=state_machine(_on("ml.g5.xlarge"), _on("ml.m5.xlarge")),
        Job=training_job(_on("ml.trn1.2xlarge")),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Job", "GpuPlatform::GpuPlatform-TrainingInstanceNotNvidiaGpu"),
        ("Machine", "GpuPlatform::GpuPlatform-TrainingInstanceNotNvidiaGpu[Train1]"),
    ]


def test_gpu_types_cpu_images_and_unknown_values_are_compliant() -> None:
    tokenized = {
        "Fn::Join": ["", [{"Ref": "AWS::AccountId"}, ".dkr.ecr.us-east-1.amazonaws.com/mine:", {"Ref": "Tag"}]]
    }
    tpl = template(
        A=state_machine(_on("ml.g5.xlarge"), _on("ml.p4d.24xlarge")),
        B=state_machine(_on("ml.m5.xlarge", image=DLC_CPU)),
        C=state_machine(request(ResourceConfig={"InstanceType.$": "$.type", "InstanceCount": 1})),
        D=training_job(_on("ml.m5.xlarge", image=tokenized)),
        E=training_job(_on("ml.m5.xlarge", image="123456789012.dkr.ecr.us-east-1.amazonaws.com/custom:latest")),
    )
    assert findings(RULE, tpl) == []


def test_a_cpu_type_in_the_fallback_list_is_a_finding() -> None:
    def listed(*names: str) -> dict:
        preferences = [{"InstanceType": name} for name in names]
        return request(
            AlgorithmSpecification={"TrainingImage": DLC_GPU, "TrainingInputMode": "File"},
            ResourceConfig={"InstancePreferences": preferences, "InstanceCount": 1, "VolumeSizeInGB": 50},
        )

    tpl = template(
        Machine=state_machine(
            listed("ml.g5.xlarge", "ml.g6.2xlarge"),
            listed("ml.g5.xlarge", "ml.m5.xlarge"),
            api="aws-sdk:sagemaker:createTrainingJob",
            sync=False,
        )
    )
    assert [f.finding for f in findings(RULE, tpl)] == ["Train1"]
