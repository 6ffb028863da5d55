"""The SageMaker-compatible HTTP server: ``GET /ping``, ``POST /invocations``, ``GET /execution-parameters``.

Processes (``GPU_SERVE_MODEL_PROCESSES``):

- the **HTTP process** (this module; PID 1 in the container) runs one asyncio event loop that accepts
  connections, parses HTTP, admits requests (limits, content negotiation), answers ``/ping`` at once, writes
  responses and every log line. By default it imports neither torch nor numpy;
- **model processes** (:mod:`gpu_serve.model_process`, :mod:`gpu_serve.worker`; by default one per visible
  GPU, one on a CPU or single-GPU host) load the model and run ``input_fn``, the batched ``predict_fn``
  (:mod:`gpu_serve.batching`) and ``output_fn``. Each has its own GIL, so neither the event loop nor the
  forward pass waits for the other's Python code; requests go to the model process with the fewest in it;
- with ``GPU_SERVE_MODEL_PROCESSES=0`` there is one process: the model runs on a thread of this one
  (:mod:`gpu_serve.inprocess`), sharing the loop's GIL.

One loop instead of a thread per connection: on few cores, dozens of request threads spend more time
handing the GIL to each other than working (measured: half the throughput at 32 concurrent clients).

Limits, each answered without reading the body (then the connection is closed, after a short lingering
read so that the client sees the response):

- body over ``GPU_SERVE_MAX_BODY_BYTES`` (Content-Length, or while reading a chunked body): 413;
- a Content-Type the handler cannot decode: 415; an Accept it cannot encode: 406;
- more than ``GPU_SERVE_QUEUE_SIZE`` invocations inside the server: 503 with Retry-After;
- more than ``GPU_SERVE_MAX_CONNECTIONS`` open connections: the extra connection carries one request and is
  closed; ``GET /ping`` on it is answered as usual (SageMaker takes an instance whose health check fails
  out of service), anything else gets 503 with Retry-After;
- malformed body or wrong shape: 400 with a JSON error that says what was expected;
- exception in predict_fn/output_fn: 500, logged with its traceback; the model thread goes on;
- no answer within ``GPU_SERVE_REQUEST_TIMEOUT_S``: 504;
- the model thread or model process holding the request died or hung: 500 at once, saying so; ``/ping``
  answers 503 while no model worker can serve (see :mod:`gpu_serve.model_process`, :mod:`gpu_serve.inprocess`).

SIGTERM (or SIGINT): ``/ping`` turns 503, new invocations get 503, in-flight ones finish (at most
``GPU_SERVE_DRAIN_TIMEOUT_S``), then the model processes are stopped and the server exits 0.

A request counts as answered once its whole response is handed to the kernel (each connection's write
buffer limit is 0, so ``drain()`` returns only then). A response cut off before that, by a client that
closed the connection or by the end of the drain, is logged and counted as such: status 499 (client) or
503 (shutdown), with ``cut_off``, ``sent_status`` and ``error`` fields, never as a 200.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Coroutine
from http import HTTPStatus
from typing import Any, Protocol

from gpu_serve import httpio, negotiation
from gpu_serve.config import ServeConfig
from gpu_serve.errors import (
    BadRequestError,
    PayloadTooLargeError,
    ServeError,
    UnsupportedAcceptError,
)
from gpu_serve.ipc import HandlerInfo, Outcome
from gpu_serve.metrics import Counters, JsonLogger

#: A keep-alive connection idle this long is closed; a body that stalls this long is abandoned.
IDLE_TIMEOUT_S = 120.0
#: A connection over GPU_SERVE_MAX_CONNECTIONS must send its request head within this time.
OVER_LIMIT_HEAD_TIMEOUT_S = 5.0
#: After the drain, how long the requests still running get to log their cut-off before the server stops.
CLOSE_WAIT_S = 2.0
#: Status logged for a response cut off because the client closed the connection (nginx's convention).
CLIENT_CLOSED_STATUS = 499

BatchCallback = Callable[[int, int, float, int], None]
"""``on_batch(rows, requests, model_latency_ms, still_queued)``: a model thread finished a forward pass."""


class ModelBackend(Protocol):
    """Where the model runs: model processes (:class:`~gpu_serve.model_process.ModelProcesses`) or a thread
    of this process (:class:`~gpu_serve.inprocess.InProcessModel`)."""

    kind: str

    @property
    def available(self) -> bool: ...

    @property
    def unavailable_state(self) -> str: ...

    @property
    def unavailable_message(self) -> str: ...

    def start(self, on_ready: Callable[[HandlerInfo], None], on_failed: Callable[[], None]) -> None: ...

    def describe(self) -> dict[str, object]: ...

    def expect(self) -> None: ...

    def abandon(self) -> None: ...

    def invoke(
        self, body: bytes, ctype: str, accept: str, request_id: str, deadline: float
    ) -> Coroutine[Any, Any, Outcome]: ...

    async def stop(self) -> None: ...


def make_backend(
    config: ServeConfig, log: JsonLogger, on_batch: Callable[[int, int, float, int], None]
) -> ModelBackend:
    """The backend ``GPU_SERVE_MODEL_PROCESSES`` asks for (torch is imported only for the in-process one)."""
    if config.model_processes == 0:
        from gpu_serve.inprocess import InProcessModel

        return InProcessModel(config, log, on_batch)
    from gpu_serve.model_process import ModelProcesses

    return ModelProcesses(config, log, on_batch)


async def _read_body(reader: asyncio.StreamReader, length: int | None, limit: int) -> bytes:
    """A sized body (``length``) or a chunked one (``None``, at most ``limit`` bytes)."""
    if length is None:
        return await httpio.read_chunked(reader, limit)
    return await reader.readexactly(length) if length else b""


class _Exchange:
    """One request's response status and the fields of its access-log line."""

    __slots__ = ("close", "complete", "cut", "fields", "request_id", "start", "status")

    def __init__(self, request_id: str) -> None:
        self.start = time.monotonic()
        self.request_id = request_id
        self.status = 0  # the status of the response being written (0: none yet)
        self.complete = False  # the whole response was handed to the kernel
        self.cut: str | None = None  # why the exchange ended early: "client", "shutdown" or "error"
        self.close = False
        self.fields: dict[str, Any] = {"bytes_in": 0, "bytes_out": 0}


class ServeApp:
    """One server: config, model backend, counters, admission, and the asyncio HTTP front end."""

    def __init__(self, config: ServeConfig, logger: JsonLogger | None = None) -> None:
        self.config = config
        self.log = logger or JsonLogger()
        self.counters = Counters()
        self.backend = make_backend(config, self.log, self._on_batch)
        self.info: HandlerInfo | None = None  # what the loaded handler decodes and encodes
        self.state = "loading"  # loading -> ready | failed; then draining
        self.port: int | None = None
        self._inflight = 0
        self._connections: set[asyncio.StreamWriter] = set()  # counted against GPU_SERVE_MAX_CONNECTIONS
        self._over_limit: set[asyncio.StreamWriter] = set()  # one request each, then closed
        self._tasks: set[asyncio.Task[None]] = set()  # one per open connection
        self._closing = False  # the drain is over: connections are being closed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._stop: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def run(self, *, install_signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (or :meth:`request_stop`), drain, and return the exit code."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._stop = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        config = self.config
        try:
            server = await asyncio.start_server(
                self._connection, config.host, config.port, limit=httpio.MAX_HEAD_BYTES, backlog=1024
            )
        except OSError as exc:
            self.log.log("error", message=f"cannot listen on {config.host}:{config.port}: {exc}")
            return 1
        self.port = int(server.sockets[0].getsockname()[1])
        self.log.log(
            "start",
            host=config.host,
            port=self.port,
            pid=os.getpid(),
            model_dir=str(config.model_dir),
            model_processes="auto" if config.model_processes is None else config.model_processes,
        )
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
        self.backend.start(self._loaded, self._load_failed)
        metrics_task = asyncio.create_task(self._metrics_loop()) if config.metrics_interval_s > 0 else None

        await self._stop.wait()
        code = 1 if self.state == "failed" else 0
        self.state = "draining"
        self.log.log("draining", inflight=self._inflight, drain_timeout_s=config.drain_timeout_s)
        drained = True
        try:
            await httpio.within(config.drain_timeout_s, self._idle.wait())
        except TimeoutError:
            drained = False
            self.log.log("warning", message=f"drain timed out with {self._inflight} requests in flight")
        server.close()
        await self._close_connections()
        if metrics_task is not None:
            metrics_task.cancel()
        await self.backend.stop()
        self.log.log("stop", exit_code=code, drained=drained, **self.counters.snapshot())
        return code

    async def _close_connections(self) -> None:
        """Close every connection; a request still running is cut off, and logged so, before ``stop``."""
        self._closing = True
        for writer in (*self._connections, *self._over_limit):
            writer.close()
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)

    def request_stop(self) -> None:
        """Start the drain from any thread (what SIGTERM does)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.metrics_interval_s)
            self.log.log("metrics", **self.counters.snapshot(), inflight=self._inflight, state=self.state)

    def _load_failed(self) -> None:
        self.state = "failed"
        if self._stop is not None:
            self._stop.set()

    def _loaded(self, info: HandlerInfo) -> None:
        self.info = info
        if self.state == "loading":
            self.state = "ready"
        self.log.log(
            "ready",
            load_s=info.load_s,
            device=info.device,
            dtype=info.dtype,
            torch_threads=info.torch_threads,
            torch_version=info.torch_version,
            cuda_device=info.cuda_device,
            handler_functions=list(info.user_functions),
            input_shape=list(info.input_shape) if info.input_shape else None,
            content_types=list(info.content_types) if info.content_types else "any",
            accept_types=list(info.accept_types) if info.accept_types else "any",
            max_batch_size=self.config.max_batch_size,
            max_batch_delay_ms=self.config.max_batch_delay_ms,
            queue_size=self.config.queue_size,
            **self.backend.describe(),
        )

    def _on_batch(self, rows: int, requests: int, model_ms: float, queued: int) -> None:
        """A forward pass finished: on the event loop (from a model process) or on the in-process model thread."""
        self.counters.record_batch(rows)
        if not self.config.access_log:
            return
        fields = {"batch_size": rows, "requests": requests, "model_latency_ms": round(model_ms, 3), "queued": queued}
        if self._loop is not None and threading.get_ident() == self._loop_thread:
            self._log_later("batch", fields)
        else:
            self.log.log("batch", **fields)

    def _log_later(self, event: str, fields: dict[str, Any]) -> None:
        """On the loop: a log line written with the others of this pass of the loop (one write for them all)."""
        if self.log.defer(event, **fields) and self._loop is not None:
            self._loop.call_soon(self.log.flush_deferred)

    # -- connections ---------------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # drain() returns only once the kernel has taken every byte: "answered" means written, and a
        # response cut off by a disconnect or the shutdown is noticed (asyncio's default returns at 64 KiB).
        writer.transport.set_write_buffer_limits(high=0)
        over_limit = len(self._connections) >= self.config.max_connections
        members = self._over_limit if over_limit else self._connections
        members.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if over_limit:
                await self._over_limit_request(reader, writer)
                return
            while True:
                try:
                    req = await httpio.within(IDLE_TIMEOUT_S, httpio.read_request(reader))
                except httpio.HttpError as exc:
                    self.log.log("warning", message=f"malformed request: {exc.message}", status=exc.status)
                    payload = {"status": exc.status, "error": HTTPStatus(exc.status).phrase, "message": exc.message}
                    writer.write(
                        httpio.response(exc.status, json.dumps(payload).encode(), negotiation.JSON, close=True)
                    )
                    await httpio.linger_close(reader, writer)
                    return
                if req is None:
                    return
                if not await self._dispatch(req, reader, writer):
                    return
        except (TimeoutError, httpio.ClientGone, ConnectionError):
            pass
        except Exception as exc:
            self.log.log(
                "error",
                message="unhandled error on a connection",
                error_type=type(exc).__name__,
                traceback=traceback.format_exc(),
            )
        finally:
            members.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    def _too_many_connections(self) -> ServeError:
        limit = self.config.max_connections
        return ServeError(
            f"too many connections: {len(self._connections)} open, GPU_SERVE_MAX_CONNECTIONS={limit}; "
            "retry later (GET /ping is still answered)",
            status_code=503,
        )

    async def _over_limit_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection over ``GPU_SERVE_MAX_CONNECTIONS``: one request, then close.

        ``GET /ping`` is answered as on any connection: SageMaker health-checks ``/ping`` and takes an
        instance that fails it out of service, which a busy server must not provoke. Anything else gets 503
        with Retry-After. The head must come within ``OVER_LIMIT_HEAD_TIMEOUT_S``.
        """
        try:
            req = await httpio.within(OVER_LIMIT_HEAD_TIMEOUT_S, httpio.read_request(reader))
        except (TimeoutError, httpio.HttpError):
            err = self._too_many_connections()
            payload = {"status": 503, "error": "Service Unavailable", "message": err.message}
            headers = {"Retry-After": str(self.config.retry_after_s)}
            writer.write(httpio.response(503, json.dumps(payload).encode(), negotiation.JSON, headers, close=True))
            await httpio.linger_close(reader, writer)
            return
        if req is not None:
            await self._dispatch(req, reader, writer, over_limit=True)

    async def _dispatch(
        self,
        req: httpio.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        over_limit: bool = False,
    ) -> bool:
        """Handle one request; True when the connection stays open for the next one."""
        rid = req.header("x-request-id") or req.header("x-amzn-requestid") or uuid.uuid4().hex
        ex = _Exchange(rid[:128])
        path = req.path
        try:
            if over_limit:
                ex.close = True
            if over_limit and (req.method, path) != ("GET", "/ping"):
                await self._refuse(req, reader, writer, ex, self._too_many_connections(), None, retry_after=True)
            elif req.method == "POST" and path == "/invocations":
                await self._invocations(req, reader, writer, ex)
            elif req.method == "GET" and path in ("/ping", "/execution-parameters"):
                if req.header("transfer-encoding") or req.header("content-length") not in (None, "0"):
                    ex.close = True  # a GET with a body: answer, then close rather than parse the body
                if path == "/ping":
                    await self._ping(req, writer, ex)
                else:
                    await self._execution_parameters(req, writer, ex)
            elif path in ("/invocations", "/ping", "/execution-parameters"):
                allow = "POST" if path == "/invocations" else "GET"
                err = ServeError(f"{req.method} {path} is not allowed; use {allow}", status_code=405)
                await self._refuse(req, reader, writer, ex, err, self._length_or_none(req), {"Allow": allow})
            else:
                err = ServeError(
                    f"no route {req.method} {path!r}; routes: GET /ping, POST /invocations", status_code=404
                )
                await self._refuse(req, reader, writer, ex, err, self._length_or_none(req))
        except (httpio.ClientGone, ConnectionError):
            ex.close = True
            ex.cut = "shutdown" if self._closing else "client"  # closing: the server closed the socket
        except asyncio.CancelledError:  # the drain is over (or the loop stops)
            ex.close = True
            ex.cut = "shutdown"
            raise
        except Exception:  # logged with its traceback by _connection
            ex.close = True
            ex.cut = "error"
            raise
        finally:
            self._finish(req, path, ex)
        return not ex.close and req.keep_alive and self.state != "draining"

    def _cut_off_status(self, ex: _Exchange) -> int:
        """The status to log for an exchange whose response was not fully written, with the reason."""
        sent = ex.status
        what = f"a {sent} response was cut off" if sent else "no response was sent"
        ex.fields["cut_off"] = ex.cut
        if sent:
            ex.fields["sent_status"] = sent
        if ex.cut == "client":
            ex.fields["error"] = f"the client closed the connection before the response was complete ({what})"
            return CLIENT_CLOSED_STATUS
        if ex.cut == "shutdown":
            ex.fields["error"] = (
                f"the server shut down before the response was complete ({what}; "
                f"GPU_SERVE_DRAIN_TIMEOUT_S={self.config.drain_timeout_s:g})"
            )
            return 503
        ex.fields["error"] = f"unhandled server error ({what}); the traceback is in the error line"
        return 500

    def _finish(self, req: httpio.Request, path: str, ex: _Exchange) -> None:
        status = ex.status
        if ex.cut is not None and not ex.complete:
            status = self._cut_off_status(ex)
        self.counters.record_response(path, status)
        if not self.config.access_log or (path == "/ping" and status == 200):
            return
        # Written once this pass of the event loop has answered everything that was ready.
        self._log_later(
            "access",
            {
                "method": req.method,
                "path": path,
                "status": status,
                "latency_ms": round((time.monotonic() - ex.start) * 1000.0, 3),
                "request_id": ex.request_id,
                **ex.fields,
            },
        )

    # -- writing -------------------------------------------------------------------------------------------
    async def _send(
        self,
        req: httpio.Request,
        writer: asyncio.StreamWriter,
        ex: _Exchange,
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
        *,
        close: bool = False,
    ) -> None:
        ex.status = status
        ex.fields["bytes_out"] = len(body)
        ex.close = ex.close or close or not req.keep_alive or self.state == "draining"
        all_headers = {"X-Request-Id": ex.request_id, **(headers or {})}
        writer.write(httpio.response(status, body, content_type, all_headers, close=ex.close))
        try:
            if writer.transport.get_write_buffer_size():  # the kernel did not take it all at once
                await httpio.within(IDLE_TIMEOUT_S, writer.drain())
            elif writer.transport.is_closing():
                raise ConnectionResetError("the client closed the connection")
        except (ConnectionError, TimeoutError):  # a client that reads nothing for this long is gone too
            raise httpio.ClientGone() from None
        ex.complete = True

    async def _send_error(
        self,
        req: httpio.Request,
        writer: asyncio.StreamWriter,
        ex: _Exchange,
        status: int,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        retry_after: bool = False,
        close: bool = False,
    ) -> None:
        payload = {"status": status, "error": HTTPStatus(status).phrase, "message": message, **(details or {})}
        ex.fields["error"] = message
        extra = dict(headers or {})
        if retry_after:
            extra["Retry-After"] = str(self.config.retry_after_s)
        body = json.dumps(payload, default=str).encode()
        await self._send(req, writer, ex, status, body, negotiation.JSON, extra, close=close)

    async def _refuse(
        self,
        req: httpio.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        ex: _Exchange,
        err: ServeError,
        length: int | None,
        headers: dict[str, str] | None = None,
        *,
        retry_after: bool = False,
    ) -> None:
        """Answer without using the body: drop a small one (the connection stays usable), else close."""
        keep = length is not None and not req.expects_continue
        if keep and length:
            try:
                await httpio.within(IDLE_TIMEOUT_S, httpio.discard(reader, length))
            except TimeoutError:
                raise httpio.ClientGone() from None
        await self._send_error(
            req,
            writer,
            ex,
            err.status_code,
            err.message,
            details=err.details,
            headers=headers,
            retry_after=retry_after,
            close=not keep,
        )
        if not keep:
            await httpio.linger_close(reader, writer)

    # -- routes ----------------------------------------------------------------------------------------------
    async def _ping(self, req: httpio.Request, writer: asyncio.StreamWriter, ex: _Exchange) -> None:
        state = self.state
        if state == "ready" and not self.backend.available:
            state = self.backend.unavailable_state  # e.g. "restarting": no model process is ready; "hung"
        status = 200 if state == "ready" else 503
        body = json.dumps({"status": "healthy" if status == 200 else state}).encode()
        await self._send(req, writer, ex, status, body, negotiation.JSON)

    async def _execution_parameters(self, req: httpio.Request, writer: asyncio.StreamWriter, ex: _Exchange) -> None:
        # Asked once by SageMaker batch transform: one record per request, as many in parallel as a batch.
        mib = max(1, min(100, self.config.max_body_bytes // (1024 * 1024)))
        payload = {
            "MaxConcurrentTransforms": self.config.max_batch_size,
            "BatchStrategy": "SINGLE_RECORD",
            "MaxPayloadInMB": mib,
        }
        await self._send(req, writer, ex, 200, json.dumps(payload).encode(), negotiation.JSON)

    @staticmethod
    def _length_or_none(req: httpio.Request) -> int | None:
        raw = req.header("content-length")
        if req.header("transfer-encoding") or raw is None:
            return None if req.header("transfer-encoding") else 0
        try:
            return max(0, int(raw))
        except ValueError:
            return None

    def _body_length(self, req: httpio.Request) -> int | None:
        """Content-Length as an int, or None for a chunked body; a ServeError for anything else."""
        encoding = (req.header("transfer-encoding") or "").lower()
        raw = req.header("content-length")
        if encoding:
            if encoding != "chunked":
                raise ServeError(
                    f"Transfer-Encoding {encoding!r} is not supported; use Content-Length or chunked",
                    status_code=501,
                )
            return None
        if raw is None:
            raise ServeError("Content-Length is required", status_code=411)
        try:
            length = int(raw)
        except ValueError:
            raise BadRequestError(f"Content-Length {raw!r} is not an integer") from None
        if length < 0:
            raise BadRequestError(f"Content-Length {raw!r} is negative")
        limit = self.config.max_body_bytes
        if length > limit:
            raise PayloadTooLargeError(
                f"body of {length} bytes is over the limit of {limit} bytes",
                limit_bytes=limit,
                got_bytes=length,
            )
        return length

    async def _invocations(
        self, req: httpio.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ex: _Exchange
    ) -> None:
        config = self.config
        ctype = negotiation.media_type(req.header("content-type"))
        ex.fields["content_type"] = ctype
        try:
            length = self._body_length(req)
        except ServeError as exc:
            await self._send_error(req, writer, ex, exc.status_code, exc.message, details=exc.details, close=True)
            await httpio.linger_close(reader, writer)
            return
        if self.state != "ready":
            state = {"loading": "loading the model", "draining": "shutting down"}.get(self.state, self.state)
            err = ServeError(f"server is {state}", status_code=503)
            await self._refuse(req, reader, writer, ex, err, length, retry_after=True)
            return
        info = self.info
        assert info is not None
        if info.content_types is not None and ctype not in info.content_types:
            err = negotiation.unsupported_content_type(ctype, info.content_types)
            await self._refuse(req, reader, writer, ex, err, length)
            return
        accept = negotiation.negotiate_accept(req.header("accept"), config.default_accept, info.accept_types)
        if accept is None:
            await self._refuse(req, reader, writer, ex, self._not_acceptable(req, info), length)
            return
        ex.fields["accept"] = accept
        if self._inflight >= config.queue_size:
            err = ServeError(f"request queue is full ({config.queue_size} in flight); retry later", status_code=503)
            await self._refuse(req, reader, writer, ex, err, length, retry_after=True)
            return
        if not self.backend.available:
            err = ServeError(self.backend.unavailable_message, status_code=503)
            await self._refuse(req, reader, writer, ex, err, length, retry_after=True)
            return
        self._inflight += 1
        assert self._idle is not None
        self._idle.clear()
        try:
            await self._invoke(req, reader, writer, ex, ctype, accept, length)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    @staticmethod
    def _not_acceptable(req: httpio.Request, info: HandlerInfo) -> UnsupportedAcceptError:
        """406 for an Accept header that accepts nothing this handler produces (``q=0`` refuses a type)."""
        shown = req.header("accept")
        refusals = any(r.q == 0 for r in negotiation.parse_accept(shown))
        why = " (q=0 marks a type as not acceptable)" if refusals else ""
        if info.accept_types is None:
            return UnsupportedAcceptError(
                f"Accept {shown!r} accepts no media type{why}; this handler declares no ACCEPT_TYPES, so any "
                "type accepted with q>0 goes to its output_fn",
            )
        supported = list(info.accept_types)
        return UnsupportedAcceptError(
            f"Accept {shown!r} accepts none of the supported types{why}; supported: {', '.join(supported)}",
            supported=supported,
        )

    async def _invoke(
        self,
        req: httpio.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        ex: _Exchange,
        ctype: str,
        accept: str,
        length: int | None,
    ) -> None:
        config, backend = self.config, self.backend
        backend.expect()  # the model thread may wait for this request's body to be read and decoded
        handed_over = False
        try:
            if req.expects_continue:
                writer.write(httpio.CONTINUE)
            try:
                body = await httpio.within(IDLE_TIMEOUT_S, _read_body(reader, length, config.max_body_bytes))
            except httpio.HttpError as exc:  # chunked body over the limit, or malformed chunks
                details = {"limit_bytes": config.max_body_bytes} if exc.status == 413 else None
                await self._send_error(req, writer, ex, exc.status, exc.message, details=details, close=True)
                await httpio.linger_close(reader, writer)
                return
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                raise httpio.ClientGone() from None
            ex.fields["bytes_in"] = len(body)
            handed_over = True
            deadline = ex.start + config.request_timeout_s
            outcome = await backend.invoke(body, ctype, accept, ex.request_id, deadline)
        finally:
            if not handed_over:
                backend.abandon()
        if outcome.model_process is not None:
            ex.fields["model_process"] = outcome.model_process
        if outcome.model_latency_ms is not None:
            ex.fields.update(
                model_latency_ms=outcome.model_latency_ms,
                queue_ms=outcome.queue_ms,
                batch_size=outcome.batch_size,
                batch_requests=outcome.batch_requests,
            )
        if outcome.status != 200:
            await self._send_error(req, writer, ex, outcome.status, outcome.message, details=outcome.details)
            return
        model_ms = float(outcome.model_latency_ms or 0.0)
        attrs = f"model_latency_ms={model_ms:.3f},batch_size={outcome.batch_size}"
        incoming = req.header("x-amzn-sagemaker-custom-attributes")
        headers = {
            "X-Model-Latency-Ms": f"{model_ms:.3f}",
            "X-Queue-Ms": f"{float(outcome.queue_ms or 0.0):.3f}",
            "X-Batch-Size": str(outcome.batch_size),
            "X-Amzn-SageMaker-Custom-Attributes": (
                f"{incoming},{attrs}" if incoming and len(incoming) + len(attrs) < 1023 else (incoming or attrs)
            ),
        }
        await self._send(req, writer, ex, 200, outcome.body, outcome.content_type, headers)


def serve(config: ServeConfig, *, logger: JsonLogger | None = None, install_signals: bool = True) -> int:
    """Run the server until SIGTERM/SIGINT (then drain) or a model load failure; returns the exit code."""
    app = ServeApp(config, logger)
    return asyncio.run(app.run(install_signals=install_signals))
