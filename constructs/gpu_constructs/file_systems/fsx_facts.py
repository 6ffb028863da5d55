"""Documented facts of FSx for Lustre and the helpers that need no CDK: sizing and the SageMaker channel.

Importing this module does not load the CDK, so the config model and the operator CLI use it directly;
:mod:`gpu_constructs.file_systems.fsx` re-exports everything. Sources of every number: see
:mod:`gpu_constructs.file_systems.fsx`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from gpu_constructs.errors import ValidationError, fail, is_token

#: An absolute path of a file system or of its mount point as the platform accepts it: ``/`` then letters, digits and
#: ``._/-`` (each construct adds what it also refuses: ``..``, ``//``, the root alone).
ABSOLUTE_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]*$")

__all__ = [
    "CAPACITY_FIRST_STEPS",
    "CAPACITY_INCREMENT_GIB",
    "CHUNK_SIZE_RANGE_MIB",
    "DEPLOYMENT_TYPES",
    "DRA_LUSTRE_VERSIONS",
    "FILE_SYSTEM_ID_ALLOWED",
    "FILE_SYSTEM_ID_RE",
    "LUSTRE_PORT_RANGES",
    "LUSTRE_TYPES",
    "LUSTRE_VERSIONS",
    "MAX_DATA_REPOSITORY_ASSOCIATIONS",
    "AccessMode",
    "FileSystemType",
    "LustreDeploymentTypeName",
    "LustreSizing",
    "LustreTypeFacts",
    "allowed_capacity_text",
    "check_deployment_type",
    "is_file_system_id",
    "sagemaker_channel",
    "size_lustre",
    "valid_storage_capacity",
]


#: A file system id as the FSx API defines it (botocore ``fsx/2018-03-01/service-2.json``, shape
#: ``FileSystemId``: pattern ``^(fs-[0-9a-f]{8,})$``, length 11 to 21, so 8 to 18 hex digits); SageMaker's
#: ``FileSystemDataSource.FileSystemId`` (``sagemaker/2017-07-24``) has the same pattern and lengths.
FILE_SYSTEM_ID_RE = re.compile(r"^fs-[0-9a-f]{8,18}$")
FILE_SYSTEM_ID_ALLOWED = "a file system id 'fs-' + 8 to 18 lowercase hex digits, such as 'fs-0123456789abcdef0'"


def is_file_system_id(value: Any) -> bool:
    """True when ``value`` is a well-formed FSx (or SageMaker channel) file system id (see FILE_SYSTEM_ID_RE)."""
    return isinstance(value, str) and FILE_SYSTEM_ID_RE.fullmatch(value) is not None


LustreDeploymentTypeName = Literal["SCRATCH_2", "PERSISTENT_2"]
#: The deployment types the platform supports (SCRATCH_1 and PERSISTENT_1 are previous generations).
DEPLOYMENT_TYPES: tuple[LustreDeploymentTypeName, ...] = get_args(LustreDeploymentTypeName)

#: Lustre network ports (TCP): 988 (LNet) and the range 1018-1023.
LUSTRE_PORT_RANGES: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))

#: Lustre versions that support data repository associations.
DRA_LUSTRE_VERSIONS: tuple[str, ...] = ("2.12", "2.15")
#: Lustre versions the platform creates.
LUSTRE_VERSIONS: tuple[str, ...] = ("2.12", "2.15")
MAX_DATA_REPOSITORY_ASSOCIATIONS = 8

CAPACITY_FIRST_STEPS: tuple[int, ...] = (1200, 2400)
CAPACITY_INCREMENT_GIB = 2400
#: ``ImportedFileChunkSize`` of a data repository association, MiB (1 to 512,000).
CHUNK_SIZE_RANGE_MIB = (1, 512_000)


@dataclass(frozen=True)
class LustreTypeFacts:
    """Documented facts of one deployment type (SSD storage)."""

    name: LustreDeploymentTypeName
    #: Allowed ``PerUnitStorageThroughput`` values, MB/s/TiB (empty: the type takes none).
    per_unit_throughputs: tuple[int, ...]
    #: Disk read throughput, MB/s per TiB of storage, per throughput tier (key None: the type's only tier).
    disk_read_mbps_per_tib: dict[int | None, int]
    #: Baseline network throughput, MB/s per TiB (reads served from the file servers' cache).
    network_baseline_mbps_per_tib: dict[int | None, int]
    #: Whether a customer managed KMS key can be chosen.
    customer_kms_key: bool
    replicated: bool
    note: str = ""

    def read_mbps_per_tib(self, tier: int | None) -> int:
        return self.disk_read_mbps_per_tib[tier]


LUSTRE_TYPES: dict[LustreDeploymentTypeName, LustreTypeFacts] = {
    "SCRATCH_2": LustreTypeFacts(
        name="SCRATCH_2",
        per_unit_throughputs=(),
        disk_read_mbps_per_tib={None: 200},
        network_baseline_mbps_per_tib={None: 200},
        customer_kms_key=False,
        replicated=False,
        note="temporary storage: data is not replicated and is lost if a file server fails",
    ),
    "PERSISTENT_2": LustreTypeFacts(
        name="PERSISTENT_2",
        per_unit_throughputs=(125, 250, 500, 1000),
        disk_read_mbps_per_tib={125: 125, 250: 250, 500: 500, 1000: 1000},
        network_baseline_mbps_per_tib={125: 320, 250: 640, 500: 1300, 1000: 2600},
        customer_kms_key=True,
        replicated=True,
        note="long-term storage: data is replicated and file servers are replaced if they fail",
    ),
}


def allowed_capacity_text() -> str:
    return "1200, 2400, or a multiple of 2400 (4800, 7200, ...) GiB"


def valid_storage_capacity(capacity_gib: int) -> bool:
    """True when ``capacity_gib`` is a valid SSD capacity of SCRATCH_2 / PERSISTENT_2."""
    if isinstance(capacity_gib, bool) or not isinstance(capacity_gib, int):
        return False
    return capacity_gib in CAPACITY_FIRST_STEPS or (capacity_gib > 0 and capacity_gib % CAPACITY_INCREMENT_GIB == 0)


def _round_up_capacity(needed_gib: float) -> int:
    """The smallest valid capacity >= ``needed_gib``."""
    for step in CAPACITY_FIRST_STEPS:
        if needed_gib <= step:
            return step
    return int(math.ceil(needed_gib / CAPACITY_INCREMENT_GIB) * CAPACITY_INCREMENT_GIB)


def check_deployment_type(where: str, value: Any) -> LustreDeploymentTypeName:
    """Return the deployment type name (``SCRATCH_2`` / ``PERSISTENT_2``; enum members too) or raise."""
    name = getattr(value, "value", value)
    for known in DEPLOYMENT_TYPES:
        if name == known:
            return known
    raise fail(where, "deployment_type", name, ", ".join(DEPLOYMENT_TYPES))


# --------------------------------------------------------------------------------------------------
# Sizing
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LustreSizing:
    """A valid configuration chosen by :func:`size_lustre`."""

    #: ``SCRATCH_2`` or ``PERSISTENT_2``.
    deployment_type: LustreDeploymentTypeName
    #: Storage capacity in GiB (1200, 2400 or a multiple of 2400).
    storage_capacity_gib: int
    #: ``PerUnitStorageThroughput`` (None for SCRATCH_2).
    per_unit_storage_throughput: int | None
    #: Sustained read throughput from disk, MB/s (capacity in TiB x disk MB/s/TiB).
    read_throughput_mbps: float
    #: Baseline network throughput, MB/s (reads of cached data can reach this).
    network_baseline_mbps: float
    #: Why this capacity: "dataset" (storage-bound) or "throughput" (throughput-bound).
    bound_by: Literal["dataset", "throughput"]

    def describe(self) -> str:
        tier = "" if self.per_unit_storage_throughput is None else f" at {self.per_unit_storage_throughput} MB/s/TiB"
        return (
            f"{self.deployment_type} {self.storage_capacity_gib} GiB{tier}: {self.read_throughput_mbps:,.0f} MB/s "
            f"sustained read ({self.bound_by}-bound)"
        )


def size_lustre(
    dataset_size_gib: float,
    target_read_mbps: float,
    *,
    deployment_type: LustreDeploymentTypeName = "PERSISTENT_2",
    fill_ratio: float = 0.9,
    max_storage_capacity_gib: int | None = None,
    per_unit_storage_throughputs: Iterable[int] | None = None,
    where: str = "size_lustre",
) -> LustreSizing:
    """Pick the capacity (and PERSISTENT_2 throughput tier) for a dataset and a target read throughput.

    :param dataset_size_gib: bytes the file system must hold, in GiB (after import; LZ4 savings are not
        counted, so the estimate is conservative).
    :param target_read_mbps: aggregate sustained read throughput the training fleet needs, MB/s.
    :param deployment_type: SCRATCH_2 or PERSISTENT_2 (default) — a durability decision, not a sizing one.
    :param fill_ratio: the dataset may fill at most this share of the capacity (default 0.9).
    :param max_storage_capacity_gib: the largest capacity allowed (e.g. your account's FSx quota;
        default: no limit).
    :param per_unit_storage_throughputs: PERSISTENT_2 tiers to consider (default: all of 125, 250, 500, 1000).

    Rule: the smallest valid capacity that holds ``dataset / fill_ratio`` and whose sustained disk read
    throughput (capacity in TiB x MB/s/TiB) reaches the target; among PERSISTENT_2 tiers with that smallest
    capacity, the lowest tier. Raises :class:`ValidationError` explaining why no configuration fits.
    """
    kind = check_deployment_type(where, deployment_type)
    facts = LUSTRE_TYPES[kind]
    for name, value in (("dataset_size_gib", dataset_size_gib), ("target_read_mbps", target_read_mbps)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isinf(value):
            raise fail(where, name, value, "a positive, finite number")
    if not 0.1 <= fill_ratio <= 1.0:
        raise fail(where, "fill_ratio", fill_ratio, "a number in [0.1, 1.0]")
    if max_storage_capacity_gib is not None and not valid_storage_capacity(max_storage_capacity_gib):
        raise fail(where, "max_storage_capacity_gib", max_storage_capacity_gib, allowed_capacity_text())
    tiers: list[int | None]
    if facts.per_unit_throughputs:
        tiers = list(
            facts.per_unit_throughputs if per_unit_storage_throughputs is None else per_unit_storage_throughputs
        )
        bad = [t for t in tiers if t not in facts.per_unit_throughputs]
        if bad or not tiers:
            raise fail(
                where, "per_unit_storage_throughputs", tiers, f"a non-empty subset of {facts.per_unit_throughputs}"
            )
        tiers = sorted(set(tiers))  # type: ignore[type-var]
    else:
        if per_unit_storage_throughputs is not None:
            raise fail(where, "per_unit_storage_throughputs", list(per_unit_storage_throughputs), f"None for {kind}")
        tiers = [None]

    storage_floor = _round_up_capacity(dataset_size_gib / fill_ratio)
    options: list[tuple[int, int, int | None]] = []  # (capacity, tier sort key, tier)
    for tier in tiers:
        per_tib = facts.read_mbps_per_tib(tier)
        needed_for_throughput = target_read_mbps / per_tib * 1024
        capacity = max(storage_floor, _round_up_capacity(needed_for_throughput))
        options.append((capacity, tier or 0, tier))
    options.sort()
    capacity, _, tier = options[0]
    if max_storage_capacity_gib is not None and capacity > max_storage_capacity_gib:
        best_tier = tiers[-1]
        reachable = max_storage_capacity_gib / 1024 * facts.read_mbps_per_tib(best_tier)
        holds = max_storage_capacity_gib * fill_ratio
        reasons = []
        if storage_floor > max_storage_capacity_gib:
            reasons.append(
                f"the dataset needs {storage_floor} GiB at fill_ratio={fill_ratio} but at most "
                f"{max_storage_capacity_gib} GiB is allowed (holds {holds:,.0f} GiB)"
            )
        if reachable < target_read_mbps:
            tier_text = "" if best_tier is None else f" at {best_tier} MB/s/TiB"
            reasons.append(
                f"{max_storage_capacity_gib} GiB{tier_text} reads at most {reachable:,.0f} MB/s, "
                f"below target_read_mbps={target_read_mbps:,.0f}"
            )
        hint = (
            " Use PERSISTENT_2 (up to 1000 MB/s/TiB), raise the capacity limit, or shard the dataset over "
            "several file systems."
            if kind == "SCRATCH_2"
            else " Raise the capacity limit (FSx service quota) or shard the dataset over several file systems."
        )
        raise ValidationError(where, f"no valid {kind} configuration fits: {'; '.join(reasons)}.{hint}")
    per_tib = facts.read_mbps_per_tib(tier)
    tib = capacity / 1024
    bound: Literal["dataset", "throughput"] = "dataset" if capacity == storage_floor else "throughput"
    return LustreSizing(
        deployment_type=kind,
        storage_capacity_gib=capacity,
        per_unit_storage_throughput=tier,
        read_throughput_mbps=tib * per_tib,
        network_baseline_mbps=tib * facts.network_baseline_mbps_per_tib[tier],
        bound_by=bound,
    )


# --------------------------------------------------------------------------------------------------
# SageMaker channel
# --------------------------------------------------------------------------------------------------

FileSystemType = Literal["FSxLustre", "EFS"]
AccessMode = Literal["ro", "rw"]
_CHANNEL_NAME_RE = re.compile(r"^[A-Za-z0-9.\-_]+$")


def sagemaker_channel(
    *,
    file_system_id: str,
    file_system_type: FileSystemType,
    directory_path: str,
    channel_name: str = "training",
    access_mode: AccessMode = "ro",
    content_type: str | None = None,
    where: str = "sagemaker_channel",
) -> dict[str, Any]:
    """One ``InputDataConfig`` entry of ``CreateTrainingJob`` reading from a file system.

    The job also needs a ``VpcConfig`` with a subnet in the file system's AZ and a security group that
    the file system admits (``GpuLustreFileSystem.allow_clients``).
    """
    if file_system_type not in get_args(FileSystemType):
        raise fail(where, "file_system_type", file_system_type, ", ".join(get_args(FileSystemType)))
    if access_mode not in get_args(AccessMode):
        raise fail(where, "access_mode", access_mode, "'ro' (read-only) or 'rw' (read-write)")
    if not is_token(channel_name) and not (_CHANNEL_NAME_RE.fullmatch(channel_name or "") and len(channel_name) <= 64):
        raise fail(where, "channel_name", channel_name, "1-64 characters of letters, digits, '.', '-' and '_'")
    if not is_token(file_system_id) and not is_file_system_id(file_system_id):
        raise fail(where, "file_system_id", file_system_id, FILE_SYSTEM_ID_ALLOWED)
    if not is_token(directory_path) and (not str(directory_path).startswith("/") or ".." in directory_path):
        raise fail(where, "directory_path", directory_path, "an absolute path without '..'")
    channel: dict[str, Any] = {
        "ChannelName": channel_name,
        "DataSource": {
            "FileSystemDataSource": {
                "FileSystemId": file_system_id,
                "FileSystemType": file_system_type,
                "FileSystemAccessMode": access_mode,
                "DirectoryPath": directory_path,
            }
        },
        "InputMode": "File",
    }
    if content_type:
        channel["ContentType"] = content_type
    return channel
