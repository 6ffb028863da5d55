"""`make synth`'s summary: every stack of every assembly (pipeline stages included), each with its main resources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from platform_tools.summary import assembly_stacks, environment_text, main, main_resources
from stacks.config import load_config
from stacks.stage import stage_id


def _manifest_stacks(outdir: Path, stage: str | None = None) -> list[tuple[str | None, str, dict[str, Any]]]:
    """(stage id, stack name, template) of every stack, read straight from the manifests (nested ones too)."""
    found = []
    for artifact_id, artifact in json.loads((outdir / "manifest.json").read_text())["artifacts"].items():
        props = artifact.get("properties", {})
        if artifact["type"] == "aws:cloudformation:stack":
            template = json.loads((outdir / props["templateFile"]).read_text())
            found.append((stage, props.get("stackName", artifact_id), template))
        elif artifact["type"] == "cdk:cloud-assembly":
            found.extend(_manifest_stacks(outdir / props["directoryName"], props["displayName"].rsplit("/", 1)[-1]))
    return found


@pytest.fixture(scope="module")
def prod(synth):
    return synth("prod")


def test_prod_lists_every_stack_under_its_stage(prod, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert main([str(prod.outdir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    stacks = _manifest_stacks(prod.outdir)
    stages = load_config("prod").pipeline.stages  # type: ignore[union-attr]
    assert {stage for stage, _, _ in stacks} == {None, *(stage_id(s) for s in stages)}

    # The app's own stacks first (unindented), then one heading per stage with its stacks indented below it.
    app = [name for stage, name, _ in stacks if stage is None]
    assert [line.split()[0] for line in lines[: len(app)]] == app
    at = len(app)
    for env in stages:
        members = [(name, t) for stage, name, t in stacks if stage == stage_id(env)]
        count = sum(len(t["Resources"]) for _, t in members)
        assert lines[at].startswith(f"stage {stage_id(env)} of gpu-prod-pipeline: {len(members)} stacks, {count} ")
        assert all(name.startswith(load_config(env).resource_prefix + "-") for name, _ in members)
        listed = lines[at + 1 : at + 1 + len(members)]
        assert [line[:2] for line in listed] == ["  "] * len(members)
        assert [line.split()[0] for line in listed] == [name for name, _ in members]
        at += 1 + len(members)

    # Totals count every stack of every assembly: the stages' stacks share names with the app's, not a slot.
    total = sum(len(t["Resources"]) for _, _, t in stacks)
    per_stage = ", ".join(f"{sum(1 for s, _, _ in stacks if s == stage_id(e))} in stage {stage_id(e)}" for e in stages)
    assert lines[at] == f"{len(stacks)} stacks ({len(app)} in the app, {per_stage}), {total} resources in {prod.outdir}"
    assert len(stacks) > len({name for _, name, _ in stacks})  # gpu-prod-network is in the app and in stage Prod


def test_each_stack_names_its_main_resources(prod) -> None:  # type: ignore[no-untyped-def]
    config = load_config("prod")
    prefix = config.resource_prefix
    by_name = {s.name: s for s in assembly_stacks(prod.outdir) if s.stage is None}
    main = {name.removeprefix(f"{prefix}-"): s.main_resources for name, s in by_name.items()}
    network = prod.template("network")["Resources"].values()
    assert main["network"] == (
        f"VPC {config.network.vpc_cidr}",
        f"{config.network.nat_gateways} NAT gateways",
        f"{sum(r['Type'] == 'AWS::EC2::VPCEndpoint' for r in network)} VPC endpoints",
    )
    assert main["data"] == ("buckets AccessLogs, Datasets, Artifacts",)
    lustre = config.file_systems.lustre
    assert main["storage"] == (f"FSx for Lustre ({lustre.deployment_type}, {lustre.storage_capacity_gib} GiB)",)
    assert main["inference"] == ("endpoints " + ", ".join(f"{prefix}-{n}" for n in config.inference.endpoints),)
    groups = ", ".join(f"{prefix}-{g.name}" for g in config.fleets.groups)
    # The idle-stop function (gpu_constructs.idle) is named by its construct, not by its "Function" child.
    assert main["fleets"] == (f"auto scaling group {groups}", "Lambda function FleetIdleStop")
    assert main["training"] == ("state machine Pipeline", "Lambda function TrainingIdleStop")
    assert main["images"] == (
        "ECR repositories Training, Inference",
        "image builds in CodeBuild TrainingBuild, InferenceBuild",
    )
    assert main["gitops"] == ("IAM roles DeployRole, DiffRole",)  # no main resource: what it has instead
    pipeline = main["pipeline"]
    assert f"CodePipeline {prefix}-pipeline (stages Source, Build, UpdatePipeline, Assets, Dev, Prod)" in pipeline
    # CDK's own helpers (custom resource providers, singleton functions) are not the stack's main resources.
    helpers = [
        p for phrases in main.values() for p in phrases if ("Lambda" in p and "IdleStop" not in p) or "Custom" in p
    ]
    assert helpers == []

    stage_dev = {s.name: s for s in assembly_stacks(prod.outdir) if s.stage_name == "Dev"}
    assert stage_dev["gpu-dev-images"].main_resources == (
        "SSM parameters /gpu-dev/images/training, /gpu-dev/images/inference",  # dev's DLC images: no repository
    )
    assert environment_text(stage_dev["gpu-dev-network"].environment) == "us-east-1, account-agnostic"


def test_main_resources_of_a_template() -> None:
    """Physical names first, then construct ids; counts for look-alike resources; fallback only without a main one."""
    template = {
        "Resources": {
            "VpcA1B2C3D4": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
            "E1": {"Type": "AWS::EC2::VPCEndpoint"},
            "E2": {"Type": "AWS::EC2::VPCEndpoint"},
            "ModelsB0C1D2E3": {"Type": "AWS::S3::Bucket"},
            "Ep": {"Type": "AWS::SageMaker::Endpoint", "Properties": {"EndpointName": "x-serve"}},
            "RoleAAAAAAAA": {"Type": "AWS::IAM::Role"},
            "HandlerFn": {"Type": "AWS::Lambda::Function"},
            "CustomVpcRestrictDefaultSGCustomResourceProviderHandlerDC833E5E": {"Type": "AWS::Lambda::Function"},
        }
    }
    paths = {"ModelsB0C1D2E3": "s/Models/Resource", "HandlerFn": "s/Api/Handler/Resource"}
    assert main_resources(template, paths) == [
        "VPC 10.0.0.0/16",
        "2 VPC endpoints",
        "bucket Models",
        "endpoint x-serve",
        "Lambda function Handler",
    ]
    roles_only = {"Resources": {"DeployRoleC47910C2": {"Type": "AWS::IAM::Role"}, "T": {"Type": "AWS::SNS::Topic"}}}
    assert main_resources(roles_only) == ["IAM role DeployRole", "SNS topic T"]
    assert main_resources({"Resources": {}}) == []


def test_a_missing_assembly_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"{tmp_path / 'manifest.json'} not found: synthesize first (make synth)\n"
