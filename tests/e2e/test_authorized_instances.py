"""A fleet instance's boot and a notebook instance's start, as AWS would authorize them.

The requests are derived from the synthesized templates (the launch template's user data and instance profile,
the group's name and launch hook, the notebook's lifecycle configuration and role) by
``gpu_constructs.authz.instances`` and evaluated against the synthesized policies. The failing examples take one
permission a journey needs out of the synthesized templates and expect exactly that request to be denied.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpu_constructs.authz import Assembly, check_requests
from gpu_constructs.authz.instances import ScriptJourney, fleet_boot_journeys, notebook_start_journeys
from gpu_constructs.rules.pack import _assembly_stacks
from gpu_constructs.templates import StackView

BOOT_ACTIONS = {
    "autoscaling:CompleteLifecycleAction",
    "autoscaling:SetInstanceHealth",
    "cloudwatch:PutMetricData",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
}
START_ACTIONS = {"s3:GetObject", "logs:CreateLogStream", "logs:PutLogEvents"}


def _stacks(synth: Any, env: str) -> list[StackView]:
    outdir: Path = synth(env).outdir
    return [s for s in _assembly_stacks(outdir) if Path(s.path).parent == outdir]


def _edited(stacks: list[StackView], edit: Callable[[dict[str, Any]], None]) -> list[StackView]:
    """Deep copies of the stacks, each template passed through ``edit``."""
    out = []
    for stack in stacks:
        template = copy.deepcopy(dict(stack.template))
        edit(template)
        out.append(StackView(stack.name, stack.account, stack.region, template, stack.path))
    return out


def _statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        statement
        for resource in template.get("Resources", {}).values()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def _denied(assembly: Assembly, journey: ScriptJourney) -> list[tuple[str, str, str]]:
    return [
        (d.decision.request.subject, d.decision.request.action, d.decision.reason)
        for d in check_requests(assembly, journey.requests)
    ]


# -- every journey of the platform is authorized ---------------------------------------------------------------


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_fleet_instance_boot_is_authorized(synth: Any, env: str) -> None:
    assembly = Assembly(_stacks(synth, env))
    journeys = fleet_boot_journeys(assembly)
    fleets = synth(env).platform.fleets.fleets
    assert sorted(j.name for j in journeys) == sorted(f.fleet_name for f in fleets.values())
    assert journeys
    for journey in journeys:
        assert journey.problems == ()
        assert journey.principal.startswith("arn:aws:iam::") and ":role/" in journey.principal
        assert {r.action for r in journey.requests} == BOOT_ACTIONS
        subjects = {r.subject for r in journey.requests}
        assert subjects == {
            "autoscaling:complete-lifecycle-action",
            "autoscaling:set-instance-health",
            "cloudwatch-agent",
        }
        group = next(r.resource for r in journey.requests if r.action == "autoscaling:CompleteLifecycleAction")
        assert group.endswith(f":autoScalingGroupName/{journey.name}")
        streams = {r.resource.rsplit(":log-stream:", 1)[1] for r in journey.requests if r.action == "logs:PutLogEvents"}
        assert streams == {"i-0123456789abcdef0/boot", "i-0123456789abcdef0/kernel"}
        assert check_requests(assembly, journey.requests) == []


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_notebook_start_is_authorized(synth: Any, env: str) -> None:
    assembly = Assembly(_stacks(synth, env))
    journeys = notebook_start_journeys(assembly)
    notebooks = synth(env).platform.fleets.notebooks
    assert sorted(j.name for j in journeys) == sorted(n.notebook_name for n in notebooks.values())
    if env == "dev":
        assert journeys, "dev configures a notebook"
    for journey in journeys:
        assert journey.problems == ()
        assert {r.action for r in journey.requests} == START_ACTIONS
        [wheel] = [r.resource for r in journey.requests if r.action == "s3:GetObject"]
        assert wheel.startswith("arn:aws:s3:::cdk-hnb659fds-assets-") and wheel.endswith(".whl")
        logs = {r.resource for r in journey.requests if r.subject == "lifecycle-logs"}
        assert logs == {
            f"arn:aws:logs:{assembly.region(journey.stack)}:{assembly.account(journey.stack)}:log-group:"
            f"/aws/sagemaker/NotebookInstances:log-stream:{journey.name}/LifecycleConfigOnStart"
        }
        assert check_requests(assembly, journey.requests) == []


# -- one permission less: exactly that request is denied ---------------------------------------------------------


def _without_lifecycle_completion(template: dict[str, Any]) -> None:
    for statement in _statements(template):
        if statement.get("Sid") == "BootCheckSignals":
            statement["Action"] = [a for a in statement["Action"] if a != "autoscaling:CompleteLifecycleAction"]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_a_role_that_may_not_complete_the_launch_hook_is_denied_the_readiness_signal(synth: Any, env: str) -> None:
    assembly = Assembly(_edited(_stacks(synth, env), _without_lifecycle_completion))
    for journey in fleet_boot_journeys(assembly):
        assert _denied(assembly, journey) == [
            (
                "autoscaling:complete-lifecycle-action",
                "autoscaling:CompleteLifecycleAction",
                "implicitly denied: no statement allows it",
            )
        ]


def test_a_role_without_the_agent_log_grant_is_denied_both_log_streams(synth: Any) -> None:
    def without_agent_logs(template: dict[str, Any]) -> None:
        for resource in template.get("Resources", {}).values():
            if resource["Type"] == "AWS::IAM::Policy":
                document = resource["Properties"]["PolicyDocument"]
                document["Statement"] = [s for s in document["Statement"] if s.get("Sid") != "CloudWatchAgentLogs"]

    assembly = Assembly(_edited(_stacks(synth, "prod"), without_agent_logs))
    [journey] = fleet_boot_journeys(assembly)
    denied = check_requests(assembly, journey.requests)
    assert sorted((d.decision.request.action, d.decision.request.resource.rsplit("/", 1)[1]) for d in denied) == [
        ("logs:CreateLogStream", "boot"),
        ("logs:CreateLogStream", "kernel"),
        ("logs:PutLogEvents", "boot"),
        ("logs:PutLogEvents", "kernel"),
    ]


def test_metrics_granted_in_another_namespace_are_denied(synth: Any) -> None:
    def other_namespace(template: dict[str, Any]) -> None:
        for statement in _statements(template):
            if statement.get("Sid") == "CloudWatchAgentMetrics":
                statement["Condition"]["StringEquals"]["cloudwatch:namespace"] = "GpuFleet"

    assembly = Assembly(_edited(_stacks(synth, "dev"), other_namespace))
    [journey] = fleet_boot_journeys(assembly)
    assert _denied(assembly, journey) == [
        ("cloudwatch-agent", "cloudwatch:PutMetricData", "implicitly denied: no statement allows it")
    ]


def test_a_notebook_role_that_may_not_read_the_wheel_is_denied_the_download(synth: Any) -> None:
    def without_wheel(template: dict[str, Any]) -> None:
        for statement in _statements(template):
            if statement["Action"] == "s3:GetObject" and isinstance(statement["Resource"], list):
                statement["Resource"] = [r for r in statement["Resource"] if ".whl" not in str(r)]

    assembly = Assembly(_edited(_stacks(synth, "dev"), without_wheel))
    [journey] = notebook_start_journeys(assembly)
    denied = check_requests(assembly, journey.requests)
    assert [(d.decision.request.subject, d.decision.request.action, d.decision.reason) for d in denied] == [
        ("s3:cp", "s3:GetObject", "implicitly denied: no statement allows it")
    ]
    assert denied[0].decision.request.resource.endswith(".whl")


def test_a_notebook_role_without_its_log_streams_is_denied_the_script_output(synth: Any) -> None:
    def without_streams(template: dict[str, Any]) -> None:
        for resource in template.get("Resources", {}).values():
            if resource["Type"] == "AWS::IAM::Policy":
                document = resource["Properties"]["PolicyDocument"]
                document["Statement"] = [s for s in document["Statement"] if s.get("Sid") != "NotebookLogStreams"]

    assembly = Assembly(_edited(_stacks(synth, "dev"), without_streams))
    [journey] = notebook_start_journeys(assembly)
    assert _denied(assembly, journey) == [
        ("lifecycle-logs", "logs:PutLogEvents", "implicitly denied: no statement allows it")
    ]


# -- the templates must fit together ---------------------------------------------------------------------------


def test_a_boot_script_that_completes_a_hook_the_group_does_not_have_is_a_problem(synth: Any) -> None:
    def renamed_hook(template: dict[str, Any]) -> None:
        for resource in template.get("Resources", {}).values():
            if resource["Type"] == "AWS::AutoScaling::AutoScalingGroup":
                for hook in resource["Properties"].get("LifecycleHookSpecificationList", []):
                    hook["LifecycleHookName"] = "renamed-hook"

    [journey] = fleet_boot_journeys(Assembly(_edited(_stacks(synth, "dev"), renamed_hook)))
    assert len(journey.problems) == 1
    assert "names hook 'gpu-boot-check'; the group's launch hooks are ['renamed-hook']" in journey.problems[0]


def test_an_instance_role_that_ec2_may_not_assume_is_a_problem(synth: Any) -> None:
    def sagemaker_trust(template: dict[str, Any]) -> None:
        for resource in template.get("Resources", {}).values():
            if resource["Type"] == "AWS::IAM::Role":
                for statement in resource["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                    statement["Principal"] = {"Service": "sagemaker.amazonaws.com"}

    [journey] = fleet_boot_journeys(Assembly(_edited(_stacks(synth, "dev"), sagemaker_trust)))
    assert journey.problems == (
        f"{journey.principal} does not trust ec2.amazonaws.com (sts:AssumeRole): the instance gets no credentials",
    )
