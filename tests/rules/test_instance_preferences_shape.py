"""InstancePreferencesShape: more than 5 types, repeats, counts on some entries, two kinds of training plan."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import processing_job, processing_request, request, state_machine, training_job

RULE = "InstancePreferencesShape"
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p4d-plan"


def _listed(entries: list, **resource: object) -> dict:
    return request(ResourceConfig={"InstancePreferences": entries, "VolumeSizeInGB": 100, **resource})


def _types(*names: str) -> list:
    return [{"InstanceType": name} for name in names]


def test_each_problem_of_a_list_is_a_finding() -> None:
    six = _types("ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.16xlarge", "ml.g6.2xlarge")
    some = [{"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2}, {"InstanceType": "ml.p4de.24xlarge"}]
    both = [
        {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
        {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 2},
    ]
    planned = [{"InstanceType": "ml.p4d.24xlarge", "TrainingPlanArns": [PLAN]}, {"InstanceType": "ml.p4de.24xlarge"}]
    tpl = template(
        Machine=state_machine(
            _listed(six, InstanceCount=1),
            _listed(_types("ml.g5.xlarge", "ml.g5.xlarge"), InstanceCount=1),
            _listed(some),
            _listed(both, InstanceCount=2),
            _listed(_types("ml.g5.xlarge")),
            _listed(planned, InstanceCount=2, TrainingPlanArn=PLAN),
            api="aws-sdk:sagemaker:createTrainingJob",
            sync=False,
        ),
        Job=training_job(_listed(_types("ml.g5.xlarge", "ml.g5.xlarge"), InstanceCount=1)),
        Prepare=processing_job(
            processing_request(
                ProcessingResources={
                    "ClusterConfig": {"InstancePreferences": _types("ml.m5.xlarge"), "VolumeSizeInGB": 1}
                }
            )
        ),
    )
    assert sorted((f.logical_id, f.finding) for f in findings(RULE, tpl)) == [
        ("Job", None),
        ("Machine", "Train0:max5"),
        ("Machine", "Train1:repeated"),
        ("Machine", "Train2:count-on-some"),
        ("Machine", "Train3:count-twice"),
        ("Machine", "Train4:count-missing"),
        ("Machine", "Train5:two-plans"),
        ("Prepare", None),
    ]


def test_well_formed_lists_and_runtime_values_are_compliant() -> None:
    per_entry = [
        {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
        {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 2},
    ]
    planned = [{"InstanceType": "ml.p4d.24xlarge", "TrainingPlanArns": [PLAN]}, {"InstanceType": "ml.p4de.24xlarge"}]
    tpl = template(
        A=state_machine(
            _listed(_types("ml.g5.xlarge", "ml.g5.2xlarge", "ml.g6.2xlarge"), InstanceCount=1),
            _listed(per_entry),
            _listed(planned, InstanceCount=2),
            _listed(_types("ml.g5.xlarge"), TrainingPlanArn=PLAN, InstanceCount=1),
            request(),
            request(ResourceConfig={"InstancePreferences.$": "$.preferences", "VolumeSizeInGB": 100}),
        ),
        B=processing_job(
            processing_request(
                ProcessingResources={
                    "ClusterConfig": {
                        "InstancePreferences": _types("ml.m5.xlarge"),
                        "InstanceCount": 1,
                        "VolumeSizeInGB": 1,
                    }
                }
            )
        ),
    )
    assert findings(RULE, tpl) == []
