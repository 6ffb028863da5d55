"""A dead or hung model worker is never healthy: /ping turns 503 at once, the requests it holds are answered with a
clear 500 (never left to the request timeout), and it is restarted (a model process) or the server exits non-zero
(a model thread that cannot be replaced in its process). Both layouts, failures injected by the handler."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import time
from pathlib import Path

import pytest
from serve_http import invoke, request

from gpu_serve.config import ServeConfig
from gpu_serve.errors import ConfigError
from gpu_serve.process import ServerProcess

pytestmark = pytest.mark.slow

LAYOUTS = pytest.mark.parametrize("model_processes", ["1", "0"], ids=["model-process", "in-process"])

# Test hooks, keyed on a row's first feature: -2 -> SystemExit escapes predict_fn (the model thread dies, as it
# would on a fatal error that is no Exception); -3 -> the forward pass hangs for HANG_S seconds.
# FAIL_MODEL_THREAD_INIT=1 makes the model thread's initialisation fail, as an unusable CUDA device would.
FRAGILE = """
import os
import threading
import time

import torch

_set_num_threads = torch.set_num_threads


def _guarded(n):
    if os.environ.get("FAIL_MODEL_THREAD_INIT") and threading.current_thread().name == "gpu-serve-model":
        raise RuntimeError("injected: the model thread cannot initialise")
    return _set_num_threads(n)


torch.set_num_threads = _guarded


def model_fn(model_dir):
    return torch.nn.Identity()


def predict_fn(data, model):
    first = data[:, 0]
    if bool((first == -2).any()):
        raise SystemExit("injected: the model thread exits")
    if bool((first == -3).any()):
        time.sleep(float(os.environ.get("HANG_S", "3")))
    return model(data)
"""

ENV = {"GPU_SERVE_DEVICE": "cpu", "GPU_SERVE_METRICS_INTERVAL_S": "0", "GPU_SERVE_MAX_BATCH_DELAY_MS": "1"}


@pytest.fixture
def fragile_dir(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "inference.py").write_text(FRAGILE)
    return tmp_path


def _wait_for_ping(port: int, status: str, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.append(request(port, "GET", "/ping").json()["status"])
        if seen[-1] == status:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"/ping never said {status!r} within {timeout} s; it said {seen[-5:]}")


@pytest.mark.parametrize("value", ["0", "0.1", "-1", "soon", "3601"])
def test_heartbeat_timeout_setting_refuses_what_it_cannot_mean(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        ServeConfig.from_env({"GPU_SERVE_HEARTBEAT_TIMEOUT_S": value})
    assert str(err.value).startswith("GPU_SERVE_HEARTBEAT_TIMEOUT_S=") and value in str(err.value)
    assert "is not allowed; allowed: " in str(err.value)


def test_heartbeat_defaults_and_bounds() -> None:
    config = ServeConfig.from_env({})
    assert (config.heartbeat_timeout_s, config.heartbeat_interval_s, config.stall_timeout_s) == (10.0, 1.0, 55.0)
    short = ServeConfig(heartbeat_timeout_s=0.4, request_timeout_s=0.2)
    assert (short.heartbeat_interval_s, short.stall_timeout_s) == (0.1, 0.4)


@LAYOUTS
def test_a_model_thread_that_cannot_initialise_fails_the_load(fragile_dir: Path, model_processes: str) -> None:
    env = {**ENV, "GPU_SERVE_MODEL_PROCESSES": model_processes, "FAIL_MODEL_THREAD_INIT": "1"}
    srv = ServerProcess(fragile_dir, env=env).start(timeout=60, wait_ready=False)
    assert srv.proc is not None
    code = srv.proc.wait(timeout=60)
    assert code == 1  # SageMaker replaces an instance whose server exits
    assert not srv.events("ready")
    errors = [e["message"] for e in srv.events("error")]
    assert any("model thread failed to initialise" in m and "injected" in m for m in errors), errors


@pytest.mark.parametrize("model_processes", ["1"], ids=["model-process"])
def test_a_model_process_whose_model_thread_dies_is_restarted(fragile_dir: Path, model_processes: str) -> None:
    env = {**ENV, "GPU_SERVE_MODEL_PROCESSES": model_processes, "GPU_SERVE_REQUEST_TIMEOUT_S": "30"}
    srv = ServerProcess(fragile_dir, env=env).start(timeout=60)
    try:
        died = invoke(srv.port, [[-2.0, 1.0]])
        at_once = request(srv.port, "GET", "/ping")  # the model process said it died before it exited
        answered = time.time()
        pings = _wait_for_ping(srv.port, "healthy", 60)
        after = invoke(srv.port, [[1.0, 2.0]])
        restarted = srv.wait_for("model_process_restarted", 10)
    finally:
        assert srv.stop() == 0
    assert died.status == 500 and died.seconds < 10, died
    assert "model thread died" in died.json()["message"]
    assert after.status == 200 and after.json() == [[1.0, 2.0]]
    exited = [e for e in srv.events("error") if "while serving" in e["message"]]
    assert exited and exited[0]["exit_code"] == 70, srv.events("error")
    # 503 until the replacement is up; on a loaded machine it may be up before this ping is answered.
    replaced_first = _epoch(restarted["ts"]) <= answered
    expected = (200, {"status": "healthy"}) if replaced_first else (503, {"status": "restarting"})
    assert (at_once.status, at_once.json()) == expected
    assert pings[-1] == "healthy"


def test_an_in_process_model_thread_that_dies_stops_the_server_non_zero(fragile_dir: Path) -> None:
    env = {**ENV, "GPU_SERVE_MODEL_PROCESSES": "0", "GPU_SERVE_REQUEST_TIMEOUT_S": "30"}
    srv = ServerProcess(fragile_dir, env=env).start(timeout=60)
    assert srv.proc is not None
    try:
        died = invoke(srv.port, [[-2.0, 1.0]])
        with contextlib.suppress(ConnectionError):  # it may already be gone
            ping = request(srv.port, "GET", "/ping")
            assert ping.status == 503, ping
        code = srv.proc.wait(timeout=30)
    finally:
        srv.stop(timeout=5)
    assert died.status == 500 and died.seconds < 10 and "model thread died" in died.json()["message"], died
    assert code == 1
    assert any("it cannot be restarted in this process" in e["message"] for e in srv.events("error"))
    assert srv.events("stop")[-1]["exit_code"] == 1


def test_a_stopped_model_process_is_unhealthy_its_requests_fail_fast_and_it_is_replaced(fragile_dir: Path) -> None:
    env = {
        **ENV,
        "GPU_SERVE_MODEL_PROCESSES": "1",
        "GPU_SERVE_HEARTBEAT_TIMEOUT_S": "0.5",
        "GPU_SERVE_REQUEST_TIMEOUT_S": "30",
    }
    srv = ServerProcess(fragile_dir, env=env).start(timeout=60)
    pid = int(srv.events("ready")[0]["model_process_list"][0]["pid"])
    try:
        os.kill(pid, signal.SIGSTOP)  # frozen: it neither answers nor exits
        held = invoke(srv.port, [[1.0, 2.0]])
        pings = _wait_for_ping(srv.port, "healthy", 60)
        after = invoke(srv.port, [[3.0, 4.0]])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        assert srv.stop() == 0
    assert held.status == 500 and held.seconds < 5, held
    assert "is hung" in held.json()["message"] and "sent no heartbeat" in held.json()["message"]
    assert "restarting" in pings and after.status == 200 and after.json() == [[3.0, 4.0]]
    assert srv.events("model_process_restarted")[0]["pid"] != pid


def test_an_in_process_model_thread_stuck_in_a_forward_pass_is_unhealthy_until_it_finishes(
    fragile_dir: Path,
) -> None:
    env = {
        **ENV,
        "GPU_SERVE_MODEL_PROCESSES": "0",
        "GPU_SERVE_HEARTBEAT_TIMEOUT_S": "0.2",
        "GPU_SERVE_REQUEST_TIMEOUT_S": "1",
        "HANG_S": "2.5",
    }
    srv = ServerProcess(fragile_dir, env=env).start(timeout=60)
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            stuck = pool.submit(invoke, srv.port, [[-3.0, 1.0]])
            pings = _wait_for_ping(srv.port, "hung", 5)
            refused = invoke(srv.port, [[1.0, 2.0]])
            recovered = _wait_for_ping(srv.port, "healthy", 10)
            after = invoke(srv.port, [[1.0, 2.0]])
            stuck_reply = stuck.result(timeout=10)
    finally:
        assert srv.stop() == 0
    assert pings[-1] == "hung" and recovered[-1] == "healthy"
    assert refused.status == 503 and refused.seconds < 1 and "model thread is hung" in refused.json()["message"]
    assert stuck_reply.status in (500, 504) and stuck_reply.seconds < 2
    assert after.status == 200
    assert any("the model thread is hung" in e["message"] for e in srv.events("error"))
    assert srv.events("model_thread_recovered")


def _epoch(ts: str) -> float:
    """A log record's ``ts`` (``2026-11-27T22:56:57.620Z``, UTC) as seconds since the epoch."""
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()
