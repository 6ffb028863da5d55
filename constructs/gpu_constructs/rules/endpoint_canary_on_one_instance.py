"""Canary or linear traffic shifting cannot run on a variant of one instance.

A blue/green deployment with ``CANARY`` or ``LINEAR`` traffic routing turns on part of the new (green) fleet
first, and that part is bounded by the variant's instance count. botocore 1.44.5, service ``sagemaker``, shape
``TrafficRoutingConfig``: ``CanarySize`` "Batch size for the first step to turn on traffic on the new endpoint
fleet. ``Value`` must be less than or equal to 50% of the variant's total instance count."; ``LinearStepSize``
"Batch size for each step to turn on traffic on the new endpoint fleet. ``Value`` must be 10-50% of the
variant's total instance count." (shape ``CapacitySize``: ``Type`` ``INSTANCE_COUNT`` or ``CAPACITY_PERCENT``;
``CapacitySizeValue`` is an integer >= 1). The Amazon SageMaker AI Developer Guide says the same: "Note that the
canary size should be less than or equal to 50% of the new fleet's capacity" ("Use canary traffic shifting",
https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-blue-green-canary.html) and "Each linear
step should only be between 10-50% of the green fleet's capacity" ("Use linear traffic shifting",
https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-blue-green-linear.html). With one
instance no step of at least one instance is at most 50 % of the fleet, so the blue/green update that should
roll out a new model cannot be carried out. Use ``ALL_AT_ONCE`` for a single instance, or two or more instances.

Non-compliant: an ``AWS::SageMaker::Endpoint`` whose ``DeploymentConfig.BlueGreenUpdatePolicy`` routes traffic
``CANARY`` or ``LINEAR`` and whose endpoint config (same template, by ``Ref``/``Fn::GetAtt``) has a production
variant with ``InitialInstanceCount`` 1 (one finding per variant, ``<VariantName>:InitialInstanceCount=1``).
Compliant: ``ALL_AT_ONCE`` (or no deployment config), or every instance-based variant with 2 or more instances.
An endpoint config from a parameter or another stack, or a count that is not a literal, is not applicable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_constructs.rules._rule import COMPLIANT, NOT_APPLICABLE, Resource, Result, ref_id, rule

SHIFTING_TYPES = frozenset({"CANARY", "LINEAR"})


def _routing_type(properties: Mapping[str, Any]) -> str | None:
    deployment = properties.get("DeploymentConfig")
    if not isinstance(deployment, Mapping):
        return None
    policy = deployment.get("BlueGreenUpdatePolicy")
    if not isinstance(policy, Mapping):
        return None
    routing = policy.get("TrafficRoutingConfiguration")
    if not isinstance(routing, Mapping):
        return None
    value = routing.get("Type")
    return value if isinstance(value, str) else None


@rule(
    id="EndpointCanaryOnOneInstance",
    resource_types=("AWS::SageMaker::Endpoint",),
    info="Canary/linear traffic shifting on a variant of one instance: a step must be at most 50 % of the "
    "variant's instances, so every update of the endpoint fails. Use ALL_AT_ONCE or 2+ instances.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    routing = _routing_type(resource.properties)
    if routing not in SHIFTING_TYPES:
        return NOT_APPLICABLE if routing is None else COMPLIANT
    config = resource.other(ref_id(resource.properties.get("EndpointConfigName")))
    if config is None or config.get("Type") != "AWS::SageMaker::EndpointConfig":
        return NOT_APPLICABLE
    variants = (config.get("Properties") or {}).get("ProductionVariants")
    if not isinstance(variants, list):
        return NOT_APPLICABLE
    findings: list[str] = []
    for i, variant in enumerate(variants):
        if not isinstance(variant, Mapping):
            continue
        count = variant.get("InitialInstanceCount")
        if isinstance(count, int) and not isinstance(count, bool) and count == 1:
            name = variant.get("VariantName")
            findings.append(f"{name if isinstance(name, str) else f'variant{i}'}:InitialInstanceCount=1")
    return findings
