"""User-supplied model and dataset decoder, loaded without rebuilding the image.

A reference is ``module:function`` or ``file.py:function``. Modules are looked up in, in order:
the ``code`` input channel (``/opt/ml/input/data/code``), ``/opt/ml/code``, then ``sys.path``; a file
path may be absolute or relative to those directories.

* model: ``function(num_classes: int, image_size: int) -> torch.nn.Module``; its module file is copied into
  ``model.tar.gz`` (``code/``), so the inference handler rebuilds the model with the same call;
* decoder: ``function(sample: dict[str, bytes]) -> (uint8 array (H, W, 3), int label)``; ``sample`` maps
  each file extension of a WebDataset sample (``"jpg"``, ``"cls"``, ...) to its bytes. It runs in the
  loader workers, so it must be a module-level function.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpu_train.errors import HyperparameterError


def search_dirs(root: Path) -> list[Path]:
    return [root / "input" / "data" / "code", root / "code"]


def load_callable(reference: str, *, what: str, dirs: Sequence[Path]) -> tuple[Callable[..., Any], Path | None]:
    """Resolve ``reference``; returns the callable and the file it came from."""
    module_part, sep, attr = reference.rpartition(":")
    if not sep or not module_part or not attr:
        raise HyperparameterError(
            f"hyperparameter {what}={reference!r} is not allowed; allowed: 'module:function' or 'file.py:function'"
        )
    for directory in dirs:
        if directory.is_dir() and str(directory) not in sys.path:
            sys.path.insert(0, str(directory))
    if module_part.endswith(".py"):
        candidates = [Path(module_part)] + [d / module_part for d in dirs]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            places = ", ".join(str(d) for d in dirs)
            raise HyperparameterError(
                f"hyperparameter {what}={reference!r}: file {module_part} not found (looked in {places})"
            )
        name = f"gpu_train_plugin_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise HyperparameterError(f"hyperparameter {what}={reference!r}: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_part)
        except ImportError as exc:
            raise HyperparameterError(
                f"hyperparameter {what}={reference!r}: cannot import {module_part}: {exc}"
            ) from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise HyperparameterError(f"hyperparameter {what}={reference!r}: {module_part} has no function {attr!r}")
    source = getattr(module, "__file__", None)
    return function, Path(source) if source else None
