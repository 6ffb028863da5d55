"""Lifecycle: SIGTERM draining (a real process), model loading and load failure, the connection limit."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from serve_http import invoke, raw, request, status_of

from gpu_serve.config import ServeConfig
from gpu_serve.metrics import JsonLogger
from gpu_serve.process import ServerProcess
from gpu_serve.server import ServeApp, serve

pytestmark = pytest.mark.slow


def test_sigterm_drains_in_flight_requests_and_exits_within_30_s(mlp_dir: Path) -> None:
    srv = ServerProcess(mlp_dir, env={"GPU_SERVE_MAX_BATCH_DELAY_MS": "50", "GPU_SERVE_NUM_THREADS": "1"})
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


def test_connections_over_the_limit_get_503(tmp_path: Path) -> None:
    root = _write_handler(tmp_path, "import torch\ndef model_fn(model_dir):\n    return torch.nn.Identity()\n")
    config = ServeConfig(model_dir=root, host="127.0.0.1", port=0, metrics_interval_s=0, max_connections=1)
    app = ServeApp(config, JsonLogger(io.StringIO()))
    thread = threading.Thread(target=lambda: asyncio.run(app.run(install_signals=False)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while app.state != "ready" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert app.port is not None
    try:
        with socket.create_connection(("127.0.0.1", app.port), timeout=5) as first:
            first.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert first.recv(4096).startswith(b"HTTP/1.1 200 OK")  # kept alive: holds the only slot
            response, _ = raw(app.port, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
        assert status_of(response) == 503 and b"too many connections" in response and b"Retry-After: 1" in response
        time.sleep(0.1)  # the first connection is closed now: its slot is free again
        assert request(app.port, "GET", "/ping").status == 200
    finally:
        app.request_stop()
        thread.join(10)
