"""The GitOps stack: the OIDC deploy role that an external runner assumes to run ``cdk diff`` / ``cdk deploy``."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpu_constructs.oidc import GitOpsDeployRole, Mode
from stacks.config import EnvConfig, OidcDeployConfig


class GitOpsStack(Stack):
    """OIDC trust for the configured repository and branch/environment; may only assume CDK bootstrap roles."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        deploy: OidcDeployConfig | None,
        diff: OidcDeployConfig | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.deploy_role = self._role("DeployRole", "deploy", deploy, config) if deploy else None
        self.diff_role = self._role("DiffRole", "diff", diff, config) if diff else None

    def _role(self, construct_id: str, mode: Mode, oidc: OidcDeployConfig, config: EnvConfig) -> GitOpsDeployRole:
        provider: iam.IOidcProvider | None = None
        if oidc.provider_arn:
            provider = iam.OidcProviderNative.from_oidc_provider_arn(self, f"{construct_id}Provider", oidc.provider_arn)
        elif mode == "diff" and self.deploy_role is not None and oidc.issuer == self._deploy_issuer:
            provider = self.deploy_role.provider  # one provider per issuer URL per account
        role = GitOpsDeployRole(
            self,
            construct_id,
            mode=mode,
            subjects=oidc.subjects,
            issuer=oidc.issuer,
            issuer_url=oidc.issuer_url,
            audience=oidc.audience,
            provider=provider,
            cdk_qualifier=oidc.cdk_qualifier,
            target_regions=[config.region],
        )
        if mode == "deploy":
            self._deploy_issuer = oidc.issuer
        CfnOutput(self, f"{construct_id}Arn", value=role.role_arn, description=f"role-to-assume for CI ({mode})")
        return role

    _deploy_issuer: str | None = None
