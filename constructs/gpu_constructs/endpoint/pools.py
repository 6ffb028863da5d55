"""Where an endpoint's instances come from: fallback instance pools and ML capacity reservations, without ``aws_cdk``.

**Instance pools.** ``ProductionVariant.InstancePools`` lists up to five instance types, each with a priority;
"SageMaker attempts to provision instances in order of priority, starting with the lowest value. If instances for
a higher-priority pool are unavailable, SageMaker attempts to provision from the next pool. Valid values: 1 to 5,
where 1 is the highest priority." (botocore sagemaker service model, ``InstancePool.Priority``; the list shape
``InstancePoolList`` has ``min`` 1 and ``max`` 5). The SageMaker Developer Guide, "Deploy to multiple instance
types with instance pools" (https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-heterogeneous.html):
"To use instance pools, you replace the ``InstanceType`` parameter in your production variant with an
``InstancePools`` list", "you can specify an ordered list of up to five instance types for a production
variant", and "Instance pools support both real-time and asynchronous inference endpoints". So a variant with
pools names no ``InstanceType``; the list's order is the priority (1..n); asynchronous endpoints may use pools.

The catalog checks the list with :func:`~gpu_constructs.catalog.fallback.check_fallback_chain` (usage
``hosting``): every type an NVIDIA GPU type SageMaker hosting accepts, the image's CUDA build able to drive each
GPU, at least the first choice's GPU memory per device, and an optional cost ceiling. The "world size" of an
endpoint is its **GPUs per instance**: every instance of the variant runs the same model server with the same
settings, and a model sharded over N GPUs needs N GPUs on whichever type SageMaker picks, so every pool must have
the first choice's GPU count (a 1-GPU model falling back to a 4-GPU type would also pay for 3 idle GPUs). Because
of that rule the endpoint's GPU-count-dependent settings (the GPU memory alarm summed over an instance's GPUs, the
GPU utilization scaling target, the dashboard) are exact on every pool, and GPU memory per device is never below
the first choice's, so a percentage threshold is conservative on a fallback.

**ML capacity reservations.** ``ProductionVariant.CapacityReservationConfig`` (botocore shape
``ProductionVariantCapacityReservationConfig``): ``CapacityReservationPreference`` whose only value is
``capacity-reservations-only`` ("SageMaker AI launches instances only into an ML capacity reservation. If no
capacity is available, the instances fail to launch.") and ``MlReservationArn`` (length 20-258, pattern
:data:`ML_RESERVATION_ARN_RE`). The SageMaker Developer Guide, "Deploy an inference endpoint using the API, AWS
CLI" (https://docs.aws.amazon.com/sagemaker/latest/dg/use-training-plan-for-inference-endpoints-using-api-cli-sdk.html):
"You can use exactly one plan per inference endpoint." and "The ``InstanceType`` field set in the
``ProductionVariants`` section of the ``CreateEndpointConfig`` request must match the ``InstanceType`` of your
training plan." A variant with instance pools has no ``InstanceType`` to match, so a reservation and pools
exclude each other. "Using training plans for SageMaker inference endpoints"
(https://docs.aws.amazon.com/sagemaker/latest/dg/training-plan-utilization-for-inference-endpoints.html): "When
the training plan reservation expires ... If you set this to ``capacity-reservations-only``, the endpoint stops
serving traffic and invocations fail with a capacity error."
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_constructs import catalog
from gpu_constructs.constants import SAGEMAKER_NAME_RE
from gpu_constructs.endpoint.base import SettingError, invalid
from gpu_constructs.errors import ValidationError, is_token

#: Most entries of ``ProductionVariant.InstancePools`` (botocore ``InstancePoolList``: min 1, max 5).
MAX_INSTANCE_POOLS = 5
#: ``InstancePool.Priority`` (botocore ``InstancePoolPriority``: min 1, max 5; 1 is tried first).
POOL_PRIORITY_RANGE = (1, 5)
#: The only ``CapacityReservationPreference`` (botocore enum ``CapacityReservationPreference``).
CAPACITY_RESERVATIONS_ONLY = "capacity-reservations-only"
#: ``MlReservationArn`` (botocore shape ``MlReservationArn``): the ARN of an ML reservation (a training plan with
#: target resource "endpoint").
ML_RESERVATION_ARN_RE = re.compile(r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:[a-z0-9\-]{1,14}/.*")
#: Length limits of ``MlReservationArn`` (botocore: min 20, max 258).
ML_RESERVATION_ARN_LENGTH = (20, 258)
#: Longest SageMaker model name (botocore ``ModelName``: max 63; its pattern is :data:`SAGEMAKER_NAME_RE`'s).
_MAX_MODEL_NAME = 63


@dataclass(frozen=True)
class InstancePool:
    """One entry of an endpoint's fallback list (``ProductionVariant.InstancePools``).

    A plain type name in ``GpuEndpoint(instance_pools=[...])`` is an ``InstancePool`` without an override.

    :param instance_type: SageMaker hosting type, e.g. ``ml.g6.xlarge`` (checked against the catalog).
    :param model_name_override: name of another SageMaker model to serve on this pool's instances, e.g. one
        compiled for its GPU (default: none, the endpoint's model). It is created and owned outside the endpoint;
        it is checked with the endpoint's image CUDA version like every pool.
    """

    instance_type: str
    model_name_override: str | None = None

    def validate(self, where: str, index: int) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` for a model name SageMaker refuses."""
        name = self.model_name_override
        if name is None or is_token(name):
            return
        if not SAGEMAKER_NAME_RE.match(name) or len(name) > _MAX_MODEL_NAME:
            raise invalid(
                where,
                f"instance_pools[{index}].model_name_override",
                name,
                "a SageMaker model name: 1-63 letters, digits and hyphens, starting and ending alphanumeric",
            )


def as_pools(where: str, pools: Sequence[str | InstancePool]) -> list[InstancePool]:
    """The entries of ``instance_pools`` as :class:`InstancePool` (a name becomes a pool without an override)."""
    if isinstance(pools, str) or not isinstance(pools, Sequence):
        raise invalid(where, "instance_pools", pools, "an ordered list of instance types, first choice first")
    out: list[InstancePool] = []
    for i, pool in enumerate(pools):
        if isinstance(pool, str):
            out.append(InstancePool(pool))
        elif isinstance(pool, InstancePool):
            out.append(pool)
        else:
            raise invalid(where, f"instance_pools[{i}]", pool, "an instance type name or an InstancePool")
    return out


def check_instance_pools(
    where: str,
    pools: Sequence[InstancePool],
    *,
    cuda_version: str | None = None,
    max_cost_ratio: float | None = None,
    region: str = "us-east-1",
) -> list[catalog.InstanceType]:
    """The catalog entries of ``pools`` (first choice first) when SageMaker and the catalog accept the list.

    Raises a :class:`~gpu_constructs.endpoint.base.SettingError` of ``instance_pools`` for: no entry or more than
    :data:`MAX_INSTANCE_POOLS`; a type listed twice (two pools of one type would share a place in the priority
    order); a type that is not an NVIDIA GPU type for hosting; a GPU the image's CUDA (``cuda_version``, None:
    unknown) cannot drive; less GPU memory per device than the first choice; another GPU count per instance than
    the first choice (see the module docstring); an hourly price above ``max_cost_ratio`` x the first choice's
    (``region``'s prices; None: no ceiling); a model name override SageMaker refuses.
    """
    for i, pool in enumerate(pools):
        if is_token(pool.instance_type):
            raise invalid(
                where, f"instance_pools[{i}]", pool.instance_type, "a literal instance type name (checked at synth)"
            )
    if not 1 <= len(pools) <= MAX_INSTANCE_POOLS:
        raise invalid(
            where,
            "instance_pools",
            [p.instance_type for p in pools],
            f"1 to {MAX_INSTANCE_POOLS} instance types (SageMaker's InstancePools limit), first choice first",
        )
    from gpu_constructs.catalog.fallback import check_fallback_chain

    try:
        types = check_fallback_chain(
            [p.instance_type for p in pools],
            usage="hosting",
            where=where,
            param="instance_pools",
            default_count=1,
            cuda_version=cuda_version,
            keep_world_size=False,  # the endpoint's own rule, GPUs per instance, below
            max_cost_ratio=max_cost_ratio,
            region=region,
            max_entries=MAX_INSTANCE_POOLS,
        )
    except ValidationError as error:
        raise SettingError(where, "instance_pools", error.detail) from None
    _check_gpu_count(where, types)
    for i, pool in enumerate(pools):
        pool.validate(where, i)
    return types


def _check_gpu_count(where: str, types: Sequence[catalog.InstanceType]) -> None:
    """Every pool has the first choice's GPUs per instance (the endpoint's world size, see the module docstring)."""
    first = types[0]
    for i, it in enumerate(types[1:], start=1):
        if it.nvidia_gpu_count != first.nvidia_gpu_count:
            raise invalid(
                where,
                f"instance_pools[{i}]",
                it.sagemaker_name,
                f"a type with {first.nvidia_gpu_count} GPU(s) per instance like the first choice "
                f"{first.sagemaker_name!r} (it has {it.nvidia_gpu_count}): every instance runs the same model server, "
                "so a model sharded over the first choice's GPUs needs as many on every pool, and the GPU alarms and "
                "scaling target are per instance",
                name=f"instance_pools[{i}] (GPUs per instance)",
            )


def check_capacity_reservation(where: str, arn: str, *, instance_pools: bool) -> None:
    """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` of ``capacity_reservation_arn`` for an ARN that
    botocore's ``MlReservationArn`` refuses, or a reservation on a variant with instance pools (see the module
    docstring: the reservation's instance type must match the variant's ``InstanceType``, which pools replace)."""
    if instance_pools:
        raise invalid(
            where,
            "capacity_reservation_arn",
            arn,
            "no reservation with instance_pools: SageMaker matches an ML reservation to the variant's one "
            "InstanceType, which instance pools replace; use instance_type (the reservation's type) instead",
        )
    if is_token(arn):
        return
    low, high = ML_RESERVATION_ARN_LENGTH
    if not isinstance(arn, str) or not low <= len(arn) <= high or not ML_RESERVATION_ARN_RE.fullmatch(arn):
        raise invalid(
            where,
            "capacity_reservation_arn",
            arn,
            f"an ML reservation ARN of {low}-{high} characters, "
            "arn:aws:sagemaker:<region>:<account>:training-plan/<name>",
        )
