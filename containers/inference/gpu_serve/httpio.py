"""A small HTTP/1.1 layer on asyncio streams: request heads, bodies (sized or chunked), responses.

Only what a SageMaker model container needs: keep-alive, ``Content-Length`` and chunked bodies,
``Expect: 100-continue``, and a lingering close for responses sent before the body was read.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TypeVar
from urllib.parse import urlsplit

_T = TypeVar("_T")

#: Largest request head (request line + headers).
MAX_HEAD_BYTES = 64 * 1024
#: After a response that leaves the body unread, read and drop what the client still sends for at most
#: this long before closing, so that it reads the response instead of a connection reset.
LINGER_S = 2.0
LINGER_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024


class HttpError(Exception):
    """A request that cannot be parsed: answered with ``status`` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(Exception):
    """The client closed the connection (or stalled past the timeout) before its request was complete."""


async def within(seconds: float, awaitable: Awaitable[_T]) -> _T:
    """``await awaitable``, or raise the builtin ``TimeoutError`` after ``seconds``.

    ``asyncio.timeout`` is new in Python 3.11; on 3.10 (the SageMaker notebooks' conda environments run
    ``gpuctl serve``) ``asyncio.wait_for`` raises ``asyncio.TimeoutError``, a different class there.
    """
    if sys.version_info >= (3, 11):  # noqa: UP036 (this module also runs on 3.10)
        async with asyncio.timeout(seconds):  # novermin
            return await awaitable
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.TimeoutError:
        raise TimeoutError(f"no progress within {seconds} s") from None


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return urlsplit(self.target).path or "/"

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    @property
    def keep_alive(self) -> bool:
        conn = (self.header("connection") or "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn

    @property
    def expects_continue(self) -> bool:
        return self.version == "HTTP/1.1" and (self.header("expect") or "").lower() == "100-continue"


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request head on the connection; ``None`` when the client closed it cleanly."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise ClientGone() from None
    except asyncio.LimitOverrunError:
        raise HttpError(431, f"request head is over {MAX_HEAD_BYTES} bytes") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            raise HttpError(400, f"malformed header line {line[:100]!r}")
        key = name.lower()
        value = value.strip()
        if key in headers:
            if key == "content-length" and headers[key] != value:
                raise HttpError(400, "conflicting Content-Length headers")
            if key != "content-length":
                headers[key] = f"{headers[key]}, {value}"
        else:
            headers[key] = value
    if "transfer-encoding" in headers:
        if "content-length" in headers:
            # RFC 9112 section 6.3: such a message "ought to be handled as an error"; a front end that
            # frames it by Content-Length and a back end that frames it by the chunks disagree on where
            # the next request starts (request smuggling). Refused, and the connection closed.
            raise HttpError(
                400,
                f"request has both Content-Length ({headers['content-length'][:40]!r}) and Transfer-Encoding "
                f"({headers['transfer-encoding'][:40]!r}); send only one of them",
            )
        if version == "HTTP/1.0":
            # RFC 9112 section 6.1: Transfer-Encoding in an HTTP/1.0 request means faulty framing.
            raise HttpError(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request; send Content-Length")
    return Request(method, target, version, headers)


async def read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    """A ``Transfer-Encoding: chunked`` body; :class:`HttpError` 413 as soon as it passes ``limit``."""
    parts: list[bytes] = []
    total = 0
    try:
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise HttpError(400, f"bad chunk size line {line[:40]!r}") from None
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > limit:
                raise HttpError(413, f"chunked body is over the limit of {limit} bytes")
            parts.append(await reader.readexactly(size))
            if await reader.readexactly(2) != b"\r\n":
                raise HttpError(400, "chunk not followed by CRLF")
    except (asyncio.IncompleteReadError, ConnectionError):
        raise ClientGone() from None
    except asyncio.LimitOverrunError:
        raise HttpError(400, "chunk size line too long") from None


async def discard(reader: asyncio.StreamReader, length: int) -> None:
    """Read and drop ``length`` body bytes."""
    remaining = length
    try:
        while remaining > 0:
            chunk = await reader.read(min(_CHUNK, remaining))
            if not chunk:
                raise ClientGone()
            remaining -= len(chunk)
    except ConnectionError:
        raise ClientGone() from None


def response(
    status: int,
    body: bytes,
    content_type: str,
    headers: dict[str, str] | None = None,
    *,
    close: bool = False,
) -> bytes:
    """A complete HTTP/1.1 response (head and body in one buffer: one write, one segment when small)."""
    head = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        "Server: gpu-serve",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    for key, value in (headers or {}).items():
        head.append(f"{key}: {value}")
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + body


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


async def _drop(reader: asyncio.StreamReader, limit: int) -> None:
    dropped = 0
    while dropped < limit:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            break
        dropped += len(chunk)


async def linger_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Half-close, drop what the client still sends (bounded in time and bytes), then close."""
    try:
        await within(LINGER_S, writer.drain())
        if writer.can_write_eof():
            writer.write_eof()
        await within(LINGER_S, _drop(reader, LINGER_BYTES))
    except (TimeoutError, ConnectionError, OSError):
        pass
    writer.close()
