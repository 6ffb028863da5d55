"""Run the server as a child process and read its JSON log: for benchmarks, tests and local tools.

Example::

    with ServerProcess("path/to/model_dir", env={"GPU_SERVE_MAX_BATCH_SIZE": "16"}) as srv:
        urllib.request.urlopen(srv.url + "/ping")

The child binds a free port (``SAGEMAKER_BIND_TO_PORT=0``); the port is read from its ``start`` log line,
and :meth:`ServerProcess.start` returns once the ``ready`` line is printed (or raises with the log when the
process exits first).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder that holds gpu_serve/


class ServerProcess:
    """A ``python -m gpu_serve serve`` child (or any command that prints the same JSON log)."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.command = list(command) if command else [sys.executable, "-m", "gpu_serve", "serve"]
        child_env = dict(os.environ)
        child_env.update({"SAGEMAKER_BIND_TO_PORT": "0", "GPU_SERVE_HOST": host, "PYTHONUNBUFFERED": "1"})
        if model_dir is not None:
            child_env["GPU_SERVE_MODEL_DIR"] = str(model_dir)
        child_env.update(env or {})
        paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(_PACKAGE_ROOT) not in paths:  # the child imports this very gpu_serve
            child_env["PYTHONPATH"] = os.pathsep.join([str(_PACKAGE_ROOT), *paths])
        self.env = child_env
        self.host = host
        self._port: int | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._events: list[dict[str, Any]] = []
        self._parsed = 0
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0, wait_ready: bool = True) -> ServerProcess:
        """Start the child; return when it is ready (``wait_ready``) or merely listening."""
        self.proc = subprocess.Popen(
            self.command,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, name="server-log-reader", daemon=True)
        self._reader.start()
        start = self.wait_for("start", timeout)
        self._port = int(start["port"])
        if wait_ready:
            self.wait_for("ready", timeout)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``sig`` and wait for the exit code (kill after ``timeout``)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(5)
        return int(self.proc.returncode)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- log -----------------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The port the child listens on (known once :meth:`start` has seen its ``start`` line)."""
        if self._port is None:
            raise RuntimeError("server not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _parse_new(self) -> None:
        """Parse log lines not parsed yet (lazily: the reader thread only stores lines). Holds _cond."""
        while self._parsed < len(self.lines):
            line = self.lines[self._parsed]
            self._parsed += 1
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self._events.append(record)

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """JSON log records so far (only those whose ``event`` is ``event``, if given)."""
        with self._cond:
            self._parse_new()
            return [e for e in self._events if event is None or e.get("event") == event]

    def wait_for(self, event: str, timeout: float = 30.0, **match: Any) -> dict[str, Any]:
        """The first ``event`` record (whose fields equal ``match``); raises with the log on exit/timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                self._parse_new()
                for rec in self._events:
                    if rec.get("event") == event and all(rec.get(k) == v for k, v in match.items()):
                        return rec
                exited = self.proc is not None and self.proc.poll() is not None
                remaining = deadline - time.monotonic()
                if exited or remaining <= 0:
                    why = "exited" if exited else f"did not log {event!r} within {timeout:g} s"
                    tail = "\n".join(self.lines[-40:])
                    raise RuntimeError(f"server {why}; log:\n{tail}")
                self._cond.wait(min(remaining, 0.2))
