"""The GPU instance catalog: every SageMaker (``ml.*``) and EC2 instance type the platform knows.

One frozen table records, per instance type: accelerator vendor and model, GPU count, GPU memory,
CUDA compute capability and architecture, vCPUs, memory, local NVMe, network bandwidth, EFA support,
and which SageMaker APIs accept it (training / hosting / notebook / processing) and whether EC2 does.
All instance choices of the platform go through the guards below:

* :func:`lookup` resolves a name, with "did you mean" for typos;
* :func:`require_nvidia_gpu` rejects a GPU workload on a type without an NVIDIA GPU and names three
  fitting GPU types valid for the same use;
* :func:`check_gpu_count` rejects a multi-GPU setting (processes per host, GPUs requested) that the type
  cannot satisfy;
* :func:`check_cuda_supports` rejects an image whose CUDA version cannot drive the GPU architecture;
* :func:`require_efa` / :attr:`InstanceType.has_local_nvme` serve EC2 fleets and endpoints;
* :func:`default_processes_per_host`, :func:`default_dataloader_workers` and
  :func:`estimate_training_memory` / :func:`gpu_memory_note` derive defaults and warnings;
* :func:`check_fallback_chain` (``catalog.fallback``) checks an ordered fallback list against its first choice,
  and ``catalog.pricing`` holds the dated on-demand price table (:func:`hourly_price`).

Sources. Instance facts come from EC2 ``DescribeInstanceTypes`` data as published in the instance-type
reference of AWS's Karpenter provider (aws/karpenter-provider-aws, ``website/content/en/v1.12/reference/
instance-types.md``), cross-checked against the Amazon EC2 User Guide; P2 facts come from the EC2 User
Guide's accelerated-computing page. GPU memory is the value EC2 reports (MiB per GPU; e.g. the A10G's
"24 GB" is reported as 22,888 MiB). Network bandwidth is the *baseline* EC2 reports; smaller sizes burst
higher ("up to 10/25 Gbps"). SageMaker and EC2 validity is recorded here and verified against
botocore's service models by ``tests/constructs/catalog/test_catalog.py``. See ``docs/gpu-instances.md``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gpu_constructs.catalog.cuda import (
    CudaVersion,
    parse_cuda_version,
)
from gpu_constructs.errors import ValidationError

if TYPE_CHECKING:
    from constructs import Construct

__all__ = [
    "ACCELERATORS",
    "ALL_USAGES",
    "BOTOCORE_SAGEMAKER_SHAPES",
    "CATALOG",
    "EXCLUDED_FAMILIES",
    "PRICES_AS_OF",
    "PRICE_SOURCES",
    "SAGEMAKER_USAGES",
    "Accelerator",
    "FallbackChoice",
    "GpuMemoryEstimate",
    "InstanceType",
    "TransformerShape",
    "Usage",
    "annotate_gpu_memory",
    "check_cuda_supports",
    "check_fallback_chain",
    "check_gpu_count",
    "cuda_support_problem",
    "default_dataloader_workers",
    "default_processes_per_host",
    "estimate_training_memory",
    "fsx_lustre_gib_month",
    "gpu_memory_note",
    "hourly_price",
    "instance_types",
    "lookup",
    "processes_per_host_limit",
    "render_markdown_table",
    "require_efa",
    "require_nvidia_gpu",
    "suggest_gpu_types",
]
from gpu_constructs.catalog.data import _TABLE, ACCELERATORS, CATALOG, EXCLUDED_FAMILIES
from gpu_constructs.catalog.types import (
    ALL_USAGES,
    BOTOCORE_SAGEMAKER_SHAPES,
    SAGEMAKER_USAGES,
    Accelerator,
    InstanceType,
    Usage,
    _fraction_text,
    _gib,
)
from gpu_constructs.lazy import lazy_exports

# The fallback checks use the guards below, so they (and the price table beside them) load on first use.
_EXPORTS = {
    "FallbackChoice": "gpu_constructs.catalog.fallback",
    "check_fallback_chain": "gpu_constructs.catalog.fallback",
    "PRICES_AS_OF": "gpu_constructs.catalog.pricing",
    "PRICE_SOURCES": "gpu_constructs.catalog.pricing",
    "fsx_lustre_gib_month": "gpu_constructs.catalog.pricing",
    "hourly_price": "gpu_constructs.catalog.pricing",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

_WHERE = "InstanceCatalog"

# --------------------------------------------------------------------------------------------------
# Lookup and listing
# --------------------------------------------------------------------------------------------------

InstanceRef = str | InstanceType


def _all_names() -> list[str]:
    """EC2 names of every entry plus ``ml.`` names of the entries SageMaker accepts."""
    return [it.name for it in _TABLE] + [it.sagemaker_name for it in _TABLE if it.sagemaker_uses]


def lookup(name: InstanceRef, *, where: str = _WHERE, param: str = "instance_type") -> InstanceType:
    """Resolve ``name`` (``ml.g5.xlarge`` or ``g5.xlarge``) to its catalog entry.

    An unknown name raises :class:`ValidationError` with up to three close names ("did you mean").
    """
    if isinstance(name, InstanceType):
        return name
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(where, f"{param}={name!r} is not an instance type name; allowed: e.g. 'ml.g5.xlarge'")
    text = name.strip()
    key = text[3:] if text.startswith("ml.") else text
    found = CATALOG.get(key)
    if found is not None:
        return found
    wants_ml = text.lower().startswith("ml.")
    candidates = [n for n in _all_names() if n.startswith("ml.") == wants_ml]
    close = difflib.get_close_matches(text.lower(), candidates, n=3, cutoff=0.6)
    hint = f"did you mean {_quote_list(close)}?" if close else "no close match"
    families = ", ".join(sorted({it.family for it in _TABLE}))
    raise ValidationError(
        where,
        f"{param}={name!r} is not in the GPU instance catalog ({hint}); "
        f"allowed: a catalogued type from the families {families} (see docs/gpu-instances.md)",
    )


def instance_types(*, usage: Usage | None = None, nvidia_only: bool = False) -> list[InstanceType]:
    """Catalog entries, optionally only those valid for ``usage`` and/or with an NVIDIA GPU."""
    return [it for it in _TABLE if (usage is None or it.valid_for(usage)) and (not nvidia_only or it.has_nvidia_gpu)]


def _quote_list(names: Iterable[str]) -> str:
    items = [repr(n) for n in names]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


# --------------------------------------------------------------------------------------------------
# Guards
# --------------------------------------------------------------------------------------------------


def _check_usage(usage: str, where: str) -> Usage:
    if usage not in ALL_USAGES:
        raise ValidationError(where, f"usage={usage!r} is not allowed; allowed: {', '.join(map(repr, ALL_USAGES))}")
    return usage


def _check_prefix(text: str, it: InstanceType, usage: Usage, where: str, param: str) -> None:
    expected = it.name_for(usage)
    if text != expected:
        api = "EC2" if usage == "ec2" else f"SageMaker {usage}"
        raise ValidationError(
            where,
            f"{param}={text!r} is not how {api} spells this type; did you mean {expected!r}? "
            f"(SageMaker types start with 'ml.', EC2 types do not)",
        )


def _usage_label(usage: Usage) -> str:
    if usage == "ec2":
        return "EC2 (botocore EC2 InstanceType enum)"
    return f"SageMaker {usage} (botocore SageMaker {BOTOCORE_SAGEMAKER_SHAPES[usage]} enum)"


def _distance(a: InstanceType, b: InstanceType) -> float:
    tier = b.accelerator.cost_tier if b.accelerator else 0
    return (
        abs(math.log2(b.vcpus / a.vcpus))
        + abs(math.log2(b.memory_mib / a.memory_mib))
        + 0.75 * max(0, tier - 1)
        + (0.0 if a.cpu_arch == b.cpu_arch else 1.0)
    )


def suggest_gpu_types(reference: InstanceRef, usage: Usage = "training", count: int = 3) -> list[InstanceType]:
    """The ``count`` NVIDIA GPU types valid for ``usage`` closest to ``reference``.

    Distance = |log2 vCPU ratio| + |log2 memory ratio| + 0.75 x (GPU cost tier - 1) + 1 if the CPU
    architecture differs (x86_64 vs arm64), so a CPU type is matched by size first and the cheaper GPU
    class wins ties; equal distances sort by cost tier, then name. Only whole-GPU types whose architecture
    current CUDA toolkits still support are suggested (no fractional vGPU, no Kepler/Volta).
    """
    ref = lookup(reference)
    candidates = [
        it
        for it in _TABLE
        if it.has_nvidia_gpu
        and not it.is_fractional_gpu
        and it.valid_for(usage)
        and it.name != ref.name
        and it.cuda is not None
        and it.cuda.dropped_in is None
    ]
    candidates.sort(key=lambda it: (_distance(ref, it), it.accelerator.cost_tier if it.accelerator else 0, it.name))
    return candidates[:count]


def _suggestion_text(ref: InstanceType, usage: Usage) -> str:
    picks = suggest_gpu_types(ref, usage)
    if not picks:
        return "no catalogued NVIDIA GPU type is valid for this use"
    return ", ".join(it.describe(usage) for it in picks)


def require_nvidia_gpu(
    name: str,
    *,
    where: str,
    usage: Usage = "training",
    param: str = "instance_type",
    allow_fractional: bool = False,
) -> InstanceType:
    """Return the catalog entry of ``name`` if a CUDA workload can run there for ``usage``.

    Errors (:class:`ValidationError`, each naming the value and what is allowed):

    * unknown name: "did you mean" with close names;
    * wrong spelling for the API (``ml.`` prefix for SageMaker uses, none for ``ec2``);
    * not accepted by that API (per botocore's enums) or no NVIDIA GPU (CPU, AMD, Inferentia,
      Trainium): names three fitting NVIDIA GPU types valid for ``usage``;
    * fractional vGPU (g6f, gr6f) unless ``allow_fractional``.
    """
    usage = _check_usage(usage, where)
    it = lookup(name, where=where, param=param)
    _check_prefix(name.strip(), it, usage, where, param)
    shown = it.name_for(usage)
    if not it.valid_for(usage):
        valid = [u for u in ALL_USAGES if it.valid_for(u)]
        raise ValidationError(
            where,
            f"{param}={shown!r} is not accepted by {_usage_label(usage)}; it is valid for: "
            f"{', '.join(valid) or 'nothing the platform uses'}. Fitting NVIDIA GPU types for {usage}: "
            f"{_suggestion_text(it, usage)}",
        )
    if not it.has_nvidia_gpu:
        if it.accelerator is None:
            what = f"no NVIDIA GPU (CPU only: {it.vcpus} vCPUs, {_gib(it.memory_gib)} GiB)"
        else:
            note = f"; {it.accelerator.note}" if it.accelerator.note else ""
            what = f"no NVIDIA GPU ({it.accelerator_summary()}{note})"
        raise ValidationError(
            where,
            f"{param}={shown!r} has {what}, so CUDA cannot run there; allowed: an NVIDIA GPU type. "
            f"Fitting GPU types for {usage}: {_suggestion_text(it, usage)}",
        )
    if it.is_fractional_gpu and not allow_fractional:
        raise ValidationError(
            where,
            f"{param}={shown!r} has only {it.accelerator_summary()}: it needs the NVIDIA GRID driver and "
            "cannot run multi-GPU or NCCL jobs; allowed: a whole-GPU type such as "
            f"{_suggestion_text(it, usage)}, or pass allow_fractional=True",
        )
    return it


def processes_per_host_limit(instance_type: InstanceRef) -> int:
    """The most training processes (or GPUs a container asks for) a host of the type can run: one per NVIDIA
    GPU, and 1 on types without one. :func:`check_gpu_count` enforces it; the training state machine renders
    it per allowed type so that its input check applies the same limit."""
    return max(1, lookup(instance_type).nvidia_gpu_count)


def check_gpu_count(
    instance_type: InstanceRef,
    requested: int | None,
    *,
    where: str,
    param: str = "processes_per_host",
    usage: Usage = "training",
) -> None:
    """Raise unless ``1 <= requested <= NVIDIA GPUs of the type`` (``None`` means "use the default").

    Used for processes per host (one process per GPU) and for GPUs requested by a container; the
    multi-GPU alternatives in the message are spelled and filtered for ``usage``.
    """
    if requested is None:
        return
    usage = _check_usage(usage, where)
    it = lookup(instance_type, where=where)
    limit = processes_per_host_limit(it)
    if isinstance(requested, bool) or not isinstance(requested, int):
        raise ValidationError(where, f"{param}={requested!r} is not an integer; allowed: 1..{limit}")
    available = it.nvidia_gpu_count
    if requested < 1:
        raise ValidationError(where, f"{param}={requested} is not allowed; allowed: 1..{limit}")
    if requested <= limit:
        return
    if available <= 1:
        have = "no NVIDIA GPU" if available == 0 else f"a single GPU ({it.accelerator_summary()})"
        fitting = [c for c in _TABLE if c.nvidia_gpu_count >= requested and c.valid_for(usage)]
        bigger = [c for c in fitting if c.accelerator == it.accelerator] or [
            c for c in fitting if c.cuda is not None and c.cuda.dropped_in is None
        ]
        bigger.sort(key=lambda c: (c.nvidia_gpu_count, c.vcpus, c.name))
        options = ", ".join(repr(c.name_for(usage)) for c in bigger[:3]) or "none in the catalog"
        raise ValidationError(
            where,
            f"{param}={requested} needs {requested} GPUs but {it.name_for(usage)!r} has {have}; "
            "allowed: 1 on this type, "
            f"or a multi-GPU type such as {options}",
        )
    raise ValidationError(
        where,
        f"{param}={requested} is more than the {available} GPUs of {it.name_for(usage)!r} "
        f"({it.accelerator_summary()}); allowed: 1..{available}",
    )


def cuda_support_problem(instance_type: InstanceRef, cuda_version: str | CudaVersion | tuple[int, int]) -> str | None:
    """Why an image built with ``cuda_version`` cannot drive the type's GPU (None when it can).

    Types without an NVIDIA GPU return None: there is nothing for CUDA to drive.
    """
    it = lookup(instance_type)
    support = it.cuda
    if support is None:
        return None
    version = parse_cuda_version(cuda_version)
    if support.supported_by(version):
        return None
    model = it.accelerator.model if it.accelerator else "GPU"
    return (
        f"CUDA {version} cannot drive the {model} of {it.name!r} ({support.architecture}, compute capability "
        f"{support.compute_capability[0]}.{support.compute_capability[1]}, {support.sm}); "
        f"allowed: {support.describe_window()}"
    )


def check_cuda_supports(
    instance_type: InstanceRef,
    cuda_version: str | CudaVersion | tuple[int, int],
    *,
    where: str = _WHERE,
    param: str = "cuda_version",
) -> None:
    """Raise when the image's CUDA version cannot drive the instance type's GPU architecture."""
    try:
        problem = cuda_support_problem(instance_type, cuda_version)
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError(where, str(exc)) from None
    if problem is not None:
        raise ValidationError(where, f"{param}={str(cuda_version)!r}: {problem}")


def require_efa(instance_type: InstanceRef, *, where: str, param: str = "instance_type") -> InstanceType:
    """Return the entry if the type supports Elastic Fabric Adapter, else name EFA-capable alternatives."""
    it = lookup(instance_type, where=where, param=param)
    if it.efa_supported:
        return it
    same = [c.name for c in _TABLE if c.efa_supported and c.accelerator == it.accelerator]
    if not same:
        same = [c.name for c in _TABLE if c.efa_supported and c.has_nvidia_gpu][:5]
    raise ValidationError(
        where,
        f"{param}={it.name!r} does not support EFA; allowed: an EFA-capable type such as {', '.join(same)}",
    )


# --------------------------------------------------------------------------------------------------
# Derived defaults
# --------------------------------------------------------------------------------------------------


def default_processes_per_host(instance_type: InstanceRef) -> int:
    """One training process per NVIDIA GPU; 1 on CPU-only, non-NVIDIA and fractional-GPU types."""
    return max(1, lookup(instance_type).nvidia_gpu_count)


def default_dataloader_workers(
    instance_type: InstanceRef,
    processes_per_host: int | None = None,
    *,
    max_workers: int | None = None,
    where: str = _WHERE,
) -> int:
    """DataLoader workers per training process.

    ``workers = floor(vCPUs / processes_per_host) - reserve``, at least 0 (0 = load in the main process),
    where ``reserve`` keeps one physical core per process free for the training loop: 2 vCPUs on x86
    types (two hardware threads per core) and 1 on Graviton (arm64, one thread per core). Optionally
    capped at ``max_workers``. Example: ml.g5.2xlarge (8 vCPUs, 1 GPU) -> 6; ml.p4d.24xlarge
    (96 vCPUs, 8 GPUs) -> 10; ml.g4dn.xlarge (4 vCPUs) -> 2.
    """
    it = lookup(instance_type)
    procs = default_processes_per_host(it) if processes_per_host is None else processes_per_host
    if procs < 1 or procs > it.vcpus:
        raise ValidationError(where, f"processes_per_host={procs} is not allowed; allowed: 1..{it.vcpus}")
    reserve = 1 if it.cpu_arch == "arm64" else 2
    workers = max(0, it.vcpus // procs - reserve)
    return workers if max_workers is None else min(workers, max_workers)


# --------------------------------------------------------------------------------------------------
# GPU memory estimate
# --------------------------------------------------------------------------------------------------

Precision = Literal["fp32", "amp_fp16", "amp_bf16", "fp16", "bf16"]
Optimizer = Literal["adamw", "adam", "sgd_momentum", "sgd", "none"]

# bytes per element: (weights and gradients / optimizer state, activations)
_PRECISION_BYTES: dict[str, tuple[int, int]] = {
    "fp32": (4, 4),
    "amp_fp16": (4, 2),  # autocast: fp32 master weights, half-precision activations
    "amp_bf16": (4, 2),
    "fp16": (2, 2),  # pure half-precision model and optimizer states
    "bf16": (2, 2),
}
_OPTIMIZER_STATES: dict[str, int] = {"adamw": 2, "adam": 2, "sgd_momentum": 1, "sgd": 0, "none": 0}
_GIB = 1024**3
_FIXED_OVERHEAD_GIB = 1.0
_FRAGMENTATION = 0.10


@dataclass(frozen=True)
class TransformerShape:
    """Shape of a transformer for the activation estimate (no activation checkpointing)."""

    layers: int
    hidden: int
    seq_len: int
    heads: int

    def activation_bytes_per_sample(self, activation_bytes: int) -> float:
        # Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"):
        # per layer s*h*(34 + 5*a*s/h) bytes with 16-bit activations; scaled for 32-bit.
        s, h, a = self.seq_len, self.hidden, self.heads
        per_layer_16bit = s * h * (34 + 5 * a * s / h)
        return self.layers * per_layer_16bit * activation_bytes / 2


@dataclass(frozen=True)
class GpuMemoryEstimate:
    """Rough per-GPU memory of data-parallel (DDP) training: every GPU holds a full replica."""

    parameters: int
    precision: str
    optimizer: str
    batch_size_per_gpu: int
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    overhead_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.gradients_gib + self.optimizer_gib + self.activations_gib + self.overhead_gib

    def summary(self) -> str:
        return (
            f"~{self.total_gib:.1f} GiB per GPU (weights {self.weights_gib:.1f} + gradients "
            f"{self.gradients_gib:.1f} + optimizer {self.optimizer_gib:.1f} + activations "
            f"{self.activations_gib:.1f} + overhead {self.overhead_gib:.1f}) for {self.parameters:,} "
            f"parameters, {self.precision}, {self.optimizer}, batch {self.batch_size_per_gpu} per GPU"
        )


def estimate_training_memory(
    parameters: int,
    *,
    precision: Precision = "amp_bf16",
    optimizer: Optimizer = "adamw",
    batch_size_per_gpu: int = 1,
    activation_bytes_per_sample: float | None = None,
    transformer: TransformerShape | None = None,
    training: bool = True,
) -> GpuMemoryEstimate:
    """Estimate per-GPU memory for training (or inference with ``training=False``).

    Formula (bytes): weights = P x w; gradients = P x w (training); optimizer = P x states x w
    (AdamW 2 states, SGD+momentum 1, SGD 0), where w = 4 for fp32 and AMP (fp32 master weights) and
    2 for pure fp16/bf16; activations = batch x per-sample activations, taken from
    ``activation_bytes_per_sample``, else from ``transformer`` (Korthikanti et al. 2022), else a
    rough floor of one compute-precision copy of the weights per sample (P x activation bytes);
    overhead = 1 GiB (CUDA context, cuBLAS/cuDNN workspaces) + 10 % of the rest for allocator
    fragmentation. Inference keeps weights (in compute precision) and activations only.
    """
    where = _WHERE
    if isinstance(parameters, bool) or not isinstance(parameters, int) or parameters <= 0:
        raise ValidationError(where, f"parameters={parameters!r} is not allowed; allowed: a positive integer")
    if precision not in _PRECISION_BYTES:
        raise ValidationError(
            where,
            f"precision={precision!r} is not allowed; allowed: {', '.join(map(repr, _PRECISION_BYTES))}",
        )
    if optimizer not in _OPTIMIZER_STATES:
        raise ValidationError(
            where,
            f"optimizer={optimizer!r} is not allowed; allowed: {', '.join(map(repr, _OPTIMIZER_STATES))}",
        )
    if isinstance(batch_size_per_gpu, bool) or not isinstance(batch_size_per_gpu, int) or batch_size_per_gpu < 1:
        raise ValidationError(
            where, f"batch_size_per_gpu={batch_size_per_gpu!r} is not allowed; allowed: an integer >= 1"
        )
    weight_bytes, act_bytes = _PRECISION_BYTES[precision]
    if training:
        weights = parameters * weight_bytes
        gradients = parameters * weight_bytes
        states = parameters * _OPTIMIZER_STATES[optimizer] * weight_bytes
    else:
        weights, gradients, states = parameters * act_bytes, 0, 0
    if activation_bytes_per_sample is not None:
        if activation_bytes_per_sample < 0:
            raise ValidationError(
                where,
                f"activation_bytes_per_sample={activation_bytes_per_sample!r} is not allowed; allowed: >= 0",
            )
        per_sample = float(activation_bytes_per_sample)
    elif transformer is not None:
        per_sample = transformer.activation_bytes_per_sample(act_bytes)
    else:
        per_sample = float(parameters * act_bytes)
    activations = batch_size_per_gpu * per_sample
    subtotal = (weights + gradients + states + activations) / _GIB
    return GpuMemoryEstimate(
        parameters=parameters,
        precision=precision,
        optimizer=optimizer if training else "none",
        batch_size_per_gpu=batch_size_per_gpu,
        weights_gib=weights / _GIB,
        gradients_gib=gradients / _GIB,
        optimizer_gib=states / _GIB,
        activations_gib=activations / _GIB,
        overhead_gib=_FIXED_OVERHEAD_GIB + _FRAGMENTATION * subtotal,
    )


def gpu_memory_note(instance_type: InstanceRef, estimate: GpuMemoryEstimate, *, headroom: float = 0.9) -> str | None:
    """A warning when ``estimate`` exceeds ``headroom`` x the memory of one GPU of the type, else None."""
    it = lookup(instance_type)
    if not it.has_nvidia_gpu:
        return None
    usable = headroom * it.gpu_memory_gib
    if estimate.total_gib <= usable:
        return None
    bigger = sorted(
        (
            c
            for c in _TABLE
            if c.has_nvidia_gpu
            and not c.is_fractional_gpu
            and c.sagemaker_uses
            and headroom * c.gpu_memory_gib >= estimate.total_gib
            and c.cuda is not None
            and c.cuda.dropped_in is None
        ),
        key=lambda c: (c.gpu_memory_mib, c.accelerator.cost_tier if c.accelerator else 0, c.vcpus, c.name),
    )
    options = ", ".join(repr(c.sagemaker_name) for c in bigger[:3]) or "none in the catalog (shard the model: FSDP)"
    return (
        f"GPU memory is likely too small on {it.name!r}: estimated {estimate.summary()}, but one "
        f"{it.accelerator.model if it.accelerator else 'GPU'} has {it.gpu_memory_gib:.1f} GiB "
        f"({headroom:.0%} usable = {usable:.1f} GiB). Reduce the per-GPU batch, use bf16/AMP or activation "
        f"checkpointing, or pick a type with more memory per GPU such as {options}"
    )


def annotate_gpu_memory(
    scope: Construct,
    instance_type: InstanceRef,
    estimate: GpuMemoryEstimate,
    *,
    headroom: float = 0.9,
) -> str | None:
    """Add :func:`gpu_memory_note` as a CDK warning on ``scope`` (``Annotations.add_warning_v2``)."""
    note = gpu_memory_note(instance_type, estimate, headroom=headroom)
    if note is not None:
        from aws_cdk import Annotations  # lazy: the catalog itself does not need aws_cdk

        Annotations.of(scope).add_warning_v2("gpu-constructs:gpu-memory", note)
    return note


# --------------------------------------------------------------------------------------------------
# Documentation
# --------------------------------------------------------------------------------------------------


def render_markdown_table() -> str:
    """The catalog as the Markdown table in ``docs/gpu-instances.md`` (kept in sync by a test)."""
    header = (
        "| Instance type | Accelerator | GPUs | GiB/GPU | GPU GiB total | CC | Architecture | vCPUs | "
        "Memory GiB | NVMe GB | Network Gbps (baseline) | EFA | SageMaker uses | EC2 |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for it in _TABLE:
        a = it.accelerator
        if a is None:
            accel, gpus = "-", "0"
        elif it.is_fractional_gpu:
            accel, gpus = a.model, _fraction_text(it.gpu_fraction)
        else:
            accel, gpus = a.model, str(it.accelerator_count)
        cc = (
            "-" if a is None or a.compute_capability is None else f"{a.compute_capability[0]}.{a.compute_capability[1]}"
        )
        arch = a.architecture if a is not None and a.architecture else "-"
        gpu_mem = f"{it.gpu_memory_gib:.1f}" if it.gpu_memory_mib else "-"
        total = f"{it.total_gpu_memory_gib:.1f}" if it.gpu_memory_mib else "-"
        net = "not published" if it.network_gbps is None else f"{it.network_gbps:g}"
        efa = str(it.efa_interfaces) if it.efa_supported else "no"
        uses = ", ".join(u for u in SAGEMAKER_USAGES if u in it.sagemaker_uses) or "-"
        rows.append(
            f"| {it.name} | {accel} | {gpus} | {gpu_mem} | {total} | {cc} | {arch} | {it.vcpus} | "
            f"{it.memory_gib:g} | {it.local_nvme_gb or '-'} | {net} | {efa} | {uses} | "
            f"{'yes' if it.ec2 else 'no'} |"
        )
    return header + "\n" + "\n".join(rows) + "\n"
