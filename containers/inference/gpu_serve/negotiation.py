"""HTTP-level media types: the ``Content-Type`` and ``Accept`` handling of the server's front end.

Kept free of numpy and torch: the serving process, which parses HTTP and negotiates types before a request
reaches a model process, imports only this (the decoders and encoders are in :mod:`gpu_serve.codecs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_serve.errors import UnsupportedContentTypeError

JSON = "application/json"
NPY = "application/x-npy"
JPEG = "image/jpeg"
PNG = "image/png"
CSV = "text/csv"
ANY = "*/*"

#: Types the default input_fn decodes.
DEFAULT_CONTENT_TYPES: tuple[str, ...] = (JSON, NPY, JPEG, PNG)
#: Types the default output_fn encodes.
DEFAULT_ACCEPT_TYPES: tuple[str, ...] = (JSON, NPY)
#: Types whose body is handed to input_fn as ``str`` (UTF-8), as the SageMaker inference toolkit does.
UTF8_TYPES: tuple[str, ...] = (JSON, CSV)


def media_type(header: str | None) -> str:
    """``"Application/JSON; charset=utf-8"`` -> ``"application/json"``; missing -> ``""``."""
    if not header:
        return ""
    return header.split(";", 1)[0].strip().lower()


@dataclass(frozen=True)
class MediaRange:
    """One media range of an Accept header: ``type/subtype``, ``type/*`` or ``*/*``, its weight and position."""

    media_type: str
    q: float
    index: int

    def specificity(self, candidate: str) -> int:
        """How closely this range matches ``candidate`` (2 exact, 1 ``type/*``, 0 ``*/*``); -1: no match."""
        if self.media_type == candidate:
            return 2
        if self.media_type == ANY:
            return 0
        if self.media_type.endswith("/*") and candidate.startswith(self.media_type[:-1]):
            return 1
        return -1


def _qvalue(text: str) -> float | None:
    """RFC 9110 section 12.4.2 ``qvalue`` (0 to 1, at most three decimals); ``None`` when malformed."""
    text = text.strip()
    try:
        q = float(text)
    except ValueError:
        return None
    if not 0.0 <= q <= 1.0 or not text[:1].isdigit():  # also refuses nan, inf and "-0"
        return None
    return q


def parse_accept(header: str | None) -> list[MediaRange]:
    """The media ranges of an Accept header, in header order, ``q=0`` ones included.

    A range with a malformed weight (``q=abc``, ``q=2``) is ignored, as a server may ignore what it cannot
    parse; an absent, blank or wholly malformed header gives ``[]`` (meaning: any type is acceptable).
    """
    if not header:
        return []
    ranges: list[MediaRange] = []
    for index, part in enumerate(header.split(",")):
        pieces = [p.strip() for p in part.split(";")]
        mtype = pieces[0].lower()
        if "/" not in mtype:
            continue
        q: float | None = 1.0
        for param in pieces[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                q = _qvalue(value)
                break  # parameters after the weight are accept extensions
        if q is not None:
            ranges.append(MediaRange(mtype, q, index))
    return ranges


def negotiate_accept(header: str | None, default: str, supported: Sequence[str] | None) -> str | None:
    """The response type for an Accept header (RFC 9110 section 12.5.1), or ``None`` when none is acceptable.

    Each candidate type takes the weight of the most specific range that matches it (``application/json``
    over ``application/*`` over ``*/*``), so ``application/json;q=0, */*`` accepts anything but JSON;
    ``q=0`` means "not acceptable" (section 12.4.2). The best weight wins; ties go to the range listed first,
    then to ``default``. ``supported`` lists the types the encoder produces; ``None`` means any type (a
    handler's own ``output_fn`` that declares no ``ACCEPT_TYPES``): then the candidates are ``default`` and
    the ranges the client names, as written (``*/*`` when only a wildcard accepts and ``default`` is refused:
    the handler chooses). Without an Accept header (or only ``*/*``) the answer is ``default`` when
    it is supported, else the first supported type.
    """
    ranges = parse_accept(header)
    if not ranges:
        if supported is None or default in supported:
            return default
        return supported[0] if supported else None
    if supported is None:
        candidates = list(dict.fromkeys([default, *(r.media_type for r in ranges)]))
    else:
        candidates = list(dict.fromkeys(supported))
    best: tuple[float, int, int] | None = None
    chosen: str | None = None
    for candidate in candidates:
        matching = [(r.specificity(candidate), -r.index, r) for r in ranges if r.specificity(candidate) >= 0]
        if not matching:
            continue
        _, _, rule = max(matching, key=lambda m: (m[0], m[1]))
        if rule.q <= 0:
            continue
        rank = (rule.q, -rule.index, 1 if candidate == default else 0)
        if best is None or rank > best:
            best, chosen = rank, candidate
    return chosen


def unsupported_content_type(content_type: str, supported: Sequence[str]) -> UnsupportedContentTypeError:
    shown = content_type or "(none)"
    return UnsupportedContentTypeError(
        f"Content-Type {shown!r} is not supported; supported: {', '.join(supported)}",
        supported=list(supported),
    )
