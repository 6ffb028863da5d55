"""Lazy re-exports (PEP 562) for a package whose names live in submodules that load the CDK runtime.

``__getattr__, __dir__ = lazy_exports(__name__, {"GpuFleet": "gpu_constructs.fleet.construct", ...})`` in a
package's ``__init__``: a name is imported from its module on first use, so importing a CDK-free submodule
(value types the config model builds) does not load the CDK.

This is the library's one lazy-export mechanism: the root package and every sub-package that defers imports
use it, so the error for an unknown name, ``dir()`` and the caching of a loaded name behave the same everywhere.
A package's ``__all__`` (its documented API, pinned by ``tests/constructs/test_api_surface.py``) may list fewer names
than ``exports``: the others stay importable for the library's own modules and tests without being advertised.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (name -> module)."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
