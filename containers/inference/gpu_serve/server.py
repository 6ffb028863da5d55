"""The SageMaker-compatible HTTP server: ``GET /ping``, ``POST /invocations``, ``GET /execution-parameters``.

Threads:

- the **event loop** (main thread, asyncio) accepts connections, parses HTTP, answers ``/ping`` at once,
  runs ``input_fn``/``output_fn`` for small bodies and predictions, and writes responses;
- the **model thread** (:mod:`gpu_serve.batching`) runs every forward pass; torch releases the GIL while it
  computes, so the loop keeps answering during a forward pass;
- a small **decode pool** (``GPU_SERVE_DECODE_THREADS``) runs ``input_fn`` for bodies over 64 KiB (images)
  and ``output_fn`` for large predictions, so that a heavy decode never stalls ``/ping``;
- a **loader** thread runs ``model_fn`` at start while ``/ping`` answers 503.

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
- no answer within ``GPU_SERVE_REQUEST_TIMEOUT_S``: 504.

SIGTERM (or SIGINT): ``/ping`` turns 503, new invocations get 503, in-flight ones finish (at most
``GPU_SERVE_DRAIN_TIMEOUT_S``), then the server exits 0.

A request counts as answered once its whole response is handed to the kernel (each connection's write
buffer limit is 0, so ``drain()`` returns only then). A response cut off before that, by a client that
closed the connection or by the end of the drain, is logged and counted as such: status 499 (client) or
503 (shutdown), with ``cut_off``, ``sent_status`` and ``error`` fields, never as a 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

import torch

from gpu_serve import codecs, httpio
from gpu_serve.batching import BatchResult, DynamicBatcher
from gpu_serve.config import ServeConfig
from gpu_serve.errors import (
    BadRequestError,
    PayloadTooLargeError,
    ServeError,
    UnsupportedAcceptError,
    status_of,
)
from gpu_serve.handler import Handler, load_handler, warmup
from gpu_serve.metrics import Counters, JsonLogger

#: input_fn of a body up to this size runs on the event loop (a JSON or npy request decodes in well under
#: a millisecond); larger bodies, such as images, are decoded in the decode pool.
INLINE_BODY_BYTES = 64 * 1024
#: output_fn of a prediction up to this many elements runs on the event loop, larger ones in the pool.
INLINE_OUTPUT_ELEMENTS = 64 * 1024
#: A keep-alive connection idle this long is closed; a body that stalls this long is abandoned.
IDLE_TIMEOUT_S = 120.0
#: A connection over GPU_SERVE_MAX_CONNECTIONS must send its request head within this time.
OVER_LIMIT_HEAD_TIMEOUT_S = 5.0
#: After the drain, how long the requests still running get to log their cut-off before the server stops.
CLOSE_WAIT_S = 2.0
#: Status logged for a response cut off because the client closed the connection (nginx's convention).
CLIENT_CLOSED_STATUS = 499
_KNOWN_CONTENT_TYPES = frozenset((*codecs.DEFAULT_CONTENT_TYPES, *codecs.UTF8_TYPES))


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


def _numel(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, dict):
        return sum(_numel(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value) if value and not isinstance(value[0], (int, float)) else len(value)
    return 1


class ServeApp:
    """One server: config, handler, batcher, counters, admission, and the asyncio HTTP front end."""

    def __init__(self, config: ServeConfig, logger: JsonLogger | None = None) -> None:
        self.config = config
        self.log = logger or JsonLogger()
        self.counters = Counters()
        self.handler: Handler | None = None
        self.batcher: DynamicBatcher | None = None
        self.state = "loading"  # loading -> ready | failed; then draining
        self.port: int | None = None
        self.good_shapes: set[tuple[int, ...]] = set()
        self._inflight = 0
        self._connections: set[asyncio.StreamWriter] = set()  # counted against GPU_SERVE_MAX_CONNECTIONS
        self._over_limit: set[asyncio.StreamWriter] = set()  # one request each, then closed
        self._tasks: set[asyncio.Task[None]] = set()  # one per open connection
        self._closing = False  # the drain is over: connections are being closed
        self._pool = ThreadPoolExecutor(max_workers=config.decode_threads, thread_name_prefix="gpu-serve-decode")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    async def run(self, *, install_signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT (or :meth:`request_stop`), drain, and return the exit code."""
        loop = asyncio.get_running_loop()
        self._loop = loop
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
            torch_version=torch.__version__,
            cuda_available=torch.cuda.is_available(),
        )
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
        threading.Thread(target=self._load, name="gpu-serve-load", daemon=True).start()
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
        if self.batcher is not None:
            await loop.run_in_executor(None, self.batcher.stop, 1.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
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

    def _load(self) -> None:
        """Loader thread: handler, model, warm-up, model thread; then hand the result to the loop."""
        t0 = time.perf_counter()
        try:
            handler = load_handler(self.config)
        except Exception as exc:
            self.log.log(
                "error",
                message=f"model load failed: {exc}",
                error_type=type(exc).__name__,
                traceback=traceback.format_exc(),
            )
            self._from_thread(self._load_failed)
            return
        if (self.config.model_dir / "code" / "requirements.txt").is_file():
            self.log.log(
                "warning",
                message="code/requirements.txt is not installed at start (endpoints may have no network "
                "access); bake those packages into the image",
            )
        try:
            warmup(handler)
        except Exception as exc:
            self.log.log("warning", message=f"warm-up forward pass failed (serving anyway): {exc}")
        batcher = DynamicBatcher(
            handler,
            max_batch_size=self.config.max_batch_size,
            max_batch_delay_s=self.config.max_batch_delay_ms / 1000.0,
            on_batch=self._on_batch,
            on_error=self._on_model_error,
        )
        batcher.start()
        self._from_thread(lambda: self._loaded(handler, batcher, time.perf_counter() - t0))

    def _from_thread(self, fn: Callable[[], None]) -> None:
        if self._loop is not None:
            # RuntimeError: the loop is closed (the server stopped during the load).
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(fn)

    def _load_failed(self) -> None:
        self.state = "failed"
        if self._stop is not None:
            self._stop.set()

    def _loaded(self, handler: Handler, batcher: DynamicBatcher, seconds: float) -> None:
        self.handler, self.batcher = handler, batcher
        if self.state == "loading":
            self.state = "ready"
        self.log.log(
            "ready",
            load_s=round(seconds, 3),
            device=str(handler.device),
            dtype=str(handler.dtype).replace("torch.", ""),
            torch_threads=torch.get_num_threads(),
            cuda_device=torch.cuda.get_device_name(handler.device) if handler.device.type == "cuda" else None,
            handler_functions=list(handler.user_functions),
            input_shape=list(handler.input_shape) if handler.input_shape else None,
            content_types=list(handler.content_types) if handler.content_types else "any",
            accept_types=list(handler.accept_types) if handler.accept_types else "any",
            max_batch_size=self.config.max_batch_size,
            max_batch_delay_ms=self.config.max_batch_delay_ms,
            queue_size=self.config.queue_size,
        )

    def _on_batch(self, rows: int, requests: int, model_ms: float, queued: int) -> None:
        self.counters.record_batch(rows)
        if self.config.access_log:
            self.log.log(
                "batch",
                batch_size=rows,
                requests=requests,
                model_latency_ms=round(model_ms, 3),
                queued=queued,
            )

    def _on_model_error(self, message: str, exc: BaseException, trace: str) -> None:
        self.log.log("error", message=message, error_type=type(exc).__name__, traceback=trace)

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
                    writer.write(httpio.response(exc.status, json.dumps(payload).encode(), codecs.JSON, close=True))
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
            writer.write(httpio.response(503, json.dumps(payload).encode(), codecs.JSON, headers, close=True))
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
        self.log.log(
            "access",
            method=req.method,
            path=path,
            status=status,
            latency_ms=round((time.monotonic() - ex.start) * 1000.0, 3),
            request_id=ex.request_id,
            **ex.fields,
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
            await httpio.within(IDLE_TIMEOUT_S, writer.drain())
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
        await self._send(req, writer, ex, status, body, codecs.JSON, extra, close=close)

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
        status = 200 if self.state == "ready" else 503
        body = json.dumps({"status": "healthy" if status == 200 else self.state}).encode()
        await self._send(req, writer, ex, status, body, codecs.JSON)

    async def _execution_parameters(self, req: httpio.Request, writer: asyncio.StreamWriter, ex: _Exchange) -> None:
        # Asked once by SageMaker batch transform: one record per request, as many in parallel as a batch.
        mib = max(1, min(100, self.config.max_body_bytes // (1024 * 1024)))
        payload = {
            "MaxConcurrentTransforms": self.config.max_batch_size,
            "BatchStrategy": "SINGLE_RECORD",
            "MaxPayloadInMB": mib,
        }
        await self._send(req, writer, ex, 200, json.dumps(payload).encode(), codecs.JSON)

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
        ctype = codecs.media_type(req.header("content-type"))
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
        handler, batcher = self.handler, self.batcher
        assert handler is not None and batcher is not None
        if handler.content_types is not None and ctype not in handler.content_types:
            err = codecs.unsupported_content_type(ctype, handler.content_types)
            await self._refuse(req, reader, writer, ex, err, length)
            return
        accept = codecs.negotiate_accept(req.header("accept"), config.default_accept, handler.accept_types)
        if accept is None:
            await self._refuse(req, reader, writer, ex, self._not_acceptable(req, handler), length)
            return
        ex.fields["accept"] = accept
        if self._inflight >= config.queue_size:
            err = ServeError(f"request queue is full ({config.queue_size} in flight); retry later", status_code=503)
            await self._refuse(req, reader, writer, ex, err, length, retry_after=True)
            return
        self._inflight += 1
        assert self._idle is not None
        self._idle.clear()
        try:
            await self._invoke(req, reader, writer, ex, handler, batcher, ctype, accept, length)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    @staticmethod
    def _not_acceptable(req: httpio.Request, handler: Handler) -> UnsupportedAcceptError:
        """406 for an Accept header that accepts nothing this handler produces (``q=0`` refuses a type)."""
        shown = req.header("accept")
        refusals = any(r.q == 0 for r in codecs.parse_accept(shown))
        why = " (q=0 marks a type as not acceptable)" if refusals else ""
        if handler.accept_types is None:
            return UnsupportedAcceptError(
                f"Accept {shown!r} accepts no media type{why}; this handler declares no ACCEPT_TYPES, so any "
                "type accepted with q>0 goes to its output_fn",
            )
        supported = list(handler.accept_types)
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
        handler: Handler,
        batcher: DynamicBatcher,
        ctype: str,
        accept: str,
        length: int | None,
    ) -> None:
        config = self.config
        batcher.expect()
        future: Future[BatchResult] | None = None
        request_shape: tuple[int, ...] | None = None
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
            try:
                payload: str | bytes = body.decode("utf-8") if ctype in codecs.UTF8_TYPES else body
            except UnicodeDecodeError as exc:
                await self._send_error(req, writer, ex, 400, f"{ctype} body is not valid UTF-8: {exc}")
                return
            if handler.transform_fn is not None:
                transform_fn = handler.transform_fn
                future = batcher.submit_call(lambda: transform_fn(handler.model, payload, ctype, accept))
            else:
                try:
                    data = await self._run(handler.input_fn, payload, ctype, inline=len(body) <= INLINE_BODY_BYTES)
                    request_shape = self._check_shape(handler, data)
                except Exception as exc:
                    await self._input_error(req, writer, ex, handler, ctype, exc)
                    return
                future = batcher.submit(data)
        finally:
            if future is None:
                batcher.abandon()

        remaining = config.request_timeout_s - (time.monotonic() - ex.start)
        try:
            result = await httpio.within(max(0.0, remaining), asyncio.wrap_future(future))
        except TimeoutError:
            future.cancel()
            msg = f"no prediction within GPU_SERVE_REQUEST_TIMEOUT_S={config.request_timeout_s:g} s"
            await self._send_error(req, writer, ex, 504, msg)
            return
        except Exception as exc:
            await self._predict_error(req, writer, ex, exc, request_shape)
            return
        if request_shape is not None:
            self.good_shapes.add(request_shape)
        ex.fields.update(
            model_latency_ms=round(result.model_latency_ms, 3),
            queue_ms=round(result.queue_ms, 3),
            batch_size=result.batch_size,
            batch_requests=result.batch_requests,
        )
        try:
            if handler.transform_fn is not None:
                out: Any = result.prediction
            else:
                inline = _numel(result.prediction) <= INLINE_OUTPUT_ELEMENTS
                out = await self._run(handler.output_fn, result.prediction, accept, inline=inline)
            body_out, out_type = self._as_body(out, accept)
        except Exception as exc:
            status = status_of(exc, 406 if self._unknown_accept(handler, accept) else 500)
            self._log_handler_error(ex, "output_fn", exc, status)
            await self._send_error(req, writer, ex, status, f"output_fn failed: {type(exc).__name__}: {exc}")
            return
        attrs = f"model_latency_ms={result.model_latency_ms:.3f},batch_size={result.batch_size}"
        incoming = req.header("x-amzn-sagemaker-custom-attributes")
        headers = {
            "X-Model-Latency-Ms": f"{result.model_latency_ms:.3f}",
            "X-Queue-Ms": f"{result.queue_ms:.3f}",
            "X-Batch-Size": str(result.batch_size),
            "X-Amzn-SageMaker-Custom-Attributes": (
                f"{incoming},{attrs}" if incoming and len(incoming) + len(attrs) < 1023 else (incoming or attrs)
            ),
        }
        await self._send(req, writer, ex, 200, body_out, out_type, headers)

    async def _run(self, fn: Callable[..., Any], *args: Any, inline: bool) -> Any:
        """Call handler code on the loop (small inputs) or in the decode pool (large ones)."""
        if inline:
            return fn(*args)
        assert self._loop is not None
        return await self._loop.run_in_executor(self._pool, fn, *args)

    # -- error mapping -------------------------------------------------------------------------------------
    @staticmethod
    def _check_shape(handler: Handler, data: Any) -> tuple[int, ...] | None:
        """With a known per-sample shape, a tensor of another shape is a 400 that names the expected one."""
        if not isinstance(data, torch.Tensor) or data.dim() == 0:
            return None
        sample = tuple(data.shape[1:])
        expected = handler.input_shape
        if expected is not None and sample != expected:
            exp = ", ".join(str(d) for d in expected)
            raise BadRequestError(
                f"input has shape {list(data.shape)}; expected (N, {exp})",
                expected_shape=["N", *expected],
                got_shape=list(data.shape),
            )
        return sample

    @staticmethod
    def _unknown_accept(handler: Handler, accept: str) -> bool:
        return handler.accept_types is None and accept not in codecs.DEFAULT_ACCEPT_TYPES

    @staticmethod
    def _as_body(out: Any, accept: str) -> tuple[bytes, str]:
        content_type = accept
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], str):
            out, content_type = out
        if isinstance(out, str):
            return out.encode("utf-8"), content_type
        if isinstance(out, (bytes, bytearray, memoryview)):
            return bytes(out), content_type
        raise TypeError(f"output_fn must return bytes or str (or (body, content_type)); got {type(out).__name__}")

    async def _input_error(
        self,
        req: httpio.Request,
        writer: asyncio.StreamWriter,
        ex: _Exchange,
        handler: Handler,
        ctype: str,
        exc: Exception,
    ) -> None:
        if isinstance(exc, ServeError):
            await self._send_error(req, writer, ex, exc.status_code, exc.message, details=exc.details)
            return
        # A handler that declares no CONTENT_TYPES refused a type this server does not know either: 415.
        default = 415 if handler.content_types is None and ctype not in _KNOWN_CONTENT_TYPES else 400
        status = status_of(exc, default)
        details: dict[str, Any] = {}
        if handler.input_shape is not None:
            details["expected_shape"] = ["N", *handler.input_shape]
        if status >= 500:
            self._log_handler_error(ex, "input_fn", exc, status)
        message = f"input_fn rejected the request: {type(exc).__name__}: {exc}"
        await self._send_error(req, writer, ex, status, message, details=details)

    async def _predict_error(
        self,
        req: httpio.Request,
        writer: asyncio.StreamWriter,
        ex: _Exchange,
        exc: BaseException,
        shape: tuple[int, ...] | None,
    ) -> None:
        good = self.good_shapes
        if shape is not None and good and shape not in good and status_of(exc, 500) == 500:
            # The model has answered other shapes and fails on this one: the input is wrong, not the server.
            shapes = sorted(good)
            await self._send_error(
                req,
                writer,
                ex,
                400,
                f"the model cannot take input of per-sample shape {list(shape)} "
                f"({type(exc).__name__}: {exc}); it has served {[['N', *s] for s in shapes]}",
                details={"expected_shape": ["N", *shapes[0]], "got_shape": ["N", *shape]},
            )
            return
        status = status_of(exc, 500)
        self._log_handler_error(ex, "predict_fn", exc, status)
        await self._send_error(req, writer, ex, status, f"predict_fn failed: {type(exc).__name__}: {exc}")

    def _log_handler_error(self, ex: _Exchange, where: str, exc: BaseException, status: int) -> None:
        if status >= 500:
            self.log.log(
                "error",
                message=f"{where} failed",
                request_id=ex.request_id,
                error_type=type(exc).__name__,
                traceback="".join(traceback.format_exception(exc)),
            )


def serve(config: ServeConfig, *, logger: JsonLogger | None = None, install_signals: bool = True) -> int:
    """Run the server until SIGTERM/SIGINT (then drain) or a model load failure; returns the exit code."""
    app = ServeApp(config, logger)
    return asyncio.run(app.run(install_signals=install_signals))
