"""A SageMaker training DLC started with no code stops at once.

The stock AWS Deep Learning Containers for SageMaker training (``pytorch-training``, ``tensorflow-training``,
``huggingface-*-training`` repositories, tags ending ``-sagemaker``) start the SageMaker training toolkit when the
request keeps the image's own entry (no ``AlgorithmSpecification.ContainerEntrypoint``). The toolkit runs the user
script that the ``sagemaker_program`` hyperparameter (or the ``SAGEMAKER_PROGRAM`` environment variable) names,
downloaded from ``sagemaker_submit_directory``; without one it fails the job with "The training entry point name is
empty. Set the 'sagemaker_program' hyperparameter (or ContainerEntrypoint) to the name of the script to run"
(pip package sagemaker-training 5.1.4, ``sagemaker_training/process.py``, ``_check_entry_point``; the DLC
Dockerfiles set ``SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main``, aws/deep-learning-containers
``pytorch/training/docker/2.8/py3/cu129/Dockerfile.gpu``). The job has then already waited for its instances.

Give the job code: a ``ContainerEntrypoint`` (the platform's launcher with ``code`` and ``sm_drivers`` channels, as
``TrainingPipeline`` renders it, or SageMaker SDK v3's ``ModelTrainer``), or ``sagemaker_program`` with a
``sagemaker_submit_directory``. Reads ``AWS::SageMaker::TrainingJob`` and the ``sagemaker:createTrainingJob[.sync]`` and
``aws-sdk:sagemaker:createTrainingJob``
tasks of state machines; requests whose image, entry point or hyperparameters are set at run time are not judged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpu_constructs.rules._training import UNKNOWN, TrainingRequest, training_rule

#: ``<registry>/<dlc training repository>:<tag>-sagemaker``; references (``${...}``) in the registry part are fine.
_DLC_TRAINING = re.compile(
    r"/(pytorch-training|tensorflow-training|huggingface-[a-z0-9-]+-training[a-z0-9-]*):[A-Za-z0-9._-]+-sagemaker$"
)


def is_stock_training_dlc(uri: str | None) -> bool:
    """True when ``uri`` is a stock SageMaker training DLC, whose entry is the SageMaker training toolkit."""
    return uri is not None and "${" not in uri.rsplit("/", 1)[-1] and _DLC_TRAINING.search(uri) is not None


def _names_program(request: TrainingRequest) -> bool | None:
    """Whether the request names a script for the toolkit (``None`` when it is set at run time)."""
    hyperparameters = request.get("HyperParameters")
    environment = request.get("Environment")
    if hyperparameters is UNKNOWN or environment is UNKNOWN:
        return None
    if isinstance(hyperparameters, Mapping) and any(
        str(k).removesuffix(".$") == "sagemaker_program" for k in hyperparameters
    ):
        return True
    return isinstance(environment, Mapping) and any(
        str(k).removesuffix(".$") == "SAGEMAKER_PROGRAM" for k in environment
    )


@training_rule(
    id="TrainingDlcWithoutCode",
    info="A training job runs a stock SageMaker training DLC with neither a ContainerEntrypoint nor a "
    "sagemaker_program hyperparameter: the DLC's training toolkit stops with 'The training entry point name is "
    "empty'. Deliver code as channels with a ContainerEntrypoint (TrainingPipeline does), or set sagemaker_program.",
    doc=__doc__,
)
def check(request: TrainingRequest) -> list[str]:
    if not is_stock_training_dlc(request.flat("AlgorithmSpecification", "TrainingImage")):
        return []
    if request.get("AlgorithmSpecification", "ContainerEntrypoint") is not None:
        return []  # the launcher (or any entry the request gives) replaces the toolkit; UNKNOWN counts as given
    return [request.where] if _names_program(request) is False else []
