"""Helpers shared by the unit tests: a small isolated stack, and per-environment template fixtures."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2


def isolated_vpc_stack() -> tuple[cdk.Stack, ec2.Vpc]:
    """A fresh stack (us-east-1) holding a two-AZ VPC with one isolated "Training" subnet group, no NAT."""
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="111122223333", region="us-east-1"))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        availability_zones=["us-east-1a", "us-east-1b"],
        nat_gateways=0,
        subnet_configuration=[
            ec2.SubnetConfiguration(name="Training", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24)
        ],
    )
    return stack, vpc


def env_template_fixtures(suffix: str, dev_name: str = "dev", prod_name: str = "prod") -> tuple[Any, Any]:
    """Module-scoped fixtures ``dev_name`` and ``prod_name``: the dev and prod app's ``-<suffix>`` stack template.

    Use as ``dev, prod = env_template_fixtures("network")`` at module level (the names must match).
    """

    def fixture(env: str, name: str) -> Any:
        @pytest.fixture(scope="module", name=name)
        def template(synth: Any) -> assertions.Template:
            return assertions.Template.from_json(synth(env).template(suffix))

        return template

    return fixture("dev", dev_name), fixture("prod", prod_name)
