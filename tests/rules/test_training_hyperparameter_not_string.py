"""TrainingHyperParameterNotString: non-string HyperParameters values in a static definition."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import request, state_machine, training_job

RULE = "TrainingHyperParameterNotString"


def test_numbers_booleans_and_objects_are_findings_per_key() -> None:
    bad = request(HyperParameters={"epochs": 30, "amp": True, "arch": "resnet50", "opt": {"lr": 0.1}})
    found = findings(RULE, template(Machine=state_machine(request(), bad)))
    assert sorted(f.id for f in found) == [
        "GpuPlatform::GpuPlatform-TrainingHyperParameterNotString[Train1:amp]",
        "GpuPlatform::GpuPlatform-TrainingHyperParameterNotString[Train1:epochs]",
        "GpuPlatform::GpuPlatform-TrainingHyperParameterNotString[Train1:opt]",
    ]
    job = findings(RULE, template(Job=training_job(request(HyperParameters={"epochs": 30}))))
    assert [f.id for f in job] == ["GpuPlatform::GpuPlatform-TrainingHyperParameterNotString"]


def test_strings_and_runtime_values_are_compliant() -> None:
    tpl = template(
        A=state_machine(request(HyperParameters={"epochs": "30", "lr.$": "$.lr"})),
        B=state_machine(request(**{"HyperParameters.$": "$.run.hyperparameters"})),
        C=training_job(request(HyperParameters={"epochs": {"Ref": "Epochs"}})),
        D=state_machine(request(HyperParameters=None)),
    )
    assert findings(RULE, tpl) == []
