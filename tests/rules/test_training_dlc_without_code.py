"""TrainingDlcWithoutCode: a stock SageMaker training DLC with no entry point override and no script."""

from __future__ import annotations

from rule_helpers import findings, template
from training_templates import DLC_CPU, DLC_GPU, REQUEST, request, state_machine, training_job

from gpu_constructs.rules.training_dlc_without_code import is_stock_training_dlc

RULE = "TrainingDlcWithoutCode"


def _algorithm(**changes: object) -> dict[str, object]:
    algorithm = {k: v for k, v in REQUEST["AlgorithmSpecification"].items() if k != "ContainerEntrypoint"}
    algorithm.update(changes)
    return algorithm


def test_a_dlc_without_entrypoint_or_program_is_a_finding() -> None:
    bare = request(AlgorithmSpecification=_algorithm())
    found = findings(RULE, template(Machine=state_machine(request(), bare)))
    assert [f.id for f in found] == ["GpuPlatform::GpuPlatform-TrainingDlcWithoutCode[Train1]"]
    job = findings(RULE, template(Job=training_job(request(AlgorithmSpecification=_algorithm(TrainingImage=DLC_CPU)))))
    assert [f.id for f in job] == ["GpuPlatform::GpuPlatform-TrainingDlcWithoutCode"]


def test_an_entrypoint_a_program_or_a_runtime_value_is_compliant() -> None:
    tpl = template(
        Launcher=state_machine(request()),
        Program=state_machine(
            request(
                AlgorithmSpecification=_algorithm(),
                HyperParameters={"sagemaker_program": "train.py", "sagemaker_submit_directory": "s3://b/c.tar.gz"},
            )
        ),
        EnvProgram=training_job(
            request(AlgorithmSpecification=_algorithm(), Environment={"SAGEMAKER_PROGRAM": "t.py"})
        ),
        Runtime=state_machine(
            request(AlgorithmSpecification=_algorithm(), HyperParameters=None, **{"HyperParameters.$": "$.hp"})
        ),
        OwnImage=state_machine(
            request(
                AlgorithmSpecification=_algorithm(TrainingImage="123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu:1")
            )
        ),
    )
    assert findings(RULE, tpl) == []


def test_which_images_are_stock_training_dlcs() -> None:
    assert is_stock_training_dlc(DLC_GPU)
    assert is_stock_training_dlc(
        "${AWS::AccountId}.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.19.0-gpu-py312-cu125-ubuntu22.04-sagemaker"
    )
    assert not is_stock_training_dlc(DLC_GPU.replace("-sagemaker", "-ec2"))
    assert not is_stock_training_dlc(DLC_GPU.replace("pytorch-training", "pytorch-inference"))
    assert not is_stock_training_dlc(None)
