"""The endpoint and GitOps journeys of the synthesized dev and prod apps, evaluated against their policies.

Endpoints (:mod:`gpu_constructs.authz.endpoints`): every request SageMaker makes with each endpoint's execution role
(SageMaker Developer Guide, "CreateModel API: Execution Role Permissions") is allowed; removing one grant from a
deep copy of the synthesized template is reported as that request's denial.

GitOps (:mod:`gpu_constructs.authz.gitops`): the roles ``cdk deploy``/``cdk diff`` assume come from the cloud
assembly (``manifest.json`` ``assumeRoleArn``/``lookupRole``, ``*.assets.json`` destinations); the deploy role may
assume them, the diff role only the lookup role, and each role trusts only the GitHub OIDC subjects of the jobs of
``docs/gitops/github-actions.yml`` that use it (GitHub Docs, "OpenID Connect reference", example subject claims:
``repo:ORG/REPO:ref:refs/heads/BRANCH`` for a push, ``repo:ORG/REPO:environment:NAME`` for a job with an
environment, ``repo:ORG/REPO:pull_request`` for a pull request).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_constructs.authz import Assembly, check_requests
from gpu_constructs.authz.endpoints import EndpointJourney, endpoint_journeys
from gpu_constructs.authz.gitops import (
    diff_must_not_assume,
    gitops_role_arns,
    runner_journey,
    stack_roles,
    web_identity_allowed,
)
from gpu_constructs.rules.pack import _assembly_stacks
from gpu_constructs.templates import StackView

GITHUB = "https://token.actions.githubusercontent.com"
REPO = "repo:acme/gpu-platform"
#: The OIDC subject of each job of docs/gitops/github-actions.yml, by environment and role.
JOB_SUBJECTS = {
    ("dev", "deploy"): f"{REPO}:ref:refs/heads/main",  # deploy-dev: push to main, no environment
    ("prod", "deploy"): f"{REPO}:environment:prod",  # deploy-prod: `environment: prod`
    ("dev", "diff"): f"{REPO}:pull_request",  # diff: pull_request, both environments
    ("prod", "diff"): f"{REPO}:pull_request",
}
ENDPOINT_ACTIONS = {
    "s3:GetObject",
    "kms:Decrypt",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "cloudwatch:PutMetricData",
    "cloudwatch:DescribeAlarms",
    "ec2:CreateNetworkInterface",
    "s3:PutObject",
    "kms:GenerateDataKey",
}
ECR_PULL = {"ecr:GetAuthorizationToken", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}


def _stacks(outdir: Path) -> list[StackView]:
    return [s for s in _assembly_stacks(outdir) if Path(s.path).parent == outdir]


def _replace(stacks: list[StackView], suffix: str, template: dict[str, Any]) -> list[StackView]:
    return [StackView(s.name, s.account, s.region, template, s.path) if s.name.endswith(suffix) else s for s in stacks]


def _template(stacks: list[StackView], suffix: str) -> dict[str, Any]:
    [stack] = [s for s in stacks if s.name.endswith(suffix)]
    return copy.deepcopy(dict(stack.template))


def _without(template: dict[str, Any], action: str) -> dict[str, Any]:
    """``template`` with ``action`` removed from every IAM policy statement (one left with no action is dropped)."""
    for resource in template["Resources"].values():
        if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        document = resource["Properties"]["PolicyDocument"]
        kept = []
        for statement in document["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if action in actions:
                actions = [a for a in actions if a != action]
                if not actions:
                    continue
                statement = {**statement, "Action": actions if len(actions) > 1 else actions[0]}
            kept.append(statement)
        document["Statement"] = kept
    return template


def _without_resource(template: dict[str, Any], action: str, contains: str) -> dict[str, Any]:
    """``template`` with every resource that mentions ``contains`` removed from the IAM policy statements that
    grant ``action`` (a statement left with no resource is dropped)."""
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        document = resource["Properties"]["PolicyDocument"]
        kept = []
        for statement in document["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if action in actions:
                listed = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                listed = [r for r in listed if contains not in json.dumps(r)]
                if not listed:
                    continue
                statement = {**statement, "Resource": listed}
            kept.append(statement)
        document["Statement"] = kept
    return template


def _denied(assembly: Assembly, journeys: list[EndpointJourney]) -> set[tuple[str, str, str]]:
    return {
        (journey.name, d.decision.request.subject, d.decision.request.action)
        for journey in journeys
        for d in check_requests(assembly, journey.requests)
    }


# -- endpoints ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "endpoints"),
    [("dev", {"gpu-dev-classifier"}), ("prod", {"gpu-prod-classifier", "gpu-prod-classifier-async"})],
)
def test_every_request_of_every_endpoint_is_allowed(synth: Any, env: str, endpoints: set[str]) -> None:
    assembly = Assembly(_stacks(synth(env).outdir))
    journeys = endpoint_journeys(assembly)
    assert {j.name for j in journeys} == endpoints
    for journey in journeys:
        assert journey.actions >= ENDPOINT_ACTIONS, journey.name
        if env == "prod":  # the platform's image in this account's ECR (dev serves the AWS DLC)
            assert journey.actions >= ECR_PULL
        assert check_requests(assembly, journey.requests) == [], journey.name


def test_the_async_endpoint_reads_its_input_writes_results_and_publishes(synth: Any) -> None:
    assembly = Assembly(_stacks(synth("prod").outdir))
    [journey] = [j for j in endpoint_journeys(assembly) if j.name == "gpu-prod-classifier-async"]
    by_subject = {(r.subject, r.action) for r in journey.requests}
    assert {
        ("async-input", "s3:GetObject"),
        ("async-output", "s3:PutObject"),
        ("async-failure", "s3:PutObject"),
        ("async-notify", "sns:Publish"),
        ("async-notify", "kms:GenerateDataKey"),  # the topics are encrypted with the monitoring key
    } <= by_subject
    inputs = [r.resource for r in journey.requests if r.subject == "async-input" and r.action == "s3:GetObject"]
    assert inputs and all("/async/gpu-prod-classifier-async/input/" in arn for arn in inputs)
    topics = {r.resource for r in journey.requests if r.action == "sns:Publish"}
    assert len(topics) == 2  # success and error topics


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_without_the_model_read_the_download_is_denied(synth: Any, env: str) -> None:
    stacks = _stacks(synth(env).outdir)
    inference = _without_resource(_template(stacks, f"{env}-inference"), "s3:GetObject", "/models/")
    assembly = Assembly(_replace(stacks, f"{env}-inference", inference))
    names = {j.name for j in endpoint_journeys(assembly)}
    assert _denied(assembly, endpoint_journeys(assembly)) == {(name, "model", "s3:GetObject") for name in names}


def test_without_describe_alarms_the_deployment_guardrails_are_denied(synth: Any) -> None:
    # "ensure that your execution role has permission to perform the cloudwatch:DescribeAlarms action on your
    # auto-rollback alarms" (SageMaker Developer Guide, "CreateModel API: Execution Role Permissions")
    stacks = _stacks(synth("prod").outdir)
    inference = _without(_template(stacks, "prod-inference"), "cloudwatch:DescribeAlarms")
    assembly = Assembly(_replace(stacks, "prod-inference", inference))
    assert _denied(assembly, endpoint_journeys(assembly)) == {
        ("gpu-prod-classifier", "rollback-alarms", "cloudwatch:DescribeAlarms"),
        ("gpu-prod-classifier-async", "rollback-alarms", "cloudwatch:DescribeAlarms"),
    }


def test_without_publish_the_async_notifications_are_denied(synth: Any) -> None:
    stacks = _stacks(synth("prod").outdir)
    inference = _without(_template(stacks, "prod-inference"), "sns:Publish")
    assembly = Assembly(_replace(stacks, "prod-inference", inference))
    assert _denied(assembly, endpoint_journeys(assembly)) == {
        ("gpu-prod-classifier-async", "async-notify", "sns:Publish")
    }


# -- GitOps ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_roles_cdk_assumes_come_from_the_assembly(synth: Any, env: str) -> None:
    outdir: Path = synth(env).outdir
    roles = stack_roles(outdir)
    region = {"dev": "us-east-1", "prod": "us-west-2"}[env]
    assert {r.qualifier for r in roles if r.version_parameter} == {"hnb659fds"}
    for stack in _stacks(outdir):
        parameter = (stack.template.get("Parameters") or {}).get("BootstrapVersion")
        if parameter is not None:  # the templates read the same bootstrap version parameter
            assert parameter["Default"] == "/cdk-bootstrap/hnb659fds/version"
    deploy = {r.deploy for r in roles}
    assert f"arn:aws:iam::123456789012:role/cdk-hnb659fds-deploy-role-123456789012-{region}" in deploy
    assert any("-file-publishing-role-" in arn for r in roles for arn in r.publishing)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_deploy_runner_may_deploy_every_stack(synth: Any, env: str) -> None:
    outdir: Path = synth(env).outdir
    assembly = Assembly(_stacks(outdir))
    role = gitops_role_arns(assembly)["deploy"]
    journey = runner_journey(role, "deploy", stack_roles(outdir))
    assert {r.action for r in journey.requests} == {"sts:AssumeRole"}
    assert {r.subject for r in journey.requests} == {"deploy", "publish"}
    assert check_requests(assembly, journey.requests) == []
    # what the assumed deploy role then checks with its own permissions (the bootstrap stack's, not this app's)
    assert {r.action for r in journey.by_bootstrap_roles} == {"ssm:GetParameter"}
    assert all(r.resource.endswith(":parameter/cdk-bootstrap/hnb659fds/version") for r in journey.by_bootstrap_roles)


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ("dev", "diff"),
        ("dev", "deploy"),
        ("prod", "diff"),
        ("prod", "deploy"),
    ],
)
def test_cdk_diff_of_every_stack_is_allowed(synth: Any, env: str, mode: str) -> None:
    outdir: Path = synth(env).outdir
    assembly = Assembly(_stacks(outdir))
    role = gitops_role_arns(assembly)[mode]
    journey = runner_journey(role, "diff", stack_roles(outdir))
    assert any("-lookup-role-" in arn for arn in journey.assumed)
    assert [str(d) for d in check_requests(assembly, journey.requests)] == []


def test_without_the_support_stack_read_the_prod_diff_is_denied(synth: Any) -> None:
    """CodePipeline's cross-region support stack has no lookup role: ``cdk diff --all`` reads its deployed template
    with the runner's own role, which the gitops roles may do for that stack only."""
    outdir: Path = synth("prod").outdir
    stacks = _stacks(outdir)
    support = "arn:aws:cloudformation:us-east-1:123456789012:stack/gpu-prod-pipeline-support-us-east-1/*"
    narrowed = []
    for stack in stacks:
        template = copy.deepcopy(dict(stack.template))
        for resource in template["Resources"].values():
            if resource["Type"] == "AWS::IAM::ManagedPolicy":
                document = resource["Properties"]["PolicyDocument"]
                document["Statement"] = [
                    st for st in document["Statement"] if st.get("Sid") != "ReadTemplatesOfStacksWithoutLookupRole"
                ]
        narrowed.append(StackView(stack.name, stack.account, stack.region, template, stack.path))
    for mode in ("diff", "deploy"):
        allowed = Assembly(stacks)
        journey = runner_journey(gitops_role_arns(allowed)[mode], "diff", stack_roles(outdir))
        assert ("cloudformation:GetTemplate", support) in {(r.action, r.resource) for r in journey.requests}
        assert check_requests(allowed, journey.requests) == []
        denied = {
            (d.decision.request.action, d.decision.request.resource)
            for d in check_requests(Assembly(narrowed), journey.requests)
        }
        assert denied == {("cloudformation:DescribeStacks", support), ("cloudformation:GetTemplate", support)}


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_diff_role_can_assume_neither_the_deploy_nor_a_publishing_role(synth: Any, env: str) -> None:
    outdir: Path = synth(env).outdir
    assembly = Assembly(_stacks(outdir))
    forbidden = diff_must_not_assume(gitops_role_arns(assembly)["diff"], stack_roles(outdir))
    assert any("-deploy-role-" in r.resource for r in forbidden)
    assert any("-file-publishing-role-" in r.resource for r in forbidden)
    denied = check_requests(assembly, forbidden)
    assert len(denied) == len(forbidden)
    assert all("implicitly denied" in d.decision.reason for d in denied)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_each_role_trusts_only_its_jobs_tokens(synth: Any, env: str) -> None:
    assembly = Assembly(_stacks(synth(env).outdir))
    roles = gitops_role_arns(assembly)
    subjects = {f"{REPO}:ref:refs/heads/main", f"{REPO}:environment:prod", f"{REPO}:pull_request"}
    for mode, role in roles.items():
        trusted = {
            sub
            for sub in subjects
            if web_identity_allowed(assembly, role, GITHUB, {"sub": sub, "aud": "sts.amazonaws.com"})
        }
        assert trusted == {JOB_SUBJECTS[(env, mode)]}, mode
        other_audience = {"sub": JOB_SUBJECTS[(env, mode)], "aud": "api://other"}
        assert not web_identity_allowed(assembly, role, GITHUB, other_audience)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_without_the_deploy_role_in_its_policy_the_deploy_is_denied(synth: Any, env: str) -> None:
    outdir: Path = synth(env).outdir
    stacks = _stacks(outdir)
    gitops = _template(stacks, f"{env}-gitops")
    for resource in gitops["Resources"].values():
        if resource["Type"] == "AWS::IAM::ManagedPolicy":
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                resources = (
                    statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                )
                statement["Resource"] = [r for r in resources if "-deploy-role-" not in json.dumps(r)]
    assembly = Assembly(_replace(stacks, f"{env}-gitops", gitops))
    journey = runner_journey(gitops_role_arns(assembly)["deploy"], "deploy", stack_roles(outdir))
    denied = {
        (d.decision.request.subject, d.decision.request.resource) for d in check_requests(assembly, journey.requests)
    }
    region = {"dev": "us-east-1", "prod": "us-west-2"}[env]
    assert denied == {("deploy", f"arn:aws:iam::123456789012:role/cdk-hnb659fds-deploy-role-123456789012-{region}")}
