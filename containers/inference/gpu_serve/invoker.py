"""One invocation around the model: ``input_fn`` -> dynamic batch -> ``output_fn``, and every error mapped.

Used where the model lives: in a model process (:mod:`gpu_serve.worker`), or in the serving process itself
when ``GPU_SERVE_MODEL_PROCESSES=0`` (:mod:`gpu_serve.inprocess`). :meth:`Invoker.decode` runs ``input_fn``
and queues the request for a batch; :meth:`Invoker.finish` turns the batch result (or its error) into an
:class:`~gpu_serve.ipc.Outcome`. Both are plain calls: the caller picks the thread they run on.

A request's failure is its own: a body that ``input_fn`` rejects is answered 400 before it joins a batch,
and a batch whose ``predict_fn`` raises is re-run request by request (:mod:`gpu_serve.batching`).
"""

from __future__ import annotations

import os
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch

from gpu_serve import codecs
from gpu_serve.batching import BatchCallback, BatchResult, DeadCallback, DynamicBatcher, ErrorCallback
from gpu_serve.config import ServeConfig
from gpu_serve.errors import BadRequestError, ModelWorkerError, ServeError, status_of
from gpu_serve.handler import Handler, load_handler, warmup
from gpu_serve.ipc import HandlerInfo, Outcome
from gpu_serve.metrics import LogSink

#: input_fn of a body up to this size runs on the thread that received it (a JSON or npy request decodes
#: in well under a millisecond); larger bodies, such as images, are decoded in a pool.
INLINE_BODY_BYTES = 64 * 1024
#: output_fn of a prediction up to this many elements runs inline, larger ones in a pool.
INLINE_OUTPUT_ELEMENTS = 64 * 1024
_KNOWN_CONTENT_TYPES = frozenset((*codecs.DEFAULT_CONTENT_TYPES, *codecs.UTF8_TYPES))


def numel(value: Any) -> int:
    """Elements in a prediction (tensors, containers of them), to choose between inline and pool encoding."""
    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, dict):
        return sum(numel(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(numel(v) for v in value) if value and not isinstance(value[0], (int, float)) else len(value)
    return 1


def handler_info(handler: Handler, load_s: float) -> HandlerInfo:
    """The facts about a loaded handler that the serving process admits requests by and logs when ready."""
    device = handler.device
    return HandlerInfo(
        content_types=handler.content_types,
        accept_types=handler.accept_types,
        transform=handler.transform_fn is not None,
        input_shape=handler.input_shape,
        user_functions=handler.user_functions,
        device=str(device),
        dtype=str(handler.dtype).replace("torch.", ""),
        torch_threads=torch.get_num_threads(),
        cuda_device=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        torch_version=torch.__version__,
        load_s=round(load_s, 3),
        pid=os.getpid(),
    )


@dataclass
class Pending:
    """A request queued for a batch: what :meth:`Invoker.finish` needs once its future resolves."""

    future: Future[BatchResult]
    accept: str
    request_id: str
    shape: tuple[int, ...] | None


class Invoker:
    """Runs the handler functions of one request and maps their failures to statuses."""

    def __init__(self, handler: Handler, batcher: DynamicBatcher, log: LogSink) -> None:
        self.handler = handler
        self.batcher = batcher
        self.log = log
        self.good_shapes: set[tuple[int, ...]] = set()

    def decode(self, body: bytes, ctype: str, accept: str, request_id: str) -> Pending | Outcome:
        """``input_fn`` and queue the request (the caller called ``batcher.expect()``); an Outcome on failure."""
        handler, batcher = self.handler, self.batcher
        submitted = False
        try:
            try:
                payload: str | bytes = body.decode("utf-8") if ctype in codecs.UTF8_TYPES else body
            except UnicodeDecodeError as exc:
                return Outcome(400, message=f"{ctype} body is not valid UTF-8: {exc}")
            if handler.transform_fn is not None:
                transform_fn = handler.transform_fn
                future = batcher.submit_call(lambda: transform_fn(handler.model, payload, ctype, accept))
                submitted = True
                return Pending(future, accept, request_id, None)
            try:
                data = handler.input_fn(payload, ctype)
                shape = self._check_shape(data)
            except Exception as exc:
                return self._input_error(request_id, ctype, exc)
            future = batcher.submit(data)
            submitted = True
            return Pending(future, accept, request_id, shape)
        except ModelWorkerError as exc:  # the model thread died: answered at once
            return Outcome(exc.status_code, message=exc.message, worker_died=True)
        except RuntimeError as exc:  # the model thread stopped (shutdown) before the request was queued
            return Outcome(503, message=f"server is shutting down ({exc})")
        finally:
            if not submitted:  # a request that did not reach the queue: the model thread no longer waits for it
                batcher.abandon()

    def finish(self, pending: Pending, result: BatchResult | BaseException) -> Outcome:
        """The response of a request whose batch ran: ``output_fn``, or the mapped error."""
        if isinstance(result, BaseException):
            return self._predict_error(pending, result)
        if pending.shape is not None:
            self.good_shapes.add(pending.shape)
        handler, accept = self.handler, pending.accept
        try:
            out = result.prediction
            if handler.transform_fn is None:
                out = handler.output_fn(out, accept)
            body, content_type = as_body(out, accept)
        except Exception as exc:
            status = status_of(exc, 406 if self._unknown_accept(accept) else 500)
            self._log_handler_error(pending.request_id, "output_fn", exc, status)
            outcome = Outcome(status, message=f"output_fn failed: {type(exc).__name__}: {exc}")
        else:
            outcome = Outcome(200, body, content_type)
        outcome.model_latency_ms = round(result.model_latency_ms, 3)
        outcome.queue_ms = round(result.queue_ms, 3)
        outcome.batch_size, outcome.batch_requests = result.batch_size, result.batch_requests
        return outcome

    # -- error mapping -------------------------------------------------------------------------------------
    def _check_shape(self, data: Any) -> tuple[int, ...] | None:
        """With a known per-sample shape, a tensor of another shape is a 400 that names the expected one."""
        if not isinstance(data, torch.Tensor) or data.dim() == 0:
            return None
        sample = tuple(data.shape[1:])
        expected = self.handler.input_shape
        if expected is not None and sample != expected:
            exp = ", ".join(str(d) for d in expected)
            raise BadRequestError(
                f"input has shape {list(data.shape)}; expected (N, {exp})",
                expected_shape=["N", *expected],
                got_shape=list(data.shape),
            )
        return sample

    def _unknown_accept(self, accept: str) -> bool:
        return self.handler.accept_types is None and accept not in codecs.DEFAULT_ACCEPT_TYPES

    def _input_error(self, request_id: str, ctype: str, exc: Exception) -> Outcome:
        if isinstance(exc, ServeError):
            return Outcome(exc.status_code, message=exc.message, details=dict(exc.details))
        # A handler that declares no CONTENT_TYPES refused a type this server does not know either: 415.
        default = 415 if self.handler.content_types is None and ctype not in _KNOWN_CONTENT_TYPES else 400
        status = status_of(exc, default)
        details: dict[str, Any] = {}
        if self.handler.input_shape is not None:
            details["expected_shape"] = ["N", *self.handler.input_shape]
        if status >= 500:
            self._log_handler_error(request_id, "input_fn", exc, status)
        return Outcome(status, message=f"input_fn rejected the request: {type(exc).__name__}: {exc}", details=details)

    def _predict_error(self, pending: Pending, exc: BaseException) -> Outcome:
        if isinstance(exc, ModelWorkerError):  # not the handler's failure: the model thread died under it
            return Outcome(exc.status_code, message=exc.message, worker_died=True)
        good, shape = self.good_shapes, pending.shape
        if shape is not None and good and shape not in good and status_of(exc, 500) == 500:
            # The model has answered other shapes and fails on this one: the input is wrong, not the server.
            shapes = sorted(good)
            return Outcome(
                400,
                message=f"the model cannot take input of per-sample shape {list(shape)} "
                f"({type(exc).__name__}: {exc}); it has served {[['N', *s] for s in shapes]}",
                details={"expected_shape": ["N", *shapes[0]], "got_shape": ["N", *shape]},
            )
        status = status_of(exc, 500)
        self._log_handler_error(pending.request_id, "predict_fn", exc, status)
        return Outcome(status, message=f"predict_fn failed: {type(exc).__name__}: {exc}")

    def _log_handler_error(self, request_id: str, where: str, exc: BaseException, status: int) -> None:
        if status >= 500:
            self.log.log(
                "error",
                message=f"{where} failed",
                request_id=request_id,
                error_type=type(exc).__name__,
                traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            )


def as_body(out: Any, accept: str) -> tuple[bytes, str]:
    """``output_fn``'s return value (``body`` or ``(body, content_type)``) as bytes and a content type."""
    content_type = accept
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], str):
        out, content_type = out
    if isinstance(out, str):
        return out.encode("utf-8"), content_type
    if isinstance(out, (bytes, bytearray, memoryview)):
        return bytes(out), content_type
    raise TypeError(f"output_fn must return bytes or str (or (body, content_type)); got {type(out).__name__}")


def load_invoker(
    config: ServeConfig,
    log: LogSink,
    on_batch: BatchCallback | None = None,
    on_error: ErrorCallback | None = None,
    on_dead: DeadCallback | None = None,
) -> tuple[Invoker, HandlerInfo]:
    """Handler, model, warm-up and a started model thread; raises what ``load_handler`` raises.

    Warns (and goes on) when ``code/requirements.txt`` exists, which is not installed at start, and when
    the warm-up forward pass fails.
    """
    t0 = time.perf_counter()
    handler = load_handler(config)
    if (config.model_dir / "code" / "requirements.txt").is_file():
        log.log(
            "warning",
            message="code/requirements.txt is not installed at start (endpoints may have no network "
            "access); bake those packages into the image",
        )
    try:
        warmup(handler)
    except Exception as exc:
        log.log("warning", message=f"warm-up forward pass failed (serving anyway): {exc}")
    batcher = DynamicBatcher(
        handler,
        max_batch_size=config.max_batch_size,
        max_batch_delay_s=config.max_batch_delay_ms / 1000.0,
        on_batch=on_batch,
        on_error=on_error,
        on_dead=on_dead,
        beat_s=config.heartbeat_interval_s,
    )
    batcher.start()  # raises ModelLoadError when the model thread cannot initialise
    return Invoker(handler, batcher, log), handler_info(handler, time.perf_counter() - t0)
