"""EventRuleLambdaTargetPermitted: a rule's Lambda target lets events.amazonaws.com invoke it, for this rule."""

from __future__ import annotations

from typing import Any

from rule_helpers import findings, template

RULE = "EventRuleLambdaTargetPermitted"
FUNCTION = {"Type": "AWS::Lambda::Function", "Properties": {"Runtime": "python3.14", "Handler": "handler.handler"}}


def event_rule(*targets: dict[str, Any]) -> dict[str, Any]:
    return {
        "Type": "AWS::Events::Rule",
        "Properties": {"ScheduleExpression": "rate(5 minutes)", "Targets": list(targets)},
    }


def lambda_target(function: str = "Fn", **extra: Any) -> dict[str, Any]:
    return {"Id": "Target0", "Arn": {"Fn::GetAtt": [function, "Arn"]}, **extra}


def permission(function: str = "Fn", source: str | None = "Schedule", **props: Any) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "FunctionName": {"Fn::GetAtt": [function, "Arn"]},
        "Action": "lambda:InvokeFunction",
        "Principal": "events.amazonaws.com",
        **props,
    }
    if source is not None:
        properties["SourceArn"] = {"Fn::GetAtt": [source, "Arn"]}
    return {"Type": "AWS::Lambda::Permission", "Properties": properties}


def test_a_lambda_target_without_a_permission_is_a_finding() -> None:
    found = findings(RULE, template(Fn=FUNCTION, Schedule=event_rule(lambda_target())))
    assert [(f.logical_id, f.finding) for f in found] == [("Schedule", "Target:Fn")]


def test_a_permission_for_another_rule_principal_or_function_does_not_count() -> None:
    tpl = template(
        Fn=FUNCTION,
        Other=FUNCTION,
        Schedule=event_rule(lambda_target()),
        OtherRule=event_rule(lambda_target("Other")),
        ForOtherRule=permission(source="OtherRule"),
        ForS3=permission(Principal="s3.amazonaws.com"),
        GetPolicy=permission(Action="lambda:GetPolicy"),
        OtherFunction=permission("Other", source="OtherRule"),
    )
    found = findings(RULE, tpl)
    assert [(f.logical_id, f.finding) for f in found] == [("Schedule", "Target:Fn")]
    assert found[0].id == "GpuPlatform::GpuPlatform-EventRuleLambdaTargetPermitted[Target:Fn]"


def test_a_permitted_target_is_compliant() -> None:
    assert findings(RULE, template(Fn=FUNCTION, Schedule=event_rule(lambda_target()), Invoke=permission())) == []
    by_ref = permission(source=None, FunctionName={"Ref": "Fn"})  # no SourceArn: any rule of the account
    assert findings(RULE, template(Fn=FUNCTION, Schedule=event_rule(lambda_target()), Invoke=by_ref)) == []


def test_targets_with_a_role_or_outside_the_template_are_not_judged() -> None:
    with_role = lambda_target(RoleArn={"Fn::GetAtt": ["InvokeRole", "Arn"]})
    elsewhere = {"Id": "T", "Arn": "arn:aws:lambda:us-east-1:111122223333:function:other"}
    topic = {"Id": "T", "Arn": {"Ref": "Topic"}}
    tpl = template(
        Fn=FUNCTION,
        Topic={"Type": "AWS::SNS::Topic", "Properties": {}},
        Schedule=event_rule(with_role, elsewhere, topic),
    )
    assert findings(RULE, tpl) == []
