"""OidcProviderOncePerAccount: two stacks of one account must not both create the IAM OIDC provider of a URL."""

from __future__ import annotations

from typing import Any

from rule_helpers import StackView, findings, template

RULE = "OidcProviderOncePerAccount"
GITHUB = "https://token.actions.githubusercontent.com"
ID = f"GpuPlatform::GpuPlatform-{RULE}"


def provider(url: Any = GITHUB, kind: str = "AWS::IAM::OIDCProvider") -> dict[str, Any]:
    return {"Type": kind, "Properties": {"Url": url, "ClientIdList": ["sts.amazonaws.com"]}}


def role() -> dict[str, Any]:
    arn = {
        "Fn::Join": [
            "",
            ["arn:aws:iam::", {"Ref": "AWS::AccountId"}, ":oidc-provider/token.actions.githubusercontent.com"],
        ]
    }
    return {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": [
        {"Effect": "Allow", "Principal": {"Federated": arn}, "Action": "sts:AssumeRoleWithWebIdentity"}]}}}  # fmt: skip


def view(name: str, tpl: dict[str, Any], account: str | None = None, region: str | None = "us-east-1") -> StackView:
    return StackView(name=name, account=account, region=region, template=tpl)


def check(stack: StackView, *others: StackView) -> list[tuple[str, str]]:
    found = findings(
        RULE, dict(stack.template), stack_name=stack.name, account=stack.account, region=stack.region,
        assembly=(stack, *others),
    )  # fmt: skip
    return [(f.logical_id, f.id) for f in found]


def test_two_agnostic_stacks_that_each_create_the_provider() -> None:
    """The prod pipeline before the fix: dev and prod gitops stacks, both `account: null`, both create it."""
    dev = view("gpu-dev-gitops", template(Provider=provider()))
    prod = view("gpu-prod-gitops", template(DeployRoleProvider=provider()), region="us-west-2")
    assert check(prod, dev) == [("DeployRoleProvider", f"{ID}[gpu-dev-gitops/Provider]")]
    assert check(dev, prod) == [("Provider", f"{ID}[gpu-prod-gitops/DeployRoleProvider]")]


def test_known_account_and_unknown_account_may_be_the_same() -> None:
    a = view("a", template(P=provider()), account="111122223333")
    b = view("b", template(P=provider()))
    assert check(a, b) == [("P", f"{ID}[b/P]")]


def test_same_account_in_two_regions_collides_because_iam_is_global() -> None:
    a = view("gitops", template(P=provider()), account="111122223333", region="us-east-1")
    b = view("gitops", template(P=provider()), account="111122223333", region="eu-west-1")
    assert check(a, b) == [("P", f"{ID}[gitops/P]")]


def test_two_providers_for_one_url_in_one_template() -> None:
    cdk_custom = provider(kind="Custom::AWSCDKOpenIdConnectProvider")
    tpl = template(Native=provider(), Custom=cdk_custom)
    assert sorted(check(view("s", tpl))) == [("Custom", f"{ID}[s/Native]"), ("Native", f"{ID}[s/Custom]")]


def test_one_creator_and_references_by_arn_are_compliant() -> None:
    dev = view("gpu-dev-gitops", template(Provider=provider(), Role=role()))
    prod = view("gpu-prod-gitops", template(Role=role()), region="us-west-2")
    assert check(dev, prod) == []


def test_the_same_stack_in_the_app_and_in_a_pipeline_stage_is_one_stack() -> None:
    root = view("gpu-prod-gitops", template(P=provider()), region="us-west-2")
    staged = view("gpu-prod-gitops", template(P=provider()), region="us-west-2")
    assert check(root, staged) == []
    assert check(view("x", template(P=provider()), account="111122223333"),
                 view("x", template(P=provider()))) == []  # fmt: skip


def test_distinct_known_accounts_other_urls_and_unreadable_urls_are_compliant() -> None:
    a = view("a", template(P=provider()), account="111122223333")
    b = view("b", template(P=provider()), account="444455556666")
    assert check(a, b) == []
    gitlab = view("c", template(P=provider("https://gitlab.com")))
    assert check(view("d", template(P=provider())), gitlab) == []
    token = {"Fn::Join": ["", ["https://", {"Ref": "Issuer"}]]}
    assert check(view("e", template(P=provider(token))), view("f", template(P=provider(token)))) == []
    assert check(view("g", template(P=provider())), view("h", template(P=provider(token)))) == []
