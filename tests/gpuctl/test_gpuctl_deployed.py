"""gpuctl deployed: the deployed templates of an assembly's stacks (CloudFormation GetTemplate, Stubber), written
as an assembly that gpuctl cost diff reads as its base."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpuctl import cli
from gpuctl.commands import deployed

TEMPLATE = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {}}}}


def _assembly(root: Path, environment: str = "aws://123456789012/us-west-2") -> Path:
    root.mkdir(parents=True)
    artifacts: dict[str, Any] = {
        "Tree": {"type": "cdk:tree", "properties": {"file": "tree.json"}},
    }
    for name in ("gpu-prod-data", "gpu-prod-new"):
        (root / f"{name}.template.json").write_text(json.dumps({"Resources": {}}))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "environment": environment,
            "properties": {"templateFile": f"{name}.template.json", "stackName": name},
            "dependencies": ["gpu-prod-network"],
            "displayName": f"gpu-prod-pipeline/Prod/{name}",
        }
    (root / "manifest.json").write_text(json.dumps({"version": "53.0.0", "artifacts": artifacts}))
    return root


@pytest.fixture()
def cloudformation(monkeypatch: pytest.MonkeyPatch) -> Stubber:
    session = boto3.session.Session(
        region_name="us-west-2", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret-example"
    )
    client = session.client("cloudformation")
    stubber = Stubber(client)
    stubber.activate()

    def make_client(service: str, region: str) -> Any:
        assert (service, region) == ("cloudformation", "us-west-2")
        return client

    monkeypatch.setattr(deployed, "make_client", make_client)
    return stubber


def test_writes_deployed_templates_and_leaves_out_stacks_not_deployed(tmp_path: Path, cloudformation) -> None:
    cloudformation.add_response(
        "get_template",
        {"TemplateBody": json.dumps(TEMPLATE), "StagesAvailable": ["Original", "Processed"]},
        {"StackName": "gpu-prod-data", "TemplateStage": "Original"},
    )
    cloudformation.add_client_error(
        "get_template",
        service_error_code="ValidationError",
        service_message="Stack with id gpu-prod-new does not exist",
        expected_params={"StackName": "gpu-prod-new", "TemplateStage": "Original"},
    )
    head = _assembly(tmp_path / "head")
    assert cli.main(["deployed", str(head), str(tmp_path / "base")]) == 0
    manifest = json.loads((tmp_path / "base" / "manifest.json").read_text())
    assert list(manifest["artifacts"]) == ["gpu-prod-data"]
    assert manifest["artifacts"]["gpu-prod-data"]["dependencies"] == []
    assert json.loads((tmp_path / "base" / "gpu-prod-data.template.json").read_text()) == TEMPLATE
    cloudformation.assert_no_pending_responses()


def test_access_denied_exits_2(tmp_path: Path, cloudformation, capsys: pytest.CaptureFixture[str]) -> None:
    cloudformation.add_client_error("get_template", service_error_code="AccessDenied", service_message="denied")
    assert cli.main(["deployed", str(_assembly(tmp_path / "head")), str(tmp_path / "base")]) == 2
    assert "GetTemplate of gpu-prod-data" in capsys.readouterr().err


def test_no_assembly_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["deployed", str(tmp_path), str(tmp_path / "base")]) == 2
    assert "manifest.json not found" in capsys.readouterr().err


def test_a_stack_without_region_needs_region(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = _assembly(tmp_path / "head", environment="aws://unknown-account/unknown-region")
    assert cli.main(["deployed", str(head), str(tmp_path / "base")]) == 2
    assert "pass --region" in capsys.readouterr().err


def test_the_base_is_what_gpuctl_cost_diff_reads(tmp_path: Path, cloudformation) -> None:
    cloudformation.add_response(
        "get_template",
        {"TemplateBody": json.dumps(TEMPLATE)},
        {"StackName": "gpu-prod-data", "TemplateStage": "Original"},
    )
    cloudformation.add_client_error(
        "get_template",
        service_error_code="ValidationError",
        service_message="Stack with id gpu-prod-new does not exist",
    )
    head = _assembly(tmp_path / "head")
    assert cli.main(["deployed", str(head), str(tmp_path / "base")]) == 0
    assert cli.main(["cost", "diff", str(tmp_path / "base"), str(head), "--json"]) == 0


def test_nothing_deployed_yet_writes_an_assembly_without_stacks(tmp_path: Path, cloudformation) -> None:
    """Before a stage's first deploy: the pipeline's cost step then prints the whole cost (gpuctl cost)."""
    for name in ("gpu-prod-data", "gpu-prod-new"):
        cloudformation.add_client_error(
            "get_template", service_error_code="ValidationError", service_message=f"Stack with id {name} does not exist"
        )
    assert cli.main(["deployed", str(_assembly(tmp_path / "head")), str(tmp_path / "base")]) == 0
    manifest = (tmp_path / "base" / "manifest.json").read_text()
    assert "aws:cloudformation:stack" not in manifest
    assert cli.main(["cost", "diff", str(tmp_path / "base"), str(tmp_path / "head")]) == 2
