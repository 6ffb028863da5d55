"""Templates holding CreateTrainingJob and CreateProcessingJob requests, for the training rules' tests.

``state_machine`` renders a definition the way the CDK does (an ``Fn::Join`` with references inside strings);
``training_job`` is an ``AWS::SageMaker::TrainingJob``, ``processing_job`` an ``AWS::SageMaker::ProcessingJob``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

DLC_GPU = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
DLC_CPU = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-cpu-py312-ubuntu22.04-sagemaker"

REQUEST: dict[str, Any] = {
    "AlgorithmSpecification": {
        "TrainingImage": DLC_GPU,
        "TrainingInputMode": "FastFile",
        # Code through a launcher (as TrainingPipeline renders it): the DLC's toolkit does not take over.
        "ContainerEntrypoint": ["python3", "/opt/ml/input/data/sm_drivers/gpu_train_driver.pyz", "launch"],
    },
    "RoleArn": "arn:aws:iam::123456789012:role/train",
    "HyperParameters": {"epochs": "10"},
    "OutputDataConfig": {"S3OutputPath": "s3://artifacts/output/"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
    "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
}


PROCESSING_REQUEST: dict[str, Any] = {
    "AppSpecification": {"ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/prepare:1.0"},
    "RoleArn": "arn:aws:iam::123456789012:role/prepare",
    "ProcessingResources": {
        "ClusterConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50}
    },
    "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
}


def request(**changes: Any) -> dict[str, Any]:
    """The baseline request (compliant with every training rule) with top-level ``changes``; None removes."""
    return _changed(REQUEST, changes)


def processing_request(**changes: Any) -> dict[str, Any]:
    """The baseline CreateProcessingJob request (compliant with every rule) with top-level ``changes``."""
    return _changed(PROCESSING_REQUEST, changes)


def _changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def state_machine(
    *tasks: dict[str, Any],
    sync: bool = True,
    nested: bool = False,
    api: str = "sagemaker:createTrainingJob",
    prefix: str = "Train",
) -> dict[str, Any]:
    """A state machine whose Task states ``Train0``, ``Train1`` ... send ``tasks`` as CreateTrainingJob parameters.

    The definition is an ``Fn::Join`` whose Resource ARNs hold ``${AWS::Partition}`` (as the CDK renders them);
    ``nested`` puts the tasks in a Parallel branch. ``api`` is the integration and API of the Resource
    (``aws-sdk:sagemaker:createTrainingJob``, ``sagemaker:createProcessingJob`` ...), ``prefix`` the state names'.
    """
    states: dict[str, Any] = {}
    names = [f"{prefix}{i}" for i in range(len(tasks))]
    for index, (name, params) in enumerate(zip(names, tasks, strict=True)):
        states[name] = {
            "Type": "Task",
            "Resource": f"arn:@PARTITION@:states:::{api}{'.sync' if sync else ''}",
            "Parameters": params,
            **({"Next": names[index + 1]} if index + 1 < len(names) else {"End": True}),
        }
    machine: dict[str, Any] = {"StartAt": names[0], "States": states}
    if nested:
        machine = {"StartAt": "Both", "States": {"Both": {"Type": "Parallel", "Branches": [machine], "End": True}}}
    text = json.dumps(machine)
    pieces = text.split("@PARTITION@")
    joined: list[Any] = []
    for index, piece in enumerate(pieces):
        if index:
            joined.append({"Ref": "AWS::Partition"})
        joined.append(piece)
    return {
        "Type": "AWS::StepFunctions::StateMachine",
        "Properties": {"DefinitionString": {"Fn::Join": ["", joined]}, "RoleArn": "arn:aws:iam::1:role/sfn"},
    }


def training_job(params: dict[str, Any]) -> dict[str, Any]:
    return {"Type": "AWS::SageMaker::TrainingJob", "Properties": params}


def processing_job(params: dict[str, Any]) -> dict[str, Any]:
    return {"Type": "AWS::SageMaker::ProcessingJob", "Properties": params}
