"""Drift and safety: stateful resources are never replaced by accident, and prod keeps them.

``stateful_resources.json`` lists the logical id and type of every stateful resource (buckets, keys, file
systems, repositories, log groups) per environment and stack. A change that renames a construct id or
moves a construct would give a resource a new logical id, which CloudFormation deploys as "create new,
delete old" — data loss for a bucket or file system. This test fails when any listed id is gone, so such a
change must also edit this file: a deliberate, reviewed decision. Regenerate (after review) with
``python -m pytest tests/snapshots/test_stateful.py --update-stateful``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

BASELINE = Path(__file__).with_name("stateful_resources.json")
STATEFUL_TYPES = (
    "AWS::S3::Bucket",
    "AWS::KMS::Key",
    "AWS::FSx::FileSystem",
    "AWS::EFS::FileSystem",
    "AWS::ECR::Repository",
    "AWS::Logs::LogGroup",
)
ENVS = ("dev", "prod")


def stateful(templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for stack, template in sorted(templates.items()):
        ids = {
            logical_id: resource["Type"]
            for logical_id, resource in template.get("Resources", {}).items()
            if resource["Type"] in STATEFUL_TYPES
        }
        if ids:
            found[stack] = dict(sorted(ids.items()))
    return found


@pytest.fixture(scope="module")
def current(synth) -> dict[str, dict[str, dict[str, str]]]:
    return {env: stateful(synth(env).templates) for env in ENVS}


def test_no_stateful_resource_is_replaced(current, request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--update-stateful"):
        BASELINE.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    baseline = json.loads(BASELINE.read_text())
    missing = [
        f"{env}/{stack}/{logical_id} ({kind})"
        for env, stacks in baseline.items()
        for stack, resources in stacks.items()
        for logical_id, kind in resources.items()
        if current.get(env, {}).get(stack, {}).get(logical_id) != kind
    ]
    assert missing == [], (
        "these stateful resources would be REPLACED (new logical id = new resource, old one deleted): "
        + ", ".join(missing)
    )
    assert sum(len(r) for s in baseline.values() for r in s.values()) >= 20


#: CDK-generated stacks that hold only re-creatable pipeline artifacts (cross-region replicas).
TRANSIENT_STACKS = ("-pipeline-support-",)


def test_prod_retains_stateful_resources(synth) -> None:
    for stack, template in synth("prod").templates.items():
        if any(marker in stack for marker in TRANSIENT_STACKS):
            continue
        for logical_id, resource in template.get("Resources", {}).items():
            if resource["Type"] in STATEFUL_TYPES and resource["Type"] != "AWS::Logs::LogGroup":
                assert resource.get("DeletionPolicy") == "Retain", f"{stack}/{logical_id} is not retained in prod"


def test_prod_stacks_have_termination_protection(synth) -> None:
    platform = synth("prod").platform
    stacks = platform.stacks
    assert stacks and all(s.termination_protection for s in stacks), [
        s.stack_name for s in stacks if not s.termination_protection
    ]
