"""Load a model directory and its SageMaker PyTorch handler, with defaults for anything it leaves out.

The model directory is an untarred ``model.tar.gz``::

    model.pt                 weights (or a TorchScript archive for the default model_fn)
    model_config.json        optional: {"input_shape": [3, 224, 224], "mean": [...], "std": [...], ...}
                             (or "image_size": 224 with "input": {"layout": "NCHW", "channels": 3})
    code/inference.py        optional handler: model_fn, input_fn, predict_fn, output_fn (or transform_fn)
    code/<other modules>     importable from inference.py (code/ is put on sys.path)

The handler contract is the one of the SageMaker PyTorch inference toolkit, so the same archive runs on the
AWS PyTorch DLC inference image. Like the toolkit, a ``application/json`` or ``text/csv`` body reaches
``input_fn`` as ``str``, other bodies as ``bytes``; a handler function may take one extra trailing
``context`` argument (``None`` here); ``output_fn`` may return ``body`` or ``(body, content_type)``.

Two optional module attributes, read only by this server, let a handler declare what it decodes and
encodes so that unsupported types are refused (415/406) before the body is read::

    CONTENT_TYPES = ("application/json", "image/jpeg")
    ACCEPT_TYPES = ("application/json",)
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from gpu_serve import codecs
from gpu_serve.config import ServeConfig
from gpu_serve.devices import resolve_device, use_device
from gpu_serve.errors import ModelLoadError

HANDLER_FUNCTIONS = ("model_fn", "input_fn", "predict_fn", "output_fn", "transform_fn", "model_warmup_fn")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

_import_lock = threading.Lock()


def _with_context(fn: Callable[..., Any], n_args: int) -> Callable[..., Any]:
    """Call ``fn`` with ``n_args`` arguments, adding a trailing ``None`` context when it takes one more."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return fn
    positional = [
        p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    if len(required) == n_args + 1:

        def call(*args: Any) -> Any:
            return fn(*args, None)

        call.__name__ = getattr(fn, "__name__", "handler")
        return call
    if len(required) > n_args + 1 or len(positional) < n_args:
        name = getattr(fn, "__name__", "handler function")
        raise ModelLoadError(
            f"{name}{inspect.signature(fn)} must take {n_args} arguments (or {n_args + 1} with a context)"
        )
    return fn


def select_device(name: str) -> torch.device:
    """``GPU_SERVE_DEVICE`` as an indexed torch device (see :func:`gpu_serve.devices.resolve_device`)."""
    return resolve_device(name)


def read_model_config(model_dir: Path) -> dict[str, Any]:
    """``model_config.json`` as a dict, or ``{}`` when absent."""
    path = model_dir / "model_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} must hold a JSON object; got {type(data).__name__}")
    return data


def _shape_from_config(model_config: dict[str, Any], path: Path) -> tuple[int, ...] | None:
    """Per-sample input shape: ``input_shape``, else ``(input.channels or 3, image_size, image_size)``."""
    raw = model_config.get("input_shape")
    size = model_config.get("image_size")
    if raw is None and isinstance(size, int) and size > 0:
        declared = model_config.get("input")
        layout: dict[str, Any] = declared if isinstance(declared, dict) else {}
        channels = layout.get("channels", 3)
        if layout.get("layout", "NCHW") == "NCHW" and isinstance(channels, int) and channels > 0:
            return (channels, size, size)
        return None
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(d, int) and d > 0 for d in raw):
        raise ModelLoadError(
            f"{path}: input_shape={raw!r} is not allowed; allowed: a list of positive integers (per sample)"
        )
    return tuple(raw)


def _floats_from_config(model_config: dict[str, Any], key: str, path: Path) -> list[float] | None:
    raw = model_config.get(key)
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(v, (int, float)) for v in raw):
        raise ModelLoadError(f"{path}: {key}={raw!r} is not allowed; allowed: a list of numbers per channel")
    return [float(v) for v in raw]


def import_handler_module(model_dir: Path, program: str) -> ModuleType | None:
    """Import ``<model_dir>/code/<program>`` with ``code/`` on ``sys.path``; ``None`` when it is absent."""
    code_dir = model_dir / "code"
    path = code_dir / program
    if not path.is_file():
        return None
    module_name = program[: -len(".py")]
    with _import_lock:
        if str(code_dir) in sys.path:
            sys.path.remove(str(code_dir))
        sys.path.insert(0, str(code_dir))  # first, so that its sibling modules win
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ModelLoadError(f"cannot import handler {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(module_name, None)
            raise ModelLoadError(f"importing handler {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def default_model_fn(model_dir: str | Path) -> torch.nn.Module:
    """Load the model of ``model_dir`` without user code, as the SageMaker PyTorch toolkit does.

    A TorchScript ``model.pt`` or ``model.pth`` (or the only ``*.pt``/``*.pth``) is loaded; anything else
    (such as a ``state_dict``) needs a ``model_fn`` in ``code/inference.py``.
    """
    root = Path(model_dir)
    candidates = [root / "model.pt", root / "model.pth"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        found = sorted(p.name for p in root.glob("*.pt*") if p.suffix in (".pt", ".pth"))
        if len(found) != 1:
            raise ModelLoadError(
                f"no model_fn in code/inference.py and no TorchScript model to load by default: "
                f"{root} must hold model.pt or model.pth (found {found or 'none'}); "
                "or define model_fn(model_dir) in code/inference.py"
            )
        path = root / found[0]
    try:
        with warnings.catch_warnings():  # TorchScript is deprecated in recent torch, still the SageMaker default
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(
            f"{path} is not a TorchScript archive, so the default model_fn cannot load it "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Save it with "
            "torch.jit.script(model).save(path), or define model_fn(model_dir) in code/inference.py "
            "to build the model and load its state_dict"
        ) from exc


@dataclass
class Handler:
    """A loaded model and the four handler functions (user-defined or default), ready to serve."""

    model: Any
    device: torch.device
    dtype: torch.dtype
    input_fn: Callable[[Any, str], Any]
    predict_fn: Callable[[Any, Any], Any]
    output_fn: Callable[[Any, str], Any]
    transform_fn: Callable[[Any, Any, str, str], Any] | None = None
    content_types: tuple[str, ...] | None = codecs.DEFAULT_CONTENT_TYPES
    accept_types: tuple[str, ...] | None = codecs.DEFAULT_ACCEPT_TYPES
    input_shape: tuple[int, ...] | None = None
    user_functions: tuple[str, ...] = ()
    model_config: dict[str, Any] = field(default_factory=dict)

    def init_thread(self) -> None:
        """Per-thread torch state for the model thread: intra-op thread count and the current CUDA device.

        Both are per thread in torch/OpenMP: a thread that never set them runs with the defaults (all
        cores), which on a busy CPU makes a batched forward pass several times slower.
        """
        torch.set_num_threads(torch.get_num_threads())
        use_device(self.device)

    @property
    def batchable(self) -> bool:
        """False when a ``transform_fn`` does everything per request (no batching possible)."""
        return self.transform_fn is None

    def prepare(self, data: Any) -> Any:
        """Move the input to the model's device and cast floating tensors to the model dtype.

        A tensor, or the tensors inside a dict, list or tuple (what an ``input_fn`` may return), so that the
        default ``predict_fn`` and a user ``predict_fn`` alike get their input where the model is.
        """
        if isinstance(data, torch.Tensor):
            if data.device != self.device:
                data = data.to(self.device, non_blocking=True)
            if data.is_floating_point() and data.dtype != self.dtype:
                data = data.to(self.dtype)
            return data
        if isinstance(data, dict):
            return {k: self.prepare(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)) and any(isinstance(v, (torch.Tensor, dict, list, tuple)) for v in data):
            items = [self.prepare(v) for v in data]
            return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)  # a namedtuple
        return data

    def predict(self, data: Any) -> Any:
        """``predict_fn`` under ``torch.inference_mode()``; on CUDA, waits for the kernels to finish."""
        with torch.inference_mode():
            out = self.predict_fn(self.prepare(data), self.model)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        return out


def load_handler(config: ServeConfig) -> Handler:
    """Import the handler, load and place the model (device, dtype, eval mode), and fill in defaults."""
    model_dir = config.model_dir
    if not model_dir.is_dir():
        raise ModelLoadError(f"model directory {model_dir} does not exist (GPU_SERVE_MODEL_DIR)")
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    device = select_device(config.device)
    dtype = TORCH_DTYPES[config.dtype]
    model_config = read_model_config(model_dir)
    cfg_path = model_dir / "model_config.json"
    input_shape = config.input_shape or _shape_from_config(model_config, cfg_path)
    mean = _floats_from_config(model_config, "mean", cfg_path)
    std = _floats_from_config(model_config, "std", cfg_path)

    module = import_handler_module(model_dir, config.program)
    user: dict[str, Callable[..., Any]] = {}
    if module is not None:
        for name in HANDLER_FUNCTIONS:
            fn = getattr(module, name, None)
            if callable(fn):
                user[name] = fn
    if "transform_fn" in user and {"input_fn", "predict_fn", "output_fn"} & set(user):
        raise ModelLoadError(
            "code/inference.py defines transform_fn together with input_fn/predict_fn/output_fn; "
            "define either transform_fn or the other three"
        )

    model_fn = _with_context(user.get("model_fn", default_model_fn), 1)
    try:
        model = model_fn(str(model_dir))
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"model_fn({str(model_dir)!r}) failed: {type(exc).__name__}: {exc}") from exc
    if model is None:
        raise ModelLoadError("model_fn returned None; it must return the model")
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
        if dtype != torch.float32:
            model = model.to(dtype)
        with contextlib.suppress(NotImplementedError):  # torch.export modules fix their mode at export time
            model.eval()

    def default_input_fn(body: Any, content_type: str) -> torch.Tensor:
        ctype = codecs.media_type(content_type)
        if ctype == codecs.JSON:
            tensor = codecs.decode_json(body)
        elif ctype == codecs.NPY:
            tensor = codecs.decode_npy(body if isinstance(body, bytes) else body.encode())
        elif ctype in (codecs.JPEG, codecs.PNG):
            tensor = codecs.decode_image(bytes(body), ctype, input_shape, mean, std)
        else:
            raise codecs.unsupported_content_type(ctype, codecs.DEFAULT_CONTENT_TYPES)
        return codecs.fit_batch_dim(tensor, input_shape)

    def default_predict_fn(data: Any, model: Any) -> Any:
        return model(data)

    def default_output_fn(prediction: Any, accept: str) -> bytes:
        return codecs.encode(prediction, codecs.media_type(accept))

    def declared(attr: str, default: tuple[str, ...] | None) -> tuple[str, ...] | None:
        raw = getattr(module, attr, None) if module is not None else None
        if raw is None:
            return default
        if isinstance(raw, str) or not isinstance(raw, Sequence) or not all(isinstance(t, str) for t in raw):
            raise ModelLoadError(f"code/{config.program}: {attr} must be a sequence of media types; got {raw!r}")
        return tuple(codecs.media_type(t) for t in raw)

    user_decodes = "input_fn" in user or "transform_fn" in user
    user_encodes = "output_fn" in user or "transform_fn" in user
    handler = Handler(
        model=model,
        device=device,
        dtype=dtype,
        input_fn=_with_context(user["input_fn"], 2) if "input_fn" in user else default_input_fn,
        predict_fn=_with_context(user["predict_fn"], 2) if "predict_fn" in user else default_predict_fn,
        output_fn=_with_context(user["output_fn"], 2) if "output_fn" in user else default_output_fn,
        transform_fn=_with_context(user["transform_fn"], 4) if "transform_fn" in user else None,
        content_types=declared("CONTENT_TYPES", None if user_decodes else codecs.DEFAULT_CONTENT_TYPES),
        accept_types=declared("ACCEPT_TYPES", None if user_encodes else codecs.DEFAULT_ACCEPT_TYPES),
        input_shape=input_shape,
        user_functions=tuple(sorted(user)),
        model_config=model_config,
    )
    if "model_warmup_fn" in user:
        try:
            _with_context(user["model_warmup_fn"], 2)(str(model_dir), model)
        except Exception as exc:
            raise ModelLoadError(f"model_warmup_fn failed: {type(exc).__name__}: {exc}") from exc
    return handler


def warmup(handler: Handler, batch_sizes: Sequence[int] = (1,)) -> None:
    """Run zeros of ``(n, *input_shape)`` through ``predict_fn`` (first-call CUDA and allocator costs)."""
    if handler.input_shape is None or not handler.batchable:
        return
    for n in batch_sizes:
        handler.predict(torch.zeros((n, *handler.input_shape)))
