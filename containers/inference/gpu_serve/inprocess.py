"""``GPU_SERVE_MODEL_PROCESSES=0``: the model on a thread of the HTTP process (one process in all).

The event loop runs ``input_fn`` of small bodies and ``output_fn`` of small predictions itself, a pool
(``GPU_SERVE_DECODE_THREADS``) the large ones, and one model thread every forward pass. Loop, decoding and
forward passes share one GIL: under load the model thread waits for the loop between operators, which is
what the default (a model process, :mod:`gpu_serve.model_process`) avoids. This layout uses the least
memory (one Python process, one copy of torch) and starts fastest.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gpu_serve import httpio
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

    @property
    def available(self) -> bool:
        return self._invoker is not None

    def start(self, on_ready: Callable[[HandlerInfo], None], on_failed: Callable[[], None]) -> None:
        """Load on a thread while the loop answers ``/ping`` with 503; the callbacks run on the loop."""
        loop = asyncio.get_running_loop()

        def later(fn: Callable[[], None]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped during the load
                loop.call_soon_threadsafe(fn)

        def load() -> None:
            try:
                invoker, info = load_invoker(self.config, self.log, self._on_batch, self._on_model_error)
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
        try:
            remaining = max(0.0, deadline - time.monotonic())
            result = await httpio.within(remaining, asyncio.wrap_future(pending.future))
        except TimeoutError:
            pending.future.cancel()  # a queued request that times out gives up its place
            return timeout_outcome(self.config.request_timeout_s)
        except Exception as exc:
            return invoker.finish(pending, exc)
        if numel(result.prediction) <= INLINE_OUTPUT_ELEMENTS:
            return invoker.finish(pending, result)
        return await loop.run_in_executor(self._pool, invoker.finish, pending, result)

    async def stop(self) -> None:
        if self._invoker is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._invoker.batcher.stop, 1.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
