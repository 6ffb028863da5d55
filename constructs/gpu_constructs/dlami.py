"""AWS Deep Learning AMIs (DLAMI) for EC2 GPU fleets: flavours, public SSM parameters, pinning, GPU checks.

A :class:`DlamiImage` names one DLAMI flavour (base or PyTorch, Ubuntu or Amazon Linux 2023, x86_64 or
arm64) and resolves it one of two ways:

* **latest** (:meth:`DlamiImage.from_ssm`): the AMI id comes from the flavour's public SSM parameter,
  ``/aws/service/deeplearning/ami/<arch>/<ami type>/latest/ami-id``, resolved by CloudFormation at deploy
  time (a stack parameter of type ``AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>``): nothing is looked
  up at synth, and a new DLAMI release reaches the fleet on the next deployment;
* **pinned** (:meth:`DlamiImage.pinned`): an explicit AMI id per region from config, so an AMI change is
  a reviewed diff rather than a silent replacement.

The ``<ami type>`` is the DLAMI name without the words "Deep", "Learning" and "AMI" (AWS DLAMI developer
guide, "Finding the ID of a DLAMI"), e.g. ``base-oss-nvidia-driver-gpu-ubuntu-22.04`` for "Deep Learning
Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)" and ``oss-nvidia-driver-gpu-pytorch-2.9-ubuntu-22.04`` for
"Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.9 (Ubuntu 22.04)". The arm64 images (G5g) use the same
names under ``/arm64/``.

:meth:`DlamiImage.check_instance_type` rejects an image whose driver or CUDA cannot drive the instance's
GPU (sources in ``docs/gpu-instances.md`` and the construct reference):

* the DLAMIs in the SSM namespace ship the *open-source* NVIDIA kernel modules ("OSS Nvidia Driver"),
  which NVIDIA supports on Turing (compute capability 7.5) and newer only: they depend on the GPU System
  Processor first introduced in Turing (NVIDIA driver installation guide, "Kernel Modules"). A V100
  (p3, p3dn, Volta 7.0) or K80 (p2, Kepler 3.7) under an OSS DLAMI is an error; pin an AMI with the
  proprietary driver for those;
* data-center Blackwell GPUs (compute capability 10.x: B200, B300) are supported by the open kernel
  modules only, so a proprietary-driver AMI on p6 is an error;
* a driver branch newer than the architecture's last supported branch (Kepler R470, Volta R580) is an
  error, and so is a CUDA version that cannot build for the architecture or that needs a newer driver
  branch than the AMI ships (CUDA 12.x needs R525+, 13.x R580+).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from gpu_constructs.catalog import InstanceRef, InstanceType, lookup, require_nvidia_gpu
from gpu_constructs.catalog.cuda import MIN_DRIVER_BRANCH, parse_cuda_version
from gpu_constructs.errors import ValidationError

if TYPE_CHECKING:
    from aws_cdk import aws_ec2 as ec2

__all__ = [
    "DLAMI_SSM_PREFIX",
    "LUSTRE_CLIENT_PREINSTALLED",
    "OPEN_KERNEL_MODULES_MIN_CC",
    "CpuArch",
    "DlamiImage",
    "DriverFlavour",
    "Framework",
    "LustreClientInstall",
    "OperatingSystem",
    "dlami_ami_type",
    "dlami_ssm_parameter_name",
    "lustre_client_install",
    "lustre_client_lines",
]

Framework = Literal["base", "pytorch"]
OperatingSystem = Literal["ubuntu-22.04", "ubuntu-24.04", "amazon-linux-2023"]
CpuArch = Literal["x86_64", "arm64"]
DriverFlavour = Literal["oss", "proprietary"]

FRAMEWORKS: tuple[Framework, ...] = get_args(Framework)
OPERATING_SYSTEMS: tuple[OperatingSystem, ...] = get_args(OperatingSystem)
CPU_ARCHS: tuple[CpuArch, ...] = get_args(CpuArch)
DRIVER_FLAVOURS: tuple[DriverFlavour, ...] = get_args(DriverFlavour)

#: Namespace of the DLAMI public parameters (AWS DLAMI developer guide, "Finding the ID of a DLAMI").
DLAMI_SSM_PREFIX = "/aws/service/deeplearning/ami"

#: The open-source NVIDIA kernel modules need the GSP, first in Turing (compute capability 7.5).
OPEN_KERNEL_MODULES_MIN_CC: tuple[int, int] = (7, 5)
#: Data-center Blackwell (B200/B300) and newer run on the open kernel modules only.
OPEN_KERNEL_MODULES_REQUIRED_FROM_CC: tuple[int, int] = (10, 0)

#: Root device of each OS family's AMIs: a block device mapping on another name adds a second volume
#: instead of resizing (and encrypting) the root volume.
ROOT_DEVICE_NAMES: dict[OperatingSystem, str] = {
    "ubuntu-22.04": "/dev/sda1",
    "ubuntu-24.04": "/dev/sda1",
    "amazon-linux-2023": "/dev/xvda",
}

#: DLAMI lines (framework, framework version, os, cpu_arch) whose release notes list the FSx for Lustre client
#: among the image's packages. The fact is per line, not per framework and OS: the notes of one PyTorch line
#: on Ubuntu 24.04 list it and those of another do not. These notes of the DLAMI developer guide list it in
#: "Added packages", built for the image's kernel:
#:
#: * "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.11 (Ubuntu 24.04) 20260815" (x86_64, kernel
#:   6.17.0-1020-aws): ``lustre-client-modules-6.17.0-1020-aws-2.15.6-1fsx33``
#:   (https://docs.amazonaws.cn/dlami/latest/devguide/aws-deep-learning-ami-gpupt211oss-ul2404-2026-08-17.html);
#: * "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.12 (Ubuntu 24.04) 20260822" (x86_64, kernel
#:   6.17.0-1020-aws): ``lustre-client-modules-6.17.0-1020-aws-2.15.6-1fsx33``
#:   (https://docs.amazonaws.cn/dlami/latest/devguide/aws-deep-learning-ami-gpupt212oss-ul2404-2026-08-24.html).
#:
#: A line is added here only when its own notes say so: no note of another line was found to list a Lustre
#: package (the PyTorch 2.9 (Ubuntu 24.04) notes 20260103 and 20260317 add no package at all; the arm64,
#: Amazon Linux 2023 and base notes found list none). Every other line installs the client at boot
#: (:func:`lustre_client_install`), which needs a route to a package repository, and a fleet without one is
#: refused at synth. A pinned image may state its own fact (``DlamiImage(lustre_client_preinstalled=...)``).
LUSTRE_CLIENT_PREINSTALLED: frozenset[tuple[str, str, str, str]] = frozenset(
    {
        ("pytorch", "2.11", "ubuntu-24.04", "x86_64"),
        ("pytorch", "2.12", "ubuntu-24.04", "x86_64"),
    }
)


def lustre_client_lines() -> str:
    """The DLAMI lines of :data:`LUSTRE_CLIENT_PREINSTALLED`, as an "allowed" text."""
    lines = sorted(LUSTRE_CLIENT_PREINSTALLED, key=lambda k: (k[0], k[2], k[3], tuple(map(int, k[1].split(".")))))
    return ", ".join(
        f"framework={framework!r} pytorch_version={version!r} os={os!r} cpu_arch={arch!r}"
        for framework, version, os, arch in lines
    )


LustreClientInstall = Literal["preinstalled", "fsx-apt-repository", "amazon-linux-repository"]

#: How a flavour without the client gets it, from the FSx for Lustre user guide, "Installing the Lustre
#: client" (https://docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html):
#:
#: * Ubuntu 22.04/24.04: the Amazon FSx apt repository (``https://fsx-lustre-client-repo.s3.amazonaws.com/
#:   ubuntu <codename> main``, signed with ``fsx-ubuntu-public-key.asc``), then
#:   ``apt install -y lustre-client-modules-$(uname -r)``. The repository is an S3 bucket addressed through
#:   the global ``s3.amazonaws.com`` endpoint and the packages' dependencies come from the Ubuntu archive
#:   mirrors (outside AWS); a VPC's S3 gateway endpoint reaches only buckets of its own Region (AWS
#:   PrivateLink guide, "Gateway endpoints for Amazon S3"), so the instance needs a NAT or internet path;
#: * Amazon Linux 2023: ``dnf install -y lustre-client`` from the Amazon Linux repositories. AL2023 serves
#:   them from S3 buckets in the instance's Region (the DLAMI release notes list the
#:   ``amazon-linux-repo-s3`` package; dnf resolves ``al2023-repos-<region>-<id>.s3.dualstack.<region>.
#:   amazonaws.com``), which the VPC's S3 gateway endpoint reaches.
LUSTRE_INSTALL_BY_OS: dict[str, LustreClientInstall] = {
    "ubuntu-22.04": "fsx-apt-repository",
    "ubuntu-24.04": "fsx-apt-repository",
    "amazon-linux-2023": "amazon-linux-repository",
}

#: What each install method needs to reach: ``internet`` (NAT or internet gateway) or ``s3`` (the Region's
#: S3, through the S3 gateway endpoint or the internet).
LUSTRE_INSTALL_ROUTE: dict[LustreClientInstall, str | None] = {
    "preinstalled": None,
    "fsx-apt-repository": "internet",
    "amazon-linux-repository": "s3",
}


def lustre_client_install(
    framework: str, framework_version: str | None, os: str, cpu_arch: str, preinstalled: bool | None = None
) -> LustreClientInstall:
    """How a DLAMI line gets the Lustre client: ``preinstalled`` (its release notes list the client, or
    ``preinstalled=True`` for a pinned image), or else the documented install of its OS."""
    if preinstalled is None:
        preinstalled = (framework, framework_version or "", os, cpu_arch) in LUSTRE_CLIENT_PREINSTALLED
    return "preinstalled" if preinstalled else LUSTRE_INSTALL_BY_OS[os]


#: Python of the PyTorch DLAMIs (release notes: ``python_location``).
PYTORCH_DLAMI_PYTHON = "/opt/pytorch/bin/python"

_WHERE = "DlamiImage"
_PYTORCH_VERSION_RE = re.compile(r"^\d+\.\d+$")
_AMI_ID_RE = re.compile(r"^ami-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
_REGION_RE = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d$")


def dlami_ami_type(framework: Framework, os: OperatingSystem, pytorch_version: str | None = None) -> str:
    """The ``<ami type>`` part of a DLAMI parameter name (the DLAMI name without Deep/Learning/AMI)."""
    if framework == "pytorch":
        return f"oss-nvidia-driver-gpu-pytorch-{pytorch_version}-{os}"
    return f"base-oss-nvidia-driver-gpu-{os}"


def dlami_ssm_parameter_name(
    framework: Framework = "base",
    os: OperatingSystem = "ubuntu-22.04",
    cpu_arch: CpuArch = "x86_64",
    pytorch_version: str | None = None,
) -> str:
    """``/aws/service/deeplearning/ami/<arch>/<ami type>/latest/ami-id`` for a flavour (validated)."""
    image = DlamiImage(framework=framework, os=os, cpu_arch=cpu_arch, pytorch_version=pytorch_version)
    return image.ssm_parameter_name


@dataclass(frozen=True)
class DlamiImage:
    """One DLAMI flavour, resolved from its public SSM parameter (default) or pinned per region.

    :param framework: ``base`` (driver, CUDA, EFA, NCCL; no framework) or ``pytorch`` (adds PyTorch in
        ``/opt/pytorch``). Default: ``base``.
    :param os: ``ubuntu-22.04``, ``ubuntu-24.04`` or ``amazon-linux-2023``. Default: ``ubuntu-22.04``.
    :param cpu_arch: ``x86_64`` or ``arm64`` (Graviton G5g). Default: ``x86_64``.
    :param pytorch_version: ``MAJOR.MINOR`` of a PyTorch DLAMI line, e.g. ``"2.9"`` (required for, and only
        allowed with, ``framework="pytorch"``). ``latest`` in the parameter is the newest build *of that
        line*; a new PyTorch line is a config change.
    :param ami_ids: region -> AMI id of a pinned image (default: none, resolve the SSM parameter).
    :param driver: kernel-module flavour of the image's NVIDIA driver: ``oss`` (open-source; every DLAMI in
        the SSM namespace) or ``proprietary`` (only for a pinned image that ships it). Default: ``oss``.
    :param driver_branch: the image's NVIDIA driver branch, e.g. 580 (default: unknown, not checked).
    :param cuda_version: the CUDA version the workload on this image uses, e.g. ``"12.8"`` (default:
        unknown, not checked).
    :param lustre_client_preinstalled: whether the image ships the Lustre client for its kernel (default:
        the documented fact of the line, :data:`LUSTRE_CLIENT_PREINSTALLED`: PyTorch 2.11 and 2.12 on Ubuntu
        24.04 x86_64); set it for a pinned image you built with the client, so a fleet on it needs no
        package repository.
    """

    framework: Framework = "base"
    os: OperatingSystem = "ubuntu-22.04"
    cpu_arch: CpuArch = "x86_64"
    pytorch_version: str | None = None
    ami_ids: Mapping[str, str] | None = field(default=None, hash=False)
    driver: DriverFlavour = "oss"
    driver_branch: int | None = None
    cuda_version: str | None = None
    lustre_client_preinstalled: bool | None = None

    def __post_init__(self) -> None:
        self._validate_framework()
        self._validate_os()
        self._validate_arch()
        self._validate_pytorch_version()
        self._validate_driver()
        self._validate_ami_ids()
        self._validate_cuda_version()
        if self.lustre_client_preinstalled not in (None, True, False):
            raise self._fail("lustre_client_preinstalled", self.lustre_client_preinstalled, "None, True or False")

    # -- factories ---------------------------------------------------------------------------------------

    @classmethod
    def from_ssm(
        cls,
        framework: Framework = "base",
        os: OperatingSystem = "ubuntu-22.04",
        cpu_arch: CpuArch = "x86_64",
        pytorch_version: str | None = None,
        *,
        cuda_version: str | None = None,
    ) -> DlamiImage:
        """The latest image of a flavour, from its public SSM parameter at deploy time."""
        return cls(
            framework=framework, os=os, cpu_arch=cpu_arch, pytorch_version=pytorch_version, cuda_version=cuda_version
        )

    @classmethod
    def pinned(
        cls,
        ami_ids: Mapping[str, str],
        *,
        framework: Framework = "base",
        os: OperatingSystem = "ubuntu-22.04",
        cpu_arch: CpuArch = "x86_64",
        pytorch_version: str | None = None,
        driver: DriverFlavour = "oss",
        driver_branch: int | None = None,
        cuda_version: str | None = None,
        lustre_client_preinstalled: bool | None = None,
    ) -> DlamiImage:
        """An explicit AMI id per region (a reviewed change), described by its flavour and driver facts."""
        return cls(
            framework=framework,
            os=os,
            cpu_arch=cpu_arch,
            pytorch_version=pytorch_version,
            ami_ids=dict(ami_ids),
            driver=driver,
            driver_branch=driver_branch,
            cuda_version=cuda_version,
            lustre_client_preinstalled=lustre_client_preinstalled,
        )

    # -- validation --------------------------------------------------------------------------------------

    def _fail(self, name: str, value: object, allowed: str) -> ValidationError:
        return ValidationError(_WHERE, f"{name}={value!r} is not allowed; allowed: {allowed}")

    def _validate_framework(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise self._fail("framework", self.framework, ", ".join(map(repr, FRAMEWORKS)))

    def _validate_os(self) -> None:
        if self.os not in OPERATING_SYSTEMS:
            raise self._fail("os", self.os, ", ".join(map(repr, OPERATING_SYSTEMS)))

    def _validate_arch(self) -> None:
        if self.cpu_arch not in CPU_ARCHS:
            raise self._fail("cpu_arch", self.cpu_arch, ", ".join(map(repr, CPU_ARCHS)))

    def _validate_pytorch_version(self) -> None:
        if self.framework == "pytorch":
            if not isinstance(self.pytorch_version, str) or not _PYTORCH_VERSION_RE.match(self.pytorch_version):
                raise self._fail(
                    "pytorch_version",
                    self.pytorch_version,
                    "the MAJOR.MINOR of a PyTorch DLAMI line, e.g. '2.9' (see the DLAMI release notes)",
                )
        elif self.pytorch_version is not None:
            raise self._fail("pytorch_version", self.pytorch_version, "None unless framework='pytorch'")

    def _validate_driver(self) -> None:
        if self.driver not in DRIVER_FLAVOURS:
            raise self._fail("driver", self.driver, ", ".join(map(repr, DRIVER_FLAVOURS)))
        if self.driver == "proprietary" and self.ami_ids is None:
            raise self._fail(
                "driver",
                self.driver,
                "'oss' for an image from the DLAMI SSM parameters (they ship the open-source kernel modules); "
                "pin an AMI (DlamiImage.pinned) to use a proprietary-driver image",
            )
        branch = self.driver_branch
        if branch is not None and (isinstance(branch, bool) or not isinstance(branch, int) or not 100 <= branch < 1000):
            raise self._fail("driver_branch", branch, "a driver branch number such as 580 (R580)")

    def _validate_ami_ids(self) -> None:
        if self.ami_ids is None:
            return
        if not self.ami_ids:
            raise self._fail("ami_ids", dict(self.ami_ids), "a mapping of at least one region to an AMI id")
        for region, ami in self.ami_ids.items():
            if not isinstance(region, str) or not _REGION_RE.match(region):
                raise self._fail("ami_ids region", region, "a region name such as 'us-east-1'")
            if not isinstance(ami, str) or not _AMI_ID_RE.match(ami):
                raise self._fail(f"ami_ids[{region!r}]", ami, "an AMI id such as 'ami-0123456789abcdef0'")

    def _validate_cuda_version(self) -> None:
        if self.cuda_version is None:
            return
        try:
            version = parse_cuda_version(self.cuda_version)
        except ValueError as exc:
            raise ValidationError(_WHERE, str(exc)) from None
        if version.major not in MIN_DRIVER_BRANCH:
            known = ", ".join(f"{m}.x" for m in sorted(MIN_DRIVER_BRANCH))
            raise self._fail("cuda_version", self.cuda_version, f"a CUDA version of a known major release ({known})")

    # -- facts -------------------------------------------------------------------------------------------

    @property
    def is_pinned(self) -> bool:
        return self.ami_ids is not None

    @property
    def ami_type(self) -> str:
        return dlami_ami_type(self.framework, self.os, self.pytorch_version)

    @property
    def ssm_parameter_name(self) -> str:
        """The public parameter of this flavour (also for a pinned image: the line it was taken from)."""
        return f"{DLAMI_SSM_PREFIX}/{self.cpu_arch}/{self.ami_type}/latest/ami-id"

    @property
    def root_device_name(self) -> str:
        return ROOT_DEVICE_NAMES[self.os]

    @property
    def has_torch(self) -> bool:
        """True for PyTorch DLAMIs (torch in ``/opt/pytorch``); base DLAMIs ship no framework."""
        return self.framework == "pytorch"

    @property
    def lustre_client_install(self) -> LustreClientInstall:
        """How an instance of this image gets the Lustre client (see :func:`lustre_client_install`)."""
        return lustre_client_install(
            self.framework, self.pytorch_version, self.os, self.cpu_arch, self.lustre_client_preinstalled
        )

    @property
    def line_name(self) -> str:
        """The DLAMI line in words, e.g. ``pytorch 2.12 ubuntu-24.04 x86_64`` or ``base ubuntu-22.04 x86_64``."""
        version = f" {self.pytorch_version}" if self.pytorch_version else ""
        return f"{self.framework}{version} {self.os} {self.cpu_arch}"

    @property
    def torch_python(self) -> str | None:
        return PYTORCH_DLAMI_PYTHON if self.has_torch else None

    def describe(self) -> str:
        source = f"pinned {dict(sorted(self.ami_ids.items()))}" if self.ami_ids is not None else self.ssm_parameter_name
        return f"{self.framework} DLAMI ({self.os}, {self.cpu_arch}, {self.driver} driver) from {source}"

    def machine_image(self) -> ec2.IMachineImage:
        """The CDK machine image: the SSM parameter (resolved at deploy) or the pinned region map."""
        from aws_cdk import aws_ec2 as ec2

        if self.ami_ids is not None:
            return ec2.MachineImage.generic_linux(dict(self.ami_ids))
        return ec2.MachineImage.from_ssm_parameter(self.ssm_parameter_name, os=ec2.OperatingSystemType.LINUX)

    def ami_for_region(self, region: str, *, where: str = _WHERE) -> str | None:
        """The pinned AMI of ``region`` (None for SSM images); raise when the region is not pinned."""
        if self.ami_ids is None:
            return None
        try:
            return self.ami_ids[region]
        except KeyError:
            raise ValidationError(
                where,
                f"image: no pinned AMI for region {region!r}; allowed: one of the pinned regions "
                f"{sorted(self.ami_ids)} (add the region's AMI id to ami_ids)",
            ) from None

    # -- compatibility -----------------------------------------------------------------------------------

    def compatibility_problems(self, instance_type: InstanceRef) -> list[str]:
        """Why this image cannot drive the GPUs of ``instance_type`` (empty when it can)."""
        it = lookup(instance_type)
        problems: list[str] = []
        if it.cpu_arch != self.cpu_arch:
            problems.append(
                f"the image is built for {self.cpu_arch} but {it.name!r} has {it.cpu_arch} CPUs; allowed: "
                f"cpu_arch={it.cpu_arch!r}"
            )
        support = it.cuda
        if support is None or it.accelerator is None:
            return problems
        cc = support.compute_capability
        model = it.accelerator.model
        where_gpu = f"the {model} of {it.name!r} ({support.architecture}, compute capability {cc[0]}.{cc[1]})"
        if self.driver == "oss" and cc < OPEN_KERNEL_MODULES_MIN_CC:
            problems.append(
                f"the open-source NVIDIA kernel modules of OSS DLAMIs support Turing (compute capability 7.5) "
                f"and newer only, not {where_gpu}; allowed: a Turing-or-newer GPU type such as "
                f"{_newer_alternatives(it)}, or a pinned AMI with the proprietary driver (driver='proprietary')"
            )
        if self.driver == "proprietary" and cc >= OPEN_KERNEL_MODULES_REQUIRED_FROM_CC:
            problems.append(
                f"{where_gpu} runs on the open-source NVIDIA kernel modules only (Blackwell data-center GPUs); "
                "allowed: driver='oss' (any DLAMI from the SSM parameters)"
            )
        branch = self.driver_branch
        if branch is not None and support.last_driver_branch is not None and branch > support.last_driver_branch:
            problems.append(
                f"driver R{branch} no longer supports {where_gpu}; allowed: driver branch "
                f"<= R{support.last_driver_branch}"
            )
        if self.cuda_version is not None:
            version = parse_cuda_version(self.cuda_version)
            if not support.supported_by(version):
                problems.append(f"CUDA {version} cannot drive {where_gpu}; allowed: {support.describe_window()}")
            needed = MIN_DRIVER_BRANCH[version.major]
            if branch is not None and branch < needed:
                problems.append(
                    f"CUDA {version} needs NVIDIA driver R{needed} or newer but the image ships R{branch}; "
                    f"allowed: driver_branch >= {needed} or a CUDA {version.major - 1}.x workload"
                )
        return problems

    def check_instance_type(
        self, instance_type: str, *, where: str, param: str = "instance_type", allow_fractional: bool = False
    ) -> InstanceType:
        """Return the catalog entry when this image can run CUDA on ``instance_type`` (an EC2 name).

        Raises :class:`ValidationError` for a type without an NVIDIA GPU (naming fitting GPU types), a
        fractional vGPU type, or any of :meth:`compatibility_problems`.
        """
        it = require_nvidia_gpu(instance_type, where=where, usage="ec2", param=param, allow_fractional=allow_fractional)
        problems = self.compatibility_problems(it)
        if problems:
            raise ValidationError(
                where,
                f"{param}={it.name!r} cannot run {self.describe()}: " + "; ".join(problems),
            )
        return it


def _newer_alternatives(it: InstanceType) -> str:
    """Up to three EC2 GPU types with the same GPU count whose GPUs the open kernel modules support."""
    from gpu_constructs.catalog import instance_types

    wanted = max(1, it.nvidia_gpu_count)
    picks = [
        c
        for c in instance_types(usage="ec2", nvidia_only=True)
        if not c.is_fractional_gpu
        and c.compute_capability is not None
        and c.compute_capability >= OPEN_KERNEL_MODULES_MIN_CC
        and c.nvidia_gpu_count == wanted
        and c.cpu_arch == it.cpu_arch
    ]
    picks.sort(key=lambda c: (c.accelerator.cost_tier if c.accelerator else 0, c.vcpus, c.name))
    return ", ".join(repr(c.name) for c in picks[:3]) or "'g5.xlarge'"
