"""Lifecycle: SIGTERM draining (a real process), model loading and load failure, the connection limit."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from serve_http import invoke, raw, request, status_of

from gpu_serve import server as server_module
from gpu_serve.config import ServeConfig
from gpu_serve.metrics import JsonLogger
from gpu_serve.process import ServerProcess
from gpu_serve.server import ServeApp, serve

pytestmark = pytest.mark.slow


#: GPU_SERVE_MODEL_PROCESSES of the two process layouts: a model process (the default), or the model on a thread
#: of the HTTP process.
LAYOUTS = pytest.mark.parametrize("model_processes", ["auto", "0"], ids=["model-process", "in-process"])


@LAYOUTS
def test_sigterm_drains_in_flight_requests_and_exits_within_30_s(mlp_dir: Path, model_processes: str) -> None:
    env = {"GPU_SERVE_MAX_BATCH_DELAY_MS": "50", "GPU_SERVE_NUM_THREADS": "1"}
    srv = ServerProcess(mlp_dir, env={**env, "GPU_SERVE_MODEL_PROCESSES": model_processes})
    srv.start(timeout=90)
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            # 888 makes a forward pass sleep 1 s: these three are in flight (batched) when SIGTERM arrives.
            in_flight = [pool.submit(invoke, srv.port, [[888, 0, 0, i]]) for i in range(3)]
            time.sleep(0.3)
            assert srv.proc is not None
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            srv.wait_for("draining", timeout=5)
            refused = invoke(srv.port, [[1, 2, 3, 4]])
            ping = request(srv.port, "GET", "/ping")
            replies = [f.result(timeout=30) for f in in_flight]
        code = srv.proc.wait(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        srv.stop(timeout=5)
    assert [r.status for r in replies] == [200, 200, 200]  # drained, not cut
    assert refused.status == 503 and refused.headers["retry-after"] == "1"
    assert refused.headers["connection"] == "close" and "shutting down" in refused.json()["message"]
    assert ping.status == 503 and ping.json() == {"status": "draining"}
    assert code == 0 and elapsed < 30
    stop = srv.wait_for("stop")
    assert stop["drained"] is True and stop["invocations_ok"] == 3
    assert srv.events("draining")[0]["inflight"] >= 2
    if model_processes == "auto":  # the model process finished its work and exited with the server
        pid = srv.events("ready")[0]["model_process_list"][0]["pid"]
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def _write_handler(root: Path, source: str) -> Path:
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text(source)
    return root


def _log_events(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_model_load_failure_exits_non_zero_with_the_cause(tmp_path: Path) -> None:
    root = _write_handler(tmp_path, "def model_fn(model_dir):\n    raise OSError('weights are gone')\n")
    stream = io.StringIO()
    config = ServeConfig(model_dir=root, host="127.0.0.1", port=0, metrics_interval_s=0)
    assert serve(config, logger=JsonLogger(stream), install_signals=False) == 1
    events = _log_events(stream)
    error = next(e for e in events if e["event"] == "error")
    assert "model_fn" in error["message"] and "OSError: weights are gone" in error["message"]
    assert events[-1]["event"] == "stop" and events[-1]["exit_code"] == 1


def test_ping_is_503_while_the_model_loads(tmp_path: Path) -> None:
    gate = tmp_path / "release"
    root = _write_handler(
        tmp_path,
        "import os, time, torch\n"
        "def model_fn(model_dir):\n"
        f"    while not os.path.exists({str(gate)!r}):\n"
        "        time.sleep(0.02)\n"
        "    return torch.nn.Identity()\n",
    )
    app = ServeApp(
        ServeConfig(model_dir=root, host="127.0.0.1", port=0, metrics_interval_s=0), JsonLogger(io.StringIO())
    )
    thread = threading.Thread(target=lambda: asyncio.run(app.run(install_signals=False)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while app.port is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert app.port is not None
    try:
        loading = request(app.port, "GET", "/ping")
        early = invoke(app.port, [[1.0]])
        gate.touch()
        deadline = time.monotonic() + 60  # a model process imports torch first
        while app.state != "ready" and time.monotonic() < deadline:
            time.sleep(0.02)
        ready = request(app.port, "GET", "/ping")
        answered = invoke(app.port, [[1.0, 2.0]])
    finally:
        app.request_stop()
        thread.join(10)
    assert (loading.status, loading.json()) == (503, {"status": "loading"})
    assert early.status == 503 and "loading the model" in early.json()["message"]
    assert ready.status == 200 and answered.json() == [[1.0, 2.0]]
    assert not thread.is_alive()


@contextlib.contextmanager
def running_app(config: ServeConfig, stream: io.StringIO) -> Iterator[ServeApp]:
    """A ServeApp serving on a thread until the block ends (then stopped, as SIGTERM would)."""
    app = ServeApp(config, JsonLogger(stream))
    thread = threading.Thread(target=lambda: asyncio.run(app.run(install_signals=False)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a model process imports torch first
    while app.state != "ready" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert app.port is not None and app.state == "ready", stream.getvalue()
    try:
        yield app
    finally:
        app.request_stop()
        thread.join(10)
    assert not thread.is_alive()


IDENTITY = "import torch\ndef model_fn(model_dir):\n    return torch.nn.Identity()\n"
#: A 32 MiB answer: more than the socket buffers of both ends hold, so a client that does not read it (or is
#: gone) keeps the response from being written completely.
BIG_ANSWER = IDENTITY + "def transform_fn(model, body, content_type, accept):\n    return b'x' * (32 << 20)\n"
POST = b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"


def _wait_for_event(stream: io.StringIO, event: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in _log_events(stream) if e["event"] == event]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no {event!r} line within {timeout} s; log:\n{stream.getvalue()[-3000:]}")


@pytest.mark.parametrize("model_processes", [None, 0], ids=["model-process", "in-process"])
def test_ping_is_answered_over_the_connection_limit_and_other_requests_get_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_processes: int | None
) -> None:
    root = _write_handler(tmp_path, IDENTITY)
    config = ServeConfig(
        model_dir=root,
        host="127.0.0.1",
        port=0,
        metrics_interval_s=0,
        max_connections=1,
        model_processes=model_processes,
    )
    monkeypatch.setattr(server_module, "OVER_LIMIT_HEAD_TIMEOUT_S", 0.3, raising=False)
    stream = io.StringIO()
    with running_app(config, stream) as app:
        with socket.create_connection(("127.0.0.1", app.port), timeout=5) as first:
            first.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert first.recv(4096).startswith(b"HTTP/1.1 200 OK")  # kept alive: holds the only slot
            # SageMaker's health check must never be refused: it is answered, and the connection closed.
            ping, _ = raw(app.port, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
            refused, _ = raw(app.port, POST, timeout=5)
            silent, seconds = raw(app.port, b"", timeout=5)  # sends no request head at all
        time.sleep(0.1)  # the first connection is closed now: its slot is free again
        after = invoke(app.port, [[1.0, 2.0]])
    assert status_of(ping) == 200 and b"Connection: close" in ping and ping.endswith(b'{"status": "healthy"}')
    assert status_of(refused) == 503 and b"Retry-After: 1" in refused
    assert b"too many connections: 1 open, GPU_SERVE_MAX_CONNECTIONS=1" in refused
    assert status_of(silent) == 503 and seconds < 2
    assert after.status == 200 and after.json() == [[1.0, 2.0]]
    throttled = [e for e in _log_events(stream) if e["event"] == "access" and e["status"] == 503]
    assert [e["path"] for e in throttled] == ["/invocations"]


def test_a_response_cut_off_by_the_client_is_not_a_success(tmp_path: Path) -> None:
    root = _write_handler(tmp_path, BIG_ANSWER)
    stream = io.StringIO()
    config = ServeConfig(model_dir=root, host="127.0.0.1", port=0, metrics_interval_s=0)
    with running_app(config, stream) as app:
        with socket.create_connection(("127.0.0.1", app.port), timeout=5) as sock:
            sock.sendall(POST)  # and hang up without reading the answer
        access = _wait_for_event(stream, "access")
        counters = app.counters.snapshot()
    assert access["status"] == 499 and access["cut_off"] == "client" and access["sent_status"] == 200
    assert "client closed the connection before the response was complete" in access["error"]
    assert counters["invocations_ok"] == 0 and counters["errors_by_status"] == {"499": 1}


def test_a_response_cut_off_by_the_shutdown_is_logged_before_stop(tmp_path: Path) -> None:
    root = _write_handler(tmp_path, BIG_ANSWER)
    stream = io.StringIO()
    config = ServeConfig(model_dir=root, host="127.0.0.1", port=0, metrics_interval_s=0, drain_timeout_s=0.3)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # no receive-window autotuning
        with running_app(config, stream) as app:
            sock.settimeout(5)
            sock.connect(("127.0.0.1", app.port))
            sock.sendall(POST)
            assert sock.recv(15) == b"HTTP/1.1 200 OK"  # the answer is being written; the client stalls
        events = _log_events(stream)
    names = [e["event"] for e in events]
    access = next(e for e in events if e["event"] == "access")
    assert names.index("access") < names.index("stop")
    assert access["status"] == 503 and access["cut_off"] == "shutdown" and access["sent_status"] == 200
    assert "server shut down before the response was complete" in access["error"]
    stop = events[-1]
    assert stop["event"] == "stop" and stop["drained"] is False
    assert stop["invocations_ok"] == 0 and stop["errors_by_status"] == {"503": 1}
