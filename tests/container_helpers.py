"""Helpers shared by the container tests (inference and training images) and the end-to-end tests."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image


def checkov_argv(dockerfile: Path, checkov: str = "checkov") -> list[str]:
    """The checkov command line that scans one Dockerfile offline and reports JSON."""
    return [checkov, "-f", str(dockerfile), "--framework", "dockerfile", "--quiet", "--skip-download", "-o", "json"]


def import_model_handler(model_dir: Path, module_name: str) -> ModuleType:
    """A model archive's own ``code/inference.py``, imported under a private module name."""
    spec = importlib.util.spec_from_file_location(module_name, model_dir / "code" / "inference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toolkit_environ(base_dir: Path, bin_dir: Path) -> dict[str, str]:
    """The environment in which a test runs the SageMaker training toolkit (``sagemaker-training``) on a tree at
    ``base_dir``, as on a CPU instance: the toolkit counts GPUs with ``nvidia-smi --list-gpus``, so ``bin_dir`` puts
    first on ``PATH`` an ``nvidia-smi`` that fails (the toolkit then counts 0, like the launcher given
    ``CUDA_VISIBLE_DEVICES=""``), on a GPU host too. ``PYTHONPATH`` is kept: where the toolkit is installed into a
    folder of its own (``make gpu-check``), that is how the child finds it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no GPU in this test' >&2\nexit 9\n")
    smi.chmod(0o755)
    environ = {
        "SAGEMAKER_BASE_DIR": str(base_dir),
        "PATH": os.pathsep.join(filter(None, [str(bin_dir), os.environ.get("PATH", "")])),
        "AWS_DEFAULT_REGION": "x",
    }
    if os.environ.get("PYTHONPATH"):
        environ["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return environ


def make_images(root: Path, *, classes: int = 3, per_class: int = 64, seed: int = 0) -> Path:
    """ImageFolder tree of PNGs whose mean colour depends on the class (so a model can learn it)."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        directory = root / f"class_{c}"
        directory.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = (rng.random((40, 48, 3)) * 80 + c * 60).astype(np.uint8)
            Image.fromarray(pixels).save(directory / f"img_{i:03d}.png")
    return root


# -- the TorchServe side of the stock PyTorch inference DLC (its handler is sagemaker-inference's) -------------


class RequestProcessor:
    """``ts.context.RequestProcessor`` (torchserve 0.12.0): one request's headers, status and response headers."""

    def __init__(self, request_header: dict[str, str]) -> None:
        self._status_code = 200
        self._reason_phrase: str | None = None
        self._response_header: dict[str, str] = {}
        self._request_header = request_header

    def get_request_properties(self) -> dict[str, str]:
        return self._request_header

    def report_status(self, code: int, reason_phrase: str | None = None) -> None:
        self._status_code = code
        self._reason_phrase = reason_phrase

    def add_response_property(self, key: str, value: str) -> None:
        self._response_header[key] = value


class TorchServeContext:
    """The part of ``ts.context.Context`` (torchserve 0.12.0) that the sagemaker-inference handler uses."""

    def __init__(self, model_dir: Path, headers: list[dict[str, str]]) -> None:
        self.system_properties = {"model_dir": str(model_dir), "gpu_id": None, "batch_size": len(headers)}
        self.request_processor = [RequestProcessor(h) for h in headers]
        self.model_name = "model"

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self.request_processor[idx].report_status(code, reason_phrase=phrase)

    def set_response_content_type(self, idx: int, value: str) -> None:
        self.request_processor[idx].add_response_property("content-type", value)
