"""gpuctl vendor SOURCE_DIR: download the wheels of SOURCE_DIR/requirements.txt into SOURCE_DIR/wheels.

A training job whose subnets have no route to a package index (PyPI or a mirror) cannot install the
packages of requirements.txt at start; it installs them from the wheels/ folder of the code package
instead, which this command fills. The wheels are for the job's machine, not this one: Linux x86_64
(every SageMaker GPU training instance) and the image's CPython, by default 3.12, the Python of the stock
AWS PyTorch 2.8 training image pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker (AWS Deep
Learning Containers, "Available images"). Dependencies are downloaded too; only binary wheels are taken
(pip download --only-binary=:all:), since the job may have no compiler.

    gpuctl vendor my_code/                          # CPython 3.12, manylinux2014_x86_64
    gpuctl vendor my_code/ --python-version 3.11    # an image with CPython 3.11
    gpuctl vendor my_code/ --dry-run                # print the pip command, run nothing

Leave out what the image already has (torch, numpy, ...): the AWS images ship torch built for their CUDA,
and the code package holds at most 100 MiB. pip does not know what the image holds, so a package that
depends on torch downloads torch too; the command warns when the wheels exceed the package's limit.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuctl.commands import add_command
from gpuctl.training_setup import UsageError, exit_codes

#: The command's line in ``gpuctl --help``.
SUMMARY = "download the wheels of a code folder's requirements.txt for the training image (into wheels/)"

#: CPython of pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker, the stock PyTorch 2.8 training DLC.
DEFAULT_PYTHON_VERSION = "3.12"
#: glibc 2.17 or newer on x86_64 (PEP 599): every wheel the DLCs' Ubuntu 22.04 (glibc 2.35) can load.
DEFAULT_PLATFORM = "manylinux2014_x86_64"
REQUIREMENTS = "requirements.txt"
WHEELS = "wheels"

_PYTHON_VERSION_RE = re.compile(r"^3\.\d{1,2}$")
_PLATFORM_RE = re.compile(r"^[a-z0-9_]+$")
_LARGEST_SHOWN = 5


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "vendor", SUMMARY, __doc__)
    parser.add_argument("source_dir", type=Path, metavar="SOURCE_DIR", help="folder with requirements.txt")
    parser.add_argument(
        "--python-version",
        default=DEFAULT_PYTHON_VERSION,
        help=f"the training image's CPython, MAJOR.MINOR (default: {DEFAULT_PYTHON_VERSION})",
    )
    parser.add_argument(
        "--platform",
        action="append",
        metavar="TAG",
        help=f"wheel platform tag (repeatable; default: {DEFAULT_PLATFORM}), e.g. manylinux_2_28_x86_64",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the pip command; download nothing")
    parser.set_defaults(func=run)


def pip_command(source_dir: Path, python_version: str, platforms: list[str]) -> list[str]:
    """The ``pip download`` command line that fills ``source_dir/wheels`` (dependencies included)."""
    if not _PYTHON_VERSION_RE.match(python_version):
        raise UsageError(
            f"--python-version {python_version!r} is not allowed; allowed: MAJOR.MINOR of CPython 3, e.g. 3.12"
        )
    for platform in platforms:
        if not _PLATFORM_RE.match(platform):
            raise UsageError(
                f"--platform {platform!r} is not a wheel platform tag; allowed: e.g. {DEFAULT_PLATFORM} "
                "or manylinux_2_28_x86_64"
            )
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--implementation", "cp"]
    for platform in platforms:
        command += ["--platform", platform]
    command += ["--python-version", python_version]
    command += ["-r", str(source_dir / REQUIREMENTS), "-d", str(source_dir / WHEELS)]
    return command


def _size(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB" if n >= 1024**2 else f"{n / 1024:.1f} KiB"


def _wheels(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(folder.glob("*.whl"))} if folder.is_dir() else {}


def _report(wheels_dir: Path, before: dict[str, int]) -> None:
    after = _wheels(wheels_dir)
    new = [name for name in after if name not in before]
    print(f"{wheels_dir}: {len(after)} wheel(s), {_size(sum(after.values()))}; {len(new)} new")
    for name, size in after.items():
        print(f"  {'+' if name in new else ' '} {name} ({_size(size)})")
    try:
        from gpu_constructs.training_spec.code_package import MAX_SOURCE_BYTES
    except ImportError:  # gpuctl installed without the platform's constructs: the package is checked at launch
        return
    total = sum(after.values())
    if total > MAX_SOURCE_BYTES:
        largest = sorted(after.items(), key=lambda item: -item[1])[:_LARGEST_SHOWN]
        print(
            f"warning: the wheels alone ({_size(total)}) exceed the code package's limit of "
            f"{_size(MAX_SOURCE_BYTES)}; largest: {', '.join(f'{n} ({_size(s)})' for n, s in largest)}. "
            "Remove from requirements.txt what the training image already has (torch, numpy, ...).",
            file=sys.stderr,
        )


@exit_codes("vendor")
def run(args: argparse.Namespace) -> int:
    source_dir: Path = args.source_dir
    if not source_dir.is_dir():
        raise UsageError(f"SOURCE_DIR {str(source_dir)!r} is not a folder; allowed: the folder of your training code")
    requirements = source_dir / REQUIREMENTS
    if not requirements.is_file():
        raise UsageError(
            f"{requirements} does not exist; write the packages the job needs there, one per line "
            "(e.g. transformers==4.57.1), then run gpuctl vendor again"
        )
    command = pip_command(source_dir, args.python_version, args.platform or [DEFAULT_PLATFORM])
    if args.dry_run:
        print(shlex.join(command))
        return 0
    if importlib.util.find_spec("pip") is None:
        raise UsageError(f"pip is not installed for {sys.executable}; install it (python -m ensurepip) and retry")
    wheels_dir = source_dir / WHEELS
    before = _wheels(wheels_dir)
    print(f"$ {shlex.join(command)}", flush=True)
    result = subprocess.run(command, check=False)
    if result.returncode != 0:
        print(
            f"gpuctl vendor: pip download exited with status {result.returncode}; see its message above. A "
            f"package without a binary wheel for CPython {args.python_version} on "
            f"{', '.join(args.platform or [DEFAULT_PLATFORM])} cannot be vendored: pin a version that has one, "
            "or build the wheel yourself into the wheels/ folder",
            file=sys.stderr,
        )
        return 1
    _report(wheels_dir, before)
    return 0
