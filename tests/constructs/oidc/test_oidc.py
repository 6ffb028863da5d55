"""GitOpsDeployRole and the GitOps stack: exact-subject OIDC trust, bootstrap-roles-only permissions, validation,
and one IAM OIDC provider per issuer URL per account."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import assertions
from aws_cdk import aws_iam as iam
from constructs import Construct

from gpu_constructs.errors import ValidationError
from gpu_constructs.oidc.construct import GitOpsDeployRole, existing_oidc_provider
from stacks.config import CONFIG_DIR, ConfigError, EnvConfig, load_config, parse_config
from stacks.context import StackContext
from stacks.gitops_stack import GitOpsStack, check_one_oidc_provider_per_account

SUBJECT = "repo:acme/gpu-platform:environment:prod"


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Ci", env=cdk.Environment(account="111122223333", region="us-west-2"))


@pytest.fixture(scope="module")
def github() -> assertions.Template:
    stack = _stack()
    GitOpsDeployRole(stack, "Deploy", subjects=[SUBJECT, "repo:acme/gpu-platform:ref:refs/heads/main"])
    return assertions.Template.from_stack(stack)


def test_trusts_exactly_the_configured_subjects(github: assertions.Template) -> None:
    role = next(iter(github.find_resources("AWS::IAM::Role").values()))["Properties"]
    statement = role["AssumeRolePolicyDocument"]["Statement"][0]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"] == {
        "StringEquals": {
            "token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
            "token.actions.githubusercontent.com:sub": [SUBJECT, "repo:acme/gpu-platform:ref:refs/heads/main"],
        }
    }
    assert "StringLike" not in statement["Condition"]
    assert role["MaxSessionDuration"] == 3600


def test_creates_a_native_oidc_provider(github: assertions.Template) -> None:
    github.has_resource_properties(
        "AWS::IAM::OIDCProvider",
        {"Url": "https://token.actions.githubusercontent.com", "ClientIdList": ["sts.amazonaws.com"]},
    )
    github.resource_count_is("AWS::Lambda::Function", 0)  # no custom-resource provider


def test_created_provider_outlives_the_stack_but_not_a_failed_create(github: assertions.Template) -> None:
    """Other stacks' roles trust the account's provider: leaving this stack must not delete it."""
    (provider,) = github.find_resources("AWS::IAM::OIDCProvider").values()
    assert (provider["DeletionPolicy"], provider["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")


def test_may_only_assume_the_cdk_bootstrap_roles(github: assertions.Template) -> None:
    github.resource_count_is("AWS::IAM::Policy", 0)  # no inline policy
    policy = next(iter(github.find_resources("AWS::IAM::ManagedPolicy").values()))["Properties"]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert statement["Resource"] == [
        {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    f":iam::111122223333:role/cdk-hnb659fds-{kind}-role-111122223333-us-west-2",
                ],
            ]
        }
        for kind in ("deploy", "file-publishing", "image-publishing", "lookup")
    ]


def test_gitlab_preset_and_existing_provider() -> None:
    stack = _stack()
    provider = iam.OidcProviderNative.from_oidc_provider_arn(
        stack, "Existing", "arn:aws:iam::111122223333:oidc-provider/gitlab.com"
    )
    GitOpsDeployRole(
        stack,
        "Deploy",
        issuer="gitlab",
        provider=provider,
        subjects=["project_path:acme/ml/gpu-platform:ref_type:branch:ref:main"],
        target_regions=["us-west-2", "us-east-1"],
    )
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::IAM::OIDCProvider", 0)
    role = next(iter(template.find_resources("AWS::IAM::Role").values()))["Properties"]
    cond = role["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]["StringEquals"]
    assert cond["gitlab.com:aud"] == "https://gitlab.com"
    policy = next(iter(template.find_resources("AWS::IAM::ManagedPolicy").values()))["Properties"]
    assert len(policy["PolicyDocument"]["Statement"][0]["Resource"]) == 8


@pytest.mark.parametrize(
    ("subjects", "message"),
    [
        (["repo:acme/*:ref:refs/heads/main"], r"subjects='repo:acme/\*:ref:refs/heads/main'.*exact subjects only"),
        (["repo:acme/gpu-platform:*"], r"exact subjects only: wildcards"),
        (["repo:acme/gpu-platform:pull_request"], r"pull-request code must not deploy"),
        (["acme/gpu-platform"], r"allowed: 'repo:OWNER/REPO:ref:refs/heads/BRANCH'"),
        ([], r"subjects=\[\] is not allowed; allowed: a non-empty list"),
    ],
)
def test_rejects_unsafe_subjects(subjects: list[str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        GitOpsDeployRole(_stack(), "Deploy", subjects=subjects)


def test_custom_issuer_needs_url_and_audience() -> None:
    with pytest.raises(ValidationError, match=r"Ci/Deploy: issuer='custom' needs issuer_url"):
        GitOpsDeployRole(_stack(), "Deploy", issuer="custom", subjects=["system:serviceaccount:ci:deployer"])


def test_bad_qualifier() -> None:
    with pytest.raises(ValidationError, match=r"cdk_qualifier='way-too-long-qualifier'.*1-10 letters"):
        GitOpsDeployRole(_stack(), "Deploy", subjects=[SUBJECT], cdk_qualifier="way-too-long-qualifier")


def test_diff_role_trusts_pull_requests_but_only_reads() -> None:
    stack = _stack()
    GitOpsDeployRole(stack, "Diff", mode="diff", subjects=["repo:acme/gpu-platform:pull_request"])
    template = assertions.Template.from_stack(stack)
    policy = next(iter(template.find_resources("AWS::IAM::ManagedPolicy").values()))["Properties"]
    resource = policy["PolicyDocument"]["Statement"][0]["Resource"]
    assert isinstance(resource, dict)  # exactly one role, rendered as a single ARN
    assert "lookup-role-111122223333-us-west-2" in resource["Fn::Join"][1][2]
    assert "deploy-role" not in str(resource)


def test_bad_mode() -> None:
    with pytest.raises(ValidationError, match=r"mode='admin' is not allowed; allowed: 'deploy', 'diff'"):
        GitOpsDeployRole(_stack(), "Deploy", subjects=[SUBJECT], mode="admin")  # type: ignore[arg-type]


# -- one IAM OIDC provider per issuer URL per account ------------------------------------------------------


def test_existing_provider_is_referenced_by_its_deterministic_arn() -> None:
    stack = _stack()
    provider = existing_oidc_provider(stack, "GitHub", issuer_url="https://token.actions.githubusercontent.com")
    role = GitOpsDeployRole(stack, "Deploy", subjects=[SUBJECT], provider=provider)
    assert not role.provider_created
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::IAM::OIDCProvider", 0)
    statement = next(iter(template.find_resources("AWS::IAM::Role").values()))["Properties"][
        "AssumeRolePolicyDocument"
    ]["Statement"][0]
    arn = ["arn:", {"Ref": "AWS::Partition"}, ":iam::111122223333:oidc-provider/token.actions.githubusercontent.com"]
    assert statement["Principal"] == {"Federated": {"Fn::Join": ["", arn]}}


def test_created_provider_is_reported(github: assertions.Template) -> None:
    role = GitOpsDeployRole(_stack(), "Deploy", subjects=[SUBJECT])
    assert role.provider_created and role.issuer_url == "https://token.actions.githubusercontent.com"


def test_existing_provider_needs_an_https_url() -> None:
    with pytest.raises(ValidationError, match=r"Ci: issuer_url='gitlab.com' is not allowed; allowed: an https://"):
        existing_oidc_provider(_stack(), "GitLab", issuer_url="gitlab.com")


def _oidc_resources(template: dict[str, Any]) -> list[str]:
    return [
        str(r["Properties"]["Url"])
        for r in template["Resources"].values()
        if r["Type"] in ("AWS::IAM::OIDCProvider", "Custom::AWSCDKOpenIdConnectProvider")
    ]


def _assembly_templates(outdir: Path) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """Stack name -> (account or None, template) of every stack of the assembly, pipeline stages included.

    A stack name that appears at the app root and in a stage is one CloudFormation stack: kept once."""
    stacks: dict[str, tuple[str | None, dict[str, Any]]] = {}
    manifest = json.loads((outdir / "manifest.json").read_text())
    for artifact_id, artifact in manifest["artifacts"].items():
        props = artifact.get("properties", {})
        if artifact["type"] == "cdk:cloud-assembly":
            for name, stack in _assembly_templates(outdir / props["directoryName"]).items():
                stacks.setdefault(name, stack)
        elif artifact["type"] == "aws:cloudformation:stack":
            account = artifact["environment"].removeprefix("aws://").split("/")[0]
            template = json.loads((outdir / props["templateFile"]).read_text())
            name = props.get("stackName", artifact_id)
            stacks.setdefault(name, (None if account.startswith("unknown") else account, template))
    return stacks


def test_prod_pipeline_creates_one_provider_per_account_and_url(synth: Callable[[str], Any]) -> None:
    """Dev and prod stages deploy into the pipeline's account (both `account: null`): one creator only."""
    stacks = _assembly_templates(synth("prod").outdir)
    assert {"gpu-dev-gitops", "gpu-prod-gitops"} <= set(stacks)
    assert {a for a, _ in stacks.values()} <= {None, "123456789012"}  # one account (or any): all may collide
    creators = [(name, url) for name, (_, tpl) in sorted(stacks.items()) for url in _oidc_resources(tpl)]
    assert creators == [("gpu-dev-gitops", "https://token.actions.githubusercontent.com")]
    prod_roles = [r for r in stacks["gpu-prod-gitops"][1]["Resources"].values() if r["Type"] == "AWS::IAM::Role"]
    assert len(prod_roles) == 2  # deploy and diff, both trusting the account's provider by ARN
    for resource in prod_roles:
        principal = resource["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Federated"]
        assert json.dumps(principal).endswith(':oidc-provider/token.actions.githubusercontent.com"]]}')


def test_dev_alone_creates_its_provider_once_for_both_roles(synth: Callable[[str], Any]) -> None:
    """A fresh dev account (standalone `cdk deploy` of dev) gets the provider, shared by deploy and diff roles."""
    tpl = synth("dev").template("gitops")
    assert _oidc_resources(tpl) == ["https://token.actions.githubusercontent.com"]
    (provider_id,) = [k for k, r in tpl["Resources"].items() if r["Type"] == "AWS::IAM::OIDCProvider"]
    roles = [r for r in tpl["Resources"].values() if r["Type"] == "AWS::IAM::Role"]
    assert [r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] for r in roles] == [
        {"Federated": {"Ref": provider_id}}
    ] * 2


def _config(tmp_path: Path, env: str, **gitops: Any) -> EnvConfig:
    raw = yaml.safe_load((CONFIG_DIR / f"{env}.yaml").read_text())
    raw["gitops"].update(gitops)
    path = tmp_path / f"{env}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return parse_config(path.read_text(), path, env)


def _gitops(scope: Construct, config: EnvConfig) -> GitOpsStack:
    name = f"{config.resource_prefix}-gitops"
    env = cdk.Environment(account=config.account, region=config.region)
    return GitOpsStack(scope, name, context=StackContext.from_config(config), gitops=config.gitops,
                       props=cdk.StackProps(stack_name=name, env=env))  # fmt: skip


def test_app_refuses_two_creators_that_may_share_an_account(tmp_path: Path) -> None:
    """prod at the app root and in its pipeline stage is one stack; the dev stage is a second creator."""
    prod = _config(tmp_path, "prod", oidc_provider="create")
    app = cdk.App()
    _gitops(app, prod)
    _gitops(cdk.Stage(app, "Prod", env=cdk.Environment(region=prod.region)), prod)
    check_one_oidc_provider_per_account(app)  # the same stack twice: no conflict
    _gitops(cdk.Stage(app, "Dev"), load_config("dev"))
    with pytest.raises(ConfigError) as raised:
        check_one_oidc_provider_per_account(app)
    message = str(raised.value)
    for part in ("gpu-prod-gitops (config/prod.yaml", "gpu-dev-gitops (config/dev.yaml", "account: null",
                 "https://token.actions.githubusercontent.com", "EntityAlreadyExists",
                 "allowed: gitops.oidc_provider: create in exactly one environment", "existing"):  # fmt: skip
        assert part in message, (part, message)


def test_app_allows_one_creator_per_account(tmp_path: Path) -> None:
    app = cdk.App()
    dev = _gitops(app, load_config("dev"))
    prod = _gitops(app, load_config("prod"))  # oidc_provider: existing
    assert (dev.created_provider_urls, prod.created_provider_urls) == (
        ["https://token.actions.githubusercontent.com"],
        [],
    )
    check_one_oidc_provider_per_account(app)
    # Two creators in two known, distinct accounts are fine; a known and an unknown account may be the same.
    other = cdk.App()
    _gitops(other, _config(tmp_path, "prod", oidc_provider="create").model_copy(update={"account": "111122223333"}))
    _gitops(other, load_config("dev").model_copy(update={"account": "444455556666"}))
    check_one_oidc_provider_per_account(other)
    mixed = cdk.App()
    _gitops(mixed, _config(tmp_path, "prod", oidc_provider="create").model_copy(update={"account": "111122223333"}))
    _gitops(mixed, load_config("dev"))
    with pytest.raises(ConfigError, match=r"gpu-prod-gitops \(config/prod.yaml, account 111122223333\)"):
        check_one_oidc_provider_per_account(mixed)


def test_build_app_refuses_the_pipeline_when_both_stages_create(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from stacks import app_builder, pipeline_stack

    prod = _config(tmp_path, "prod", oidc_provider="create")
    real = load_config
    monkeypatch.setattr(app_builder, "load_config", lambda name: prod if name == "prod" else real(name))
    monkeypatch.setattr(pipeline_stack, "load_config", lambda name: prod if name == "prod" else real(name))
    with pytest.raises(ConfigError, match=r"would each create the IAM OIDC provider for https://token\.actions"):
        app_builder.build_app("prod", nag=False)


def test_provider_arn_setting_is_used_for_both_roles(tmp_path: Path) -> None:
    arn = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"
    stack = _gitops(cdk.App(), _config(tmp_path, "prod", oidc_provider=arn))
    assert stack.created_provider_urls == []
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::IAM::OIDCProvider", 0)
    principals = [
        r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        for r in template.find_resources("AWS::IAM::Role").values()
    ]
    assert principals == [{"Federated": arn}] * 2


@pytest.mark.parametrize(
    ("gitops", "message"),
    [
        (
            {"oidc_provider": "auto"},
            "gitops.oidc_provider: 'auto': allowed: create, existing, or an IAM OIDC provider ARN",
        ),
        (
            {"oidc_provider": "arn:aws:iam::123456789012:oidc-provider/gitlab.com"},
            "gitops: oidc_provider: 'arn:aws:iam::123456789012:oidc-provider/gitlab.com' is the provider of "
            "https://gitlab.com, but oidc_deploy_role uses https://token.actions.githubusercontent.com, oidc_diff_role",
        ),
        (
            {"oidc_deploy_role": {"subjects": [SUBJECT], "provider_arn": "arn:aws:iam::123456789012:oidc-provider/x"}},
            "provider_arn moved to gitops.oidc_provider",
        ),
    ],
)
def test_bad_oidc_provider_setting(tmp_path: Path, gitops: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _config(tmp_path, "prod", **gitops)
    assert message in str(raised.value)
    assert "prod.yaml" in str(raised.value)


def test_reads_only_the_templates_of_the_stacks_without_a_lookup_role() -> None:
    """``cdk diff`` reads a stack without a lookup role (CodePipeline's cross-region support stack) with the
    runner's own role: the role may read those stacks' description and template, and nothing else."""
    app = cdk.App()
    stack = cdk.Stack(app, "GitOps", env=cdk.Environment(account="111122223333", region="us-west-2"))
    support = cdk.Stack(
        app,
        "Support",
        stack_name="pipeline-support-us-east-1",
        env=cdk.Environment(account="111122223333", region="us-east-1"),
    )
    cdk.CfnWaitConditionHandle(support, "Handle")  # a stack needs one resource
    role = GitOpsDeployRole(stack, "Deploy", subjects=["repo:acme/gpu-platform:ref:refs/heads/main"])
    role.allow_template_reads([support])
    policy = next(iter(assertions.Template.from_stack(stack).find_resources("AWS::IAM::ManagedPolicy").values()))
    statements = {s.get("Sid"): s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    read = statements["ReadTemplatesOfStacksWithoutLookupRole"]
    assert read["Action"] == ["cloudformation:DescribeStacks", "cloudformation:GetTemplate"]
    assert read["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":cloudformation:us-east-1:111122223333:stack/pipeline-support-us-east-1/*",
            ],
        ]
    }
    assert set(statements) == {"AssumeCdkBootstrapRoles", "ReadTemplatesOfStacksWithoutLookupRole"}
