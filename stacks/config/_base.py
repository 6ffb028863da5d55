"""Shared pieces of the config model: the error type, the strict base model and the shared field types.

Section modules build their fields from these, so each rule is written once:

- :class:`ConfigError`: the one error every config problem becomes (file, key, value, what is allowed).
- :class:`StrictModel`: the base of every section: unknown keys are errors, values are frozen and strictly typed.
- :func:`Check`: an ``Annotated`` marker for a rule no ``Field`` constraint can say (a predicate and a message).
- :class:`Allowed`: an ``Annotated`` marker that turns a failed declarative constraint of the annotated type
  (``Field(ge=, le=, gt=, lt=, multiple_of=, pattern=)``, a ``Literal``, an ``AfterValidator``) into the project's
  wording ``allowed: ...``; the text is derived from the constraints (``1..1000``, ``0 or more``, ``null or one
  of 1, 7``), ``unit`` follows it, ``message`` replaces it (a pattern needs one). Example::

      max_image_count: Annotated[int, Field(ge=1, le=1000), Allowed()] = Field(10, description="...")
      # images.max_image_count: 0: allowed: 1..1000

  More: ``Annotated[int, Field(ge=60, le=3600), Allowed("seconds")]`` -> ``allowed: 60..3600 seconds``;
  ``Annotated[float, Field(gt=0, le=100), Allowed()]`` -> ``allowed: > 0 and <= 100``;
  ``Annotated[int, Field(ge=5, le=1440, multiple_of=5), Allowed()]`` -> ``allowed: a multiple of 5 from 5 to 1440``.

- Field types (each validates itself, so a field needs no validator): :data:`Retention` (a CloudWatch Logs
  retention, from ``gpu_constructs.retention``),
  :data:`Days` (whole days >= 1), :data:`AccountId` (12 digits), :data:`CdkQualifier` (bootstrap qualifier),
  :data:`S3KeyPrefix` (a relative S3 key prefix, may be ''), :data:`EmailList` (e-mail addresses).
- :func:`duplicates`, :func:`known_regions`, :func:`available_envs`, :data:`CONFIG_DIR`, :data:`DEFAULT_ENV`,
  :data:`ENV_NAME_RE`.

Nothing here imports aws_cdk: loading a config stays fast and works without the CDK runtime.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from gpu_constructs.retention import LOG_RETENTION_DAYS
from gpu_constructs.s3_keys import KEY_PREFIX_ALLOWED, is_key_prefix

CONFIG_DIR = Path(__file__).resolve().parent.parent.parent / "config"
DEFAULT_ENV = "dev"
#: An environment name: the stem of its ``config/<env>.yaml``.
ENV_NAME_RE = re.compile(r"[a-z][a-z0-9-]*")


class ConfigError(ValueError):
    """A configuration file is missing or invalid. The message names file, key, value and what is allowed."""


@functools.cache
def known_regions() -> frozenset[str]:
    """Every region botocore knows, in all partitions, from its bundled endpoint data (no network)."""
    import botocore.session

    session = botocore.session.get_session()
    regions: set[str] = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions("ec2", partition_name=partition))
    return frozenset(regions)


def available_envs(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in config_dir.glob("*.yaml"))


def duplicates(values: Sequence[Any]) -> list[Any]:
    """The values listed more than once, sorted (for "list each ... once" messages)."""
    return sorted({v for v in values if values.count(v) > 1})


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# -- the "allowed: ..." wording of declarative constraints ----------------------------------------------------

#: Errors of a constraint (a value of the right type that the rule refuses); type errors keep pydantic's text.
_CONSTRAINT_ERRORS = frozenset(
    {
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
        "multiple_of",
        "literal_error",
        "string_pattern_mismatch",
        "string_too_short",
        "string_too_long",
        "too_short",
        "too_long",
        "value_error",
    }
)


def _bounds_text(schema: CoreSchema) -> str:
    """What a numeric or literal schema allows, as the project writes it."""
    kind = schema["type"]
    if kind == "nullable":
        return f"null or {_bounds_text(schema['schema'])}"
    if kind == "literal":
        return "one of " + ", ".join(str(v) for v in schema["expected"])
    limits: dict[str, Any] = {k: v for k, v in schema.items() if k in ("ge", "gt", "le", "lt", "multiple_of")}
    low, high = limits.get("ge"), limits.get("le")
    if "multiple_of" in limits and low is not None and high is not None:
        return f"a multiple of {limits['multiple_of']} from {low} to {high}"
    if low is not None and high is not None and set(limits) == {"ge", "le"}:
        return f"{low}..{high}"
    bounds = [(k, v) for k, v in limits.items() if k != "multiple_of"]
    if len(bounds) == 1:
        (key, value), *_ = bounds
        return {"ge": "{} or more", "gt": "> {}", "le": "{} or less", "lt": "< {}"}[key].format(value)
    if bounds:
        return " and ".join({"ge": ">= {}", "gt": "> {}", "le": "<= {}", "lt": "< {}"}[k].format(v) for k, v in bounds)
    raise TypeError(f"Allowed() cannot describe a {kind} schema: pass message=")


@dataclass(frozen=True)
class Allowed:
    """``Annotated`` marker: a failed constraint of the annotated type reads ``allowed: <constraints> <unit>``.

    Place it last in the ``Annotated`` (it describes and wraps everything before it). ``message`` replaces the
    derived text entirely (for patterns, or a wording tests and users rely on).
    """

    unit: str = ""
    message: str | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        schema = handler(source)
        message = self.message or " ".join(filter(None, ("allowed:", _bounds_text(schema), self.unit)))

        def check(value: Any, validate: core_schema.ValidatorFunctionWrapHandler) -> Any:
            try:
                return validate(value)
            except PydanticValidationError as exc:
                if all(error["type"] in _CONSTRAINT_ERRORS for error in exc.errors()):
                    raise PydanticCustomError("allowed", "{allowed}", {"allowed": message}) from None
                raise

        return core_schema.no_info_wrap_validator_function(check, schema)


def Check(predicate: Callable[[Any], bool], message: str) -> AfterValidator:
    """``Annotated`` marker for a rule no ``Field`` constraint can say: ``predicate`` false -> ``message``."""

    def check(value: Any) -> Any:
        if not predicate(value):
            raise ValueError(message)
        return value

    return AfterValidator(check)


# -- shared field types -----------------------------------------------------------------------------------------


def check_retention(value: int) -> int:
    """``value`` when CloudWatch Logs accepts it as a retention in days (the library's table)."""
    if value not in LOG_RETENTION_DAYS:
        raise ValueError(f"must be one of the CloudWatch Logs retention values {list(LOG_RETENTION_DAYS)}")
    return value


#: A CloudWatch Logs retention in days: one of ``gpu_constructs.retention.LOG_RETENTION_DAYS``.
Retention = Annotated[int, AfterValidator(check_retention), Field(description="CloudWatch Logs retention in days")]

#: A whole number of days, 1 or more (S3 lifecycle rules).
Days = Annotated[int, Field(ge=1), Allowed(message="must be a whole number of days >= 1")]

#: A 12-digit AWS account id (a string: YAML would drop leading zeros of a number).
AccountId = Annotated[
    str, Field(pattern=r"^\d{12}$"), Allowed(message="must be a 12-digit AWS account id (quote it in YAML) or null")
]

#: The qualifier the target account was bootstrapped with (``cdk bootstrap --qualifier``).
CdkQualifier = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_-]{1,10}$"),
    Allowed(message="must be 1-10 letters, digits, '_' or '-' (cdk bootstrap --qualifier)"),
]

#: A relative S3 key prefix ('' = the whole bucket): the library's rule, ``gpu_constructs.s3_keys.is_key_prefix``.
S3KeyPrefix = Annotated[
    str,
    Check(is_key_prefix, "not a relative key prefix"),
    Allowed(message=f"must be {KEY_PREFIX_ALLOWED}"),
]

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def _check_emails(value: tuple[str, ...]) -> tuple[str, ...]:
    bad = [v for v in value if not _EMAIL.fullmatch(v)]
    if bad:
        raise ValueError(f"{bad} are not e-mail addresses; allowed: addresses such as ml-team@example.com")
    return value


#: E-mail addresses (notification subscriptions); the error lists every bad entry.
EmailList = Annotated[tuple[str, ...], AfterValidator(_check_emails)]
