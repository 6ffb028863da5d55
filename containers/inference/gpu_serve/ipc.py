"""The wire between the serving process and its model processes: framed messages on a Unix socket pair.

Every message is one frame: a 17-byte header (payload length, kind, request id; little-endian) and the
payload. Request and response bodies travel as raw bytes after a small header of their own, never pickled;
everything else is a JSON object. The module imports neither numpy nor torch: the serving process, which
parses HTTP, loads only this side.

Serving process -> model process: ``CONFIG`` (the :class:`~gpu_serve.config.ServeConfig` fields, first),
``INVOKE`` (content type, accept, request id, body), ``CANCEL`` (the request timed out or its client left).
Closing the socket tells the model process to finish and exit.

Model process -> serving process: ``READY`` (a :class:`HandlerInfo`) or ``FAILED`` (why the model did not
load), then ``RESULT`` (an :class:`Outcome` per invocation), ``BATCH`` (one per forward pass) and ``LOG``
(a JSON log record for the serving process to write, so that stdout has one writer), and ``HEARTBEAT``
(every ``GPU_SERVE_HEARTBEAT_TIMEOUT_S / 4`` s, at most 1 s apart, from a thread of its own: the process is
alive; its payload says how long the model thread has held work without a sign of life), and ``DIED`` (its
model thread died; it exits right after, and takes no more requests meanwhile).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<QBQ")  # payload length, kind, request id
_INVOKE = struct.Struct("<HHH")  # lengths of content type, accept, request id
_RESULT = struct.Struct("<HI")  # status, length of the JSON meta
_BATCH = struct.Struct("<IIdI")  # rows, requests, model_latency_ms, still queued
_HEARTBEAT = struct.Struct("<d")  # seconds the model thread has held work without a sign of life

# Serving process -> model process.
CONFIG = 1
INVOKE = 2
CANCEL = 3
# Model process -> serving process.
READY = 10
FAILED = 11
RESULT = 12
BATCH = 13
LOG = 14
HEARTBEAT = 15
DIED = 16  # the model thread died: the process exits right after (with MODEL_THREAD_DIED_EXIT)

#: Exit code of a model process whose model thread died (EX_SOFTWARE of sysexits.h: an internal error).
MODEL_THREAD_DIED_EXIT = 70

#: Frames up to this size are written with one ``sendall`` (header and payload joined); larger payloads are
#: sent after their header without the copy that joining would make.
_JOIN_BYTES = 256 * 1024


@dataclass(frozen=True)
class HandlerInfo:
    """What the serving process needs to know about a loaded handler: admission facts and the ready line."""

    content_types: tuple[str, ...] | None
    accept_types: tuple[str, ...] | None
    transform: bool
    input_shape: tuple[int, ...] | None
    user_functions: tuple[str, ...]
    device: str
    dtype: str
    torch_threads: int
    cuda_device: str | None
    torch_version: str
    load_s: float
    pid: int

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def from_json(cls, payload: bytes) -> HandlerInfo:
        raw = json.loads(payload)
        for key in ("content_types", "accept_types", "input_shape", "user_functions"):
            if raw.get(key) is not None:
                raw[key] = tuple(raw[key])
        return cls(**raw)


@dataclass
class Outcome:
    """The answer to one invocation: a 200 with its body, or an error status with a message and details.

    ``model_latency_ms`` and the other batch fields are set once the request went through a forward pass
    (also when its ``output_fn`` failed afterwards), for the access log.
    """

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    model_latency_ms: float | None = None
    queue_ms: float | None = None
    batch_size: int | None = None
    batch_requests: int | None = None
    #: Index of the model process that answered, set by the serving process when it has several (not sent).
    model_process: int | None = None
    #: The model thread that held the request is gone: the serving process stops counting this model process as
    #: ready when it reads this answer, before the client gets it, so a ``/ping`` sent after the 500 is never 200.
    worker_died: bool = False

    def encode(self) -> bytes:
        """The ``RESULT`` payload: status, JSON meta, body."""
        meta: dict[str, Any] = {"content_type": self.content_type}
        if self.message:
            meta["message"] = self.message
        if self.details:
            meta["details"] = self.details
        if self.model_latency_ms is not None:
            meta["batch"] = [self.model_latency_ms, self.queue_ms, self.batch_size, self.batch_requests]
        if self.worker_died:
            meta["worker_died"] = True
        raw = json.dumps(meta, default=str).encode()
        return _RESULT.pack(self.status, len(raw)) + raw + self.body

    @classmethod
    def decode(cls, payload: bytes) -> Outcome:
        status, size = _RESULT.unpack_from(payload)
        start = _RESULT.size
        meta = json.loads(payload[start : start + size])
        out = cls(
            status,
            payload[start + size :],
            meta["content_type"],
            meta.get("message", ""),
            meta.get("details") or {},
        )
        if "batch" in meta:
            out.model_latency_ms, out.queue_ms, out.batch_size, out.batch_requests = meta["batch"]
        out.worker_died = bool(meta.get("worker_died"))
        return out


def timeout_outcome(timeout_s: float) -> Outcome:
    """The 504 of a request not answered within ``GPU_SERVE_REQUEST_TIMEOUT_S``."""
    return Outcome(504, message=f"no prediction within GPU_SERVE_REQUEST_TIMEOUT_S={timeout_s:g} s")


def invoke_payload(content_type: str, accept: str, request_id: str, body: bytes) -> list[bytes]:
    """The ``INVOKE`` payload as parts (the body is not copied)."""
    parts = [content_type.encode(), accept.encode(), request_id.encode()]
    return [_INVOKE.pack(*(len(p) for p in parts)), *parts, body]


def parse_invoke(payload: bytes) -> tuple[str, str, str, bytes]:
    """``(content_type, accept, request_id, body)`` of an ``INVOKE`` payload."""
    sizes = _INVOKE.unpack_from(payload)
    pos = _INVOKE.size
    texts = []
    for size in sizes:
        texts.append(payload[pos : pos + size].decode())
        pos += size
    return texts[0], texts[1], texts[2], payload[pos:]


def batch_payload(rows: int, requests: int, model_ms: float, queued: int) -> bytes:
    return _BATCH.pack(rows, requests, model_ms, queued)


def parse_batch(payload: bytes) -> tuple[int, int, float, int]:
    rows, requests, model_ms, queued = _BATCH.unpack(payload)
    return rows, requests, model_ms, queued


def heartbeat_payload(stalled_s: float) -> bytes:
    return _HEARTBEAT.pack(stalled_s)


def parse_heartbeat(payload: bytes) -> float:
    (stalled_s,) = _HEARTBEAT.unpack(payload)
    return float(stalled_s)


def frame(kind: int, request_id: int, payload: bytes) -> bytes:
    return HEADER.pack(len(payload), kind, request_id) + payload


def config_payload(config: Any) -> bytes:
    """A :class:`~gpu_serve.config.ServeConfig` as JSON (paths as strings, tuples as lists)."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return json.dumps(fields, default=lambda v: str(v) if isinstance(v, Path) else list(v)).encode()


class Channel:
    """The model process's end of the socket: blocking reads on one thread, locked writes from any thread."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._file = sock.makefile("rb", buffering=1 << 20)
        self._lock = threading.Lock()
        self._deferred: list[bytes] = []
        self.closed = False

    def read(self) -> tuple[int, int, bytes] | None:
        """The next ``(kind, request id, payload)``; ``None`` once the serving process closed its end."""
        head = self._file.read(HEADER.size)
        if len(head) < HEADER.size:
            return None
        size, kind, request_id = HEADER.unpack(head)
        payload = self._file.read(size) if size else b""
        if len(payload) < size:
            return None
        return kind, request_id, payload

    def send(self, kind: int, request_id: int, payload: bytes) -> bool:
        """Write one frame; False when the serving process is gone (the caller drops the message)."""
        head = HEADER.pack(len(payload), kind, request_id)
        with self._lock:
            if self.closed:
                return False
            try:
                if len(payload) <= _JOIN_BYTES:
                    self._sock.sendall(head + payload)
                else:
                    self._sock.sendall(head)
                    self._sock.sendall(payload)
            except OSError:
                self.closed = True
                return False
        return True

    def defer(self, frame_bytes: bytes) -> None:
        """Hold a frame back until the next :meth:`send_frames` (batch records ride with the results)."""
        with self._lock:
            self._deferred.append(frame_bytes)

    def send_frames(self, frames: list[bytes]) -> bool:
        """Write the held-back frames and ``frames`` (made by :func:`frame`) with one ``sendall``."""
        with self._lock:
            if self._deferred:
                frames = [*self._deferred, *frames]
                self._deferred = []
            if not frames:
                return True
            if self.closed:
                return False
            try:
                self._sock.sendall(frames[0] if len(frames) == 1 else b"".join(frames))
            except OSError:
                self.closed = True
                return False
        return True

    def close(self) -> None:
        with self._lock:
            self.closed = True
        self._file.close()
        self._sock.close()
