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
    interface_endpoints: tuple[str, ...] = Field(
        tuple(INTERFACE_ENDPOINTS),
        description=f"Interface VPC endpoints to create; allowed: {', '.join(INTERFACE_ENDPOINTS)}",
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
    def _endpoints(cls, value: tuple[str, ...]) -> tuple[str, ...]:
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


def _lists_to_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists_to_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_lists_to_tuples(v) for v in value)
    return value
