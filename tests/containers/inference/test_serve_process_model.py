"""The process layout: an HTTP process without torch, model processes (one per GPU), their wire, restarts.

The HTTP behaviour of both layouts is tested in test_serve_http.py (its server fixture runs each test in both);
SIGTERM draining and /ping over the connection limit in test_serve_lifecycle.py.
"""

from __future__ import annotations

import io
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from serve_http import invoke, request

from gpu_serve import ipc
from gpu_serve.config import ServeConfig
from gpu_serve.devices import plan_model_processes, visible_gpus
from gpu_serve.errors import ConfigError
from gpu_serve.metrics import JsonLogger
from gpu_serve.process import ServerProcess


# -- which model processes start where ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("listed", "expected"),
    [
        (None, ["0", "1", "2", "3"]),
        ("2,0", ["2", "0"]),
        (" 3 , 1 ", ["3", "1"]),
        ("1,7,0", ["1"]),  # CUDA stops at the first invalid entry (7: there are only 4 GPUs)
        ("1,-1,0", ["1"]),
        ("0,0", ["0"]),
        ("GPU-8d1b9e2a,MIG-4f0c", ["GPU-8d1b9e2a", "MIG-4f0c"]),
        ("", []),
        ("-1", []),
    ],
)
def test_visible_gpus_read_cuda_visible_devices_as_cuda_does(listed: str | None, expected: list[str]) -> None:
    environ = {} if listed is None else {"CUDA_VISIBLE_DEVICES": listed}
    assert visible_gpus(4, environ) == expected


def test_no_driver_means_no_gpus_whatever_the_environment_says() -> None:
    assert visible_gpus(0, {"CUDA_VISIBLE_DEVICES": "0,1"}) == []


@pytest.mark.parametrize(
    ("device", "model_processes", "gpus", "expected"),
    [
        ("auto", None, ["0", "1", "2", "3"], ["0", "1", "2", "3"]),  # one model process per GPU
        ("cuda", None, ["5", "7"], ["5", "7"]),
        ("auto", None, ["0"], [None]),  # one GPU: one model process, environment untouched
        ("auto", None, [], [None]),  # CPU host
        ("cpu", None, ["0", "1"], [None]),
        ("cuda:1", None, ["0", "1"], [None]),  # pinned to one device
        ("auto", 2, ["0", "1", "2", "3"], ["0", "1"]),
        ("auto", 3, ["0", "1"], ["0", "1", "0"]),  # round-robin: two share GPU 0
        ("cpu", 2, [], [None, None]),  # two copies of a CPU model
    ],
)
def test_plan_starts_one_model_process_per_gpu_unless_told_otherwise(
    device: str, model_processes: int | None, gpus: list[str], expected: list[str | None]
) -> None:
    config = ServeConfig(device=device, model_processes=model_processes)
    plan = plan_model_processes(config, gpus)
    assert [env.get("CUDA_VISIBLE_DEVICES") for env in plan] == expected


@pytest.mark.parametrize(("value", "parsed"), [("auto", None), ("AUTO", None), ("", None), ("0", 0), ("4", 4)])
def test_model_processes_setting_accepts_auto_and_counts(value: str, parsed: int | None) -> None:
    config = ServeConfig.from_env({"GPU_SERVE_MODEL_PROCESSES": value})
    assert config.model_processes == parsed


@pytest.mark.parametrize("value", ["two", "-1", "65", "1.5"])
def test_model_processes_setting_refuses_anything_else_naming_what_is_allowed(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        ServeConfig.from_env({"GPU_SERVE_MODEL_PROCESSES": value})
    message = str(err.value)
    assert message.startswith("GPU_SERVE_MODEL_PROCESSES=") and value in message
    assert message.endswith("is not allowed; allowed: auto or an integer from 0 to 64")


# -- the wire ------------------------------------------------------------------------------------------------------
def test_outcomes_invocations_and_the_config_cross_the_socket_unchanged(tmp_path: Path) -> None:
    ok = ipc.Outcome(200, b'{"p": [1]}', "application/json", model_latency_ms=2.5, queue_ms=0.25)
    ok.batch_size, ok.batch_requests = 8, 3
    assert ipc.Outcome.decode(ok.encode()) == ok
    bad = ipc.Outcome(400, message="input has shape [1, 3]", details={"expected_shape": ["N", 4]})
    assert ipc.Outcome.decode(bad.encode()) == bad
    # The answer of a request whose model thread died says so, for the serving process's health before the client's.
    died = ipc.Outcome(500, message="the model thread died (SystemExit: 3)", worker_died=True)
    assert ipc.Outcome.decode(died.encode()) == died and ipc.Outcome.decode(bad.encode()).worker_died is False

    body = bytes(range(256)) * 300  # binary, larger than one socket read
    payload = b"".join(ipc.invoke_payload("application/x-npy", "application/json", "req-é1", body))
    assert ipc.parse_invoke(payload) == ("application/x-npy", "application/json", "req-é1", body)

    config = ServeConfig(model_dir=tmp_path, input_shape=(3, 8, 8), max_batch_delay_ms=2.5, model_processes=2)
    assert ServeConfig.from_json(ipc.config_payload(config)) == config


class _CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_deferred_log_lines_go_out_together_and_before_any_later_line() -> None:
    stream = _CountingStream()
    log = JsonLogger(stream)
    assert log.defer("access", status=200) is True  # the first one: the caller schedules a flush
    assert log.defer("access", status=400) is False
    assert stream.getvalue() == ""
    log.log("stop", exit_code=0)  # a direct line writes the queued ones first, in one write with it
    log.flush_deferred()  # nothing left: no write
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(r["event"], r.get("status")) for r in records] == [("access", 200), ("access", 400), ("stop", None)]
    assert stream.writes == 1 and all(r["ts"].endswith("Z") for r in records)


# -- real processes ------------------------------------------------------------------------------------------------
def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.slow
def test_the_http_process_loads_no_torch_and_two_model_processes_share_the_requests(mlp_dir: Path) -> None:
    env = {
        "GPU_SERVE_MODEL_PROCESSES": "2",
        "GPU_SERVE_MAX_BATCH_DELAY_MS": "20",
        "GPU_SERVE_NUM_THREADS": "1",
        "GPU_SERVE_DEVICE": "cpu",  # two CPU copies of the model, on a GPU host too
    }
    srv = ServerProcess(mlp_dir, env=env).start(timeout=90)
    try:
        assert srv.proc is not None
        ready = srv.events("ready")[0]
        workers = ready["model_process_list"]
        with ThreadPoolExecutor(max_workers=8) as pool:
            # Two slow forward passes occupy both model processes; the rest go to whichever holds fewer.
            slow = [pool.submit(invoke, srv.port, [[777, 0, 0, i]]) for i in range(2)]
            time.sleep(0.1)
            fast = [pool.submit(invoke, srv.port, [[float(i), 1, 2, 3]]) for i in range(6)]
            replies = [f.result() for f in slow + fast]
        assert "libtorch" not in _maps(srv.proc.pid)  # the HTTP process never imported torch
        assert all("libtorch" in _maps(int(w["pid"])) for w in workers)
    finally:
        assert srv.stop() == 0
    assert ready["model_processes"] == 2 and ready["torch_threads"] == 1 and ready["device"] == "cpu"
    assert [r.status for r in replies] == [200] * 8
    served_by = {e["model_process"] for e in srv.events("access") if e["path"] == "/invocations"}
    assert served_by == {0, 1}


CRASHY = """
import os
import torch


def model_fn(model_dir):
    return torch.nn.Identity()


def predict_fn(data, model):
    if bool((data[:, 0] == -1).any()):
        os._exit(3)  # a crash in native code, or the OOM killer: the process is gone without a word
    return model(data)
"""


@pytest.mark.slow
def test_a_model_process_that_dies_is_restarted_and_only_its_requests_fail(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "inference.py").write_text(CRASHY)
    srv = ServerProcess(tmp_path, env={"GPU_SERVE_MODEL_PROCESSES": "1"}).start(timeout=90)
    try:
        first_pid = srv.events("ready")[0]["model_process_list"][0]["pid"]
        crashed = invoke(srv.port, [[-1.0, 2.0]])
        pings = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pings.append(request(srv.port, "GET", "/ping").json()["status"])
            if pings[-1] == "healthy" and srv.events("model_process_restarted"):
                break
            time.sleep(0.05)
        after = invoke(srv.port, [[1.0, 2.0]])
        restarted = srv.wait_for("model_process_restarted")
    finally:
        assert srv.stop() == 0
    assert crashed.status == 500 and "exited with code 3" in crashed.json()["message"]
    assert "restarting" in pings and pings[-1] == "healthy"
    assert after.status == 200 and after.json() == [[1.0, 2.0]]
    assert restarted["pid"] != first_pid
    died = [e for e in srv.events("error") if "while serving; restarting it" in e["message"]]
    assert len(died) == 1 and died[0]["exit_code"] == 3


@pytest.mark.slow
def test_a_model_process_ends_with_the_http_process(mlp_dir: Path) -> None:
    srv = ServerProcess(mlp_dir).start(timeout=90)
    assert srv.proc is not None
    pid = int(srv.events("ready")[0]["model_process_list"][0]["pid"])
    os.kill(srv.proc.pid, signal.SIGKILL)  # no drain, no goodbye: the socket pair closes with the process
    srv.proc.wait(timeout=10)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower():
        assert time.monotonic() < deadline, f"model process {pid} outlived its HTTP process"
        time.sleep(0.05)
