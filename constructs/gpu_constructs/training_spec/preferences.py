"""Fallback lists of a training job: ``ResourceConfig.InstancePreferences`` and training plans.

botocore 1.44.8 (``sagemaker/2017-07-24/service-2.json``) models them so:

* ``ResourceConfig.InstancePreferences`` (shape ``InstancePreferenceList``, ``min: 1``, ``max: 5``): "An ordered list
  of ML compute instance types for the training job, in priority order. SageMaker launches the training job on the
  first instance type in the list that has available capacity. If capacity is insufficient, SageMaker evaluates the
  next instance type in the preferred list. Exactly one instance type is selected for the job." and
  "``InstancePreferences`` is mutually exclusive with ``InstanceType``, ``InstanceGroups``,
  ``InstancePlacementConfig``, and ``EnableManagedSpotTraining``, and supports only Flexible Training Plans (FTP) and
  On-Demand capacity."
* ``InstancePreference.InstanceType`` (required): "An instance type can appear only once in an
  ``InstancePreferences`` list."
* ``InstancePreference.InstanceCount``: "Set ``InstanceCount`` on every preference in the ``InstancePreferences``
  list and don't set ``ResourceConfig$InstanceCount`` [...] or [...] Set ``ResourceConfig$InstanceCount`` and omit it
  from every preference [...] SageMaker rejects requests that set ``InstanceCount`` on only some preferences, that
  set it both per preference and in ``ResourceConfig``, or that omit it in both places."
* ``InstancePreference.TrainingPlanArns`` (``TrainingPlanArnList``, ``min: 1``, ``max: 1``): "The plan's instance
  type must match ``InstanceType`` [...] Per-preference ``TrainingPlanArns`` is mutually exclusive with the job-level
  ``TrainingPlanArn`` in ``ResourceConfig``."
* ``ResourceConfig.SelectedInstanceType`` / ``SelectedInstanceCount``: what ``DescribeTrainingJob`` returns "after
  an instance type is selected"; read-only.

:class:`InstancePreference` is one entry; :func:`preference_problems` lists what SageMaker would reject (and what
the platform refuses on top: the storage kind, because ``VolumeKmsKeyId`` is one value for the job);
:func:`render_preferences` writes the ``ResourceConfig`` members. Whether a fallback is *compatible* with the first
choice (GPU memory, world size, cost) is the catalog's :func:`~gpu_constructs.catalog.fallback.check_fallback_chain`,
which the construct and the config apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpu_constructs.errors import ValidationError

__all__ = [
    "MAX_PREFERENCES",
    "PREFERENCES_WITH_SPOT",
    "TRAINING_PLAN_ALLOWED",
    "TRAINING_PLAN_ARN_RE",
    "InstancePreference",
    "as_preference",
    "placement",
    "placement_text",
    "preference_problems",
    "render_preferences",
]

#: ``InstancePreferenceList``: ``min: 1``, ``max: 5`` (botocore 1.44.8, sagemaker).
MAX_PREFERENCES = 5
#: A training plan ARN (botocore 1.44.8, sagemaker, shape ``TrainingPlanArn``: ``min: 50``, ``max: 2048``, ``pattern:
#: arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.*``); the config checks it with this.
TRAINING_PLAN_ARN_RE = re.compile(r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.+$")
TRAINING_PLAN_ALLOWED = (
    "allowed: a SageMaker training plan ARN, arn:aws:sagemaker:<region>:<account>:training-plan/<name> "
    "(botocore sagemaker TrainingPlanArn)"
)
#: Why a preference list and managed spot cannot go together: the one place the sentence is written.
PREFERENCES_WITH_SPOT = (
    "instance_preferences and spot are exclusive: SageMaker's InstancePreferences is 'mutually exclusive with "
    "InstanceType, InstanceGroups, InstancePlacementConfig, and EnableManagedSpotTraining, and supports only Flexible "
    "Training Plans (FTP) and On-Demand capacity' (botocore sagemaker ResourceConfig.InstancePreferences); allowed: "
    "pick one: a fallback list on on-demand capacity (capacity from the next type when the first has none), or spot "
    "on one instance type (a discount, with interruptions resumed from checkpoints)"
)


@dataclass(frozen=True)
class InstancePreference:
    """One entry of a training job's fallback list.

    :param instance_type: ``ml.*`` NVIDIA GPU training type (GPU catalog).
    :param instance_count: hosts when this type is selected (default ``None``: the job's ``instance_count``). Give it
        on every entry or on none.
    :param training_plan_arn: a training plan whose reserved capacity this type uses (default: none, on-demand); the
        plan's instance type must be this one. Exclusive with the job-level ``training_plan_arn``.
    """

    instance_type: str
    instance_count: int | None = None
    training_plan_arn: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> dict[str, Any]:
        """The ``InstancePreference`` member of CreateTrainingJob."""
        out: dict[str, Any] = {"InstanceType": self.instance_type}
        if self.instance_count is not None:
            out["InstanceCount"] = self.instance_count
        if self.training_plan_arn is not None:
            out["TrainingPlanArns"] = [self.training_plan_arn]
        return out


def as_preference(item: Any, where: str) -> InstancePreference:
    """An :class:`InstancePreference` from one given entry: a type name, an :class:`InstancePreference`, the
    catalog's ``FallbackChoice`` or a mapping with ``instance_type`` (and maybe ``instance_count``,
    ``training_plan_arn``), as the published job spec stores it."""
    if isinstance(item, InstancePreference):
        return item
    if isinstance(item, str):
        return InstancePreference(item)
    if isinstance(item, Mapping):
        unknown = sorted(set(item) - {"instance_type", "instance_count", "training_plan_arn"})
        if unknown or "instance_type" not in item:
            raise ValidationError(
                where,
                f"instance_preferences entry {dict(item)!r} is not allowed; allowed: instance_type and optionally "
                "instance_count and training_plan_arn",
            )
        return InstancePreference(**item)
    name = getattr(item, "instance_type", None)
    if isinstance(name, str):
        return InstancePreference(name, getattr(item, "instance_count", None), getattr(item, "training_plan_arn", None))
    raise ValidationError(
        where,
        f"instance_preferences entry {item!r} is not allowed; allowed: an instance type name, an InstancePreference "
        "or a FallbackChoice",
    )


def preference_problems(
    preferences: Sequence[InstancePreference],
    *,
    instance_type: str,
    instance_count: Any,
    spot: bool,
    training_plan_arn: str | None,
    local_nvme: Mapping[str, bool],
) -> list[str]:
    """What SageMaker rejects in a fallback list, and the platform's own rules for one.

    :param instance_type: the job's first choice, which the list must start with.
    :param instance_count: the job's ``instance_count``, which per-preference counts must start with.
    :param local_nvme: per type of the list, whether it has local NVMe: every type must have the same storage kind
        as the first, because ``VolumeKmsKeyId`` is one value for the job and "You can't request a
        ``VolumeKmsKeyId`` when using an instance type with local storage" (botocore, ``ResourceConfig``).
    """
    if not preferences:
        return []
    out: list[str] = []
    names = [p.instance_type for p in preferences]
    if spot:
        out.append(PREFERENCES_WITH_SPOT)
    if len(preferences) > MAX_PREFERENCES:
        out.append(
            f"instance_preferences has {len(preferences)} entries ({', '.join(names)}); allowed: 1 to "
            f"{MAX_PREFERENCES} (botocore sagemaker InstancePreferenceList max 5)"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        out.append(
            f"instance_preferences repeats {repeated}; allowed: each instance type once ('An instance type can "
            "appear only once in an InstancePreferences list')"
        )
    if names[0] != instance_type:
        out.append(
            f"instance_preferences starts with {names[0]!r} but instance_type is {instance_type!r}; allowed: the "
            "first preference is the job's instance_type"
        )
    out.extend(_count_problems(preferences, instance_count))
    planned = [p.instance_type for p in preferences if p.training_plan_arn is not None]
    if planned and training_plan_arn is not None:
        out.append(
            f"instance_preferences {planned} name training plans and training_plan_arn is set too; allowed: one of "
            "them ('Per-preference TrainingPlanArns is mutually exclusive with the job-level TrainingPlanArn')"
        )
    elif training_plan_arn is not None and len(set(names)) > 1:
        out.append(
            f"training_plan_arn is set for the fallback list {names}, but a plan holds one instance type ('The "
            "InstanceType field set in the ResourceConfig section of the CreateTrainingJob request must match the "
            "InstanceType of your training plan', SageMaker Developer Guide, use-training-plan-for-training-jobs-"
            "using-api-cli-sdk); allowed: the plan on its type's entry (instance_preferences[].training_plan_arn)"
        )
    kinds = {name: has for name, has in local_nvme.items() if name in names}
    first = kinds.get(names[0])
    other = sorted(name for name, has in kinds.items() if first is not None and has != first)
    if other:
        out.append(
            f"instance_preferences {other} have {'no ' if first else ''}local NVMe storage, unlike {names[0]!r}; "
            "allowed: types with the same storage kind as the first, because the job has one VolumeKmsKeyId and "
            "SageMaker rejects it on types with local storage"
        )
    return out


def _count_problems(preferences: Sequence[InstancePreference], instance_count: Any) -> list[str]:
    counts = [p.instance_count for p in preferences]
    given = [p.instance_type for p in preferences if p.instance_count is not None]
    if given and len(given) != len(preferences):
        missing = [p.instance_type for p in preferences if p.instance_count is None]
        return [
            f"instance_preferences give instance_count for {given} but not for {missing}; allowed: a count on every "
            "preference or on none ('SageMaker rejects requests that set InstanceCount on only some preferences')"
        ]
    out = []
    for pref in preferences:
        count = pref.instance_count
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            out.append(
                f"instance_preferences[{pref.instance_type!r}].instance_count={count!r}; allowed: an integer >= 1"
            )
    if given and not out and counts[0] != instance_count:
        out.append(
            f"instance_preferences start with {preferences[0].instance_type!r} x {counts[0]} but instance_count is "
            f"{instance_count!r}; allowed: the first preference's count is the job's instance_count"
        )
    return out


def render_preferences(
    preferences: Iterable[InstancePreference], instance_count: Any, training_plan_arn: str | None
) -> dict[str, Any]:
    """The ``ResourceConfig`` members of a fallback list: ``InstancePreferences``, and ``InstanceCount`` only when no
    preference has its own; the job-level ``TrainingPlanArn`` when given. No ``InstanceType`` (exclusive)."""
    items = [p.render() for p in preferences]
    out: dict[str, Any] = {"InstancePreferences": items}
    if not any("InstanceCount" in item for item in items):
        out["InstanceCount"] = instance_count
    if training_plan_arn is not None:
        out["TrainingPlanArn"] = training_plan_arn
    return out


def placement(resource_config: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """``(instance type, count)`` a job with this ``ResourceConfig`` runs on, or would run on when capacity is free:
    the type SageMaker selected (``SelectedInstanceType`` / ``SelectedInstanceCount``, in a DescribeTrainingJob
    response), else ``InstanceType`` / ``InstanceCount``, else the first entry of ``InstancePreferences`` (its count,
    or the job's). ``None`` for what the config does not say."""
    selected = resource_config.get("SelectedInstanceType")
    if isinstance(selected, str):
        return selected, resource_config.get("SelectedInstanceCount", resource_config.get("InstanceCount"))
    if isinstance(resource_config.get("InstanceType"), str):
        return resource_config["InstanceType"], resource_config.get("InstanceCount")
    listed = resource_config.get("InstancePreferences") or []
    if listed and isinstance(listed[0], Mapping):
        return listed[0].get("InstanceType"), listed[0].get("InstanceCount", resource_config.get("InstanceCount"))
    return None, resource_config.get("InstanceCount")


def placement_text(resource_config: Mapping[str, Any]) -> str:
    """The job's instances for people: ``2 x ml.p4d.24xlarge``; on a fallback list, which type SageMaker selected (or
    that it has not yet) and the list: ``2 x ml.p4de.24xlarge (selected from ml.p4d.24xlarge x 2, ml.p4de.24xlarge x
    2)``, ``first with capacity of ml.g5.xlarge, ml.g5.2xlarge (1 each)``."""
    listed = [p for p in resource_config.get("InstancePreferences") or [] if isinstance(p, Mapping)]
    job_count = resource_config.get("InstanceCount")
    if not listed:
        return f"{job_count if job_count is not None else '?'} x {resource_config.get('InstanceType', '?')}"
    names = ", ".join(
        f"{p.get('InstanceType')} x {p['InstanceCount']}" if "InstanceCount" in p else str(p.get("InstanceType"))
        for p in listed
    )
    selected = resource_config.get("SelectedInstanceType")
    if isinstance(selected, str):
        return f"{resource_config.get('SelectedInstanceCount', job_count) or '?'} x {selected} (selected from {names})"
    each = f" ({job_count} each)" if job_count is not None else ""
    return f"first with capacity of {names}{each}"
