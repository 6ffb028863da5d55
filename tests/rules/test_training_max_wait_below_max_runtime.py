"""TrainingMaxWaitBelowMaxRuntime: MaxWait below MaxRuntime, or MaxWait without managed spot."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import request, state_machine, training_job

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
