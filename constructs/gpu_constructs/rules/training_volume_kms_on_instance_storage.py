"""``ResourceConfig.VolumeKmsKeyId`` cannot be used on instance types with local (NVMe) instance storage.

botocore 1.44.5 (sagemaker, ``ResourceConfig.VolumeKmsKeyId``): "Certain Nitro-based instances include local
storage, dependent on the instance type. Local storage volumes are encrypted using a hardware module on the
instance. You can't request a ``VolumeKmsKeyId`` when using an instance type with local storage." The request
passes every schema check and CreateTrainingJob fails when the job starts. (For endpoints the newer model text
differs: there the key "does not encrypt instance local storage"; this rule is about training only.)

Which types have local NVMe comes from the platform's GPU catalog (``InstanceType.has_local_nvme``).

Reads ``AWS::SageMaker::TrainingJob`` and the ``sagemaker:createTrainingJob[.sync]`` tasks of state machines.
Non-compliant: a ``VolumeKmsKeyId`` (any value) with a literal ``InstanceType`` that the catalog lists with local
NVMe. Instance types chosen at run time or unknown to the catalog are not judged.
"""

from __future__ import annotations

from gpu_constructs.errors import ValidationError
from gpu_constructs.rules._training import TrainingRequest, training_rule


@training_rule(
    id="TrainingVolumeKmsOnInstanceStorage",
    info="ResourceConfig.VolumeKmsKeyId is set on an instance type with local NVMe instance storage: "
    "CreateTrainingJob rejects it. Drop VolumeKmsKeyId there (the hardware encrypts local storage).",
    doc=__doc__,
)
def check(request: TrainingRequest) -> list[str]:
    if request.get("ResourceConfig", "VolumeKmsKeyId") is None:
        return []
    return [request.where] if _local_nvme(request.text("ResourceConfig", "InstanceType")) else []


def _local_nvme(instance_type: str | None) -> bool:
    from gpu_constructs.catalog import lookup

    if instance_type is None:
        return False
    try:
        return lookup(instance_type).has_local_nvme
    except ValidationError:
        return False
