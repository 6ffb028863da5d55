"""TrainingVolumeKmsOnInstanceStorage: VolumeKmsKeyId of a training or processing job on a type with local NVMe."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import processing_job, processing_request, request, state_machine, training_job

RULE = "TrainingVolumeKmsOnInstanceStorage"
KEY = {"Fn::GetAtt": ["Key", "Arn"]}


def _resources(instance_type: object, key: object | None = KEY) -> dict:
    config: dict = {"InstanceCount": 1, "VolumeSizeInGB": 100, "InstanceType": instance_type}
    if key is not None:
        config["VolumeKmsKeyId"] = key
    return config


def test_a_volume_key_on_local_nvme_is_a_finding() -> None:
    # ml.g5.xlarge: 250 GB local NVMe; ml.p3.2xlarge: EBS only
    tpl = template(
        Machine=state_machine(
            request(ResourceConfig=_resources("ml.p3.2xlarge")), request(ResourceConfig=_resources("ml.g5.xlarge"))
        ),
        Job=training_job(request(ResourceConfig=_resources("ml.p4d.24xlarge", key="alias/data"))),
    )
    found = findings(RULE, tpl)
    assert sorted((f.logical_id, f.id) for f in found) == [
        ("Job", "GpuPlatform::GpuPlatform-TrainingVolumeKmsOnInstanceStorage"),
        ("Machine", "GpuPlatform::GpuPlatform-TrainingVolumeKmsOnInstanceStorage[Train1]"),
    ]


def test_ebs_only_types_no_key_and_runtime_types_are_compliant() -> None:
    tpl = template(
        A=state_machine(
            request(ResourceConfig=_resources("ml.p3.2xlarge")),
            request(ResourceConfig=_resources("ml.g5.xlarge", key=None)),
        ),
        B=state_machine(
            request(ResourceConfig={"InstanceType.$": "$.type", "InstanceCount": 1, "VolumeKmsKeyId": "k"})
        ),
        C=training_job(request(ResourceConfig=_resources({"Ref": "InstanceType"}))),
        D=training_job(request(ResourceConfig=_resources("ml.unknown.xlarge"))),
    )
    assert findings(RULE, tpl) == []


def _cluster(instance_type: object, key: object | None = KEY) -> dict:
    return {"ClusterConfig": _resources(instance_type, key)}


def test_processing_jobs_and_sdk_tasks_are_checked_too() -> None:
    # ProcessingClusterConfig.VolumeKmsKeyId: "You can't request a VolumeKmsKeyId when using an instance type with
    # local storage."
    tpl = template(
        Prepare=state_machine(
            processing_request(ProcessingResources=_cluster("ml.p3.2xlarge")),
            processing_request(ProcessingResources=_cluster("ml.g5.xlarge")),
            processing_request(ProcessingResources=_cluster("ml.g5.xlarge", key=None)),
            api="sagemaker:createProcessingJob",
            prefix="Prepare",
        ),
        PrepareSdk=state_machine(
            processing_request(ProcessingResources=_cluster("ml.g5.xlarge")),
            api="aws-sdk:sagemaker:createProcessingJob",
            sync=False,
            prefix="Prepare",
        ),
        TrainSdk=state_machine(
            request(ResourceConfig=_resources("ml.p3.2xlarge")),
            request(ResourceConfig=_resources("ml.g5.xlarge")),
            api="aws-sdk:sagemaker:createTrainingJob",
            sync=False,
        ),
        Job=processing_job(processing_request(ProcessingResources=_cluster("ml.p4d.24xlarge"))),
        EbsJob=processing_job(processing_request(ProcessingResources=_cluster("ml.p3.2xlarge"))),
    )
    rule = "GpuPlatform::GpuPlatform-TrainingVolumeKmsOnInstanceStorage"
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Job", rule),
        ("Prepare", f"{rule}[Prepare1]"),
        ("PrepareSdk", f"{rule}[Prepare0]"),
        ("TrainSdk", f"{rule}[Train1]"),
    ]


def test_a_volume_key_with_a_local_nvme_type_in_the_fallback_list_is_a_finding() -> None:
    def listed(*names: str) -> dict:
        preferences = [{"InstanceType": name} for name in names]
        return {"InstancePreferences": preferences, "InstanceCount": 1, "VolumeSizeInGB": 100, "VolumeKmsKeyId": KEY}

    # ml.p3.2xlarge and ml.p3.8xlarge are EBS only; ml.g5.xlarge has local NVMe
    tpl = template(
        Machine=state_machine(
            request(ResourceConfig=listed("ml.p3.2xlarge", "ml.p3.8xlarge")),
            request(ResourceConfig=listed("ml.p3.2xlarge", "ml.g5.xlarge")),
        )
    )
    assert [f.finding for f in findings(RULE, tpl)] == ["Train1"]
