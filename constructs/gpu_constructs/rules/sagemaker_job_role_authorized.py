"""A SageMaker job's execution role must be allowed every request SageMaker makes with it.

SageMaker downloads a job's inputs and writes its outputs with the execution role the request passes, and it
lists every ``S3Prefix`` input first, even one whose prefix is a single object's key: the SageMaker Developer
Guide ("How to use SageMaker AI execution roles", "CreateTrainingJob API: Execution Role Permissions",
https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html) lists ``s3:ListBucket`` with ``s3:GetObject``
and says "Scope the s3:ListBucket permission to a specific bucket that you specify as the
InputDataConfig.DataSource.S3DataSource.S3Uri"; "CreateProcessingJob API: Execution Role Permissions" says the
same of ``ProcessingInputs``. A role that may read an object but not list its prefix fails the job while it
downloads its input, after the instances were paid for. The same pages list ``s3:PutObject`` for
``OutputDataConfig.S3OutputPath``, ``kms:Encrypt``/``kms:GenerateDataKey`` for ``OutputDataConfig.KmsKeyId``,
``kms:CreateGrant`` for ``VolumeKmsKeyId``, ``logs:CreateLogStream``/``logs:PutLogEvents`` and
``cloudwatch:PutMetricData``; the principal that creates the job needs ``iam:PassRole`` on the role.

The rule derives those requests from each ``sagemaker:createTrainingJob`` / ``createProcessingJob`` task
(``.sync`` and the ``aws-sdk:sagemaker:*`` integrations) of a state machine
(``gpu_constructs.authz.journeys``), and evaluates them, as the IAM policy evaluation logic does, against the
role's identity policies in the cloud assembly and the policy of the bucket or key they touch
(``gpu_constructs.authz.policy``). It also checks that the state machine's role may create the job and pass the
role. One finding per denied request: ``<state>:<what>:<action>`` (``Train:channel:code:s3:ListBucket``). Values
chosen at run time (``"S3Uri.$"``, JSONata) are not judged, except ``States.Format`` templates, whose
placeholders are filled with a sample segment; roles that are not in the cloud assembly are not judged. A
training task whose whole ``InputDataConfig`` is chosen at run time (``gpu_constructs.training``'s ``MergeInputs``
state builds it from the execution's inputs) is judged with the channels known before the run: the
``static.channels`` of the Pass state that defines the machine's constants (its ``Defaults`` state), the setup's
dataset channels (``{data_version}`` filled with a sample segment) and the code's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpu_constructs.authz.assembly import Assembly, Located, UnresolvableValue, state_machine_definition
from gpu_constructs.authz.journeys import JobKind, check_requests, job_requests, start_job_requests
from gpu_constructs.authz.policy import AuthRequest, UnsupportedPolicy
from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, StackView, rule
from gpu_constructs.rules._training import _PROCESSING_TASK_RESOURCE, _TASK_RESOURCE, _children, _tasks
from gpu_constructs.training_spec.limits import DATA_VERSION_PLACEHOLDER
from gpu_constructs.training_spec.sfn import DATASET_CHANNELS, RUNTIME_CHANNELS, STATIC_CHANNELS

_FORMAT = re.compile(r"^States\.Format\('(?P<template>(?:[^'\\]|\\.)*)'")


def sagemaker_tasks(machine: Mapping[str, Any]) -> Iterator[tuple[str, JobKind, Mapping[str, Any]]]:
    """``(state name, job kind, request)`` of every SageMaker create-job task (the training rules' reader of state
    machines: nested states and the ``aws-sdk`` integrations included); the request keeps only what is known before
    the run (see :func:`known_part`). A training task whose ``InputDataConfig`` is chosen at run time gets the
    channels known before the run, the machine's ``static.channels`` (see :func:`static_channels`), when it has
    them."""
    channels = static_channels(machine)
    for name, params in _tasks(machine, _TASK_RESOURCE):
        request = known_part(params)
        if channels is not None and _chosen_at_run_time(params, "InputDataConfig"):
            request = {**request, "InputDataConfig": channels}
        yield name, "training", request
    for name, params in _tasks(machine, _PROCESSING_TASK_RESOURCE):
        yield name, "processing", known_part(params)


def known_part(value: Any) -> Any:
    """The parameters without what is chosen at run time: a ``"Key.$"`` path or JSONata expression is dropped,
    a ``States.Format('...{}...', ...)`` becomes its template with each ``{}`` as ``x``."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if str(key).endswith(".$"):
                match = _FORMAT.match(str(item))
                if match is not None:
                    out[str(key)[:-2]] = match.group("template").replace("\\'", "'").replace("{}", "x")
                continue
            if isinstance(item, str) and item.strip().startswith("{%"):
                continue
            out[str(key)] = known_part(item)
        return out
    if isinstance(value, list):
        return [known_part(v) for v in value]
    return value


def static_channels(machine: Mapping[str, Any]) -> list[Any] | None:
    """The channels known before the run of a state machine that computes its training jobs' ``InputDataConfig``
    at run time (``gpu_constructs.training``'s ``MergeInputs`` state): the dataset and runtime channels of the
    ``static.channels`` object of the Pass state that defines ``static`` (its ``Defaults`` state), known part only,
    each ``{data_version}`` filled with a sample segment (``x``) as ``States.Format`` placeholders are; ``None``
    when no Pass state, or more than one, defines them."""
    found = [
        channels
        for state in _states(machine)
        if state.get("Type") == "Pass"
        and isinstance(state.get("Parameters"), Mapping)
        and isinstance(state["Parameters"].get("static"), Mapping)
        and isinstance(channels := state["Parameters"]["static"].get(STATIC_CHANNELS), Mapping)
    ]
    if len(found) != 1:
        return None
    [channels] = found
    dataset, runtime = channels.get(DATASET_CHANNELS), channels.get(RUNTIME_CHANNELS)
    if not isinstance(dataset, list) or not isinstance(runtime, list):
        return None
    return [_sample_version(known_part(c)) for c in [*dataset, *runtime]]


def _states(machine: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every state of the machine, nested states included."""
    states = machine.get("States")
    if not isinstance(states, Mapping):
        return
    for state in states.values():
        if isinstance(state, Mapping):
            yield state
            for branch in _children(state):
                yield from _states(branch)


def _sample_version(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sample_version(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sample_version(v) for v in value]
    return value.replace(DATA_VERSION_PLACEHOLDER, "x") if isinstance(value, str) else value


def _chosen_at_run_time(params: Any, key: str) -> bool:
    """Whether the task's ``key`` is a ``"Key.$"`` path or a JSONata expression."""
    if not isinstance(params, Mapping):
        return False
    value = params.get(key)
    return f"{key}.$" in params or (isinstance(value, str) and value.strip().startswith("{%"))


def _same_assembly(resource: Resource) -> list[StackView]:
    """The stacks deployed together with the resource's stack (one cloud assembly folder: a pipeline stage's
    stacks are judged with that stage's stacks)."""
    here = Path(resource.stack.path).parent if resource.stack.path else None
    stacks = [s for s in resource.assembly if here is not None and Path(s.path).parent == here]
    return stacks or [resource.stack]


def _finding(state: str, request: AuthRequest) -> str:
    return f"{state}:{request.subject}:{request.action}"


@rule(
    id="SageMakerJobRoleAuthorized",
    resource_types=["AWS::StepFunctions::StateMachine"],
    info="A SageMaker job of this state machine would be denied a request it makes: its execution role cannot "
    "list or read an S3Prefix input (SageMaker lists every S3Prefix input before it downloads it), write its "
    "output, use its KMS keys, write logs; or the state machine's role cannot create the job or pass the role.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    assembly = Assembly(_same_assembly(resource))
    try:
        definition = state_machine_definition(
            assembly, Located(resource.stack, resource.logical_id, resource.definition)
        )
    except (UnresolvableValue, ValueError):
        return NOT_APPLICABLE
    tasks = list(sagemaker_tasks(definition))
    if not tasks:
        return NOT_APPLICABLE
    machine_role = str(assembly.resolve(resource.properties.get("RoleArn"), resource.stack) or "")
    findings: list[str] = []
    for state, kind, request in tasks:
        role = request.get("RoleArn")
        if not isinstance(role, str) or assembly.role(role) is None:
            continue  # a role chosen at run time, or not defined in this cloud assembly: not judged
        requests = job_requests(assembly, kind, request)
        name_key = "TrainingJobName" if kind == "training" else "ProcessingJobName"
        if assembly.role(machine_role) is not None and isinstance(request.get(name_key), str):
            requests += start_job_requests(assembly, machine_role, kind, request)
        elif assembly.role(machine_role) is not None:
            requests += [
                r for r in start_job_requests(assembly, machine_role, kind, request) if r.subject == "pass-role"
            ]
        try:
            denied = check_requests(assembly, requests, on_unknown=lambda *_: None)
        except UnsupportedPolicy:
            continue
        findings += [_finding(state, d.decision.request) for d in denied]
    return sorted(set(findings))
