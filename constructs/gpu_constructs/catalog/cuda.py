"""CUDA facts the GPU catalog needs: compute capabilities, toolkit support windows, driver branches.

Every number here is taken from NVIDIA documentation (sources in ``docs/gpu-instances.md``):

* compute capability per GPU: https://developer.nvidia.com/cuda-gpus and
  https://developer.nvidia.com/cuda-legacy-gpus;
* first / last CUDA toolkit and last driver branch per architecture: "CUDA Toolkit, Driver, and
  Architecture Matrix", https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html;
* ``sm_86`` first appears in CUDA 11.1 (NVIDIA forum answer on minimum CUDA per compute capability, and
  the CUDA 11.1 release); ``sm_103`` (B300) first appears in CUDA 12.9 (CUDA Features Archive, 12.9);
* CUDA 13.0 "supports all NVIDIA architectures from Turing through Grace Blackwell": Maxwell, Pascal and
  Volta are dropped (CUDA Features Archive, 13.0); Kepler was dropped in CUDA 12.0 (last: CUDA 11.x);
* minimum driver branch per CUDA major version (minor-version compatibility): CUDA 11.x >= R450
  (450.80.02 on Linux), 12.x >= R525, 13.x >= R580
  (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).

"Supports" means the toolkit can compile native code (SASS) for the architecture and its libraries ship
kernels for it. Forward compatibility through PTX JIT is deliberately not counted: a PyTorch wheel built
without a GPU's architecture fails with "no kernel image is available" on that GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

__all__ = [
    "ARCHITECTURES",
    "MIN_DRIVER_BRANCH",
    "ArchitectureSupport",
    "CudaVersion",
    "architecture_support",
    "min_driver_branch",
    "parse_cuda_version",
    "render_cuda_markdown",
]


@total_ordering
@dataclass(frozen=True)
class CudaVersion:
    """A CUDA toolkit version (major.minor); the patch level does not change architecture support."""

    major: int
    minor: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CudaVersion):
            return NotImplemented
        return (self.major, self.minor) < (other.major, other.minor)


_VERSION_RE = re.compile(r"^(?:cuda)?\s*(\d{1,2})\.(\d{1,2})(?:\.\d+)?$", re.IGNORECASE)
# PyTorch / DLC tags: cu118, cu121, cu128, cu130
_TAG_RE = re.compile(r"^cu(\d{2,3})$", re.IGNORECASE)


def parse_cuda_version(value: str | CudaVersion | tuple[int, int]) -> CudaVersion:
    """Parse ``"12.4"``, ``"12.4.1"``, ``"cuda12.8"``, a PyTorch tag ``"cu128"`` or ``(12, 4)``.

    Raises ``ValueError`` naming the value and the accepted forms.
    """
    if isinstance(value, CudaVersion):
        return value
    if isinstance(value, tuple):
        if len(value) == 2 and all(isinstance(p, int) and p >= 0 for p in value):
            return CudaVersion(value[0], value[1])
        raise ValueError(f"cuda_version={value!r} is not a (major, minor) pair of non-negative integers")
    text = str(value).strip()
    match = _VERSION_RE.match(text)
    if match:
        return CudaVersion(int(match.group(1)), int(match.group(2)))
    match = _TAG_RE.match(text)
    if match:
        digits = match.group(1)
        # cu118 -> 11.8, cu121 -> 12.1, cu130 -> 13.0 (two-digit major since CUDA 10)
        return CudaVersion(int(digits[:2]), int(digits[2:] or 0))
    raise ValueError(
        f"cuda_version={value!r} is not a CUDA version; allowed: 'MAJOR.MINOR' (e.g. '12.8'), "
        "'MAJOR.MINOR.PATCH', a PyTorch tag like 'cu128', or a (major, minor) tuple"
    )


@dataclass(frozen=True)
class ArchitectureSupport:
    """Toolkit and driver support window of one compute capability."""

    compute_capability: tuple[int, int]
    architecture: str
    first_toolkit: CudaVersion
    #: First toolkit that can no longer build for it (None: still supported).
    dropped_in: CudaVersion | None = None
    #: Last driver branch that supports the architecture (None: ongoing).
    last_driver_branch: int | None = None

    @property
    def sm(self) -> str:
        """The nvcc target name, e.g. ``sm_90``."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    @property
    def last_toolkit_major(self) -> int | None:
        """Last CUDA major version that supports the architecture (None: ongoing)."""
        return None if self.dropped_in is None else self.dropped_in.major - 1

    def supported_by(self, version: CudaVersion) -> bool:
        """True when toolkit ``version`` can build native code for this compute capability."""
        if version < self.first_toolkit:
            return False
        return self.dropped_in is None or version < self.dropped_in

    def describe_window(self) -> str:
        """Human text such as ``CUDA 9.0 to 12.x`` or ``CUDA 11.8 or newer``."""
        if self.dropped_in is None:
            return f"CUDA {self.first_toolkit} or newer"
        return f"CUDA {self.first_toolkit} to {self.last_toolkit_major}.x (dropped in CUDA {self.dropped_in})"


_CUDA_12_0 = CudaVersion(12, 0)
_CUDA_13_0 = CudaVersion(13, 0)

#: Compute capabilities of the GPUs in the catalog (plus Maxwell for M60-class GPUs), keyed by (major, minor).
ARCHITECTURES: dict[tuple[int, int], ArchitectureSupport] = {
    a.compute_capability: a
    for a in (
        ArchitectureSupport((3, 7), "Kepler", CudaVersion(6, 0), dropped_in=_CUDA_12_0, last_driver_branch=470),
        ArchitectureSupport((5, 2), "Maxwell", CudaVersion(6, 5), dropped_in=_CUDA_13_0, last_driver_branch=580),
        ArchitectureSupport((7, 0), "Volta", CudaVersion(9, 0), dropped_in=_CUDA_13_0, last_driver_branch=580),
        ArchitectureSupport((7, 5), "Turing", CudaVersion(10, 0)),
        ArchitectureSupport((8, 0), "Ampere", CudaVersion(11, 0)),
        ArchitectureSupport((8, 6), "Ampere", CudaVersion(11, 1)),
        ArchitectureSupport((8, 9), "Ada Lovelace", CudaVersion(11, 8)),
        ArchitectureSupport((9, 0), "Hopper", CudaVersion(11, 8)),
        ArchitectureSupport((10, 0), "Blackwell", CudaVersion(12, 8)),
        ArchitectureSupport((10, 3), "Blackwell Ultra", CudaVersion(12, 9)),
        ArchitectureSupport((12, 0), "Blackwell", CudaVersion(12, 8)),
    )
}

#: Minimum NVIDIA driver branch for each CUDA major version (minor-version compatibility).
MIN_DRIVER_BRANCH: dict[int, int] = {11: 450, 12: 525, 13: 580}


def architecture_support(compute_capability: tuple[int, int]) -> ArchitectureSupport:
    """The support window of a compute capability; ``KeyError`` names the known ones."""
    try:
        return ARCHITECTURES[compute_capability]
    except KeyError:
        known = ", ".join(f"{m}.{n}" for m, n in sorted(ARCHITECTURES))
        raise KeyError(f"compute capability {compute_capability} is not in the table; known: {known}") from None


def min_driver_branch(cuda_version: str | CudaVersion | tuple[int, int]) -> int:
    """Minimum NVIDIA driver branch (e.g. 525) that runs code built with ``cuda_version``."""
    version = parse_cuda_version(cuda_version)
    try:
        return MIN_DRIVER_BRANCH[version.major]
    except KeyError:
        known = ", ".join(f"{m}.x" for m in sorted(MIN_DRIVER_BRANCH))
        raise ValueError(
            f"cuda_version={str(version)!r} has no documented driver minimum here; known: {known}"
        ) from None


def render_cuda_markdown() -> str:
    """The architecture support table of ``docs/gpu-instances.md`` (kept in sync by a test)."""
    lines = [
        "| Compute capability | nvcc target | Architecture | First CUDA toolkit | Dropped in | Last driver branch |",
        "|---|---|---|---|---|---|",
    ]
    for cc in sorted(ARCHITECTURES):
        a = ARCHITECTURES[cc]
        dropped = "-" if a.dropped_in is None else f"CUDA {a.dropped_in} (last: {a.last_toolkit_major}.x)"
        driver = "ongoing" if a.last_driver_branch is None else f"R{a.last_driver_branch}"
        lines.append(f"| {cc[0]}.{cc[1]} | {a.sm} | {a.architecture} | CUDA {a.first_toolkit} | {dropped} | {driver} |")
    return "\n".join(lines) + "\n"
