"""``MaxWaitTimeInSeconds`` must cover ``MaxRuntimeInSeconds``, and exists only for managed spot training.

botocore 1.44.5 (sagemaker, ``StoppingCondition.MaxWaitTimeInSeconds``): "The maximum length of time, in seconds,
that a managed Spot training job has to complete. It is the amount of time spent waiting for Spot capacity plus
the amount of time the job can run. It must be equal to or greater than ``MaxRuntimeInSeconds``." The shape
itself only declares ``min: 1``, so botocore's own validation, cfn-lint and CloudFormation's schema accept a
smaller value and CreateTrainingJob fails at run time. AWS "Managed Spot Training in Amazon SageMaker"
(https://docs.aws.amazon.com/sagemaker/latest/dg/model-managed-spot-training.html): "Set
EnableManagedSpotTraining to True and specify the MaxWaitTimeInSeconds. MaxWaitTimeInSeconds must be larger than
MaxRuntimeInSeconds" (the API model's "equal to or greater" is newer and wins: equal is allowed).

Reads ``AWS::SageMaker::TrainingJob`` and the ``sagemaker:createTrainingJob[.sync]`` tasks of state machines.
Findings (per state): ``<state>:MaxWaitBelowMaxRuntime`` when both are literal numbers and MaxWait is smaller;
``<state>:MaxWaitWithoutSpot`` when a MaxWait is set but ``EnableManagedSpotTraining`` is absent or literally false.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpu_constructs.rules._training import UNKNOWN, TrainingRequest, training_rule


@training_rule(
    id="TrainingMaxWaitBelowMaxRuntime",
    info="StoppingCondition.MaxWaitTimeInSeconds is below MaxRuntimeInSeconds, or is set without managed spot "
    "training: CreateTrainingJob rejects it. Use MaxWait >= MaxRuntime, with EnableManagedSpotTraining true.",
    doc=__doc__,
)
def check(request: TrainingRequest) -> Iterator[str]:
    wait = request.get("StoppingCondition", "MaxWaitTimeInSeconds")
    runtime = request.get("StoppingCondition", "MaxRuntimeInSeconds")
    spot = request.get("EnableManagedSpotTraining")
    if _number(wait) and _number(runtime) and wait < runtime:
        yield f"{request.where}:MaxWaitBelowMaxRuntime"
    if wait is not None and spot is not UNKNOWN and spot is not True:
        yield f"{request.where}:MaxWaitWithoutSpot"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
