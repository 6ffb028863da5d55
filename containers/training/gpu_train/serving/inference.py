"""SageMaker PyTorch inference handler for a model exported by the gpu_train training image.

This file is shipped as ``code/inference.py`` inside ``model.tar.gz`` and is self-contained: it needs
only torch, numpy and Pillow, so it also runs on the stock AWS PyTorch inference containers. The model
architecture comes from ``code/model.py`` (the built-in ResNet) or, for a custom model, from the user's
module copied next to it; ``model_config.json`` names which.

Handler contract (``model_fn``, ``input_fn``, ``predict_fn``, ``output_fn``):

``input_fn(body, content_type)`` returns a float tensor (N, 3, H, W) with H = W = ``image_size``:

* ``application/json``: ``{"instances": <nested list>}`` of shape (N, 3, H, W) or (3, H, W); values are
  model-ready (already normalised) floats;
* ``application/x-npy``: a ``.npy`` array of the same shapes; ``float32``/``float64``/``float16`` arrays
  are model-ready, ``uint8`` arrays are raw pixels (0..255) and are normalised with the model's mean/std;
* ``image/jpeg``, ``image/png``: one image, resized (shorter side to ``image_size``), centre-cropped and
  normalised exactly as the training data was packed.

``predict_fn(data, model)`` returns (N, num_classes) float32 logits on the CPU; each row depends only
on its own input (eval mode), so a server may batch several requests and split the result.
``output_fn(prediction, accept)`` returns ``{"predictions": [[...], ...]}`` as a JSON string for
``application/json`` (also for ``*/*`` or no Accept), or ``.npy`` bytes for ``application/x-npy``.
A malformed body, a wrong shape or dtype raises ``ValueError`` (``UnsupportedContentType``, a
``ValueError`` subclass, for an unknown content type or Accept).
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import os
import sys
from types import ModuleType
from typing import Any

import numpy as np
import torch
from PIL import Image

CODE_DIR = os.path.dirname(os.path.abspath(__file__))
CONFIG_NAME = "model_config.json"
WEIGHTS_NAME = "model.pt"
JSON_TYPES = ("application/json",)
NPY_TYPES = ("application/x-npy",)
IMAGE_TYPES = ("image/jpeg", "image/png")
CONTENT_TYPES = JSON_TYPES + NPY_TYPES + IMAGE_TYPES
ACCEPT_TYPES = JSON_TYPES + NPY_TYPES

_config: dict[str, Any] | None = None


class UnsupportedContentType(ValueError):
    """The request's Content-Type or Accept is not one this handler speaks."""


def _load_module(code_dir: str, filename: str, name: str) -> ModuleType:
    path = os.path.join(code_dir, filename)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_config(model_dir: str | None = None) -> dict[str, Any]:
    """``model_config.json`` of the model (cached); by default the one next to ``code/``."""
    global _config
    if model_dir is not None or _config is None:
        directory = model_dir or os.path.dirname(CODE_DIR)
        with open(os.path.join(directory, CONFIG_NAME)) as handle:
            _config = json.load(handle)
    return _config


def build_model(config: dict[str, Any], code_dir: str = CODE_DIR) -> torch.nn.Module:
    """The architecture named by ``config``, from ``code/model.py`` or the user's module in ``code_dir``."""
    module_file = config.get("module_file")
    if module_file:
        module = _load_module(code_dir, module_file, "gpu_train_user_model")
        builder = getattr(module, config.get("builder", "build_model"))
        model: torch.nn.Module = builder(
            num_classes=int(config["num_classes"]), image_size=int(config["image_size"]), **config.get("kwargs", {})
        )
        return model
    resnet = _load_module(code_dir, "model.py", "gpu_train_exported_model")
    built: torch.nn.Module = resnet.build_from_config(config)
    return built


def _device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def model_fn(model_dir: str) -> torch.nn.Module:
    """Rebuild the architecture, load ``model.pt``, move to CUDA when available, eval mode."""
    config = load_config(model_dir)
    code_dir = os.path.join(model_dir, "code")
    model = build_model(config, code_dir if os.path.isdir(code_dir) else CODE_DIR)
    state = torch.load(os.path.join(model_dir, WEIGHTS_NAME), map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    model.eval()
    device = _device()
    model.to(device)
    if config.get("channels_last", True) and device.type == "cuda":
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def _as_bytes(body: Any) -> bytes:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    raise ValueError(f"request body of type {type(body).__name__} is not allowed; allowed: bytes or str")


def _normalise_pixels(pixels: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    """uint8 (N, 3, H, W) pixels -> normalised float32."""
    mean = np.asarray(config["mean"], dtype=np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(config["std"], dtype=np.float32).reshape(1, 3, 1, 1)
    return ((pixels.astype(np.float32) / 255.0) - mean) / std


def _check_shape(array: np.ndarray, config: dict[str, Any], what: str) -> np.ndarray:
    size = int(config["image_size"])
    if array.ndim == 3:
        array = array[None]
    if array.ndim != 4 or array.shape[1:] != (3, size, size) or array.shape[0] < 1:
        raise ValueError(
            f"{what} has shape {tuple(array.shape)}; allowed: (N, 3, {size}, {size}) or (3, {size}, {size})"
        )
    return array


def _resize_center_crop(image: Image.Image, size: int) -> Image.Image:
    """Same transform as the packer (gpu_train.pack.resize_center_crop)."""
    width, height = image.size
    scale = size / min(width, height)
    new_w, new_h = max(size, round(width * scale)), max(size, round(height * scale))
    if (new_w, new_h) != (width, height):
        image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
    left, top = (new_w - size) // 2, (new_h - size) // 2
    return image.crop((left, top, left + size, top + size))


def decode_image(data: bytes, size: int) -> np.ndarray:
    """JPEG/PNG bytes -> (size, size, 3) uint8, as the packer stores training images."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", (size, size))
            rgb = image.convert("RGB")
    except (OSError, Image.DecompressionBombError, ValueError) as exc:
        raise ValueError(f"request body is not a readable JPEG or PNG image: {exc}") from None
    return np.asarray(_resize_center_crop(rgb, size), dtype=np.uint8)


def input_fn(request_body: Any, request_content_type: str | None) -> torch.Tensor:
    """Deserialize a request into a float tensor (N, 3, H, W)."""
    config = load_config()
    media = _media_type(request_content_type)
    data = _as_bytes(request_body)
    if media in JSON_TYPES:
        try:
            payload = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"request body is not valid JSON: {exc}") from None
        instances = payload.get("instances") if isinstance(payload, dict) else payload
        if instances is None:
            raise ValueError('JSON request must be {"instances": [...]} (a nested list of numbers)')
        try:
            array = np.asarray(instances, dtype=np.float32)
        except (ValueError, TypeError):
            raise ValueError('"instances" must be a rectangular nested list of numbers') from None
        array = _check_shape(array, config, '"instances"')
    elif media in NPY_TYPES:
        try:
            array = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"request body is not a valid .npy array: {exc}") from None
        if not isinstance(array, np.ndarray):
            raise ValueError("request body must hold one .npy array")
        array = _check_shape(array, config, ".npy array")
        if array.dtype == np.uint8:
            array = _normalise_pixels(array, config)
        elif array.dtype in (np.float32, np.float64, np.float16):
            array = array.astype(np.float32)
        else:
            raise ValueError(f".npy array has dtype {array.dtype}; allowed: float32 (model-ready) or uint8 (pixels)")
    elif media in IMAGE_TYPES:
        pixels = decode_image(data, int(config["image_size"]))
        array = _normalise_pixels(pixels.transpose(2, 0, 1)[None], config)
    else:
        raise UnsupportedContentType(
            f"content type {request_content_type!r} is not supported; allowed: {', '.join(CONTENT_TYPES)}"
        )
    if not np.isfinite(array).all():
        raise ValueError("input holds NaN or infinite values")
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def predict_fn(input_data: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """(N, 3, H, W) -> (N, num_classes) float32 logits on the CPU."""
    if not isinstance(input_data, torch.Tensor) or input_data.ndim != 4:
        shape = tuple(getattr(input_data, "shape", ()))
        raise ValueError(f"predict_fn needs a (N, 3, H, W) tensor, got {type(input_data).__name__} {shape}")
    parameter = next(model.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    # The model's own floating dtype: a server may cast the model (gpu_serve's GPU_SERVE_DTYPE=bfloat16), and a
    # float32 input to a bfloat16 convolution raises "Input type and weight type should be the same".
    dtype = parameter.dtype if parameter is not None and parameter.is_floating_point() else torch.float32
    with torch.inference_mode():
        x = input_data.to(device, dtype=dtype, non_blocking=True)
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        logits = model(x)
    return logits.float().cpu()


def _accepted(accept: str | None) -> str:
    if not accept or accept.strip() in ("*/*", ""):
        return JSON_TYPES[0]
    for part in accept.split(","):
        media = _media_type(part)
        if media in ACCEPT_TYPES:
            return media
        if media in ("*/*", "application/*"):
            return JSON_TYPES[0]
    raise UnsupportedContentType(f"accept type {accept!r} is not supported; allowed: {', '.join(ACCEPT_TYPES)}")


def output_fn(prediction: Any, accept: str | None) -> str | bytes:
    """Serialize logits: a JSON string ``{"predictions": ...}`` or ``.npy`` bytes."""
    media = _accepted(accept)
    if isinstance(prediction, torch.Tensor):
        array = prediction.detach().float().cpu().numpy()
    else:
        array = np.asarray(prediction, dtype=np.float32)
    if media in NPY_TYPES:
        buffer = io.BytesIO()
        np.save(buffer, array.astype(np.float32), allow_pickle=False)
        return buffer.getvalue()
    rows = [[None if not math.isfinite(v) else float(v) for v in row] for row in array.reshape(array.shape[0], -1)]
    return json.dumps({"predictions": rows})
