"""TrainingSpotWithoutCheckpoint: managed spot training without CheckpointConfig.S3Uri."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import request, state_machine, training_job

RULE = "TrainingSpotWithoutCheckpoint"
SPOT = {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
CHECKPOINT = {"S3Uri": "s3://artifacts/checkpoints/job/", "LocalPath": "/opt/ml/checkpoints"}


def test_spot_without_checkpoints_is_a_finding_per_state() -> None:
    spot = request(EnableManagedSpotTraining=True, StoppingCondition=SPOT)
    ok = request(EnableManagedSpotTraining=True, StoppingCondition=SPOT, CheckpointConfig=CHECKPOINT)
    found = findings(RULE, template(Machine=state_machine(ok, spot)))
    assert [f.id for f in found] == ["GpuPlatform::GpuPlatform-TrainingSpotWithoutCheckpoint[Train1]"]
    nested = findings(RULE, template(Machine=state_machine(spot, nested=True, sync=False)))
    assert [f.finding for f in nested] == ["Train0"]


def test_a_training_job_resource_is_checked() -> None:
    found = findings(RULE, template(Job=training_job(request(EnableManagedSpotTraining=True, StoppingCondition=SPOT))))
    assert [(f.logical_id, f.id) for f in found] == [("Job", "GpuPlatform::GpuPlatform-TrainingSpotWithoutCheckpoint")]


def test_checkpoints_on_demand_and_runtime_values_are_compliant() -> None:
    dynamic_checkpoint = {"S3Uri.$": "States.Format('s3://artifacts/checkpoints/{}/', $.job)"}
    tpl = template(
        A=state_machine(request(EnableManagedSpotTraining=True, StoppingCondition=SPOT, CheckpointConfig=CHECKPOINT)),
        B=state_machine(request(EnableManagedSpotTraining=False), request()),
        C=state_machine(request(**{"EnableManagedSpotTraining.$": "$.spot"})),
        D=state_machine(request(EnableManagedSpotTraining=True, CheckpointConfig=dynamic_checkpoint)),
        E=training_job(request(EnableManagedSpotTraining=True, CheckpointConfig=CHECKPOINT, StoppingCondition=SPOT)),
        F={"Type": "AWS::StepFunctions::StateMachine", "Properties": {"DefinitionString": "{not json"}},
    )
    assert findings(RULE, tpl) == []
