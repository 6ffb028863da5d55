"""The GitOps stack: the OIDC deploy role that an external runner assumes to run ``cdk diff`` / ``cdk deploy``.

IAM holds one OIDC provider per issuer URL per account, so ``gitops.oidc_provider`` says whether this stack
creates it (``create``) or references the account's provider (``existing``: by its deterministic ARN; or an
ARN). :func:`check_one_oidc_provider_per_account` refuses an app in which two stacks that may deploy into one
account would both create it (rule ``GpuPlatform-OidcProviderOncePerAccount`` checks the same on templates).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnOutput, Stack, StackProps, Token
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpu_constructs.oidc.construct import GitOpsDeployRole, Mode, existing_oidc_provider
from gpu_constructs.oidc.facts import CREATE, EXISTING
from gpu_constructs.rules.oidc_provider_once_per_account import possibly_same_account, same_stack
from gpu_constructs.templates import StackView
from stacks.base import PlatformStack
from stacks.config import ConfigError, GitOpsConfig, OidcDeployConfig
from stacks.context import StackContext


class GitOpsStack(PlatformStack):
    """OIDC trust for the configured repository and branch/environment; may only assume CDK bootstrap roles (and read
    the templates of the stacks that have no lookup role: :meth:`allow_template_reads`).

    :param gitops: the ``gitops`` section: the deploy role (``oidc_deploy_role``; ``None``: none), the
        ``cdk diff`` role (``oidc_diff_role``; ``None``: none) and how they find the IAM OIDC provider.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        gitops: GitOpsConfig,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, props=props)
        self.env_name = context.env_name
        self._provider_setting = gitops.oidc_provider
        #: issuer URL -> the provider the roles of this stack trust (created here, or the account's).
        self.providers: dict[str, iam.IOidcProvider] = {}
        #: issuer URLs whose IAM OIDC provider this stack creates.
        self.created_provider_urls: list[str] = []
        deploy, diff = gitops.oidc_deploy_role, gitops.oidc_diff_role
        self.deploy_role = self._role("DeployRole", "deploy", deploy) if deploy else None
        self.diff_role = self._role("DiffRole", "diff", diff) if diff else None

    def _role(self, construct_id: str, mode: Mode, oidc: OidcDeployConfig) -> GitOpsDeployRole:
        url = oidc.url
        provider = self.providers.get(url)  # one provider per issuer URL per account, shared by both roles
        setting = self._provider_setting
        if provider is None and setting == EXISTING:
            provider = existing_oidc_provider(self, f"{construct_id}Provider", issuer_url=url)
        elif provider is None and setting != CREATE:
            provider = iam.OidcProviderNative.from_oidc_provider_arn(self, f"{construct_id}Provider", setting)
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
            target_regions=[self.context.region],
        )
        if role.provider_created:
            self.created_provider_urls.append(url)
        self.providers[url] = role.provider
        CfnOutput(self, f"{construct_id}Arn", value=role.role_arn, description=f"role-to-assume for CI ({mode})")
        return role

    def allow_template_reads(self, stacks: Sequence[Stack]) -> None:
        """Both roles may read the deployed template of ``stacks`` (stacks without a CDK lookup role, which
        ``cdk diff --all`` reads with the runner's own role)."""
        for role in (self.deploy_role, self.diff_role):
            if role is not None:
                role.allow_template_reads(stacks)

    @property
    def view(self) -> StackView:
        """This stack as the rule pack sees it: name, account and region (``None`` when unresolved)."""
        account = None if Token.is_unresolved(self.account) else self.account
        region = None if Token.is_unresolved(self.region) else self.region
        return StackView(name=self.stack_name, account=account, region=region, template={}, path=self.node.path)


def check_one_oidc_provider_per_account(scope: Construct) -> None:
    """Refuse two GitOps stacks under ``scope`` (the app, pipeline stages included) that may deploy into one
    account and would each create the IAM OIDC provider of one issuer URL.

    The same stack name in the app and in a pipeline stage is one CloudFormation stack, not two; a stack
    with no account (``account: null``) may deploy into any account, so it may share one with any stack.

    :raises ConfigError: naming both stacks, their environments, the URL and the setting to change.
    """
    creators = [
        (stack, url)
        for stack in scope.node.find_all()
        if isinstance(stack, GitOpsStack)
        for url in stack.created_provider_urls
    ]
    for i, (first, url) in enumerate(creators):
        for second, other_url in creators[i + 1 :]:
            a, b = first.view, second.view
            if url != other_url or same_stack(a, b) or not possibly_same_account(a.account, b.account):
                continue
            raise ConfigError(
                f"gitops.oidc_provider: stacks {a.name} (config/{first.env_name}.yaml, {_account(a)}) and "
                f"{b.name} (config/{second.env_name}.yaml, {_account(b)}) would each create the IAM OIDC provider "
                f"for {url}, but an account holds one provider per URL (the second create fails with "
                f"EntityAlreadyExists); allowed: gitops.oidc_provider: {CREATE} in exactly one environment of the "
                f"account (the one deployed first) and {EXISTING} (or the provider's ARN) in every other, or "
                "distinct 12-digit `account` ids"
            )


def _account(view: StackView) -> str:
    return f"account {view.account}" if view.account else "account: null, so any account"
