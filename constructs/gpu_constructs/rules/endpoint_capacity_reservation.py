"""A production variant's ``CapacityReservationConfig`` must name an ML reservation SageMaker can match to the
variant's one ``InstanceType``.

What AWS says:

* botocore sagemaker service model (1.44.8), shape ``ProductionVariantCapacityReservationConfig``:
  ``CapacityReservationPreference`` has the one value ``capacity-reservations-only`` ("SageMaker AI launches
  instances only into an ML capacity reservation. If no capacity is available, the instances fail to launch.");
  ``MlReservationArn`` is 20-258 characters matching
  ``arn:aws[a-z\\-]*:sagemaker:[a-z0-9\\-]*:[0-9]{12}:[a-z0-9\\-]{1,14}/.*``.
* SageMaker Developer Guide, "Deploy an inference endpoint using the API, AWS CLI"
  (https://docs.aws.amazon.com/sagemaker/latest/dg/use-training-plan-for-inference-endpoints-using-api-cli-sdk.html):
  "To use SageMaker training plans on a SageMaker inference endpoint, specify the ``MlReservationArn`` parameter
  with the desired training plan resource ARN in the ``CapacityReservationConfig`` ... You can use exactly one plan
  per inference endpoint." and "The ``InstanceType`` field set in the ``ProductionVariants`` section of the
  ``CreateEndpointConfig`` request must match the ``InstanceType`` of your training plan."
* "Deploy to multiple instance types with instance pools"
  (https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-heterogeneous.html): "To use instance pools,
  you replace the ``InstanceType`` parameter in your production variant with an ``InstancePools`` list." A variant
  with pools has no ``InstanceType`` for the reservation to match.

Findings on ``AWS::SageMaker::EndpointConfig`` (one each, ``<variant>`` the variant name):
``<variant>:no-MlReservationArn`` (a reservation config that names no reservation),
``<variant>:MlReservationArn-format`` (a literal ARN the botocore shape refuses), ``<variant>:preference-<value>``
(a literal preference other than ``capacity-reservations-only``), ``<variant>:with-InstancePools``,
``<variant>:reservations-in-two-variants`` (a second variant with another reservation: one plan per endpoint).
Variants without ``CapacityReservationConfig`` are not applicable; values in parameters or intrinsics are not
judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_constructs.endpoint.pools import CAPACITY_RESERVATIONS_ONLY, ML_RESERVATION_ARN_LENGTH, ML_RESERVATION_ARN_RE
from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, flatten, rule


def _variant_name(index: int, variant: Mapping[str, Any]) -> str:
    name = variant.get("VariantName")
    return name if isinstance(name, str) else f"variant{index}"


def _arn(where: str, arn: Any) -> list[str]:
    if arn is None:
        return [f"{where}:no-MlReservationArn"]
    if not isinstance(arn, str):
        return []  # a parameter, an import or another intrinsic
    low, high = ML_RESERVATION_ARN_LENGTH
    return (
        [] if low <= len(arn) <= high and ML_RESERVATION_ARN_RE.fullmatch(arn) else [f"{where}:MlReservationArn-format"]
    )


def _variant(where: str, variant: Mapping[str, Any]) -> list[str] | None:
    config = variant.get("CapacityReservationConfig")
    if config is None:
        return None
    if not isinstance(config, Mapping):
        return []
    found = _arn(where, config.get("MlReservationArn"))
    preference = config.get("CapacityReservationPreference")
    if isinstance(preference, str) and preference != CAPACITY_RESERVATIONS_ONLY:
        found.append(f"{where}:preference-{preference}")
    if variant.get("InstancePools") is not None:
        found.append(f"{where}:with-InstancePools")
    return found


def _reservations(variants: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(variant name, reservation)`` of each variant with a reservation (its ARN flattened to text)."""
    out: list[tuple[str, str]] = []
    for i, variant in enumerate(variants):
        config = variant.get("CapacityReservationConfig")
        if isinstance(config, Mapping) and config.get("MlReservationArn") is not None:
            out.append((_variant_name(i, variant), flatten(config.get("MlReservationArn"))))
    return out


@rule(
    id="EndpointCapacityReservation",
    resource_types=("AWS::SageMaker::EndpointConfig",),
    info="A production variant's CapacityReservationConfig names no ML reservation (or one in a form SageMaker "
    "refuses), has a preference other than capacity-reservations-only, goes with InstancePools (the reservation "
    "matches the variant's one InstanceType), or is a second plan on the endpoint.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    variants = resource.properties.get("ProductionVariants")
    if not isinstance(variants, list):
        return NOT_APPLICABLE
    entries = [v for v in variants if isinstance(v, Mapping)]
    results = [_variant(_variant_name(i, v), v) for i, v in enumerate(entries)]
    readable = [r for r in results if r is not None]
    if not readable:
        return NOT_APPLICABLE
    found = [finding for r in readable for finding in r]
    reserved = _reservations(entries)
    if len({arn for _, arn in reserved}) > 1:
        found += [f"{name}:reservations-in-two-variants" for name, _ in reserved[1:]]
    return found
