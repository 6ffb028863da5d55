"""benchmarks.serve_peers: the pure logic of the serving comparison (pins, request bodies, /proc parsing, batch
logs, statistics, the HTTP client, the code shipped into the peers' handlers, the report).

TorchServe and LitServe are not installed in the project's environment and are not run here:
``python -m benchmarks.serve_peers --quick`` is their smoke test.
"""

from __future__ import annotations

import ast
import asyncio
import email.parser
import email.policy
import io
import json
import os
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from benchmarks.serve_peers import (
    LITSERVE_APP,
    NPY,
    TORCHSERVE_HANDLER,
    BatchLog,
    BusyNeighbours,
    Cell,
    LoadResult,
    Server,
    behind,
    check_answered,
    closed_loop,
    decode_sample,
    descendants,
    http_request,
    idle_cores,
    json_instances,
    load_artifact,
    malformed_npy,
    missing_requirements,
    multipart,
    npy_bytes,
    parse_batch_lines,
    parse_schedstat,
    parse_stat,
    percentile,
    plot_path,
    ratio_rows,
    read_response,
    rotated,
    section_name,
    share_rows,
    status_kib,
    tree_wait_seconds,
    version_matches,
)


# -- pins ---------------------------------------------------------------------------------------------------------
def test_a_pin_without_local_label_accepts_the_cpu_build_and_nothing_else() -> None:
    assert version_matches("2.13.0+cpu", "2.13.0")
    assert version_matches("2.13.0", "2.13.0")
    assert not version_matches("2.13.1", "2.13.0")
    assert not version_matches("2.13.0+cpu", "2.13.0+cu128")
    assert not version_matches(None, "2.13.0")


def test_missing_requirements_lists_absent_and_wrong_versions_only() -> None:
    installed = {"torch": "2.13.0+cpu", "torchserve": "0.11.1", "numpy": "2.4.6"}
    wanted = {"torch": "2.13.0", "torchserve": "0.12.0", "litserve": "0.2.19", "numpy": "2.4.6"}
    assert missing_requirements(installed, wanted) == ["torchserve==0.12.0", "litserve==0.2.19"]


# -- request bodies -----------------------------------------------------------------------------------------------
def test_multipart_body_parses_back_to_the_same_file() -> None:
    content = npy_bytes(np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2))
    body, content_type = multipart("file", "sample.npy", content, NPY, "b0undary")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    parts = list(message.iter_parts())
    assert len(parts) == 1
    assert parts[0].get_param("name", header="content-disposition") == "file"
    assert parts[0].get_filename() == "sample.npy"
    assert parts[0].get_content_type() == NPY
    assert parts[0].get_payload(decode=True) == content


def test_multipart_refuses_a_boundary_inside_the_content() -> None:
    with pytest.raises(ValueError, match="boundary 'xx'"):
        multipart("file", "a.npy", b"abc--xxdef", NPY, "xx")


def test_http_request_has_the_exact_content_length() -> None:
    raw = http_request("/invocations", 8080, b"12345", NPY)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /invocations HTTP/1.1\r\n")
    assert b"Content-Length: 5" in head.split(b"\r\n")
    assert body == b"12345"


def test_malformed_npy_is_refused_by_numpy() -> None:
    with pytest.raises((ValueError, EOFError, SyntaxError)):
        np.load(io.BytesIO(malformed_npy()), allow_pickle=False)


# -- /proc parsing ------------------------------------------------------------------------------------------------
def test_parse_stat_counts_from_the_last_parenthesis() -> None:
    # comm "a) (b c" holds spaces and parentheses; ppid 7, utime 11, stime 22, cutime 3, cstime 4.
    fields = ["S", "7", "1", "1", "0", "-1", "0", "5", "0", "0", "0", "11", "22", "3", "4", "20", "0", "1"]
    assert parse_stat("123 (a) (b c) " + " ".join(fields)) == (7, 40)


def test_schedstat_gives_the_run_queue_wait_and_the_tree_sum_counts_this_process() -> None:
    assert parse_schedstat("356672026 601769228 1202\n") == 601769228
    assert tree_wait_seconds(os.getpid()) >= 0.0
    with pytest.raises((IndexError, ValueError)):
        parse_schedstat("garbage")


def test_idle_cores_sees_a_busy_child_and_not_a_sleeping_one() -> None:
    import subprocess
    import sys

    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)  # both started
        idle = idle_cores({"spinning": spinning.pid, "sleeping": sleeping.pid}, seconds=1.0)
    finally:
        spinning.kill()
        sleeping.kill()
        spinning.wait()
        sleeping.wait()
    assert idle["spinning"] > 0.2  # a whole core when the machine is quiet; at least a share of one when busy
    assert idle["sleeping"] < 0.05


def test_descendants_walks_the_whole_tree_and_nothing_else() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
    assert sorted(descendants(10, parents)) == [10, 11, 12, 13]
    assert descendants(13, parents) == [13]


def test_status_kib_reads_a_key_and_zero_when_absent() -> None:
    text = "Name:\tpython\nVmPeak:\t  900 kB\nVmHWM:\t  51200 kB\nVmRSS:\t 40000 kB\n"
    assert status_kib(text, "VmHWM") == 51200
    assert status_kib("Name:\tzombie\n", "VmHWM") == 0


# -- batch logs ---------------------------------------------------------------------------------------------------
def test_parse_batch_lines_reads_gpu_serve_batch_events_and_plain_counts() -> None:
    log = "\n".join(
        [
            '{"event": "access", "status": 200}',
            '{"event": "batch", "batch_size": 4, "requests": 3}',
            "not json",
            '{"event": "batch", "batch_size": 1, "requests": 1}',
        ]
    )
    assert parse_batch_lines(log, "gpu_serve") == [3, 1]
    assert parse_batch_lines("16\n3\n\n", "plain") == [16, 3]
    with pytest.raises(ValueError, match="format 'csv'"):
        parse_batch_lines("1", "csv")


def test_batch_log_returns_new_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "batches.log"
    log = BatchLog(path, "plain")
    assert log.new_batches() == []  # not written yet
    path.write_text("4\n5\n1")
    assert log.new_batches() == [4, 5]
    with open(path, "a") as handle:
        handle.write("6\n2\n")
    assert log.new_batches() == [16, 2]
    assert log.new_batches() == []


# -- statistics ---------------------------------------------------------------------------------------------------
def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 51.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 50) != percentile([], 50)  # NaN
    with pytest.raises(ValueError, match="q=101"):
        percentile(values, 101)


def test_rotation_puts_every_server_in_every_position() -> None:
    names = ["gpu_serve", "torchserve", "litserve"]
    orders = [rotated(names, r) for r in range(3)]
    assert orders[1] == ["torchserve", "litserve", "gpu_serve"]
    for position in range(3):
        assert sorted(order[position] for order in orders) == sorted(names)
    assert rotated(names, 3) == names


def _cell(server: str, n: int, throughputs: list[float], latencies: list[float], cpu: float = 0.0) -> Cell:
    cell = Cell(server, n)
    for tput in throughputs:
        run = LoadResult(n, 100, 100 / tput, latencies, Counter({200: 99, 503: 1}))
        cell.add(run, cpu, [4, 4, 2])
    return cell


def test_cell_reports_median_spread_cpu_batches_and_errors() -> None:
    cell = _cell("gpu_serve", 8, [100.0, 300.0, 200.0], [1.0, 2.0, 3.0], cpu=0.5)
    assert cell.throughput == pytest.approx(200.0)
    assert cell.spread == pytest.approx((100.0, 300.0))
    assert cell.cpu_ms_per_request == pytest.approx(5.0)  # 1.5 CPU s over 300 requests
    assert cell.mean_batch == pytest.approx(10 / 3)
    assert cell.errors == {503: 3}
    assert cell.pct(50) == 2.0
    # 300 requests in 1/100 + 1/300 + 1/200 s x 100 = 1.833 s of runs, 1.5 CPU s: 0.82 cores
    assert cell.cores == pytest.approx(1.5 / (100 / 100 + 100 / 300 + 100 / 200))


def test_a_run_with_unanswered_requests_or_a_dead_server_stops_the_benchmark(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    server = Server("litserve", [], {}, tmp_path, 1, "/predict", BatchLog(tmp_path / "b.log", "plain"), proc=proc)
    server.log.write_text("Traceback ...\nRuntimeError: worker died\n")
    try:
        check_answered(server, LoadResult(8, 100, 1.0, [1.0] * 100, Counter({200: 99, 0: 1})))  # 1%: tolerated
        with pytest.raises(RuntimeError, match=r"litserve: 300 of 300 requests at N=8 got no answer.*still running"):
            check_answered(server, LoadResult(8, 300, 0.01, [0.1] * 300, Counter({0: 300})))
        proc.kill()
        proc.wait()
        with pytest.raises(RuntimeError, match=r"(?s)exited with -9\. Its log:\n.*RuntimeError: worker died"):
            check_answered(server, LoadResult(8, 100, 1.0, [1.0] * 100, Counter({200: 100})))
    finally:
        proc.kill()
        proc.wait()


def test_a_busy_run_writes_its_own_section_and_plot() -> None:
    assert section_name(0) == "serve-peers"
    assert section_name(3) == "serve-peers-busy"
    assert plot_path(0).name == "serve_peers.png"
    assert plot_path(2).name == "serve_peers_busy.png"
    assert section_name(0, 2) == "serve-peers-2workers"
    assert section_name(2, 2) == "serve-peers-busy-2workers"
    assert plot_path(2, 2).name == "serve_peers_busy_2workers.png"


def test_busy_neighbours_run_while_the_context_is_open_and_are_gone_after() -> None:
    with BusyNeighbours(2) as busy:
        procs = list(busy._procs)
        assert len(procs) == 2
        assert all(proc.poll() is None for proc in procs)
    assert all(proc.returncode is not None for proc in procs)
    assert busy._procs == []


def test_ratio_rows_divide_gpu_serve_by_each_peer() -> None:
    cells = {
        "gpu_serve": [_cell("gpu_serve", 1, [300.0], [10.0])],
        "torchserve": [_cell("torchserve", 1, [100.0], [20.0])],
        "litserve": [_cell("litserve", 1, [600.0], [5.0])],
    }
    assert ratio_rows(cells) == ["| 1 | **3.00x** | 0.50 | **0.50x** | 2.00 |"]


def test_share_rows_split_the_throughput_ratio_into_cost_per_request_and_cores() -> None:
    # gpu_serve: 100 requests in 1 s with 0.2 CPU s (2 ms/req, 0.2 cores);
    # the peer: 100 requests in 0.5 s with 0.8 CPU s (8 ms/req, 1.6 cores)
    cells = {
        "gpu_serve": [_cell("gpu_serve", 32, [100.0], [10.0], cpu=0.2)],
        "litserve": [_cell("litserve", 32, [200.0], [10.0], cpu=0.8)],
    }
    assert share_rows(cells) == ["| 32 | 4.00x | 0.12x |"]  # 4x cheaper per request x 1/8 of the cores = 0.5x


def test_behind_names_each_cell_where_gpu_serve_trails_a_peer() -> None:
    cells = {
        "gpu_serve": [_cell("gpu_serve", 1, [300.0], [10.0]), _cell("gpu_serve", 8, [400.0], [30.0])],
        "torchserve": [_cell("torchserve", 1, [100.0], [20.0]), _cell("torchserve", 8, [500.0], [20.0])],
    }
    assert behind(cells) == ["N=8 throughput vs TorchServe (0.80x)", "N=8 p99 vs TorchServe (1.50x)"]


# -- HTTP client --------------------------------------------------------------------------------------------------
def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def test_read_response_handles_sized_chunked_and_close() -> None:
    async def go() -> list[tuple[int, bool, bytes]]:
        sized = _reader(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        chunked = _reader(
            b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n"
        )
        return [await read_response(sized), await read_response(chunked)]

    assert asyncio.run(go()) == [(200, False, b"hello"), (503, True, b"abcde")]


def test_closed_loop_sends_exactly_total_requests_over_n_keep_alive_connections() -> None:
    async def go() -> tuple[LoadResult, int, list[bytes]]:
        connections = 0
        bodies: list[bytes] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            while True:
                head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
                if not head:
                    break
                length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.startswith(b"Content-Length"))
                bodies.append(await reader.readexactly(length))
                status = b"200 OK" if bodies[-1] == b"good" else b"400 Bad Request"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        requests = [http_request("/", port, b"good", NPY), http_request("/", port, b"bad!", NPY)]
        async with server:
            result = await closed_loop(port, requests, 3, 10)
        return result, connections, bodies

    result, connections, bodies = asyncio.run(go())
    assert result.requests == 10 and len(result.latencies_ms) == 10
    assert result.statuses == Counter({200: 5, 400: 5})  # requests alternate
    assert connections == 3
    assert sorted(bodies) == sorted([b"good"] * 5 + [b"bad!"] * 5)


# -- code shipped into the peers ----------------------------------------------------------------------------------
def test_torchserve_handler_defines_exactly_one_class_and_litserve_app_parses() -> None:
    # TorchServe instantiates the only class of a handler module that has no function entry point.
    tree = ast.parse(TORCHSERVE_HANDLER)
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["BatchedArtifactHandler"]
    app = ast.parse(LITSERVE_APP)
    api = next(n for n in app.body if isinstance(n, ast.ClassDef))
    methods = {n.name for n in api.body if isinstance(n, ast.FunctionDef)}
    assert {"setup", "decode_request", "batch", "predict", "unbatch", "encode_response"} <= methods


def test_decode_sample_converts_parsed_json_and_delegates_bytes_and_text() -> None:
    calls: list[tuple[Any, str]] = []

    def input_fn(body: Any, content_type: str) -> torch.Tensor:
        calls.append((body, content_type))
        return torch.zeros(1, 3, 2, 2)

    fake = SimpleNamespace(input_fn=input_fn, load_config=lambda: {"image_size": 2})
    decode_sample(bytearray(b"npy"), fake)
    decode_sample('{"instances": []}', fake)
    assert calls == [(b"npy", "application/x-npy"), ('{"instances": []}', "application/json")]
    sample = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    out = decode_sample({"instances": sample.tolist()}, fake)
    assert out.shape == (1, 3, 2, 2) and torch.equal(out[0], torch.from_numpy(sample))
    with pytest.raises(ValueError, match=r"shape \(1, 3, 3, 2\)"):
        decode_sample({"instances": np.zeros((1, 3, 3, 2)).tolist()}, fake)
    with pytest.raises(ValueError, match="instances"):
        decode_sample({"inputs": []}, fake)


def test_peers_load_the_artifact_and_decode_both_types_to_the_same_logits(tmp_path: Path) -> None:
    from gpu_train.export import export_example_model

    tarball = export_example_model(tmp_path / "export")
    inference, model = load_artifact(str(tarball), str(tmp_path / "unpacked"))
    sample = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    from_npy = decode_sample(npy_bytes(sample), inference)
    from_json = decode_sample(json_instances(sample).decode(), inference)
    parsed = decode_sample(json.loads(json_instances(sample)), inference)
    assert torch.allclose(from_npy, from_json, atol=1e-6) and torch.equal(from_json, parsed)
    logits = inference.predict_fn(torch.cat([from_npy, parsed]), model)
    assert logits.shape == (2, 3) and torch.allclose(logits[0], logits[1], atol=1e-5)
    with pytest.raises(ValueError, match=r"\.npy"):
        decode_sample(malformed_npy(), inference)
