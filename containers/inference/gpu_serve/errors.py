"""Errors that carry an HTTP status.

Handler code may raise these (or any exception with an integer ``status_code`` attribute, such as the
SageMaker inference toolkit's ``BaseInferenceToolkitError``) to choose the status of the response.
Every other exception from ``input_fn`` becomes a 400, and from ``predict_fn``/``output_fn`` a 500.
"""

from __future__ import annotations

from typing import Any


class ServeError(Exception):
    """Base error of the server: an HTTP status, a message, and optional JSON details."""

    status_code = 500

    def __init__(self, message: str, *, status_code: int | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        self.details = details


class BadRequestError(ServeError):
    """Malformed body or a tensor of the wrong shape or dtype (400)."""

    status_code = 400


class UnsupportedContentTypeError(ServeError):
    """The request's Content-Type cannot be decoded (415)."""

    status_code = 415


class UnsupportedAcceptError(ServeError):
    """No type in the request's Accept header can be produced (406)."""

    status_code = 406


class PayloadTooLargeError(ServeError):
    """The body is larger than the configured limit (413)."""

    status_code = 413


class ModelLoadError(ServeError):
    """The model directory or the handler module cannot be loaded (the server exits)."""

    status_code = 500


class ModelWorkerError(ServeError):
    """The model thread or model process that held (or would run) a request died or hung (500).

    The request is answered at once with this message, never left to run into the request timeout.
    """

    status_code = 500


class ConfigError(ValueError):
    """A bad environment variable or option; the message names the variable, the value and what is allowed."""


def status_of(exc: BaseException, default: int) -> int:
    """The HTTP status an exception asks for (its ``status_code``), else ``default``."""
    code = getattr(exc, "status_code", None)
    if isinstance(code, int) and 400 <= code <= 599:
        return code
    return default
