"""The idle-stop function's journey: its list, metric, stop, publish and log requests, derived from the synthesized
function, are allowed by its synthesized role policy and the topic's key; a missing grant is denied."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from authz_helpers import top_level
from aws_cdk import Duration

from gpu_constructs.authz import Assembly, check_requests
from gpu_constructs.authz.idle import GROUP_ID_STAND_IN, idle_stop_journeys
from gpu_constructs.idle import IdleFleetGroup, IdleStop, IdleTrainingJobs, NotebookSessionLimit
from gpu_constructs.keys import new_key
from gpu_constructs.templates import StackView
from gpu_constructs.topics import alarm_action, notification_topic


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Assembly:
    from aws_cdk import aws_cloudwatch as cloudwatch

    outdir = tmp_path_factory.mktemp("idle-authz")
    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, "Idle", env=cdk.Environment(account="123456789012", region="us-east-1"))
    key = new_key(stack, "Key", description="Encrypts notifications")
    topic = notification_topic(stack, "Notifications", display_name="GPU", master_key=key)
    alarm = cloudwatch.Metric(
        namespace="CWAgent", metric_name="nvidia_smi_utilization_gpu", dimensions_map={"AutoScalingGroupName": "g"}
    ).create_alarm(stack, "IdleGpuAlarm", threshold=5, evaluation_periods=12)
    alarm.add_alarm_action(alarm_action(topic))
    IdleStop(
        stack,
        "IdleStop",
        topic=topic,
        name="gpu-dev",
        training=IdleTrainingJobs("gpu-dev-Train", idle_period=Duration.minutes(30)),
        fleet_groups=[IdleFleetGroup("gpu-dev-a100", alarm)],
        notebooks=[NotebookSessionLimit("gpu-dev-Explore")],
    )
    app.synth()
    return Assembly(top_level(Path(outdir)))


def test_every_request_of_the_function_is_allowed(assembly: Assembly) -> None:
    (journey,) = idle_stop_journeys(assembly)
    actions = [r.action for r in journey.requests]
    assert actions == [
        "sagemaker:ListTrainingJobs", "sagemaker:DescribeTrainingJob", "cloudwatch:GetMetricData",
        "sagemaker:StopTrainingJob", "sagemaker:ListNotebookInstances", "sagemaker:StopNotebookInstance",
        "autoscaling:UpdateAutoScalingGroup", "sns:Publish", "kms:GenerateDataKey", "kms:Decrypt",
        "logs:CreateLogStream", "logs:PutLogEvents",
    ]  # fmt: skip
    resources = {r.action: r.resource for r in journey.requests}
    assert resources["sagemaker:StopTrainingJob"].endswith(":training-job/gpu-dev-train-job")
    assert resources["sagemaker:StopNotebookInstance"].endswith(":notebook-instance/gpu-dev-explore")
    assert (
        f":autoScalingGroup:{GROUP_ID_STAND_IN}:autoScalingGroupName/gpu-dev-a100"
        in resources["autoscaling:UpdateAutoScalingGroup"]
    )
    assert [str(d) for d in check_requests(assembly, journey.requests)] == []


def _without(assembly: Assembly, action: str) -> Assembly:
    """The same account with ``action`` removed from the function role's policy."""
    stacks = []
    for view in assembly.stacks:
        template: dict[str, Any] = copy.deepcopy(dict(view.template))
        for resource in template["Resources"].values():
            if resource["Type"] != "AWS::IAM::Policy":
                continue
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                statement["Action"] = [a for a in actions if a != action] or ["sagemaker:DescribeDomain"]
        stacks.append(StackView(view.name, view.account, view.region, template, view.path))
    return Assembly(stacks)


@pytest.mark.parametrize("action", ["sagemaker:StopTrainingJob", "autoscaling:UpdateAutoScalingGroup", "sns:Publish"])
def test_a_missing_grant_is_denied(assembly: Assembly, action: str) -> None:
    broken = _without(assembly, action)
    (journey,) = idle_stop_journeys(broken)
    denied = [str(d) for d in check_requests(broken, journey.requests)]
    assert len(denied) == 1 and action in denied[0]
