"""The CUDA version of a training image must support the GPU architecture of the instance type.

A CUDA toolkit compiles native code only for the compute capabilities it knows, from the first toolkit that
supports an architecture until the major version that drops it (NVIDIA "CUDA Toolkit, Driver, and Architecture
Matrix", https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html; CUDA
13.0 dropped Maxwell, Pascal and Volta, CUDA 12.0 dropped Kepler; Hopper needs 11.8, Blackwell 12.8). A PyTorch
build without the GPU's architecture fails on it with "no kernel image is available for execution on the
device". The windows are the platform's ``gpu_constructs.catalog.cuda`` table; the check is the catalog's
``cuda_support_problem``.

The image's CUDA version is read from a literal AWS Deep Learning Container tag (``...-cu129-...`` = CUDA 12.9).

Reads ``AWS::SageMaker::TrainingJob`` and the ``sagemaker:createTrainingJob[.sync]`` and
``aws-sdk:sagemaker:createTrainingJob`` tasks of state machines.
Non-compliant: a literal ``cuNNN`` image tag and a literal ``ResourceConfig.InstanceType``, or an ``InstanceType`` of
``ResourceConfig.InstancePreferences`` (any of them may be selected), with an NVIDIA GPU whose architecture that CUDA
version cannot build for (one finding per state). Anything set at run or deploy time is not judged.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpu_constructs.rules._training import TrainingRequest, image_and_instances, training_rule


@training_rule(
    id="TrainingImageCudaArchitecture",
    info="The training image's CUDA version cannot build for the instance type's GPU architecture: the job fails "
    "with 'no kernel image is available'. Use an image whose CUDA supports the GPU, or another GPU type.",
    doc=__doc__,
)
def check(request: TrainingRequest) -> Iterator[str]:
    from gpu_constructs.catalog import cuda_support_problem

    image, entries = image_and_instances(request)
    if image is None or image.cuda is None:
        return
    cuda = image.cuda
    if any(entry.has_nvidia_gpu and cuda_support_problem(entry, cuda) is not None for entry in entries):
        yield f"{request.where}:{cuda}"
