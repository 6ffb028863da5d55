"""The GPUs this server may use, found without torch (the HTTP process never imports it), and the model
processes to start on them.

``CUDA_VISIBLE_DEVICES`` is honoured as CUDA reads it: a comma-separated list of device indices or
``GPU-``/``MIG-`` UUIDs, read up to the first entry that is not one
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-environment-variables). The number
of devices comes from NVML, the library behind ``nvidia-smi`` that the NVIDIA container runtime mounts into
GPU containers (``nvmlDeviceGetCount_v2``, https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

from gpu_serve.config import ServeConfig


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
