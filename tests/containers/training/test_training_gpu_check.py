"""The fail-fast GPU check and ``gpuctl doctor``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_train import gpu_check
from gpu_train.errors import GpuCheckError
from gpu_train.gpu_check import Device, Expectation, GpuFacts
from gpuctl.cli import main as gpuctl


@pytest.mark.parametrize(
    ("instance_type", "has_gpu"),
    [
        ("ml.p4d.24xlarge", True),
        ("ml.p5.48xlarge", True),
        ("ml.g5.xlarge", True),
        ("ml.g6e.12xlarge", True),
        ("p3.2xlarge", True),
        ("gr6.4xlarge", True),
        ("ml.m5.xlarge", False),
        ("ml.c7g.4xlarge", False),
        ("ml.trn1.32xlarge", False),
        ("g4ad.xlarge", False),  # AMD GPUs
        (None, False),
    ],
)
def test_instance_families_with_nvidia_gpus(instance_type: str | None, has_gpu: bool) -> None:
    assert gpu_check.instance_has_nvidia_gpu(instance_type) is has_gpu


def test_expectation_sources_in_order() -> None:
    facts = GpuFacts()
    assert gpu_check.expected_gpus(environ={"SM_NUM_GPUS": "8"}, facts=facts) == Expectation(8, "SM_NUM_GPUS=8")
    assert gpu_check.expected_gpus(environ={}, instance_type="ml.g5.2xlarge").count == -1
    assert gpu_check.expected_gpus(environ={}, facts=GpuFacts(dev_nodes=True)).reason == "/dev/nvidia0 exists"
    assert gpu_check.expected_gpus(environ={}, facts=facts).count == 0
    assert gpu_check.expected_gpus(setting="true", environ={}, facts=facts).count == -1
    assert gpu_check.expected_gpus(setting="false", environ={"SM_NUM_GPUS": "8"}).count == 0
    assert gpu_check.expected_gpus(setting="2", environ={}).count == 2


def _facts(**changes: Any) -> GpuFacts:
    base: dict[str, Any] = {
        "torch_version": "2.8.0",
        "torch_cuda": "12.9",
        "arch_list": ["sm_70", "sm_80", "sm_86", "sm_90", "compute_90"],
        "cuda_available": True,
        "devices": [Device(0, "NVIDIA A10G", "8.6", 22.0)],
        "driver_version": "570.1",
        "driver_cuda": "12.8",
        "torch_checked": True,
    }
    base.update(changes)
    return GpuFacts(**base)


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        (_facts(torch_cuda=None, devices=[], cuda_available=False), r"torch 2.8.0 is a CPU-only build"),
        (_facts(devices=[], cuda_available=False, driver_version=None), r"torch sees none .*NVIDIA container runtime"),
        (_facts(devices=[], cuda_available=False), r"driver 570.1 \(CUDA 12.8\) may be too old for torch's CUDA 12.9"),
        (_facts(error="RuntimeError: CUDA error: no kernel image"), r"CUDA fails: RuntimeError: CUDA error"),
        (_facts(arch_list=["sm_90", "sm_100"]), r"compute capability 8.6 but torch 2.8.0 has kernels only for sm_90"),
    ],
)
def test_unusable_gpus_fail_with_the_reason(facts: GpuFacts, message: str) -> None:
    with pytest.raises(GpuCheckError, match=message):
        gpu_check.check(Expectation(1, "SM_NUM_GPUS=1"), facts)


def test_usable_gpus_pass_and_counts_are_checked() -> None:
    gpu_check.check(Expectation(1, "x"), _facts())
    gpu_check.check(Expectation(-1, "x"), _facts(devices=[Device(0, "H100", "9.0", 80.0)], arch_list=["compute_90"]))
    gpu_check.check(Expectation(0, "none"), _facts(torch_cuda=None, devices=[]))
    with pytest.raises(GpuCheckError, match=r"8 GPUs expected \(SM_NUM_GPUS=8\) but torch sees 1"):
        gpu_check.check(Expectation(8, "SM_NUM_GPUS=8"), _facts())


def test_report_lists_the_facts() -> None:
    text = gpu_check.report(_facts(), Expectation(1, "SM_NUM_GPUS=1"))
    assert "torch 2.8.0 built with CUDA 12.9" in text and "NVIDIA driver 570.1, supports CUDA 12.8" in text
    assert "cuda:0 NVIDIA A10G, compute capability 8.6, 22.0 GiB" in text and "expected: 1 GPUs (SM_NUM_GPUS=1)" in text


def test_this_host_without_gpus_collects_facts_without_torch() -> None:
    facts = gpu_check.collect(import_torch=False)
    assert not facts.torch_checked and facts.device_count == 0 and facts.torch_version
    checked = gpu_check.collect(import_torch=True)
    assert checked.torch_checked and checked.torch_version and checked.torch_cuda is None  # the CPU build here


def test_doctor_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpuctl(["doctor", "--no-probe"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU check:") and out.rstrip().endswith("OK")
    assert gpuctl(["doctor", "--expect-gpus", "1", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["expected"]["count"] == 1
    assert "CPU-only build" in report["problem"] and report["facts"]["device_count"] == 0
    assert gpuctl(["doctor", "--instance-type", "ml.g5.xlarge"]) == 1
    assert "instance type ml.g5.xlarge has NVIDIA GPUs" in capsys.readouterr().out
