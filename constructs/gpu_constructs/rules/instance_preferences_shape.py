"""A job's ``InstancePreferences`` list: at most 5 types, each once, counts on every entry or none, one kind of plan.

botocore 1.44.8 (``sagemaker/2017-07-24/service-2.json``):

* ``InstancePreferenceList`` / ``ProcessingInstancePreferenceList``: ``min: 1``, ``max: 5``;
* ``InstancePreference.InstanceType``: "An instance type can appear only once in an ``InstancePreferences`` list.";
* ``InstancePreference.InstanceCount``: "Specify the instance count for the training job in one of the following two
  ways: Per preference - Set ``InstanceCount`` on every preference in the ``InstancePreferences`` list and don't set
  ``ResourceConfig$InstanceCount`` [...] One count for the job - Set ``ResourceConfig$InstanceCount`` and omit it from
  every preference. [...] SageMaker rejects requests that set ``InstanceCount`` on only some preferences, that set it
  both per preference and in ``ResourceConfig``, or that omit it in both places." (the same for processing jobs and
  ``ProcessingClusterConfig$InstanceCount``);
* ``InstancePreference.TrainingPlanArns``: "Per-preference ``TrainingPlanArns`` is mutually exclusive with the
  job-level ``TrainingPlanArn`` in ``ResourceConfig``."

botocore's validator checks the list's length only in clients that enable it and none of the rest, and a CloudFormation
template is not validated against the model at all: the request fails when the job is created.

Reads the same requests as ``InstancePreferencesExclusive``. Non-compliant (one finding per state and problem,
``<state>:<problem>``): more than 5 entries (``max5``), a type listed twice (``repeated``), ``InstanceCount`` on some
entries only (``count-on-some``), on entries and on the job (``count-twice``) or on neither (``count-missing``), and
per-preference ``TrainingPlanArns`` with a job-level ``TrainingPlanArn`` (``two-plans``). A list, an entry or a count
set at run time is not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_constructs.rules._training import JobRequest, ProcessingRequest, job_rule

#: ``InstancePreferenceList`` ``max`` (botocore 1.44.8).
MAX_ENTRIES = 5


@job_rule(
    id="InstancePreferencesShape",
    info="A job's InstancePreferences has more than 5 types, a type twice, InstanceCount on some entries only (or on "
    "entries and the job, or nowhere), or per-preference TrainingPlanArns with a job-level TrainingPlanArn: SageMaker "
    "rejects the request. List 1-5 distinct types; put the count on every entry or only on the job; one kind of plan.",
    doc=__doc__,
)
def check(request: JobRequest) -> list[str]:
    entries = request.preferences()
    if not entries or not all(isinstance(e, Mapping) for e in entries):
        return []
    config = request.resource_config
    found = []
    if len(entries) > MAX_ENTRIES:
        found.append("max5")
    names = [e.get("InstanceType") for e in entries if isinstance(e.get("InstanceType"), str)]
    if len(names) != len(set(names)):
        found.append("repeated")
    found.extend(_count_problems(entries, request.get(*config, "InstanceCount")))
    plans = [e for e in entries if "TrainingPlanArns" in e or "TrainingPlanArns.$" in e]
    if not isinstance(request, ProcessingRequest) and plans and request.get(*config, "TrainingPlanArn") is not None:
        found.append("two-plans")
    return [f"{request.where}:{problem}" for problem in found]


def _count_problems(entries: list[Mapping[str, Any]], job_count: Any) -> list[str]:
    counted = ["InstanceCount" in e or "InstanceCount.$" in e for e in entries]
    if all(counted):
        return ["count-twice"] if job_count is not None else []
    if any(counted):
        return ["count-on-some"]
    return ["count-missing"] if job_count is None else []
