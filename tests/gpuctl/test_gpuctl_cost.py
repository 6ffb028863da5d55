"""gpuctl cost and gpuctl cost diff on small cloud assemblies (no AWS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuctl import cli


def _assembly(directory: Path, count: int) -> Path:
    """One stack with one endpoint of ``count`` x ml.g5.2xlarge ($1.515/hour)."""
    template: dict[str, Any] = {
        "Resources": {
            "ConfigABCDEF01": {
                "Type": "AWS::SageMaker::EndpointConfig",
                "Properties": {
                    "ProductionVariants": [
                        {"VariantName": "AllTraffic", "InstanceType": "ml.g5.2xlarge", "InitialInstanceCount": count}
                    ]
                },
            },
            "Classifier1A2B3C4D": {
                "Type": "AWS::SageMaker::Endpoint",
                "Properties": {
                    "EndpointName": "gpu-prod-classifier",
                    "EndpointConfigName": {"Fn::GetAtt": ["ConfigABCDEF01", "EndpointConfigName"]},
                },
            },
        }
    }
    directory.mkdir(parents=True)
    (directory / "gpu-prod-inference.template.json").write_text(json.dumps(template))
    manifest = {
        "version": "48.0.0",
        "artifacts": {
            "gpu-prod-inference": {
                "type": "aws:cloudformation:stack",
                "environment": "aws://123456789012/us-west-2",
                "properties": {"templateFile": "gpu-prod-inference.template.json", "stackName": "gpu-prod-inference"},
            }
        },
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def test_cost_prints_the_always_on_monthly_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = _assembly(tmp_path / "cdk.out", 2)
    assert cli.main(["cost", "--cdk-out", str(out_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # 2 x $1.515 x 730 hours
    assert "  gpu-prod-inference: $2,211.90/month always on (us-west-2)" in lines
    assert "    $2,211.90/month  endpoint gpu-prod-classifier ml.g5.2xlarge x2 (no autoscaling)" in lines
    assert lines[-1] == "  total: $2,211.90/month always on"


def test_cost_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cost", "--cdk-out", str(_assembly(tmp_path / "a", 1)), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total_monthly_usd"] == 1105.95
    assert data["stack_totals"] == {"gpu-prod-inference": 1105.95}
    assert data["hours_per_month"] == 730
    assert data["items"][0]["instance_type"] == "ml.g5.2xlarge"


def test_cost_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, head = _assembly(tmp_path / "base", 2), _assembly(tmp_path / "head", 3)
    assert cli.main(["cost", "diff", str(base), str(head)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "+$1,105.95/month: gpu-prod-inference: endpoint gpu-prod-classifier ml.g5.2xlarge x2 -> x3"
    assert lines[1].startswith("always on: $2,211.90/month -> $3,317.85/month (+$1,105.95/month; ")
    assert cli.main(["cost", "diff", str(head), str(base), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["delta_monthly_usd"] == -1105.95
    assert data["changes"][0]["text"] == (
        "-$1,105.95/month: gpu-prod-inference: endpoint gpu-prod-classifier ml.g5.2xlarge x3 -> x2"
    )


def test_a_directory_without_templates_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cost", "--cdk-out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    manifest = tmp_path / "manifest.json"
    assert err == f"gpuctl cost: {tmp_path} has no cloud assembly ({manifest} not found): run cdk synth first\n"
    assert cli.main(["cost", "diff", str(tmp_path), str(_assembly(tmp_path / "h", 1))]) == 2
    assert capsys.readouterr().err.startswith(f"gpuctl cost diff: {tmp_path} has no cloud assembly")
