"""A pipeline deployment stage: one environment's platform stacks, built exactly as ``make synth`` builds them."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from stacks.config import EnvConfig
from stacks.naming import pascal_case
from stacks.platform_stacks import build_platform_stacks


def stage_id(env_name: str) -> str:
    """PascalCase construct id of an environment's stage: ``dev`` -> ``Dev``, ``eu-prod`` -> ``EuProd``."""
    return pascal_case(env_name)


class PlatformStage(cdk.Stage):
    """The platform stacks of ``config`` (same ids, names and templates as at the app root).

    :param config: the environment to build. Its ``account`` and ``region`` are the stage's environment; with
        ``account: null`` the stacks stay account-agnostic and the pipeline deploys them into its own account.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        **kwargs: Any,
    ) -> None:
        env = cdk.Environment(account=config.account, region=config.region)
        super().__init__(scope, construct_id, env=env, **kwargs)
        self.config = config
        self.platform = build_platform_stacks(self, config)
