"""IdleStop: the function, its schedule and alarm rule, permissions scoped to the platform's names, the topic
grant, and the validation of what it watches; the compliance packs run clean on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import Duration, assertions
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns

from gpu_constructs.errors import ValidationError
from gpu_constructs.idle import IdleFleetGroup, IdleStop, IdleTrainingJobs, NotebookSessionLimit
from gpu_constructs.idle.handler import SETTINGS_VARIABLE
from gpu_constructs.keys import new_key
from gpu_constructs.topics import alarm_action, notification_topic
from platform_tools.summary import validation_violations
from stacks.app_builder import add_nag_packs, cdk_json_context

ENV = cdk.Environment(account="123456789012", region="us-east-1")


def _stack(app: cdk.App) -> tuple[cdk.Stack, sns.Topic]:
    stack = cdk.Stack(app, "Idle", env=ENV)
    key = new_key(stack, "Key", description="Encrypts notifications")
    topic = notification_topic(stack, "Notifications", display_name="GPU", master_key=key)
    return stack, topic


def _alarm(stack: cdk.Stack, topic: sns.ITopic, group: str) -> cloudwatch.Alarm:
    metric = cloudwatch.Metric(
        namespace="CWAgent", metric_name="nvidia_smi_utilization_gpu", dimensions_map={"AutoScalingGroupName": group}
    )
    alarm = metric.create_alarm(stack, "IdleGpuAlarm", threshold=5, evaluation_periods=12)
    alarm.add_alarm_action(alarm_action(topic))
    return alarm


def _everything(stack: cdk.Stack, topic: sns.ITopic, **kwargs: Any) -> IdleStop:
    return IdleStop(
        stack,
        "IdleStop",
        topic=topic,
        name="gpu-dev",
        training=IdleTrainingJobs("gpu-dev-Train", idle_period=Duration.minutes(30), progress_metric="train:loss"),
        fleet_groups=[IdleFleetGroup("gpu-dev-a100", _alarm(stack, topic, "gpu-dev-a100"))],
        notebooks=[NotebookSessionLimit("gpu-dev-Explore", max_session=Duration.hours(8), dry_run=True)],
        **kwargs,
    )


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[assertions.Template, Path, IdleStop]:
    outdir = tmp_path_factory.mktemp("idle")
    app = cdk.App(outdir=str(outdir), context=cdk_json_context(), analytics_reporting=False)
    stack, topic = _stack(app)
    idle = _everything(stack, topic)
    add_nag_packs(app)
    app.synth()
    return assertions.Template.from_stack(stack), outdir, idle


def _policy(template: assertions.Template) -> list[dict[str, Any]]:
    policies = template.find_resources("AWS::IAM::Policy")
    (policy,) = [p for k, p in policies.items() if k.startswith("IdleStopRoleDefaultPolicy")]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def test_compliance_packs_are_clean(synthesized: tuple[assertions.Template, Path, IdleStop]) -> None:
    _, outdir, _ = synthesized
    assert validation_violations(outdir) == []


def test_function_runs_the_handler_file_alone_with_its_settings(
    synthesized: tuple[assertions.Template, Path, IdleStop],
) -> None:
    template, outdir, idle = synthesized
    function = template.find_resources("AWS::Lambda::Function")
    (props,) = [f["Properties"] for f in function.values()]
    assert props["Handler"] == "handler.handler" and props["Runtime"].startswith("python3.")
    assert "KmsKeyArn" in props
    settings = idle.settings()
    assert settings["training"] == {
        "job_name_prefix": "gpu-dev-Train", "idle_minutes": 30, "gpu_idle_percent": 5, "progress_metric": "train:loss"
    }  # fmt: skip
    assert settings["notebooks"] == {"gpu-dev-Explore": 480} and settings["fleet_groups"] == ["gpu-dev-a100"]
    assert settings["dry_run_names"] == ["gpu-dev-Explore"] and settings["dry_run"] is False
    assert SETTINGS_VARIABLE in props["Environment"]["Variables"]
    asset = props["Code"]["S3Key"]
    staged = next(p for p in outdir.iterdir() if p.name.startswith("asset.") and asset.startswith(p.name[6:]))
    assert sorted(f.name for f in staged.iterdir()) == ["handler.py"]


def test_schedule_and_alarm_rule(synthesized: tuple[assertions.Template, Path, IdleStop]) -> None:
    template, _, _ = synthesized
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"})
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.cloudwatch"],
                "detail-type": ["CloudWatch Alarm State Change"],
                "resources": [{"Fn::GetAtt": [assertions.Match.string_like_regexp("IdleGpuAlarm"), "Arn"]}],
                "detail": {"state": {"value": ["ALARM"]}},
            }
        },
    )


def test_permissions_are_scoped_to_the_named_resources(
    synthesized: tuple[assertions.Template, Path, IdleStop],
) -> None:
    template, _, _ = synthesized
    statements = _policy(template)
    by_action = {a: s for s in statements for a in _actions(s)}
    stop = json.dumps(by_action["sagemaker:StopTrainingJob"]["Resource"])
    assert ":training-job/gpu-dev-train-*" in stop  # SageMaker ARNs hold lower-case names
    assert ":notebook-instance/gpu-dev-explore" in json.dumps(by_action["sagemaker:StopNotebookInstance"]["Resource"])
    scale = json.dumps(by_action["autoscaling:UpdateAutoScalingGroup"]["Resource"])
    assert ":autoScalingGroup:*:autoScalingGroupName/gpu-dev-a100" in scale
    assert by_action["sns:Publish"]["Resource"] == {"Ref": assertions.Match.any_value()} or "Ref" in json.dumps(
        by_action["sns:Publish"]["Resource"]
    )
    star = [s for s in statements if s["Resource"] == "*"]
    assert sorted(a for s in star for a in _actions(s)) == [
        "cloudwatch:GetMetricData", "sagemaker:ListNotebookInstances", "sagemaker:ListTrainingJobs"
    ]  # fmt: skip
    assert "kms:GenerateDataKey*" in {a for s in statements for a in _actions(s)}  # the encrypted topic
    own_key = [s for s in statements if "IdleStopKey" in json.dumps(s["Resource"])]
    assert [_actions(s) for s in own_key] == [["kms:Decrypt"]]  # the function's encrypted settings


def test_only_the_fleet_rule_without_jobs_or_notebooks() -> None:
    app = cdk.App()
    stack, topic = _stack(app)
    IdleStop(stack, "IdleStop", topic=topic, name="gpu-dev",
             fleet_groups=[IdleFleetGroup("gpu-dev-a100", _alarm(stack, topic, "gpu-dev-a100"))])  # fmt: skip
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::Events::Rule", 1)
    actions = {a for s in _policy(template) for a in _actions(s)}
    assert "sagemaker:StopTrainingJob" not in actions and "cloudwatch:GetMetricData" not in actions


def test_nothing_to_watch_is_an_error() -> None:
    app = cdk.App()
    stack, topic = _stack(app)
    with pytest.raises(ValidationError, match=r"Idle/IdleStop: nothing to watch; allowed: training"):
        IdleStop(stack, "IdleStop", topic=topic, name="gpu-dev")


@pytest.mark.parametrize(
    ("watch", "message"),
    [
        ({"training": IdleTrainingJobs("gpu-dev-train", idle_period=Duration.minutes(7))},
         r"idle_period='7 minutes' is not allowed; allowed: a multiple of 5 minutes from 10 to 1440"),
        ({"training": IdleTrainingJobs("gpu-dev-train", idle_period=Duration.minutes(5))}, r"idle_period='5 minutes'"),
        ({"training": IdleTrainingJobs("gpu-dev-train", idle_period=Duration.days(2))}, r"idle_period='2880 minutes'"),
        ({"training": IdleTrainingJobs("gpu-dev-train", gpu_idle_percent=0)}, r"gpu_idle_percent=0 is not allowed"),
        ({"training": IdleTrainingJobs("gpu-dev-train", gpu_idle_percent=101)}, r"gpu_idle_percent=101"),
        ({"training": IdleTrainingJobs("gpu_dev")}, r"job_name_prefix='gpu_dev' is not allowed"),
        ({"training": IdleTrainingJobs("gpu-dev-train", progress_metric="")}, r"progress_metric='' is not allowed"),
        ({"notebooks": [NotebookSessionLimit("nb", max_session=Duration.minutes(30))]},
         r"max_session='30 minutes' is not allowed; allowed: whole minutes from 60 \(1 hour\) to 10080 \(7 days\)"),
        ({"notebooks": [NotebookSessionLimit("nb_1")]}, r"notebook_name='nb_1' is not allowed"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused(watch: dict[str, Any], message: str) -> None:
    app = cdk.App()
    stack, topic = _stack(app)
    with pytest.raises(ValidationError, match=message):
        IdleStop(stack, "IdleStop", topic=topic, name="gpu-dev", **watch)


def test_bad_group_name_is_refused() -> None:
    app = cdk.App()
    stack, topic = _stack(app)
    with pytest.raises(ValidationError, match=r"group_name='' is not allowed"):
        IdleStop(
            stack, "IdleStop", topic=topic, name="gpu-dev", fleet_groups=[IdleFleetGroup("", _alarm(stack, topic, "g"))]
        )
