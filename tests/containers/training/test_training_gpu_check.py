"""The fail-fast GPU check, ``gpuctl doctor`` and the one-process-per-GPU rule of the built-in trainer.

Every test here passes on a machine with or without a GPU: the facts are made up, or compared with what torch
itself says on the machine that runs the test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_train import gpu_check
from gpu_train.errors import ConfigError, GpuCheckError
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


@pytest.mark.parametrize("listed", ["", "-1", " -1,0"])
def test_a_job_that_hides_the_gpus_from_cuda_expects_none_unless_told_otherwise(listed: str) -> None:
    """``CUDA_VISIBLE_DEVICES`` that hides every GPU asks for the CPU; ``SM_NUM_GPUS``, a GPU instance type and
    ``expect_gpu=true`` still expect GPUs (and then fail, naming the variable)."""
    hidden = {"CUDA_VISIBLE_DEVICES": listed}
    gpu_host = GpuFacts(dev_nodes=True, smi_gpus=["NVIDIA H200, 580.1, 143771 MiB"])
    expectation = gpu_check.expected_gpus(environ=hidden, facts=gpu_host)
    assert expectation == Expectation(0, f"CUDA_VISIBLE_DEVICES={listed!r} hides this host's GPUs")
    assert gpu_check.expected_gpus(environ={}, facts=GpuFacts()).reason == "no sign of an NVIDIA GPU on this host"
    assert gpu_check.expected_gpus(environ=hidden, facts=GpuFacts()).reason == "no sign of an NVIDIA GPU on this host"
    assert gpu_check.expected_gpus(environ={**hidden, "SM_NUM_GPUS": "1"}, facts=gpu_host).count == 1
    assert gpu_check.expected_gpus(environ=hidden, instance_type="ml.p5.48xlarge", facts=gpu_host).count == -1
    assert gpu_check.expected_gpus(setting="true", environ=hidden, facts=gpu_host).count == -1
    assert gpu_check.expected_gpus(environ={"CUDA_VISIBLE_DEVICES": "0"}, facts=gpu_host).count == -1
    facts = _facts(devices=[], cuda_available=False, cuda_visible_devices=listed)
    with pytest.raises(GpuCheckError) as raised:
        gpu_check.check(Expectation(1, "SM_NUM_GPUS=1"), facts)
    assert str(raised.value).startswith(
        "GPUs expected (SM_NUM_GPUS=1) but torch sees none (torch.cuda.is_available() is False): "
        f"CUDA_VISIBLE_DEVICES={listed!r} hides every GPU from CUDA (unset it). Refusing to train on the CPU."
    )


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
    with pytest.raises(GpuCheckError) as raised:
        gpu_check.check(Expectation(8, "SM_NUM_GPUS=8"), _facts())
    assert str(raised.value).startswith(
        "8 GPUs expected (SM_NUM_GPUS=8) but torch sees 1: cuda:0 NVIDIA A10G (CUDA_VISIBLE_DEVICES is not set); "
        "allowed: expect at most 1 here (SM_NUM_GPUS, expect_gpu), or an instance with 8 GPUs."
    )
    two = _facts(devices=[Device(0, "NVIDIA A10G", "8.6", 22.0), Device(1, "NVIDIA A10G", "8.6", 22.0)])
    with pytest.raises(GpuCheckError, match=r"but torch sees 2: cuda:0 NVIDIA A10G, cuda:1 NVIDIA A10G \(CUDA_VIS"):
        gpu_check.check(Expectation(4, "SM_NUM_GPUS=4"), two)


def test_report_lists_the_facts() -> None:
    text = gpu_check.report(_facts(), Expectation(1, "SM_NUM_GPUS=1"))
    assert "torch 2.8.0 built with CUDA 12.9" in text and "NVIDIA driver 570.1, supports CUDA 12.8" in text
    assert "cuda:0 NVIDIA A10G, compute capability 8.6, 22.0 GiB" in text and "expected: 1 GPUs (SM_NUM_GPUS=1)" in text


def test_facts_without_torch_then_torchs_own_view_of_this_host() -> None:
    """Without torch: no device and no torch check (the version from the package metadata); with torch: what torch
    itself says here (a CPU build and no GPU on a CPU machine, the CUDA build and its GPUs on a GPU machine)."""
    import torch

    facts = gpu_check.collect(import_torch=False)
    assert not facts.torch_checked and facts.device_count == 0 and facts.torch_version
    checked = gpu_check.collect(import_torch=True)
    assert checked.torch_checked and checked.torch_version == torch.__version__
    assert checked.torch_cuda == torch.version.cuda and checked.device_count == torch.cuda.device_count()
    assert checked.error is None


def test_doctor_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    """One GPU more than torch sees here always fails; a GPU instance type fails only where torch sees none."""
    import torch

    assert gpuctl(["doctor", "--no-probe"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU check:") and out.rstrip().endswith("OK")
    seen = torch.cuda.device_count()
    assert gpuctl(["doctor", "--expect-gpus", str(seen + 1), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["expected"]["count"] == seen + 1
    assert report["facts"]["device_count"] == seen
    if torch.version.cuda is None:
        assert "CPU-only build" in report["problem"]
    elif seen:
        assert (
            f"{seen + 1} GPUs expected ({seen + 1} GPUs requested) but torch sees {seen}: cuda:0 " in report["problem"]
        )
    assert gpuctl(["doctor", "--instance-type", "ml.g5.xlarge"]) == (0 if seen else 1)
    assert "instance type ml.g5.xlarge has NVIDIA GPUs" in capsys.readouterr().out


def test_tensorflow_whose_build_cannot_be_asked_is_reported_as_unknown() -> None:
    """A TensorFlow without ``tf.test`` is not called a CPU build: the report says it does not know, and names the
    error."""
    facts = gpu_check.TensorFlowFacts(version="0", error="AttributeError: module 'tensorflow' has no attribute 'test'")
    facts.checked = True
    assert facts.lines() == [
        "TensorFlow 0 (CUDA build unknown)",
        "visible GPUs (TensorFlow): 0",
        "error: AttributeError: module 'tensorflow' has no attribute 'test'",
    ]
    with pytest.raises(GpuCheckError, match=r"^at least 1 GPU expected \(/dev/nvidia0 exists\) but TensorFlow fails: "):
        gpu_check.check_tensorflow(Expectation(-1, "/dev/nvidia0 exists"), facts)


# ------------------------------------------------------------------ the built-in trainer: one process per GPU


def test_more_processes_per_host_than_gpus_fail_before_torchrun_naming_the_gpus() -> None:
    from gpu_train import entrypoint, hyperparameters

    one_gpu = _facts(devices=[Device(0, "NVIDIA H200", "9.0", 139.8)])
    two = hyperparameters.parse({"processes_per_host": "2"})
    with pytest.raises(ConfigError) as raised:
        entrypoint._processes_per_host(two, one_gpu)
    assert str(raised.value) == (
        "hyperparameter processes_per_host=2 is not allowed on this host: the built-in trainer runs one process per "
        "GPU (NCCL) and torch sees 1 GPU (cuda:0 NVIDIA H200); allowed: 0 (one per GPU) or at most 1, or "
        "CUDA_VISIBLE_DEVICES='' in the job's environment to train on the CPU"
    )
    assert entrypoint._processes_per_host(two, _facts(devices=[], torch_cuda=None)) == 2  # CPU: gloo
    assert entrypoint._processes_per_host(hyperparameters.parse({}), one_gpu) == 1
    assert entrypoint._processes_per_host(hyperparameters.parse({}), _facts(devices=[])) == 1


def test_a_local_rank_without_a_gpu_of_its_own_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m gpu_train.worker`` started by another launcher with more processes than GPUs: a clear error
    before CUDA's 'invalid device ordinal'."""
    import torch

    from gpu_train import distributed

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA H200")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(GpuCheckError) as raised:
        distributed.init(use_cuda=True)
    assert str(raised.value).startswith(
        "training process LOCAL_RANK=1 (of 2 on this host) has no GPU of its own: this host's processes see 1 GPU "
        "(cuda:0 NVIDIA H200); allowed: at most one training process per GPU of each machine"
    )


def test_two_processes_on_one_gpu_are_refused_before_nccl() -> None:
    """Two hosts of a job on one machine with one GPU (``gpuctl train --local``, InstanceCount 2): both use its
    cuda:0, which NCCL would refuse with 'Duplicate GPU detected'. Hosts on machines of their own may each use
    their cuda:0."""
    from gpu_train.distributed import shared_gpu

    h200 = "cuda:0 NVIDIA H200"
    assert shared_gpu([("algo-1", "GPU-a", h200), ("algo-2", "GPU-b", h200)]) is None
    assert shared_gpu([("box", "GPU-a", h200), ("box", "GPU-b", "cuda:1 NVIDIA H200")]) is None
    problem = shared_gpu([("box", "GPU-a", h200), ("box", "GPU-a", h200)])
    assert problem is not None and problem.startswith(
        "training processes (ranks 0, 1) would share GPU cuda:0 NVIDIA H200 of machine box: NCCL runs one process "
        "per GPU (it stops with 'Duplicate GPU detected'); this happens when several hosts of a job run on one "
        "machine or there are more processes than GPUs; allowed: at most one training process per GPU of each "
        "machine"
    )
    assert problem.endswith("or CUDA_VISIBLE_DEVICES='' to train on the CPU with gloo")
