"""``GPU_SERVE_MODEL_PROCESSES=0``: the model on a thread of the HTTP process (one process in all).

The event loop runs ``input_fn`` of small bodies and ``output_fn`` of small predictions itself, a pool
(``GPU_SERVE_DECODE_THREADS``) the large ones, and one model thread every forward pass. Loop, decoding and
forward passes share one GIL: under load the model thread waits for the loop between operators, which is
what the default (a model process, :mod:`gpu_serve.model_process`) avoids. This layout uses the least
memory (one Python process, one copy of torch) and starts fastest.

A dead model thread cannot be replaced inside this process (whatever killed it, a CUDA error included, may
have left the process's state broken): its requests are answered 500 at once, ``/ping`` turns 503, and the
server stops with exit code 1 so that SageMaker replaces the instance; one that fails to initialise is a
failed load (exit 1). A model thread that has held work without a sign of life for longer than
``max(GPU_SERVE_HEARTBEAT_TIMEOUT_S, GPU_SERVE_REQUEST_TIMEOUT_S)`` is hung: ``/ping`` answers 503
``{"status": "hung"}`` and the requests waiting for it get 500 at once, until it finishes that forward pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpu_serve.batching import BatchCallback
from gpu_serve.config import ServeConfig
from gpu_serve.invoker import (
    INLINE_BODY_BYTES,
    INLINE_OUTPUT_ELEMENTS,
    Invoker,
    load_invoker,
    numel,
)
from gpu_serve.ipc import HandlerInfo, Outcome, timeout_outcome
from gpu_serve.metrics import LogSink


class InProcessModel:
    """The model backend of a one-process server (see the module docstring)."""

    kind = "thread"

    def __init__(self, config: ServeConfig, log: LogSink, on_batch: BatchCallback) -> None:
        self.config = config
        self.log = log
        self._on_batch = on_batch
        self._invoker: Invoker | None = None
        self._pool = ThreadPoolExecutor(max_workers=config.decode_threads, thread_name_prefix="gpu-serve-decode")
        self._aborts: set[asyncio.Future[Outcome]] = set()  # one per request waiting for the model thread
        self._hung: str | None = None
        self._watchdog: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool:
        invoker = self._invoker
        if invoker is None or not invoker.batcher.alive:
            return False
        return self._check_hung() is None

    @property
    def unavailable_state(self) -> str:
        """The ``/ping`` status while the model thread cannot take a request."""
        invoker = self._invoker
        if invoker is not None and not invoker.batcher.alive:
            return "failed"
        return "hung" if self._hung is not None else "loading"

    @property
    def unavailable_message(self) -> str:
        if self._hung is not None:
            return f"the model thread is hung: {self._hung}; retry later"
        return "the model thread died; the server is stopping (see the error log)"

    def _check_hung(self) -> str | None:
        """Why the model thread counts as hung now (logged once, and its waiting requests answered), or None."""
        invoker = self._invoker
        if invoker is None:
            return None
        stalled = invoker.batcher.stalled_s()
        limit = self.config.stall_timeout_s
        if stalled <= limit:
            if self._hung is not None:
                self.log.log("model_thread_recovered", stalled_s=round(stalled, 3))
                self._hung = None
            return None
        if self._hung is None:
            self._hung = (
                f"it has held requests for {stalled:.1f} s without finishing a forward pass (limit: "
                f"max(GPU_SERVE_HEARTBEAT_TIMEOUT_S, GPU_SERVE_REQUEST_TIMEOUT_S)={limit:g} s)"
            )
            self.log.log("error", message=f"the model thread is hung: {self._hung}")
            self._abort_waiting(Outcome(500, message=f"the model thread is hung: {self._hung}; retry later"))
        return self._hung

    def _abort_waiting(self, outcome: Outcome) -> None:
        for abort in self._aborts:
            if not abort.done():
                abort.set_result(outcome)

    async def _watch(self) -> None:
        """Look for a hung model thread between requests too."""
        while True:
            await asyncio.sleep(self.config.heartbeat_interval_s)
            self._check_hung()

    def start(self, on_ready: Callable[[HandlerInfo], None], on_failed: Callable[[], None]) -> None:
        """Load on a thread while the loop answers ``/ping`` with 503; the callbacks run on the loop."""
        loop = asyncio.get_running_loop()

        def later(fn: Callable[[], None]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped during the load
                loop.call_soon_threadsafe(fn)

        def died(exc: BaseException) -> None:  # on the model thread, after its requests were failed
            self.log.log(
                "error",
                message=f"the model thread died ({type(exc).__name__}: {exc}); it cannot be restarted in this "
                "process: the server stops with exit code 1 so that the instance is replaced",
                error_type=type(exc).__name__,
            )
            later(on_failed)

        def load() -> None:
            try:
                invoker, info = load_invoker(self.config, self.log, self._on_batch, self._on_model_error, died)
            except Exception as exc:
                self.log.log(
                    "error",
                    message=f"model load failed: {exc}",
                    error_type=type(exc).__name__,
                    traceback=traceback.format_exc(),
                )
                later(on_failed)
                return

            def loaded() -> None:
                self._invoker = invoker
                self._watchdog = asyncio.get_running_loop().create_task(self._watch())
                on_ready(info)

            later(loaded)

        threading.Thread(target=load, name="gpu-serve-load", daemon=True).start()

    def describe(self) -> dict[str, object]:
        return {"model_processes": 0}

    def _on_model_error(self, message: str, exc: BaseException, trace: str) -> None:
        self.log.log("error", message=message, error_type=type(exc).__name__, traceback=trace)

    def expect(self) -> None:
        if self._invoker is not None:
            self._invoker.batcher.expect()

    def abandon(self) -> None:
        if self._invoker is not None:
            self._invoker.batcher.abandon()

    async def invoke(self, body: bytes, ctype: str, accept: str, request_id: str, deadline: float) -> Outcome:
        """Decode, batch, encode; called after :meth:`expect` (whose count ``decode`` takes back)."""
        invoker = self._invoker
        assert invoker is not None
        loop = asyncio.get_running_loop()
        if len(body) <= INLINE_BODY_BYTES:
            pending = invoker.decode(body, ctype, accept, request_id)
        else:
            pending = await loop.run_in_executor(self._pool, invoker.decode, body, ctype, accept, request_id)
        if isinstance(pending, Outcome):
            return pending
        waiting = asyncio.wrap_future(pending.future)
        waiting.add_done_callback(_retrieve)
        abort: asyncio.Future[Outcome] = loop.create_future()
        self._aborts.add(abort)
        try:
            remaining = max(0.0, deadline - time.monotonic())
            await asyncio.wait((waiting, abort), timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._aborts.discard(abort)
        if not waiting.done():
            pending.future.cancel()  # a queued request that times out (or is given up) gives up its place
            if abort.done():
                return abort.result()
            return timeout_outcome(self.config.request_timeout_s)
        try:
            result = waiting.result()
        except Exception as exc:
            return invoker.finish(pending, exc)
        if numel(result.prediction) <= INLINE_OUTPUT_ELEMENTS:
            return invoker.finish(pending, result)
        return await loop.run_in_executor(self._pool, invoker.finish, pending, result)

    async def stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._invoker is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._invoker.batcher.stop, 1.0)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark the outcome of a request that was given up as seen (asyncio logs unretrieved exceptions)."""
    if not future.cancelled():
        future.exception()
