"""The real server on a GPU: GPU_SERVE_DEVICE=cuda, auto and cuda:0, both process layouts, a concurrent burst that
is batched, every answer equal to the CPU model's. The same test body runs with cpu on any host (unmarked), so
its code paths are exercised where there is no GPU; the cuda cases are marked gpu (skipped where torch sees none;
make gpu-check runs them on a GPU host)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from serve_http import invoke, request
from serve_models import assert_close, reference_model

from gpu_serve.process import ServerProcess

pytestmark = pytest.mark.slow

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
    pytest.param("auto", id="auto", marks=pytest.mark.gpu),
    pytest.param("cuda:0", id="cuda:0", marks=pytest.mark.gpu),
]
LAYOUTS = pytest.mark.parametrize("model_processes", ["1", "0"], ids=["model-process", "in-process"])
BURST = 12
#: A float32 forward pass on a GPU may round differently from the CPU's (other kernels, other summation order).
RTOL, ATOL = 1e-4, 1e-5


def _expected_device(setting: str) -> str:
    """What the ready line must report: always an indexed CUDA device (a model process sees its GPU as cuda:0)."""
    return "cpu" if setting == "cpu" else "cuda:0"


@pytest.mark.parametrize("device", DEVICES)
@LAYOUTS
def test_a_burst_is_batched_on_the_device_and_answers_like_the_cpu_model(
    mlp_dir: Path, device: str, model_processes: str
) -> None:
    env = {
        "GPU_SERVE_DEVICE": device,
        "GPU_SERVE_MODEL_PROCESSES": model_processes,
        "GPU_SERVE_MAX_BATCH_SIZE": "16",
        "GPU_SERVE_MAX_BATCH_DELAY_MS": "50",
        "GPU_SERVE_NUM_THREADS": "1",
        "GPU_SERVE_REQUEST_TIMEOUT_S": "20",
        "GPU_SERVE_METRICS_INTERVAL_S": "0",
    }
    rows = [[float(i), -0.5 * i, 0.25, 1.0 + i] for i in range(BURST)]
    srv = ServerProcess(mlp_dir, env=env).start(timeout=60)
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=BURST + 1) as pool:
            # A slow forward pass (a test hook of the handler) holds the model thread: the burst queues behind it.
            busy = pool.submit(invoke, srv.port, [[777.0, 0.0, 0.0, 0.0]])
            time.sleep(0.1)
            burst = [pool.submit(invoke, srv.port, [row]) for row in rows]
            replies = [f.result(timeout=30) for f in burst]
            busy_reply = busy.result(timeout=30)
        ping = request(srv.port, "GET", "/ping")
    finally:
        assert srv.stop() == 0
    elapsed = time.monotonic() - t0
    ready = srv.events("ready")[0]
    assert ready["device"] == _expected_device(device)
    if device != "cpu":
        assert ready["cuda_device"]  # the GPU's name, as torch reports it
    assert ping.status == 200
    assert [r.status for r in replies] == [200] * BURST, [r.body[:200] for r in replies if r.status != 200]
    assert busy_reply.status == 200
    model = reference_model(mlp_dir)  # on the CPU
    with torch.inference_mode():
        for row, reply in zip(rows, replies, strict=True):
            assert_close(torch.tensor(reply.json()), model(torch.tensor([row])), rtol=RTOL, atol=ATOL)
        assert_close(torch.tensor(busy_reply.json()), model(torch.tensor([[777.0, 0.0, 0.0, 0.0]])), RTOL, ATOL)
    batches = [e["batch_size"] for e in srv.events("batch")]
    assert max(batches) > 1, batches  # the server's own batch log: the burst was batched
    assert max(int(r.headers["x-batch-size"]) for r in replies) > 1
    assert elapsed < 30
