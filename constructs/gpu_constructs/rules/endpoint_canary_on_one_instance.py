"""A canary or linear traffic-shifting step must be at most 50 % of the variant's instances (so never on one instance).

A blue/green deployment with ``CANARY`` or ``LINEAR`` traffic routing turns on part of the new (green) fleet
first, and that part is bounded by the variant's instance count. botocore 1.44.8, service ``sagemaker``, shape
``TrafficRoutingConfig``: ``CanarySize`` "Batch size for the first step to turn on traffic on the new endpoint
fleet. ``Value`` must be less than or equal to 50% of the variant's total instance count."; ``LinearStepSize``
"Batch size for each step to turn on traffic on the new endpoint fleet. ``Value`` must be 10-50% of the
variant's total instance count." (shape ``CapacitySize``: ``Type`` ``INSTANCE_COUNT`` "The endpoint activates
based on the number of instances." or ``CAPACITY_PERCENT`` "The endpoint activates based on the specified
percentage of capacity."; ``CapacitySizeValue`` is an integer >= 1 and nothing else in the model bounds it, so no
schema check catches a step that is too large). The Amazon SageMaker AI Developer Guide says the same: "Note that
the canary size should be less than or equal to 50% of the new fleet's capacity" ("Use canary traffic shifting",
https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-blue-green-canary.html) and "Each linear
step should only be between 10-50% of the green fleet's capacity" ("Use linear traffic shifting",
https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-blue-green-linear.html). With one
instance no step of at least one instance is at most 50 % of the fleet, so the blue/green update that should
roll out a new model cannot be carried out. Use ``ALL_AT_ONCE`` for a single instance, or two or more instances.

Reads an ``AWS::SageMaker::Endpoint`` whose ``DeploymentConfig.BlueGreenUpdatePolicy.TrafficRoutingConfiguration``
routes traffic ``CANARY`` (step: ``CanarySize``) or ``LINEAR`` (step: ``LinearStepSize``), and the production
variants of its endpoint config (same template, by ``Ref``/``Fn::GetAtt``). Findings:

* ``<VariantName>:InitialInstanceCount=1``: a variant of one instance (every step is more than 50 % of it);
* ``<VariantName>:<step>=<n>-of-<count>-instances``: an ``INSTANCE_COUNT`` step above 50 % of the variant's
  ``InitialInstanceCount`` (for ``LinearStepSize`` also below 10 %);
* ``<step>=<n>%``: a ``CAPACITY_PERCENT`` step above 50 (for ``LinearStepSize`` also below 10), whatever the
  variants.

Compliant: ``ALL_AT_ONCE`` (or no deployment config), or steps within the bounds on variants of 2 or more
instances. An endpoint config from a parameter or another stack, and a count or step that is not a literal, are
not judged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpu_constructs.rules._rule import COMPLIANT, NOT_APPLICABLE, Resource, Result, ref_id, rule

SHIFTING_TYPES = frozenset({"CANARY", "LINEAR"})
#: The step of each routing type, with its documented bounds in percent of the variant's instances.
STEP_FIELDS = {"CANARY": ("CanarySize", 0, 50), "LINEAR": ("LinearStepSize", 10, 50)}


def _routing(properties: Mapping[str, Any]) -> Mapping[str, Any] | None:
    deployment = properties.get("DeploymentConfig")
    if not isinstance(deployment, Mapping):
        return None
    policy = deployment.get("BlueGreenUpdatePolicy")
    if not isinstance(policy, Mapping):
        return None
    routing = policy.get("TrafficRoutingConfiguration")
    return routing if isinstance(routing, Mapping) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _variants(resource: Resource) -> list[Any] | None:
    config = resource.other(ref_id(resource.properties.get("EndpointConfigName")))
    if config is None or config.get("Type") != "AWS::SageMaker::EndpointConfig":
        return None
    variants = (config.get("Properties") or {}).get("ProductionVariants")
    return variants if isinstance(variants, list) else None


def _variant_findings(
    variants: list[Any], field: str, step: tuple[str, int] | None, low: int, high: int
) -> Iterator[str]:
    for i, variant in enumerate(variants):
        if not isinstance(variant, Mapping):
            continue
        count = _int(variant.get("InitialInstanceCount"))
        if count is None:
            continue
        name = variant.get("VariantName")
        where = name if isinstance(name, str) else f"variant{i}"
        if count == 1:
            yield f"{where}:InitialInstanceCount=1"
        elif step is not None and step[0] == "INSTANCE_COUNT":
            value = step[1]
            if value * 100 > count * high or value * 100 < count * low:
                yield f"{where}:{field}={value}-of-{count}-instances"


@rule(
    id="EndpointCanaryOnOneInstance",
    resource_types=("AWS::SageMaker::Endpoint",),
    info="A canary/linear traffic-shifting step is more than 50 % of the variant's instances (a linear step also "
    "less than 10 %), or the variant has one instance: every update of the endpoint fails. Use a smaller step, "
    "ALL_AT_ONCE or 2+ instances.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    routing = _routing(resource.properties)
    if routing is None or not isinstance(routing.get("Type"), str):
        return NOT_APPLICABLE
    if routing["Type"] not in SHIFTING_TYPES:
        return COMPLIANT
    field, low, high = STEP_FIELDS[routing["Type"]]
    size = routing.get(field)
    step: tuple[str, int] | None = None
    if isinstance(size, Mapping) and isinstance(size.get("Type"), str) and _int(size.get("Value")) is not None:
        step = (size["Type"], size["Value"])
    findings: list[str] = []
    if step is not None and step[0] == "CAPACITY_PERCENT" and not low <= step[1] <= high:
        findings.append(f"{field}={step[1]}%")
    variants = _variants(resource)
    if variants is None:
        return findings or NOT_APPLICABLE
    findings += _variant_findings(variants, field, step, low, high)
    return findings
