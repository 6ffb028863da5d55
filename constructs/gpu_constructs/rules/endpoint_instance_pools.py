"""A production variant's ``InstancePools`` must be a list SageMaker takes and can order: 1-5 pools, priorities 1-5,
each priority and each instance type once, no ``InstanceType`` beside them, GPU pools only beside GPU pools.

What AWS says:

* botocore sagemaker service model (1.44.8): ``ProductionVariant.InstancePools`` is an ``InstancePoolList`` with
  ``min`` 1 and ``max`` 5; ``InstancePool.Priority`` (``InstancePoolPriority``, min 1, max 5): "SageMaker attempts
  to provision instances in order of priority, starting with the lowest value. If instances for a
  higher-priority pool are unavailable, SageMaker attempts to provision from the next pool. Valid values: 1 to 5,
  where 1 is the highest priority." Two pools with one priority (or one type listed twice) leave that order
  undefined: which type SageMaker tries first is no longer what the template says.
* SageMaker Developer Guide, "Deploy to multiple instance types with instance pools"
  (https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-heterogeneous.html): "To use instance
  pools, you replace the ``InstanceType`` parameter in your production variant with an ``InstancePools`` list.
  Each entry specifies an instance type and a priority (1 to 5, where 1 is the highest)." and "you can specify
  an ordered list of up to five instance types for a production variant".
* botocore ``ProductionVariant.ServerlessConfig``: "Specifies a serverless endpoint configuration instead of an
  instance-based endpoint configuration." Instance pools are instance-based, so they do not go with it.
* A variant serves one model on whichever pool SageMaker picks ("Use instance pools to configure heterogeneous
  endpoints that deploy models across multiple instance types", botocore ``ProductionVariant.InstancePools``): a
  pool without an NVIDIA GPU (platform catalog) beside pools with one runs a GPU model on a CPU, or an
  Inferentia/Trainium type that needs another build, whenever the GPU pools have no capacity.

Findings on ``AWS::SageMaker::EndpointConfig`` (one each, ``<variant>`` the variant name):
``<variant>:count-<n>`` (not 1-5 pools), ``<variant>:priority-<p>`` (a literal priority outside 1-5),
``<variant>:duplicate-priority-<p>``, ``<variant>:duplicate-type-<type>``, ``<variant>:InstanceType-and-
InstancePools``, ``<variant>:ServerlessConfig-and-InstancePools`` and ``<variant>:<type>:no-NVIDIA-GPU`` (a pool
without an NVIDIA GPU when another pool has one). Variants without ``InstancePools`` are not applicable; values
held in parameters or intrinsics are not judged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from gpu_constructs import catalog
from gpu_constructs.endpoint.pools import MAX_INSTANCE_POOLS, POOL_PRIORITY_RANGE
from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, literal, rule


def _variant_name(index: int, variant: Mapping[str, Any]) -> str:
    name = variant.get("VariantName")
    return name if isinstance(name, str) else f"variant{index}"


def _has_nvidia_gpu(name: str) -> bool | None:
    """True/False from the catalog; None for a type the catalog does not know."""
    try:
        return catalog.lookup(name).has_nvidia_gpu
    except ValueError:
        return None


def _priorities(where: str, pools: list[Mapping[str, Any]]) -> list[str]:
    low, high = POOL_PRIORITY_RANGE
    found: list[str] = []
    values = [p.get("Priority") for p in pools]
    numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    found += [f"{where}:priority-{v}" for v in numbers if not low <= v <= high]
    found += [f"{where}:duplicate-priority-{v}" for v, n in Counter(numbers).items() if n > 1]
    return found


def _types(where: str, pools: list[Mapping[str, Any]]) -> list[str]:
    names = [n for n in (literal(p.get("InstanceType")) for p in pools) if isinstance(n, str)]
    found = [f"{where}:duplicate-type-{n}" for n, count in Counter(names).items() if count > 1]
    gpu = {n: _has_nvidia_gpu(n) for n in names}
    if any(gpu.values()):
        found += [f"{where}:{n}:no-NVIDIA-GPU" for n, has in gpu.items() if has is False]
    return found


def _variant(where: str, variant: Mapping[str, Any]) -> list[str] | None:
    pools = variant.get("InstancePools")
    if pools is None:
        return None
    if not isinstance(pools, list):
        return []  # an intrinsic: nothing literal to count
    found: list[str] = []
    if not 1 <= len(pools) <= MAX_INSTANCE_POOLS:
        found.append(f"{where}:count-{len(pools)}")
    if variant.get("InstanceType") is not None:
        found.append(f"{where}:InstanceType-and-InstancePools")
    if variant.get("ServerlessConfig") is not None:
        found.append(f"{where}:ServerlessConfig-and-InstancePools")
    entries = [p for p in pools if isinstance(p, Mapping)]
    return found + _priorities(where, entries) + _types(where, entries)


@rule(
    id="EndpointInstancePools",
    resource_types=("AWS::SageMaker::EndpointConfig",),
    info="A production variant's InstancePools is not a list SageMaker can order: 1-5 pools with priorities 1-5, "
    "each priority and instance type once, in place of InstanceType (and not with ServerlessConfig), and NVIDIA "
    "GPU types only when any pool has one.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    variants = resource.properties.get("ProductionVariants")
    if not isinstance(variants, list):
        return NOT_APPLICABLE
    results = [_variant(_variant_name(i, v), v) for i, v in enumerate(variants) if isinstance(v, Mapping)]
    readable = [r for r in results if r is not None]
    return [finding for r in readable for finding in r] if readable else NOT_APPLICABLE
