"""The default layout: the HTTP process hands each request to a model process (``GPU_SERVE_MODEL_PROCESSES``).

The HTTP process parses requests, admits them, and writes responses and logs; it imports neither torch nor
numpy. Each model process (:mod:`gpu_serve.worker`) loads the model and runs ``input_fn``, the batched
``predict_fn`` and ``output_fn``. So the forward pass never waits for the event loop's GIL, and a busy
loop never waits for the model: each process has its own interpreter lock.

One model process per visible GPU (``auto``, the default; one on a CPU or single-GPU host), each seeing only
its own GPU through ``CUDA_VISIBLE_DEVICES`` (:mod:`gpu_serve.devices`). A request goes to the ready model
process with the fewest requests in it (ties to the lowest index), where it is batched with the others there.

A model process that exits while serving (a crash, the kernel's OOM killer) is restarted; the requests it
held are answered 500, and while no model process is ready, invocations get 503 with Retry-After and
``/ping`` 503 ``{"status": "restarting"}``. One that fails to load the model stops the server (exit 1), as
a failed load does in one process. A model process whose model thread dies says so (``DIED``: it stops counting
as ready at once) and exits (code 70), and is restarted the same way.

A hung model process is restarted too: one that sends no ``HEARTBEAT`` frame for ``GPU_SERVE_HEARTBEAT_TIMEOUT_S``
(stopped by SIGSTOP, frozen), or whose model thread has held work without a sign of life for longer than
``max(GPU_SERVE_HEARTBEAT_TIMEOUT_S, GPU_SERVE_REQUEST_TIMEOUT_S)``, stops counting as ready at once (``/ping``
503 while no other is ready), the requests it holds are answered 500 saying so, and it is killed (SIGKILL)
and restarted. The check runs on every ``/ping`` and invocation and every heartbeat interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpu_serve import httpio, ipc
from gpu_serve.config import ServeConfig
from gpu_serve.devices import nvml_device_count, plan_model_processes, visible_gpus
from gpu_serve.ipc import HandlerInfo, Outcome
from gpu_serve.metrics import LogSink

#: After the serving process closes a model process's socket, how long it may take to exit before SIGKILL.
STOP_TIMEOUT_S = 15.0
#: Above this many bytes waiting to go to a model process, a request waits for the socket to drain.
_WRITE_HIGH_WATER = 4 * 1024 * 1024
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder that holds gpu_serve/


class _Worker:
    """One model process: its socket streams and the requests it holds."""

    def __init__(self, index: int, env_override: dict[str, str]) -> None:
        self.index = index
        self.env_override = env_override
        self.proc: subprocess.Popen[bytes] | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.ready = False
        self.info: HandlerInfo | None = None
        self.pending: dict[int, asyncio.Future[Outcome]] = {}
        self.task: asyncio.Task[None] | None = None
        self.starts = 0
        self.reported_failure = False  # it sent a FAILED frame (already logged)
        self.last_seen = time.monotonic()  # its last frame of any kind
        self.stalled_s = 0.0  # from its last heartbeat: how long its model thread has held work without life
        self.hung: str | None = None  # why it was declared hung (then it is being killed)
        self.died = False  # it sent DIED: its model thread is gone and it is exiting
        self.ever_ready = False  # this incarnation loaded the model

    def send(self, kind: int, request_id: int, parts: list[bytes]) -> None:
        if self.writer is None or self.writer.is_closing():
            raise ConnectionError(f"model process {self.index} is not connected")
        size = sum(len(p) for p in parts)
        self.writer.writelines([ipc.HEADER.pack(size, kind, request_id), *parts])

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"index": self.index, "pid": self.proc.pid if self.proc else None}
        out.update({k.lower(): v for k, v in self.env_override.items()})
        return out


class ModelProcesses:
    """The model backend of the default layout (see the module docstring)."""

    kind = "process"

    def __init__(self, config: ServeConfig, log: LogSink, on_batch: Callable[[int, int, float, int], None]) -> None:
        self.config = config
        self.log = log
        self._on_batch = on_batch
        self._workers: list[_Worker] = []
        self._ids = itertools.count(1)
        self._stopping = False
        self._loaded = False
        self._on_ready: Callable[[HandlerInfo], None] | None = None
        self._on_failed: Callable[[], None] | None = None
        self._watchdog: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self, on_ready: Callable[[HandlerInfo], None], on_failed: Callable[[], None]) -> None:
        """Start the model processes (on the running loop); ``on_ready`` once every one has loaded."""
        self._on_ready, self._on_failed = on_ready, on_failed
        gpus = visible_gpus(nvml_device_count()) if self.config.device in ("auto", "cuda") else []
        self._workers = [_Worker(i, env) for i, env in enumerate(plan_model_processes(self.config, gpus))]
        loop = asyncio.get_running_loop()
        for worker in self._workers:
            worker.task = loop.create_task(self._run(worker))
        self._watchdog = loop.create_task(self._watch())

    @property
    def available(self) -> bool:
        now = time.monotonic()
        return any(self._serving(w, now) for w in self._workers)

    @property
    def unavailable_state(self) -> str:
        """The ``/ping`` status while no model process can take a request."""
        return "restarting"

    @property
    def unavailable_message(self) -> str:
        return "no model process is ready (one is restarting); retry later"

    def _serving(self, worker: _Worker, now: float) -> bool:
        """Ready, connected and alive: a model process found hung here is killed (and restarted by _run)."""
        if not worker.ready or worker.hung is not None or worker.died:
            return False
        timeout = self.config.heartbeat_timeout_s
        silent = now - worker.last_seen
        if silent > timeout:
            why = f"sent no heartbeat for {silent:.1f} s (GPU_SERVE_HEARTBEAT_TIMEOUT_S={timeout:g})"
        elif worker.stalled_s > self.config.stall_timeout_s:
            limit = self.config.stall_timeout_s
            why = (
                f"its model thread has held requests for {worker.stalled_s:.1f} s without finishing a forward pass "
                f"(limit: max(GPU_SERVE_HEARTBEAT_TIMEOUT_S, GPU_SERVE_REQUEST_TIMEOUT_S)={limit:g} s)"
            )
        else:
            return True
        self._hung(worker, why)
        return False

    def _hung(self, worker: _Worker, why: str) -> None:
        pid = worker.proc.pid if worker.proc else "?"
        worker.hung = why
        message = f"model process {worker.index} (pid {pid}) is hung: it {why}; killed, restarting it"
        self.log.log("error", message=message, model_process=worker.index)
        for future in worker.pending.values():
            if not future.done():
                future.set_result(Outcome(500, message=f"{message}; this request was in it, retry"))
        worker.pending.clear()
        if worker.proc is not None and worker.proc.poll() is None:
            worker.proc.kill()  # works on a stopped process too; its socket closes, and _run restarts it

    async def _watch(self) -> None:
        """Find hung model processes between requests too (see :meth:`_serving`)."""
        while not self._stopping:
            await asyncio.sleep(self.config.heartbeat_interval_s)
            now = time.monotonic()
            for worker in self._workers:
                self._serving(worker, now)

    def describe(self) -> dict[str, object]:
        return {"model_processes": len(self._workers), "model_process_list": [w.describe() for w in self._workers]}

    async def stop(self) -> None:
        """Close every model process's socket (it finishes its queue and exits) and wait for it (SIGKILL after
        ``STOP_TIMEOUT_S``); one still loading the model is killed at once."""
        self._stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        loop = asyncio.get_running_loop()
        for worker in self._workers:
            if worker.writer is not None:
                worker.writer.close()
            if not worker.ready and worker.proc is not None and worker.proc.poll() is None:
                worker.proc.kill()  # still loading the model (it reads its socket only once loaded): holds nothing
        for worker in self._workers:
            proc = worker.proc
            if proc is None:
                continue
            try:
                await loop.run_in_executor(None, proc.wait, STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.log.log("warning", message=f"model process {worker.index} (pid {proc.pid}) did not exit; killed")
                proc.kill()
                await loop.run_in_executor(None, proc.wait)
        for worker in self._workers:
            if worker.task is not None and not worker.task.done():
                worker.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker.task

    async def _spawn(self, worker: _Worker) -> asyncio.StreamReader:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(_PACKAGE_ROOT) not in paths:  # the child imports this very gpu_serve
            env["PYTHONPATH"] = os.pathsep.join([str(_PACKAGE_ROOT), *paths])
        env.update(worker.env_override)
        try:
            worker.proc = subprocess.Popen(
                [sys.executable, "-m", "gpu_serve.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
            )
        finally:
            theirs.close()
        worker.starts += 1
        worker.reported_failure = False
        worker.last_seen, worker.stalled_s, worker.hung, worker.ever_ready = time.monotonic(), 0.0, None, False
        worker.died = False
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=httpio.MAX_HEAD_BYTES)
        worker.writer = writer
        worker.send(ipc.CONFIG, 0, [ipc.config_payload(self.config)])
        return reader

    async def _run(self, worker: _Worker) -> None:
        """Start the model process and read its frames; restart it when it dies after loading."""
        while not self._stopping:
            try:
                reader = await self._spawn(worker)
            except OSError as exc:
                self.log.log("error", message=f"cannot start model process {worker.index}: {exc}")
                self._fail()
                return
            await self._pump(worker, reader)
            served, worker.ready = worker.ever_ready, False
            if worker.writer is not None:
                worker.writer.close()
            code = await self._exit_code(worker)
            self._fail_pending(worker, code)
            if self._stopping:
                return
            if not served:  # it never loaded the model: the server cannot serve, as after a failed load
                if not worker.reported_failure:
                    self.log.log(
                        "error", message=f"model process {worker.index} exited with code {code} before it was ready"
                    )
                self._fail()
                return
            self.log.log(
                "error",
                message=f"model process {worker.index} (pid {worker.proc.pid if worker.proc else '?'}) exited "
                f"with code {code} while serving{self._why(worker, code)}; restarting it",
                exit_code=code,
            )

    @staticmethod
    def _why(worker: _Worker, code: int | None) -> str:
        if worker.hung is not None:
            return " (killed: it was hung)"
        if code == ipc.MODEL_THREAD_DIED_EXIT:
            return " (its model thread died; the error line before says why)"
        return ""

    async def _exit_code(self, worker: _Worker) -> int | None:
        proc = worker.proc
        if proc is None:
            return None
        try:
            return await asyncio.get_running_loop().run_in_executor(None, proc.wait, STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # closed its socket but lives on: it cannot serve any more
            proc.kill()
            return await asyncio.get_running_loop().run_in_executor(None, proc.wait)

    def _fail(self) -> None:
        if self._on_failed is not None and not self._stopping:
            self._stopping = True
            self._on_failed()

    def _fail_pending(self, worker: _Worker, code: int | None) -> None:
        pid = worker.proc.pid if worker.proc else "?"
        for future in worker.pending.values():
            if not future.done():
                future.set_result(
                    Outcome(
                        500,
                        message=f"the model process (pid {pid}) exited with code {code}{self._why(worker, code)} "
                        "while it held this request; it is being restarted",
                    )
                )
        worker.pending.clear()

    async def _pump(self, worker: _Worker, reader: asyncio.StreamReader) -> None:
        header = ipc.HEADER
        while True:
            try:
                head = await reader.readexactly(header.size)
                size, kind, request_id = header.unpack(head)
                payload = await reader.readexactly(size) if size else b""
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            worker.last_seen = time.monotonic()
            if kind == ipc.HEARTBEAT:
                worker.stalled_s = ipc.parse_heartbeat(payload)
            elif kind == ipc.DIED:
                worker.died = True  # not ready from now on; _run answers what it held once it has exited
            elif kind == ipc.RESULT:
                outcome = Outcome.decode(payload)
                if outcome.worker_died:  # its DIED frame may come after this answer, or not at all (os._exit)
                    worker.died = True
                future = worker.pending.get(request_id)
                if future is not None and not future.done():
                    future.set_result(outcome)
            elif kind == ipc.BATCH:
                self._on_batch(*ipc.parse_batch(payload))
            elif kind == ipc.LOG:
                record = json.loads(payload)
                event = record.pop("event", "log")
                if len(self._workers) > 1:
                    record["model_process"] = worker.index
                self.log.log(event, **record)
            elif kind == ipc.READY:
                self._worker_ready(worker, HandlerInfo.from_json(payload))
            elif kind == ipc.FAILED:
                failure = json.loads(payload)
                worker.reported_failure = True
                if len(self._workers) > 1:
                    failure["model_process"] = worker.index
                self.log.log("error", **failure)

    def _worker_ready(self, worker: _Worker, info: HandlerInfo) -> None:
        restarted = worker.info is not None
        worker.info, worker.ready, worker.ever_ready = info, True, True
        if restarted:
            self.log.log("model_process_restarted", index=worker.index, pid=info.pid, load_s=info.load_s)
        if not self._loaded and all(w.ready for w in self._workers):
            self._loaded = True
            if self._on_ready is not None:
                self._on_ready(self._workers[0].info or info)

    # -- requests -----------------------------------------------------------------------------------------
    def expect(self) -> None:
        """Nothing to announce: the model process counts a request as arriving once it has its body."""

    def abandon(self) -> None:
        """See :meth:`expect`."""

    def _pick(self) -> _Worker | None:
        """The ready model process with the fewest requests in it; ties go to the lowest index, so that a
        light load keeps one process (its caches, its GPU clocks) warm instead of alternating."""
        now = time.monotonic()
        ready = [
            w for w in self._workers if self._serving(w, now) and w.writer is not None and not w.writer.is_closing()
        ]
        if not ready:
            return None
        return min(ready, key=lambda w: (len(w.pending), w.index))

    async def invoke(self, body: bytes, ctype: str, accept: str, request_id: str, deadline: float) -> Outcome:
        """Send the request to a model process and wait for its answer (504 at ``deadline``)."""
        worker = self._pick()
        if worker is None:
            return Outcome(503, message=self.unavailable_message)
        rid = next(self._ids)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        worker.pending[rid] = future
        try:
            worker.send(ipc.INVOKE, rid, ipc.invoke_payload(ctype, accept, request_id, body))
            assert worker.writer is not None
            if worker.writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                await worker.writer.drain()
            outcome = await httpio.within(max(0.0, deadline - time.monotonic()), future)
            if len(self._workers) > 1:
                outcome.model_process = worker.index
            return outcome
        except TimeoutError:
            self._cancel(worker, rid)
            return ipc.timeout_outcome(self.config.request_timeout_s)
        except ConnectionError:
            return Outcome(500, message=f"model process {worker.index} is gone; retry")
        except asyncio.CancelledError:
            self._cancel(worker, rid)
            raise
        finally:
            worker.pending.pop(rid, None)

    @staticmethod
    def _cancel(worker: _Worker, rid: int) -> None:
        """Tell the model process to drop a request that still waits for its batch (best effort)."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            worker.send(ipc.CANCEL, rid, [])
