"""The job-request reader of the training rules: which Task states and resources are CreateTrainingJob and
CreateProcessingJob requests."""

from __future__ import annotations

from typing import Any

import pytest
from training_templates import processing_job, processing_request, request, state_machine, training_job

from gpu_constructs.rules import StackView
from gpu_constructs.rules._rule import Resource
from gpu_constructs.rules._training import (
    UNKNOWN,
    ProcessingRequest,
    TrainingRequest,
    processing_requests,
    training_requests,
)


def _resource(definition: dict[str, Any]) -> Resource:
    stack = StackView(name="Stack", account=None, region=None, template={"Resources": {"R": definition}})
    return Resource("R", definition, stack)


@pytest.mark.parametrize(
    ("api", "sync"),
    [
        ("sagemaker:createTrainingJob", True),
        ("sagemaker:createTrainingJob", False),
        # the AWS SDK integration: same PascalCase request members, Request Response or .waitForTaskToken
        ("aws-sdk:sagemaker:createTrainingJob", False),
        ("aws-sdk:sagemaker:createTrainingJob.waitForTaskToken", False),
    ],
)
def test_training_tasks_of_both_integrations_are_training_requests(api: str, sync: bool) -> None:
    machine = _resource(state_machine(request(), api=api, sync=sync, nested=True))
    [found] = training_requests(machine)
    assert isinstance(found, TrainingRequest)
    assert found.where == "Train0"
    assert found.get("ResourceConfig", "InstanceType") == "ml.g5.xlarge"
    assert processing_requests(machine) == []


@pytest.mark.parametrize(
    ("api", "sync"),
    [
        ("sagemaker:createProcessingJob", True),
        ("sagemaker:createProcessingJob", False),
        ("aws-sdk:sagemaker:createProcessingJob", False),
    ],
)
def test_processing_tasks_are_processing_requests(api: str, sync: bool) -> None:
    machine = _resource(state_machine(processing_request(), api=api, sync=sync, prefix="Prepare"))
    [found] = processing_requests(machine)
    assert isinstance(found, ProcessingRequest)
    assert (found.where, found.flat("AppSpecification", "ImageUri")) == (
        "Prepare0",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/prepare:1.0",
    )
    assert found.get("ProcessingResources", "ClusterConfig", "InstanceType") == "ml.g5.xlarge"
    assert training_requests(machine) == []


@pytest.mark.parametrize(
    "api",
    [
        "aws-sdk:sagemaker:createTrainingJob.sync",  # the SDK integrations support no .sync
        "sagemaker:createTrainingJob.waitForTaskToken",  # nor does the optimized SageMaker integration
        "aws-sdk:sagemaker:describeTrainingJob",
        "aws-sdk:sagemakerruntime:createTrainingJob",
    ],
)
def test_other_tasks_are_no_requests(api: str) -> None:
    machine = _resource(state_machine(request(), api=api, sync=False))
    assert training_requests(machine) == []
    assert processing_requests(machine) == []


def test_job_resources_are_requests_of_their_kind() -> None:
    training = _resource(training_job(request()))
    processing = _resource(processing_job(processing_request(StoppingCondition={"MaxRuntimeInSeconds.$": "$.t"})))
    assert [type(r) for r in training_requests(training)] == [TrainingRequest]
    assert processing_requests(training) == []
    assert training_requests(processing) == []
    [found] = processing_requests(processing)
    assert (found.where, found.get("StoppingCondition", "MaxRuntimeInSeconds")) == ("", UNKNOWN)
