"""The GitOps pipeline stack: source, CI-equivalent synth, stage order, approval with diff, encryption, config."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from gpu_constructs.errors import ValidationError
from stacks.config import CONFIG_DIR, ConfigError, EnvConfig, load_config, parse_config
from stacks.context import StackContext
from stacks.pipeline_stack import (
    GPUCTL_INSTALL,
    PipelineStack,
    cost_commands,
    preflight_command,
    profile_commands,
    synth_commands,
)


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


@pytest.fixture(scope="module")
def prod(synth):
    return synth("prod")


@pytest.fixture(scope="module")
def template(prod) -> dict[str, Any]:
    return prod.template("pipeline")


@pytest.fixture(scope="module")
def stages(template) -> list[dict[str, Any]]:
    (pipeline,) = _resources(template, "AWS::CodePipeline::Pipeline").values()
    return list(pipeline["Properties"]["Stages"])


def _stage(stages: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(s for s in stages if s["Name"] == name)


def _buildspec(template: dict[str, Any], logical_prefix: str) -> dict[str, Any]:
    projects = _resources(template, "AWS::CodeBuild::Project")
    (project,) = [p for k, p in projects.items() if k.startswith(logical_prefix)]
    return dict(json.loads(project["Properties"]["Source"]["BuildSpec"]))


def test_source_is_the_configured_connection(stages) -> None:
    (action,) = _stage(stages, "Source")["Actions"]
    assert action["ActionTypeId"]["Provider"] == "CodeStarSourceConnection"
    config = load_config("prod").pipeline
    assert config is not None
    assert action["Configuration"]["ConnectionArn"] == config.connection_arn
    assert action["Configuration"]["FullRepositoryId"] == "acme/gpu-platform"
    assert action["Configuration"]["BranchName"] == "main"
    assert action["Configuration"]["DetectChanges"] is True


def test_synth_runs_ci_then_make_synth_per_env_own_env_last(template) -> None:
    spec = _buildspec(template, "PipelineBuildSynth")
    assert spec["phases"]["build"]["commands"] == [
        "bash .ci/run", "make synth ENV=dev", "rm -rf cdk.out", "make synth ENV=prod"
    ]  # fmt: skip
    assert spec["artifacts"]["base-directory"] == "cdk.out"
    assert spec["phases"]["install"]["runtime-versions"] == {"python": "3.11", "nodejs": "20"}
    assert synth_commands("prod", ("prod", "staging", "dev"))[1:3] == ["make synth ENV=staging", "make synth ENV=dev"]


def test_stage_order_self_mutation_then_dev_then_prod(stages) -> None:
    assert [s["Name"] for s in stages] == ["Source", "Build", "UpdatePipeline", "Assets", "Dev", "Prod"]
    (mutate,) = _stage(stages, "UpdatePipeline")["Actions"]
    assert mutate["Name"] == "SelfMutate"
    deployed = {
        a["Configuration"]["StackName"]
        for a in _stage(stages, "Prod")["Actions"]
        if "StackName" in a.get("Configuration", {})
    }
    names = ("network", "data", "storage", "images", "training", "inference", "fleets", "gitops")
    assert deployed == {f"gpu-prod-{n}" for n in names}
    dev = _stage(stages, "Dev")["Actions"]
    assert not [a for a in dev if a["ActionTypeId"]["Category"] == "Approval"], "dev needs no approval"
    assert [a["Name"] for a in dev if a["ActionTypeId"]["Category"] != "Deploy"] == ["PreflightDev"]


def test_manual_approval_after_diff_before_any_prod_deploy(stages, template) -> None:
    actions = _stage(stages, "Prod")["Actions"]
    order = {a["Name"]: a["RunOrder"] for a in actions}
    approval = next(a for a in actions if a["ActionTypeId"]["Category"] == "Approval")
    deploys = [a["RunOrder"] for a in actions if a["ActionTypeId"]["Category"] == "Deploy"]
    assert order["DiffProd"] < approval["RunOrder"] < min(deploys)
    assert "`cdk diff`" in approval["Configuration"]["CustomData"]
    assert "DiffProd" in approval["Configuration"]["CustomData"]
    diff = _buildspec(template, "PipelineProdDiffProd")
    assert diff["phases"]["build"]["commands"] == [
        "npx --no-install cdk diff --app . --no-change-set --no-color 'gpu-prod-pipeline/Prod/*'"
    ]
    assert re.search(r"aws-cdk@\d+\.\d+\.\d+$", diff["phases"]["install"]["commands"][0])


def test_artifacts_and_logs_are_kms_encrypted(template) -> None:
    (pipeline,) = _resources(template, "AWS::CodePipeline::Pipeline").values()
    stores = pipeline["Properties"]["ArtifactStores"]
    assert {s["Region"] for s in stores} == {"us-east-1", "us-west-2"}
    assert all(s["ArtifactStore"]["EncryptionKey"]["Type"] == "KMS" for s in stores)
    key_id = next(k for k in _resources(template, "AWS::KMS::Key") if k.startswith("ArtifactsKey"))
    assert template["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    buckets = _resources(template, "AWS::S3::Bucket")
    assert len(buckets) == 2
    for bucket in buckets.values():
        rule = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        by_default = rule["ServerSideEncryptionByDefault"]
        assert by_default == {"KMSMasterKeyID": {"Fn::GetAtt": [key_id, "Arn"]}, "SSEAlgorithm": "aws:kms"}
    (group_id, group), *_ = _resources(template, "AWS::Logs::LogGroup").items()
    assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    projects = _resources(template, "AWS::CodeBuild::Project")
    assert len(projects) == 7  # synth, self-mutation, assets, diff, preflight of dev and prod, cost of prod
    for project in projects.values():
        assert project["Properties"]["EncryptionKey"] == {"Fn::GetAtt": [key_id, "Arn"]}
        assert project["Properties"]["LogsConfig"]["CloudWatchLogs"]["GroupName"] == {"Ref": group_id}
        assert project["Properties"]["Environment"]["PrivilegedMode"] is False


def test_codebuild_roles_are_least_privilege(template) -> None:
    policies = _resources(template, "AWS::IAM::Policy")
    for logical_id, policy in policies.items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert not any(a == "*" or a.endswith(":*") for a in actions), (logical_id, actions)
            assert "iam:PassRole" not in actions and "iam:CreateRole" not in actions, logical_id
    assert not any(r["Properties"].get("ManagedPolicyArns") for r in _resources(template, "AWS::IAM::Role").values())
    (diff,) = [p for k, p in policies.items() if k.startswith("PipelineProdDiffProdRole")]
    assume = [s for s in diff["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "sts:AssumeRole"]
    assert assume == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Resource": "arn:aws:iam::123456789012:role/cdk-hnb659fds-lookup-role-123456789012-us-west-2",
        }
    ]


STATEFUL = {"AWS::S3::Bucket", "AWS::KMS::Key", "AWS::FSx::FileSystem", "AWS::ECR::Repository", "AWS::EFS::FileSystem"}
#: Rules between security groups embed the peer's construct path in their logical id (aws-ec2), and so does the
#: permission an EventBridge rule's Lambda target adds (aws-events-targets: ``AllowEventRule`` + the rule's unique
#: id): they are the only resources whose ids differ between the app root and a pipeline stage. None holds state.
PATH_KEYED = {"AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress", "AWS::Lambda::Permission"}


def test_stage_stacks_are_the_app_stacks(prod) -> None:
    """Stage stacks have the app's stack names and, but for path-keyed SG rules, its logical ids."""
    nested = prod.outdir / "assembly-gpu-prod-pipeline-Prod"
    artifacts = json.loads((nested / "manifest.json").read_text())["artifacts"]
    stacks = {
        a["properties"]["stackName"]: json.loads((nested / a["properties"]["templateFile"]).read_text())
        for a in artifacts.values()
        if a["type"] == "aws:cloudformation:stack"
    }
    assert set(stacks) == {n for n in prod.templates if not n.startswith("gpu-prod-pipeline")}
    stateful = 0
    for name, template in stacks.items():
        staged, root = template["Resources"], prod.templates[name]["Resources"]
        only = {staged[k]["Type"] for k in staged.keys() - root.keys()} | {
            root[k]["Type"] for k in root.keys() - staged.keys()
        }
        assert only <= PATH_KEYED, (name, only)
        for logical_id, resource in root.items():
            if resource["Type"] in STATEFUL:
                stateful += 1
                assert staged[logical_id]["Type"] == resource["Type"], (name, logical_id)
                assert staged[logical_id].get("DeletionPolicy") == resource.get("DeletionPolicy"), (name, logical_id)
    assert stateful >= 8


def test_dev_has_no_pipeline(synth) -> None:
    assert not [n for n in synth("dev").templates if "pipeline" in n]
    assert synth("dev").platform.pipeline is None


# -- config validation -----------------------------------------------------------------------------------


def _prod_with(tmp_path: Path, **pipeline: Any) -> EnvConfig:
    raw = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    raw["pipeline"].update(pipeline)
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(raw))
    return parse_config(path.read_text(), path, "prod")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"connection_arn": "arn:aws:codeconnections:us-west-2:123456789012:connection/abc"},
            "must be a connection ARN",
        ),
        ({"connection_arn": "arn:aws:s3:::bucket"}, "pipeline.connection_arn: 'arn:aws:s3:::bucket'"),
        ({"repository": "gpu-platform"}, "pipeline.repository: 'gpu-platform': must be OWNER/REPO"),
        ({"branch": "release/*"}, "must be one exact branch name"),
        ({"stages": []}, "list at least one environment"),
        ({"stages": ["dev", "dev"]}, "duplicate stage(s) ['dev']"),
        ({"stages": ["Prod"]}, "are not environment names"),
        ({"approve_before": ["staging"]}, "approve_before: ['staging'] are not stages; allowed: dev, prod"),
        ({"account": "1234"}, "must be a 12-digit AWS account id"),
        ({"account": None}, "pipeline.account: null needs account to be set"),
        ({"log_retention_days": 42}, "retention values"),
        ({"trigger": "push"}, "unknown key (typo?)"),
    ],
)
def test_bad_pipeline_config_is_rejected(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _prod_with(tmp_path, **change)
    assert message in str(err.value)
    assert "prod.yaml" in str(err.value)


def _pipeline_stack(config: EnvConfig) -> None:
    assert config.pipeline is not None
    PipelineStack(cdk.App(), "gpu-prod-pipeline", context=StackContext.from_config(config), pipeline=config.pipeline)


def test_production_stage_needs_an_approval(tmp_path: Path) -> None:
    expected = r"approve_before=\[\] is not allowed; allowed: .*production stage \(prod\)"
    with pytest.raises(ValidationError, match=expected):
        _pipeline_stack(_prod_with(tmp_path, approve_before=[]))


def test_connection_must_be_in_the_pipeline_region_and_account(tmp_path: Path) -> None:
    arn = "arn:aws:codeconnections:eu-west-1:123456789012:connection/00000000-0000-0000-0000-000000000000"
    with pytest.raises(
        ValidationError, match=r"pipeline.connection_arn=.*eu-west-1.*allowed: a connection in .*us-west-2"
    ):
        _pipeline_stack(_prod_with(tmp_path, connection_arn=arn))


def test_unknown_stage_environment_names_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"env='staging': no file .*allowed environments: dev, prod"):
        _pipeline_stack(_prod_with(tmp_path, stages=["staging", "prod"]))


# -- preflight and cost steps ------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_preflight_runs_after_synth_before_every_deploy_of_its_stage(stages, template, env: str) -> None:
    """Exit 1 (short quota, missing offering, reservation problem) and 2 (could not check) fail the build."""
    actions = _stage(stages, env.capitalize())["Actions"]
    order = {a["Name"]: a["RunOrder"] for a in actions}
    deploys = [a["RunOrder"] for a in actions if a["ActionTypeId"]["Category"] == "Deploy"]
    preflight = next(a for a in actions if a["Name"] == f"Preflight{env.capitalize()}")
    assert preflight["ActionTypeId"]["Category"] == "Build" and order[preflight["Name"]] < min(deploys)
    assert [s["Name"] for s in stages].index("Build") < [s["Name"] for s in stages].index(env.capitalize())
    spec = _buildspec(template, f"Pipeline{env.capitalize()}Preflight{env.capitalize()}")
    assert spec["phases"]["build"]["commands"] == [preflight_command(env)] == [f"gpuctl preflight --env {env} --json"]
    assert spec["phases"]["install"]["commands"] == [GPUCTL_INSTALL]
    assert len(preflight["InputArtifacts"]) == 1  # the repository only


def test_cost_diff_next_to_cdk_diff_before_the_approval(stages, template) -> None:
    actions = _stage(stages, "Prod")["Actions"]
    order = {a["Name"]: a["RunOrder"] for a in actions}
    assert order["CostProd"] == order["DiffProd"] == order["PreflightProd"] < order["ApproveProd"]
    approval = next(a for a in actions if a["Name"] == "ApproveProd")
    assert "CostProd" in approval["Configuration"]["CustomData"]
    spec = _buildspec(template, "PipelineProdCostProd")
    assert (
        spec["phases"]["build"]["commands"]
        == cost_commands("cdk.out/assembly-gpu-prod-pipeline-Prod")
        == [
            "gpuctl deployed cdk.out/assembly-gpu-prod-pipeline-Prod deployed.out",
            "if grep -q 'aws:cloudformation:stack' deployed.out/manifest.json; "
            "then gpuctl cost diff deployed.out cdk.out/assembly-gpu-prod-pipeline-Prod; "
            "else gpuctl cost --cdk-out cdk.out/assembly-gpu-prod-pipeline-Prod; fi",
        ]
    )
    cost = next(a for a in actions if a["Name"] == "CostProd")
    assert len(cost["InputArtifacts"]) == 2  # the repository (gpuctl) and the synthesized assembly


def _grants(template: dict[str, Any], prefix: str) -> list[tuple[list[str], Any]]:
    """(actions, resources) of a step role's statements other than aws-cdk-lib's (logs, reports, artifacts)."""
    (policy,) = [p for k, p in _resources(template, "AWS::IAM::Policy").items() if k.startswith(prefix)]
    found = []
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if not any(a.startswith(("logs:", "codebuild:", "s3:", "kms:")) for a in actions):
            found.append((sorted(actions), statement["Resource"]))
    return found


def test_preflight_role_has_exactly_the_calls_preflight_makes(template) -> None:
    for env in ("Dev", "Prod"):
        assert _grants(template, f"Pipeline{env}Preflight{env}Role") == [
            (["ec2:DescribeInstanceTypeOfferings", "servicequotas:ListServiceQuotas"], "*")
        ]
    stacks = ("data", "fleets", "gitops", "images", "inference", "network", "storage", "training")
    assert _grants(template, "PipelineProdCostProdRole") == [
        (
            ["cloudformation:GetTemplate"],
            [f"arn:aws:cloudformation:us-west-2:123456789012:stack/gpu-prod-{name}/*" for name in stacks],
        )
    ]


def test_a_stage_in_another_account_is_checked_through_its_lookup_role(tmp_path: Path) -> None:
    """The step assumes the stage account's CDK lookup role (read-only) through an AWS CLI profile."""
    from aws_cdk import assertions

    from stacks.app_builder import cdk_json_context

    prod = load_config("prod")
    staged = prod.model_copy(update={"account": "210987654321"})
    app = cdk.App(context=cdk_json_context())
    stack = PipelineStack(
        app,
        "Pipe",
        context=StackContext.from_config(prod),
        pipeline=prod.pipeline.model_copy(update={"stages": ("prod",)}),
        stage_configs={"prod": staged},
    )
    template = assertions.Template.from_stack(stack).to_json()
    lookup = "arn:aws:iam::210987654321:role/cdk-hnb659fds-lookup-role-210987654321-us-west-2"
    for prefix in ("PipelineProdPreflightProd", "PipelineProdCostProd"):
        assert _grants(template, prefix + "Role") == [(["sts:AssumeRole"], lookup)]
    spec = _buildspec(template, "PipelineProdPreflightProd")
    assert spec["phases"]["build"]["commands"] == [
        *profile_commands(lookup),
        "AWS_PROFILE=stage gpuctl preflight --env prod --json",
    ]
    assert profile_commands(lookup)[1] == "aws configure set profile.stage.credential_source EcsContainer"
