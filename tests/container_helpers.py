"""Helpers shared by the container tests (inference and training images) and the end-to-end tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


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
