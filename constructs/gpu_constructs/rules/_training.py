"""CreateTrainingJob and CreateProcessingJob requests as templates carry them (a helper of the training rules;
not a rule itself).

Two places hold a job's parameters in a CloudFormation template:

* ``AWS::SageMaker::TrainingJob`` / ``AWS::SageMaker::ProcessingJob``: its ``Properties`` are the request;
* ``AWS::StepFunctions::StateMachine``: every ``Task`` state whose ``Resource`` calls the API sends its
  ``Parameters`` (JSONPath) or ``Arguments`` (JSONata) as the request. Two integrations call it: the optimized
  SageMaker integration, ``arn:<partition>:states:::sagemaker:createTrainingJob`` (or ``.sync``), and the AWS SDK
  integration, ``arn:<partition>:states:::aws-sdk:sagemaker:createTrainingJob`` (or ``.waitForTaskToken``; the
  SDK integrations support no ``.sync``). Both take the API's request members as keys: "Parameters in Step
  Functions are expressed in PascalCase, even if the native service API is in camelCase" (AWS Step Functions
  Developer Guide, "Learning to use AWS service SDK integrations in Step Functions",
  https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html). The same holds for
  ``createProcessingJob``. The definition is often an ``Fn::Join``; it is flattened (references become
  ``${LogicalId}`` text) and parsed, and skipped when it cannot be parsed. States nested in ``Parallel``
  branches and ``Map`` item processors are included.

:func:`training_requests` returns the CreateTrainingJob requests (:class:`TrainingRequest`),
:func:`processing_requests` the CreateProcessingJob requests (:class:`ProcessingRequest`); both are
:class:`JobRequest` (``.where``, ``.get(*path)``, ``.flat(*path)``, ``.text(*path)``, ``.resource_config`` and
``.instance_types()``: the literal types the job may run on, ``InstanceType`` and every ``InstancePreferences``
entry's, since a fallback list hides its types from a rule that reads only ``InstanceType``).

Values decided at run or deploy time (a ``"Key.$"`` JSONPath, a ``{% JSONata %}`` expression, an intrinsic
function, a flattened ``${...}`` reference) read as :data:`UNKNOWN`, so rules skip them rather than guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_constructs.rules._rule import COMPLIANT, NON_COMPLIANT, NOT_APPLICABLE, Resource, Result, Rule, flatten, rule

STATE_MACHINE = "AWS::StepFunctions::StateMachine"
TRAINING_JOB = "AWS::SageMaker::TrainingJob"
PROCESSING_JOB = "AWS::SageMaker::ProcessingJob"
RESOURCE_TYPES = (STATE_MACHINE, TRAINING_JOB)
#: What a rule over training and processing requests (:func:`job_rule`) reads.
JOB_RESOURCE_TYPES = (STATE_MACHINE, TRAINING_JOB, PROCESSING_JOB)


def _task_resource(api: str) -> re.Pattern[str]:
    """The ``Resource`` of a Task state that calls SageMaker ``api``: optimized (``.sync``) or AWS SDK integration."""
    return re.compile(
        rf"^arn:(\$\{{[^}}]*\}}|[^:$]+):states:::"
        rf"(?:sagemaker:{api}(\.sync)?|aws-sdk:sagemaker:{api}(\.waitForTaskToken)?)$"
    )


_TASK_RESOURCE = _task_resource("createTrainingJob")
_PROCESSING_TASK_RESOURCE = _task_resource("createProcessingJob")


class _Unknown:
    """A value set at run or deploy time."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class JobRequest:
    """One SageMaker job request: ``where`` is the state name ("" for a job resource of the template)."""

    where: str
    params: Any

    def get(self, *path: str) -> Any:
        """The literal value at ``path``; ``None`` when absent; :data:`UNKNOWN` when decided at run/deploy time."""
        node = self.params
        for key in path:
            if not isinstance(node, Mapping):
                return UNKNOWN
            if key in node:
                node = node[key]
            elif f"{key}.$" in node:
                return UNKNOWN
            else:
                return None
        return _literal(node)

    def flat(self, *path: str) -> str | None:
        """The value at ``path`` as text with references as ``${...}`` (an image URI joined from parts);
        ``None`` when absent or set at run time."""
        node = self.params
        for key in path:
            if not isinstance(node, Mapping) or key not in node:
                return None
            node = node[key]
        if isinstance(node, str) and node.strip().startswith("{%"):
            return None
        return flatten(node) if isinstance(node, str | Mapping) else None

    def text(self, *path: str) -> str | None:
        """A literal string at ``path`` without references (``None`` when absent, unknown or not a string)."""
        value = self.get(*path)
        return value if isinstance(value, str) and "${" not in value else None

    @property
    def resource_config(self) -> tuple[str, ...]:
        """The path of the job's instances: ``ResourceConfig`` (training) or ``ProcessingResources.ClusterConfig``."""
        return ("ResourceConfig",)

    def preferences(self) -> list[Any] | None:
        """The literal ``InstancePreferences`` list of the job (``None`` when absent or set at run time)."""
        value = self.get(*self.resource_config, "InstancePreferences")
        return value if isinstance(value, list) else None

    def instance_types(self) -> list[str]:
        """Every literal instance type the job may run on, in order, each once: ``InstanceType`` and the
        ``InstanceType`` of every ``InstancePreferences`` entry (botocore 1.44.8: "SageMaker launches the [...] job on
        the first instance type in the list that has available capacity")."""
        found = [self.text(*self.resource_config, "InstanceType")]
        for item in self.preferences() or []:
            name = _literal(item.get("InstanceType")) if isinstance(item, Mapping) else None
            found.append(name if isinstance(name, str) and "${" not in name else None)
        return list(dict.fromkeys(name for name in found if name is not None))


class TrainingRequest(JobRequest):
    """One CreateTrainingJob request: ``where`` is the state name ("" for an ``AWS::SageMaker::TrainingJob``)."""


class ProcessingRequest(JobRequest):
    """One CreateProcessingJob request: ``where`` is the state name ("" for an ``AWS::SageMaker::ProcessingJob``)."""

    @property
    def resource_config(self) -> tuple[str, ...]:
        return ("ProcessingResources", "ClusterConfig")


def _literal(value: Any) -> Any:
    if isinstance(value, Mapping) and len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")):
        return UNKNOWN
    if isinstance(value, str) and value.strip().startswith("{%"):
        return UNKNOWN
    return value


def training_requests(resource: Resource) -> list[TrainingRequest]:
    """Every CreateTrainingJob request of the resource (empty when it has none or cannot be read)."""
    if resource.type == TRAINING_JOB:
        return [TrainingRequest("", resource.properties)]
    if resource.type != STATE_MACHINE:
        return []
    definition = _definition(resource.properties)
    if definition is None:
        return []
    return [TrainingRequest(name, params) for name, params in _tasks(definition, _TASK_RESOURCE)]


def processing_requests(resource: Resource) -> list[ProcessingRequest]:
    """Every CreateProcessingJob request of the resource (empty when it has none or cannot be read)."""
    if resource.type == PROCESSING_JOB:
        return [ProcessingRequest("", resource.properties)]
    if resource.type != STATE_MACHINE:
        return []
    definition = _definition(resource.properties)
    if definition is None:
        return []
    return [ProcessingRequest(name, params) for name, params in _tasks(definition, _PROCESSING_TASK_RESOURCE)]


def _definition(properties: Mapping[str, Any]) -> Mapping[str, Any] | None:
    body = properties.get("Definition")
    if isinstance(body, Mapping):
        return body
    text = properties.get("DefinitionString")
    if text is None:
        return None
    try:
        parsed = json.loads(flatten(text))
    except ValueError:
        return None
    return parsed if isinstance(parsed, Mapping) else None


def _tasks(machine: Mapping[str, Any], task_resource: re.Pattern[str]) -> Iterator[tuple[str, Any]]:
    states = machine.get("States")
    if not isinstance(states, Mapping):
        return
    for name, state in states.items():
        if not isinstance(state, Mapping):
            continue
        resource = state.get("Resource")
        if state.get("Type") == "Task" and isinstance(resource, str) and task_resource.match(resource):
            yield str(name), state.get("Parameters", state.get("Arguments", {}))
        for branch in _children(state):
            yield from _tasks(branch, task_resource)


def _children(state: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    nested = [b for b in state.get("Branches") or [] if isinstance(b, Mapping)]
    for key in ("ItemProcessor", "Iterator"):
        if isinstance(state.get(key), Mapping):
            nested.append(state[key])
    return nested


def verdict(resource: Resource, requests: Sequence[JobRequest], findings: Sequence[str]) -> Result:
    """NOT_APPLICABLE without requests; a job resource is NON_COMPLIANT or COMPLIANT; a state machine gets
    one finding per state (``findings`` are the bad states, or ``state:detail``)."""
    if not requests:
        return NOT_APPLICABLE
    if resource.type in (TRAINING_JOB, PROCESSING_JOB):
        return NON_COMPLIANT if findings else COMPLIANT
    return list(findings)


def training_rule(
    *, id: str, info: str, doc: str | None
) -> Callable[[Callable[[TrainingRequest], Iterable[str]]], Rule]:
    """Decorator: a :func:`~gpu_constructs.rules._rule.rule` over :data:`RESOURCE_TYPES` from a function that
    returns the findings of one CreateTrainingJob request; the rule's :func:`verdict` covers every request."""

    def wrap(findings_of: Callable[[TrainingRequest], Iterable[str]]) -> Rule:
        def check(resource: Resource) -> Result:
            requests = training_requests(resource)
            return verdict(resource, requests, [finding for request in requests for finding in findings_of(request)])

        return rule(id=id, resource_types=RESOURCE_TYPES, info=info, doc=doc)(check)

    return wrap


def job_rule(*, id: str, info: str, doc: str | None) -> Callable[[Callable[[JobRequest], Iterable[str]]], Rule]:
    """Like :func:`training_rule`, over both kinds of request: every :class:`TrainingRequest` and
    :class:`ProcessingRequest` of the resource (:data:`JOB_RESOURCE_TYPES`); the function tells them apart by
    type."""

    def wrap(findings_of: Callable[[JobRequest], Iterable[str]]) -> Rule:
        def check(resource: Resource) -> Result:
            requests = [*training_requests(resource), *processing_requests(resource)]
            return verdict(resource, requests, [finding for request in requests for finding in findings_of(request)])

        return rule(id=id, resource_types=JOB_RESOURCE_TYPES, info=info, doc=doc)(check)

    return wrap


_ECR_IMAGE = re.compile(r"^[^/]+\.dkr\.ecr\.[^/]+/(?P<repository>[a-z0-9._/-]+):(?P<tag>[A-Za-z0-9._-]+)$")
_CUDA_TAG = re.compile(r"(?:^|-)(cu\d{3})(?:-|$)")


@dataclass(frozen=True)
class GpuImage:
    """A training image known to be built for NVIDIA GPUs, from its literal ECR tag."""

    uri: str
    #: The CUDA version of the tag (``cu129`` -> ``12.9``), ``None`` when the tag does not say.
    cuda: str | None


def gpu_image(uri: Any) -> GpuImage | None:
    """The image when its literal tag marks an NVIDIA GPU build (AWS Deep Learning Containers:
    ``<version>-gpu-<python>-cu<NNN>-<os>-sagemaker``); ``None`` for anything else: CPU images, tags decided at
    deploy time (``${...}``), images of unknown naming. The registry part may contain references."""
    if not isinstance(uri, str):
        return None
    name = uri.rsplit("/", 1)[-1] if "/" in uri else uri
    if "${" in name or "@" in uri:
        return None
    match = _ECR_IMAGE.match(re.sub(r"\$\{[^}]*\}", "x", uri))
    if match is None:
        return None
    tag = match.group("tag")
    cuda = _CUDA_TAG.search(tag)
    if "-gpu-" not in f"-{tag}-" and cuda is None:
        return None
    return GpuImage(uri, cuda.group(1) if cuda else None)


def image_and_instance(request: TrainingRequest) -> tuple[GpuImage | None, Any]:
    """The request's GPU training image (:func:`gpu_image`) and its instance type's catalog entry
    (:func:`catalog_entry`); either is ``None`` when unknown."""
    image = gpu_image(request.flat("AlgorithmSpecification", "TrainingImage"))
    return image, catalog_entry(request.text("ResourceConfig", "InstanceType"))


def image_and_instances(request: TrainingRequest) -> tuple[GpuImage | None, list[Any]]:
    """The request's GPU training image (:func:`gpu_image`, ``None`` when unknown) and the catalog entries of every
    literal type it may run on (:meth:`JobRequest.instance_types`: ``InstanceType`` and the fallback list's), the
    types missing from the catalog left out."""
    image = gpu_image(request.flat("AlgorithmSpecification", "TrainingImage"))
    entries = (catalog_entry(name) for name in request.instance_types())
    return image, [entry for entry in entries if entry is not None]


def catalog_entry(instance_type: str | None) -> Any:
    """The GPU catalog's entry of a literal instance type (``None`` when unknown or not literal)."""
    from gpu_constructs.catalog import lookup
    from gpu_constructs.errors import ValidationError

    if instance_type is None:
        return None
    try:
        return lookup(instance_type)
    except ValidationError:
        return None
