"""The platform's own rule pack: AWS behaviour that the generic gates (cdk-nag's packs, cfn-lint, checkov) do not model.

Each rule lives in one module of this package, with a docstring that cites the AWS document or botocore
service-model text it encodes, and is tested with a compliant and a non-compliant template. Rules read only
synthesized templates, so the pack works on any CDK app::

    from gpu_constructs.rules import GpuPlatformChecks
    cdk.Validations.of(app).add_plugins(GpuPlatformChecks())

Findings are acknowledged like any cdk-nag finding, one id at a time on one L1 resource:
``GpuPlatform::GpuPlatform-<RuleId>`` (plus ``[finding]`` for rules that report granular findings).

Without the CDK: :func:`check_template` runs every rule on a template dict (a test, a pre-commit hook, a
template from another tool).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from gpu_constructs.lazy import lazy_exports
from gpu_constructs.rules._rule import Compliance, Resource, Rule, StackView

if TYPE_CHECKING:
    from gpu_constructs.rules.pack import GpuPlatformChecks

PACK_NAME = "GpuPlatform"

#: The rule modules, one rule each (the order is the order of the documentation).
RULE_MODULES: tuple[str, ...] = (
    "retained_named_resource",
    "oidc_provider_once_per_account",
    "dlc_torchserve_batching",
    "endpoint_kms_key_id_format",
    "endpoint_canary_on_one_instance",
    "endpoint_instance_pools",
    "endpoint_capacity_reservation",
    "gpu_workload_instance_type",
    "fleet_capacity_block_market_type",
    "topic_admits_publishers",
    "service_principal_source_condition",
    "alarm_one_metrics_insights_query",
    "event_rule_lambda_target_permitted",
    "training_spot_without_checkpoint",
    "training_max_wait_below_max_runtime",
    "training_volume_kms_on_instance_storage",
    "training_hyperparameter_not_string",
    "training_instance_not_nvidia_gpu",
    "training_image_cuda_architecture",
    "training_dlc_without_code",
    "instance_preferences_exclusive",
    "instance_preferences_shape",
    "sagemaker_job_role_authorized",
)


@cache
def all_rules() -> tuple[Rule, ...]:
    """Every rule of the pack, loaded from :data:`RULE_MODULES`."""
    found: list[Rule] = []
    for name in RULE_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        rules = [v for v in vars(module).values() if isinstance(v, Rule)]
        if len(rules) != 1:
            raise RuntimeError(f"{module.__name__} must define exactly one rule, found {len(rules)}")
        found.append(rules[0])
    ids = [r.id for r in found]
    if len(ids) != len(set(ids)):
        raise RuntimeError(f"duplicate rule ids in {ids}")
    return tuple(found)


def finding_id(rule_id: str, finding: str | None = None) -> str:
    """The acknowledgment id of a finding: ``GpuPlatform::GpuPlatform-<rule>[<finding>]``."""
    suffix = f"[{finding}]" if finding else ""
    return f"{PACK_NAME}::{PACK_NAME}-{rule_id}{suffix}"


@dataclass(frozen=True)
class Finding:
    """One non-compliance found by :func:`check_template`."""

    rule: str
    logical_id: str
    finding: str | None
    info: str

    @property
    def id(self) -> str:
        return finding_id(self.rule, self.finding)

    def __str__(self) -> str:
        return f"{self.logical_id}: {self.id}: {self.info}"


def evaluate(resource: Resource, rules: Iterable[Rule] | None = None) -> list[Finding]:
    """Every finding of ``rules`` (default: all) on one resource."""
    found: list[Finding] = []
    for r in all_rules() if rules is None else rules:
        if not r.applies_to(resource.type):
            continue
        result = r.evaluate(resource)
        if result is Compliance.NON_COMPLIANT:
            found.append(Finding(r.id, resource.logical_id, None, r.info))
        elif isinstance(result, list):
            found += [Finding(r.id, resource.logical_id, f, r.info) for f in result]
    return found


def check_template(
    template: Mapping[str, Any],
    *,
    stack_name: str = "Stack",
    account: str | None = None,
    region: str | None = None,
    assembly: Sequence[StackView] = (),
    rules: Iterable[str] | None = None,
) -> list[Finding]:
    """Run the pack (or the rules named in ``rules``) on one template dict; return every finding."""
    stack = StackView(name=stack_name, account=account, region=region, template=template)
    selected = [r for r in all_rules() if rules is None or r.id in set(rules)]
    views = tuple(assembly) or (stack,)
    found: list[Finding] = []
    for logical_id, definition in (template.get("Resources") or {}).items():
        found += evaluate(Resource(logical_id, definition, stack, views), selected)
    return found


#: Loaded on first use (:func:`~gpu_constructs.lazy.lazy_exports`): the pack imports cdk-nag, the rules do not.
_EXPORTS: dict[str, str] = {"GpuPlatformChecks": "gpu_constructs.rules.pack"}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

#: The documented API (README, "Platform rules"): the pack for a CDK app, :func:`check_template` without the CDK,
#: and the :class:`Finding` it returns. The rest (``Rule``, ``StackView``, :func:`evaluate`, ...) is for the rule
#: modules and their tests, importable but not advertised.
__all__ = ["Finding", "GpuPlatformChecks", "check_template"]
