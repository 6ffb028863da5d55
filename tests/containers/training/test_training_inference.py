"""The model artifact and its inference handler (``code/inference.py``), as the inference image uses them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from container_helpers import import_model_handler
from PIL import Image

from gpu_train.export import export_example_model

SIZE = 32


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``model.tar.gz`` unpacked, as SageMaker unpacks it into /opt/ml/model."""
    out = tmp_path_factory.mktemp("artifact")
    tarball = export_example_model(out, num_classes=4, image_size=SIZE)
    model_dir = out / "unpacked"
    with tarfile.open(tarball) as archive:
        archive.extractall(model_dir, filter="data")
    return model_dir


@pytest.fixture(scope="module")
def handler(artifact: Path) -> ModuleType:
    """``code/inference.py`` loaded from the artifact itself, not from this package."""
    return import_model_handler(artifact, "artifact_inference")


@pytest.fixture(scope="module")
def model(handler: ModuleType, artifact: Path) -> torch.nn.Module:
    loaded: torch.nn.Module = handler.model_fn(str(artifact))
    return loaded


def test_artifact_layout_and_config(tmp_path: Path, artifact: Path) -> None:
    tarball = export_example_model(tmp_path, num_classes=4, image_size=SIZE)
    with tarfile.open(tarball) as archive:
        names = sorted(m.name for m in archive.getmembers() if m.isfile())
    assert names == ["code/inference.py", "code/model.py", "model.pt", "model_config.json"]
    config = json.loads((artifact / "model_config.json").read_text())
    assert {k: config[k] for k in ("arch", "num_classes", "image_size")} == {
        "arch": "resnet_tiny",
        "num_classes": 4,
        "image_size": SIZE,
    }
    assert config["mean"] == [0.485, 0.456, 0.406] and config["std"] == [0.229, 0.224, 0.225]
    again = export_example_model(tmp_path / "again", num_classes=4, image_size=SIZE)
    assert again.read_bytes() == tarball.read_bytes()  # reproducible


def test_handler_is_self_contained(artifact: Path) -> None:
    """The handler runs in a Python that has only torch, numpy and Pillow (no gpu_train on the path)."""
    script = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("inference", {str(artifact / "code" / "inference.py")!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
model = m.model_fn({str(artifact)!r})
x = m.input_fn(json.dumps({{"instances": [[[[0.0] * {SIZE}] * {SIZE}] * 3]}}), "application/json")
out = json.loads(m.output_fn(m.predict_fn(x, model), "application/json"))
assert "gpu_train" not in sys.modules
print(len(out["predictions"]), len(out["predictions"][0]))
"""
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "4"]


def _pixels(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 3, SIZE, SIZE), dtype=np.uint8)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_model_fn_loads_weights_in_eval_mode(model: torch.nn.Module, artifact: Path) -> None:
    state = torch.load(artifact / "model.pt", weights_only=True)
    assert not model.training
    assert all(torch.equal(model.state_dict()[k].cpu(), v) for k, v in state.items())


def test_json_and_npy_inputs_with_and_without_batch_dimension(handler: ModuleType, model: torch.nn.Module) -> None:
    floats = np.random.default_rng(1).normal(size=(2, 3, SIZE, SIZE)).astype(np.float32)
    from_json = handler.input_fn(json.dumps({"instances": floats.tolist()}).encode(), "application/json; charset=utf-8")
    single = handler.input_fn(json.dumps({"instances": floats[0].tolist()}), "application/json")
    from_npy = handler.input_fn(_npy(floats), "application/x-npy")
    assert from_json.dtype == torch.float32 and from_json.shape == (2, 3, SIZE, SIZE)
    assert single.shape == (1, 3, SIZE, SIZE) and torch.equal(single[0], from_json[0])
    assert torch.allclose(from_json, from_npy) and torch.equal(from_npy, torch.from_numpy(floats))
    # uint8 arrays are raw pixels: scaled to [0, 1] and normalised with the model's mean and std.
    pixels = _pixels(2)
    normalised = handler.input_fn(_npy(pixels), "application/x-npy")
    mean = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(1, 3, 1, 1)
    assert np.allclose(normalised.numpy(), (pixels / 255.0 - mean) / std, atol=1e-5)
    logits = handler.predict_fn(from_npy, model)
    assert logits.shape == (2, 4) and logits.dtype == torch.float32 and logits.device.type == "cpu"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_images_are_decoded_resized_and_normalised(handler: ModuleType, fmt: str) -> None:
    image = Image.fromarray(np.random.default_rng(2).integers(0, 256, (60, 90, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    content_type = "image/jpeg" if fmt == "JPEG" else "image/png"
    x = handler.input_fn(buffer.getvalue(), content_type)
    assert x.shape == (1, 3, SIZE, SIZE) and x.dtype == torch.float32
    assert -3 < float(x.min()) < float(x.max()) < 3


def test_predictions_are_batch_independent(handler: ModuleType, model: torch.nn.Module) -> None:
    x = handler.input_fn(_npy(_pixels(5, seed=3)), "application/x-npy")
    together = handler.predict_fn(x, model)
    alone = torch.cat([handler.predict_fn(x[i : i + 1], model) for i in range(5)])
    assert torch.allclose(together, alone, atol=1e-5)
    assert not torch.allclose(together[0], together[1])  # the logits depend on the input


def test_output_as_json_or_npy(handler: ModuleType) -> None:
    logits = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    assert json.loads(handler.output_fn(logits, "application/json")) == {"predictions": [[1.0, -2.0, 0.5, 3.0]]}
    assert json.loads(handler.output_fn(logits, "*/*"))["predictions"] == [[1.0, -2.0, 0.5, 3.0]]
    assert json.loads(handler.output_fn(logits, None))["predictions"] == [[1.0, -2.0, 0.5, 3.0]]
    raw = handler.output_fn(logits, "application/x-npy")
    assert isinstance(raw, bytes)
    assert np.array_equal(np.load(io.BytesIO(raw)), logits.numpy())
    assert np.load(io.BytesIO(handler.output_fn(logits, "text/csv, application/x-npy"))).shape == (1, 4)


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"{not json", "application/json", "request body is not valid JSON"),
        (b'{"inputs": [1]}', "application/json", r'JSON request must be \{"instances": \[\.\.\.\]\}'),
        (json.dumps({"instances": [[1, 2], [3]]}).encode(), "application/json", "rectangular nested list"),
        (json.dumps({"instances": [[0.0] * 4] * 3}).encode(), "application/json",
         r"shape \(3, 4\); allowed: \(N, 3, 32, 32\)"),
        (_npy(np.zeros((2, 3, 16, 16), np.float32)), "application/x-npy", r"shape \(2, 3, 16, 16\)"),
        (_npy(np.zeros((1, 3, 32, 32), np.int64)), "application/x-npy", "dtype int64; allowed: float32"),
        (b"garbage", "application/x-npy", "not a valid .npy array"),
        (b"\xff\xd8 broken", "image/jpeg", "not a readable JPEG or PNG image"),
        (_npy(np.full((3, 32, 32), np.nan, np.float32)), "application/x-npy", "NaN or infinite"),
    ],
)  # fmt: skip
def test_malformed_requests_raise_value_error(
    handler: ModuleType, body: bytes, content_type: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        handler.input_fn(body, content_type)


def test_unknown_content_or_accept_type(handler: ModuleType) -> None:
    with pytest.raises(handler.UnsupportedContentType, match=r"content type 'text/csv' is not supported; allowed: "):
        handler.input_fn(b"1,2", "text/csv")
    with pytest.raises(ValueError, match=r"accept type 'text/html' is not supported"):
        handler.output_fn(torch.zeros(1, 4), "text/html")
    assert issubclass(handler.UnsupportedContentType, ValueError)
