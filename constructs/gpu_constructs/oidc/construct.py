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
from typing import Literal

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpu_constructs import nag
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.oidc.facts import PRESETS, IssuerPreset, provider_arn, provider_name

Issuer = Literal["github", "gitlab", "custom"]
Mode = Literal["deploy", "diff"]

#: The CDK bootstrap roles (``cdk bootstrap``'s default template) a deploy needs.
CDK_BOOTSTRAP_ROLES: tuple[str, ...] = ("deploy", "file-publishing", "image-publishing", "lookup")
DEFAULT_CDK_QUALIFIER = "hnb659fds"

#: Why ``stack/<name>/*`` is safe: the suffix is the stack id CloudFormation appends to a stack's ARN.
STACK_ID_WILDCARD_REASON = (
    "Safe because the wildcard is the stack id CloudFormation appends to the ARN of one named stack (its name is "
    "exact), and the actions only read that stack's description and template"
)


class GitOpsDeployRole(Construct):
    """A role for an OIDC-authenticated CI runner that may only assume the CDK bootstrap roles (plus, through
    :meth:`allow_template_reads`, read the template of stacks that have no CDK lookup role).

    :param subjects: exact ``sub`` claims to trust (at least one; no ``*``/``?`` wildcards; no pull-request
        subjects). GitHub: ``repo:acme/gpu-platform:ref:refs/heads/main`` or
        ``repo:acme/gpu-platform:environment:prod``.
    :param issuer: ``"github"`` (default), ``"gitlab"`` or ``"custom"`` (then ``issuer_url`` and ``audience``
        are required).
    :param issuer_url: the issuer's https URL (default: the preset's).
    :param audience: the ``aud`` claim to require (default: the preset's, ``sts.amazonaws.com`` for GitHub).
    :param provider: the IAM OIDC provider of the issuer (default: a new ``AWS::IAM::OIDCProvider``). An account
        holds one provider per issuer URL (a second create fails with ``EntityAlreadyExists``), so create it in
        one stack per account and pass :func:`existing_oidc_provider` (or the creating role's ``provider``)
        everywhere else. :attr:`provider_created` says which this role did. A created provider is kept when
        it leaves the stack or the stack is deleted (``RetainExceptOnCreate``), because other stacks' roles
        trust it; delete it by hand once no role does.
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

        #: True when this role created the account's provider for ``issuer_url`` (no ``provider`` was passed).
        self.provider_created = provider is None
        if provider is None:
            created = iam.OidcProviderNative(self, "Provider", url=url, client_ids=[aud])
            # The provider is the account's, shared by every role that trusts the issuer: removing it from this
            # stack (an environment switching to an existing provider) or deleting the stack must not delete it
            # under the other stacks' roles. RetainExceptOnCreate still lets a failed first create roll it back,
            # so a retry does not fail with EntityAlreadyExists.
            created.apply_removal_policy(RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE)
            provider = created
        self.provider: iam.IOidcProvider = provider
        self.issuer_url = url
        host = provider_name(url)
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
        # A customer-managed policy (not inline): the role's only policy.
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

    def allow_template_reads(self, stacks: Sequence[Stack]) -> None:
        """Let ``cdk diff`` read the deployed template of ``stacks``, stacks that have no CDK lookup role
        (CodePipeline's cross-region support stacks): the CLI reads those with the runner's own credentials
        (``cloudformation:DescribeStacks``, ``cloudformation:GetTemplate``), and a denial stops the whole diff."""
        if not stacks:
            return
        here = Stack.of(self)
        arns = [
            here.format_arn(
                service="cloudformation",
                resource="stack",
                resource_name=f"{s.stack_name}/*",
                region=s.region,
                account=s.account,
            )
            for s in stacks
        ]
        self.policy.add_statements(
            iam.PolicyStatement(
                sid="ReadTemplatesOfStacksWithoutLookupRole",
                actions=["cloudformation:DescribeStacks", "cloudformation:GetTemplate"],
                resources=arns,
            )
        )
        cfn = self.policy.node.default_child
        assert isinstance(cfn, iam.CfnManagedPolicy)
        for arn in arns:
            finding = f"IAM5[Resource::{nag.flatten_reference(here.resolve(arn))}]"
            nag.acknowledge(cfn, nag.AWS_SOLUTIONS, finding, STACK_ID_WILDCARD_REASON)

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


def existing_oidc_provider(scope: Construct, construct_id: str, *, issuer_url: str) -> iam.IOidcProvider:
    """The IAM OIDC provider of ``issuer_url`` that the stack's account already has, referenced by its ARN.

    IAM names a provider after its URL, so the ARN is known without a lookup:
    ``arn:<partition>:iam::<account>:oidc-provider/<issuer host and path>`` (the stack's partition and
    account; tokens when the stack is environment-agnostic). Nothing is created or looked up, so the stack
    that creates the provider must be deployed to the account first: until then no token can assume the role.
    """
    if not is_token(issuer_url) and not re.fullmatch(r"https://[^\s*?]+", issuer_url):
        raise fail(scope, "issuer_url", issuer_url, "an https:// URL without wildcards")
    stack = Stack.of(scope)
    arn = provider_arn(stack.partition, stack.account, issuer_url)
    return iam.OidcProviderNative.from_oidc_provider_arn(scope, construct_id, arn)
