"""CreateTrainingJob takes only strings as hyperparameter values.

botocore 1.44.5 (sagemaker): ``CreateTrainingJobRequest.HyperParameters`` is the map ``HyperParameters`` of
``HyperParameterKey`` (string, ``max: 256``) to ``HyperParameterValue`` (string, ``max: 2500``, ``pattern: .*``).
A number or boolean in a template (``"epochs": 30``) passes CloudFormation's template checks of a Step Functions
definition, but the task fails when the state machine runs (and ``AWS::SageMaker::TrainingJob`` fails to create).
(The member's prose still says values are "limited to 256 characters"; the newer shape metadata, 2500, wins.)

Reads ``AWS::SageMaker::TrainingJob`` and the ``sagemaker:createTrainingJob[.sync]`` and
``aws-sdk:sagemaker:createTrainingJob`` tasks of state machines.
Finding per bad value: ``<state>:<key>``. Values set at run time (``"Key.$"``, JSONata, intrinsics) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpu_constructs.rules._training import UNKNOWN, TrainingRequest, training_rule


@training_rule(
    id="TrainingHyperParameterNotString",
    info="A HyperParameters value is not a string: CreateTrainingJob accepts only strings (map of "
    'HyperParameterKey to HyperParameterValue). Quote it, e.g. "epochs": "30".',
    doc=__doc__,
)
def check(request: TrainingRequest) -> Iterator[str]:
    values = request.get("HyperParameters")
    if not isinstance(values, Mapping):
        return
    for key, value in values.items():
        if str(key).endswith(".$") or request.get("HyperParameters", str(key)) is UNKNOWN:
            continue
        if not isinstance(value, str):
            yield f"{request.where}:{key}"
