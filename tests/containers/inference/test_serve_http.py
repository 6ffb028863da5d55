"""The real server as a child process, over real HTTP: every status code, batching under a flood during
which /ping keeps answering, overload, timeouts, the access log and the CloudWatch metric filters."""

from __future__ import annotations

import http.client
import io
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from serve_http import invoke, npy, raw, request, status_of
from serve_models import assert_close, reference_model

from gpu_serve.metrics import LOG_METRIC_FILTERS
from gpu_serve.process import ServerProcess

pytestmark = pytest.mark.slow

ENV = {
    "GPU_SERVE_MAX_BATCH_SIZE": "8",
    "GPU_SERVE_MAX_BATCH_DELAY_MS": "20",
    "GPU_SERVE_QUEUE_SIZE": "16",
    "GPU_SERVE_REQUEST_TIMEOUT_S": "2",
    "GPU_SERVE_NUM_THREADS": "1",
    "GPU_SERVE_METRICS_INTERVAL_S": "0.5",
}


#: Both process layouts answer every test alike: a model process (the default) and the model on a thread of the
#: HTTP process (GPU_SERVE_MODEL_PROCESSES=0).
LAYOUTS = {"model-process": "auto", "in-process": "0"}


@pytest.fixture(scope="module", params=list(LAYOUTS.values()), ids=list(LAYOUTS))
def server(mlp_dir: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    srv = ServerProcess(mlp_dir, env={**ENV, "GPU_SERVE_MODEL_PROCESSES": request.param}).start(timeout=90)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def model(mlp_dir: Path) -> torch.nn.Module:
    return reference_model(mlp_dir)


def expected(model: torch.nn.Module, rows: list[list[float]]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor(rows, dtype=torch.float32))


def occupy_model_thread(port: int, marker: float, pool: ThreadPoolExecutor) -> Any:
    """Start a request whose forward pass is slow (a test hook of the handler) and let it reach the model."""
    fut = pool.submit(invoke, port, [[marker, 0, 0, 0]])
    time.sleep(0.15)
    return fut


# -- the SageMaker contract ----------------------------------------------------------------------------------
def test_ping_and_execution_parameters(server: ServerProcess) -> None:
    ping = request(server.port, "GET", "/ping")
    assert (ping.status, ping.json()) == (200, {"status": "healthy"})
    params = request(server.port, "GET", "/execution-parameters").json()
    assert params == {"MaxConcurrentTransforms": 8, "BatchStrategy": "SINGLE_RECORD", "MaxPayloadInMB": 6}
    ready = server.events("ready")[0]
    # GPU_SERVE_DEVICE is auto here: cuda:0 where torch sees a GPU (a model process sees only its own), else cpu.
    assert ready["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")
    assert ready["handler_functions"] == ["model_fn", "predict_fn"]


def test_json_and_npy_requests_return_the_models_predictions(server: ServerProcess, model: torch.nn.Module) -> None:
    rows = [[0.5, -1.0, 2.0, 0.25], [1.0, 1.0, 1.0, 1.0]]
    reply = invoke(server.port, rows)
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    assert_close(torch.tensor(reply.json()), expected(model, rows))
    assert float(reply.headers["x-model-latency-ms"]) > 0
    assert int(reply.headers["x-batch-size"]) >= 2
    assert "model_latency_ms=" in reply.headers["x-amzn-sagemaker-custom-attributes"]

    one = invoke(server.port, rows[0])  # a single sample without the batch dimension
    assert_close(torch.tensor(one.json()), expected(model, rows[:1]))

    as_npy = invoke(server.port, npy(np.array(rows, dtype=np.float64)), "application/x-npy", "application/x-npy")
    assert as_npy.status == 200 and as_npy.headers["content-type"] == "application/x-npy"
    arr = np.load(io.BytesIO(as_npy.body))
    assert_close(torch.from_numpy(arr), expected(model, rows))


def test_keep_alive_connection_survives_client_errors(server: ServerProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        bad = request(server.port, "POST", "/invocations", b"[1, 2", {"Content-Type": "application/json"}, conn=conn)
        good = request(
            server.port, "POST", "/invocations", b"[[1, 2, 3, 4]]", {"Content-Type": "application/json"}, conn=conn
        )
        unsupported = request(server.port, "POST", "/invocations", b"x", {"Content-Type": "text/plain"}, conn=conn)
        again = request(server.port, "GET", "/ping", conn=conn)
    finally:
        conn.close()
    assert [bad.status, good.status, unsupported.status, again.status] == [400, 200, 415, 200]


# -- bad input ---------------------------------------------------------------------------------------------------
def test_wrong_shape_is_400_saying_what_was_expected(server: ServerProcess) -> None:
    reply = invoke(server.port, [[1, 2, 3]])
    assert reply.status == 400
    err = reply.json()
    assert err["expected_shape"] == ["N", 4] and err["got_shape"] == [1, 3]
    assert "expected (N, 4)" in err["message"]


@pytest.mark.parametrize(
    ("body", "ctype", "message"),
    [
        (b"[[1, 2, 3, ", "application/json", "body is not valid JSON"),
        (b"\xff\xfe[1]", "application/json", "not valid UTF-8"),
        (b'[["a", "b", "c", "d"]]', "application/json", "not a rectangular array of numbers"),
        (b"definitely not npy", "application/x-npy", "not a valid .npy array"),
        (b"\x89PNG\r\n\x1a\n broken", "image/png", "not a valid image/png image"),
        # Nested past the parsers' recursion limits: a plain 400 that says how deep, not a RecursionError.
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "nests arrays/objects 100000 levels deep"),
    ],
)
def test_malformed_bodies_are_400(server: ServerProcess, body: bytes, ctype: str, message: str) -> None:
    reply = invoke(server.port, body, ctype)
    assert reply.status == 400, reply.body
    assert message in reply.json()["message"]


def test_unknown_content_type_is_415_and_unknown_accept_is_406(server: ServerProcess) -> None:
    r415 = invoke(server.port, b"a,b", "text/csv")
    assert r415.status == 415 and "application/json" in r415.json()["supported"]
    r406 = invoke(server.port, [[1, 2, 3, 4]], accept="text/html")
    assert r406.status == 406 and r406.json()["supported"] == ["application/json", "application/x-npy"]
    assert invoke(server.port, [[1, 2, 3, 4]], accept="text/html, application/*;q=0.5").status == 200


@pytest.mark.parametrize("accept", ["application/json;q=0", "application/json;q=0, application/x-npy;q=0", "*/*;q=0"])
def test_accept_with_only_q_0_types_is_406_naming_the_supported_types(server: ServerProcess, accept: str) -> None:
    reply = invoke(server.port, [[1, 2, 3, 4]], accept=accept)
    assert reply.status == 406, reply.body
    assert reply.json()["supported"] == ["application/json", "application/x-npy"]
    assert f"Accept {accept!r} accepts none of the supported types" in reply.json()["message"]


def test_q_0_excludes_a_type_that_a_wildcard_would_match(server: ServerProcess) -> None:
    reply = invoke(server.port, [[1, 2, 3, 4]], accept="application/json;q=0, */*;q=0.8")
    assert reply.status == 200 and reply.headers["content-type"] == "application/x-npy"
    assert np.load(io.BytesIO(reply.body)).shape == (1, 3)


def test_body_over_the_limit_is_413_decided_from_content_length(server: ServerProcess) -> None:
    # Headers only: a server that read the body first would wait here for bytes that never come.
    head = b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 6291457\r\n\r\n"
    response, seconds = raw(server.port, head, timeout=5)
    assert status_of(response) == 413 and seconds < 3
    assert b'"limit_bytes": 6291456' in response
    # A real client that sends all 7 MB still reads the 413 (lingering close, no connection reset).
    big = invoke(server.port, b"0" * 7_000_000, "application/x-npy")
    assert big.status == 413
    assert invoke(server.port, b"0" * 6_291_456, "application/x-npy").status == 400  # at the limit: read


def test_expect_100_continue_and_chunked_bodies(server: ServerProcess) -> None:
    body = b"[[1, 2, 3, 4]]"
    head = (
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
    too_big = head.replace(b"Content-Length: %d" % len(body), b"Content-Length: 9999999")
    response, _ = raw(server.port, too_big, timeout=5)
    assert status_of(response) == 413 and b"100 Continue" not in response

    chunked = (
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n6\r\n[[1, 2\r\n8\r\n, 3, 4]]\r\n0\r\n\r\n"
    )
    response, _ = raw(server.port, chunked)
    assert status_of(response) == 200 and response.rstrip().endswith(b"]]")


def test_content_length_with_transfer_encoding_is_400_and_closes(server: ServerProcess) -> None:
    # Framed by its chunks, this body ends at "0"; framed by Content-Length, the GET after it is part of the
    # body. A server that picks either framing lets the two disagree (request smuggling, RFC 9112 section 6.3).
    smuggle = (
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /execution-parameters HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    response, _ = raw(server.port, smuggle, timeout=5)
    assert status_of(response) == 400 and response.count(b"HTTP/1.1 ") == 1  # nothing after it is served
    assert b"Connection: close" in response
    assert b"both Content-Length ('40') and Transfer-Encoding ('chunked')" in response
    http10 = b"POST /invocations HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    response, _ = raw(server.port, http10, timeout=5)
    assert status_of(response) == 400 and b"not allowed in an HTTP/1.0 request" in response


def test_missing_length_is_411_and_unknown_routes_are_404_405(server: ServerProcess) -> None:
    response, _ = raw(server.port, b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n")
    assert status_of(response) == 411
    assert request(server.port, "GET", "/models").status == 404
    assert request(server.port, "GET", "/invocations").status == 405
    assert request(server.port, "POST", "/ping", b"{}").headers["allow"] == "GET"
    response, _ = raw(server.port, b"garbage\r\n\r\n")
    assert status_of(response) == 400


# -- failures, batching, overload ----------------------------------------------------------------------------------
def test_handler_exception_is_500_logged_and_the_server_goes_on(server: ServerProcess) -> None:
    reply = invoke(server.port, [[-999, 0, 0, 0]])
    assert reply.status == 500
    assert reply.json()["message"] == "predict_fn failed: RuntimeError: poisoned row"
    rid = reply.headers["x-request-id"]
    logged = server.wait_for("error", request_id=rid)
    assert "RuntimeError: poisoned row" in logged["traceback"]
    assert invoke(server.port, [[1, 2, 3, 4]]).status == 200


def test_a_bad_request_fails_alone_in_its_batch(server: ServerProcess, model: torch.nn.Module) -> None:
    rows = [[float(i), 1.0, 2.0, 3.0] for i in range(7)]
    with ThreadPoolExecutor(max_workers=9) as pool:
        busy = occupy_model_thread(server.port, 777, pool)  # the others queue up behind it
        poisoned = pool.submit(invoke, server.port, [[-999, 0, 0, 0]])
        good = [pool.submit(invoke, server.port, [row]) for row in rows]
        replies = [f.result() for f in good]
        assert busy.result().status == 200
        assert poisoned.result().status == 500
    for row, reply in zip(rows, replies, strict=True):
        assert reply.status == 200
        assert_close(torch.tensor(reply.json()), expected(model, [row]))
    retried = [e for e in server.events("error") if "retrying them one by one" in e["message"]]
    assert retried, "the poisoned row never shared a batch"


def test_flood_is_batched_and_ping_keeps_answering(server: ServerProcess, model: torch.nn.Module) -> None:
    gen = torch.Generator().manual_seed(3)
    rows = torch.randn(96, 4, generator=gen).tolist()
    pings: list[tuple[int, float]] = []
    stop = threading.Event()

    def pinger() -> None:
        while not stop.is_set():
            reply = request(server.port, "GET", "/ping", timeout=5)
            pings.append((reply.status, reply.seconds))
            time.sleep(0.02)

    ping_thread = threading.Thread(target=pinger)
    ping_thread.start()
    try:
        with ThreadPoolExecutor(max_workers=12) as pool:
            busy = [pool.submit(invoke, server.port, [[777, 0, 0, 0]]) for _ in range(2)]  # 0.3 s forwards
            replies = list(pool.map(lambda r: invoke(server.port, [r]), rows))
            assert all(b.result().status == 200 for b in busy)
    finally:
        stop.set()
        ping_thread.join()
    assert [r.status for r in replies] == [200] * len(rows)
    got = torch.tensor([r.json()[0] for r in replies])
    assert_close(got, expected(model, rows), rtol=1e-5, atol=1e-5)
    assert max(int(r.headers["x-batch-size"]) for r in replies) > 1
    assert len(pings) >= 5 and {s for s, _ in pings} == {200}
    assert max(t for _, t in pings) < 1.0, f"slowest /ping took {max(t for _, t in pings):.2f} s"


def test_full_queue_is_503_with_retry_after_then_recovers(server: ServerProcess) -> None:
    with ThreadPoolExecutor(max_workers=32) as pool:
        busy = occupy_model_thread(server.port, 888, pool)  # the model thread sleeps 1 s
        replies = list(pool.map(lambda i: invoke(server.port, [[i, 0, 0, 0]]), range(30)))
        assert busy.result().status == 200
    statuses = Counter(r.status for r in replies)
    assert set(statuses) == {200, 503} and statuses[200] <= 15 and statuses[503] >= 15
    rejected = next(r for r in replies if r.status == 503)
    assert rejected.headers["retry-after"] == "1" and "queue is full" in rejected.json()["message"]
    assert rejected.seconds < 0.5  # refused at once, not queued
    assert invoke(server.port, [[1, 2, 3, 4]]).status == 200


def test_slow_prediction_is_504_after_the_request_timeout(server: ServerProcess) -> None:
    reply = invoke(server.port, [[999, 0, 0, 0]])
    assert reply.status == 504 and 1.9 < reply.seconds < 2.5
    assert "GPU_SERVE_REQUEST_TIMEOUT_S=2" in reply.json()["message"]
    assert request(server.port, "GET", "/ping").status == 200


# -- logs and metric filters -------------------------------------------------------------------------------------
_COND = re.compile(r'\(\s*\$\.(\w+)\s*(=|!=|>=|<=|>|<)\s*("(?:[^"]*)"|-?[\d.]+)\s*\)')


def cloudwatch_match(pattern: str, event: dict[str, Any]) -> bool:
    """The subset of CloudWatch Logs JSON filter patterns the filters use: ``{ (cond) && (cond) ... }``."""
    body = pattern.strip()
    assert body.startswith("{") and body.endswith("}"), pattern
    conds = [c.strip() for c in body[1:-1].split("&&")]
    for cond in conds:
        m = _COND.fullmatch(cond)
        assert m, f"unsupported condition {cond!r} in {pattern!r}"
        field, op, raw_value = m.groups()
        if field not in event:
            return False
        actual = event[field]
        if raw_value == '"*"':
            continue
        if raw_value.startswith('"'):
            value: Any = raw_value.strip('"')
            ok = actual == value if op == "=" else actual != value
        else:
            if not isinstance(actual, (int, float)):
                return False
            ok = {
                "=": actual == float(raw_value),
                "!=": actual != float(raw_value),
                ">=": actual >= float(raw_value),
                "<=": actual <= float(raw_value),
                ">": actual > float(raw_value),
                "<": actual < float(raw_value),
            }[op]
        if not ok:
            return False
    return True


def test_access_log_lines_feed_the_metric_filters(server: ServerProcess) -> None:
    for payload, ctype in [([[1, 2, 3, 4]], "application/json"), (b"x", "text/plain"), ([[1, 2]], "application/json")]:
        invoke(server.port, payload, ctype)
    invoke(server.port, [[-999, 0, 0, 0]])
    time.sleep(0.2)
    events = server.events()
    access = [e for e in events if e["event"] == "access" and e["path"] == "/invocations"]
    for e in access:  # every line a metric filter reads carries these fields
        assert {"status", "latency_ms", "request_id", "bytes_in", "bytes_out"} <= set(e)
    ok = [e for e in access if e["status"] == 200]
    assert ok and all({"model_latency_ms", "queue_ms", "batch_size"} <= set(e) for e in ok)

    by_name = {f.metric_name: f for f in LOG_METRIC_FILTERS}
    assert len(by_name) == len(LOG_METRIC_FILTERS) and all(len(f.filter_pattern) <= 1024 for f in LOG_METRIC_FILTERS)

    def matched(name: str) -> list[dict[str, Any]]:
        return [e for e in events if cloudwatch_match(by_name[name].filter_pattern, e)]

    assert len(matched("Invocations")) == len(access)
    assert len(matched("Invocation4XXErrors")) == sum(400 <= e["status"] < 500 for e in access) >= 2
    assert len(matched("Invocation5XXErrors")) == sum(e["status"] >= 500 for e in access) >= 1
    assert len(matched("InvocationHandlerErrors")) == sum(e["status"] == 500 for e in access) >= 1
    assert [e["model_latency_ms"] for e in matched("ModelLatency")] == [e["model_latency_ms"] for e in ok]
    batches = [e for e in events if e["event"] == "batch"]
    assert len(matched("BatchSize")) == len(batches) > 0
    assert by_name["BatchSize"].metric_value == "$.batch_size"
    for f in LOG_METRIC_FILTERS:  # a value taken from a field must be matched in the pattern too
        if f.metric_value.startswith("$."):
            assert f"({f.metric_value} = " in f.filter_pattern, f.metric_name
    time.sleep(0.6)  # GPU_SERVE_METRICS_INTERVAL_S=0.5: a summary line after the requests above
    summary = server.events("metrics")[-1]
    assert summary["invocations_total"] >= len(access) and summary["errors_by_status"]["500"] >= 1


def test_gpuctl_invoke_prints_the_prediction(server: ServerProcess, tmp_path: Path, capsys: Any) -> None:
    from gpuctl.cli import main

    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps([[1, 2, 3, 4]]))
    assert main(["invoke", f"http://127.0.0.1:{server.port}", str(sample)]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)[0]) == 3
    assert captured.err.startswith("200 OK") and "model ms" in captured.err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    assert main(["invoke", f"127.0.0.1:{server.port}/invocations", str(bad)]) == 1
    assert "400 Bad Request" in capsys.readouterr().err
    assert main(["invoke", f"http://127.0.0.1:{server.port}", str(tmp_path / "sample.txt")]) == 2


@pytest.mark.parametrize("token", ["NaN", "Infinity", "1e999"])
def test_non_finite_json_is_a_400_never_a_200_with_invalid_json(server: ServerProcess, token: str) -> None:
    reply = invoke(server.port, f"[[{token}, 1, 2, 3]]".encode())
    assert reply.status == 400, reply
    message = reply.json()["message"]
    assert "RFC 8259" in message and ("not finite" in message or token in message)
