"""A job's ``InstancePreferences`` cannot be combined with a single instance type, instance groups or managed spot.

botocore 1.44.8 (``sagemaker/2017-07-24/service-2.json``), ``ResourceConfig.InstancePreferences``: "An ordered list
of ML compute instance types for the training job, in priority order. [...] Exactly one instance type is selected for
the job. ``InstancePreferences`` is mutually exclusive with ``InstanceType``, ``InstanceGroups``,
``InstancePlacementConfig``, and ``EnableManagedSpotTraining``, and supports only Flexible Training Plans (FTP) and
On-Demand capacity." For processing jobs, ``ProcessingClusterConfig.InstancePreferences``: "``InstancePreferences``
is mutually exclusive with ``InstanceType``." Every member passes botocore's schema check on its own; SageMaker
rejects the combination when the job is created, so a state machine fails at run time, after any prepare step.

Reads ``AWS::SageMaker::TrainingJob``, ``AWS::SageMaker::ProcessingJob`` and the state machine tasks that call
CreateTrainingJob or CreateProcessingJob (``sagemaker:create...Job[.sync]`` and ``aws-sdk:sagemaker:create...Job``).
Non-compliant: a request with ``InstancePreferences`` (any value) that also has ``InstanceType``, ``InstanceGroups``
or ``InstancePlacementConfig`` (any value, set at run time included), or ``EnableManagedSpotTraining`` literally true
(one finding per state and member: ``<state>:<member>``).
"""

from __future__ import annotations

from gpu_constructs.rules._training import JobRequest, ProcessingRequest, job_rule

#: The ``ResourceConfig`` members exclusive with ``InstancePreferences`` (training).
TRAINING_EXCLUSIVE = ("InstanceType", "InstanceGroups", "InstancePlacementConfig")


@job_rule(
    id="InstancePreferencesExclusive",
    info="A job sets InstancePreferences together with InstanceType, InstanceGroups, InstancePlacementConfig or "
    "EnableManagedSpotTraining: SageMaker rejects the request. Pick one: a fallback list (on-demand capacity or "
    "training plans) or one instance type (with spot if wanted).",
    doc=__doc__,
)
def check(request: JobRequest) -> list[str]:
    config = request.resource_config
    if request.get(*config, "InstancePreferences") is None:
        return []
    members = ("InstanceType",) if isinstance(request, ProcessingRequest) else TRAINING_EXCLUSIVE
    found = [name for name in members if request.get(*config, name) is not None]
    if not isinstance(request, ProcessingRequest) and request.get("EnableManagedSpotTraining") is True:
        found.append("EnableManagedSpotTraining")
    return [f"{request.where}:{name}" for name in found]
