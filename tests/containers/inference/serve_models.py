"""Model directories for the inference server tests, in the layout of an untarred model.tar.gz."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

NET_PY = """
import torch


class TinyNet(torch.nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc1 = torch.nn.Linear(in_features, 16)
        self.fc2 = torch.nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
"""

# A handler in the SageMaker PyTorch style: model_fn and predict_fn only (input_fn/output_fn are the server's
# defaults), and a sibling module imported from code/. Test hooks keyed on a row's first feature:
#   -999 -> predict_fn raises (a poisoned row), 777 -> the forward pass stays busy for 0.3 s,
#   888 -> sleeps 1 s, 999 -> sleeps 2.5 s (longer than the tests' request timeout).
INFERENCE_PY = """
import json
import warnings
import os
import time

import torch
from net import TinyNet


def model_fn(model_dir):
    with open(os.path.join(model_dir, "model_config.json")) as f:
        cfg = json.load(f)
    model = TinyNet(cfg["input_shape"][0], cfg["num_classes"])
    model.load_state_dict(torch.load(os.path.join(model_dir, "model.pt"), map_location="cpu"))
    return model


def _busy(seconds):
    end = time.monotonic() + seconds
    x = torch.ones(128, 128)
    while time.monotonic() < end:
        x = (x @ x).clamp_(max=1.0)


def predict_fn(data, model):
    first = data[:, 0]
    if bool((first == -999).any()):
        raise RuntimeError("poisoned row")
    if bool((first == 777).any()):
        _busy(0.3)
    if bool((first == 888).any()):
        time.sleep(1.0)
    if bool((first == 999).any()):
        time.sleep(2.5)
    return model(data)
"""

IN_FEATURES = 4
NUM_CLASSES = 3


def _tiny_net(code_dir: Path) -> type[torch.nn.Module]:
    namespace: dict[str, object] = {}
    exec(NET_PY, namespace)  # the same class the handler imports from code/net.py
    return namespace["TinyNet"]  # type: ignore[return-value]


def build_mlp_dir(root: Path) -> Path:
    """model.pt (state_dict), model_config.json and code/{inference,net}.py."""
    (root / "code").mkdir(parents=True)
    (root / "code" / "net.py").write_text(NET_PY)
    (root / "code" / "inference.py").write_text(INFERENCE_PY)
    (root / "model_config.json").write_text(json.dumps({"input_shape": [IN_FEATURES], "num_classes": NUM_CLASSES}))
    torch.manual_seed(0)
    net = _tiny_net(root / "code")(IN_FEATURES, NUM_CLASSES)
    torch.save(net.state_dict(), root / "model.pt")
    return root


def reference_model(model_dir: Path) -> torch.nn.Module:
    """The MLP of ``build_mlp_dir``, loaded directly (not through the server)."""
    net = _tiny_net(model_dir / "code")(IN_FEATURES, NUM_CLASSES)
    net.load_state_dict(torch.load(model_dir / "model.pt", map_location="cpu"))
    return net.eval()


class TinyConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def build_torchscript_dir(root: Path) -> Path:
    """Only a TorchScript model.pt and model_config.json: everything else is the server's default."""
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(1)
    with warnings.catch_warnings():  # TorchScript is deprecated in recent torch; it is SageMaker's default
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(TinyConv().eval()).save(str(root / "model.pt"))
    (root / "model_config.json").write_text(json.dumps({"input_shape": [3, 8, 8]}))
    return root


def assert_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1.3e-6, atol: float = 1e-5) -> None:
    """``torch.allclose`` with a readable failure (torch.testing's first call costs a second of imports).

    Either side may be on a GPU (a handler's prediction is where its model is): both are compared on the CPU.
    """
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    actual, expected = actual.detach().cpu(), expected.detach().cpu()
    if not torch.allclose(actual.float(), expected.float(), rtol=rtol, atol=atol):
        diff = (actual.float() - expected.float()).abs().max().item()
        raise AssertionError(f"tensors differ by up to {diff:.3g} (rtol={rtol}, atol={atol})")
