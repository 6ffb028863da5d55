"""The one home of device decisions: the GPUs this server may use, found without torch (the HTTP process never
imports it), the model processes to start on them, and the torch device a model process (or the model
thread) runs on (:func:`resolve_device`, which imports torch only when called).

``CUDA_VISIBLE_DEVICES`` is honoured as CUDA reads it: a comma-separated list of device indices or
``GPU-``/``MIG-`` UUIDs, read up to the first entry that is not one
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-environment-variables). The number
of devices comes from NVML, the library behind ``nvidia-smi`` that the NVIDIA container runtime mounts into
GPU containers (``nvmlDeviceGetCount_v2``, https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html).
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpu_serve.config import ServeConfig
from gpu_serve.errors import ModelLoadError

if TYPE_CHECKING:
    import torch

#: What ``GPU_SERVE_DEVICE`` may say (also the wording of the errors).
DEVICE_CHOICES = "auto, cpu, cuda, cuda:N"
_CUDA_INDEXED = re.compile(r"cuda:(\d+)")


def nvml_device_count() -> int:
    """GPUs the NVIDIA driver reports (all of them, before ``CUDA_VISIBLE_DEVICES``); 0 without a driver."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    try:
        if lib.nvmlInit_v2() != 0:
            return 0
    except AttributeError:
        return 0
    try:
        count = ctypes.c_uint(0)
        return int(count.value) if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else 0
    finally:
        lib.nvmlShutdown()


def visible_gpus(device_count: int, environ: Mapping[str, str] | None = None) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` entries of the GPUs a process started with ``environ`` sees."""
    if device_count <= 0:
        return []
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(device_count)]
    ids: list[str] = []
    for part in listed.split(","):
        entry = part.strip()
        valid = (entry.isdigit() and int(entry) < device_count) or entry.startswith(("GPU-", "MIG-"))
        if not valid or entry in ids:
            break  # CUDA ignores the entries from the first invalid one on
        ids.append(entry)
    return ids


def plan_model_processes(config: ServeConfig, gpus: list[str]) -> list[dict[str, str]]:
    """One environment override per model process to start (``GPU_SERVE_MODEL_PROCESSES`` >= 1 or auto).

    ``auto`` starts one model process per visible GPU, each seeing only its own GPU (as ``cuda:0``), when
    the device is ``auto`` or ``cuda`` and there are several; otherwise one. A count starts that many,
    spread over the GPUs round-robin (several on one GPU share it; without GPUs each holds its own copy of
    the model on the CPU). ``GPU_SERVE_DEVICE=cuda:N`` pins every model process to that one device.
    """
    spread = config.device in ("auto", "cuda") and len(gpus) >= 2
    count = config.model_processes
    if count is None:
        count = len(gpus) if spread else 1
    if count < 1:
        raise ValueError(f"GPU_SERVE_MODEL_PROCESSES={count} starts no model process; use 0 only in-process")
    if not spread:
        return [{} for _ in range(count)]
    return [{"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]} for i in range(count)]


def resolve_device(setting: str, cuda: Any = None) -> torch.device:
    """The torch device ``GPU_SERVE_DEVICE=setting`` means in this process; CUDA devices always get an index.

    ``auto`` is ``cuda:<current device>`` where torch sees a CUDA device, else ``cpu``; ``cuda`` is
    ``cuda:<current device>`` (``cuda:0`` unless this thread chose another); ``cuda:N`` must be one of the
    devices this process sees. In a model process started with ``CUDA_VISIBLE_DEVICES`` set to its own GPU
    (:func:`plan_model_processes`), that GPU is the only one it sees, as ``cuda:0``. Every caller (model
    placement, the model thread's current device, input placement) uses the device returned here, so that an
    unindexed ``cuda`` never reaches ``torch.cuda.set_device`` (which refuses it).

    ``cuda`` is the ``torch.cuda`` module, or an object with its ``is_available``, ``device_count`` and
    ``current_device`` (tests pass a fake one). A value that cannot be served raises
    :class:`~gpu_serve.errors.ModelLoadError` naming the setting, the value and what is allowed.
    """
    import torch

    cuda = torch.cuda if cuda is None else cuda
    name = setting.strip().lower()
    indexed = _CUDA_INDEXED.fullmatch(name)
    if name not in ("auto", "cpu", "cuda") and indexed is None:
        raise ModelLoadError(f"GPU_SERVE_DEVICE={setting!r} is not allowed; allowed: {DEVICE_CHOICES}")
    if name == "cpu":
        return torch.device("cpu")
    available = bool(cuda.is_available())
    if name == "auto" and not available:
        return torch.device("cpu")
    if not available:
        raise ModelLoadError(
            f"GPU_SERVE_DEVICE={setting!r} but torch sees no CUDA device "
            f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}); allowed here: auto or cpu"
        )
    count = int(cuda.device_count())
    index = int(indexed.group(1)) if indexed is not None else int(cuda.current_device())
    if not 0 <= index < count:
        seen = ", ".join(f"cuda:{i}" for i in range(count))
        raise ModelLoadError(
            f"GPU_SERVE_DEVICE={setting!r} but torch sees {count} CUDA device{'s' if count != 1 else ''} "
            f"({seen}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}); "
            f"allowed here: auto, cpu, cuda, {seen}"
        )
    return torch.device("cuda", index)


def use_device(device: torch.device, cuda: Any = None) -> None:
    """Make ``device`` the calling thread's current CUDA device (nothing for a CPU device).

    ``device`` comes from :func:`resolve_device`, so it has an index; one without is refused here with the
    setting's wording rather than torch's.
    """
    if device.type != "cuda":
        return
    if device.index is None:
        raise ModelLoadError(f"device {device} has no index; resolve GPU_SERVE_DEVICE with resolve_device()")
    if cuda is None:
        import torch

        cuda = torch.cuda
    cuda.set_device(device.index)
