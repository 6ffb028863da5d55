"""A job's ``VolumeKmsKeyId`` cannot be used on instance types with local (NVMe) instance storage.

botocore 1.44.5 (sagemaker, ``ResourceConfig.VolumeKmsKeyId``): "Certain Nitro-based instances include local
storage, dependent on the instance type. Local storage volumes are encrypted using a hardware module on the
instance. You can't request a ``VolumeKmsKeyId`` when using an instance type with local storage." Processing jobs
say the same: botocore 1.44.8 (sagemaker, ``ProcessingClusterConfig.VolumeKmsKeyId``): "Certain Nitro-based
instances include local storage, dependent on the instance type. Local storage volumes are encrypted using a
hardware module on the instance. You can't request a ``VolumeKmsKeyId`` when using an instance type with local
storage." The request passes every schema check and CreateTrainingJob / CreateProcessingJob fails when the job
starts. (For endpoints the newer model text differs: there the key "does not encrypt instance local storage";
this rule is about training and processing jobs only.)

Which types have local NVMe comes from the platform's GPU catalog (``InstanceType.has_local_nvme``).

Reads ``AWS::SageMaker::TrainingJob`` (``ResourceConfig``), ``AWS::SageMaker::ProcessingJob``
(``ProcessingResources.ClusterConfig``) and the state machine tasks that call CreateTrainingJob or
CreateProcessingJob (``sagemaker:create...Job[.sync]`` and ``aws-sdk:sagemaker:create...Job``). Non-compliant: a
``VolumeKmsKeyId`` (any value) with a literal ``InstanceType``, or an ``InstanceType`` of ``InstancePreferences``
(the job may run on any of them), that the catalog lists with local NVMe. Instance types chosen at run time or
unknown to the catalog are not judged.
"""

from __future__ import annotations

from gpu_constructs.errors import ValidationError
from gpu_constructs.rules._training import JobRequest, job_rule


@job_rule(
    id="TrainingVolumeKmsOnInstanceStorage",
    info="A training or processing job sets VolumeKmsKeyId on an instance type with local NVMe instance storage: "
    "CreateTrainingJob/CreateProcessingJob rejects it. Drop VolumeKmsKeyId there (the hardware encrypts local "
    "storage).",
    doc=__doc__,
)
def check(request: JobRequest) -> list[str]:
    if request.get(*request.resource_config, "VolumeKmsKeyId") is None:
        return []
    return [request.where] if any(_local_nvme(name) for name in request.instance_types()) else []


def _local_nvme(instance_type: str | None) -> bool:
    from gpu_constructs.catalog import lookup

    if instance_type is None:
        return False
    try:
        return lookup(instance_type).has_local_nvme
    except ValidationError:
        return False
