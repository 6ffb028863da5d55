"""GitOpsDeployRole: exact-subject OIDC trust, bootstrap-roles-only permissions, and validation."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_iam as iam

from gpu_constructs.errors import ValidationError
from gpu_constructs.oidc import GitOpsDeployRole

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
