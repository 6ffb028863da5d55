"""``GitOpsDeployRole``: an IAM role that an external GitOps runner (GitHub Actions, GitLab CI, any OIDC issuer)
assumes with its job's OIDC token to run ``cdk diff`` / ``cdk deploy``.

The role trusts exactly the configured subjects (a repository + branch or deployment environment): wildcard
subjects are rejected, and so are pull-request subjects, because code from a pull request must never be able
to deploy. The role can do nothing itself except assume the CDK bootstrap roles of the target account and
region(s) (deploy, file/image publishing, lookup), which carry the deployment permissions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpu_constructs.errors import ValidationError, fail, is_token, path_of

Issuer = Literal["github", "gitlab", "custom"]
Mode = Literal["deploy", "diff"]

#: The CDK bootstrap roles (``cdk bootstrap``'s default template) a deploy needs.
CDK_BOOTSTRAP_ROLES: tuple[str, ...] = ("deploy", "file-publishing", "image-publishing", "lookup")
DEFAULT_CDK_QUALIFIER = "hnb659fds"


@dataclass(frozen=True)
class IssuerPreset:
    url: str
    audience: str
    subject_pattern: re.Pattern[str]
    subject_help: str


PRESETS: dict[str, IssuerPreset] = {
    "github": IssuerPreset(
        url="https://token.actions.githubusercontent.com",
        audience="sts.amazonaws.com",
        subject_pattern=re.compile(
            r"repo:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+:(ref:refs/heads/[A-Za-z0-9_./-]+|environment:[A-Za-z0-9_. -]+)"
        ),
        subject_help="'repo:OWNER/REPO:ref:refs/heads/BRANCH' or 'repo:OWNER/REPO:environment:NAME'",
    ),
    "gitlab": IssuerPreset(
        url="https://gitlab.com",
        audience="https://gitlab.com",
        subject_pattern=re.compile(
            r"project_path:[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+:ref_type:(branch|tag):ref:[A-Za-z0-9_./-]+"
        ),
        subject_help="'project_path:GROUP/PROJECT:ref_type:branch:ref:BRANCH'",
    ),
}


class GitOpsDeployRole(Construct):
    """A role for an OIDC-authenticated CI runner that may only assume the CDK bootstrap roles.

    :param subjects: exact ``sub`` claims to trust (at least one; no ``*``/``?`` wildcards; no pull-request
        subjects). GitHub: ``repo:acme/gpu-platform:ref:refs/heads/main`` or
        ``repo:acme/gpu-platform:environment:prod``.
    :param issuer: ``"github"`` (default), ``"gitlab"`` or ``"custom"`` (then ``issuer_url`` and ``audience``
        are required).
    :param issuer_url: the issuer's https URL (default: the preset's).
    :param audience: the ``aud`` claim to require (default: the preset's, ``sts.amazonaws.com`` for GitHub).
    :param provider: an existing IAM OIDC provider for the issuer (default: a new one; an account holds one
        provider per issuer URL, so pass the existing one when it exists).
    :param cdk_qualifier: the bootstrap qualifier (default: ``hnb659fds``, the CDK default).
    :param target_regions: regions whose bootstrap roles may be assumed (default: the stack's region).
    :param max_session_duration: default: 1 hour.
    :param mode: ``"deploy"`` (default): may assume every bootstrap role, trusts branch/environment subjects
        only. ``"diff"``: for ``cdk diff`` on pull requests — may assume only the read-only ``lookup`` bootstrap
        role, and also trusts pull-request subjects (``repo:OWNER/REPO:pull_request``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        subjects: Sequence[str],
        issuer: Issuer = "github",
        issuer_url: str | None = None,
        audience: str | None = None,
        provider: iam.IOidcProvider | None = None,
        cdk_qualifier: str = DEFAULT_CDK_QUALIFIER,
        target_regions: Sequence[str] | None = None,
        max_session_duration: Duration = Duration.hours(1),
        mode: Mode = "deploy",
    ) -> None:
        super().__init__(scope, construct_id)
        if mode not in ("deploy", "diff"):
            raise fail(self, "mode", mode, "'deploy', 'diff'")
        self.mode = mode
        preset = self._validate_issuer(issuer, issuer_url, audience)
        url = issuer_url or (preset.url if preset else "")
        aud = audience or (preset.audience if preset else "")
        self._validate_subjects(subjects, preset)
        self._validate_qualifier(cdk_qualifier)
        stack = Stack.of(self)
        regions = list(target_regions) if target_regions else [stack.region]

        if provider is None:
            provider = iam.OidcProviderNative(self, "Provider", url=url, client_ids=[aud])
        self.provider: iam.IOidcProvider = provider
        host = url.removeprefix("https://")
        self.role = iam.Role(
            self,
            "Resource",
            description=(
                f"GitOps deploys from {', '.join(subjects)} (assumes CDK bootstrap roles only)"
                if mode == "deploy"
                else f"cdk diff from {', '.join(subjects)} (assumes the read-only CDK lookup role only)"
            ),
            max_session_duration=max_session_duration,
            assumed_by=iam.WebIdentityPrincipal(
                provider.oidc_provider_arn,
                conditions={
                    "StringEquals": {f"{host}:aud": aud, f"{host}:sub": list(subjects)},
                },
            ),
        )
        self.bootstrap_role_arns = [
            f"arn:{stack.partition}:iam::{stack.account}:role/cdk-{cdk_qualifier}-{kind}-role-{stack.account}-{region}"
            for region in regions
            for kind in (CDK_BOOTSTRAP_ROLES if mode == "deploy" else ("lookup",))
        ]
        # A customer-managed policy (not inline): the role's only permission.
        self.policy = iam.ManagedPolicy(
            self,
            "AssumeCdkBootstrapRoles",
            description=f"Assume the CDK bootstrap roles of this account ({mode} mode)",
            statements=[
                iam.PolicyStatement(
                    sid="AssumeCdkBootstrapRoles",
                    actions=["sts:AssumeRole", "sts:TagSession"],
                    resources=self.bootstrap_role_arns,
                )
            ],
            roles=[self.role],
        )

    @property
    def role_arn(self) -> str:
        return self.role.role_arn

    @property
    def grant_principal(self) -> iam.IPrincipal:
        return self.role.grant_principal

    # -- validation -------------------------------------------------------------------------------------

    def _validate_issuer(self, issuer: str, issuer_url: str | None, audience: str | None) -> IssuerPreset | None:
        if issuer not in (*PRESETS, "custom"):
            raise fail(self, "issuer", issuer, "'github', 'gitlab', 'custom'")
        if issuer == "custom" and (not issuer_url or not audience):
            raise ValidationError(
                path_of(self), "issuer='custom' needs issuer_url (https://...) and audience; allowed: both set"
            )
        if issuer_url is not None and not is_token(issuer_url) and not re.fullmatch(r"https://[^\s*?]+", issuer_url):
            raise fail(self, "issuer_url", issuer_url, "an https:// URL without wildcards")
        return PRESETS.get(issuer)

    def _validate_subjects(self, subjects: Sequence[str], preset: IssuerPreset | None) -> None:
        if isinstance(subjects, str) or not subjects:
            raise fail(self, "subjects", subjects, "a non-empty list of exact subject claims")
        for subject in subjects:
            if is_token(subject):
                continue
            if "*" in subject or "?" in subject:
                raise fail(self, "subjects", subject, "exact subjects only: wildcards would trust any branch or repo")
            if (
                self.mode == "diff"
                and preset is PRESETS["github"]
                and re.fullmatch(r"repo:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+:pull_request", subject)
            ):
                continue
            if subject.endswith(":pull_request") or ":pull_request" in subject:
                raise fail(
                    self, "subjects", subject, "a branch or environment subject: pull-request code must not deploy"
                )
            if preset is not None and not preset.subject_pattern.fullmatch(subject):
                raise fail(self, "subjects", subject, preset.subject_help)

    def _validate_qualifier(self, qualifier: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,10}", qualifier):
            raise fail(self, "cdk_qualifier", qualifier, "1-10 letters, digits, '_' or '-' (cdk bootstrap --qualifier)")
