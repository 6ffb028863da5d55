"""GPU instance catalog: facts, botocore name checks, guards, CUDA support and derived defaults."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, cast

import botocore.session
import pytest
from botocore.model import ServiceModel, StringShape

from gpu_constructs import catalog as cat
from gpu_constructs.catalog import (
    CATALOG,
    EXCLUDED_FAMILIES,
    SAGEMAKER_USAGES,
    TransformerShape,
    check_cuda_supports,
    check_gpu_count,
    cuda_support_problem,
    default_dataloader_workers,
    default_processes_per_host,
    estimate_training_memory,
    gpu_memory_note,
    instance_types,
    lookup,
    require_efa,
    require_nvidia_gpu,
    suggest_gpu_types,
)
from gpu_constructs.catalog.cuda import (
    ARCHITECTURES,
    CudaVersion,
    min_driver_branch,
    parse_cuda_version,
    render_cuda_markdown,
)
from gpu_constructs.errors import ValidationError

DOC = Path(__file__).resolve().parents[3] / "docs" / "gpu-instances.md"
GIB = 1024**3


# --------------------------------------------------------------------------------------------------
# botocore service models
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def botocore_enums() -> dict[str, set[str]]:
    session = botocore.session.get_session()
    sagemaker = session.get_service_model("sagemaker")
    ec2 = session.get_service_model("ec2")

    def enum(model: ServiceModel, shape: str) -> set[str]:
        return set(cast(StringShape, model.shape_for(shape)).enum)

    enums: dict[str, set[str]] = {
        usage: enum(sagemaker, shape) for usage, shape in cat.BOTOCORE_SAGEMAKER_SHAPES.items()
    }
    enums["ec2"] = enum(ec2, "InstanceType")
    return enums


@pytest.mark.parametrize("usage", SAGEMAKER_USAGES)
def test_recorded_sagemaker_uses_match_botocore_enums(botocore_enums: dict[str, set[str]], usage: str) -> None:
    enum = botocore_enums[usage]
    wrong = {
        it.sagemaker_name: ("recorded" if usage in it.sagemaker_uses else "not recorded")
        for it in CATALOG.values()
        if (it.sagemaker_name in enum) != (usage in it.sagemaker_uses)
    }
    assert wrong == {}, f"SageMaker {usage} validity differs from botocore: {wrong}"


def test_every_ml_name_the_catalog_uses_is_in_a_botocore_sagemaker_enum(
    botocore_enums: dict[str, set[str]],
) -> None:
    all_sagemaker = set().union(*(botocore_enums[u] for u in SAGEMAKER_USAGES))
    names = [it.sagemaker_name for it in CATALOG.values() if it.sagemaker_uses]
    assert len(names) > 60
    assert [n for n in names if n not in all_sagemaker] == []


def test_every_ec2_name_is_in_the_botocore_ec2_enum(botocore_enums: dict[str, set[str]]) -> None:
    assert all(it.ec2 for it in CATALOG.values())
    assert [it.name for it in CATALOG.values() if it.name not in botocore_enums["ec2"]] == []


def test_every_size_of_each_catalogued_family_is_catalogued(botocore_enums: dict[str, set[str]]) -> None:
    families = {it.family for it in CATALOG.values()}
    listed = set(botocore_enums["ec2"]) | {n.removeprefix("ml.") for u in SAGEMAKER_USAGES for n in botocore_enums[u]}
    # CPU families are sampled on purpose ("a few sizes"); accelerated families must be complete.
    accelerated = {f for f in families if not re.match(r"^(m5|c5|t3)$", f)}
    missing = sorted(n for n in listed if n.split(".", 1)[0] in accelerated and n not in CATALOG)
    assert missing == []


def test_every_nvidia_style_family_in_botocore_is_catalogued_or_excluded_with_a_reason(
    botocore_enums: dict[str, set[str]],
) -> None:
    families = {n.split(".", 1)[0] for n in botocore_enums["ec2"] if re.match(r"^(p\d|g\d|gr\d)", n)}
    known = {it.family for it in CATALOG.values()} | set(EXCLUDED_FAMILIES)
    assert sorted(families - known) == [], "new GPU family in botocore: catalogue it or add it to EXCLUDED_FAMILIES"
    assert all(len(reason) > 15 for reason in EXCLUDED_FAMILIES.values())


# --------------------------------------------------------------------------------------------------
# Facts (spot checks against AWS / NVIDIA documentation)
# --------------------------------------------------------------------------------------------------

# name, GPUs, model, GiB per GPU, vCPUs, memory GiB, NVMe GB, network Gbps, EFA interfaces, CC, architecture
SPOT_CHECKS = [
    ("p5.48xlarge", 8, "NVIDIA H100", 80, 192, 2048, 30400, 3200, 32, (9, 0), "Hopper"),
    ("p4d.24xlarge", 8, "NVIDIA A100", 40, 96, 1152, 8000, 400, 4, (8, 0), "Ampere"),
    ("p4de.24xlarge", 8, "NVIDIA A100", 80, 96, 1152, 8000, 400, 4, (8, 0), "Ampere"),
    ("p5en.48xlarge", 8, "NVIDIA H200", 141, 192, 2048, 30400, 3200, 16, (9, 0), "Hopper"),
    ("p3.2xlarge", 1, "NVIDIA V100", 16, 8, 61, 0, 2.5, 0, (7, 0), "Volta"),
    ("p3dn.24xlarge", 8, "NVIDIA V100", 32, 96, 768, 1800, 100, 1, (7, 0), "Volta"),
    ("p2.16xlarge", 16, "NVIDIA Tesla K80", 12, 64, 732, 0, 25, 0, (3, 7), "Kepler"),
    ("g4dn.xlarge", 1, "NVIDIA T4", 16, 4, 16, 125, 5, 0, (7, 5), "Turing"),
    ("g4dn.12xlarge", 4, "NVIDIA T4", 16, 48, 192, 900, 50, 1, (7, 5), "Turing"),
    ("g6e.48xlarge", 8, "NVIDIA L40S", 44.7, 192, 1536, 7600, 400, 4, (8, 9), "Ada Lovelace"),
    ("g7e.48xlarge", 8, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 96, 192, 2048, 15200, 1600, 4,
     (12, 0), "Blackwell"),
    ("p6-b200.48xlarge", 8, "NVIDIA B200", 179.1, 192, 2048, 30400, 3200, 8, (10, 0), "Blackwell"),
    ("p6-b300.48xlarge", 8, "NVIDIA B300", 268.6, 192, 4096, 30400, 6400, 16, (10, 3), "Blackwell Ultra"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "gpus", "model", "gib", "vcpus", "mem", "nvme", "net", "efa", "cc", "arch"), SPOT_CHECKS
)
def test_spot_checked_facts(
    name: str,
    gpus: int,
    model: str,
    gib: float,
    vcpus: int,
    mem: float,
    nvme: int,
    net: float,
    efa: int,
    cc: tuple[int, int],
    arch: str,
) -> None:
    it = lookup(name)
    assert it.accelerator is not None
    assert (it.gpu_count, it.accelerator.model, it.vcpus, it.memory_gib) == (gpus, model, vcpus, mem)
    assert it.gpu_memory_gib == pytest.approx(gib, abs=0.05)
    assert it.total_gpu_memory_gib == pytest.approx(gpus * gib, abs=0.05 * gpus)
    assert (it.local_nvme_gb, it.network_gbps, it.efa_interfaces) == (nvme, net, efa)
    assert (it.compute_capability, it.architecture) == (cc, arch)
    assert it.has_nvidia_gpu and it.efa_supported == (efa > 0) and it.has_local_nvme == (nvme > 0)


def test_g5_xlarge_is_one_a10g_with_24_gb_as_ec2_reports_it() -> None:
    it = lookup("ml.g5.xlarge")
    assert (it.gpu_count, it.accelerator and it.accelerator.key, it.vcpus, it.memory_gib) == (
        1,
        "a10g",
        4,
        16,
    )
    # EC2 reports the A10G's 24 GB (decimal) as 22,888 MiB
    assert it.gpu_memory_mib * 2**20 == pytest.approx(24e9, rel=1e-4)
    assert (it.compute_capability, it.architecture, it.local_nvme_gb, it.efa_supported) == (
        (8, 6),
        "Ampere",
        250,
        False,
    )


@pytest.mark.parametrize(
    ("name", "vendor", "kind", "count"),
    [
        ("g4ad.xlarge", "AMD", "gpu", 1),
        ("g4ad.16xlarge", "AMD", "gpu", 4),
        ("inf2.xlarge", "AWS", "neuron", 1),
        ("inf2.48xlarge", "AWS", "neuron", 12),
        ("inf1.24xlarge", "AWS", "neuron", 16),
        ("trn1.32xlarge", "AWS", "neuron", 16),
    ],
)
def test_non_nvidia_accelerators_are_recorded_precisely(name: str, vendor: str, kind: str, count: int) -> None:
    it = lookup(name)
    assert it.accelerator is not None
    assert (it.accelerator.vendor, it.accelerator.kind, it.accelerator_count) == (vendor, kind, count)
    assert not it.has_nvidia_gpu and it.nvidia_gpu_count == 0 and it.compute_capability is None
    assert it.gpu_count == (count if kind == "gpu" else 0)


def test_cpu_types_have_no_accelerator() -> None:
    cpu = [it for it in CATALOG.values() if it.accelerator is None]
    assert {it.family for it in cpu} == {"m5", "c5", "t3"}
    assert all(it.gpu_count == 0 and it.gpu_memory_mib == 0 and not it.has_nvidia_gpu for it in cpu)
    assert lookup("ml.t3.medium").vcpus == 2 and lookup("ml.m5.xlarge").memory_gib == 16


def test_g5g_is_arm64_with_t4g_and_fractional_types_are_marked() -> None:
    g5g = lookup("g5g.16xlarge")
    assert (g5g.cpu_arch, g5g.gpu_count, g5g.compute_capability, g5g.has_local_nvme) == (
        "arm64",
        2,
        (7, 5),
        False,
    )
    frac = lookup("g6f.large")
    assert frac.is_fractional_gpu and frac.has_nvidia_gpu and frac.gpu_count == 0 and frac.gpu_fraction == 0.125
    assert frac.gpu_memory_mib * 8 == lookup("g6.xlarge").gpu_memory_mib
    assert lookup("g6f.4xlarge").gpu_fraction == 0.5 and lookup("gr6f.4xlarge").is_fractional_gpu


def test_table_invariants_hold_for_every_entry() -> None:
    assert len(CATALOG) == len(cat._TABLE) > 90
    for it in CATALOG.values():
        assert it.vcpus > 0 and it.memory_mib > 0, it.name
        assert it.sagemaker_name == f"ml.{it.name}" and it.family == it.name.split(".")[0]
        assert it.sagemaker_uses <= set(SAGEMAKER_USAGES), it.name
        if it.has_nvidia_gpu:
            assert it.gpu_memory_mib > 0 and it.cuda is not None and it.architecture, it.name
            assert it.compute_capability in ARCHITECTURES, it.name
        elif it.accelerator is None or it.accelerator.kind == "neuron":
            assert it.gpu_memory_mib == 0, it.name
        if it.network_gbps is None:
            assert it.name == "p2.xlarge"
        assert math.isclose(it.vcpus_per_gpu, it.vcpus / max(1, it.gpu_count))


def test_instance_types_filters_by_usage_and_vendor() -> None:
    training_gpus = instance_types(usage="training", nvidia_only=True)
    assert training_gpus and all(it.has_nvidia_gpu and "training" in it.sagemaker_uses for it in training_gpus)
    assert lookup("p5.48xlarge") in training_gpus and lookup("g5g.xlarge") not in training_gpus
    ec2 = instance_types(usage="ec2")
    assert len(ec2) == len(CATALOG)


# --------------------------------------------------------------------------------------------------
# lookup
# --------------------------------------------------------------------------------------------------


def test_lookup_accepts_both_spellings_and_returns_the_same_entry() -> None:
    assert lookup("ml.p5.48xlarge") is lookup("p5.48xlarge") is CATALOG["p5.48xlarge"]
    assert lookup(" ml.g5.xlarge ") is CATALOG["g5.xlarge"]
    assert lookup(CATALOG["g6.xlarge"]) is CATALOG["g6.xlarge"]


def test_lookup_typo_says_did_you_mean() -> None:
    with pytest.raises(ValidationError, match=r"Train: instance_type='ml\.g5\.xlrge' .*did you mean 'ml\.g5\.xlarge'"):
        lookup("ml.g5.xlrge", where="Train")
    with pytest.raises(ValidationError, match=r"did you mean 'p4d\.24xlarge'"):
        lookup("p4d.24xlarg")


def test_lookup_ml_suggestions_only_name_types_sagemaker_accepts() -> None:
    with pytest.raises(ValidationError) as info:
        lookup("ml.g5g.xlarg")
    suggestions = str(info.value).split("did you mean", 1)[1].split("?", 1)[0]
    assert "'ml.g5." in suggestions and "'ml.g5g" not in suggestions


@pytest.mark.parametrize("bad", ["", "   ", "banana", "ml.x9.huge"])
def test_lookup_rejects_unknown_names(bad: str) -> None:
    with pytest.raises(ValidationError, match="instance_type=") as info:
        lookup(bad)
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------------------------------
# require_nvidia_gpu
# --------------------------------------------------------------------------------------------------


def _quoted(message: str) -> list[str]:
    return re.findall(r"'((?:ml\.)?[a-z0-9-]+\.[a-z0-9]+)' \(", message)


@pytest.mark.parametrize("usage", ["training", "hosting", "processing", "notebook"])
def test_cpu_type_for_a_gpu_workload_names_three_fitting_gpu_types(usage: cat.Usage) -> None:
    with pytest.raises(ValidationError, match=r"has no NVIDIA GPU \(CPU only: 4 vCPUs, 16 GiB\)") as info:
        require_nvidia_gpu("ml.m5.xlarge", where="Stack/Train", usage=usage)
    names = _quoted(str(info.value))
    assert len(names) == 3
    for name in names:
        it = lookup(name)
        assert name.startswith("ml.") and it.has_nvidia_gpu and it.valid_for(usage)


def test_suggestions_are_closest_by_size_then_cheapest() -> None:
    assert [it.name for it in suggest_gpu_types("ml.m5.xlarge")] == ["g4dn.xlarge", "g6.xlarge", "g5.xlarge"]
    big = suggest_gpu_types("ml.c5.18xlarge", "hosting")
    assert [it.name for it in big] == ["g4dn.12xlarge", "g4dn.16xlarge", "g6.12xlarge"]
    # never suggests legacy architectures, fractional GPUs or arm64 for an x86 reference when x86 fits
    for it in suggest_gpu_types("ml.t3.medium", "training", count=10):
        assert it.cuda is not None and it.cuda.dropped_in is None and not it.is_fractional_gpu
        assert it.cpu_arch == "x86_64"


@pytest.mark.parametrize(
    ("name", "usage", "fragment"),
    [
        ("ml.inf2.xlarge", "hosting", r"1x AWS Inferentia2; AWS Neuron SDK, no CUDA"),
        ("ml.trn1.2xlarge", "training", r"1x AWS Trainium"),
        ("g4ad.xlarge", "ec2", r"1x AMD Radeon Pro V520 \(8 GiB\); AMD GPU: no CUDA"),
        ("c5.large", "ec2", r"CPU only: 2 vCPUs, 4 GiB"),
    ],
)
def test_non_nvidia_accelerators_are_reported_precisely(name: str, usage: cat.Usage, fragment: str) -> None:
    with pytest.raises(ValidationError, match=f"has no NVIDIA GPU \\({fragment}") as info:
        require_nvidia_gpu(name, where="W", usage=usage)
    assert len(_quoted(str(info.value))) == 3


def test_type_not_accepted_by_that_sagemaker_api_is_an_error_with_alternatives() -> None:
    with pytest.raises(ValidationError, match=r"'ml\.p5e\.48xlarge' is not accepted by SageMaker notebook") as info:
        require_nvidia_gpu("ml.p5e.48xlarge", where="Nb", usage="notebook")
    message = str(info.value)
    assert "InstanceType enum" in message and "valid for: training, hosting, ec2" in message
    assert all(lookup(n).valid_for("notebook") for n in _quoted(message))
    with pytest.raises(ValidationError, match=r"'ml\.g4ad\.xlarge' is not accepted by SageMaker training"):
        require_nvidia_gpu("ml.g4ad.xlarge", where="T", usage="training")


def test_api_spelling_is_enforced() -> None:
    with pytest.raises(ValidationError, match=r"did you mean 'ml\.g5\.xlarge'"):
        require_nvidia_gpu("g5.xlarge", where="T", usage="training")
    with pytest.raises(ValidationError, match=r"did you mean 'g5\.xlarge'"):
        require_nvidia_gpu("ml.g5.xlarge", where="Fleet", usage="ec2")


def test_gpu_types_pass_and_return_the_entry() -> None:
    assert require_nvidia_gpu("ml.g5.xlarge", where="T") is CATALOG["g5.xlarge"]
    assert require_nvidia_gpu("ml.p5.48xlarge", where="T", usage="hosting").gpu_count == 8
    assert require_nvidia_gpu("g5g.xlarge", where="Fleet", usage="ec2").cpu_arch == "arm64"


def test_fractional_gpu_needs_explicit_opt_in() -> None:
    with pytest.raises(ValidationError, match=r"1/8 of an NVIDIA L4 .*GRID driver.*allow_fractional=True"):
        require_nvidia_gpu("g6f.large", where="Fleet", usage="ec2")
    assert require_nvidia_gpu("g6f.large", where="Fleet", usage="ec2", allow_fractional=True).is_fractional_gpu


def test_unknown_usage_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"usage='batch' is not allowed; allowed: 'training'"):
        require_nvidia_gpu("ml.g5.xlarge", where="T", usage="batch")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# multi-GPU settings
# --------------------------------------------------------------------------------------------------


def test_multi_gpu_setting_on_single_gpu_type_is_an_error() -> None:
    # ml.p3.2xlarge has ONE V100 (some articles call it multi-GPU)
    with pytest.raises(
        ValidationError, match=r"processes_per_host=2 needs 2 GPUs but 'ml\.p3\.2xlarge' has a single GPU"
    ) as info:
        check_gpu_count("ml.p3.2xlarge", 2, where="Train")
    assert "'ml.p3.8xlarge'" in str(info.value)


def test_too_many_gpus_and_bounds() -> None:
    with pytest.raises(ValidationError, match=r"processes_per_host=8 is more than the 4 GPUs .* allowed: 1\.\.4"):
        check_gpu_count("ml.g5.12xlarge", 8, where="T")
    with pytest.raises(ValidationError, match=r"gpus=0 is not allowed; allowed: 1\.\.8"):
        check_gpu_count("ml.p5.48xlarge", 0, where="T", param="gpus")
    with pytest.raises(ValidationError, match="is not an integer"):
        check_gpu_count("ml.p5.48xlarge", True, where="T")
    with pytest.raises(ValidationError, match=r"'m5\.xlarge' has no NVIDIA GPU; allowed: 1 on this type"):
        check_gpu_count("m5.xlarge", 2, where="Fleet", usage="ec2")
    check_gpu_count("ml.g5.12xlarge", 4, where="T")
    check_gpu_count("ml.m5.xlarge", 1, where="T")
    check_gpu_count("ml.g5.xlarge", None, where="T")


# --------------------------------------------------------------------------------------------------
# CUDA
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("12.4", (12, 4)), ("12.4.1", (12, 4)), ("cu128", (12, 8)), ("cu118", (11, 8)), ("cu130", (13, 0)),
     ("cuda12.8", (12, 8)), ((12, 1), (12, 1)), (CudaVersion(11, 8), (11, 8))],
)  # fmt: skip
def test_parse_cuda_version(text: str, expected: tuple[int, int]) -> None:
    version = parse_cuda_version(text)
    assert (version.major, version.minor) == expected


@pytest.mark.parametrize("bad", ["twelve", "12", "", "cu1", (12,), (12, -1)])
def test_parse_cuda_version_rejects_garbage(bad: object) -> None:
    with pytest.raises(ValueError, match="cuda_version="):
        parse_cuda_version(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "version", "ok"),
    [
        ("ml.p5.48xlarge", "11.8", True), ("ml.p5.48xlarge", "11.7", False),
        ("ml.g6.xlarge", "11.8", True), ("ml.g6.xlarge", "11.7", False),
        ("ml.g5.xlarge", "11.1", True), ("ml.g5.xlarge", "11.0", False),
        ("ml.p4d.24xlarge", "11.0", True), ("ml.p4d.24xlarge", "10.2", False),
        ("ml.g4dn.xlarge", "13.0", True), ("ml.g4dn.xlarge", "9.2", False),
        ("ml.p3.2xlarge", "12.9", True), ("ml.p3.2xlarge", "13.0", False),
        ("ml.p2.xlarge", "11.8", True), ("ml.p2.xlarge", "12.0", False),
        ("ml.p6-b200.48xlarge", "12.8", True), ("ml.p6-b200.48xlarge", "12.6", False),
        ("ml.p6-b300.48xlarge", "12.9", True), ("ml.p6-b300.48xlarge", "12.8", False),
        ("ml.g7e.2xlarge", "cu128", True), ("ml.g7e.2xlarge", "12.4", False),
        ("ml.m5.xlarge", "10.0", True),
    ],
)  # fmt: skip
def test_cuda_support_matrix(name: str, version: str, ok: bool) -> None:
    assert (cuda_support_problem(name, version) is None) is ok
    if ok:
        check_cuda_supports(name, version, where="Image")
    else:
        with pytest.raises(ValidationError, match=rf"Image: cuda_version='{version}': CUDA .* cannot drive"):
            check_cuda_supports(name, version, where="Image")


def test_cuda_error_names_architecture_and_allowed_window() -> None:
    with pytest.raises(ValidationError) as info:
        check_cuda_supports("ml.p3.2xlarge", "13.0", where="Img")
    assert "Volta, compute capability 7.0, sm_70" in str(info.value)
    assert "allowed: CUDA 9.0 to 12.x (dropped in CUDA 13.0)" in str(info.value)
    with pytest.raises(ValidationError, match=r"allowed: CUDA 11\.8 or newer"):
        check_cuda_supports("ml.p5.48xlarge", (11, 7), where="Img")
    with pytest.raises(ValidationError, match="cuda_version='latest' is not a CUDA version"):
        check_cuda_supports("ml.p5.48xlarge", "latest", where="Img")


def test_min_driver_branch_per_cuda_major() -> None:
    assert [min_driver_branch(v) for v in ("11.8", "12.4", "cu130")] == [450, 525, 580]
    with pytest.raises(ValueError, match=r"'10\.2'"):
        min_driver_branch("10.2")
    volta = ARCHITECTURES[(7, 0)]
    assert (volta.last_driver_branch, volta.last_toolkit_major, ARCHITECTURES[(3, 7)].last_driver_branch) == (
        580,
        12,
        470,
    )


def test_every_nvidia_accelerator_has_a_cuda_window() -> None:
    for acc in cat.ACCELERATORS.values():
        if acc.is_nvidia_gpu:
            assert acc.cuda is not None and acc.architecture
        else:
            assert acc.compute_capability is None and acc.cuda is None


# --------------------------------------------------------------------------------------------------
# derived defaults
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "procs", "workers"),
    [
        ("ml.g4dn.xlarge", 1, 2),
        ("ml.g5.2xlarge", 1, 6),
        ("ml.g5.12xlarge", 4, 10),
        ("ml.p4d.24xlarge", 8, 10),
        ("ml.p5.48xlarge", 8, 22),
        ("g5g.xlarge", 1, 3),  # arm64: one vCPU is one core
        ("ml.m5.xlarge", 1, 2),
        ("ml.t3.medium", 1, 0),
        ("ml.inf2.24xlarge", 1, 94),
        ("g6f.large", 1, 0),
    ],
)
def test_processes_and_workers_defaults(name: str, procs: int, workers: int) -> None:
    assert default_processes_per_host(name) == procs
    assert default_dataloader_workers(name) == workers


def test_workers_with_explicit_processes_cap_and_bounds() -> None:
    assert default_dataloader_workers("ml.g5.12xlarge", 2) == 22
    assert default_dataloader_workers("ml.p5.48xlarge", max_workers=8) == 8
    with pytest.raises(ValidationError, match=r"processes_per_host=0 is not allowed; allowed: 1\.\.4"):
        default_dataloader_workers("ml.g5.xlarge", 0)


# --------------------------------------------------------------------------------------------------
# GPU memory estimate
# --------------------------------------------------------------------------------------------------


def test_memory_formula_fp32_adamw() -> None:
    p = 1_000_000_000
    est = estimate_training_memory(p, precision="fp32", optimizer="adamw", batch_size_per_gpu=2)
    assert est.weights_gib == pytest.approx(4 * p / GIB)
    assert est.gradients_gib == pytest.approx(4 * p / GIB)
    assert est.optimizer_gib == pytest.approx(8 * p / GIB)
    assert est.activations_gib == pytest.approx(2 * 4 * p / GIB)  # floor: one fp32 copy per sample
    subtotal = 24 * p / GIB
    assert est.overhead_gib == pytest.approx(1.0 + 0.1 * subtotal)
    assert est.total_gib == pytest.approx(subtotal * 1.1 + 1.0)


def test_memory_formula_precisions_optimizers_and_inference() -> None:
    p = 100_000_000
    amp = estimate_training_memory(p, precision="amp_bf16", optimizer="sgd_momentum", activation_bytes_per_sample=0)
    assert (amp.weights_gib, amp.optimizer_gib, amp.activations_gib) == pytest.approx((4 * p / GIB, 4 * p / GIB, 0))
    pure = estimate_training_memory(p, precision="bf16", optimizer="sgd")
    assert (pure.weights_gib, pure.gradients_gib, pure.optimizer_gib) == pytest.approx((2 * p / GIB, 2 * p / GIB, 0))
    infer = estimate_training_memory(p, precision="fp16", training=False, batch_size_per_gpu=4)
    assert (infer.gradients_gib, infer.optimizer_gib, infer.optimizer) == (0, 0, "none")
    assert infer.weights_gib == pytest.approx(2 * p / GIB) and infer.activations_gib == pytest.approx(8 * p / GIB)


def test_transformer_activation_formula() -> None:
    shape = TransformerShape(layers=12, hidden=768, seq_len=1024, heads=12)
    per_layer = 1024 * 768 * (34 + 5 * 12 * 1024 / 768)
    assert shape.activation_bytes_per_sample(2) == pytest.approx(12 * per_layer)
    assert shape.activation_bytes_per_sample(4) == pytest.approx(24 * per_layer)
    est = estimate_training_memory(124_000_000, transformer=shape, batch_size_per_gpu=8)
    assert est.activations_gib == pytest.approx(8 * 12 * per_layer / GIB)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"parameters": 0}, "parameters=0"),
        ({"parameters": 10, "precision": "int8"}, "precision='int8'"),
        ({"parameters": 10, "optimizer": "lion"}, "optimizer='lion'"),
        ({"parameters": 10, "batch_size_per_gpu": 0}, "batch_size_per_gpu=0"),
        ({"parameters": 10, "activation_bytes_per_sample": -1}, "activation_bytes_per_sample=-1"),
    ],
)
def test_memory_estimate_rejects_bad_input(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(fragment)):
        estimate_training_memory(**kwargs)  # type: ignore[arg-type]


def test_gpu_memory_note_when_too_small() -> None:
    seven_b = estimate_training_memory(7_000_000_000)
    note = gpu_memory_note("ml.g5.xlarge", seven_b)
    assert note is not None and "GPU memory is likely too small on 'g5.xlarge'" in note
    assert "one NVIDIA A10G has 22.4 GiB" in note
    for name in re.findall(r"'(ml\.[a-z0-9.-]+)'", note):
        assert 0.9 * lookup(name).gpu_memory_gib >= seven_b.total_gib
    small = estimate_training_memory(25_000_000, batch_size_per_gpu=32)
    assert gpu_memory_note("ml.p5.48xlarge", small) is None
    assert gpu_memory_note("ml.m5.xlarge", seven_b) is None
    # headroom decides the threshold
    est = estimate_training_memory(1_000_000_000, activation_bytes_per_sample=0)  # ~18.6 GiB
    assert gpu_memory_note("ml.g5.xlarge", est, headroom=0.9) is None
    assert gpu_memory_note("ml.g5.xlarge", est, headroom=0.5) is not None


def test_annotate_gpu_memory_adds_a_cdk_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    import aws_cdk

    # the real CDK API has this shape (checked without starting the jsii runtime, which costs seconds)
    assert list(inspect.signature(aws_cdk.Annotations.add_warning_v2).parameters)[1:] == ["id", "message"]
    calls: list[tuple[object, str, str]] = []

    class Recorder:
        def __init__(self, scope: object) -> None:
            self.scope = scope

        @classmethod
        def of(cls, scope: object) -> Recorder:
            return cls(scope)

        def add_warning_v2(self, id: str, message: str) -> None:
            calls.append((self.scope, id, message))

    monkeypatch.setattr(aws_cdk, "Annotations", Recorder)
    scope = cast(Any, object())  # stands for a construct; only passed through to Annotations.of
    note = cat.annotate_gpu_memory(scope, "ml.g4dn.xlarge", estimate_training_memory(3_000_000_000))
    assert note is not None and "'g4dn.xlarge'" in note
    assert calls == [(scope, "gpu-constructs:gpu-memory", note)]
    assert cat.annotate_gpu_memory(scope, "ml.p5.48xlarge", estimate_training_memory(1_000_000)) is None
    assert len(calls) == 1


# --------------------------------------------------------------------------------------------------
# EFA and NVMe
# --------------------------------------------------------------------------------------------------


def test_efa_and_nvme() -> None:
    assert require_efa("p4d.24xlarge", where="Fleet").efa_interfaces == 4
    with pytest.raises(ValidationError, match=r"'g5\.xlarge' does not support EFA; allowed: .*g5\.8xlarge"):
        require_efa("g5.xlarge", where="Fleet")
    assert lookup("g4dn.xlarge").has_local_nvme and lookup("ml.g5.xlarge").local_nvme_gb == 250
    assert not lookup("ml.p3.2xlarge").has_local_nvme and not lookup("g5g.xlarge").has_local_nvme


# --------------------------------------------------------------------------------------------------
# docs stay in sync with the data
# --------------------------------------------------------------------------------------------------


def _between(text: str, marker: str) -> str:
    match = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", text, re.S)
    assert match, f"marker {marker} missing in {DOC}"
    return match.group(1)


def test_docs_tables_match_the_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert _between(text, "catalog-table") == cat.render_markdown_table()
    assert _between(text, "cuda-table") == render_cuda_markdown()
    for family in EXCLUDED_FAMILIES:
        assert f"`{family}`" in text
