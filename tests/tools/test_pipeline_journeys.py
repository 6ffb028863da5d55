"""The GitOps pipeline's preflight and cost steps as authorization journeys: a missing grant is denied."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_constructs.authz import check_requests
from platform_tools.authorization import load
from platform_tools.pipeline_journeys import pipeline_step_journeys


@pytest.fixture(scope="module")
def prod(synth):
    return synth("prod")


def test_preflight_and_cost_steps_are_allowed(prod) -> None:
    assembly = load(prod.outdir)
    found = dict(pipeline_step_journeys(assembly, prod.outdir))
    assert sorted(n.split(" (")[1] for n in found) == ["cost)", "preflight)", "preflight)"]
    preflight = next(r for n, r in found.items() if "PreflightProd" in n)
    assert [(r.action, r.resource) for r in preflight] == [
        ("servicequotas:ListServiceQuotas", "*"),
        ("ec2:DescribeInstanceTypeOfferings", "*"),
    ]
    cost = next(r for n, r in found.items() if "CostProd" in n)
    assert {r.resource.split(":stack/")[1].split("/")[0] for r in cost} >= {"gpu-prod-data", "gpu-prod-training"}
    for requests in found.values():
        assert check_requests(assembly, requests) == []


def test_a_missing_grant_is_denied(prod, tmp_path: Path) -> None:
    """Drop the preflight role's statement from the synthesized pipeline: its requests are denied."""
    out = tmp_path / "cdk.out"
    import shutil

    shutil.copytree(prod.outdir, out)
    path = out / "gpu-prod-pipeline.template.json"
    template: dict[str, Any] = json.loads(path.read_text())
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Policy" and logical_id.startswith("PipelineProdPreflightProdRole"):
            document = resource["Properties"]["PolicyDocument"]
            document["Statement"] = [
                s
                for s in copy.deepcopy(document["Statement"])
                if "servicequotas:ListServiceQuotas" not in json.dumps(s)
            ]
    path.write_text(json.dumps(template))
    assembly = load(out)
    requests = next(r for n, r in pipeline_step_journeys(assembly, out) if "PreflightProd" in n)
    denied = check_requests(assembly, requests)
    assert [d.decision.request.action for d in denied] == [
        "servicequotas:ListServiceQuotas",
        "ec2:DescribeInstanceTypeOfferings",
    ]
