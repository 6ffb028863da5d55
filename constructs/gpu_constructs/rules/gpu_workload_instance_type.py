"""A GPU workload must run on an instance type with an NVIDIA GPU whose architecture the image's CUDA supports.

SageMaker and EC2 start a GPU image or GPU AMI on any instance type they are given; nothing checks at create
time that the type has a GPU, so the mistake shows as a model that silently runs on the CPU, or a container that
fails at its first CUDA call. Two facts decide it, both from the platform's instance catalog
(:mod:`gpu_constructs.catalog`, every name checked against botocore's SageMaker and EC2 enums, GPU facts from
the EC2 instance-type data):

* the type must have an NVIDIA GPU (CUDA only drives NVIDIA GPUs; "Amazon EC2 accelerated computing instances",
  https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html, lists the GPU of each family);
* a CUDA build runs only on the GPU architectures it supports ("CUDA Toolkit Release Notes",
  https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/: CUDA 13.0 drops Maxwell, Pascal and Volta, e.g. the
  V100 of ml.p3) -- :func:`gpu_constructs.catalog.cuda_support_problem`.

Where the workload is known to be GPU (no guessing otherwise):

* ``AWS::SageMaker::EndpointConfig``: a production variant whose model (``ModelName`` by ``Ref``/``Fn::GetAtt``
  to an ``AWS::SageMaker::Model`` of the same template) has a container image whose tag marks a GPU build: a
  ``-gpu-`` part or a CUDA part ``cuXYZ`` (the AWS DLC tag scheme ``<version>-gpu-<py>-cu124-<os>``). The CUDA
  version of the tag is checked against the variant's GPU. A variant with ``InstancePools`` (fallback types,
  "Deploy to multiple instance types with instance pools",
  https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-heterogeneous.html) may run on any of them,
  so each pool's type is checked, against the images of its ``ModelNameOverride`` model when it names one of
  the template, else of the variant's model.
* ``AWS::EC2::LaunchTemplate`` and the instance-type overrides of an ``AWS::AutoScaling::AutoScalingGroup``
  using it: the ``ImageId`` is the DLAMI public SSM parameter of a GPU flavour
  (``/aws/service/deeplearning/ami/<arch>/...-nvidia-driver-gpu-...``, "AWS Deep Learning AMIs: finding the AMI
  ID with SSM", https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html), resolved through a
  ``{{resolve:ssm:...}}`` value or an ``AWS::SSM::Parameter::Value<...>`` template parameter.

Findings (one each): ``<where>:<type>:no-NVIDIA-GPU`` and ``<where>:<type>:CUDA-<version>``, where ``<where>`` is
the variant name, ``LaunchTemplate`` or ``Override<i>``. Types outside the catalog, images and types held in
parameters, and launch templates with a pinned AMI id are not applicable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gpu_constructs import catalog
from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, flatten, literal, ref_id, rule

_GPU_TAG = re.compile(r"(?:^|[-_.])(?:gpu|cu(?P<cuda>\d{2,3}))(?=$|[-_.])")
_DLAMI_GPU = re.compile(r"^/aws/service/deeplearning/ami/[^/]+/[^/]*(?:nvidia|gpu)[^/]*/")
_RESOLVE_SSM = re.compile(r"\{\{resolve:ssm:([^:}]+)")


def _tag(image: str) -> str | None:
    """The tag of an image URI (``None`` for a digest or no tag)."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last or ":" not in last:
        return None
    return last.split(":", 1)[1]


def gpu_image_cuda(image: str) -> tuple[bool, str | None]:
    """(is a GPU image tag, its CUDA version like ``12.4`` or None) for an image URI."""
    tag = _tag(image)
    if not tag:
        return False, None
    is_gpu, cuda = False, None
    for match in _GPU_TAG.finditer(tag):
        is_gpu = True
        if match.group("cuda"):
            digits = match.group("cuda")
            cuda = f"{digits[:-1]}.{digits[-1]}"
    return is_gpu, cuda


def _problems(where: str, instance_type: Any, cuda: str | None) -> list[str] | None:
    """Findings for one instance type, or None when the type cannot be read or is not in the catalog."""
    name = literal(instance_type)
    if name is None:
        return None
    try:
        it = catalog.lookup(name)
    except ValueError:
        return None
    if not it.has_nvidia_gpu:
        return [f"{where}:{name}:no-NVIDIA-GPU"]
    if cuda is not None and catalog.cuda_support_problem(it, cuda) is not None:
        return [f"{where}:{name}:CUDA-{cuda}"]
    return []


def _verdict(found: Iterable[list[str] | None]) -> Result:
    """The findings of every instance type that could be read (:func:`_problems`); NOT_APPLICABLE when none."""
    readable = [problems for problems in found if problems is not None]
    return [finding for problems in readable for finding in problems] if readable else NOT_APPLICABLE


def _with_instance_type(items: list[Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``(index, item)`` of the items (variants, overrides) that name an ``InstanceType``."""
    return ((i, item) for i, item in enumerate(items) if isinstance(item, Mapping) and "InstanceType" in item)


def _model_images(resource: Resource, model_name: Any) -> list[str]:
    model = resource.other(ref_id(model_name))
    if model is None or model.get("Type") != "AWS::SageMaker::Model":
        return []
    props = model.get("Properties") or {}
    containers = [props.get("PrimaryContainer"), *(props.get("Containers") or [])]
    return [flatten(c.get("Image")) for c in containers if isinstance(c, Mapping)]


def _endpoint_config(resource: Resource) -> Result:
    variants = resource.properties.get("ProductionVariants")
    if not isinstance(variants, list):
        return NOT_APPLICABLE
    return _verdict(
        _problems(_variant_name(i, variant), instance_type, cuda)
        for i, variant in enumerate(variants)
        if isinstance(variant, Mapping)
        for instance_type, model_name in _variant_types(variant)
        for cuda in _gpu_cuda_versions(resource, model_name)
    )


def _variant_types(variant: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """``(instance type, model name)`` of the variant's ``InstanceType`` and of each of its ``InstancePools``
    (a pool's ``ModelNameOverride``, else the variant's ``ModelName``)."""
    model = variant.get("ModelName")
    found = [(variant["InstanceType"], model)] if "InstanceType" in variant else []
    pools = variant.get("InstancePools")
    if isinstance(pools, list):
        found += [(p["InstanceType"], p.get("ModelNameOverride", model)) for _, p in _with_instance_type(pools)]
    return found


def _variant_name(index: int, variant: Mapping[str, Any]) -> str:
    name = variant.get("VariantName")
    return name if isinstance(name, str) else f"variant{index}"


def _gpu_cuda_versions(resource: Resource, model_name: Any) -> list[str | None]:
    """The CUDA version (None when the tag does not say) of each GPU image of the model ``model_name`` names."""
    images = [gpu_image_cuda(image) for image in _model_images(resource, model_name)]
    return [cuda for is_gpu, cuda in images if is_gpu]


def _ssm_path(resource: Resource, image_id: Any) -> str | None:
    if isinstance(image_id, str):
        match = _RESOLVE_SSM.search(image_id)
        return match.group(1) if match else None
    if isinstance(image_id, Mapping) and isinstance(image_id.get("Ref"), str):
        parameter = (resource.template.get("Parameters") or {}).get(image_id["Ref"])
        if isinstance(parameter, Mapping) and str(parameter.get("Type", "")).startswith("AWS::SSM::Parameter::Value"):
            default = parameter.get("Default")
            return default if isinstance(default, str) else None
    return None


def _gpu_launch_template(resource: Resource, template: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The launch template data when its image is a GPU DLAMI SSM parameter, else None."""
    if template is None or template.get("Type") != "AWS::EC2::LaunchTemplate":
        return None
    data = (template.get("Properties") or {}).get("LaunchTemplateData")
    if not isinstance(data, Mapping):
        return None
    path = _ssm_path(resource, data.get("ImageId"))
    return data if path and _DLAMI_GPU.match(path) else None


def _launch_template(resource: Resource) -> Result:
    data = _gpu_launch_template(resource, resource.definition)
    if data is None or "InstanceType" not in data:
        return NOT_APPLICABLE
    return _verdict([_problems("LaunchTemplate", data["InstanceType"], None)])


def _auto_scaling_group(resource: Resource) -> Result:
    policy = resource.properties.get("MixedInstancesPolicy")
    if not isinstance(policy, Mapping):
        return NOT_APPLICABLE
    launch = policy.get("LaunchTemplate") or {}
    spec = launch.get("LaunchTemplateSpecification") or {}
    data = _gpu_launch_template(resource, resource.other(ref_id(spec.get("LaunchTemplateId"))))
    overrides = launch.get("Overrides")
    if data is None or not isinstance(overrides, list):
        return NOT_APPLICABLE
    return _verdict(_problems(f"Override{i}", o["InstanceType"], None) for i, o in _with_instance_type(overrides))


_CHECKS = {
    "AWS::SageMaker::EndpointConfig": _endpoint_config,
    "AWS::EC2::LaunchTemplate": _launch_template,
    "AWS::AutoScaling::AutoScalingGroup": _auto_scaling_group,
}


@rule(
    id="GpuWorkloadInstanceType",
    resource_types=tuple(_CHECKS),
    info="A GPU image or GPU Deep Learning AMI runs on an instance type without an NVIDIA GPU, or on a GPU whose "
    "architecture the image's CUDA version cannot drive. Pick an NVIDIA GPU type the CUDA version supports.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    return _CHECKS[resource.type](resource)
