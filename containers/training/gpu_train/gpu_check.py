"""Fail fast when an instance should have NVIDIA GPUs but torch cannot use them.

The facts printed at start: device count, names, compute capability and memory; the NVIDIA driver
version and the CUDA version it supports; torch's version, the CUDA version it was built with, its
cuDNN and NCCL versions and the GPU architectures it was compiled for.

A GPU is *expected* when any of these says so: ``SM_NUM_GPUS`` > 0, an NVIDIA GPU instance type
(``ml.p*``, ``ml.g*``), ``/dev/nvidia0`` exists, ``nvidia-smi`` lists a GPU, or the caller insists
(hyperparameter ``expect_gpu=true``, ``gpuctl doctor --expect-gpus N``). When one is expected and torch
sees none, sees fewer than expected, was built without kernels for the GPU's architecture, or cannot
run a kernel, :func:`check` raises :class:`GpuCheckError` with the reason and the facts.

A job whose environment hides every GPU from CUDA (``CUDA_VISIBLE_DEVICES`` empty or ``-1``) asks for the
CPU on purpose: the host's own signs (device nodes, ``nvidia-smi``) then expect no GPU. ``SM_NUM_GPUS``, a
GPU instance type and ``expect_gpu=true`` still do (a GPU instance that trains on its CPU is a mistake).

torch is imported lazily: without torch the facts come from ``nvidia-smi`` alone.

TensorFlow jobs (``python -m gpu_train launch`` in a TensorFlow image) get the same rule from
:func:`collect_tensorflow` and :func:`check_tensorflow`: TensorFlow's own view of the GPUs
(``tf.config.list_physical_devices("GPU")``, ``tf.test.is_built_with_cuda()``) against the same
:class:`Expectation`.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpu_train.errors import GpuCheckError

log = logging.getLogger("gpu_train")

# NVIDIA GPU instance families (EC2 names, with or without the SageMaker "ml." prefix). g4ad has AMD GPUs.
_GPU_FAMILY = re.compile(r"^(?:ml\.)?(?:p[2-9][a-z]*|g[3-9](?!ad)[a-z]*|gr6)\.", re.IGNORECASE)


def instance_has_nvidia_gpu(instance_type: str | None) -> bool:
    return bool(instance_type) and bool(_GPU_FAMILY.match(instance_type or ""))


def gpus_hidden(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``CUDA_VISIBLE_DEVICES`` hides every GPU from CUDA: empty, or its first entry is ``-1`` (CUDA
    ignores the list from its first invalid entry on)."""
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return False
    first = listed.split(",")[0].strip()
    return first in ("", "-1")


@dataclass
class Device:
    index: int
    name: str
    capability: str
    memory_gib: float


@dataclass
class GpuFacts:
    """What this host and torch report about NVIDIA GPUs."""

    torch_version: str | None = None
    torch_cuda: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    arch_list: list[str] = field(default_factory=list)
    cuda_available: bool = False
    devices: list[Device] = field(default_factory=list)
    driver_version: str | None = None
    driver_cuda: str | None = None
    smi_gpus: list[str] = field(default_factory=list)
    dev_nodes: bool = False
    error: str | None = None
    torch_checked: bool = False  # False: torch was not imported (no sign of an NVIDIA GPU on this host)
    cuda_visible_devices: str | None = None  # this process's CUDA_VISIBLE_DEVICES (None: not set)

    @property
    def device_count(self) -> int:
        return len(self.devices)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["device_count"] = self.device_count
        return data

    def lines(self) -> list[str]:
        out = [
            f"torch {self.torch_version or 'not installed'}"
            + (
                f" built with CUDA {self.torch_cuda}"
                if self.torch_cuda
                else " (CPU-only build)"
                if self.torch_version
                else ""
            ),
            f"cuDNN {self.cudnn or '-'}, NCCL {self.nccl or '-'}, kernels for: {' '.join(self.arch_list) or '-'}",
            f"NVIDIA driver {self.driver_version or 'not found'}, supports CUDA {self.driver_cuda or '-'}",
            f"visible GPUs (torch): {self.device_count}" + ("" if self.cuda_available else " (CUDA not available)"),
        ]
        for d in self.devices:
            out.append(f"  cuda:{d.index} {d.name}, compute capability {d.capability}, {d.memory_gib:.1f} GiB")
        if self.cuda_visible_devices is not None:
            out.append(f"CUDA_VISIBLE_DEVICES={self.cuda_visible_devices!r}")
        if self.smi_gpus and not self.devices:
            out.append("nvidia-smi lists: " + "; ".join(self.smi_gpus))
        if self.error:
            out.append(f"error: {self.error}")
        return out


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def _driver_facts(facts: GpuFacts) -> None:
    try:
        import pynvml  # nvidia-ml-py, present in the AWS DLC images

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            facts.driver_version = version.decode() if isinstance(version, bytes) else str(version)
            cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
            facts.driver_cuda = f"{cuda // 1000}.{cuda % 1000 // 10}"
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    listing = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if listing:
        facts.smi_gpus = [line.strip() for line in listing.splitlines() if line.strip()]
        if facts.driver_version is None and facts.smi_gpus:
            facts.driver_version = facts.smi_gpus[0].split(",")[1].strip()
    if facts.driver_cuda is None:
        header = _run(["nvidia-smi"])
        match = re.search(r"CUDA Version:\s*([\d.]+)", header or "")
        if match:
            facts.driver_cuda = match.group(1)
    if facts.driver_version is None:
        proc = Path("/proc/driver/nvidia/version")
        if proc.exists():
            match = re.search(r"Kernel Module\s+([\d.]+)", proc.read_text())
            if match:
                facts.driver_version = match.group(1)


def collect(*, probe: bool = True, import_torch: bool | None = None) -> GpuFacts:
    """Gather the facts; ``probe`` also runs one tiny kernel on each visible GPU.

    ``import_torch=None`` imports torch (seconds) only when the host shows a sign of an NVIDIA GPU (device
    node, ``nvidia-smi``, driver) or torch is already imported: without a GPU, torch can see none.
    """
    facts = GpuFacts(
        dev_nodes=Path("/dev/nvidia0").exists(), cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES")
    )
    _driver_facts(facts)
    if import_torch is None:
        import_torch = bool(facts.dev_nodes or facts.smi_gpus or facts.driver_version) or "torch" in sys.modules
    if not import_torch:
        try:
            facts.torch_version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            facts.torch_version = None
        return facts
    try:
        import torch
    except ImportError:
        facts.torch_checked = True
        return facts
    facts.torch_checked = True
    facts.torch_version = torch.__version__
    facts.torch_cuda = torch.version.cuda
    facts.nccl = None
    try:
        facts.cuda_available = bool(torch.cuda.is_available())
        if facts.torch_cuda:
            facts.arch_list = list(torch.cuda.get_arch_list())
            if torch.backends.cudnn.is_available():
                facts.cudnn = str(torch.backends.cudnn.version())
            nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
            facts.nccl = ".".join(str(v) for v in nccl) if isinstance(nccl, tuple) else (str(nccl) if nccl else None)
        if facts.cuda_available:
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                facts.devices.append(
                    Device(index, props.name, f"{props.major}.{props.minor}", props.total_memory / (1 << 30))
                )
            if probe:
                for index in range(len(facts.devices)):
                    value = (torch.ones(8, device=f"cuda:{index}") * 2).sum().item()
                    if value != 16.0:
                        facts.error = f"cuda:{index} computed {value} for a known sum of 16"
    except Exception as exc:
        facts.error = f"{type(exc).__name__}: {exc}"
    return facts


@dataclass(frozen=True)
class Expectation:
    """How many GPUs the instance should have, and why we think so."""

    count: int  # 0: none expected; -1: some, number unknown
    reason: str


def expected_gpus(
    *,
    setting: str = "auto",
    instance_type: str | None = None,
    environ: Mapping[str, str] | None = None,
    facts: GpuFacts | None = None,
) -> Expectation:
    """Decide whether GPUs are expected. ``setting``: 'auto', 'true', 'false' or a count."""
    env = os.environ if environ is None else environ
    if setting == "false":
        return Expectation(0, "expect_gpu=false")
    if setting not in ("auto", "true"):
        return Expectation(int(setting), f"{setting} GPUs requested")
    raw = env.get("SM_NUM_GPUS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return Expectation(int(raw), f"SM_NUM_GPUS={raw}")
    if instance_has_nvidia_gpu(instance_type):
        return Expectation(-1, f"instance type {instance_type} has NVIDIA GPUs")
    signs = facts is not None and bool(facts.dev_nodes or facts.smi_gpus)
    if signs and setting == "auto" and gpus_hidden(env):
        return Expectation(0, f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r} hides this host's GPUs")
    if facts is not None and facts.dev_nodes:
        return Expectation(-1, "/dev/nvidia0 exists")
    if facts is not None and facts.smi_gpus:
        return Expectation(len(facts.smi_gpus), f"nvidia-smi lists {len(facts.smi_gpus)} GPUs")
    if setting == "true":
        return Expectation(-1, "expect_gpu=true")
    return Expectation(0, "no sign of an NVIDIA GPU on this host")


def _arch_supported(capability: str, arch_list: list[str]) -> bool:
    """True when torch has SASS for this GPU (same major, minor <= GPU's) or PTX it can JIT (<= GPU)."""
    if not arch_list:
        return True  # unknown build: do not guess
    major, minor = (int(x) for x in capability.split("."))
    for arch in arch_list:
        match = re.match(r"(sm|compute)_(\d+)(\d)[a-z]?$", arch)
        if not match:
            continue
        kind, a_major, a_minor = match.group(1), int(match.group(2)), int(match.group(3))
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def check(expectation: Expectation, facts: GpuFacts) -> None:
    """Raise :class:`GpuCheckError` when expected GPUs are not usable by torch."""
    if expectation.count == 0:
        return
    summary = "; ".join(facts.lines())
    if not facts.torch_checked and facts.torch_version is not None:
        facts = collect(import_torch=True)
        summary = "; ".join(facts.lines())
    if facts.torch_version is None:
        raise GpuCheckError(f"GPUs expected ({expectation.reason}) but torch is not installed. {summary}")
    if facts.torch_cuda is None:
        raise GpuCheckError(
            f"GPUs expected ({expectation.reason}) but torch {facts.torch_version} is a CPU-only build; "
            f"use a CUDA build of torch (the default base image has one). {summary}"
        )
    if facts.error:
        raise GpuCheckError(f"GPUs expected ({expectation.reason}) but CUDA fails: {facts.error}. {summary}")
    if facts.device_count == 0:
        if facts.cuda_visible_devices is not None and gpus_hidden({"CUDA_VISIBLE_DEVICES": facts.cuda_visible_devices}):
            hint = f"CUDA_VISIBLE_DEVICES={facts.cuda_visible_devices!r} hides every GPU from CUDA (unset it)"
        elif facts.driver_version is None:
            hint = "the NVIDIA driver is not visible in the container (run it with the NVIDIA container runtime)"
        else:
            hint = (
                f"driver {facts.driver_version} (CUDA {facts.driver_cuda or '?'}) may be too old for "
                f"torch's CUDA {facts.torch_cuda}"
            )
        raise GpuCheckError(
            f"GPUs expected ({expectation.reason}) but torch sees none (torch.cuda.is_available() is False): "
            f"{hint}. Refusing to train on the CPU. {summary}"
        )
    if expectation.count > 0 and facts.device_count < expectation.count:
        visible = (
            f"CUDA_VISIBLE_DEVICES={facts.cuda_visible_devices!r}"
            if facts.cuda_visible_devices is not None
            else "CUDA_VISIBLE_DEVICES is not set"
        )
        raise GpuCheckError(
            f"{expectation.count} GPUs expected ({expectation.reason}) but torch sees {facts.device_count}: "
            f"{device_names(facts)} ({visible}); allowed: expect at most {facts.device_count} here (SM_NUM_GPUS, "
            f"expect_gpu), or an instance with {expectation.count} GPUs. {summary}"
        )
    for device in facts.devices:
        if not _arch_supported(device.capability, facts.arch_list):
            raise GpuCheckError(
                f"cuda:{device.index} {device.name} has compute capability {device.capability} but torch "
                f"{facts.torch_version} has kernels only for {' '.join(facts.arch_list)}; use a torch build "
                f"for this GPU. {summary}"
            )


def device_names(facts: GpuFacts) -> str:
    """``cuda:0 NVIDIA H200, cuda:1 NVIDIA H200`` (``no GPU`` when torch sees none)."""
    return ", ".join(f"cuda:{d.index} {d.name}" for d in facts.devices) or "no GPU"


def startup_check(
    *, setting: str = "auto", instance_type: str | None = None, environ: Mapping[str, str] | None = None
) -> GpuFacts:
    """The start-up check of a PyTorch job: gather the facts (importing torch only when the host shows a sign
    of an NVIDIA GPU or GPUs are expected), log them, and raise :class:`GpuCheckError` when expected GPUs are
    not usable. Returns the facts (``device_count`` sizes the processes per host)."""
    facts = collect()
    expectation = expected_gpus(setting=setting, instance_type=instance_type, environ=environ, facts=facts)
    if expectation.count != 0 and not facts.torch_checked:
        facts = collect(import_torch=True)
    log.info("%s", report(facts, expectation))
    check(expectation, facts)
    return facts


@dataclass
class TensorFlowFacts:
    """What TensorFlow reports about GPUs (``checked=False``: TensorFlow was not imported)."""

    version: str | None = None
    built_with_cuda: bool | None = None  # None: unknown (TensorFlow was not asked, or the question failed)
    gpus: list[str] = field(default_factory=list)
    error: str | None = None
    checked: bool = False

    @property
    def device_count(self) -> int:
        return len(self.gpus)

    def lines(self) -> list[str]:
        if not self.checked:
            return ["TensorFlow not imported (no GPU expected on this host)"]
        if self.version is None:
            return ["TensorFlow not installed" + (f" ({self.error})" if self.error else "")]
        build = {True: "built with CUDA", False: "built without CUDA", None: "(CUDA build unknown)"}[
            self.built_with_cuda
        ]
        out = [f"TensorFlow {self.version} {build}", f"visible GPUs (TensorFlow): {self.device_count}"]
        out += [f"  {name}" for name in self.gpus]
        if self.error:
            out.append(f"error: {self.error}")
        return out


def collect_tensorflow() -> TensorFlowFacts:
    """TensorFlow's view: ``tf.config.list_physical_devices("GPU")`` and ``tf.test.is_built_with_cuda()``
    (https://www.tensorflow.org/guide/gpu). Importing TensorFlow takes seconds; call it only when GPUs are
    expected."""
    facts = TensorFlowFacts(checked=True)
    try:
        import tensorflow as tf
    except ImportError as exc:
        facts.error = f"{type(exc).__name__}: {exc}"
        return facts
    facts.version = str(getattr(tf, "__version__", "unknown"))
    try:
        facts.built_with_cuda = bool(tf.test.is_built_with_cuda())
    except Exception as exc:
        facts.error = f"{type(exc).__name__}: {exc}"
    try:
        facts.gpus = [str(getattr(d, "name", d)) for d in tf.config.list_physical_devices("GPU")]
    except Exception as exc:
        facts.error = facts.error or f"{type(exc).__name__}: {exc}"
    return facts


def _expected_phrase(expectation: Expectation) -> str:
    if expectation.count < 0:
        return "at least 1 GPU"
    return f"{expectation.count} GPU" + ("" if expectation.count == 1 else "s")


def check_tensorflow(expectation: Expectation, facts: TensorFlowFacts) -> None:
    """Raise :class:`GpuCheckError` when GPUs are expected but TensorFlow cannot use them (the same rule as
    :func:`check` for torch)."""
    if expectation.count == 0:
        return
    summary = "; ".join(facts.lines())
    expected = _expected_phrase(expectation)
    if facts.version is None:
        raise GpuCheckError(
            f"{expected} expected ({expectation.reason}) but TensorFlow cannot be imported "
            f"({facts.error or 'not installed'}). {summary}"
        )
    if facts.error:
        raise GpuCheckError(
            f"{expected} expected ({expectation.reason}) but TensorFlow fails: {facts.error}. {summary}"
        )
    seen = facts.device_count
    if seen == 0 or (expectation.count > 0 and seen < expectation.count):
        why = (
            f"TensorFlow {facts.version} is a CPU-only build (tf.test.is_built_with_cuda() is False); use a GPU "
            "build of TensorFlow (the AWS TensorFlow GPU training image has one)"
            if facts.built_with_cuda is False
            else "check the NVIDIA driver, the CUDA libraries TensorFlow needs and CUDA_VISIBLE_DEVICES"
        )
        raise GpuCheckError(
            f"{expected} expected ({expectation.reason}) but TensorFlow sees {seen} "
            f"(tf.config.list_physical_devices('GPU')): {why}. Refusing to train on the CPU. {summary}"
        )


def tensorflow_startup_check(
    *, setting: str = "auto", instance_type: str | None = None, environ: Mapping[str, str] | None = None
) -> TensorFlowFacts:
    """The start-up check of a TensorFlow job: the host facts decide whether GPUs are expected; TensorFlow is
    imported only then (or when the host shows a GPU), its view is logged and checked."""
    host = collect(import_torch=False)
    expectation = expected_gpus(setting=setting, instance_type=instance_type, environ=environ, facts=host)
    # TensorFlow's view is logged where the host shows a GPU, unless the job hides the GPUs from CUDA.
    signs = bool(host.dev_nodes or host.smi_gpus or host.driver_version) and not gpus_hidden(environ)
    facts = collect_tensorflow() if expectation.count != 0 or signs else TensorFlowFacts()
    lines = ["GPU check (TensorFlow):", *(f"  {line}" for line in facts.lines())]
    lines.append(f"  NVIDIA driver {host.driver_version or 'not found'}, supports CUDA {host.driver_cuda or '-'}")
    lines.append(f"  expected: {_describe(expectation)}")
    log.info("%s", "\n".join(lines))
    check_tensorflow(expectation, facts)
    return facts


def report(facts: GpuFacts, expectation: Expectation) -> str:
    lines = ["GPU check:", *(f"  {line}" for line in facts.lines()), f"  expected: {_describe(expectation)}"]
    return "\n".join(lines)


def _describe(expectation: Expectation) -> str:
    if expectation.count == 0:
        return f"no GPU ({expectation.reason})"
    if expectation.count < 0:
        return f"at least one GPU ({expectation.reason})"
    return f"{expectation.count} GPUs ({expectation.reason})"


def as_json(facts: GpuFacts, expectation: Expectation, problem: str | None) -> str:
    return json.dumps(
        {"facts": facts.as_dict(), "expected": asdict(expectation), "ok": problem is None, "problem": problem},
        indent=2,
    )
