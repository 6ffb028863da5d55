"""The ``gitops`` section: OIDC roles for external GitOps runners."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from gpu_constructs.oidc import facts as oidc_facts
from stacks.config._base import Allowed, CdkQualifier, Check, StrictModel


class OidcDeployConfig(StrictModel):
    """An IAM role that an external GitOps runner (GitHub Actions, GitLab CI, other OIDC) assumes to deploy."""

    issuer: Literal["github", "gitlab", "custom"] = Field("github", description="OIDC issuer preset")
    issuer_url: str | None = Field(None, description="custom issuer only: its https URL")
    audience: str | None = Field(None, description="custom issuer only: the aud claim to require")
    subjects: Annotated[
        tuple[str, ...], Field(min_length=1), Allowed(message="list at least one exact subject claim")
    ] = Field(description="Exact sub claims to trust, e.g. repo:OWNER/REPO:environment:prod (no wildcards, no PRs)")
    cdk_qualifier: CdkQualifier = Field("hnb659fds", description="Qualifier the target account was bootstrapped with")

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
        wild = [v for v in value if "*" in v or "?" in v]
        if wild:
            raise ValueError(f"wildcard subject(s) {wild} would trust any branch or repository; list exact subjects")
        return value

    @property
    def url(self) -> str:
        """The issuer URL (the preset's, or ``issuer_url`` for a custom issuer)."""
        return oidc_facts.issuer_url(self.issuer, self.issuer_url)


class GitOpsConfig(StrictModel):
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
    oidc_provider: Annotated[
        str,
        Check(
            lambda v: v in (oidc_facts.CREATE, oidc_facts.EXISTING) or oidc_facts.OIDC_PROVIDER_ARN.fullmatch(v),
            "allowed: create, existing, or an IAM OIDC provider ARN (arn:aws:iam::ACCOUNT:oidc-provider/HOST)",
        ),
    ] = Field(
        "create",
        description=(
            "The IAM OIDC provider of the roles' issuer: create (this environment creates it; one per account), "
            "existing (the account already has it: referenced as arn:<partition>:iam::<account>:oidc-provider/"
            "<issuer host>, nothing is looked up), or that provider's ARN"
        ),
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
