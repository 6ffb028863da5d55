"""GPU_SERVE_DEVICE resolved once (gpu_serve.devices.resolve_device), against a fake torch.cuda on any host, and
inputs placed on the model's device."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import pytest
import torch

from gpu_serve.config import ServeConfig
from gpu_serve.devices import resolve_device, use_device
from gpu_serve.errors import ModelLoadError
from gpu_serve.handler import Handler, load_handler


class FakeCuda:
    """What resolve_device and use_device read of ``torch.cuda``, for a host with ``count`` visible devices."""

    def __init__(self, count: int, current: int = 0) -> None:
        self.count = count
        self.current = current
        self.set_calls: list[object] = []

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return self.current

    def set_device(self, device: object) -> None:
        if not isinstance(device, int):  # torch.cuda.set_device refuses torch.device("cuda") the same way
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        self.set_calls.append(device)


@pytest.mark.parametrize(
    ("setting", "count", "current", "expected"),
    [
        ("auto", 0, 0, "cpu"),
        ("auto", 1, 0, "cuda:0"),
        ("auto", 4, 2, "cuda:2"),  # the device this thread made current
        ("cpu", 2, 0, "cpu"),
        ("cuda", 1, 0, "cuda:0"),  # always indexed: torch.cuda.set_device refuses a bare "cuda"
        ("cuda", 2, 1, "cuda:1"),
        ("cuda:0", 1, 0, "cuda:0"),
        ("cuda:3", 4, 0, "cuda:3"),
        (" CUDA:1 ", 2, 0, "cuda:1"),
    ],
)
def test_resolve_device_always_gives_an_indexed_cuda_device(
    setting: str, count: int, current: int, expected: str
) -> None:
    device = resolve_device(setting, FakeCuda(count, current))
    assert device == torch.device(expected)
    assert device.type == "cpu" or device.index is not None


@pytest.mark.parametrize(
    ("setting", "count", "match"),
    [
        ("cuda", 0, r"GPU_SERVE_DEVICE='cuda' but torch sees no CUDA device .*allowed here: auto or cpu"),
        ("cuda:0", 0, r"GPU_SERVE_DEVICE='cuda:0' but torch sees no CUDA device"),
        ("cuda:3", 1, r"GPU_SERVE_DEVICE='cuda:3' but torch sees 1 CUDA device \(cuda:0;.*allowed here: .*cuda:0$"),
        ("cuda:2", 2, r"torch sees 2 CUDA devices \(cuda:0, cuda:1;"),
        ("tpu", 1, r"GPU_SERVE_DEVICE='tpu' is not allowed; allowed: auto, cpu, cuda, cuda:N"),
        ("cuda:-1", 1, r"GPU_SERVE_DEVICE='cuda:-1' is not allowed"),
    ],
)
def test_resolve_device_refuses_what_this_host_cannot_serve(setting: str, count: int, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match):
        resolve_device(setting, FakeCuda(count))


def test_use_device_sets_the_index_and_nothing_for_the_cpu() -> None:
    cuda = FakeCuda(2)
    use_device(resolve_device("cuda", cuda), cuda)
    use_device(resolve_device("cuda:1", cuda), cuda)
    use_device(torch.device("cpu"), cuda)
    assert cuda.set_calls == [0, 1]
    with pytest.raises(ModelLoadError, match="has no index"):
        use_device(torch.device("cuda"), cuda)


def test_the_model_thread_sets_the_resolved_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """What died on a GPU host: init_thread gave torch.cuda.set_device an unindexed "cuda"."""
    cuda = FakeCuda(1)
    monkeypatch.setattr(torch.cuda, "is_available", cuda.is_available)
    monkeypatch.setattr(torch.cuda, "device_count", cuda.device_count)
    monkeypatch.setattr(torch.cuda, "current_device", cuda.current_device)
    monkeypatch.setattr(torch.cuda, "set_device", cuda.set_device)
    device = resolve_device("cuda")
    handler = Handler(
        model=torch.nn.Identity(),
        device=device,
        dtype=torch.float32,
        input_fn=lambda body, ctype: body,
        predict_fn=lambda data, model: model(data),
        output_fn=lambda pred, accept: b"",
    )
    handler.init_thread()
    assert device == torch.device("cuda:0") and cuda.set_calls == [0]


Pair = namedtuple("Pair", ["a", "b"])


def _meta_handler(predict_fn: object) -> Handler:
    """A handler whose model lives on the meta device: a stand-in for a GPU that any host has."""
    return Handler(
        model=torch.nn.Linear(4, 3).to("meta"),
        device=torch.device("meta"),
        dtype=torch.float32,
        input_fn=lambda body, ctype: body,
        predict_fn=predict_fn,  # type: ignore[arg-type]
        output_fn=lambda pred, accept: b"",
    )


def test_the_default_path_moves_inputs_to_the_models_device() -> None:
    handler = _meta_handler(lambda data, model: model(data))
    out = handler.predict(torch.ones(2, 4, dtype=torch.float64))
    assert out.device.type == "meta" and out.shape == (2, 3)


def test_a_user_predict_fn_gets_its_tensors_on_the_models_device_inside_containers() -> None:
    seen: list[object] = []

    def predict_fn(data: object, model: torch.nn.Module) -> torch.Tensor:
        seen.append(data)
        assert isinstance(data, dict)
        return model(data["x"] + data["pair"].a)

    handler = _meta_handler(predict_fn)
    out = handler.predict({"x": torch.ones(1, 4), "pair": Pair(torch.zeros(1, 4), [torch.ones(1)]), "n": 3})
    data = seen[0]
    assert isinstance(data, dict) and data["n"] == 3
    assert data["x"].device.type == "meta" and isinstance(data["pair"], Pair)
    assert data["pair"].a.device.type == "meta" and data["pair"].b[0].device.type == "meta"
    assert out.device.type == "meta"


def test_load_handler_places_the_model_on_the_resolved_device(mlp_dir: Path) -> None:
    handler = load_handler(ServeConfig(model_dir=mlp_dir, device="cpu"))
    assert handler.device == torch.device("cpu")
    assert all(p.device == handler.device for p in handler.model.parameters())
    auto = load_handler(ServeConfig(model_dir=mlp_dir))
    assert auto.device == resolve_device("auto") and (auto.device.type == "cpu" or auto.device.index is not None)
    assert all(p.device == auto.device for p in auto.model.parameters())
