"""Value types of the GPU instance catalog: uses, accelerators and instance types (see ``catalog``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from gpu_constructs.catalog.cuda import ArchitectureSupport, architecture_support

Usage = Literal["training", "hosting", "notebook", "processing", "ec2"]
SageMakerUsage = Literal["training", "hosting", "notebook", "processing"]

#: The SageMaker uses, in display order.
SAGEMAKER_USAGES: tuple[SageMakerUsage, ...] = get_args(SageMakerUsage)
#: Every use a guard understands: the SageMaker uses plus plain EC2.
ALL_USAGES: tuple[Usage, ...] = get_args(Usage)

#: botocore SageMaker shape whose enum lists the instance types valid for each use.
BOTOCORE_SAGEMAKER_SHAPES: dict[SageMakerUsage, str] = {
    "training": "TrainingInstanceType",  # CreateTrainingJob ResourceConfig.InstanceType
    "hosting": "ProductionVariantInstanceType",  # CreateEndpointConfig ProductionVariants[].InstanceType
    "notebook": "InstanceType",  # CreateNotebookInstance InstanceType
    "processing": "ProcessingInstanceType",  # CreateProcessingJob ClusterConfig.InstanceType
}


# --------------------------------------------------------------------------------------------------
# Accelerators
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accelerator:
    """An accelerator model, keyed by the name EC2 reports (``h100``, ``a10g``, ``inferentia2``)."""

    key: str
    vendor: Literal["NVIDIA", "AMD", "AWS"]
    model: str
    kind: Literal["gpu", "neuron"]
    #: CUDA compute capability (NVIDIA only).
    compute_capability: tuple[int, int] | None = None
    #: Relative price class used only to rank suggestions (1 = cheapest GPUs); not a price.
    cost_tier: int = 0
    note: str = ""

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor == "NVIDIA" and self.kind == "gpu"

    @property
    def cuda(self) -> ArchitectureSupport | None:
        """The CUDA support window of this GPU's compute capability (None for non-NVIDIA)."""
        return None if self.compute_capability is None else architecture_support(self.compute_capability)

    @property
    def architecture(self) -> str | None:
        return None if self.cuda is None else self.cuda.architecture


# --------------------------------------------------------------------------------------------------
# Instance types
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceType:
    """One instance type. ``name`` is the EC2 name; :attr:`sagemaker_name` adds the ``ml.`` prefix."""

    name: str
    vcpus: int
    memory_mib: int
    accelerator: Accelerator | None
    #: Whole accelerators (GPUs, Inferentia/Trainium chips). 0 for CPU-only and fractional-GPU types.
    accelerator_count: int
    #: Memory per GPU in MiB as EC2 reports it (per slice for fractional GPUs); 0 when no GPU.
    gpu_memory_mib: int
    #: Local NVMe instance store, GB (0: EBS only).
    local_nvme_gb: int
    #: Baseline network bandwidth in Gbps (None: no number published, e.g. p2.xlarge).
    network_gbps: float | None
    #: Maximum EFA interfaces (0: EFA not supported).
    efa_interfaces: int
    sagemaker_uses: frozenset[SageMakerUsage]
    ec2: bool = True
    cpu_arch: Literal["x86_64", "arm64"] = "x86_64"
    #: For fractional GPUs (g6f, gr6f): the share of one GPU, e.g. 0.125.
    gpu_fraction: float = 0.0
    source: str = "karpenter-v1.12"

    # -- names --------------------------------------------------------------------------------------
    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def size(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def sagemaker_name(self) -> str:
        return f"ml.{self.name}"

    def name_for(self, usage: Usage) -> str:
        """The name as the API for ``usage`` spells it (``ml.`` prefix for SageMaker uses)."""
        return self.name if usage == "ec2" else self.sagemaker_name

    def valid_for(self, usage: Usage) -> bool:
        return self.ec2 if usage == "ec2" else usage in self.sagemaker_uses

    # -- compute ------------------------------------------------------------------------------------
    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def has_nvidia_gpu(self) -> bool:
        """True when CUDA can use a GPU here (whole or fractional NVIDIA GPU)."""
        a = self.accelerator
        return a is not None and a.is_nvidia_gpu and (self.accelerator_count > 0 or self.gpu_fraction > 0)

    @property
    def is_fractional_gpu(self) -> bool:
        return self.accelerator_count == 0 and self.gpu_fraction > 0

    @property
    def gpu_count(self) -> int:
        """Whole GPUs of any vendor (NVIDIA or AMD); 0 for CPU, Neuron and fractional types."""
        a = self.accelerator
        return self.accelerator_count if a is not None and a.kind == "gpu" else 0

    @property
    def nvidia_gpu_count(self) -> int:
        a = self.accelerator
        return self.accelerator_count if a is not None and a.is_nvidia_gpu else 0

    @property
    def gpu_memory_gib(self) -> float:
        """Memory of one GPU (or of the fractional slice), GiB."""
        return self.gpu_memory_mib / 1024

    @property
    def total_gpu_memory_gib(self) -> float:
        count = self.gpu_count if self.gpu_count else (1 if self.is_fractional_gpu else 0)
        return count * self.gpu_memory_gib

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        return self.accelerator.compute_capability if self.has_nvidia_gpu and self.accelerator else None

    @property
    def cuda(self) -> ArchitectureSupport | None:
        return self.accelerator.cuda if self.has_nvidia_gpu and self.accelerator else None

    @property
    def architecture(self) -> str | None:
        return None if self.cuda is None else self.cuda.architecture

    @property
    def vcpus_per_gpu(self) -> float:
        return self.vcpus / max(1, self.gpu_count)

    # -- storage and network ------------------------------------------------------------------------
    @property
    def has_local_nvme(self) -> bool:
        return self.local_nvme_gb > 0

    @property
    def efa_supported(self) -> bool:
        return self.efa_interfaces > 0

    # -- text ---------------------------------------------------------------------------------------
    def accelerator_summary(self) -> str:
        """``8x NVIDIA H100 (80 GiB)``, ``1/8 of an NVIDIA L4 (2.8 GiB)`` or ``CPU only``."""
        a = self.accelerator
        if a is None:
            return "CPU only"
        if self.is_fractional_gpu:
            share = _fraction_text(self.gpu_fraction)
            return f"{share} of an {a.model} ({_gib(self.gpu_memory_gib)} GiB, vGPU)"
        mem = f" ({_gib(self.gpu_memory_gib)} GiB)" if self.gpu_memory_mib else ""
        return f"{self.accelerator_count}x {a.model}{mem}"

    def describe(self, usage: Usage = "ec2") -> str:
        return (
            f"{self.name_for(usage)!r} ({self.accelerator_summary()}, {self.vcpus} vCPUs, {_gib(self.memory_gib)} GiB)"
        )


def _gib(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _fraction_text(fraction: float) -> str:
    denominator = round(1 / fraction)
    return f"1/{denominator}"
