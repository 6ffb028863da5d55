"""Dynamic micro-batching: one model thread turns concurrent requests into few, large forward passes.

Other threads decode the bodies (``input_fn``) and :meth:`DynamicBatcher.submit` the tensors. The model
thread takes the oldest request and waits until ``max_batch_size`` rows are queued, or the oldest has waited
``max_batch_delay``, or no other admitted request is still being decoded and the queue holds as many rows as
the batcher held at its busiest (queued and running) since the previous batch started. Waiting longer could
only add latency: a lone client never waits, and N clients that each send their next request as soon as they
are answered get batches of N, where without the last rule they would alternate between two smaller batches
(two forward passes' fixed cost for the same rows). It then groups the queued tensors by (trailing shape,
dtype, device), runs one ``torch.cat`` -> ``predict_fn`` per group, moves the output to the CPU once, and
splits it back into one slice per request by row counts. ``output_fn`` runs on another thread.

Failure isolation: when a batched ``predict_fn`` raises, or its output cannot be split by rows, each
request of that group is re-run on its own, so only the request that really fails gets the error.

Death and life: the model thread checks in (:attr:`DynamicBatcher.last_beat`) whenever it waits for requests
(at least every ``beat_s``) and after every batch, so :meth:`DynamicBatcher.stalled_s` tells how long it has
held work without a sign of life. When it dies (``init_thread`` fails, or something that is no ``Exception``
such as ``SystemExit`` escapes a handler function), every request queued or running is failed at once with a
:class:`~gpu_serve.errors.ModelWorkerError`, later ones are refused with it, and ``on_dead`` is called.

Counters: :meth:`DynamicBatcher.counters` returns a :class:`BatcherCounters` snapshot of what the model thread
has done since it started (batches formed, their requests and rows, waits for a batch to fill and how many of
those the max delay ended), so tests and diagnostics can tell how batches formed without timing them.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from gpu_serve.errors import ModelLoadError, ModelWorkerError
from gpu_serve.handler import Handler

BatchCallback = Callable[[int, int, float, int], None]
"""``on_batch(rows, requests, model_latency_ms, still_queued)``, called after every forward pass."""

ErrorCallback = Callable[[str, BaseException, str], None]
"""``on_error(message, exception, traceback_text)``, for failures the model thread recovers from."""

DeadCallback = Callable[[BaseException], None]
"""``on_dead(exception)``, called on the model thread as it dies (after its requests were failed)."""


@dataclass(frozen=True)
class BatchResult:
    """What a request gets back: its rows of the prediction and how its batch went."""

    prediction: Any
    model_latency_ms: float
    batch_size: int
    batch_requests: int
    queue_ms: float


@dataclass(frozen=True)
class BatcherCounters:
    """What the model thread has done since it started (:meth:`DynamicBatcher.counters`).

    :param batches: batches taken off the queue; each runs one forward pass per (trailing shape, dtype, device)
        group, plus one per request when a group is retried request by request.
    :param requests: requests in those batches (cancelled ones included).
    :param rows: rows in those batches (cancelled ones included).
    :param fill_waits: batches whose start the model thread held back to wait for more rows (a request still
        being decoded, or fewer rows queued than the batcher held at its busiest since the previous batch).
    :param delay_expiries: of those waits, the ones ended by the oldest request reaching ``max_batch_delay``
        (the others ended when enough rows came, or at stop).
    """

    batches: int = 0
    requests: int = 0
    rows: int = 0
    fill_waits: int = 0
    delay_expiries: int = 0


class _Job:
    __slots__ = ("call", "data", "enqueued", "future", "key", "rows")

    def __init__(self, data: Any, call: Callable[[], Any] | None) -> None:
        self.data = data
        self.call = call
        self.enqueued = time.monotonic()
        self.future: Future[BatchResult] = Future()
        if call is None and isinstance(data, torch.Tensor) and data.dim() >= 1:
            self.key: tuple[Any, ...] | None = (tuple(data.shape[1:]), data.dtype, data.device)
            self.rows = int(data.shape[0])
        else:  # not a batchable tensor: runs alone
            self.key = None
            self.rows = 1


def split_rows(output: Any, sizes: Sequence[int]) -> list[Any] | None:
    """Split a batched prediction into per-request parts of ``sizes`` rows; ``None`` if it is not row-aligned.

    Handles a tensor or array with a leading batch dim, a list/tuple/dict of those, and a plain list with one
    element per row.
    """
    total = sum(sizes)
    if isinstance(output, torch.Tensor):
        if output.dim() == 0 or output.shape[0] != total:
            return None
        return list(torch.split(output, list(sizes)))
    if isinstance(output, np.ndarray):
        if output.ndim == 0 or output.shape[0] != total:
            return None
        return list(np.split(output, np.cumsum(sizes)[:-1]))
    if isinstance(output, dict):
        per_key = {k: split_rows(v, sizes) for k, v in output.items()}
        if not per_key or any(v is None for v in per_key.values()):
            return None
        return [{k: v[i] for k, v in per_key.items() if v is not None} for i in range(len(sizes))]
    if isinstance(output, (list, tuple)):
        if output and all(isinstance(v, (torch.Tensor, np.ndarray, dict)) for v in output):
            parts = [split_rows(v, sizes) for v in output]
            if all(p is not None for p in parts):
                return [type(output)(p[i] for p in parts if p is not None) for i in range(len(sizes))]
        if len(output) == total:
            bounds = np.cumsum([0, *sizes])
            return [output[int(a) : int(b)] for a, b in itertools.pairwise(bounds)]
    return None


def to_cpu(value: Any) -> Any:
    """Tensors (and tensors inside lists, tuples, dicts) moved to the CPU, one copy each."""
    if isinstance(value, torch.Tensor):
        return value.cpu() if value.device.type != "cpu" else value
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


class DynamicBatcher:
    """Gathers concurrent requests into batches and runs them on one model thread."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_batch_size: int,
        max_batch_delay_s: float,
        on_batch: BatchCallback | None = None,
        on_error: ErrorCallback | None = None,
        fill_to_recent_peak: bool = True,
        on_dead: DeadCallback | None = None,
        beat_s: float = 1.0,
    ) -> None:
        self._handler = handler
        self.on_dead = on_dead
        self._beat_s = beat_s
        #: time.monotonic() of the model thread's last sign of life.
        self.last_beat = time.monotonic()
        #: Why the model thread died (None while it lives).
        self.failure: BaseException | None = None
        self._initialised = threading.Event()
        self._current: list[_Job] = []  # the batch being run
        self._fill_to_peak = fill_to_recent_peak
        #: Called by the model thread after each batch has been answered (may be set once running).
        self.after_batch: Callable[[], None] | None = None
        self._max_rows = max(1, max_batch_size)
        self._max_delay = max(0.0, max_batch_delay_s)
        self._on_batch = on_batch
        self._on_error = on_error
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._queued_rows = 0
        self._running_rows = 0  # rows of the forward pass in progress
        self._peak_rows = 0  # most rows in the batcher (queued + running) since the last batch started
        self._arriving = 0
        self._wait_rows = 0  # while the model thread waits for a batch to fill: the rows that end the wait
        self._stopping = False
        self._counters = BatcherCounters()
        self._thread = threading.Thread(target=self._run, name="gpu-serve-model", daemon=True)
        self._unsplittable_warned = False

    # -- request side -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the model thread and wait for its ``init_thread``; a failure there is a failed load."""
        self._thread.start()
        self._initialised.wait()
        if self.failure is not None:
            exc = self.failure
            raise ModelLoadError(
                f"the model thread failed to initialise (Handler.init_thread): {type(exc).__name__}: {exc}"
            ) from exc

    @property
    def alive(self) -> bool:
        """The model thread is running (started and neither dead nor stopped)."""
        return self.failure is None and self._thread.is_alive()

    def stalled_s(self, now: float | None = None) -> float:
        """Seconds the model thread has held work (queued or running) without a sign of life; 0 when idle."""
        with self._cond:
            busy = bool(self._queue) or self._running_rows > 0
        if not busy:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - self.last_beat)

    def _dead_error(self) -> ModelWorkerError:
        exc = self.failure
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "it stopped"
        return ModelWorkerError(f"the model thread died ({why}); no prediction can be made in this model worker")

    def expect(self) -> None:
        """A request was admitted and will :meth:`submit` (or :meth:`abandon`) soon: worth waiting for."""
        with self._cond:
            self._arriving += 1

    def abandon(self) -> None:
        """An expected request failed before submitting (bad input)."""
        with self._cond:
            self._arriving = max(0, self._arriving - 1)
            if self._arriving == 0:
                self._cond.notify()

    def submit(self, data: Any, *, expected: bool = True) -> Future[BatchResult]:
        """Queue decoded input; the future resolves to a :class:`BatchResult` (or the predict_fn error)."""
        return self._put(_Job(data, None), expected)

    def submit_call(self, call: Callable[[], Any], *, expected: bool = True) -> Future[BatchResult]:
        """Run ``call()`` alone on the model thread (a ``transform_fn`` request); its result is the output."""
        return self._put(_Job(None, call), expected)

    def _put(self, job: _Job, expected: bool) -> Future[BatchResult]:
        with self._cond:
            if self.failure is not None:
                if expected:
                    self._arriving = max(0, self._arriving - 1)
                raise self._dead_error()
            if self._stopping:
                raise RuntimeError("the model thread is stopping")
            if expected:
                self._arriving = max(0, self._arriving - 1)
            self._queue.append(job)
            self._queued_rows += job.rows
            self._peak_rows = max(self._peak_rows, self._queued_rows + self._running_rows)
            # Wake the model thread only when this request can end its wait (the first in an empty queue, or
            # the one that fills the batch): each wake-up costs it a context switch and the GIL.
            if (
                len(self._queue) == 1
                or self._queued_rows >= self._max_rows
                or (self._arriving == 0 and self._queued_rows >= self._wait_rows)
            ):
                self._cond.notify()
        return job.future

    @property
    def on_model_thread(self) -> bool:
        """Whether the caller is the model thread (future callbacks usually run there)."""
        return threading.current_thread() is self._thread

    def counters(self) -> BatcherCounters:
        """A snapshot of the model thread's counters (see :class:`BatcherCounters`)."""
        with self._cond:
            return self._counters

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return len(self._queue)

    def stop(self, timeout: float | None = None) -> bool:
        """Finish what is queued, then end the model thread; True when it ended within ``timeout``."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- model thread -------------------------------------------------------------------------------------
    def _next_batch(self) -> list[_Job]:
        with self._cond:
            while not self._queue:
                if self._stopping:
                    return []
                self._cond.wait(self._beat_s)
                self.last_beat = time.monotonic()
            first = self._queue[0]
            if first.key is not None and self._max_rows > 1:
                deadline = first.enqueued + self._max_delay
                target = min(self._max_rows, self._peak_rows) if self._fill_to_peak else 0
                self._wait_rows = target
                waited = expired = False
                while (
                    self._queued_rows < self._max_rows
                    and (self._arriving > 0 or self._queued_rows < target)
                    and not self._stopping
                ):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        expired = waited
                        break
                    waited = True
                    self._cond.wait(remaining)
                    self.last_beat = time.monotonic()
                self._wait_rows = 0
                if waited:
                    self._counters = replace(
                        self._counters,
                        fill_waits=self._counters.fill_waits + 1,
                        delay_expiries=self._counters.delay_expiries + int(expired),
                    )
            batch = [self._queue.popleft()]
            rows = batch[0].rows
            if batch[0].key is not None:
                while self._queue:
                    nxt = self._queue[0]
                    if nxt.key is None or rows + nxt.rows > self._max_rows:
                        break
                    batch.append(self._queue.popleft())
                    rows += nxt.rows
            self._queued_rows -= rows
            self._running_rows = rows
            self._peak_rows = self._queued_rows + rows
            c = self._counters
            self._counters = replace(c, batches=c.batches + 1, requests=c.requests + len(batch), rows=c.rows + rows)
            return batch

    def _run(self) -> None:
        try:
            self._handler.init_thread()
        except BaseException as exc:
            self._die(exc, initialised=False)  # start() raises it: a failed load, not a death
            return
        finally:
            self._initialised.set()
        try:
            self._serve()
        except BaseException as exc:  # SystemExit from a handler, or a bug here: nothing may wait for this thread
            self._die(exc)

    def _die(self, exc: BaseException, *, initialised: bool = True) -> None:
        """Fail every request queued or running, refuse new ones, and tell ``on_dead``."""
        with self._cond:
            self.failure = exc
            self._stopping = True
            jobs = [*self._current, *self._queue]
            self._queue.clear()
            self._queued_rows = self._running_rows = 0
            self._cond.notify_all()
        error = self._dead_error()
        for job in jobs:
            if not job.future.done():
                with contextlib.suppress(Exception):  # InvalidStateError: it was answered meanwhile
                    job.future.set_exception(error)
        if not initialised:
            return
        self._error("the model thread died", exc)
        if self.on_dead is not None:
            with contextlib.suppress(Exception):
                self.on_dead(exc)

    def _serve(self) -> None:
        while True:
            self.last_beat = time.monotonic()
            batch = self._next_batch()
            if not batch:
                return
            self._current = batch
            started = time.monotonic()
            live = [job for job in batch if job.future.set_running_or_notify_cancel()]
            self._delivered(sum(job.rows for job in batch) - sum(job.rows for job in live))  # cancelled
            groups: dict[Any, list[_Job]] = {}
            for job in live:
                if job.key is None:
                    self._run_alone(job, started)
                else:
                    groups.setdefault(job.key, []).append(job)
            for jobs in groups.values():
                self._run_group(jobs, started)
            with self._cond:
                self._running_rows = 0
                self._current = []
                self.last_beat = time.monotonic()
            hook = self.after_batch
            if hook is not None:
                try:
                    hook()
                except Exception as exc:  # a hook must never stop the model thread
                    self._error("after_batch callback failed", exc)

    def _run_alone(self, job: _Job, started: float) -> None:
        t0 = time.perf_counter()
        try:
            out = job.call() if job.call is not None else to_cpu(self._handler.predict(job.data))
        except Exception as exc:
            self._delivered(job.rows)
            job.future.set_exception(exc)
            return
        model_ms = (time.perf_counter() - t0) * 1000.0
        self._report(1, 1, model_ms)
        self._delivered(job.rows)
        job.future.set_result(BatchResult(out, model_ms, 1, 1, (started - job.enqueued) * 1000.0))

    def _run_group(self, jobs: list[_Job], started: float) -> None:
        sizes = [job.rows for job in jobs]
        rows = sum(sizes)
        t0 = time.perf_counter()
        try:
            data = jobs[0].data if len(jobs) == 1 else torch.cat([job.data for job in jobs])
            out = to_cpu(self._handler.predict(data))
        except Exception as exc:
            if len(jobs) == 1:
                self._delivered(jobs[0].rows)
                jobs[0].future.set_exception(exc)
                return
            self._error(f"predict_fn failed on a batch of {len(jobs)} requests; retrying them one by one", exc)
            for job in jobs:
                self._run_group([job], started)
            return
        model_ms = (time.perf_counter() - t0) * 1000.0
        parts = [out] if len(jobs) == 1 else split_rows(out, sizes)
        if parts is None:
            if not self._unsplittable_warned:
                self._unsplittable_warned = True
                self._error(
                    f"predict_fn output ({type(out).__name__}) has no leading batch dim of {rows} rows; "
                    "running each request alone (predict_fn must map (N, ...) to (N, ...))",
                    None,
                )
            for job in jobs:
                self._run_group([job], started)
            return
        self._report(rows, len(jobs), model_ms)
        self._delivered(rows)  # before the answers go out: the clients' next requests must not see them running
        for job, part in zip(jobs, parts, strict=True):
            job.future.set_result(BatchResult(part, model_ms, rows, len(jobs), (started - job.enqueued) * 1000.0))

    def _delivered(self, rows: int) -> None:
        """``rows`` of the running batch are answered (or cancelled): they no longer count as in the batcher."""
        if rows:
            with self._cond:
                self._running_rows = max(0, self._running_rows - rows)

    def _report(self, rows: int, requests: int, model_ms: float) -> None:
        if self._on_batch is not None:
            try:
                self._on_batch(rows, requests, model_ms, len(self._queue))
            except Exception as exc:  # reporting must never stop the model thread
                self._error("on_batch callback failed", exc)

    def _error(self, message: str, exc: BaseException | None) -> None:
        if self._on_error is None:
            return
        trace = "".join(traceback.format_exception(exc)) if exc is not None else ""
        with contextlib.suppress(Exception):
            self._on_error(message, exc if exc is not None else RuntimeError(message), trace)
