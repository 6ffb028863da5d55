"""benchmarks.serve_gpu: the report's ratios and targets, from known cells (no server, no GPU)."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest

from benchmarks import serve_gpu
from benchmarks.serve_peers import Cell, LoadResult


def _cell(server: str, n: int, req_per_s: float, p99_ms: float, batch: int) -> Cell:
    cell = Cell(server, n)
    requests = 100
    latencies = [p99_ms / 2] * 98 + [p99_ms] * 2
    cell.add(LoadResult(n, requests, requests / req_per_s, latencies, Counter({200: requests})), 1.0, [batch])
    return cell


def _args() -> argparse.Namespace:
    return argparse.Namespace(argv=[], dtype="bfloat16", max_batch_size=32, max_batch_delay_ms=5.0, rounds=3,
                              requests=100, warmup=10)  # fmt: skip


INFO = {"date": "2026-11-27", "device": "NVIDIA H100 80GB HBM3", "cpus": 16, "torch": "2.11.0+cu130", "cuda": "13.0",
        "versions": {"litserve": "0.2.19"}, "model": "resnet50 224x224, 1000 classes", "params_m": 25.6,
        "shape": (1, 3, 224, 224), "npy_bytes": 150656, "deviation": {"gpu_serve": 0.01}}  # fmt: skip


def test_every_target_is_checked_and_a_miss_is_named() -> None:
    cells = {
        "gpu_serve": [_cell("gpu_serve", 1, 300, 4.0, 1), _cell("gpu_serve", 32, 2400, 20.0, 24)],
        "per_request": [_cell("per_request", 1, 290, 4.2, 1), _cell("per_request", 32, 400, 90.0, 1)],
        "litserve": [_cell("litserve", 1, 250, 5.0, 1), _cell("litserve", 32, 2500, 18.0, 20)],
    }
    text, missed = serve_gpu.render(cells, INFO, _args(), {"torchserve": "no java"})
    # 2400 / 400 = 6x one request per forward at N=32: met; LitServe is faster and has the lower p99 at N=32.
    assert missed == ["N=32 throughput 0.96x LitServe", "N=32 p99 1.11x LitServe's"]
    assert "| 32 | **6.00x** | **0.96x** | 1.11 |" in text
    assert "Left out of this run: TorchServe: no java." in text


def test_batching_below_five_times_is_a_miss() -> None:
    cells = {
        "gpu_serve": [_cell("gpu_serve", 32, 1200, 20.0, 8)],
        "per_request": [_cell("per_request", 32, 400, 90.0, 1)],
    }
    _, missed = serve_gpu.render(cells, INFO, _args(), {})
    assert missed == ["batching 3.00x one request per forward at N=32"]


def test_a_peer_that_cannot_run_here_is_left_out_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_gpu.shutil, "which", lambda name: None)
    monkeypatch.setattr(serve_gpu.importlib.util, "find_spec", lambda name: None)
    left = serve_gpu.missing_peers(["gpu_serve", "litserve", "torchserve"])
    assert set(left) == {"litserve", "torchserve"}
    assert "Java 17" in left["torchserve"] and "make gpu-wheels" in left["litserve"]
