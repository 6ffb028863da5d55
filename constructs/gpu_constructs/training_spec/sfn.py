"""Rendering to Step Functions: runtime values as :class:`Dynamic` references, ``States.Format`` strings, the ASL
``"<key>.$"`` form, and the sample values that let a rendering be validated like a boto3 request."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_constructs.training_spec.limits import DATA_VERSION_PLACEHOLDER, TOKEN_RE
from gpu_constructs.training_spec.rules import raise_problems
from gpu_constructs.training_spec.service_model import service_model_problems

__all__ = [
    "DATASET_CHANNELS",
    "RUNTIME_CHANNELS",
    "STATIC_CHANNELS",
    "Dynamic",
    "SfnPaths",
    "iter_dynamic_paths",
    "states_array",
    "states_format",
    "substitute_sfn_samples",
]


@dataclass(frozen=True)
class SfnPaths:
    """Where the Step Functions rendering reads each runtime value (the training state machine's layout)."""

    job_name: str = "$.args.job_name"
    instance_type: str = "$.args.instance_type"
    data_version: str = "$.args.data_version"
    hyperparameters: str = "$.hyperparameters"
    code: str = "$.args.code"
    entry_point: str = "$.args.entry_point"
    #: The object with the derived ``processes_per_host`` and ``num_workers`` of the chosen instance type (the
    #: launcher's settings in ``Environment``); ``None``: those of the spec's own instance type, fixed.
    distribution: str | None = None
    #: The job's whole ``InputDataConfig``, computed by the execution (the channels its user names, the dataset's
    #: when asked, the code's); ``None``: the spec's channels, fixed.
    input_data_config: str | None = None


DEFAULT_PATHS = SfnPaths()

#: The key of the training state machine's ``static`` object (its ``Defaults`` state's constants) that holds the
#: channels known before the run, and the keys of its two lists: the setup's dataset channels (``{data_version}``
#: in their strings) and the code's channels (the ``code`` channel with the setup's code package); the
#: ``MergeInputs`` state builds the job's ``InputDataConfig`` from them, and the ``SageMakerJobRoleAuthorized``
#: rule judges them.
STATIC_CHANNELS = "channels"
DATASET_CHANNELS = "dataset"
RUNTIME_CHANNELS = "runtime"


@dataclass(frozen=True)
class Dynamic:
    """A value the Step Functions execution supplies at run time.

    ``path`` is a JSONPath (``$.args.job_name``) or an intrinsic function (``States.Format(...)``);
    ``sample`` is a representative value, substituted to validate the rendering.
    """

    path: str
    sample: Any


@dataclass(frozen=True)
class Concat:
    """A string made of literal parts and dynamic parts (rendered with ``States.Format``)."""

    parts: tuple[str | Dynamic, ...]


def states_format(parts: Sequence[str | Dynamic]) -> str | Dynamic:
    """Join ``parts``; with any :class:`Dynamic` part, a ``States.Format(...)`` :class:`Dynamic`.

    Literal ``' { } \\`` are escaped for the intrinsic function, except inside CDK tokens, which the
    CDK replaces at synth (a bucket name cannot contain those characters).
    """
    if not any(isinstance(p, Dynamic) for p in parts):
        return "".join(str(p) for p in parts)
    template: list[str] = []
    args: list[str] = []
    sample: list[str] = []
    for part in parts:
        if isinstance(part, Dynamic):
            template.append("{}")
            args.append(part.path)
            sample.append(str(part.sample))
        else:
            template.append(_escape_format(part))
            sample.append(part)
    return Dynamic(f"States.Format('{''.join(template)}', {', '.join(args)})", "".join(sample))


def states_array(items: Sequence[str | Dynamic]) -> Dynamic:
    """A list with dynamic items, as one ``States.Array(...)`` :class:`Dynamic` (Step Functions cannot take a
    ``.$`` reference as a list item). String literals are quoted and escaped as the intrinsic functions require
    (ASL specification, "Intrinsic Functions": the characters ``' { } \\`` are escaped in string literals)."""
    args = [item.path if isinstance(item, Dynamic) else f"'{_escape_format(str(item))}'" for item in items]
    sample = [item.sample if isinstance(item, Dynamic) else item for item in items]
    return Dynamic(f"States.Array({', '.join(args)})", sample)


def _escape_format(text: str) -> str:
    out: list[str] = []
    last = 0
    for match in TOKEN_RE.finditer(text):
        out.append(re.sub(r"([\\'{}])", r"\\\1", text[last : match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(re.sub(r"([\\'{}])", r"\\\1", text[last:]))
    return "".join(out)


def to_asl(tree: Any) -> Any:
    """Step Functions form: a :class:`Dynamic` value becomes ``"<key>.$": <path>``."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            if isinstance(value, Concat):
                value = states_format(value.parts)
            if isinstance(value, Dynamic):
                out[f"{key}.$"] = value.path
            else:
                out[key] = to_asl(value)
        return out
    if isinstance(tree, list):
        if any(isinstance(v, Dynamic | Concat) for v in tree):
            raise ValueError("a list item cannot be dynamic in Step Functions Parameters; use a dynamic list")
        return [to_asl(v) for v in tree]
    return tree


def substitute_sfn_samples(parameters: Any, samples: Mapping[str, Any]) -> Any:
    """Replace each ``"<key>.$": <path>`` of rendered Step Functions ``Parameters`` by ``samples[path]``.

    Raises ``KeyError`` naming a path that has no sample, so every runtime value is validated.
    """
    if isinstance(parameters, dict):
        out: dict[str, Any] = {}
        for key, value in parameters.items():
            if key.endswith(".$"):
                if value not in samples:
                    raise KeyError(f"no sample value for {key}={value!r}")
                out[key[:-2]] = samples[value]
            else:
                out[key] = substitute_sfn_samples(value, samples)
        return out
    if isinstance(parameters, list):
        return [substitute_sfn_samples(v, samples) for v in parameters]
    return parameters


def collect_samples(tree: Any, found: dict[str, Any]) -> dict[str, Any]:
    if isinstance(tree, dict):
        for value in tree.values():
            collect_samples(value, found)
    elif isinstance(tree, list):
        for value in tree:
            collect_samples(value, found)
    elif isinstance(tree, Concat):
        collect_samples(states_format(tree.parts), found)
    elif isinstance(tree, Dynamic):
        found[tree.path] = tree.sample
    return found


def with_version(template: str, version: str | Dynamic) -> str | Concat:
    """``template`` with every ``{data_version}`` replaced by ``version`` (a :class:`Concat` when it is dynamic)."""
    pieces = template.split(DATA_VERSION_PLACEHOLDER)
    if len(pieces) == 1:
        return template
    parts: list[str | Dynamic] = []
    for index, piece in enumerate(pieces):
        if index:
            parts.append(version)
        if piece:
            parts.append(piece)
    if isinstance(version, Dynamic):
        return Concat(tuple(parts))
    return "".join(str(p) for p in parts)


def finalize_sfn(tree: Any, operation: str, where: str) -> dict[str, Any]:
    """The ``Parameters`` of a Step Functions task from a rendered tree, validated against botocore's model of
    ``operation`` with every runtime value replaced by its sample."""
    parameters = to_asl(tree)
    resolved = substitute_sfn_samples(parameters, collect_samples(tree, {}))
    raise_problems(where, [f"botocore: {p}" for p in service_model_problems(operation, resolved)])
    return parameters


def finalize_request(
    problems: list[str], render: Callable[[], dict[str, Any]], operation: str, where: str
) -> dict[str, Any]:
    """A boto3 request: raise the project's ``problems`` first, then render and check botocore's model."""
    raise_problems(where, problems)
    request = render()
    raise_problems(where, [f"botocore: {p}" for p in service_model_problems(operation, request)])
    return request


def iter_dynamic_paths(parameters: Any) -> Iterator[tuple[str, str]]:
    """``(key, path)`` of every ``.$`` entry of rendered Step Functions ``Parameters``."""
    if isinstance(parameters, dict):
        for key, value in parameters.items():
            if key.endswith(".$"):
                yield key, value
            else:
                yield from iter_dynamic_paths(value)
    elif isinstance(parameters, list):
        for value in parameters:
            yield from iter_dynamic_paths(value)
