"""A training job whose image is built for NVIDIA GPUs must run on an instance type with an NVIDIA GPU.

An AWS Deep Learning Container GPU image (tag ``<version>-gpu-<python>-cu<NNN>-<os>-sagemaker``, AWS "Available
Deep Learning Containers Images", https://github.com/aws/deep-learning-containers/blob/master/available_images.md)
runs its CUDA code on the host's NVIDIA GPU. On a CPU type (``ml.m5``, ``ml.c5``), an AWS Trainium/Inferentia type
(Neuron, not CUDA) or any other type without an NVIDIA GPU, CUDA finds no device: the job either fails ("no CUDA
GPUs are available") or trains on the CPU at a fraction of the speed while billing for the instance. Which types
have an NVIDIA GPU comes from the platform's GPU catalog (checked against botocore's SageMaker enums).

Reads ``AWS::SageMaker::TrainingJob`` and the ``sagemaker:createTrainingJob[.sync]`` and
``aws-sdk:sagemaker:createTrainingJob`` tasks of state machines.
Non-compliant: a literal GPU image tag (``-gpu-`` or ``cuNNN``) with a literal ``ResourceConfig.InstanceType``, or
an ``InstanceType`` of ``ResourceConfig.InstancePreferences`` (SageMaker may select any of them: "SageMaker launches
the training job on the first instance type in the list that has available capacity", botocore 1.44.8), that the
catalog lists without an NVIDIA GPU (one finding per state). Images and types set at run or deploy time, images of
unknown naming and types missing from the catalog are not judged.
"""

from __future__ import annotations

from gpu_constructs.rules._training import TrainingRequest, image_and_instances, training_rule


@training_rule(
    id="TrainingInstanceNotNvidiaGpu",
    info="A training job runs a GPU (CUDA) image on an instance type without an NVIDIA GPU: CUDA finds no device. "
    "Use an NVIDIA GPU training type (ml.g5, ml.g6, ml.p4d, ml.p5 ...) or a CPU image.",
    doc=__doc__,
)
def check(request: TrainingRequest) -> list[str]:
    image, entries = image_and_instances(request)
    return [request.where] if image is not None and any(not entry.has_nvidia_gpu for entry in entries) else []
