"""The catalog's data table: every accelerator and instance type the platform knows (sources: ``catalog``).

Only data lives here; the guards that read it are in :mod:`gpu_constructs.catalog`.
"""

from __future__ import annotations

from typing import Any

from gpu_constructs.catalog.types import SAGEMAKER_USAGES, Accelerator, InstanceType, SageMakerUsage


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
