"""Small HTTP clients for the server tests: one request per connection, or raw bytes on a socket."""

from __future__ import annotations

import http.client
import io
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    conn: http.client.HTTPConnection | None = None,
) -> Reply:
    own = conn is None
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    try:
        c.request(method, path, body=body, headers=headers or {})
        resp = c.getresponse()
        data = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data, time.monotonic() - t0)
    finally:
        if own:
            c.close()


def invoke(
    port: int,
    payload: Any,
    content_type: str = "application/json",
    accept: str | None = None,
    **kwargs: Any,
) -> Reply:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"Content-Type": content_type}
    if accept:
        headers["Accept"] = accept
    return request(port, "POST", "/invocations", body, headers, **kwargs)


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    """Send raw bytes, read until the server closes (or the timeout); return what came back and the time."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        t0 = time.monotonic()
        sock.sendall(data)
        chunks = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks), time.monotonic() - t0


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])
