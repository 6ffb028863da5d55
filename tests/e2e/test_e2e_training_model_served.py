"""End to end: a model.tar.gz written by the training runtime, served by ``gpuctl serve`` (the inference
image's server) over real HTTP, answers exactly what the model answers when called directly."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from container_helpers import import_model_handler
from PIL import Image

from gpu_serve.process import ServerProcess

pytestmark = pytest.mark.slow

export = pytest.importorskip("gpu_train.export", reason="the training runtime's exporter is not available")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("trained")
    tarball = export.export_example_model(out)
    return tarball, out / "model"


@pytest.fixture(scope="module")
def model_config(artifact: tuple[Path, Path]) -> dict[str, Any]:
    """The archive's model_config.json."""
    config: dict[str, Any] = json.loads((artifact[1] / "model_config.json").read_text())
    return config


@pytest.fixture(scope="module")
def direct(artifact: tuple[Path, Path]) -> tuple[ModuleType, torch.nn.Module]:
    """The model as a user calls it without any server: the archive's handler module and model_fn."""
    handler = import_model_handler(artifact[1], "e2e_exported_inference")
    return handler, handler.model_fn(str(artifact[1]))


@pytest.fixture(scope="module")
def served(artifact: tuple[Path, Path]) -> Iterator[ServerProcess]:
    command = [sys.executable, "-m", "gpuctl", "serve", str(artifact[0]), "--port", "0", "--max-batch-size", "16"]
    env = {
        "GPU_SERVE_MAX_BATCH_DELAY_MS": "20",
        "GPU_SERVE_NUM_THREADS": "1",
        "GPU_SERVE_METRICS_INTERVAL_S": "0",
    }
    srv = ServerProcess(command=command, env=env).start(timeout=90)
    yield srv
    assert srv.stop() == 0


def _post(srv: ServerProcess, body: bytes, content_type: str, accept: str = "application/json") -> tuple[int, Any]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("POST", "/invocations", body, {"Content-Type": content_type, "Accept": accept})
        resp = conn.getresponse()
        data = resp.read()
        headers = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    if resp.status != 200:
        return resp.status, json.loads(data)
    if headers["content-type"] == "application/x-npy":
        return 200, (np.load(io.BytesIO(data)), headers)
    return 200, (json.loads(data), headers)


def _inputs(config: dict[str, Any], n: int, seed: int) -> torch.Tensor:
    size = int(config["image_size"])
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _called_directly(model: torch.nn.Module, *batches: torch.Tensor) -> torch.Tensor:
    """What ``model`` answers to ``batches`` called one after the other without any server, concatenated."""
    with torch.inference_mode():
        return torch.cat([model(batch) for batch in batches])


def test_served_predictions_equal_direct_calls(
    served: ServerProcess, direct: tuple[ModuleType, torch.nn.Module], model_config: dict[str, Any]
) -> None:
    x = _inputs(model_config, 3, seed=0)
    want = _called_directly(direct[1], x)

    status, (body, headers) = _post(served, json.dumps({"instances": x.tolist()}).encode(), "application/json")
    assert status == 200 and headers["x-batch-size"] == "3"
    got = torch.tensor(body["predictions"], dtype=torch.float32)
    assert got.shape == (3, model_config["num_classes"])
    assert torch.equal(got, want)  # bit for bit: JSON round-trips float32 exactly

    status, (array, _) = _post(served, _npy(x.numpy()), "application/x-npy", "application/x-npy")
    assert status == 200 and torch.equal(torch.from_numpy(array), want)


def test_served_image_prediction_equals_the_handlers_own_pipeline(
    served: ServerProcess, direct: tuple[ModuleType, torch.nn.Module]
) -> None:
    handler, model = direct
    pixels = np.random.default_rng(4).integers(0, 256, size=(40, 50, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    want = _called_directly(model, handler.input_fn(buf.getvalue(), "image/png"))
    status, (body, _) = _post(served, buf.getvalue(), "image/png")
    assert status == 200 and torch.equal(torch.tensor(body["predictions"], dtype=torch.float32), want)


def test_concurrent_requests_are_batched_and_still_correct(
    served: ServerProcess, direct: tuple[ModuleType, torch.nn.Module], model_config: dict[str, Any]
) -> None:
    samples = _inputs(model_config, 12, seed=1)
    want = _called_directly(direct[1], *samples.split(1))
    with ThreadPoolExecutor(max_workers=6) as pool:
        replies = list(pool.map(lambda s: _post(served, _npy(s[None].numpy()), "application/x-npy"), samples))
    assert all(status == 200 for status, _ in replies)
    got = torch.tensor([body["predictions"][0] for _, (body, _) in replies])
    # Batched and single-sample kernels may round differently in the last bits.
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got - want).abs().max()
    assert max(int(headers["x-batch-size"]) for _, (_, headers) in replies) > 1


def test_wrong_shape_and_type_are_refused_by_the_archives_handler(served: ServerProcess) -> None:
    status, err = _post(served, json.dumps({"instances": [[1.0, 2.0]]}).encode(), "application/json")
    assert status == 400 and "(N, 3, 32, 32)" in err["message"]
    assert err["expected_shape"] == ["N", 3, 32, 32]  # from model_config.json's image_size
    status, err = _post(served, b"a,b", "text/csv")
    assert status == 415 and "image/png" in err["message"]


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()
