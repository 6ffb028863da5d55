"""A model process: loads the model and runs ``input_fn`` -> batched ``predict_fn`` -> ``output_fn``.

The serving process (:mod:`gpu_serve.model_process`) starts ``python -m gpu_serve.worker FD`` with one end
of a Unix socket pair as file descriptor ``FD`` and, on a host with several GPUs, ``CUDA_VISIBLE_DEVICES``
set to the one GPU this process serves. The protocol is in :mod:`gpu_serve.ipc`.

Threads, all in this process and none shared with the HTTP event loop:

- the **main thread** reads frames; it runs ``input_fn`` of a small body at once and queues the request for
  a batch (bodies over 64 KiB are decoded in a pool, ``GPU_SERVE_DECODE_THREADS``);
- the **model thread** (:class:`~gpu_serve.batching.DynamicBatcher`) runs every forward pass;
- the **writer thread** runs ``output_fn`` of each answered request and sends the results, all that are
  ready in one write (large predictions are encoded in the pool; when nothing is queued behind a batch, the
  model thread encodes and sends that batch's answers itself, one hand-off less).

The handler's functions all run in this one process, as in the SageMaker PyTorch toolkit's model server, so
module state that ``model_fn`` sets up is there for ``input_fn`` and ``output_fn`` too.

A **heartbeat thread** sends a ``HEARTBEAT`` frame every ``GPU_SERVE_HEARTBEAT_TIMEOUT_S / 4`` s (at most 1 s
apart) from the moment the configuration arrives; the serving process kills and restarts a model process
that goes silent (stopped, frozen) for longer, or whose model thread holds work without a sign of life for
longer than the larger of that and ``GPU_SERVE_REQUEST_TIMEOUT_S``. A model thread that dies once serving
ends the process with exit code 70 (:data:`gpu_serve.ipc.MODEL_THREAD_DIED_EXIT`), so that it is restarted;
one that fails to initialise is a failed load (``FAILED``).

The process ignores SIGINT and SIGTERM: the serving process drains the requests first and then closes the
socket, which ends this process (so does the serving process's death: the socket closes with it).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gpu_serve import ipc

#: Python's GIL switch interval in a model process. A thread that wants the GIL waits this long before it
#: asks the holder to drop it (https://docs.python.org/3/library/sys.html#sys.setswitchinterval); the model
#: thread takes the GIL back between operators of every forward pass, so a decode running in the main
#: thread could otherwise hold it up for 5 ms (the default) at a time.
SWITCH_INTERVAL_S = 0.001
#: How long the model thread may take to finish the queued batches once the serving process has gone.
STOP_TIMEOUT_S = 10.0


class ChannelLogger:
    """A :class:`~gpu_serve.metrics.JsonLogger` look-alike that hands records to the serving process."""

    def __init__(self, channel: ipc.Channel) -> None:
        self._channel = channel

    def log(self, event: str, **fields: Any) -> None:
        record = json.dumps({"event": event, **fields}, default=str).encode()
        self._channel.send(ipc.LOG, 0, record)


class ModelWorker:
    """The loaded model and the three threads that serve it (see the module docstring)."""

    def __init__(self, channel: ipc.Channel, invoker: Any, decode_threads: int) -> None:
        from gpu_serve.invoker import INLINE_BODY_BYTES, INLINE_OUTPUT_ELEMENTS, numel

        self._channel = channel
        self._invoker = invoker
        self._inline_body = INLINE_BODY_BYTES
        self._inline_output = INLINE_OUTPUT_ELEMENTS
        self._numel = numel
        self._pool = ThreadPoolExecutor(max_workers=decode_threads, thread_name_prefix="gpu-serve-decode")
        self._done: queue.SimpleQueue[tuple[int, Any] | None] = queue.SimpleQueue()
        self._queued: dict[int, Future[Any]] = {}  # request id -> its batch future, until answered
        self._inline_frames: list[bytes] = []  # answers the model thread encoded, sent after its batch
        self._writer = threading.Thread(target=self._write_loop, name="gpu-serve-writer", daemon=True)
        invoker.batcher.after_batch = self._after_batch

    def serve(self) -> None:
        """Read and answer requests until the serving process closes the socket."""
        self._writer.start()
        channel = self._channel
        while True:
            message = channel.read()
            if message is None:
                break
            kind, request_id, payload = message
            if kind == ipc.INVOKE:
                ctype, accept, rid_text, body = ipc.parse_invoke(payload)
                self._invoker.batcher.expect()
                if len(body) <= self._inline_body:
                    self._decode(request_id, body, ctype, accept, rid_text)
                else:
                    self._pool.submit(self._decode, request_id, body, ctype, accept, rid_text)
            elif kind == ipc.CANCEL:
                future = self._queued.get(request_id)
                if future is not None:
                    future.cancel()  # only a request still waiting for its batch can be cancelled
        self._invoker.batcher.stop(STOP_TIMEOUT_S)
        self._done.put(None)
        self._writer.join(STOP_TIMEOUT_S)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._channel.send_frames([])  # batch records still held back

    def _decode(self, request_id: int, body: bytes, ctype: str, accept: str, rid_text: str) -> None:
        try:
            pending = self._invoker.decode(body, ctype, accept, rid_text)
        except Exception as exc:  # a bug in the server, not in the request: answered, logged
            self._internal_error(request_id, rid_text, exc)
            return
        if isinstance(pending, ipc.Outcome):
            self._channel.send(ipc.RESULT, request_id, pending.encode())
            return
        self._queued[request_id] = pending.future
        pending.future.add_done_callback(lambda _: self._answered(request_id, pending))

    def _answered(self, request_id: int, pending: Any) -> None:
        """Done callback, usually on the model thread: encode here when nothing waits for it, else leave it to
        the writer thread.

        When no request is queued behind the batch, the model thread would only sleep: it encodes the batch's
        answers itself and :meth:`_after_batch` sends them in one write, a thread hand-off less per batch (a
        lone client, or N clients that all wait for this batch). Under load the writer thread encodes while
        the model thread runs the next batch.
        """
        future = pending.future
        batcher = self._invoker.batcher
        if (
            batcher.on_model_thread
            and not future.cancelled()
            and future.exception() is None
            and batcher.queue_depth == 0
            and self._done.empty()
        ):
            result = future.result()
            if self._numel(result.prediction) <= self._inline_output:
                self._queued.pop(request_id, None)
                frame = self._finish(request_id, pending, result)
                if frame is not None:
                    self._inline_frames.append(frame)
                return
        self._done.put((request_id, pending))

    def _after_batch(self) -> None:
        """Model thread, after each batch: send what it encoded itself (and the held-back batch record)."""
        frames, self._inline_frames = self._inline_frames, []
        if frames:
            self._channel.send_frames(frames)

    def _write_loop(self) -> None:
        """Encode answered requests; everything answered meanwhile goes out in one write."""
        while True:
            items = [self._done.get()]
            while not self._done.empty():
                items.append(self._done.get())
            frames: list[bytes] = []
            for item in items:
                if item is None:
                    self._channel.send_frames(frames)
                    return
                request_id, pending = item
                self._queued.pop(request_id, None)
                future = pending.future
                if future.cancelled():
                    continue  # timed out or abandoned: the serving process has answered it already
                exc = future.exception()
                result = exc if exc is not None else future.result()
                if exc is None and self._numel(result.prediction) > self._inline_output:
                    self._pool.submit(self._finish_and_send, request_id, pending, result)
                    continue
                frame = self._finish(request_id, pending, result)
                if frame is not None:
                    frames.append(frame)
            self._channel.send_frames(frames)

    def _finish(self, request_id: int, pending: Any, result: Any) -> bytes | None:
        """The RESULT frame of an answered request (None when an internal error was sent instead)."""
        try:
            outcome = self._invoker.finish(pending, result)
        except Exception as exc:
            self._internal_error(request_id, pending.request_id, exc)
            return None
        return ipc.frame(ipc.RESULT, request_id, outcome.encode())

    def _finish_and_send(self, request_id: int, pending: Any, result: Any) -> None:
        frame = self._finish(request_id, pending, result)
        if frame is not None:
            self._channel.send_frames([frame])

    def _internal_error(self, request_id: int, rid_text: str, exc: BaseException) -> None:
        self._invoker.log.log(
            "error",
            message="unhandled error in the model process",
            request_id=rid_text,
            error_type=type(exc).__name__,
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        )
        outcome = ipc.Outcome(500, message=f"internal error in the model process: {type(exc).__name__}: {exc}")
        self._channel.send(ipc.RESULT, request_id, outcome.encode())


class Heartbeat:
    """The heartbeat thread (see the module docstring); ``batcher`` is set once the model is loaded."""

    def __init__(self, channel: ipc.Channel, interval_s: float) -> None:
        self.batcher: Any = None
        self._channel = channel
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-serve-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            batcher = self.batcher
            stalled = batcher.stalled_s() if batcher is not None else 0.0
            if not self._channel.send(ipc.HEARTBEAT, 0, ipc.heartbeat_payload(stalled)):
                return  # the serving process is gone
            self._stop.wait(self._interval_s)


def load(channel: ipc.Channel, config: Any, log: ChannelLogger) -> Any:
    """Load handler and model, warm up, start the model thread; the Invoker, or None after a FAILED frame."""
    from gpu_serve.invoker import load_invoker

    def on_batch(rows: int, requests: int, model_ms: float, queued: int) -> None:
        # Goes out with the batch's results (one write, one wake-up of the serving process).
        channel.defer(ipc.frame(ipc.BATCH, 0, ipc.batch_payload(rows, requests, model_ms, queued)))

    def on_error(message: str, exc: BaseException, trace: str) -> None:
        log.log("error", message=message, error_type=type(exc).__name__, traceback=trace)

    def on_dead(exc: BaseException) -> None:
        # The model thread is gone (its requests were failed and logged): this process cannot serve any more.
        # Exit now, so that the serving process answers what it still holds and starts a new one.
        log.log(
            "error",
            message=f"the model thread died ({type(exc).__name__}: {exc}); the model process exits "
            f"with code {ipc.MODEL_THREAD_DIED_EXIT} to be restarted",
            error_type=type(exc).__name__,
        )
        channel.send(ipc.DIED, 0, b"")
        os._exit(ipc.MODEL_THREAD_DIED_EXIT)

    try:
        invoker, info = load_invoker(config, log, on_batch, on_error, on_dead)
    except Exception as exc:
        failure = {"message": f"model load failed: {exc}", "error_type": type(exc).__name__}
        failure["traceback"] = traceback.format_exc()
        channel.send(ipc.FAILED, 0, json.dumps(failure).encode())
        return None
    channel.send(ipc.READY, 0, info.to_json())
    return invoker


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpu_serve.worker FD``: serve the model over the socket inherited as ``FD``."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not args[0].isdigit():
        print(f"gpu_serve.worker: expected one file descriptor argument, got {args!r}", file=sys.stderr)
        return 2
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    channel = ipc.Channel(socket.socket(fileno=int(args[0])))
    first = channel.read()
    if first is None or first[0] != ipc.CONFIG:
        print("gpu_serve.worker: the serving process sent no configuration", file=sys.stderr)
        return 2
    from gpu_serve.config import ServeConfig

    config = ServeConfig.from_json(first[2])
    heartbeat = Heartbeat(channel, config.heartbeat_interval_s).start()
    log = ChannelLogger(channel)
    invoker = load(channel, config, log)
    if invoker is None:
        heartbeat.stop()
        channel.close()
        return 1
    heartbeat.batcher = invoker.batcher
    ModelWorker(channel, invoker, config.decode_threads).serve()
    heartbeat.stop()
    channel.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
