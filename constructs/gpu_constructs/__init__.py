"""gpu_constructs: AWS CDK constructs for training and serving PyTorch models on NVIDIA GPUs.

Public names are imported lazily (PEP 562), so ``import gpu_constructs.catalog`` or the config model does
not start the CDK runtime. ``from gpu_constructs import GpuNetwork`` works as usual.

To export a new public name, add it to ``_EXPORTS`` (name -> module) and to the ``TYPE_CHECKING`` block.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "ValidationError": "gpu_constructs.errors",
    "DEFAULT_INTERFACE_ENDPOINTS": "gpu_constructs.constants",
    "ENDPOINT_SUBNETS": "gpu_constructs.constants",
    "FLEET_SUBNETS": "gpu_constructs.constants",
    "TRAINING_SUBNETS": "gpu_constructs.constants",
    "GpuNetwork": "gpu_constructs.network",
    "PlatformStorage": "gpu_constructs.storage",
    "SecureBucket": "gpu_constructs.storage",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu_constructs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from gpu_constructs.constants import (
        DEFAULT_INTERFACE_ENDPOINTS,
        ENDPOINT_SUBNETS,
        FLEET_SUBNETS,
        TRAINING_SUBNETS,
    )
    from gpu_constructs.errors import ValidationError
    from gpu_constructs.network import GpuNetwork
    from gpu_constructs.storage import PlatformStorage, SecureBucket
