"""InstancePreferencesExclusive: InstancePreferences with InstanceType, InstanceGroups, placement or spot."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import processing_job, processing_request, request, state_machine, training_job

RULE = "InstancePreferencesExclusive"
PREFERENCES = [{"InstanceType": "ml.g5.xlarge"}, {"InstanceType": "ml.g6.2xlarge"}]
LIST_ONLY = {"InstancePreferences": PREFERENCES, "InstanceCount": 1, "VolumeSizeInGB": 100}


def _training(**resource: object) -> dict:
    return request(ResourceConfig={**LIST_ONLY, **resource})


def test_a_list_with_a_type_groups_placement_or_spot_is_a_finding_per_member() -> None:
    spot = request(ResourceConfig=LIST_ONLY, EnableManagedSpotTraining=True)
    tpl = template(
        Machine=state_machine(
            _training(),
            _training(InstanceType="ml.g5.xlarge"),
            spot,
            _training(**{"InstanceType.$": "$.args.instance_type"}),
            api="aws-sdk:sagemaker:createTrainingJob",
            sync=False,
        ),
        Job=training_job(_training(InstanceGroups=[{"InstanceGroupName": "a", "InstanceType": "ml.g5.xlarge"}])),
        Prepare=processing_job(
            processing_request(ProcessingResources={"ClusterConfig": {**LIST_ONLY, "InstanceType": "ml.m5.xlarge"}})
        ),
    )
    assert sorted((f.logical_id, f.finding) for f in findings(RULE, tpl)) == [
        ("Job", None),
        ("Machine", "Train1:InstanceType"),
        ("Machine", "Train2:EnableManagedSpotTraining"),
        ("Machine", "Train3:InstanceType"),
        ("Prepare", None),
    ]


def test_a_list_alone_and_a_type_alone_are_compliant() -> None:
    tpl = template(
        A=state_machine(_training(), request(EnableManagedSpotTraining=True), request()),
        B=training_job(request(ResourceConfig=LIST_ONLY, EnableManagedSpotTraining=False)),
        C=processing_job(processing_request(ProcessingResources={"ClusterConfig": LIST_ONLY})),
        D=state_machine(request(**{"ResourceConfig.$": "$.resource_config"})),
    )
    assert findings(RULE, tpl) == []
