"""DLAMI flavours: public SSM parameter names, pinning, and driver/CUDA vs GPU architecture checks."""

from __future__ import annotations

import pytest

from gpu_constructs.dlami import (
    LUSTRE_CLIENT_PREINSTALLED,
    DlamiImage,
    dlami_ssm_parameter_name,
    lustre_client_install,
    lustre_client_lines,
)
from gpu_constructs.errors import ValidationError

W = "Fleet"


# -- parameter names (AWS DLAMI developer guide: /aws/service/deeplearning/ami/<arch>/<ami type>/latest/ami-id) --


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({}, "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"),
        (
            {"os": "amazon-linux-2023"},
            "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id",
        ),
        (
            {"os": "ubuntu-24.04", "cpu_arch": "arm64"},
            "/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id",
        ),
        (
            {"framework": "pytorch", "pytorch_version": "2.9", "os": "ubuntu-24.04"},
            "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-24.04/latest/ami-id",
        ),
        (  # the dev fleet's line: "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.12 (Ubuntu 24.04)"
            {"framework": "pytorch", "pytorch_version": "2.12", "os": "ubuntu-24.04"},
            "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.12-ubuntu-24.04/latest/ami-id",
        ),
        (
            {"framework": "pytorch", "pytorch_version": "2.7", "cpu_arch": "arm64"},
            "/aws/service/deeplearning/ami/arm64/oss-nvidia-driver-gpu-pytorch-2.7-ubuntu-22.04/latest/ami-id",
        ),
    ],
)
def test_ssm_parameter_names(kwargs: dict[str, str], name: str) -> None:
    assert dlami_ssm_parameter_name(**kwargs) == name  # type: ignore[arg-type]
    assert DlamiImage.from_ssm(**kwargs).ssm_parameter_name == name  # type: ignore[arg-type]


def test_flavour_facts() -> None:
    base = DlamiImage.from_ssm()
    assert not base.has_torch and base.torch_python is None and not base.is_pinned
    assert base.root_device_name == "/dev/sda1"
    assert DlamiImage.from_ssm(os="amazon-linux-2023").root_device_name == "/dev/xvda"
    torch = DlamiImage.from_ssm("pytorch", pytorch_version="2.9")
    assert torch.has_torch and torch.torch_python == "/opt/pytorch/bin/python"
    assert "oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-22.04" in torch.describe()


def test_pinned_image_per_region() -> None:
    image = DlamiImage.pinned({"us-west-2": "ami-0123456789abcdef0"}, driver_branch=580, cuda_version="12.8")
    assert image.is_pinned and image.ami_for_region("us-west-2") == "ami-0123456789abcdef0"
    assert "pinned {'us-west-2': 'ami-0123456789abcdef0'}" in image.describe()
    with pytest.raises(ValidationError, match=r"Fleet: image: no pinned AMI for region 'us-east-1'.*\['us-west-2'\]"):
        image.ami_for_region("us-east-1", where=W)
    assert DlamiImage.from_ssm().ami_for_region("us-east-1") is None


# -- validation of the flavour itself -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"framework": "tensorflow"}, r"framework='tensorflow' is not allowed; allowed: 'base', 'pytorch'"),
        ({"os": "ubuntu-20.04"}, r"os='ubuntu-20.04' is not allowed; allowed: 'ubuntu-22.04'"),
        ({"cpu_arch": "aarch64"}, r"cpu_arch='aarch64' is not allowed; allowed: 'x86_64', 'arm64'"),
        ({"framework": "pytorch"}, r"pytorch_version=None is not allowed; allowed: the MAJOR.MINOR"),
        ({"framework": "pytorch", "pytorch_version": "2.9.1"}, r"pytorch_version='2.9.1' is not allowed"),
        ({"pytorch_version": "2.9"}, r"pytorch_version='2.9' is not allowed; allowed: None unless framework='pytorch'"),
        ({"driver": "proprietary"}, r"driver='proprietary' is not allowed; allowed: 'oss' for an image from the DLAMI"),
        ({"driver": "nouveau"}, r"driver='nouveau' is not allowed; allowed: 'oss', 'proprietary'"),
        ({"cuda_version": "twelve"}, r"cuda_version='twelve' is not a CUDA version"),
        ({"cuda_version": "10.2"}, r"cuda_version='10.2' is not allowed; allowed: a CUDA version of a known major"),
        ({"ami_ids": {}}, r"ami_ids=\{\} is not allowed; allowed: a mapping of at least one region"),
        ({"ami_ids": {"uswest2": "ami-0123456789abcdef0"}}, r"ami_ids region='uswest2' is not allowed"),
        ({"ami_ids": {"us-west-2": "ami-12345"}}, r"ami_ids\['us-west-2'\]='ami-12345' is not allowed"),
        ({"ami_ids": {"us-west-2": "ami-0123456789abcdef0"}, "driver_branch": 58}, r"driver_branch=58 is not allowed"),
    ],
)
def test_invalid_flavours(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        DlamiImage(**kwargs)  # type: ignore[arg-type]


# -- driver / CUDA vs GPU architecture ------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", ["g4dn.xlarge", "g5.xlarge", "g6e.xlarge", "p4d.24xlarge", "p5.48xlarge"])
def test_oss_driver_runs_turing_and_newer(instance_type: str) -> None:
    it = DlamiImage.from_ssm().check_instance_type(instance_type, where=W)
    assert it.name == instance_type and it.compute_capability is not None and it.compute_capability >= (7, 5)


@pytest.mark.parametrize(
    ("instance_type", "gpu"),
    [("p3.2xlarge", "NVIDIA V100 of 'p3.2xlarge' (Volta, compute capability 7.0)"),
     ("p3dn.24xlarge", "Volta, compute capability 7.0"),
     ("p2.xlarge", "NVIDIA Tesla K80 of 'p2.xlarge' (Kepler, compute capability 3.7)")],
)  # fmt: skip
def test_oss_driver_on_pre_turing_gpu_is_an_error(instance_type: str, gpu: str) -> None:
    with pytest.raises(ValidationError) as info:
        DlamiImage.from_ssm().check_instance_type(instance_type, where=W)
    text = str(info.value)
    assert text.startswith(f"Fleet: instance_type={instance_type!r} cannot run base DLAMI")
    assert "open-source NVIDIA kernel modules of OSS DLAMIs support Turing (compute capability 7.5)" in text
    assert gpu in text
    assert "driver='proprietary'" in text


def test_pre_turing_alternatives_keep_the_gpu_count() -> None:
    with pytest.raises(ValidationError) as info:
        DlamiImage.from_ssm().check_instance_type("p3.16xlarge", where=W)  # 8 x V100
    suggestions = str(info.value).split("such as ")[1]
    assert "'g4dn.metal'" in suggestions or "'g5.48xlarge'" in suggestions or "'g6.48xlarge'" in suggestions
    assert "'p3" not in suggestions


def test_proprietary_pinned_image_runs_volta_up_to_r580() -> None:
    ok = DlamiImage.pinned({"us-east-1": "ami-0123456789abcdef0"}, driver="proprietary", driver_branch=580)
    assert ok.check_instance_type("p3.2xlarge", where=W).name == "p3.2xlarge"
    too_new = DlamiImage.pinned({"us-east-1": "ami-0123456789abcdef0"}, driver="proprietary", driver_branch=590)
    with pytest.raises(ValidationError, match=r"driver R590 no longer supports the NVIDIA V100.*<= R580"):
        too_new.check_instance_type("p3.2xlarge", where=W)


def test_proprietary_driver_on_blackwell_is_an_error() -> None:
    image = DlamiImage.pinned({"us-east-1": "ami-0123456789abcdef0"}, driver="proprietary", driver_branch=580)
    with pytest.raises(ValidationError, match=r"B200 of 'p6-b200.48xlarge'.*open-source NVIDIA kernel modules only"):
        image.check_instance_type("p6-b200.48xlarge", where=W)


def test_cuda_version_must_support_the_architecture() -> None:
    pinned = {"us-east-1": "ami-0123456789abcdef0"}
    with pytest.raises(ValidationError, match=r"CUDA 13.0 cannot drive the NVIDIA V100.*CUDA 9.0 to 12.x"):
        DlamiImage.pinned(pinned, driver="proprietary", cuda_version="13.0").check_instance_type("p3.2xlarge", where=W)
    with pytest.raises(ValidationError, match=r"CUDA 12.6 cannot drive the NVIDIA B200.*CUDA 12.8 or newer"):
        DlamiImage.from_ssm(cuda_version="12.6").check_instance_type("p6-b200.48xlarge", where=W)
    assert DlamiImage.from_ssm(cuda_version="12.8").check_instance_type("p6-b200.48xlarge", where=W)


def test_cuda_version_needs_a_new_enough_driver() -> None:
    image = DlamiImage.pinned({"us-east-1": "ami-0123456789abcdef0"}, driver_branch=570, cuda_version="13.0")
    with pytest.raises(ValidationError, match=r"CUDA 13.0 needs NVIDIA driver R580 or newer but the image ships R570"):
        image.check_instance_type("g5.xlarge", where=W)


def test_cpu_architecture_must_match() -> None:
    with pytest.raises(
        ValidationError, match=r"built for arm64 but 'g5.xlarge' has x86_64 CPUs; allowed: cpu_arch='x86_64'"
    ):
        DlamiImage.from_ssm(cpu_arch="arm64").check_instance_type("g5.xlarge", where=W)
    with pytest.raises(ValidationError, match=r"built for x86_64 but 'g5g.xlarge' has arm64 CPUs"):
        DlamiImage.from_ssm().check_instance_type("g5g.xlarge", where=W)
    assert DlamiImage.from_ssm(cpu_arch="arm64").check_instance_type("g5g.xlarge", where=W).cpu_arch == "arm64"


def test_cpu_type_is_rejected_naming_gpu_types() -> None:
    with pytest.raises(ValidationError) as info:
        DlamiImage.from_ssm().check_instance_type("m5.2xlarge", where=W)
    text = str(info.value)
    assert "instance_type='m5.2xlarge' has no NVIDIA GPU (CPU only" in text
    assert "Fitting GPU types for ec2: 'g" in text


def test_sagemaker_spelling_and_fractional_gpus_are_rejected() -> None:
    with pytest.raises(
        ValidationError, match=r"'ml.g5.xlarge' is not how EC2 spells this type; did you mean 'g5.xlarge'"
    ):
        DlamiImage.from_ssm().check_instance_type("ml.g5.xlarge", where=W)
    with pytest.raises(ValidationError, match=r"'g6f.xlarge' has only 1/8 of an NVIDIA L4"):
        DlamiImage.from_ssm().check_instance_type("g6f.xlarge", where=W)
    with pytest.raises(ValidationError, match=r"instance_type='g5.xlarg' is not in the GPU instance catalog"):
        DlamiImage.from_ssm().check_instance_type("g5.xlarg", where=W)


# -- Lustre client (issue 12): which DLAMI lines ship it, how the others install it -----------------------


def test_lustre_client_fact_is_keyed_by_framework_version() -> None:
    # Exactly the lines whose release notes list lustre-client-modules-<kernel> (dlami.LUSTRE_CLIENT_PREINSTALLED).
    assert frozenset({
        ("pytorch", "2.11", "ubuntu-24.04", "x86_64"),
        ("pytorch", "2.12", "ubuntu-24.04", "x86_64"),
    }) == LUSTRE_CLIENT_PREINSTALLED  # fmt: skip
    assert lustre_client_lines() == (
        "framework='pytorch' pytorch_version='2.11' os='ubuntu-24.04' cpu_arch='x86_64', "
        "framework='pytorch' pytorch_version='2.12' os='ubuntu-24.04' cpu_arch='x86_64'"
    )


@pytest.mark.parametrize(
    ("framework", "version", "os", "arch", "expected"),
    [
        ("pytorch", "2.11", "ubuntu-24.04", "x86_64", "preinstalled"),  # release notes 20260815
        ("pytorch", "2.12", "ubuntu-24.04", "x86_64", "preinstalled"),  # release notes 20260822
        ("pytorch", "2.9", "ubuntu-24.04", "x86_64", "fsx-apt-repository"),  # its notes list no Lustre client
        ("pytorch", "2.10", "ubuntu-24.04", "x86_64", "fsx-apt-repository"),
        ("pytorch", "2.12", "ubuntu-24.04", "arm64", "fsx-apt-repository"),
        ("pytorch", "2.12", "ubuntu-22.04", "x86_64", "fsx-apt-repository"),
        ("base", None, "ubuntu-22.04", "x86_64", "fsx-apt-repository"),
        ("base", None, "ubuntu-24.04", "x86_64", "fsx-apt-repository"),
        ("base", None, "amazon-linux-2023", "x86_64", "amazon-linux-repository"),
        ("pytorch", "2.12", "amazon-linux-2023", "arm64", "amazon-linux-repository"),
    ],
)
def test_lustre_client_install_per_line(framework: str, version: str | None, os: str, arch: str, expected: str) -> None:
    image = DlamiImage(
        framework=framework,  # type: ignore[arg-type]
        os=os,  # type: ignore[arg-type]
        cpu_arch=arch,  # type: ignore[arg-type]
        pytorch_version=version,
    )
    assert image.lustre_client_install == expected
    assert lustre_client_install(framework, version, os, arch) == expected


def test_dlami_line_name() -> None:
    assert DlamiImage.from_ssm("pytorch", "ubuntu-24.04", pytorch_version="2.12").line_name == (
        "pytorch 2.12 ubuntu-24.04 x86_64"
    )
    assert DlamiImage.from_ssm("base", "ubuntu-24.04", "arm64").line_name == "base ubuntu-24.04 arm64"


def test_pinned_image_can_declare_its_lustre_client() -> None:
    pinned = DlamiImage.pinned({"us-east-1": "ami-0123456789abcdef0"}, lustre_client_preinstalled=True)
    assert pinned.lustre_client_install == "preinstalled"
    with pytest.raises(ValidationError, match=r"lustre_client_preinstalled='yes' is not allowed; allowed: None"):
        DlamiImage(lustre_client_preinstalled="yes")  # type: ignore[arg-type]
