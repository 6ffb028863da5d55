"""Helpers shared by the unit tests: a small isolated stack, per-environment template fixtures, and the problem a
config file edited in memory reports."""

from __future__ import annotations

from pathlib import Path
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


def edited_config_problem(env: str, **replacements: str) -> str:
    """The problem text ``parse_config`` reports for ``config/<env>.yaml`` with ``replacements`` (old text -> new
    text, each old text found exactly once): what a user sees below the file's "invalid configuration" line."""
    from stacks.config import CONFIG_DIR, ConfigError, parse_config

    text = (CONFIG_DIR / f"{env}.yaml").read_text()
    for old, new in replacements.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    with pytest.raises(ConfigError) as info:
        parse_config(text, Path(f"config/{env}.yaml"))
    head, problem = str(info.value).split("\n", 1)
    assert head == f"config/{env}.yaml: invalid configuration"
    return problem
