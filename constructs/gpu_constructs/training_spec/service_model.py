"""Validation against botocore's SageMaker service model: what ``ParamValidator`` checks, plus enums, maximum
lengths and values, and patterns, which it leaves out."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_constructs.errors import is_token

__all__ = ["hyperparameter_limits", "service_model_problems"]


@functools.cache
def _sagemaker_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:  # Java-only syntax (\p{L} ...): botocore's patterns are documentation here
        return None


def service_model_problems(operation: str, params: Mapping[str, Any]) -> list[str]:
    """Problems of ``params`` as a request of SageMaker ``operation`` per botocore's service model.

    botocore's ``ParamValidator`` checks required members, unknown members, types and minimum
    lengths/values; this adds what it leaves out: enums, maximum lengths and values, and patterns
    (full match). Unresolved CDK tokens are skipped.
    """
    from botocore.validate import ParamValidator

    shape = _sagemaker_model().operation_model(operation).input_shape
    report = ParamValidator().validate(_without_tokens(params), shape)
    problems = [line.strip() for line in report.generate_report().splitlines() if line.strip()]
    _strict_walk(params, shape, operation, problems)
    return problems


def _without_tokens(value: Any) -> Any:
    """Stand-ins for unresolved tokens: their real length and value are unknown until deployment
    (token numbers, which the CDK encodes as huge floats, would also fail the integer type check)."""
    if isinstance(value, dict):
        return {k: _without_tokens(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_tokens(v) for v in value]
    if is_token(value):
        return value.ljust(256, "x") if isinstance(value, str) else 1
    return value


def _strict_walk(value: Any, shape: Any, path: str, problems: list[str]) -> None:
    if value is None or is_token(value):
        return
    meta = shape.metadata
    kind = shape.type_name
    if kind == "structure" and isinstance(value, Mapping):
        for name, member in shape.members.items():
            if name in value:
                _strict_walk(value[name], member, f"{path}.{name}", problems)
    elif kind == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: {len(value)} items, more than the maximum {meta['max']}")
        for index, item in enumerate(value):
            _strict_walk(item, shape.member, f"{path}[{index}]", problems)
    elif kind == "map" and isinstance(value, Mapping):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: {len(value)} entries, more than the maximum {meta['max']}")
        for key, item in value.items():
            _strict_walk(key, shape.key, f"{path} key {key!r}", problems)
            _strict_walk(item, shape.value, f"{path}[{key!r}]", problems)
    elif kind == "string" and isinstance(value, str):
        enum = getattr(shape, "enum", None) or []
        if enum and value not in enum:
            problems.append(f"{path}: {value!r} is not one of the allowed values {_short_list(enum)}")
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{path}: {len(value)} characters, more than the maximum {meta['max']}")
        pattern = _compiled(meta["pattern"]) if "pattern" in meta else None
        if pattern is not None and not pattern.fullmatch(value):
            problems.append(f"{path}: {value!r} does not match the pattern {meta['pattern']}")
    elif (
        kind in ("integer", "long")
        and isinstance(value, int)
        and not isinstance(value, bool)
        and "max" in meta
        and value > meta["max"]
    ):
        problems.append(f"{path}: {value} is more than the maximum {meta['max']}")


def _short_list(values: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(v) for v in list(values)[:limit])
    return f"[{shown}, ... ({len(values)} in all)]" if len(values) > limit else f"[{shown}]"


@functools.cache
def hyperparameter_limits() -> tuple[int, int, int]:
    """(most entries, longest key, longest value) of ``CreateTrainingJob.HyperParameters`` per botocore's model.

    botocore 1.44.5, sagemaker: ``HyperParameters`` map ``max: 100``, ``HyperParameterKey`` ``max: 256``,
    ``HyperParameterValue`` ``max: 2500`` (the member's prose still says 256 per value; the shape wins).
    """
    shape = _sagemaker_model().shape_for("HyperParameters")
    return int(shape.metadata["max"]), int(shape.key.metadata["max"]), int(shape.value.metadata["max"])
