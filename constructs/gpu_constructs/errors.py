"""The library's error type and small validation helpers shared by every construct.

Every rule raises :class:`ValidationError` (a ``ValueError``) whose message names the
construct path (or config key), the bad value and what is allowed, e.g.::

    Training/Fsx: storage_capacity_gib=1000 is not allowed for SCRATCH_2;
    allowed: 1200, 2400, or a multiple of 2400 up to 1_034_400
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the catalog and the CLI use these helpers without loading the CDK runtime
    from constructs import Construct


class ValidationError(ValueError):
    """Bad input to a construct, config or spec, raised before anything is deployed."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.detail = message
        super().__init__(f"{where}: {message}")


def path_of(scope: Construct | str) -> str:
    """The construct path used as the ``where`` of an error (or the string itself)."""
    if isinstance(scope, str):
        return scope
    return scope.node.path or scope.node.id or "<root>"


#: A string-encoded CDK token: ``${Token[...]}`` (a string) or ``#{Token[...]}`` (an element of a list token).
TOKEN_STRING_RE = re.compile(r"\$\{Token\[[^\]]+\]\}|#\{Token\[[^\]]+\]\}")


def is_token(value: Any) -> bool:
    """True when ``value`` is (or contains) an unresolved CDK token: such values are not validated.

    Strings are recognised by their token markers, so this works without loading the CDK runtime (the
    catalog, the CLI and ``TrainingJobSpec`` use it too); numbers (and strings, for anything the markers
    miss) are asked of ``Token.is_unresolved`` when the CDK is loaded: without it no token can exist.
    """
    if value is None or isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    if isinstance(value, str) and TOKEN_STRING_RE.search(value):
        return True
    if "aws_cdk" not in sys.modules:
        return False
    from aws_cdk import Token

    return bool(Token.is_unresolved(value))


def fail(scope: Construct | str, name: str, value: Any, allowed: str) -> ValidationError:
    """Build the standard error: ``<path>: <name>=<value!r> is not allowed; allowed: <allowed>``."""
    return ValidationError(path_of(scope), f"{name}={value!r} is not allowed; allowed: {allowed}")


def require_one_of(scope: Construct | str, name: str, value: Any, allowed: Iterable[Any]) -> None:
    """Raise unless ``value`` is one of ``allowed`` (tokens pass)."""
    if is_token(value):
        return
    options = list(allowed)
    if value not in options:
        raise fail(scope, name, value, ", ".join(repr(o) for o in options))


def require_range(
    scope: Construct | str,
    name: str,
    value: float | int | None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> None:
    """Raise unless ``minimum <= value <= maximum`` (None skips a bound; tokens pass)."""
    if value is None or is_token(value):
        return
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "-inf" if minimum is None else f"{minimum:g}"
        hi = "inf" if maximum is None else f"{maximum:g}"
        raise fail(scope, name, value, f"a number in [{lo}, {hi}]")
