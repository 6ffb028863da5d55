"""TrainingMaxWaitBelowMaxRuntime: MaxWait below MaxRuntime or without managed spot, MaxRuntime above the limit."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import processing_job, processing_request, request, state_machine, training_job

RULE = "TrainingMaxWaitBelowMaxRuntime"
CHECKPOINT = {"S3Uri": "s3://artifacts/checkpoints/job/"}


def _stop(runtime: object, wait: object | None = None) -> dict:
    return {"MaxRuntimeInSeconds": runtime, **({"MaxWaitTimeInSeconds": wait} if wait is not None else {})}


def test_wait_below_runtime_and_wait_without_spot_are_findings() -> None:
    below = request(EnableManagedSpotTraining=True, CheckpointConfig=CHECKPOINT, StoppingCondition=_stop(7200, 3600))
    no_spot = request(StoppingCondition=_stop(3600, 7200))
    found = findings(RULE, template(Machine=state_machine(below, no_spot)))
    assert sorted(f.id for f in found) == [
        "GpuPlatform::GpuPlatform-TrainingMaxWaitBelowMaxRuntime[Train0:MaxWaitBelowMaxRuntime]",
        "GpuPlatform::GpuPlatform-TrainingMaxWaitBelowMaxRuntime[Train1:MaxWaitWithoutSpot]",
    ]
    job = findings(RULE, template(Job=training_job(request(EnableManagedSpotTraining=False,
                                                           StoppingCondition=_stop(3600, 7200)))))  # fmt: skip
    assert [f.id for f in job] == ["GpuPlatform::GpuPlatform-TrainingMaxWaitBelowMaxRuntime"]


def test_equal_or_longer_waits_on_spot_and_runtime_values_are_compliant() -> None:
    spot = {"EnableManagedSpotTraining": True, "CheckpointConfig": CHECKPOINT}
    tpl = template(
        A=state_machine(
            request(**spot, StoppingCondition=_stop(3600, 3600)), request(**spot, StoppingCondition=_stop(3600, 7200))
        ),
        B=state_machine(request(StoppingCondition=_stop(3600))),
        C=state_machine(
            request(**spot, StoppingCondition={"MaxRuntimeInSeconds.$": "$.runtime", "MaxWaitTimeInSeconds": 60})
        ),
        D=state_machine(request(**{"EnableManagedSpotTraining.$": "$.spot"}, StoppingCondition=_stop(60, 120))),
        E=training_job(request(**spot, StoppingCondition=_stop(3600, {"Ref": "Wait"}))),
    )
    assert findings(RULE, tpl) == []


DAYS_28 = 28 * 24 * 3600  # StoppingCondition.MaxRuntimeInSeconds: "The maximum value is 28 days."


def test_runtimes_above_the_limits_are_findings() -> None:
    spot = {"EnableManagedSpotTraining": True, "CheckpointConfig": CHECKPOINT}
    tpl = template(
        Train=state_machine(
            request(StoppingCondition=_stop(DAYS_28 + 1)),
            request(**spot, StoppingCondition=_stop(DAYS_28 + 1, 3600)),
            api="aws-sdk:sagemaker:createTrainingJob",
            sync=False,
        ),
        # ProcessingStoppingCondition.MaxRuntimeInSeconds: shape ProcessingMaxRuntimeInSeconds, max 777600
        Prepare=state_machine(
            processing_request(StoppingCondition=_stop(777601)),
            processing_request(StoppingCondition=_stop(777600)),
            api="sagemaker:createProcessingJob",
            prefix="Prepare",
        ),
        Job=training_job(request(StoppingCondition=_stop(30 * 24 * 3600))),
        ProcessingJob=processing_job(processing_request(StoppingCondition=_stop(DAYS_28))),
    )
    rule = f"GpuPlatform::GpuPlatform-{RULE}"
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Job", rule),
        ("Prepare", f"{rule}[Prepare0:MaxRuntimeAbove777600]"),
        ("ProcessingJob", rule),
        ("Train", f"{rule}[Train0:MaxRuntimeAbove2419200]"),
        ("Train", f"{rule}[Train1:MaxRuntimeAbove2419200]"),
        ("Train", f"{rule}[Train1:MaxWaitBelowMaxRuntime]"),
    ]


def test_runtimes_at_the_limits_are_compliant() -> None:
    spot = {"EnableManagedSpotTraining": True, "CheckpointConfig": CHECKPOINT}
    tpl = template(
        Train=state_machine(
            request(StoppingCondition=_stop(DAYS_28)),
            # MaxWaitTimeInSeconds has no documented maximum: a wait beyond 28 days is not judged
            request(**spot, StoppingCondition=_stop(DAYS_28, 2 * DAYS_28)),
        ),
        Prepare=state_machine(
            processing_request(StoppingCondition=_stop(777600)),
            processing_request(StoppingCondition={"MaxRuntimeInSeconds.$": "$.runtime"}),
            api="aws-sdk:sagemaker:createProcessingJob",
            sync=False,
            prefix="Prepare",
        ),
        Job=processing_job(processing_request(StoppingCondition=_stop({"Ref": "Runtime"}))),
    )
    assert findings(RULE, tpl) == []
