"""The requests a GitOps runner makes with the gitops stack's OIDC roles, derived from the cloud assembly.

A runner (``docs/gitops/github-actions.yml``) exchanges its job's OIDC token for a role of the ``<prefix>-gitops``
stack (``sts:AssumeRoleWithWebIdentity``, decided by the role's trust policy: :func:`web_identity_allowed`), then
runs the CDK CLI, which does nothing in the account with that role itself but assume the roles the cloud assembly
names for each stack (aws-cdk CLI 2.1148, ``Deployments``/``EnvironmentAccess``):

* ``cdk deploy``: the stack artifact's ``assumeRoleArn`` (the bootstrap *deploy* role: CloudFormation calls, and the
  bootstrap version check) and, to publish the stack's assets, the ``assumeRoleArn`` of every destination of its
  asset manifest (``*.assets.json``: the *file-publishing* role for ``files``, the *image-publishing* role for
  ``dockerImages``);
* ``cdk diff``: the artifact's ``lookupRole.arn`` (the read-only bootstrap *lookup* role), which reads the deployed
  template; a stack with no ``lookupRole`` (a CodePipeline cross-region support stack) has its template read with
  the runner's own credentials (``cloudformation:DescribeStacks``, ``cloudformation:GetTemplate``). By default
  ``cdk diff`` then tries a change set through the deploy role; when that role cannot be assumed it prints "Could
  not create a change set, will base the diff on template differences" and diffs the templates, so the change set
  is not a request the diff runner needs (and must not be granted: the diff role may assume only the lookup role,
  :func:`diff_must_not_assume`);
* ``sts:TagSession`` too when an artifact passes session tags (``assumeRoleAdditionalOptions.Tags``).

Every role comes from the assembly's ``manifest.json`` (top-level stacks: what ``--all`` selects) and asset
manifests, with ``${AWS::Partition}``, ``${AWS::AccountId}`` and ``${AWS::Region}`` replaced as the CLI does for the
stack's environment (the assembly's stand-ins when it is environment-agnostic); nothing is assumed about the
qualifier, which :attr:`StackRoles.qualifier` reads back from the bootstrap version parameter. The bootstrap roles'
trust policies are not in the assembly: ``cdk bootstrap``'s template trusts the account (``arn:aws:iam::<account>:
root``), which in one account delegates the decision to the caller's identity policies (IAM User Guide, "Policy
evaluation logic"), so the OIDC roles' own policies decide. What the bootstrap roles then do with their own
permissions (``ssm:GetParameter`` on the bootstrap version parameter, CloudFormation, S3 and ECR uploads) is
listed as :attr:`RunnerJourney.by_bootstrap_roles` and judged by the bootstrap stack, not by this app.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpu_constructs.authz.assembly import PARTITION, SAMPLE_ACCOUNT, SAMPLE_REGION, Assembly
from gpu_constructs.authz.policy import AuthRequest, conditions_hold

__all__ = [
    "Command",
    "RunnerJourney",
    "StackRoles",
    "diff_must_not_assume",
    "gitops_role_arns",
    "runner_journey",
    "stack_roles",
    "web_identity_allowed",
]

Command = Literal["deploy", "diff"]
_QUALIFIER = re.compile(r"^/cdk-bootstrap/(?P<qualifier>[^/]+)/version$")


@dataclass(frozen=True)
class StackRoles:
    """What the cloud assembly tells the CLI to assume for one top-level stack (placeholders replaced)."""

    stack: str
    account: str
    region: str
    deploy: str | None
    lookup: str | None
    #: ``assumeRoleArn`` of each asset destination (file and image publishing), in manifest order, unique.
    publishing: tuple[str, ...]
    #: ``bootstrapStackVersionSsmParameter`` of the stack (``/cdk-bootstrap/<qualifier>/version``), if any.
    version_parameter: str | None
    #: Whether an ``assumeRoleAdditionalOptions`` passes session tags (then ``sts:TagSession`` is needed too).
    tags: bool = False

    @property
    def qualifier(self) -> str | None:
        match = _QUALIFIER.match(self.version_parameter or "")
        return match.group("qualifier") if match else None


@dataclass(frozen=True)
class RunnerJourney:
    """The requests of one runner command, made with ``role`` (judged against the assembly), and those its
    assumed bootstrap roles make with their own permissions (not judged here)."""

    role: str
    command: Command
    requests: tuple[AuthRequest, ...]
    by_bootstrap_roles: tuple[AuthRequest, ...] = field(default=())

    @property
    def assumed(self) -> set[str]:
        return {r.resource for r in self.requests if r.action == "sts:AssumeRole"}


# -- the cloud assembly's roles -------------------------------------------------------------------------------


def stack_roles(outdir: Path) -> list[StackRoles]:
    """The roles of every top-level stack of the cloud assembly at ``outdir`` (``cdk deploy --all`` selects these;
    the stacks of a pipeline's nested stage assemblies are deployed by the pipeline, not by the runner)."""
    artifacts: Mapping[str, Any] = json.loads((outdir / "manifest.json").read_text()).get("artifacts", {})
    out = []
    for artifact_id, artifact in sorted(artifacts.items()):
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        props = artifact.get("properties") or {}
        account, region = _environment(str(artifact.get("environment", "")))
        lookup = props.get("lookupRole") or {}
        publishing: list[str] = []
        tags = bool((props.get("assumeRoleAdditionalOptions") or {}).get("Tags"))
        for dependency in artifact.get("dependencies") or []:
            manifest = artifacts.get(dependency) or {}
            if manifest.get("type") != "cdk:asset-manifest":
                continue
            assets = json.loads((outdir / manifest["properties"]["file"]).read_text())
            for kind in ("files", "dockerImages"):
                for asset in (assets.get(kind) or {}).values():
                    for destination in (asset.get("destinations") or {}).values():
                        arn = destination.get("assumeRoleArn")
                        if arn:
                            publishing.append(_placeholders(arn, account, destination.get("region") or region))
                        tags = tags or bool((destination.get("assumeRoleAdditionalOptions") or {}).get("Tags"))
        out.append(
            StackRoles(
                stack=str(props.get("stackName", artifact_id)),
                account=account,
                region=region,
                deploy=_placeholders(props["assumeRoleArn"], account, region) if props.get("assumeRoleArn") else None,
                lookup=_placeholders(lookup["arn"], account, region) if lookup.get("arn") else None,
                publishing=tuple(dict.fromkeys(publishing)),
                version_parameter=props.get("bootstrapStackVersionSsmParameter"),
                tags=tags,
            )
        )
    return out


def _environment(environment: str) -> tuple[str, str]:
    """``aws://<account>/<region>`` with the assembly's stand-ins for ``unknown-account``/``unknown-region``."""
    account, _, region = environment.removeprefix("aws://").partition("/")
    return (
        account if account.isdigit() else SAMPLE_ACCOUNT,
        region if region and region != "unknown-region" else SAMPLE_REGION,
    )


def _placeholders(text: str, account: str, region: str) -> str:
    return (
        text.replace("${AWS::Partition}", PARTITION)
        .replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", region)
    )


# -- the runner's requests ----------------------------------------------------------------------------------------


def gitops_role_arns(assembly: Assembly) -> dict[str, str]:
    """The runner roles of the assembly: each stack output ``<Id>Arn`` whose description says
    ``role-to-assume for CI (<mode>)`` (the gitops stack's ``DeployRoleArn``/``DiffRoleArn``), as mode -> ARN."""
    found: dict[str, str] = {}
    for stack in assembly.stacks:
        for output in (stack.template.get("Outputs") or {}).values():
            match = re.fullmatch(r"role-to-assume for CI \((\w+)\)", str(output.get("Description", "")))
            if match:
                found[match.group(1)] = assembly.text(output.get("Value"), stack)
    return found


def runner_journey(role: str, command: Command, stacks: Iterable[StackRoles]) -> RunnerJourney:
    """What ``cdk <command> --all`` does with ``role`` (see the module docstring)."""
    requests: dict[tuple[str, str], AuthRequest] = {}
    bootstrap: dict[tuple[str, str], AuthRequest] = {}

    def assume(target: str | None, why: str, subject: str, tags: bool) -> None:
        if target is None:
            return
        context: dict[str, str] = {}
        for action in ("sts:AssumeRole", *(("sts:TagSession",) if tags else ())):
            requests.setdefault((action, target), AuthRequest(role, action, target, context, why, subject))

    for stack in stacks:
        if command == "deploy":
            assume(
                stack.deploy, "cdk deploy: each stack's CloudFormation through the deploy role", "deploy", stack.tags
            )
            for arn in stack.publishing:
                assume(arn, "cdk deploy: the stacks' assets are published", "publish", stack.tags)
            checker = stack.deploy
        else:
            assume(stack.lookup, "cdk diff: each stack's deployed template is read", "lookup", stack.tags)
            checker = stack.lookup
            if stack.lookup is None:
                # No lookup role: the CLI reads the deployed template with the runner's own credentials
                # (``accessStackForLookup`` with no role to assume; ``CloudFormationStack.lookup`` rethrows any
                # error but "does not exist", so a denial fails the whole ``cdk diff``).
                arn = f"arn:{PARTITION}:cloudformation:{stack.region}:{stack.account}:stack/{stack.stack}/*"
                why = f"cdk diff {stack.stack}: no lookup role, the deployed template is read with the runner's role"
                for action in ("cloudformation:DescribeStacks", "cloudformation:GetTemplate"):
                    requests.setdefault((action, arn), AuthRequest(role, action, arn, {}, why, "read-template"))
        if checker is not None and stack.version_parameter:
            account, region = checker.split(":")[4], _role_region(checker)
            parameter = f"arn:{PARTITION}:ssm:{region}:{account}:parameter{stack.version_parameter}"
            why = f"the CLI checks the bootstrap version ({stack.version_parameter}) with the assumed role"
            request = AuthRequest(checker, "ssm:GetParameter", parameter, {}, why, "bootstrap-version")
            bootstrap.setdefault((checker, parameter), request)
    return RunnerJourney(role, command, tuple(requests.values()), tuple(bootstrap.values()))


def _role_region(bootstrap_role: str) -> str:
    """The region a bootstrap role serves (its name ends in ``-<account>-<region>``)."""
    name = bootstrap_role.rsplit("/", 1)[-1]
    match = re.search(r"-\d{12}-(?P<region>[a-z0-9-]+)$", name)
    return match.group("region") if match else SAMPLE_REGION


def diff_must_not_assume(diff_role: str, stacks: Sequence[StackRoles]) -> list[AuthRequest]:
    """The roles the diff runner must *not* be able to assume: every deploy and publishing role (a diff runs
    pull-request code, which must never deploy)."""
    context: dict[str, str] = {}
    targets = dict.fromkeys(r for s in stacks for r in (s.deploy, *s.publishing) if r is not None)
    return [
        AuthRequest(diff_role, "sts:AssumeRole", target, context, "a pull request's diff could deploy", "forbidden")
        for target in targets
    ]


# -- the web identity step --------------------------------------------------------------------------------------


def web_identity_allowed(assembly: Assembly, role: str, issuer_url: str, claims: Mapping[str, str]) -> bool:
    """Whether a token of ``issuer_url`` with ``claims`` (``sub``, ``aud``) may ``sts:AssumeRoleWithWebIdentity``
    the role ``role`` of the assembly, by its trust policy: an ``Allow`` of that action whose ``Federated``
    principal is the issuer's IAM OIDC provider and whose conditions hold, keys ``<issuer host>:<claim>`` (IAM User
    Guide, "Available keys for AWS OIDC federation"); no ``Deny`` applies."""
    found = assembly.role(role)
    if found is None:
        return False
    host = issuer_url.removeprefix("https://").rstrip("/")
    context = {f"{host}:{claim}": value for claim, value in claims.items()}
    trust = assembly.resolve(found.properties.get("AssumeRolePolicyDocument") or {}, found.stack)
    statements = trust.get("Statement") or []
    allowed = False
    for statement in statements if isinstance(statements, list) else [statements]:
        actions = statement.get("Action")
        actions = actions if isinstance(actions, list) else [actions]
        if "sts:AssumeRoleWithWebIdentity" not in actions and "sts:*" not in actions:
            continue
        federated = (statement.get("Principal") or {}).get("Federated")
        providers = federated if isinstance(federated, list) else [federated]
        if not any(_is_provider(assembly, str(p), issuer_url) for p in providers):
            continue
        if conditions_hold(statement.get("Condition"), context):
            if statement.get("Effect") == "Deny":
                return False
            allowed = allowed or statement.get("Effect") == "Allow"
    return allowed


def _is_provider(assembly: Assembly, principal: str, issuer_url: str) -> bool:
    """``principal`` names the IAM OIDC provider of ``issuer_url``: its ARN (``...:oidc-provider/<host and path>``)
    or the stand-in of an ``AWS::IAM::OIDCProvider`` of the assembly whose ``Url`` is ``issuer_url``."""
    host = issuer_url.removeprefix("https://").rstrip("/")
    if principal.endswith(f":oidc-provider/{host}"):
        return True
    for provider in assembly.resources("AWS::IAM::OIDCProvider"):
        url = str(assembly.resolve(provider.properties.get("Url", ""), provider.stack))
        names = {assembly.physical_name(provider.stack, provider.logical_id), f"{provider.logical_id}-ref"}
        if url.rstrip("/") == issuer_url.rstrip("/") and principal in names:
            return True
    return False
