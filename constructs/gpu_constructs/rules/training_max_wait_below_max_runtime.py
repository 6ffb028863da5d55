"""A job's ``StoppingCondition`` must stay inside SageMaker's limits: MaxWait covers MaxRuntime, only for managed
spot training, and MaxRuntime is at most 28 days (training) or 777600 seconds (processing).

botocore 1.44.5 (sagemaker, ``StoppingCondition.MaxWaitTimeInSeconds``): "The maximum length of time, in seconds,
that a managed Spot training job has to complete. It is the amount of time spent waiting for Spot capacity plus
the amount of time the job can run. It must be equal to or greater than ``MaxRuntimeInSeconds``." The shape
itself only declares ``min: 1``, so botocore's own validation, cfn-lint and CloudFormation's schema accept a
smaller value and CreateTrainingJob fails at run time. AWS "Managed Spot Training in Amazon SageMaker"
(https://docs.aws.amazon.com/sagemaker/latest/dg/model-managed-spot-training.html): "Set
EnableManagedSpotTraining to True and specify the MaxWaitTimeInSeconds. MaxWaitTimeInSeconds must be larger than
MaxRuntimeInSeconds" (the API model's "equal to or greater" is newer and wins: equal is allowed).

The longest run: botocore 1.44.8 (sagemaker, ``StoppingCondition.MaxRuntimeInSeconds``, the training job's): "The
default value is 1 day. The maximum value is 28 days." (28 days = 2419200 seconds; the shape ``MaxRuntimeInSeconds``
declares only ``min: 1``, so no schema check catches a longer value). A processing job's stopping condition is
another shape, ``ProcessingStoppingCondition.MaxRuntimeInSeconds`` -> ``ProcessingMaxRuntimeInSeconds``:
``min: 1``, ``max: 777600`` (9 days; Amazon SageMaker API Reference, "ProcessingStoppingCondition",
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProcessingStoppingCondition.html: "Valid Range:
Minimum value of 1. Maximum value of 777600."). botocore's client-side validation checks only a shape's ``min``
(``botocore/validate.py``, ``range_check``), and Step Functions passes task parameters through unchecked, so both
fail only when the job is created. ``MaxWaitTimeInSeconds`` has no documented upper limit (shape
``MaxWaitTimeInSeconds``: ``min: 1``) and is not judged against one.

Reads ``AWS::SageMaker::TrainingJob``, ``AWS::SageMaker::ProcessingJob`` and the state machine tasks that call
CreateTrainingJob or CreateProcessingJob (``sagemaker:create...Job[.sync]`` and ``aws-sdk:sagemaker:create...Job``).
Findings (per state, one per field): ``<state>:MaxWaitBelowMaxRuntime`` when both are literal numbers and MaxWait
is smaller; ``<state>:MaxWaitWithoutSpot`` when a MaxWait is set but ``EnableManagedSpotTraining`` is absent or
literally false; ``<state>:MaxRuntimeAbove2419200`` (training) and ``<state>:MaxRuntimeAbove777600``
(processing) when a literal MaxRuntime is longer than the limit. Values set at run or deploy time are not judged.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpu_constructs.rules._training import UNKNOWN, JobRequest, ProcessingRequest, job_rule
from gpu_constructs.training_spec.limits import MAX_RUNTIME_LIMIT_S, PROCESSING_MAX_RUNTIME_LIMIT_S


@job_rule(
    id="TrainingMaxWaitBelowMaxRuntime",
    info="StoppingCondition is outside SageMaker's limits: MaxWaitTimeInSeconds below MaxRuntimeInSeconds or set "
    "without managed spot training, or MaxRuntimeInSeconds above 28 days (training) / 777600 s (processing). "
    "CreateTrainingJob/CreateProcessingJob rejects it.",
    doc=__doc__,
)
def check(request: JobRequest) -> Iterator[str]:
    runtime = request.get("StoppingCondition", "MaxRuntimeInSeconds")
    limit = PROCESSING_MAX_RUNTIME_LIMIT_S if isinstance(request, ProcessingRequest) else MAX_RUNTIME_LIMIT_S
    if _number(runtime) and runtime > limit:
        yield f"{request.where}:MaxRuntimeAbove{limit}"
    if isinstance(request, ProcessingRequest):
        return  # no MaxWaitTimeInSeconds or managed spot for processing jobs
    wait = request.get("StoppingCondition", "MaxWaitTimeInSeconds")
    spot = request.get("EnableManagedSpotTraining")
    if _number(wait) and _number(runtime) and wait < runtime:
        yield f"{request.where}:MaxWaitBelowMaxRuntime"
    if wait is not None and spot is not UNKNOWN and spot is not True:
        yield f"{request.where}:MaxWaitWithoutSpot"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
