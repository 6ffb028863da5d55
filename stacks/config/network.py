"""The ``network`` section: the VPC."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from gpu_constructs.constants import DEFAULT_INTERFACE_ENDPOINTS
from stacks.config._base import Allowed, Retention, StrictModel

#: Interface endpoints allowed in ``network.interface_endpoints`` (the library's table).
INTERFACE_ENDPOINTS = DEFAULT_INTERFACE_ENDPOINTS


class NetworkConfig(StrictModel):
    """The VPC: CIDR, subnet size, NAT and endpoints."""

    vpc_cidr: str = Field("10.0.0.0/16", description="VPC IPv4 CIDR, a private range from /16 to /24")
    subnet_cidr_mask: Annotated[int, Field(ge=16, le=28), Allowed("(AWS subnet sizes)")] = Field(
        20, description="Prefix length of every subnet (/16../28); all subnets must fit in vpc_cidr"
    )
    nat_gateways: Annotated[int, Field(ge=0), Allowed()] = Field(
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

    def network_props(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.network.GpuNetwork` this section sets.

        The stack adds the environment's zones and removal policy, and the interface endpoints: this section's
        list, or the ones the enabled features call, which depend on other sections.
        """
        from gpu_constructs.retention import retention_days

        return {
            "cidr": self.vpc_cidr,
            "subnet_cidr_mask": self.subnet_cidr_mask,
            "nat_gateways": self.nat_gateways,
            "flow_logs_retention": retention_days(self.flow_logs_retention_days, "flow_logs_retention_days"),
        }
