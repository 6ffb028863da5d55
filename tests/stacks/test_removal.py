"""Named resources that a rollback may delete use RetainExceptOnCreate, so a failed first create can be retried."""

from __future__ import annotations

import pytest
from aws_cdk import RemovalPolicy

from gpu_constructs.removal import for_named_resource
from gpu_constructs.rules.retained_named_resource import NAME_PROPERTIES


def test_retain_becomes_retain_except_on_create() -> None:
    assert for_named_resource(RemovalPolicy.RETAIN) == RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
    assert for_named_resource(RemovalPolicy.DESTROY) == RemovalPolicy.DESTROY
    assert for_named_resource(RemovalPolicy.SNAPSHOT) == RemovalPolicy.SNAPSHOT


def test_prod_named_log_groups_survive_updates_but_not_a_failed_create(synth) -> None:
    """prod retains data: its endpoint, state machine and fleet log groups are named and kept on delete."""
    result = synth("prod")
    named = {}
    for stack, template in result.templates.items():
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == "AWS::Logs::LogGroup" and "LogGroupName" in resource.get("Properties", {}):
                named[f"{stack}/{logical_id}"] = (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy"))
    kinds = {key.split("/")[0].rsplit("-", 1)[-1] for key in named}
    assert {"inference", "training", "fleets"} <= kinds, named
    assert set(named.values()) == {("RetainExceptOnCreate", "Retain")}, named


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_no_named_resource_is_retained_on_a_failed_create(synth, env: str) -> None:
    offenders = [
        f"{stack}/{logical_id}"
        for stack, template in synth(env).templates.items()
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] in NAME_PROPERTIES
        and NAME_PROPERTIES[resource["Type"]] in resource.get("Properties", {})
        and resource.get("DeletionPolicy") == "Retain"
    ]
    assert offenders == []
