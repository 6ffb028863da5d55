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
  :func:`estimate_training_memory` / :func:`gpu_memory_note` derive defaults and warnings.

Sources. Instance facts come from EC2 ``DescribeInstanceTypes`` data as published in the instance-type
reference of AWS's Karpenter provider (aws/karpenter-provider-aws, ``website/content/en/v1.12/reference/
instance-types.md``), cross-checked against the Amazon EC2 User Guide; P2 facts come from the EC2 User
Guide's accelerated-computing page. GPU memory is the value EC2 reports (MiB per GPU; e.g. the A10G's
"24 GB" is reported as 22,888 MiB). Network bandwidth is the *baseline* EC2 reports; smaller sizes burst
higher ("up to 10/25 Gbps"). SageMaker and EC2 validity is recorded here and verified against
botocore's service models by ``tests/unit/test_catalog.py``. See ``docs/gpu-instances.md``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from gpu_constructs.cuda import (
    ArchitectureSupport,
    CudaVersion,
    architecture_support,
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
    "SAGEMAKER_USAGES",
    "Accelerator",
    "GpuMemoryEstimate",
    "InstanceType",
    "TransformerShape",
    "Usage",
    "annotate_gpu_memory",
    "check_cuda_supports",
    "check_gpu_count",
    "cuda_support_problem",
    "default_dataloader_workers",
    "default_processes_per_host",
    "estimate_training_memory",
    "gpu_memory_note",
    "instance_types",
    "lookup",
    "processes_per_host_limit",
    "render_markdown_table",
    "require_efa",
    "require_nvidia_gpu",
    "suggest_gpu_types",
]

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

_WHERE = "InstanceCatalog"


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


def _acc(*args: Any, **kwargs: Any) -> tuple[str, Accelerator]:
    a = Accelerator(*args, **kwargs)
    return a.key, a


ACCELERATORS: dict[str, Accelerator] = dict(
    [
        _acc("k80", "NVIDIA", "NVIDIA Tesla K80", "gpu", (3, 7), 1),
        _acc("v100", "NVIDIA", "NVIDIA V100", "gpu", (7, 0), 3),
        _acc("t4", "NVIDIA", "NVIDIA T4", "gpu", (7, 5), 1),
        _acc(
            "t4g",
            "NVIDIA",
            "NVIDIA T4G",
            "gpu",
            (7, 5),
            1,
            "T4G (Arm-host T4) is not on NVIDIA's CUDA GPUs page; it is a Turing T4-class GPU, CC 7.5",
        ),
        _acc(
            "a10g",
            "NVIDIA",
            "NVIDIA A10G",
            "gpu",
            (8, 6),
            2,
            "A10G is AWS's variant of the A10 (CC 8.6 on NVIDIA's CUDA GPUs page)",
        ),
        _acc("a100", "NVIDIA", "NVIDIA A100", "gpu", (8, 0), 5),
        _acc("l4", "NVIDIA", "NVIDIA L4", "gpu", (8, 9), 1),
        _acc("l40s", "NVIDIA", "NVIDIA L40S", "gpu", (8, 9), 3),
        _acc("h100", "NVIDIA", "NVIDIA H100", "gpu", (9, 0), 6),
        _acc("h200", "NVIDIA", "NVIDIA H200", "gpu", (9, 0), 7),
        _acc("b200", "NVIDIA", "NVIDIA B200", "gpu", (10, 0), 8),
        _acc("b300", "NVIDIA", "NVIDIA B300", "gpu", (10, 3), 9),
        _acc(
            "rtx-pro-server-6000",
            "NVIDIA",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "gpu",
            (12, 0),
            4,
        ),
        _acc("radeon-pro-v520", "AMD", "AMD Radeon Pro V520", "gpu", None, 0, "AMD GPU: no CUDA (ROCm only)"),
        _acc("inferentia", "AWS", "AWS Inferentia", "neuron", None, 0, "AWS Neuron SDK, no CUDA"),
        _acc("inferentia2", "AWS", "AWS Inferentia2", "neuron", None, 0, "AWS Neuron SDK, no CUDA"),
        _acc("trainium", "AWS", "AWS Trainium", "neuron", None, 0, "AWS Neuron SDK, no CUDA"),
    ]
)


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


_ALL = frozenset(SAGEMAKER_USAGES)
_T_H_N = frozenset({"training", "hosting", "notebook"})
_T_H = frozenset({"training", "hosting"})
_T_N = frozenset({"training", "notebook"})
_T_N_P = frozenset({"training", "notebook", "processing"})
_T_H_P = frozenset({"training", "hosting", "processing"})
_H_N = frozenset({"hosting", "notebook"})
_H = frozenset({"hosting"})
_NONE: frozenset[SageMakerUsage] = frozenset()


def _it(
    name: str,
    vcpus: int,
    memory_mib: int,
    accelerator: str | None,
    count: int,
    gpu_memory_mib: int,
    nvme_gb: int,
    network_mbps: int | None,
    efa: int,
    uses: frozenset[Any],
    **kwargs: Any,
) -> InstanceType:
    return InstanceType(
        name=name,
        vcpus=vcpus,
        memory_mib=memory_mib,
        accelerator=None if accelerator is None else ACCELERATORS[accelerator],
        accelerator_count=count,
        gpu_memory_mib=gpu_memory_mib,
        local_nvme_gb=nvme_gb,
        network_gbps=None if network_mbps is None else network_mbps / 1000,
        efa_interfaces=efa,
        sagemaker_uses=uses,
        **kwargs,
    )


# name, vCPUs, memory MiB, accelerator, count, GPU MiB (per GPU), NVMe GB, network Mbps (baseline), EFA, uses
_TABLE: tuple[InstanceType, ...] = (
    # --- P2: NVIDIA K80 (Kepler), EC2 User Guide ---------------------------------------------------
    _it("p2.xlarge", 4, 62464, "k80", 1, 12288, 0, None, 0, _ALL, source="ec2-user-guide"),
    _it("p2.8xlarge", 32, 499712, "k80", 8, 12288, 0, 10000, 0, _ALL, source="ec2-user-guide"),
    _it("p2.16xlarge", 64, 749568, "k80", 16, 12288, 0, 25000, 0, _ALL, source="ec2-user-guide"),
    # --- P3 / P3dn: NVIDIA V100 (Volta) -------------------------------------------------------------
    _it("p3.2xlarge", 8, 62464, "v100", 1, 16384, 0, 2500, 0, _ALL),
    _it("p3.8xlarge", 32, 249856, "v100", 4, 16384, 0, 10000, 0, _ALL),
    _it("p3.16xlarge", 64, 499712, "v100", 8, 16384, 0, 25000, 0, _ALL),
    _it("p3dn.24xlarge", 96, 786432, "v100", 8, 32768, 1800, 100000, 1, _T_N),
    # --- G4dn: NVIDIA T4 (Turing) -------------------------------------------------------------------
    _it("g4dn.xlarge", 4, 16384, "t4", 1, 16384, 125, 5000, 0, _ALL),
    _it("g4dn.2xlarge", 8, 32768, "t4", 1, 16384, 225, 10000, 0, _ALL),
    _it("g4dn.4xlarge", 16, 65536, "t4", 1, 16384, 225, 20000, 0, _ALL),
    _it("g4dn.8xlarge", 32, 131072, "t4", 1, 16384, 900, 50000, 1, _ALL),
    _it("g4dn.12xlarge", 48, 196608, "t4", 4, 16384, 900, 50000, 1, _ALL),
    _it("g4dn.16xlarge", 64, 262144, "t4", 1, 16384, 900, 50000, 1, _ALL),
    _it("g4dn.metal", 96, 393216, "t4", 8, 16384, 1800, 100000, 1, _NONE),
    # --- G4ad: AMD Radeon Pro V520 (no CUDA) --------------------------------------------------------
    _it("g4ad.xlarge", 4, 16384, "radeon-pro-v520", 1, 8192, 150, 2000, 0, _NONE),
    _it("g4ad.2xlarge", 8, 32768, "radeon-pro-v520", 1, 8192, 300, 4167, 0, _NONE),
    _it("g4ad.4xlarge", 16, 65536, "radeon-pro-v520", 1, 8192, 600, 8333, 0, _NONE),
    _it("g4ad.8xlarge", 32, 131072, "radeon-pro-v520", 2, 8192, 1200, 15000, 0, _NONE),
    _it("g4ad.16xlarge", 64, 262144, "radeon-pro-v520", 4, 8192, 2400, 25000, 0, _NONE),
    # --- G5: NVIDIA A10G (Ampere) -------------------------------------------------------------------
    _it("g5.xlarge", 4, 16384, "a10g", 1, 22888, 250, 2500, 0, _ALL),
    _it("g5.2xlarge", 8, 32768, "a10g", 1, 22888, 450, 5000, 0, _ALL),
    _it("g5.4xlarge", 16, 65536, "a10g", 1, 22888, 600, 10000, 0, _ALL),
    _it("g5.8xlarge", 32, 131072, "a10g", 1, 22888, 900, 25000, 1, _ALL),
    _it("g5.12xlarge", 48, 196608, "a10g", 4, 22888, 3800, 40000, 1, _ALL),
    _it("g5.16xlarge", 64, 262144, "a10g", 1, 22888, 1900, 25000, 1, _ALL),
    _it("g5.24xlarge", 96, 393216, "a10g", 4, 22888, 3800, 50000, 1, _ALL),
    _it("g5.48xlarge", 192, 786432, "a10g", 8, 22888, 7600, 100000, 1, _ALL),
    # --- G5g: Graviton2 (arm64) + NVIDIA T4G ----------------------------------------------------------
    _it("g5g.xlarge", 4, 8192, "t4g", 1, 16384, 0, 1250, 0, _NONE, cpu_arch="arm64"),
    _it("g5g.2xlarge", 8, 16384, "t4g", 1, 16384, 0, 2500, 0, _NONE, cpu_arch="arm64"),
    _it("g5g.4xlarge", 16, 32768, "t4g", 1, 16384, 0, 5000, 0, _NONE, cpu_arch="arm64"),
    _it("g5g.8xlarge", 32, 65536, "t4g", 1, 16384, 0, 12000, 0, _NONE, cpu_arch="arm64"),
    _it("g5g.16xlarge", 64, 131072, "t4g", 2, 16384, 0, 25000, 0, _NONE, cpu_arch="arm64"),
    _it("g5g.metal", 64, 131072, "t4g", 2, 16384, 0, 25000, 0, _NONE, cpu_arch="arm64"),
    # --- G6: NVIDIA L4 (Ada Lovelace) ---------------------------------------------------------------
    _it("g6.xlarge", 4, 16384, "l4", 1, 22888, 250, 2500, 0, _ALL),
    _it("g6.2xlarge", 8, 32768, "l4", 1, 22888, 450, 5000, 0, _ALL),
    _it("g6.4xlarge", 16, 65536, "l4", 1, 22888, 600, 10000, 0, _ALL),
    _it("g6.8xlarge", 32, 131072, "l4", 1, 22888, 900, 25000, 1, _ALL),
    _it("g6.12xlarge", 48, 196608, "l4", 4, 22888, 3760, 40000, 1, _ALL),
    _it("g6.16xlarge", 64, 262144, "l4", 1, 22888, 1880, 25000, 1, _ALL),
    _it("g6.24xlarge", 96, 393216, "l4", 4, 22888, 3760, 50000, 1, _ALL),
    _it("g6.48xlarge", 192, 786432, "l4", 8, 22888, 7520, 100000, 1, _ALL),
    # --- Gr6: NVIDIA L4, more memory per vCPU (EC2 only) -------------------------------------------
    _it("gr6.4xlarge", 16, 131072, "l4", 1, 22888, 600, 10000, 0, _NONE),
    _it("gr6.8xlarge", 32, 262144, "l4", 1, 22888, 900, 25000, 1, _NONE),
    # --- G6f / Gr6f: fractional NVIDIA L4 (vGPU; needs the NVIDIA GRID driver; EC2 only) ------------
    _it("g6f.large", 2, 8192, "l4", 0, 2861, 100, 1500, 0, _NONE, gpu_fraction=0.125),
    _it("g6f.xlarge", 4, 16384, "l4", 0, 2861, 100, 2500, 0, _NONE, gpu_fraction=0.125),
    _it("g6f.2xlarge", 8, 32768, "l4", 0, 5722, 200, 5000, 0, _NONE, gpu_fraction=0.25),
    _it("g6f.4xlarge", 16, 65536, "l4", 0, 11444, 450, 10000, 0, _NONE, gpu_fraction=0.5),
    _it("gr6f.4xlarge", 16, 131072, "l4", 0, 11444, 450, 10000, 0, _NONE, gpu_fraction=0.5),
    # --- G6e: NVIDIA L40S (Ada Lovelace) ------------------------------------------------------------
    _it("g6e.xlarge", 4, 32768, "l40s", 1, 45776, 250, 2500, 0, _ALL),
    _it("g6e.2xlarge", 8, 65536, "l40s", 1, 45776, 450, 5000, 0, _ALL),
    _it("g6e.4xlarge", 16, 131072, "l40s", 1, 45776, 600, 20000, 0, _ALL),
    _it("g6e.8xlarge", 32, 262144, "l40s", 1, 45776, 900, 25000, 1, _ALL),
    _it("g6e.12xlarge", 48, 393216, "l40s", 4, 45776, 3800, 100000, 1, _ALL),
    _it("g6e.16xlarge", 64, 524288, "l40s", 1, 45776, 1900, 35000, 1, _ALL),
    _it("g6e.24xlarge", 96, 786432, "l40s", 4, 45776, 3800, 200000, 2, _ALL),
    _it("g6e.48xlarge", 192, 1572864, "l40s", 8, 45776, 7600, 400000, 4, _ALL),
    # --- G7e: NVIDIA RTX PRO 6000 Blackwell Server Edition ------------------------------------------
    _it("g7e.2xlarge", 8, 65536, "rtx-pro-server-6000", 1, 98304, 1900, 50000, 0, _ALL),
    _it("g7e.4xlarge", 16, 131072, "rtx-pro-server-6000", 1, 98304, 1900, 50000, 0, _ALL),
    _it("g7e.8xlarge", 32, 262144, "rtx-pro-server-6000", 1, 98304, 1900, 100000, 1, _ALL),
    _it("g7e.12xlarge", 48, 524288, "rtx-pro-server-6000", 2, 98304, 3800, 400000, 1, _ALL),
    _it("g7e.24xlarge", 96, 1048576, "rtx-pro-server-6000", 4, 98304, 7600, 800000, 2, _ALL),
    _it("g7e.48xlarge", 192, 2097152, "rtx-pro-server-6000", 8, 98304, 15200, 1600000, 4, _ALL),
    # --- P4d / P4de: NVIDIA A100 40 GB / 80 GB (Ampere) ---------------------------------------------
    _it("p4d.24xlarge", 96, 1179648, "a100", 8, 40960, 8000, 400000, 4, _T_H_N),
    _it("p4de.24xlarge", 96, 1179648, "a100", 8, 81920, 8000, 400000, 4, _T_H_N),
    # --- P5 / P5e / P5en: NVIDIA H100 / H200 (Hopper) -----------------------------------------------
    _it("p5.4xlarge", 16, 262144, "h100", 1, 81920, 3800, 100000, 1, _ALL),
    _it("p5.48xlarge", 192, 2097152, "h100", 8, 81920, 30400, 3200000, 32, _T_H_N),
    _it("p5e.48xlarge", 192, 2097152, "h200", 8, 144384, 30400, 3200000, 32, _T_H),
    _it("p5en.48xlarge", 192, 2097152, "h200", 8, 144384, 30400, 3200000, 16, _T_H_N),
    # --- P6: NVIDIA B200 / B300 (Blackwell) ---------------------------------------------------------
    _it("p6-b200.48xlarge", 192, 2097152, "b200", 8, 183359, 30400, 3200000, 8, _T_H_N),
    _it("p6-b300.48xlarge", 192, 4194304, "b300", 8, 275040, 30400, 6400000, 16, _T_H),
    # --- AWS Inferentia / Trainium (Neuron SDK, no CUDA) --------------------------------------------
    _it("inf1.xlarge", 4, 8192, "inferentia", 1, 0, 0, 5000, 0, _H_N),
    _it("inf1.2xlarge", 8, 16384, "inferentia", 1, 0, 0, 5000, 0, _H_N),
    _it("inf1.6xlarge", 24, 49152, "inferentia", 4, 0, 0, 25000, 0, _H_N),
    _it("inf1.24xlarge", 96, 196608, "inferentia", 16, 0, 0, 100000, 1, _H_N),
    _it("inf2.xlarge", 4, 16384, "inferentia2", 1, 0, 0, 2083, 0, _H_N),
    _it("inf2.8xlarge", 32, 131072, "inferentia2", 1, 0, 0, 16667, 0, _H_N),
    _it("inf2.24xlarge", 96, 393216, "inferentia2", 6, 0, 0, 50000, 0, _H_N),
    _it("inf2.48xlarge", 192, 786432, "inferentia2", 12, 0, 0, 100000, 0, _H_N),
    _it("trn1.2xlarge", 8, 32768, "trainium", 1, 0, 474, 3125, 0, _T_H_N),
    _it("trn1.32xlarge", 128, 524288, "trainium", 16, 0, 7600, 800000, 8, _T_H_N),
    _it("trn1n.32xlarge", 128, 524288, "trainium", 16, 0, 7600, 1600000, 16, _T_H_N),
    # --- CPU only ------------------------------------------------------------------------------------
    _it("t3.medium", 2, 4096, None, 0, 0, 0, 256, 0, _T_N_P),
    _it("t3.large", 2, 8192, None, 0, 0, 0, 512, 0, _T_N_P),
    _it("t3.xlarge", 4, 16384, None, 0, 0, 0, 1024, 0, _T_N_P),
    _it("t3.2xlarge", 8, 32768, None, 0, 0, 0, 2048, 0, _T_N_P),
    _it("m5.large", 2, 8192, None, 0, 0, 0, 750, 0, _T_H_P),
    _it("m5.xlarge", 4, 16384, None, 0, 0, 0, 1250, 0, _ALL),
    _it("m5.2xlarge", 8, 32768, None, 0, 0, 0, 2500, 0, _ALL),
    _it("m5.4xlarge", 16, 65536, None, 0, 0, 0, 5000, 0, _ALL),
    _it("m5.12xlarge", 48, 196608, None, 0, 0, 0, 12000, 0, _ALL),
    _it("m5.24xlarge", 96, 393216, None, 0, 0, 0, 25000, 0, _ALL),
    _it("c5.large", 2, 4096, None, 0, 0, 0, 750, 0, _H),
    _it("c5.xlarge", 4, 8192, None, 0, 0, 0, 1250, 0, _ALL),
    _it("c5.2xlarge", 8, 16384, None, 0, 0, 0, 2500, 0, _ALL),
    _it("c5.4xlarge", 16, 32768, None, 0, 0, 0, 5000, 0, _ALL),
    _it("c5.9xlarge", 36, 73728, None, 0, 0, 0, 12000, 0, _ALL),
    _it("c5.18xlarge", 72, 147456, None, 0, 0, 0, 25000, 0, _ALL),
)

#: The catalog, keyed by EC2 name (``p5.48xlarge``).
CATALOG: dict[str, InstanceType] = {it.name: it for it in _TABLE}

#: Families AWS lists in botocore that the catalog deliberately leaves out, with the reason.
EXCLUDED_FAMILIES: dict[str, str] = {
    "g7": "announced in botocore, but no published instance specifications were available to verify",
    "p6e-gb200": "sold only as part of P6e-GB200 UltraServers (Grace arm64 hosts); specs not verified",
    "g2": "previous generation, retired",
    "g3": "previous generation (Maxwell M60), not offered by SageMaker",
    "g3s": "previous generation (Maxwell M60), not offered by SageMaker",
    "trn2": "Trainium2 (Neuron SDK); not needed to report 'no NVIDIA GPU' beyond trn1",
    "trn2u": "Trainium2 UltraServer node (Neuron SDK)",
    "dl1": "Habana Gaudi (not NVIDIA)",
    "dl2q": "Qualcomm AI 100 (not NVIDIA)",
}


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
