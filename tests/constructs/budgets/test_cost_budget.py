"""CostBudget: a monthly cost budget on cost-allocation tags, alerting a topic that admits AWS Budgets."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns

from gpu_constructs.budgets import CostBudget, check_budget
from gpu_constructs.budgets.limits import MAX_EMAIL_SUBSCRIBERS, MAX_NOTIFICATIONS
from gpu_constructs.errors import ValidationError
from gpu_constructs.rules import check_template

TAGS = {"project": "gpu-platform", "environment": "dev"}
RULES = ["TopicAdmitsPublishers", "ServicePrincipalWithoutSourceCondition"]


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="111122223333", region="us-east-1"))


def _template(**kwargs: Any) -> dict[str, Any]:
    stack = _stack()
    CostBudget(stack, "Budget", **{"monthly_limit_usd": 500, "cost_allocation_tags": TAGS, **kwargs})
    return assertions.Template.from_stack(stack).to_json()


def _one(template: dict[str, Any], resource_type: str) -> dict[str, Any]:
    found = [r for r in template["Resources"].values() if r["Type"] == resource_type]
    assert len(found) == 1, found
    return found[0]


def test_monthly_cost_budget_filters_on_every_tag() -> None:
    budget = _one(_template(), "AWS::Budgets::Budget")["Properties"]["Budget"]
    assert budget["BudgetType"] == "COST" and budget["TimeUnit"] == "MONTHLY"
    assert budget["BudgetLimit"] == {"Amount": 500, "Unit": "USD"}
    assert budget["FilterExpression"] == {
        "And": [
            {"Tags": {"Key": "environment", "Values": ["dev"], "MatchOptions": ["EQUALS"]}},
            {"Tags": {"Key": "project", "Values": ["gpu-platform"], "MatchOptions": ["EQUALS"]}},
        ]
    }
    assert "CostFilters" not in budget


def test_one_tag_is_one_tags_expression() -> None:
    budget = _one(_template(cost_allocation_tags={"project": "p"}), "AWS::Budgets::Budget")["Properties"]["Budget"]
    assert budget["FilterExpression"] == {"Tags": {"Key": "project", "Values": ["p"], "MatchOptions": ["EQUALS"]}}


def test_actual_and_forecasted_notifications_to_topic_and_emails() -> None:
    template = _template(alert_percentages=(50, 90), forecast_alert_percent=110, emails=["a@example.com"])
    topic_id = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::SNS::Topic")
    notifications = _one(template, "AWS::Budgets::Budget")["Properties"]["NotificationsWithSubscribers"]
    assert [(n["Notification"]["NotificationType"], n["Notification"]["Threshold"]) for n in notifications] == [
        ("ACTUAL", 50),
        ("ACTUAL", 90),
        ("FORECASTED", 110),
    ]
    for n in notifications:
        assert n["Notification"]["ComparisonOperator"] == "GREATER_THAN"
        assert n["Notification"]["ThresholdType"] == "PERCENTAGE"
        assert n["Subscribers"] == [
            {"SubscriptionType": "SNS", "Address": {"Ref": topic_id}},
            {"SubscriptionType": "EMAIL", "Address": "a@example.com"},
        ]


def test_no_forecast_notification() -> None:
    notifications = _one(_template(forecast_alert_percent=None), "AWS::Budgets::Budget")["Properties"][
        "NotificationsWithSubscribers"
    ]
    assert {n["Notification"]["NotificationType"] for n in notifications} == {"ACTUAL"}


def test_default_topic_is_encrypted_and_admits_budgets_with_source_conditions() -> None:
    template = _template()
    topic = _one(template, "AWS::SNS::Topic")["Properties"]
    key_id = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key")
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    condition = {
        "StringEquals": {"aws:SourceAccount": "111122223333"},
        "ArnLike": {
            "aws:SourceArn": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":budgets::111122223333:*"]]}
        },
    }
    publish = [
        s
        for s in _one(template, "AWS::SNS::TopicPolicy")["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Principal") == {"Service": "budgets.amazonaws.com"}
    ]
    assert [(s["Effect"], s["Action"], s["Condition"]) for s in publish] == [("Allow", "sns:Publish", condition)]
    key_statements = [
        s
        for s in template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "budgets.amazonaws.com"}
    ]
    assert [(s["Action"], s["Condition"]) for s in key_statements] == [
        (["kms:Decrypt", "kms:GenerateDataKey*"], condition)
    ]
    assert check_template(template, rules=RULES) == []


def test_budget_waits_for_the_topic_policy() -> None:
    template = _template()
    policy_id = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::SNS::TopicPolicy")
    assert policy_id in _one(template, "AWS::Budgets::Budget")["DependsOn"]


def test_a_given_topic_and_its_key_admit_budgets() -> None:
    stack = _stack()
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    topic = sns.Topic(stack, "Alerts", master_key=key, enforce_ssl=True)
    budget = CostBudget(stack, "Budget", monthly_limit_usd=10, cost_allocation_tags=TAGS, topic=topic)
    assert budget.topic is topic and budget.key is None
    template = assertions.Template.from_stack(stack).to_json()
    assert len([r for r in template["Resources"].values() if r["Type"] == "AWS::SNS::Topic"]) == 1
    assert check_template(template, rules=RULES) == []


def test_a_topic_that_does_not_admit_budgets_is_a_finding() -> None:
    """Without Publisher.budgets the SSL-only topic policy admits no one: the pack reports it."""
    stack = _stack()
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    topic = sns.Topic(stack, "Alerts", master_key=key, enforce_ssl=True)
    CostBudget(stack, "Budget", monthly_limit_usd=10, cost_allocation_tags=TAGS, topic=topic)
    template = assertions.Template.from_stack(stack).to_json()
    policy = next(r for r in template["Resources"].values() if r["Type"] == "AWS::SNS::TopicPolicy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    policy["Properties"]["PolicyDocument"]["Statement"] = [s for s in statements if s["Effect"] == "Deny"]
    found = check_template(template, rules=["TopicAdmitsPublishers"])
    assert [f.id.rsplit("[", 1)[-1] for f in found] == ["TopicPolicy:budgets.amazonaws.com]"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"monthly_limit_usd": 0}, r"monthly_limit_usd=0 is not allowed; allowed: a number of US dollars > 0"),
        ({"alert_percentages": (0,)}, r"alert_percentages\[0\]=0 is not allowed; allowed: a percentage > 0"),
        ({"alert_percentages": (80, 80)}, r"lists a percentage twice"),
        ({"forecast_alert_percent": 2_000_000}, r"forecast_alert_percent=2000000 is not allowed"),
        ({"alert_percentages": (), "forecast_alert_percent": None}, r"alerts nobody"),
        ({"alert_percentages": tuple(range(1, MAX_NOTIFICATIONS + 1))}, r"11 notifications .* at most 10"),
        ({"emails": [f"a{i}@example.com" for i in range(MAX_EMAIL_SUBSCRIBERS + 1)]}, r"at most 10 e-mail"),
        ({"cost_allocation_tags": {}}, r"cost_allocation_tags=\{\} is not allowed"),
        ({"cost_allocation_tags": {"aws:createdBy": "x"}}, r"a user tag \(not aws:...\)"),
        ({"budget_name": "a:b"}, r"budget_name='a:b' is not allowed"),
    ],
)
def test_settings_aws_budgets_refuses_fail_with_the_construct_path(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=r"S/Budget: .*" + message):
        _template(**kwargs)


def test_check_budget_accepts_the_defaults() -> None:
    assert (
        check_budget(
            monthly_limit_usd=1,
            alert_percentages=(80, 100),
            forecast_alert_percent=100,
            emails=(),
            cost_allocation_tags=TAGS,
            budget_name="gpu-dev-monthly-cost",
        )
        == []
    )
