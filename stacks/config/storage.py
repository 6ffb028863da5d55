"""The ``file_systems`` section: FSx for Lustre and EFS."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from gpu_constructs.file_systems.fsx_facts import (
    DEPLOYMENT_TYPES,
    LUSTRE_TYPES,
    LustreDeploymentTypeName,
    allowed_capacity_text,
    valid_storage_capacity,
)
from stacks.config._base import Allowed, Check, S3KeyPrefix, StrictModel

if TYPE_CHECKING:
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3

LUSTRE_DEPLOYMENT_TYPES = DEPLOYMENT_TYPES

#: An absolute path on the file system or the client: letters, digits and ._-/, no '..' or '//'.
AbsolutePath = Annotated[
    str,
    Field(pattern=r"^/[A-Za-z0-9._/-]*$"),
    Check(lambda v: ".." not in v and "//" not in v, "not a plain absolute path"),
    Allowed(message="must be an absolute path of letters, digits and ._-/ without '..'"),
]

#: Days after which EFS moves an unread file to Infrequent Access (the lifecycle policies EFS offers).
EfsIaDays = Literal[1, 7, 14, 30, 60, 90, 180, 270, 365]


class LustreConfig(StrictModel):
    """An FSx for Lustre file system in the training subnets, linked to the datasets bucket."""

    enabled: bool = Field(False, description="Create the file system (storage stack)")
    deployment_type: LustreDeploymentTypeName = Field(
        "SCRATCH_2", description="SCRATCH_2 (temporary, not replicated) or PERSISTENT_2 (replicated, KMS key)"
    )
    storage_capacity_gib: Annotated[int, Check(valid_storage_capacity, f"allowed: {allowed_capacity_text()}")] = Field(
        1200, description="1200, 2400 or a multiple of 2400 GiB"
    )
    per_unit_storage_throughput: int | None = Field(
        None, description="PERSISTENT_2 only: 125, 250, 500 or 1000 MB/s/TiB (default 125); null for SCRATCH_2"
    )
    data_compression: bool = Field(True, description="LZ4 compression of file data")
    lustre_version: Literal["2.12", "2.15"] = Field("2.15", description="Lustre version (both support S3 links)")
    availability_zone: str | None = Field(
        None, description="AZ of the file system (one of availability_zones; default: the first)"
    )
    import_prefix: S3KeyPrefix = Field(
        "", description="Prefix of the datasets bucket linked to the file system ('' = all)"
    )
    file_system_path: AbsolutePath = Field(
        "/datasets", description="Directory of the file system the prefix appears under"
    )
    auto_import: bool = Field(True, description="Import new, changed and deleted S3 objects automatically")
    auto_export: bool = Field(False, description="Export new, changed and deleted files back to S3 automatically")
    mount_path: AbsolutePath = Field("/fsx", description="Where EC2 clients mount it")
    automatic_backup_retention_days: Annotated[int, Field(ge=0, le=90), Allowed()] | None = Field(
        None, description="PERSISTENT_2 only: daily backups kept this many days (0-90); null: no backups"
    )

    @model_validator(mode="after")
    def _per_type(self) -> LustreConfig:
        facts = LUSTRE_TYPES[self.deployment_type]
        tier = self.per_unit_storage_throughput
        if not facts.per_unit_throughputs and tier is not None:
            raise ValueError(
                f"per_unit_storage_throughput: {tier} is not allowed for {self.deployment_type}; allowed: null "
                "(use PERSISTENT_2 to choose 125, 250, 500 or 1000)"
            )
        if facts.per_unit_throughputs and tier is not None and tier not in facts.per_unit_throughputs:
            raise ValueError(
                f"per_unit_storage_throughput: {tier} is not allowed for {self.deployment_type}; allowed: "
                f"{', '.join(map(str, facts.per_unit_throughputs))}"
            )
        backup = self.automatic_backup_retention_days
        if backup is not None and not facts.replicated:
            raise ValueError(
                f"automatic_backup_retention_days: {backup} is not allowed; allowed: null for {self.deployment_type}"
            )
        return self

    def file_system_props(self, *, key: kms.IKey, datasets_bucket: s3.IBucket) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.file_systems.fsx.GpuLustreFileSystem` this section sets.

        :param key: the data key; only a PERSISTENT_2 file system takes it (SCRATCH_2 supports no customer key).
        :param datasets_bucket: the bucket the file system links to, under ``import_prefix``.

        The stack adds the VPC, the subnet of the file system's zone and the removal policy.
        """
        from aws_cdk import Duration

        from gpu_constructs.file_systems.fsx import LustreDataRepository

        backup = self.automatic_backup_retention_days
        return {
            "deployment_type": self.deployment_type,
            "storage_capacity_gib": self.storage_capacity_gib,
            "per_unit_storage_throughput": self.per_unit_storage_throughput,
            "data_compression": self.data_compression,
            "kms_key": key if self.deployment_type == "PERSISTENT_2" else None,
            "lustre_version": self.lustre_version,
            "mount_path": self.mount_path,
            "automatic_backup_retention": Duration.days(backup) if backup is not None else None,
            "data_repository": LustreDataRepository(
                bucket=datasets_bucket,
                prefix=self.import_prefix,
                file_system_path=self.file_system_path,
                auto_import=self.auto_import,
                auto_export=self.auto_export,
            ),
        }


class EfsConfig(StrictModel):
    """An optional EFS file system for small shared datasets."""

    enabled: bool = Field(False, description="Create the file system (storage stack)")
    throughput_mode: Literal["elastic", "bursting"] = Field("elastic", description="EFS throughput mode")
    transition_to_ia_days: Annotated[EfsIaDays | None, Allowed()] = Field(
        30, description="Move files unread this many days to Infrequent Access (1,7,14,30,60,90,180,270,365)"
    )
    automatic_backups: bool = Field(True, description="AWS Backup daily backups")

    def file_system_props(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.file_systems.efs.GpuEfsFileSystem` this section sets
        (the stack adds the VPC, subnets, data key and removal policy)."""
        return {
            "throughput_mode": self.throughput_mode,
            "transition_to_ia_days": self.transition_to_ia_days,
            "automatic_backups": self.automatic_backups,
        }


class FileSystemsConfig(StrictModel):
    """Shared file systems for training data (storage stack)."""

    lustre: LustreConfig = Field(default_factory=lambda: LustreConfig())
    efs: EfsConfig = Field(default_factory=lambda: EfsConfig())
