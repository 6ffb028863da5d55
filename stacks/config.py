"""Typed, validated environment configuration (``config/<env>.yaml``).

``load_config(name)`` reads ``config/<name>.yaml`` and returns a frozen :class:`EnvConfig`.
Every problem — an unknown environment, an unknown key (typos are errors), a region that does not exist,
an AZ outside the region, duplicate AZs, an overlapping or too-small CIDR, a negative or unsupported
retention — raises :class:`ConfigError` naming the file, the key, the bad value and what is allowed,
before any construct is built. Nothing here calls AWS: region names come from botocore's bundled
endpoint data, so ``cdk synth`` stays offline and deterministic.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpu_constructs import oidc_facts
from gpu_constructs.constants import DEFAULT_INTERFACE_ENDPOINTS
from gpu_constructs.retention import LOG_RETENTION_DAYS

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"
DEFAULT_ENV = "dev"


#: Interface endpoints allowed in ``network.interface_endpoints`` (the library's table).
INTERFACE_ENDPOINTS = DEFAULT_INTERFACE_ENDPOINTS


class ConfigError(ValueError):
    """A configuration file is missing or invalid. The message names file, key, value and what is allowed."""


@functools.cache
def known_regions() -> frozenset[str]:
    """Every region botocore knows, in all partitions, from its bundled endpoint data (no network)."""
    import botocore.session

    session = botocore.session.get_session()
    regions: set[str] = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions("ec2", partition_name=partition))
    return frozenset(regions)


def available_envs(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in config_dir.glob("*.yaml"))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


Retention = Annotated[int, Field(description="CloudWatch Logs retention in days")]


def _check_retention(value: int) -> int:
    if value not in LOG_RETENTION_DAYS:
        raise ValueError(f"must be one of the CloudWatch Logs retention values {list(LOG_RETENTION_DAYS)}")
    return value


class NetworkConfig(_Model):
    """The VPC: CIDR, subnet size, NAT and endpoints."""

    vpc_cidr: str = Field("10.0.0.0/16", description="VPC IPv4 CIDR, a private range from /16 to /24")
    subnet_cidr_mask: int = Field(
        20, description="Prefix length of every subnet (/16../28); all subnets must fit in vpc_cidr"
    )
    nat_gateways: int = Field(
        0,
        description="NAT gateways (0 = no internet path; private subnets are isolated). At most one per AZ.",
    )
    interface_endpoints: tuple[str, ...] | None = Field(
        None,
        description=(
            "Interface VPC endpoints to create (null: what the enabled features call: the SageMaker set, plus "
            f"autoscaling, ssm, ssm_messages, ec2_messages when fleets are configured); allowed: "
            f"{', '.join(INTERFACE_ENDPOINTS)}"
        ),
    )
    flow_logs_retention_days: Retention = Field(90, description="Retention of the VPC flow log group")
    reserved_cidrs: tuple[str, ...] = Field(
        (),
        description="Networks the VPC must not overlap (peered VPCs, on-premises ranges)",
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, value: str) -> str:
        try:
            net = ipaddress.IPv4Network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"not a valid IPv4 network in CIDR notation ({exc})") from None
        if not 16 <= net.prefixlen <= 24:
            raise ValueError("prefix length must be between /16 and /24 (a smaller VPC cannot hold the subnets)")
        if not net.is_private:
            raise ValueError("must be a private (RFC 1918) range such as 10.0.0.0/16")
        return value

    @field_validator("subnet_cidr_mask")
    @classmethod
    def _mask(cls, value: int) -> int:
        if not 16 <= value <= 28:
            raise ValueError("must be between 16 and 28 (AWS subnet sizes)")
        return value

    @field_validator("nat_gateways")
    @classmethod
    def _nat(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be 0 or more")
        return value

    @field_validator("interface_endpoints")
    @classmethod
    def _endpoints(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        unknown = [v for v in value if v not in INTERFACE_ENDPOINTS]
        if unknown:
            raise ValueError(f"unknown endpoint(s) {unknown}; allowed: {', '.join(INTERFACE_ENDPOINTS)}")
        if len(set(value)) != len(value):
            raise ValueError("duplicate endpoint names")
        return value

    @field_validator("flow_logs_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        return _check_retention(value)

    @field_validator("reserved_cidrs")
    @classmethod
    def _reserved(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            try:
                ipaddress.IPv4Network(item, strict=True)
            except ValueError as exc:
                raise ValueError(f"{item!r} is not a valid IPv4 CIDR ({exc})") from None
        return value

    @model_validator(mode="after")
    def _no_overlap(self) -> NetworkConfig:
        vpc = ipaddress.IPv4Network(self.vpc_cidr)
        for item in self.reserved_cidrs:
            if vpc.overlaps(ipaddress.IPv4Network(item)):
                raise ValueError(
                    f"vpc_cidr {self.vpc_cidr} overlaps reserved_cidrs entry {item}; "
                    "choose a VPC range that overlaps none of them"
                )
        if self.subnet_cidr_mask <= vpc.prefixlen:
            raise ValueError(
                f"subnet_cidr_mask /{self.subnet_cidr_mask} must be longer than the VPC prefix /{vpc.prefixlen}"
            )
        return self


class DataConfig(_Model):
    """Buckets, keys and their lifecycle."""

    log_retention_days: Retention = Field(
        90, description="Retention of the platform's CloudWatch log groups (jobs, state machines)"
    )
    access_logs_expiration_days: int = Field(365, description="Days S3 server access logs are kept")
    checkpoint_expiration_days: int = Field(
        30, description="Days training checkpoints (artifacts bucket, checkpoints/ prefix) are kept"
    )
    noncurrent_version_expiration_days: int = Field(
        30, description="Days a non-current object version is kept in versioned buckets"
    )
    abort_incomplete_multipart_upload_days: int = Field(
        7, description="Days after which incomplete multipart uploads are aborted"
    )

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        return _check_retention(value)

    @field_validator(
        "access_logs_expiration_days",
        "checkpoint_expiration_days",
        "noncurrent_version_expiration_days",
        "abort_incomplete_multipart_upload_days",
    )
    @classmethod
    def _positive_days(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be a whole number of days >= 1")
        return value


LUSTRE_DEPLOYMENT_TYPES = ("SCRATCH_2", "PERSISTENT_2")


class LustreConfig(_Model):
    """An FSx for Lustre file system in the training subnets, linked to the datasets bucket."""

    enabled: bool = Field(False, description="Create the file system (storage stack)")
    deployment_type: Literal["SCRATCH_2", "PERSISTENT_2"] = Field(
        "SCRATCH_2", description="SCRATCH_2 (temporary, not replicated) or PERSISTENT_2 (replicated, KMS key)"
    )
    storage_capacity_gib: int = Field(1200, description="1200, 2400 or a multiple of 2400 GiB")
    per_unit_storage_throughput: int | None = Field(
        None, description="PERSISTENT_2 only: 125, 250, 500 or 1000 MB/s/TiB (default 125); null for SCRATCH_2"
    )
    data_compression: bool = Field(True, description="LZ4 compression of file data")
    lustre_version: Literal["2.12", "2.15"] = Field("2.15", description="Lustre version (both support S3 links)")
    availability_zone: str | None = Field(
        None, description="AZ of the file system (one of availability_zones; default: the first)"
    )
    import_prefix: str = Field("", description="Prefix of the datasets bucket linked to the file system ('' = all)")
    file_system_path: str = Field("/datasets", description="Directory of the file system the prefix appears under")
    auto_import: bool = Field(True, description="Import new, changed and deleted S3 objects automatically")
    auto_export: bool = Field(False, description="Export new, changed and deleted files back to S3 automatically")
    mount_path: str = Field("/fsx", description="Where EC2 clients mount it")
    automatic_backup_retention_days: int | None = Field(
        None, description="PERSISTENT_2 only: daily backups kept this many days (0-90); null: no backups"
    )

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, value: int) -> int:
        from gpu_constructs.fsx_facts import allowed_capacity_text, valid_storage_capacity

        if not valid_storage_capacity(value):
            raise ValueError(f"allowed: {allowed_capacity_text()}")
        return value

    @field_validator("file_system_path", "mount_path")
    @classmethod
    def _abs_path(cls, value: str) -> str:
        if not re.fullmatch(r"/[A-Za-z0-9._/-]*", value) or ".." in value or "//" in value:
            raise ValueError("must be an absolute path of letters, digits and ._-/ without '..'")
        return value

    @field_validator("import_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if value.startswith("/") or ".." in value or not re.fullmatch(r"[A-Za-z0-9!_.*'()/=-]*", value):
            raise ValueError("must be a relative S3 key prefix of letters, digits and !_.*'()/=- without '..'")
        return value

    @model_validator(mode="after")
    def _per_type(self) -> LustreConfig:
        from gpu_constructs.fsx_facts import LUSTRE_TYPES

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
        if backup is not None and (not facts.replicated or not 0 <= backup <= 90):
            allowed = "0..90" if facts.replicated else f"null for {self.deployment_type}"
            raise ValueError(f"automatic_backup_retention_days: {backup} is not allowed; allowed: {allowed}")
        return self


class EfsConfig(_Model):
    """An optional EFS file system for small shared datasets."""

    enabled: bool = Field(False, description="Create the file system (storage stack)")
    throughput_mode: Literal["elastic", "bursting"] = Field("elastic", description="EFS throughput mode")
    transition_to_ia_days: int | None = Field(
        30, description="Move files unread this many days to Infrequent Access (1,7,14,30,60,90,180,270,365)"
    )
    automatic_backups: bool = Field(True, description="AWS Backup daily backups")

    @field_validator("transition_to_ia_days")
    @classmethod
    def _ia(cls, value: int | None) -> int | None:
        if value is not None and value not in (1, 7, 14, 30, 60, 90, 180, 270, 365):
            raise ValueError("allowed: null or one of 1, 7, 14, 30, 60, 90, 180, 270, 365")
        return value


class FileSystemsConfig(_Model):
    """Shared file systems for training data (storage stack)."""

    lustre: LustreConfig = Field(default_factory=lambda: LustreConfig())
    efs: EfsConfig = Field(default_factory=lambda: EfsConfig())


IMAGE_KINDS = ("dlc", "codebuild", "asset", "ecr")
_IMAGE_FIELDS: dict[str, tuple[str, ...]] = {
    "dlc": ("framework_version", "python", "cuda"),
    "codebuild": ("directory", "cuda_version", "build_args", "platform"),
    "asset": ("directory", "cuda_version", "build_args", "platform"),
    "ecr": ("repository_name", "tag", "cuda_version"),
}


class ImageSpec(_Model):
    """How one image reaches ECR: dlc | codebuild | asset | ecr, with that kind's options."""

    kind: Literal["dlc", "codebuild", "asset", "ecr"] = Field(
        "dlc", description="dlc (prebuilt AWS DLC), codebuild (built at deploy time), asset (local Docker), ecr"
    )
    framework_version: str | None = Field(None, description="dlc: PyTorch version, e.g. '2.8'")
    python: str | None = Field(None, description="dlc: Python tag, e.g. 'py312' (default: the version's)")
    cuda: str | None = Field(None, description="dlc: CUDA tag, e.g. 'cu129' (default: the version's)")
    directory: str | None = Field(
        None, description="codebuild/asset: build context relative to the repository root (default containers/<use>)"
    )
    cuda_version: str | None = Field(
        None, description="codebuild/asset/ecr: CUDA version of the image, e.g. '12.8' (required for builds)"
    )
    build_args: dict[str, str] = Field(default_factory=dict, description="codebuild/asset: Docker build args")
    platform: Literal["linux/amd64", "linux/arm64"] = Field("linux/amd64", description="codebuild/asset: platform")
    repository_name: str | None = Field(None, description="ecr: name of an existing repository in this account")
    tag: str | None = Field(None, description="ecr: image tag or digest (sha256:...)")

    @model_validator(mode="after")
    def _per_kind(self) -> ImageSpec:
        allowed = set(_IMAGE_FIELDS[self.kind]) | {"kind"}
        defaults = ImageSpec.model_construct()
        for name in type(self).model_fields:
            if name not in allowed and getattr(self, name) != getattr(defaults, name, None):
                users = [k for k, fields in _IMAGE_FIELDS.items() if name in fields]
                raise ValueError(f"{name} is not used by kind={self.kind!r}; it belongs to kind {', '.join(users)}")
        if self.kind == "dlc" and not self.framework_version:
            raise ValueError("kind='dlc' needs framework_version, e.g. '2.8'")
        if self.kind in ("codebuild", "asset") and not self.cuda_version:
            raise ValueError(
                f"kind={self.kind!r} needs cuda_version: the CUDA version of the Dockerfile's base image, e.g. '12.8'"
            )
        if self.kind == "ecr" and not (self.repository_name and self.tag):
            raise ValueError("kind='ecr' needs repository_name and tag")
        for name in ("cuda", "cuda_version"):
            value = getattr(self, name)
            if value is not None:
                from gpu_constructs.cuda import parse_cuda_version

                parse_cuda_version(value)
        if self.directory is not None and (self.directory.startswith("/") or ".." in self.directory):
            raise ValueError(f"directory: {self.directory!r} must be relative to the repository root, without '..'")
        return self


class ImagesConfig(_Model):
    """The training and inference images (images stack)."""

    training: ImageSpec = Field(default_factory=lambda: ImageSpec(kind="dlc", framework_version="2.8"))
    inference: ImageSpec = Field(default_factory=lambda: ImageSpec(kind="dlc", framework_version="2.6"))
    max_image_count: int = Field(10, description="codebuild: images kept per repository (1-1000)")
    untagged_image_expiry_days: int = Field(7, description="codebuild: days before untagged images expire")
    zstd_compression: bool = Field(False, description="codebuild: compress image layers with zstd")

    @field_validator("max_image_count")
    @classmethod
    def _count(cls, value: int) -> int:
        if not 1 <= value <= 1000:
            raise ValueError("allowed: 1..1000")
        return value

    @field_validator("untagged_image_expiry_days")
    @classmethod
    def _expiry(cls, value: int) -> int:
        if not 1 <= value <= 3650:
            raise ValueError("allowed: 1..3650 days")
        return value

    @model_validator(mode="after")
    def _dlc_versions(self) -> ImagesConfig:
        from gpu_constructs.dlc import resolve_dlc

        for usage in ("training", "inference"):
            spec: ImageSpec = getattr(self, usage)
            if spec.kind == "dlc":
                try:
                    resolve_dlc(
                        str(spec.framework_version), usage, python=spec.python, cuda=spec.cuda, region=None, where=usage
                    )
                except ValueError as exc:
                    raise ValueError(str(exc)) from None
        return self


class TrainingAlarmsConfig(_Model):
    """Thresholds of the training alarms (percent per GPU / per vCPU of the configured instance type)."""

    gpu_low_pct: float = Field(50, description="Input-bound alarm: GPU utilization below this ...")
    busy_pct: float = Field(80, description="... while CPU or disk utilization is above this")
    idle_gpu_pct: float = Field(5, description="Idle-GPU alarm: the least-used host's GPU utilization below this")
    period_minutes: int = Field(5, description="Metric period in minutes (1, 5, 10, 15, 30 or 60)")
    input_bound_periods: int = Field(3, description="Consecutive periods before the input-bound alarm fires")
    idle_periods: int = Field(6, description="Consecutive periods before the idle-GPU alarm fires")

    @field_validator("gpu_low_pct", "busy_pct", "idle_gpu_pct")
    @classmethod
    def _pct(cls, value: float) -> float:
        if not 0 < value <= 100:
            raise ValueError("must be a percentage in (0, 100]")
        return value

    @field_validator("period_minutes")
    @classmethod
    def _period(cls, value: int) -> int:
        if value not in (1, 5, 10, 15, 30, 60):
            raise ValueError("allowed: 1, 5, 10, 15, 30, 60")
        return value

    @field_validator("input_bound_periods", "idle_periods")
    @classmethod
    def _periods(cls, value: int) -> int:
        if not 1 <= value <= 100:
            raise ValueError("allowed: 1..100")
        return value

    @model_validator(mode="after")
    def _order(self) -> TrainingAlarmsConfig:
        if self.idle_gpu_pct >= self.gpu_low_pct:
            raise ValueError(
                f"idle_gpu_pct: {self.idle_gpu_pct} must be less than gpu_low_pct: {self.gpu_low_pct} "
                "(idle is lower than input-bound)"
            )
        return self


class TrainingPrepareConfig(_Model):
    """The optional prepare step: a SageMaker processing job running `gpuctl shard` in the training image."""

    enabled: bool = Field(False, description="Add the prepare step to the state machine")
    run_by_default: bool = Field(False, description="Run it when an execution's input does not set `prepare`")
    source_prefix: str = Field("raw/", description="Datasets-bucket prefix of the raw files: <prefix><split>/")
    instance_type: str = Field("ml.m5.4xlarge", description="Processing instance type (CPU or GPU)")
    volume_size_gb: int = Field(200, description="Volume for the raw files and the shards, GB")
    image_size: int = Field(224, description="gpuctl shard --image-size")
    shard_size: str = Field("128MB", description="gpuctl shard --shard-size")
    max_runtime_hours: int = Field(24, description="Processing job time limit, hours (1-120)")

    @field_validator("source_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value or value.startswith("/") or ".." in value or not re.fullmatch(r"[A-Za-z0-9!_.*'()/=-]+", value):
            raise ValueError("must be a non-empty relative S3 key prefix such as 'raw/imagenet/'")
        return value

    @field_validator("instance_type")
    @classmethod
    def _type(cls, value: str) -> str:
        from gpu_constructs.catalog import lookup

        it = lookup(value, where="training.prepare", param="instance_type")
        if not value.startswith("ml.") or not it.valid_for("processing"):
            raise ValueError(
                "must be an ml.* type that SageMaker processing accepts, e.g. ml.m5.4xlarge or ml.g5.2xlarge"
            )
        return value

    @field_validator("max_runtime_hours")
    @classmethod
    def _hours(cls, value: int) -> int:
        if not 1 <= value <= 120:
            raise ValueError("allowed: 1..120 hours (processing jobs run at most 5 days)")
        return value


class TrainingConfig(_Model):
    """The training pipeline (training stack): state machine, job defaults, monitoring."""

    enabled: bool = Field(False, description="Create the training stack")
    name: str = Field("train", description="Setup name; jobs are named <resource_prefix>-<name>-<id>")
    instance_type: str = Field("ml.g5.xlarge", description="Default ml.* NVIDIA GPU training type (GPU catalog)")
    instance_count: int = Field(1, description="Hosts per job; > 1 is multi-host training")
    volume_size_gb: int = Field(100, description="EBS volume per host, GB (types with local NVMe use it instead)")
    input: Literal["s3", "fsx"] = Field("s3", description="s3: channels read S3; fsx: the FSx for Lustre file system")
    input_mode: Literal["File", "FastFile", "Pipe"] = Field("FastFile", description="S3 channels' input mode")
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = Field(
        "FullyReplicated", description="S3 channels' distribution across hosts"
    )
    dataset_prefix: str = Field(
        "imagenet/", description="Datasets-bucket prefix of the dataset: <prefix><data_version>/<channel>/"
    )
    channels: tuple[str, ...] = Field(("train", "validation"), description="Channel (split) names")
    data_version: str = Field("v1", description="Default data version; executions and gpuctl may override it")
    hyperparameters: dict[str, str] = Field(
        default_factory=dict, description="Default hyperparameters of the training runtime (see its README)"
    )
    max_runtime_hours: int = Field(24, description="MaxRuntime in hours (1-672)")
    spot: bool = Field(False, description="Managed spot training with checkpoints")
    max_wait_hours: int | None = Field(
        None, description="Spot: runtime plus capacity wait, hours (1-672; default 2 x runtime, at most 672)"
    )
    max_retry_attempts: int | None = Field(None, description="SageMaker retries of a failed job (1-30)")
    network_isolation: bool = Field(False, description="No outbound network from the training container")
    inter_container_encryption: bool = Field(True, description="Encrypt traffic between hosts")
    allowed_instance_types: tuple[str, ...] | None = Field(
        None, description="Types an execution may choose (default: every NVIDIA training type that fits)"
    )
    notification_emails: tuple[str, ...] = Field((), description="E-mail addresses for failure and alarm notices")
    prepare: TrainingPrepareConfig = Field(default_factory=lambda: TrainingPrepareConfig())
    alarms: TrainingAlarmsConfig = Field(default_factory=lambda: TrainingAlarmsConfig())

    @field_validator("hyperparameters", mode="before")
    @classmethod
    def _hp_strings(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, int | float):
                item = str(item)
            out[key] = item
        return out

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9](-?[a-z0-9]){0,15}", value):
            raise ValueError("must be 1-16 lowercase letters, digits and single hyphens (part of job names)")
        return value

    @field_validator("instance_type")
    @classmethod
    def _instance(cls, value: str) -> str:
        from gpu_constructs.catalog import require_nvidia_gpu

        require_nvidia_gpu(value, where="training", usage="training")
        return value

    @field_validator("allowed_instance_types")
    @classmethod
    def _allowed(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        from gpu_constructs.catalog import require_nvidia_gpu

        for item in value or ():
            require_nvidia_gpu(item, where="training.allowed_instance_types", usage="training")
        return value

    @field_validator("instance_count")
    @classmethod
    def _count(cls, value: int) -> int:
        if not 1 <= value <= 100:
            raise ValueError("allowed: 1..100 hosts")
        return value

    @field_validator("volume_size_gb")
    @classmethod
    def _volume(cls, value: int) -> int:
        if not 1 <= value <= 16384:
            raise ValueError("allowed: 1..16384 GB")
        return value

    @field_validator("dataset_prefix")
    @classmethod
    def _dataset(cls, value: str) -> str:
        if not value.endswith("/") or value.startswith("/") or ".." in value:
            raise ValueError("must be a relative S3 prefix ending in '/', e.g. 'imagenet/'")
        if not re.fullmatch(r"[A-Za-z0-9!_.*'()/=-]+", value):
            raise ValueError("must use only letters, digits and !_.*'()/=- (an S3 key prefix)")
        return value

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must list at least one channel, e.g. [train, validation]")
        bad = [c for c in value if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", c)]
        if bad or len(set(value)) != len(value):
            raise ValueError(f"channel names must be unique and use A-Z a-z 0-9 . _ - (bad: {bad or 'duplicates'})")
        return value

    @field_validator("data_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,127}", value):
            raise ValueError("must be 1-128 letters, digits and . _ = -, starting with a letter or digit")
        return value

    @field_validator("max_runtime_hours")
    @classmethod
    def _runtime(cls, value: int) -> int:
        from gpu_constructs.training_spec import MAX_RUNTIME_LIMIT_S

        return _training_hours(value, MAX_RUNTIME_LIMIT_S, "MaxRuntimeInSeconds")

    @field_validator("max_wait_hours")
    @classmethod
    def _wait(cls, value: int | None) -> int | None:
        from gpu_constructs.training_spec import MAX_WAIT_LIMIT_S

        return None if value is None else _training_hours(value, MAX_WAIT_LIMIT_S, "MaxWaitTimeInSeconds")

    @field_validator("max_retry_attempts")
    @classmethod
    def _retries(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 30:
            raise ValueError("allowed: null or 1..30")
        return value

    @field_validator("notification_emails")
    @classmethod
    def _emails(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", v)]
        if bad:
            raise ValueError(f"{bad} are not e-mail addresses; allowed: addresses such as ml-team@example.com")
        return value

    @model_validator(mode="after")
    def _rules(self) -> TrainingConfig:
        if self.max_wait_hours is not None and not self.spot:
            raise ValueError("max_wait_hours is set but spot is false; allowed: spot: true, or max_wait_hours: null")
        if self.spot and self.max_wait_hours is not None and self.max_wait_hours < self.max_runtime_hours:
            raise ValueError(
                f"max_wait_hours: {self.max_wait_hours} is less than max_runtime_hours: {self.max_runtime_hours}; "
                "allowed: max_wait_hours >= max_runtime_hours"
            )
        if self.input == "fsx" and self.input_mode != "File":
            raise ValueError("input: fsx mounts the file system, so input_mode must be File")
        from gpu_constructs.training_spec import HP_PROCESSES_PER_HOST, check_processes_per_host

        for instance_type in (self.instance_type, *(self.allowed_instance_types or ())):
            check_processes_per_host(
                instance_type,
                self.hyperparameters.get(HP_PROCESSES_PER_HOST),
                where="training.hyperparameters",
                param=HP_PROCESSES_PER_HOST,
            )
        return self


def image_cuda_version(spec: ImageSpec, usage: Literal["training", "inference"]) -> str | None:
    """The CUDA version of a configured image: the DLC table's for ``dlc``, ``cuda_version`` otherwise (may be None)."""
    if spec.kind != "dlc":
        return spec.cuda_version
    from gpu_constructs.dlc import resolve_dlc

    image = resolve_dlc(str(spec.framework_version), usage, python=spec.python, cuda=spec.cuda, region=None)
    return image.cuda_version


def check_training_image_cuda(image: ImageSpec, training: TrainingConfig) -> None:
    """The training image's CUDA must drive the GPU of ``training.instance_type`` and of every allowed type, checked
    here so that a mismatch is a config error before any construct is built (the catalog's CUDA support windows)."""
    from gpu_constructs.catalog import cuda_support_problem

    version = image_cuda_version(image, "training")
    if version is None:
        return
    source = f"images.training (kind {image.kind}, CUDA {version})"
    for key, instance_type in (
        ("training.instance_type", training.instance_type),
        *(("training.allowed_instance_types", t) for t in training.allowed_instance_types or ()),
    ):
        problem = cuda_support_problem(instance_type, version)
        if problem is not None:
            raise ValueError(
                f"{key}: {instance_type!r} cannot run {source}: {problem}; change the instance type or the image"
            )


def _training_hours(value: int, limit_s: int, api_field: str) -> int:
    """A training time limit configured in hours, checked against SageMaker's limit in seconds (defined once, in
    gpu_constructs.training_spec) and reported in hours, the unit of the config."""
    if not 1 <= value * 3600 <= limit_s:
        raise ValueError(
            f"allowed: 1..{limit_s // 3600} hours (SageMaker {api_field} limit {limit_s} s = {limit_s // 86400} days)"
        )
    return value


class DlamiConfig(_Model):
    """The Deep Learning AMI of a fleet: the latest image of a flavour (public SSM parameter) or pinned ids."""

    framework: Literal["base", "pytorch"] = Field(
        "base", description="base: driver, CUDA, EFA, NCCL; pytorch: adds PyTorch in /opt/pytorch"
    )
    os: Literal["ubuntu-22.04", "ubuntu-24.04", "amazon-linux-2023"] = Field(
        "ubuntu-22.04", description="Operating system of the DLAMI"
    )
    pytorch_version: str | None = Field(
        None, description="framework pytorch: the PyTorch line, MAJOR.MINOR (e.g. '2.9'); null for base"
    )
    ami_ids: dict[str, str] | None = Field(
        None,
        description="Pin: region -> AMI id (a reviewed change replaces instances); null = latest from SSM",
    )
    driver: Literal["oss", "proprietary"] = Field(
        "oss", description="NVIDIA kernel modules of the image; proprietary only for a pinned AMI"
    )
    driver_branch: int | None = Field(None, description="NVIDIA driver branch of a pinned AMI, e.g. 580")
    cuda_version: str | None = Field(None, description="CUDA version the workload uses, e.g. '12.8' (checked)")

    def image(self, cpu_arch: Literal["x86_64", "arm64"]) -> Any:
        """The ``gpu_constructs.dlami.DlamiImage`` of this config for ``cpu_arch``."""
        from gpu_constructs.dlami import DlamiImage

        return DlamiImage(
            framework=self.framework,
            os=self.os,
            cpu_arch=cpu_arch,
            pytorch_version=self.pytorch_version,
            ami_ids=self.ami_ids,
            driver=self.driver,
            driver_branch=self.driver_branch,
            cuda_version=self.cuda_version,
        )

    @model_validator(mode="after")
    def _valid_image(self) -> DlamiConfig:
        self.image("x86_64")  # raises gpu_constructs.ValidationError (a ValueError) naming the bad field
        return self


class FleetSpotConfig(_Model):
    """A spot mix: the group's type plus compatible GPU types, spot above an on-demand base."""

    instance_types: tuple[str, ...] = Field(
        (), description="Further EC2 GPU types (same GPU count and CPU architecture as instance_type)"
    )
    on_demand_base_capacity: int = Field(0, description="Instances always launched on demand")
    on_demand_percentage_above_base: int = Field(0, description="Percent on demand above the base (0-100)")
    allocation_strategy: Literal[
        "price-capacity-optimized", "capacity-optimized", "capacity-optimized-prioritized", "lowest-price"
    ] = Field("price-capacity-optimized", description="Spot allocation strategy")

    @field_validator("on_demand_base_capacity")
    @classmethod
    def _base(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be 0 or more")
        return value

    @field_validator("on_demand_percentage_above_base")
    @classmethod
    def _percent(cls, value: int) -> int:
        if not 0 <= value <= 100:
            raise ValueError("allowed: 0..100")
        return value


_FLEET_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")


class FleetGroupConfig(_Model):
    """One EC2 GPU fleet (auto scaling group <resource_prefix>-<name>) on a Deep Learning AMI."""

    name: str = Field(description="Fleet name, [a-z][a-z0-9-]{0,30}; the group is <resource_prefix>-<name>")
    instance_type: str = Field(description="EC2 NVIDIA GPU type from the catalog, no 'ml.' prefix (e.g. g5.xlarge)")
    min_capacity: int = Field(0, description="Minimum instances (0: no idle GPU cost)")
    max_capacity: int = Field(1, description="Maximum instances (1 or more)")
    desired_capacity: int | None = Field(None, description="Initial instances (null: min_capacity)")
    image: DlamiConfig = Field(default_factory=lambda: DlamiConfig(), description="The Deep Learning AMI")
    spot: FleetSpotConfig | None = Field(None, description="Spot mix with capacity rebalancing (null: on demand)")
    efa: bool = Field(False, description="One EFA interface per network card (EFA types only)")
    placement_group: bool = Field(False, description="Cluster placement group in one AZ")
    availability_zone: str | None = Field(None, description="AZ of a placement-group fleet (default: the first)")
    root_volume_gib: int = Field(200, description="gp3 root volume, GiB (100-16384), KMS-encrypted")
    data_volume_gib: int | None = Field(None, description="Extra gp3 data volume mounted at /data, GiB (null: none)")
    mount_lustre: bool = Field(True, description="Mount the FSx for Lustre file system when file_systems has one")
    datasets_prefix: str = Field("", description="Datasets-bucket prefix the instances may read ('' = all)")
    artifacts_prefix: str = Field("output/", description="Artifacts-bucket prefix the instances may write")
    idle_gpu_pct: float = Field(5, description="Idle alarm: average GPU utilization of the group below this")
    idle_minutes: int = Field(60, description="... for this long (a multiple of 5, up to 1440)")
    max_gpu_temperature_c: float = Field(85, description="Temperature alarm threshold, degrees Celsius")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _FLEET_NAME.fullmatch(value):
            raise ValueError("must match [a-z][a-z0-9-]{0,30} (part of the auto scaling group name)")
        return value

    @field_validator("instance_type")
    @classmethod
    def _instance(cls, value: str) -> str:
        from gpu_constructs.catalog import require_nvidia_gpu

        require_nvidia_gpu(value, where="fleets.groups[].instance_type", usage="ec2")
        return value

    @field_validator("datasets_prefix", "artifacts_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if value.startswith("/") or ".." in value or not re.fullmatch(r"[A-Za-z0-9!_.*'()/=-]*", value):
            raise ValueError("must be a relative S3 key prefix such as 'imagenet/' ('' = the whole bucket)")
        return value

    @model_validator(mode="after")
    def _rules(self) -> FleetGroupConfig:
        from gpu_constructs.catalog import lookup, require_efa

        where = f"fleets.groups[{self.name}]"
        if self.max_capacity < 1 or not 0 <= self.min_capacity <= self.max_capacity:
            raise ValueError(
                f"min_capacity: {self.min_capacity}, max_capacity: {self.max_capacity}; "
                "allowed: 0 <= min_capacity <= max_capacity and max_capacity >= 1"
            )
        if self.desired_capacity is not None and not self.min_capacity <= self.desired_capacity <= self.max_capacity:
            raise ValueError(
                f"desired_capacity: {self.desired_capacity}; allowed: null or {self.min_capacity}..{self.max_capacity}"
            )
        it = lookup(self.instance_type)
        image = self.image.image(it.cpu_arch)
        image.check_instance_type(self.instance_type, where=where)
        spot_types = self.spot.instance_types if self.spot else ()
        for other in spot_types:
            other_it = image.check_instance_type(other, where=where, param="spot.instance_types[]")
            if other_it.nvidia_gpu_count != it.nvidia_gpu_count:
                raise ValueError(
                    f"spot.instance_types: {other!r} has {other_it.nvidia_gpu_count} GPU(s); allowed: types with "
                    f"{it.nvidia_gpu_count} GPU(s) like {self.instance_type!r}"
                )
        if self.efa:
            require_efa(self.instance_type, where=where)
            for other in spot_types:
                if require_efa(other, where=where, param="spot.instance_types[]").efa_interfaces != it.efa_interfaces:
                    raise ValueError(
                        f"spot.instance_types: {other!r} has another number of EFA interfaces than "
                        f"{self.instance_type!r} ({it.efa_interfaces}); allowed: types with the same count"
                    )
        if not 100 <= self.root_volume_gib <= 16384:
            raise ValueError(f"root_volume_gib: {self.root_volume_gib}; allowed: 100..16384")
        if self.data_volume_gib is not None and not 1 <= self.data_volume_gib <= 16384:
            raise ValueError(f"data_volume_gib: {self.data_volume_gib}; allowed: null or 1..16384")
        if not 0 <= self.idle_gpu_pct <= 100:
            raise ValueError(f"idle_gpu_pct: {self.idle_gpu_pct}; allowed: 0..100")
        if self.idle_minutes % 5 or not 5 <= self.idle_minutes <= 1440:
            raise ValueError(f"idle_minutes: {self.idle_minutes}; allowed: a multiple of 5 from 5 to 1440")
        if not 30 <= self.max_gpu_temperature_c <= 120:
            raise ValueError(f"max_gpu_temperature_c: {self.max_gpu_temperature_c}; allowed: 30..120")
        if self.availability_zone is not None and not self.placement_group:
            raise ValueError("availability_zone is set but placement_group is false; allowed: null")
        return self


class NotebookConfig(_Model):
    """One SageMaker notebook instance (<resource_prefix>-<name>) on a GPU type, checked at every start."""

    name: str = Field(description="Notebook name, [a-z][a-z0-9-]{0,30}; the instance is <resource_prefix>-<name>")
    instance_type: str = Field("ml.g5.xlarge", description="SageMaker notebook type with the 'ml.' prefix")
    gpu: bool = Field(True, description="Require an NVIDIA GPU (a CPU type is then an error naming GPU types)")
    volume_gib: int = Field(50, description="ML storage volume, GiB (5-16384), KMS-encrypted")
    gpuctl_package_key: str | None = Field(
        None,
        description=(
            "Optional override: artifacts-bucket key of a wheel providing gpuctl that the start script installs "
            "instead of the platform's own (null: the stack ships the platform's wheel as an S3 asset; nothing "
            "to upload)"
        ),
    )
    mount_lustre: bool = Field(False, description="Mount the FSx for Lustre file system at start")
    datasets_prefix: str = Field("", description="Datasets-bucket prefix the notebook may read ('' = all)")
    artifacts_prefix: str = Field("notebooks/", description="Artifacts-bucket prefix the notebook may write")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _FLEET_NAME.fullmatch(value):
            raise ValueError("must match [a-z][a-z0-9-]{0,30} (part of the notebook instance name)")
        return value

    @field_validator("volume_gib")
    @classmethod
    def _volume(cls, value: int) -> int:
        if not 5 <= value <= 16384:
            raise ValueError("allowed: 5..16384 GiB")
        return value

    @field_validator("gpuctl_package_key")
    @classmethod
    def _package(cls, value: str | None) -> str | None:
        from gpu_constructs.wheel import WHEEL_NAME_RE

        if value is not None and (
            value.startswith("/")
            or ".." in value
            or not re.fullmatch(r"[A-Za-z0-9!_.*()/=+-]+", value)
            or not WHEEL_NAME_RE.match(value.rsplit("/", 1)[-1])
        ):
            raise ValueError(
                "must be an artifacts-bucket key of a wheel (<name>-<version>-<python>-<abi>-<platform>.whl), "
                "e.g. 'tools/gpu_platform-0.1.0-py3-none-any.whl', or null for the platform's own wheel"
            )
        return value

    @field_validator("datasets_prefix", "artifacts_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if value.startswith("/") or ".." in value or not re.fullmatch(r"[A-Za-z0-9!_.*'()/=-]*", value):
            raise ValueError("must be a relative S3 key prefix such as 'notebooks/'")
        return value

    @model_validator(mode="after")
    def _instance(self) -> NotebookConfig:
        from gpu_constructs.catalog import lookup, require_nvidia_gpu

        where = f"fleets.notebooks[{self.name}].instance_type"
        if self.gpu:
            require_nvidia_gpu(self.instance_type, where=where, usage="notebook")
        elif not self.instance_type.startswith("ml.") or not lookup(self.instance_type, where=where).valid_for(
            "notebook"
        ):
            raise ValueError(f"instance_type: {self.instance_type!r}; allowed: an ml.* SageMaker notebook type")
        if not self.artifacts_prefix:
            raise ValueError("artifacts_prefix: ''; allowed: a non-empty prefix such as 'notebooks/'")
        return self


class FleetsConfig(_Model):
    """EC2 GPU fleets on Deep Learning AMIs and GPU notebook instances (fleets stack)."""

    groups: tuple[FleetGroupConfig, ...] = Field((), description="EC2 GPU fleets (auto scaling groups)")
    notebooks: tuple[NotebookConfig, ...] = Field((), description="SageMaker GPU notebook instances")
    log_retention_days: Retention = Field(30, description="Retention of the fleets' boot and kernel logs")
    notification_emails: tuple[str, ...] = Field(
        (), description="E-mail addresses subscribed to the fleets' scaling notifications and alarms"
    )

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        return _check_retention(value)

    @field_validator("notification_emails")
    @classmethod
    def _emails(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", v)]
        if bad:
            raise ValueError(f"{bad} are not e-mail addresses; allowed: addresses such as ml-team@example.com")
        return value

    @model_validator(mode="after")
    def _unique(self) -> FleetsConfig:
        names = [g.name for g in self.groups] + [n.name for n in self.notebooks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"names {dupes} are used more than once; allowed: one fleet or notebook per name")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.groups or self.notebooks)


_ENDPOINT_KEY = re.compile(r"[a-z0-9](-?[a-z0-9]){0,29}")
_WEEK_DAYS = re.compile(r"(MON|TUE|WED|THU|FRI|SAT|SUN)([-,](MON|TUE|WED|THU|FRI|SAT|SUN))*")
_S3_MODEL_URI = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/\S+\.tar\.gz")


class EndpointBatchingConfig(_Model):
    """Dynamic batching of the inference server (environment variables of the model)."""

    max_batch_size: int = Field(32, description="Most rows per forward pass (1-4096; 1 turns batching off)")
    max_batch_delay_ms: int = Field(5, description="Longest wait for a batch to fill, milliseconds (0-10000)")

    @field_validator("max_batch_size")
    @classmethod
    def _size(cls, value: int) -> int:
        if not 1 <= value <= 4096:
            raise ValueError("allowed: 1..4096")
        return value

    @field_validator("max_batch_delay_ms")
    @classmethod
    def _delay(cls, value: int) -> int:
        if not 0 <= value <= 10_000:
            raise ValueError("allowed: 0..10000 milliseconds")
        return value


class EndpointDataCaptureConfig(_Model):
    """Capture of requests and responses to s3://<artifacts>/data-capture/<endpoint>/ (KMS)."""

    sampling_percentage: int = Field(100, description="Share of requests captured, 0-100")
    capture_input: bool = Field(True, description="Capture request bodies")
    capture_output: bool = Field(True, description="Capture response bodies")

    @field_validator("sampling_percentage")
    @classmethod
    def _pct(cls, value: int) -> int:
        if not 0 <= value <= 100:
            raise ValueError("allowed: 0..100")
        return value

    @model_validator(mode="after")
    def _something(self) -> EndpointDataCaptureConfig:
        if not (self.capture_input or self.capture_output):
            raise ValueError("capture_input and capture_output are both false; allowed: at least one true")
        return self


class EndpointAsyncConfig(_Model):
    """Asynchronous inference: requests and responses in s3://<artifacts>/async/<endpoint>/, SNS notices."""

    max_concurrent_invocations_per_instance: int | None = Field(
        None, description="Requests sent to one container at once, 1-1000 (null: SageMaker chooses)"
    )
    notifications: bool = Field(True, description="Create success and error SNS topics (KMS-encrypted)")
    include_response_in_notifications: bool = Field(
        False, description="Put responses up to 128 KB into the notifications"
    )

    @field_validator("max_concurrent_invocations_per_instance")
    @classmethod
    def _concurrency(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 1000:
            raise ValueError("allowed: null or 1..1000")
        return value

    @model_validator(mode="after")
    def _response(self) -> EndpointAsyncConfig:
        if self.include_response_in_notifications and not self.notifications:
            raise ValueError(
                "include_response_in_notifications: true needs notifications: true (the topics carry the response)"
            )
        return self


class EndpointDeploymentConfig(_Model):
    """Blue/green deployment of a change (new model, image or instance type) with automatic rollback."""

    traffic: Literal["all_at_once", "canary", "linear"] = Field(
        "all_at_once", description="How traffic moves to the new fleet: all_at_once, canary or linear"
    )
    step_percent: int | None = Field(
        None, description="canary: canary size 1-50 % (default 10); linear: step 10-50 % (default 25)"
    )
    wait_minutes: int = Field(5, description="Bake time after each shift, minutes (0-60); alarms are watched")
    termination_wait_minutes: int = Field(0, description="Keep the old fleet this long after the shift (0-60)")
    max_execution_timeout_minutes: int | None = Field(
        None, description="Deployment time limit, minutes (10-480; default: bake times + model start-up + 10)"
    )
    auto_rollback: bool = Field(True, description="Roll back when a rollback alarm fires during the deployment")

    @field_validator("wait_minutes", "termination_wait_minutes")
    @classmethod
    def _minutes(cls, value: int) -> int:
        if not 0 <= value <= 60:
            raise ValueError("allowed: 0..60 minutes")
        return value

    @field_validator("max_execution_timeout_minutes")
    @classmethod
    def _timeout(cls, value: int | None) -> int | None:
        if value is not None and not 10 <= value <= 480:
            raise ValueError("allowed: null or 10..480 minutes")
        return value

    @model_validator(mode="after")
    def _step(self) -> EndpointDeploymentConfig:
        step = self.step_percent
        if self.traffic == "all_at_once" and step is not None:
            raise ValueError(f"step_percent: {step} is not used by traffic 'all_at_once'; allowed: null")
        if self.traffic == "canary" and step is not None and not 1 <= step <= 50:
            raise ValueError(f"step_percent: {step} is not a canary size; allowed: 1..50 (% of capacity)")
        if self.traffic == "linear" and step is not None and not 10 <= step <= 50:
            raise ValueError(f"step_percent: {step} is not a linear step; allowed: 10..50 (% of capacity)")
        return self

    @property
    def step(self) -> int | None:
        if self.traffic == "all_at_once":
            return None
        return self.step_percent or (10 if self.traffic == "canary" else 25)


class EndpointAlarmsConfig(_Model):
    """Alarm thresholds: they notify the alarm topic and roll deployments back."""

    max_5xx_percent: float = Field(1.0, description="5xx responses, % of invocations (0-100]")
    max_model_latency_p99_ms: float = Field(1000, description="ModelLatency p99, milliseconds (> 0)")
    max_gpu_memory_percent: float = Field(90, description="GPU memory used, % per GPU (0-100]")
    evaluation_periods: int = Field(3, description="One-minute periods evaluated (1-60)")
    datapoints_to_alarm: int = Field(2, description="Breaching periods among them that fire the alarm")

    @field_validator("max_5xx_percent", "max_gpu_memory_percent")
    @classmethod
    def _pct(cls, value: float) -> float:
        if not 0 < value <= 100:
            raise ValueError("allowed: a percentage in (0, 100]")
        return value

    @field_validator("max_model_latency_p99_ms")
    @classmethod
    def _latency(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("allowed: a positive number of milliseconds")
        return value

    @model_validator(mode="after")
    def _periods(self) -> EndpointAlarmsConfig:
        if not 1 <= self.evaluation_periods <= 60:
            raise ValueError(f"evaluation_periods: {self.evaluation_periods} is not allowed; allowed: 1..60")
        if not 1 <= self.datapoints_to_alarm <= self.evaluation_periods:
            raise ValueError(
                f"datapoints_to_alarm: {self.datapoints_to_alarm} is not allowed; "
                f"allowed: 1..evaluation_periods ({self.evaluation_periods})"
            )
        return self


class EndpointAutoscalingConfig(_Model):
    """Target tracking on the variant's instance count."""

    metric: Literal["invocations_per_instance", "gpu_utilization", "backlog_per_instance"] = Field(
        description="invocations_per_instance (per minute), gpu_utilization (% per GPU) or backlog_per_instance "
        "(async endpoints)"
    )
    target: float = Field(description="Target value of the metric (> 0; at most 100 for gpu_utilization)")
    min_capacity: int = Field(description="Fewest instances (0 only for async endpoints: scale to zero)")
    max_capacity: int = Field(description="Most instances (>= min_capacity)")
    scale_in_cooldown_seconds: int = Field(300, description="Wait after a scale-in, seconds (0-3600)")
    scale_out_cooldown_seconds: int = Field(60, description="Wait after a scale-out, seconds (0-3600)")

    @field_validator("scale_in_cooldown_seconds", "scale_out_cooldown_seconds")
    @classmethod
    def _cooldown(cls, value: int) -> int:
        if not 0 <= value <= 3600:
            raise ValueError("allowed: 0..3600 seconds")
        return value

    @model_validator(mode="after")
    def _range(self) -> EndpointAutoscalingConfig:
        if self.min_capacity < 0 or self.max_capacity < 1:
            raise ValueError(
                f"min_capacity: {self.min_capacity}, max_capacity: {self.max_capacity} are not allowed; "
                "allowed: min_capacity >= 0 and max_capacity >= 1"
            )
        if self.min_capacity > self.max_capacity:
            raise ValueError(
                f"min_capacity: {self.min_capacity} is greater than max_capacity: {self.max_capacity}; "
                "allowed: min_capacity <= max_capacity"
            )
        if self.target <= 0 or (self.metric == "gpu_utilization" and self.target > 100):
            high = "100 (% per GPU)" if self.metric == "gpu_utilization" else "any positive number"
            raise ValueError(f"target: {self.target} is not allowed for {self.metric}; allowed: > 0 and <= {high}")
        return self


class EndpointOffHoursConfig(_Model):
    """Scale the endpoint down outside working hours (scheduled actions)."""

    time_zone: str = Field("UTC", description="IANA time zone of the hours, e.g. Europe/Berlin")
    start_hour: int = Field(7, description="Working hours start (0-23): capacity returns to normal")
    end_hour: int = Field(19, description="Working hours end (0-23): capacity drops to `capacity`")
    week_days: str = Field("MON-FRI", description="Working days, cron day-of-week (MON-FRI, MON,WED,FRI)")
    capacity: int = Field(1, description="Instances outside working hours (0 only for async endpoints)")

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        import zoneinfo

        if value not in zoneinfo.available_timezones():
            raise ValueError("allowed: an IANA time zone such as UTC, Europe/Berlin or America/New_York")
        return value

    @field_validator("start_hour", "end_hour")
    @classmethod
    def _hour(cls, value: int) -> int:
        if not 0 <= value <= 23:
            raise ValueError("allowed: 0..23")
        return value

    @field_validator("week_days")
    @classmethod
    def _days(cls, value: str) -> str:
        if not _WEEK_DAYS.fullmatch(value):
            raise ValueError("allowed: a cron day-of-week field such as MON-FRI or MON,WED,FRI")
        return value

    @model_validator(mode="after")
    def _hours(self) -> EndpointOffHoursConfig:
        if self.start_hour == self.end_hour:
            raise ValueError(f"end_hour: {self.end_hour} equals start_hour; allowed: a different hour")
        if self.capacity < 0:
            raise ValueError(f"capacity: {self.capacity} is not allowed; allowed: >= 0")
        return self


class EndpointConfig(_Model):
    """One SageMaker endpoint (inference stack), named <resource_prefix>-<key>."""

    model_data: str = Field(
        description="The model.tar.gz: a key in the artifacts bucket (models/<name>/<version>/model.tar.gz), an "
        "s3://bucket/key.tar.gz URI, or ssm:<parameter name> (the URI stored there, read at each deploy)"
    )
    model_data_prefix: str = Field(
        "output/", description="ssm: model_data only: the artifacts-bucket prefix the parameter's URIs are under"
    )
    instance_type: str = Field("ml.g5.xlarge", description="ml.* hosting type from the GPU catalog")
    cpu_variant: bool = Field(False, description="Declare a CPU-only variant (then a CPU type is allowed)")
    instance_count: int = Field(1, description="Initial instances (>= 1; production: 2+ to survive an AZ outage)")
    volume_size_gb: int | None = Field(
        None, description="EBS ML storage volume, GB (1-512), only for types without local NVMe"
    )
    model_download_timeout_seconds: int = Field(1200, description="Model download and extract limit (60-3600 s)")
    startup_health_check_timeout_seconds: int = Field(600, description="Container start-up /ping limit (60-3600 s)")
    network_isolation: bool = Field(True, description="No network access for the container")
    batching: EndpointBatchingConfig | None = Field(
        None,
        description="Server batching (null: the image's own: gpu_serve 32 rows / 5 ms; the PyTorch DLC "
        "batches nothing, and refuses max_batch_size > 1: its TorchServe handler fails a whole batch on one "
        "bad request)",
    )
    environment: dict[str, str] = Field(default_factory=dict, description="Extra container environment variables")
    data_capture: EndpointDataCaptureConfig | None = Field(None, description="Request/response capture (null: off)")
    async_inference: EndpointAsyncConfig | None = Field(None, description="Asynchronous endpoint (null: real-time)")
    deployment: EndpointDeploymentConfig = Field(default_factory=lambda: EndpointDeploymentConfig())
    alarms: EndpointAlarmsConfig = Field(default_factory=lambda: EndpointAlarmsConfig())
    autoscaling: EndpointAutoscalingConfig | None = Field(None, description="Target tracking (null: fixed count)")
    off_hours: EndpointOffHoursConfig | None = Field(None, description="Scale down outside working hours")

    @field_validator("model_data")
    @classmethod
    def _model_data(cls, value: str) -> str:
        if value.startswith("ssm:"):
            name = value[4:]
            if not re.fullmatch(r"/?[a-zA-Z0-9_.\-/]{1,2047}", name):
                raise ValueError("allowed: ssm:<parameter name>, e.g. ssm:/gpu-prod/models/classifier/latest")
            return value
        if value.startswith("s3://"):
            if not _S3_MODEL_URI.fullmatch(value):
                raise ValueError("allowed: s3://<bucket>/<key>.tar.gz")
            return value
        if value.startswith("/") or ".." in value or not value.endswith(".tar.gz"):
            raise ValueError(
                "allowed: a relative key of the artifacts bucket ending in .tar.gz, e.g. "
                "models/classifier/v3/model.tar.gz; or s3://bucket/key.tar.gz; or ssm:<parameter>"
            )
        if not re.fullmatch(r"[A-Za-z0-9!_.*'()/=-]+", value):
            raise ValueError("allowed: S3 key characters A-Z a-z 0-9 !_.*'()/=-")
        return value

    @field_validator("instance_count")
    @classmethod
    def _count(cls, value: int) -> int:
        if value < 1:
            raise ValueError("allowed: 1 or more")
        return value

    @field_validator("model_download_timeout_seconds", "startup_health_check_timeout_seconds")
    @classmethod
    def _timeouts(cls, value: int) -> int:
        if not 60 <= value <= 3600:
            raise ValueError("allowed: 60..3600 seconds")
        return value

    @field_validator("environment")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k)]
        if bad:
            raise ValueError(f"variable names {bad} are not allowed; allowed: [a-zA-Z_][a-zA-Z0-9_]*")
        if len(value) > 98:
            raise ValueError("allowed: at most 98 variables (SageMaker allows 100, batching uses 2)")
        return value

    @model_validator(mode="after")
    def _consistency(self) -> EndpointConfig:
        from gpu_constructs.catalog import lookup, require_nvidia_gpu

        if self.cpu_variant:
            it = lookup(self.instance_type, where="instance_type")
            if self.instance_type != it.sagemaker_name or not it.valid_for("hosting"):
                raise ValueError(
                    f"instance_type: {self.instance_type!r} is not a SageMaker hosting type; "
                    f"allowed: an ml.* type valid for hosting such as {it.sagemaker_name!r}"
                )
        else:
            it = require_nvidia_gpu(self.instance_type, where="instance_type", usage="hosting")
        if self.volume_size_gb is not None:
            if it.has_local_nvme:
                raise ValueError(
                    f"volume_size_gb: {self.volume_size_gb} is not allowed for {self.instance_type} (it has "
                    f"{it.local_nvme_gb} GB of local NVMe that SageMaker uses instead); allowed: null"
                )
            if not 1 <= self.volume_size_gb <= 512:
                raise ValueError(f"volume_size_gb: {self.volume_size_gb} is not allowed; allowed: 1..512")
        is_async = self.async_inference is not None
        scaling = self.autoscaling
        if scaling is not None:
            allowed = (
                ("gpu_utilization", "backlog_per_instance")
                if is_async
                else ("invocations_per_instance", "gpu_utilization")
            )
            kind = "an async" if is_async else "a real-time"
            if scaling.metric not in allowed:
                raise ValueError(
                    f"autoscaling.metric: {scaling.metric!r} is not allowed for {kind} endpoint; "
                    f"allowed: {', '.join(allowed)}"
                )
            if scaling.metric == "gpu_utilization" and self.cpu_variant:
                raise ValueError("autoscaling.metric: 'gpu_utilization' is not allowed for a CPU variant")
            if scaling.min_capacity == 0 and not is_async:
                raise ValueError(
                    "autoscaling.min_capacity: 0 is not allowed for a real-time endpoint; allowed: 1 or more "
                    "(scale to zero is only for async endpoints)"
                )
            if scaling.min_capacity == 0 and scaling.metric != "backlog_per_instance":
                raise ValueError(
                    f"autoscaling.metric: {scaling.metric!r} cannot wake an endpoint scaled to zero; "
                    "allowed: backlog_per_instance when min_capacity is 0"
                )
            if not max(scaling.min_capacity, 1) <= self.instance_count <= scaling.max_capacity:
                raise ValueError(
                    f"instance_count: {self.instance_count} is outside the autoscaling range; allowed: "
                    f"{max(scaling.min_capacity, 1)}..{scaling.max_capacity}"
                )
        step = self.deployment.step
        if step is not None and self.instance_count < 2:
            raise ValueError(
                f"deployment.traffic: {self.deployment.traffic!r} needs instance_count >= 2 (a {step} % step "
                "cannot be carved out of one instance); allowed: all_at_once for a single instance"
            )
        if self.off_hours is not None:
            low = 0 if is_async else 1
            high = scaling.max_capacity if scaling else self.instance_count
            if not low <= self.off_hours.capacity <= high:
                raise ValueError(
                    f"off_hours.capacity: {self.off_hours.capacity} is not allowed; allowed: {low}..{high}"
                )
        return self


class InferenceConfig(_Model):
    """SageMaker GPU endpoints (inference stack)."""

    enabled: bool = Field(False, description="Create the inference stack")
    alarm_emails: tuple[str, ...] = Field((), description="E-mail addresses subscribed to the alarm topic")
    endpoints: dict[str, EndpointConfig] = Field(
        default_factory=dict, description="Endpoints by key (1-30 lowercase letters, digits, single hyphens)"
    )

    @field_validator("endpoints")
    @classmethod
    def _keys(cls, value: dict[str, EndpointConfig]) -> dict[str, EndpointConfig]:
        bad = [k for k in value if not _ENDPOINT_KEY.fullmatch(k)]
        if bad:
            raise ValueError(f"endpoint keys {bad} are not allowed; allowed: 1-30 lowercase letters, digits, hyphens")
        return value

    @field_validator("alarm_emails")
    @classmethod
    def _emails(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [e for e in value if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", e)]
        if bad:
            raise ValueError(f"{bad} are not e-mail addresses")
        return value

    @model_validator(mode="after")
    def _enabled(self) -> InferenceConfig:
        if self.enabled and not self.endpoints:
            raise ValueError("enabled: true needs at least one entry under endpoints")
        return self


class OidcDeployConfig(_Model):
    """An IAM role that an external GitOps runner (GitHub Actions, GitLab CI, other OIDC) assumes to deploy."""

    issuer: Literal["github", "gitlab", "custom"] = Field("github", description="OIDC issuer preset")
    issuer_url: str | None = Field(None, description="custom issuer only: its https URL")
    audience: str | None = Field(None, description="custom issuer only: the aud claim to require")
    subjects: tuple[str, ...] = Field(
        description="Exact sub claims to trust, e.g. repo:OWNER/REPO:environment:prod (no wildcards, no PRs)"
    )
    cdk_qualifier: str = Field("hnb659fds", description="Qualifier the target account was bootstrapped with")

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "provider_arn" in data:
            raise ValueError(
                "provider_arn moved to gitops.oidc_provider (one provider per issuer URL per account, shared by "
                "both roles); allowed: gitops.oidc_provider: create, existing or the provider's ARN"
            )
        return data

    @field_validator("subjects")
    @classmethod
    def _subjects(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("list at least one exact subject claim")
        wild = [v for v in value if "*" in v or "?" in v]
        if wild:
            raise ValueError(f"wildcard subject(s) {wild} would trust any branch or repository; list exact subjects")
        return value

    @field_validator("cdk_qualifier")
    @classmethod
    def _qualifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,10}", value):
            raise ValueError("must be 1-10 letters, digits, '_' or '-' (cdk bootstrap --qualifier)")
        return value

    @property
    def url(self) -> str:
        """The issuer URL (the preset's, or ``issuer_url`` for a custom issuer)."""
        return oidc_facts.issuer_url(self.issuer, self.issuer_url)


class GitOpsConfig(_Model):
    """How this environment is delivered from git.

    IAM holds one OIDC provider per issuer URL per account (a second create fails with EntityAlreadyExists), so
    exactly one environment per account creates it (`oidc_provider: create`) and every other environment of that
    account references it (`existing`, or its ARN). The synth refuses two environments of one account that would
    both create it; an environment with `account: null` may deploy into any account, so it counts as the same.
    """

    oidc_deploy_role: OidcDeployConfig | None = Field(
        None, description="Deploy role for an external runner (GitHub Actions, GitLab CI); null: none"
    )
    oidc_diff_role: OidcDeployConfig | None = Field(
        None,
        description="Read-only role for `cdk diff` on pull requests (may assume only the CDK lookup role); null: none",
    )
    oidc_provider: str = Field(
        "create",
        description=(
            "The IAM OIDC provider of the roles' issuer: create (this environment creates it; one per account), "
            "existing (the account already has it: referenced as arn:<partition>:iam::<account>:oidc-provider/"
            "<issuer host>, nothing is looked up), or that provider's ARN"
        ),
    )

    @field_validator("oidc_provider")
    @classmethod
    def _provider(cls, value: str) -> str:
        if value in (oidc_facts.CREATE, oidc_facts.EXISTING) or oidc_facts.OIDC_PROVIDER_ARN.fullmatch(value):
            return value
        raise ValueError(
            "allowed: create, existing, or an IAM OIDC provider ARN (arn:aws:iam::ACCOUNT:oidc-provider/HOST)"
        )

    @model_validator(mode="after")
    def _provider_matches_issuer(self) -> GitOpsConfig:
        match = oidc_facts.OIDC_PROVIDER_ARN.fullmatch(self.oidc_provider)
        if match is None:
            return self
        roles = {
            key: role
            for key, role in (("oidc_deploy_role", self.oidc_deploy_role), ("oidc_diff_role", self.oidc_diff_role))
            if role is not None
        }
        wrong = {key: role.url for key, role in roles.items() if oidc_facts.provider_name(role.url) != match["name"]}
        if wrong:
            raise ValueError(
                f"oidc_provider: {self.oidc_provider!r} is the provider of https://{match['name']}, but "
                + ", ".join(f"{key} uses {url}" for key, url in wrong.items())
                + f"; allowed: create, existing, or the ARN of the issuer's provider "
                f"(arn:{match['partition']}:iam::{match['account']}:oidc-provider/"
                f"{oidc_facts.provider_name(next(iter(wrong.values())))})"
            )
        return self


class PipelineConfig(_Model):
    """A self-mutating CDK pipeline (AWS CodePipeline) that tests, synthesizes and deploys from git."""

    connection_arn: str = Field(
        description="AWS CodeConnections (or CodeStar Connections) ARN of the git connection, "
        "arn:aws:codeconnections:REGION:ACCOUNT:connection/ID"
    )
    repository: str = Field(description="Repository as OWNER/REPO (GitHub, GitLab or Bitbucket)")
    branch: str = Field("main", description="Branch whose pushes run the pipeline")
    stages: tuple[str, ...] = Field(
        description="Environments deployed in order, each a config/<env>.yaml, e.g. [dev, prod]"
    )
    approve_before: tuple[str, ...] = Field(
        (), description="Stages that need a manual approval after their `cdk diff` (every production stage must)"
    )
    account: str | None = Field(
        None, description="12-digit account of the pipeline (default: this environment's account; one is needed)"
    )
    cdk_qualifier: str = Field("hnb659fds", description="Bootstrap qualifier of the target accounts")
    log_retention_days: Retention = Field(365, description="Retention of the CodeBuild log group")

    @field_validator("connection_arn")
    @classmethod
    def _connection(cls, value: str) -> str:
        if not re.fullmatch(
            r"arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z]{2}(-[a-z]+)+-\d:\d{12}:connection/"
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            value,
        ):
            raise ValueError(
                "must be a connection ARN such as arn:aws:codeconnections:us-west-2:123456789012:connection/"
                "<uuid> (create it in the console: Developer Tools > Settings > Connections)"
            )
        return value

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", value) or ".." in value:
            raise ValueError("must be OWNER/REPO (letters, digits, '_', '.', '-'), e.g. acme/gpu-platform")
        return value

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str) -> str:
        bad = not re.fullmatch(r"[A-Za-z0-9_./-]+", value) or ".." in value or value.startswith(("/", "-"))
        if bad or value.endswith(("/", ".lock")):
            raise ValueError("must be one exact branch name such as main or release/1.x (no wildcards or spaces)")
        return value

    @field_validator("stages")
    @classmethod
    def _stages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("list at least one environment, e.g. [dev, prod]")
        bad = [v for v in value if not re.fullmatch(r"[a-z][a-z0-9-]*", v)]
        if bad:
            raise ValueError(f"{bad} are not environment names; allowed: names of config/<env>.yaml files")
        dupes = sorted({v for v in value if value.count(v) > 1})
        if dupes:
            raise ValueError(f"duplicate stage(s) {dupes}; list each environment once")
        return value

    @field_validator("account")
    @classmethod
    def _account(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\d{12}", value):
            raise ValueError("must be a 12-digit AWS account id (quote it in YAML) or null")
        return value

    @field_validator("cdk_qualifier")
    @classmethod
    def _qualifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,10}", value):
            raise ValueError("must be 1-10 letters, digits, '_' or '-' (cdk bootstrap --qualifier)")
        return value

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        return _check_retention(value)

    @model_validator(mode="after")
    def _approvals(self) -> PipelineConfig:
        unknown = [s for s in self.approve_before if s not in self.stages]
        if unknown:
            raise ValueError(f"approve_before: {list(unknown)} are not stages; allowed: {', '.join(self.stages)}")
        return self


class EnvConfig(_Model):
    """One deployment environment."""

    env_name: str = Field(description="Environment name; must equal the file name (dev for dev.yaml)")
    account: str | None = Field(
        None, description="12-digit AWS account id; null keeps templates account-agnostic (dev)"
    )
    region: str = Field(description="AWS region, e.g. us-east-1; must be a region AWS publishes")
    availability_zones: tuple[str, ...] = Field(
        description="AZs to use (1-6), each in the region (e.g. us-east-1a); nothing is looked up at synth"
    )
    removal_policy: Literal["destroy", "retain"] = Field(
        "retain",
        description="What happens to stateful resources when removed from the stack (retain in prod)",
    )
    termination_protection: bool = Field(False, description="CloudFormation termination protection")
    resource_prefix: str = Field(
        "gpu", description="Prefix of named resources (jobs, endpoints); lowercase, 1-12 chars"
    )
    tags: dict[str, str] = Field(default_factory=dict, description="Tags applied to every resource")
    network: NetworkConfig = Field(default_factory=lambda: NetworkConfig())
    data: DataConfig = Field(default_factory=lambda: DataConfig())
    file_systems: FileSystemsConfig = Field(default_factory=lambda: FileSystemsConfig())
    images: ImagesConfig = Field(default_factory=lambda: ImagesConfig())
    training: TrainingConfig = Field(default_factory=lambda: TrainingConfig())
    fleets: FleetsConfig = Field(default_factory=lambda: FleetsConfig())
    inference: InferenceConfig = Field(default_factory=lambda: InferenceConfig())
    gitops: GitOpsConfig = Field(default_factory=lambda: GitOpsConfig())
    pipeline: PipelineConfig | None = Field(
        None, description="Self-mutating CodePipeline that tests and deploys the stages from git; null: none"
    )

    @field_validator("account")
    @classmethod
    def _account(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\d{12}", value):
            raise ValueError("must be a 12-digit AWS account id (quote it in YAML) or null")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        regions = known_regions()
        if value not in regions:
            import difflib

            close = difflib.get_close_matches(value, sorted(regions), n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ValueError(f"unknown AWS region; {hint}allowed: {', '.join(sorted(regions))}")
        return value

    @field_validator("resource_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,11}", value):
            raise ValueError("must match [a-z][a-z0-9-]{0,11} (used in job and endpoint names)")
        return value

    @model_validator(mode="after")
    def _azs(self) -> EnvConfig:
        azs = self.availability_zones
        if not 1 <= len(azs) <= 6:
            raise ValueError(f"availability_zones: {list(azs)} must list 1 to 6 zones")
        dupes = sorted({az for az in azs if azs.count(az) > 1})
        if dupes:
            raise ValueError(f"availability_zones: duplicate zone(s) {dupes}; list each zone once")
        pattern = re.compile(re.escape(self.region) + r"[a-z]")
        outside = [az for az in azs if not pattern.fullmatch(az)]
        if outside:
            raise ValueError(
                f"availability_zones: {outside} not in region {self.region}; "
                f"allowed: zones named {self.region}a, {self.region}b, ..."
            )
        net = self.network
        if net.nat_gateways > len(azs):
            raise ValueError(
                f"network.nat_gateways: {net.nat_gateways} exceeds the {len(azs)} configured AZs; "
                f"allowed: 0..{len(azs)}"
            )
        groups = 3 + (1 if net.nat_gateways else 0)  # training, endpoints, fleets (+ public for NAT)
        needed = groups * len(azs)
        vpc = ipaddress.IPv4Network(net.vpc_cidr)
        capacity = 2 ** (net.subnet_cidr_mask - vpc.prefixlen)
        if needed > capacity:
            raise ValueError(
                f"network.vpc_cidr: {net.vpc_cidr} is too small for {needed} subnets of "
                f"/{net.subnet_cidr_mask} ({groups} groups x {len(azs)} AZs) — it holds {capacity}; "
                "use a larger VPC or a longer subnet_cidr_mask"
            )
        return self

    @model_validator(mode="after")
    def _dlc_batching(self) -> EnvConfig:
        if self.images.inference.kind != "dlc":
            return self
        from gpu_constructs.dlc import dlc_batching_problem

        for key, endpoint in sorted(self.inference.endpoints.items()):
            problem = dlc_batching_problem(endpoint.batching.max_batch_size) if endpoint.batching else None
            if problem is not None:
                raise ValueError(f"inference.endpoints.{key}.batching.{problem} (images.inference.kind is 'dlc')")
        return self

    @model_validator(mode="after")
    def _pipeline_account(self) -> EnvConfig:
        if self.pipeline is not None and self.pipeline.account is None and self.account is None:
            raise ValueError(
                "pipeline.account: null needs account to be set; allowed: the 12-digit account id of the pipeline "
                "(CodePipeline deploys across regions and accounts only from a known account)"
            )
        return self

    @model_validator(mode="after")
    def _training_image_drives_the_gpu(self) -> EnvConfig:
        if self.training.enabled:
            check_training_image_cuda(self.images.training, self.training)
        return self

    @property
    def is_production(self) -> bool:
        return self.removal_policy == "retain" and self.termination_protection


def _format_error(path: Path, exc: ValidationError, raw: dict[str, Any]) -> str:
    lines = [f"{path}: invalid configuration"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        value: Any = raw
        for part in err["loc"]:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list | tuple) and isinstance(part, int) and part < len(value):
                value = value[int(part)]
            else:
                value = err.get("input")
                break
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            parent = _model_at(err["loc"][:-1])
            allowed = ", ".join(parent.model_fields) if parent else "see the config reference"
            msg = f"unknown key (typo?); allowed keys here: {allowed}"
        if isinstance(value, dict) and err["type"] != "extra_forbidden":
            # A rule across several keys: the message names the keys and values itself.
            lines.append(f"  {loc}: {msg}" if loc != "<root>" else f"  {msg}")
        else:
            lines.append(f"  {loc}: {value!r}: {msg}")
    return "\n".join(lines)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = EnvConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return None
        model = field.annotation
    return model


def load_config(env_name: str = DEFAULT_ENV, config_dir: Path = CONFIG_DIR) -> EnvConfig:
    """Load and validate ``config/<env_name>.yaml``; raise :class:`ConfigError` on any problem."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", env_name or ""):
        raise ConfigError(
            f"env={env_name!r} is not a valid environment name; allowed: {', '.join(available_envs(config_dir))}"
        )
    path = config_dir / f"{env_name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"env={env_name!r}: no file {path}; allowed environments: {', '.join(available_envs(config_dir))}"
        )
    return parse_config(path.read_text(), path, env_name)


def parse_config(text: str, path: Path, env_name: str | None = None) -> EnvConfig:
    """Parse YAML ``text`` (read from ``path``) into an :class:`EnvConfig`."""
    _check_indentation(text, path)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys to values, got {type(raw).__name__}")
    # YAML gives lists; the model stores tuples (immutable). Convert before strict validation.
    data = _lists_to_tuples(raw)
    try:
        config = EnvConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(path, exc, raw)) from None
    expected = env_name or path.stem
    if config.env_name != expected:
        raise ConfigError(f"{path}: env_name: {config.env_name!r} does not match the file name; allowed: {expected!r}")
    return config


def _check_indentation(text: str, path: Path) -> None:
    """Refuse tab indentation with a message that says what to do (PyYAML's own error names a 'token')."""
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip() and not line.lstrip().startswith("#"):
            raise ConfigError(
                f"{path}, line {number}: indented with a tab; YAML allows only spaces for indentation: "
                "indent with spaces (e.g. two per level)"
            )


def _lists_to_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists_to_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_lists_to_tuples(v) for v in value)
    return value
