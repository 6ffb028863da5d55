"""TopicAdmitsPublishers: a topic that CloudWatch, EventBridge or S3 publish to admits them on topic and key."""

from __future__ import annotations

from typing import Any

from rule_helpers import findings, template

RULE = "TopicAdmitsPublishers"
ID = "GpuPlatform::GpuPlatform-TopicAdmitsPublishers"
CW = "cloudwatch.amazonaws.com"
EB = "events.amazonaws.com"
S3 = "s3.amazonaws.com"
SOURCE = {"StringEquals": {"aws:SourceAccount": "111122223333"}}


def topic(key: Any = None) -> dict[str, Any]:
    props: dict[str, Any] = {"DisplayName": "alarms"}
    if key is not None:
        props["KmsMasterKeyId"] = key
    return {"Type": "AWS::SNS::Topic", "Properties": props}


def alarm(prop: str = "AlarmActions") -> dict[str, Any]:
    return {"Type": "AWS::CloudWatch::Alarm", "Properties": {prop: [{"Ref": "Topic"}], "Threshold": 1}}


def events_rule(role: bool = False) -> dict[str, Any]:
    target: dict[str, Any] = {"Arn": {"Ref": "Topic"}, "Id": "Target0"}
    if role:
        target["RoleArn"] = {"Fn::GetAtt": ["Role", "Arn"]}
    return {"Type": "AWS::Events::Rule", "Properties": {"Targets": [target]}}


def statement(
    service: str | None,
    actions: Any,
    condition: dict[str, Any] | None = None,
    *,
    principal: Any = None,
    effect: str = "Allow",
) -> dict[str, Any]:
    s: dict[str, Any] = {
        "Effect": effect,
        "Principal": principal if principal is not None else {"Service": service},
        "Action": actions,
        "Resource": "*",
    }
    if condition:
        s["Condition"] = condition
    return s


def topic_policy(*stmts: dict[str, Any]) -> dict[str, Any]:
    deny_http = statement(None, "sns:Publish", {"Bool": {"aws:SecureTransport": "false"}}, principal="*", effect="Deny")
    return {
        "Type": "AWS::SNS::TopicPolicy",
        "Properties": {"Topics": [{"Ref": "Topic"}], "PolicyDocument": {"Statement": [deny_http, *stmts]}},
    }


def key(*stmts: dict[str, Any]) -> dict[str, Any]:
    root = statement(None, "kms:*", principal={"AWS": "arn:aws:iam::111122223333:root"})
    return {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Statement": [root, *stmts]}}}


def ids(tpl: dict[str, Any]) -> list[str]:
    return sorted(f.id for f in findings(RULE, tpl))


# -- non-compliant ----------------------------------------------------------------------------------------


def test_ssl_only_topic_policy_without_cloudwatch_is_a_finding() -> None:
    """The bug of issue 12: enforce_ssl's topic policy replaced the default one, nothing admits the alarms."""
    tpl = template(
        Topic=topic({"Fn::GetAtt": ["Key", "Arn"]}),
        Alarm=alarm(),
        Policy=topic_policy(),
        Key=key(statement(CW, ["kms:Decrypt", "kms:GenerateDataKey*"], SOURCE)),
    )
    assert [(f.logical_id, f.id) for f in findings(RULE, tpl)] == [("Topic", f"{ID}[TopicPolicy:{CW}]")]


def test_a_composite_alarm_is_a_publisher() -> None:
    composite = {
        "Type": "AWS::CloudWatch::CompositeAlarm",
        "Properties": {"AlarmRule": 'ALARM("a")', "OKActions": [{"Ref": "Topic"}]},
    }
    tpl = template(Topic=topic(), Composite=composite, Policy=topic_policy())
    assert [(f.logical_id, f.id) for f in findings(RULE, tpl)] == [("Topic", f"{ID}[TopicPolicy:{CW}]")]
    admitted = template(Topic=topic(), Composite=composite, Policy=topic_policy(statement(CW, "sns:Publish", SOURCE)))
    assert findings(RULE, admitted) == []


def test_key_without_the_publisher_is_a_finding() -> None:
    tpl = template(
        Topic=topic({"Ref": "Key"}),
        Alarm=alarm("OKActions"),
        Policy=topic_policy(statement(CW, "sns:Publish", SOURCE)),
        Key=key(statement(CW, ["kms:Decrypt"], SOURCE)),
    )
    assert ids(tpl) == [f"{ID}[KeyPolicy:{CW}]"]


def test_key_through_an_alias_and_without_key_policy() -> None:
    tpl = template(
        Topic=topic({"Ref": "Alias"}),
        Alarm=alarm(),
        Policy=topic_policy(statement(CW, "sns:Publish")),
        Alias={"Type": "AWS::KMS::Alias", "Properties": {"TargetKeyId": {"Ref": "Key"}}},
        Key={"Type": "AWS::KMS::Key", "Properties": {}},
    )
    assert ids(tpl) == [f"{ID}[KeyPolicy:{CW}]"]


def test_aws_managed_key_is_a_finding_per_publisher() -> None:
    tpl = template(
        Topic=topic("alias/aws/sns"),
        Alarm=alarm(),
        Rule=events_rule(),
        Policy=topic_policy(statement(CW, "sns:Publish", SOURCE), statement(EB, "sns:Publish")),
    )
    assert ids(tpl) == [f"{ID}[AwsManagedKey:{CW}]", f"{ID}[AwsManagedKey:{EB}]"]


def test_eventbridge_key_statement_with_source_conditions_admits_nothing() -> None:
    tpl = template(
        Topic=topic({"Fn::GetAtt": ["Key", "Arn"]}),
        Rule=events_rule(),
        Policy=topic_policy(statement(EB, "sns:Publish")),
        Key=key(statement(EB, ["kms:Decrypt", "kms:GenerateDataKey*"], SOURCE)),
    )
    assert ids(tpl) == [f"{ID}[KeyPolicySourceCondition:{EB}]"]


def test_eventbridge_and_s3_need_a_statement_even_on_the_default_policy() -> None:
    bucket = {
        "Type": "AWS::S3::Bucket",
        "Properties": {
            "NotificationConfiguration": {
                "TopicConfigurations": [{"Event": "s3:ObjectCreated:*", "Topic": {"Ref": "Topic"}}]
            }
        },
    }
    tpl = template(Topic=topic(), Rule=events_rule(), Bucket=bucket, Alarm=alarm())
    assert ids(tpl) == [f"{ID}[TopicPolicy:{EB}]", f"{ID}[TopicPolicy:{S3}]"]


def test_cdk_bucket_notifications_custom_resource_is_a_publisher() -> None:
    notifications = {
        "Type": "Custom::S3BucketNotifications",
        "Properties": {
            "NotificationConfiguration": {
                "TopicConfigurations": [{"Events": ["s3:ObjectCreated:*"], "TopicArn": {"Ref": "Topic"}}]
            }
        },
    }
    tpl = template(Topic=topic(), Notifications=notifications, Policy=topic_policy())
    assert ids(tpl) == [f"{ID}[TopicPolicy:{S3}]"]


# -- compliant --------------------------------------------------------------------------------------------


def test_publishers_admitted_on_topic_and_key_are_compliant() -> None:
    context = {"StringLike": {"kms:EncryptionContext:aws:sns:topicArn": "arn:aws:sns:eu-west-1:111122223333:*"}}
    tpl = template(
        Topic=topic({"Fn::GetAtt": ["Key", "Arn"]}),
        Alarm=alarm("InsufficientDataActions"),
        Rule=events_rule(),
        Policy=topic_policy(statement(CW, "SNS:Publish", SOURCE), statement(EB, "sns:Publish")),
        Key=key(
            statement(CW, ["kms:Decrypt", "kms:GenerateDataKey*"], SOURCE),
            statement(EB, ["kms:Decrypt", "kms:GenerateDataKey"], context),
        ),
    )
    assert findings(RULE, tpl) == []


def test_default_policy_admits_the_accounts_own_alarms() -> None:
    assert findings(RULE, template(Topic=topic(), Alarm=alarm())) == []


def test_unconditioned_wildcard_principal_admits_publishers() -> None:
    wildcard = statement(None, ["sns:Publish"], principal={"AWS": "*"})
    tpl = template(Topic=topic(), Alarm=alarm(), Rule=events_rule(), Policy=topic_policy(wildcard))
    assert findings(RULE, tpl) == []


def test_account_narrowed_wildcard_principal_does_not_admit_a_service() -> None:
    narrowed = statement(None, "sns:Publish", {"StringEquals": {"aws:PrincipalAccount": "111122223333"}}, principal="*")
    tpl = template(Topic=topic(), Alarm=alarm(), Policy=topic_policy(narrowed))
    assert ids(tpl) == [f"{ID}[TopicPolicy:{CW}]"]


def test_not_applicable_and_unreadable_cases() -> None:
    role_target = template(Topic=topic(), Rule=events_rule(role=True), Policy=topic_policy())
    unrelated = template(
        Topic=topic(),
        Alarm={
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {"AlarmActions": ["arn:aws:sns:eu-west-1:111122223333:elsewhere"]},
        },
    )
    token_policy = template(
        Topic=topic({"Ref": "Key"}),
        Alarm=alarm(),
        Policy={
            "Type": "AWS::SNS::TopicPolicy",
            "Properties": {"Topics": [{"Ref": "Topic"}], "PolicyDocument": {"Fn::If": ["C", {}, {}]}},
        },
        Key={"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Fn::If": ["C", {}, {}]}}},
    )
    imported_key = template(
        Topic=topic("arn:aws:kms:eu-west-1:111122223333:key/abc"),
        Alarm=alarm(),
        Policy=topic_policy(statement(CW, "sns:Publish", SOURCE)),
    )
    for tpl in (role_target, unrelated, token_policy, imported_key):
        assert findings(RULE, tpl) == []


# -- AWS Budgets ------------------------------------------------------------------------------------------

BUDGETS = "budgets.amazonaws.com"
BUDGET_SOURCE = {
    "StringEquals": {"aws:SourceAccount": "111122223333"},
    "ArnLike": {"aws:SourceArn": "arn:aws:budgets::111122223333:*"},
}


def budget(subscription_type: str = "SNS") -> dict[str, Any]:
    subscriber = {"SubscriptionType": subscription_type, "Address": {"Ref": "Topic"}}
    notification = {"NotificationType": "ACTUAL", "ComparisonOperator": "GREATER_THAN", "Threshold": 80}
    return {
        "Type": "AWS::Budgets::Budget",
        "Properties": {
            "Budget": {"BudgetType": "COST", "TimeUnit": "MONTHLY"},
            "NotificationsWithSubscribers": [{"Notification": notification, "Subscribers": [subscriber]}],
        },
    }


def test_a_budget_notifying_a_topic_needs_budgets_on_topic_and_key() -> None:
    """AWS Cost Management User Guide, "Creating an Amazon SNS topic for budget notifications": the budget
    must be allowed to publish; on an encrypted topic the key must admit it too."""
    tpl = template(Topic=topic({"Fn::GetAtt": ["Key", "Arn"]}), Budget=budget(), Policy=topic_policy(), Key=key())
    assert ids(tpl) == [f"{ID}[KeyPolicy:{BUDGETS}]", f"{ID}[TopicPolicy:{BUDGETS}]"]
    # even the default topic policy (no AWS::SNS::TopicPolicy) does not admit the service
    assert ids(template(Topic=topic(), Budget=budget())) == [f"{ID}[TopicPolicy:{BUDGETS}]"]


def test_a_budget_admitted_on_topic_and_key_is_compliant() -> None:
    tpl = template(
        Topic=topic({"Fn::GetAtt": ["Key", "Arn"]}),
        Budget=budget(),
        Policy=topic_policy(statement(BUDGETS, "sns:Publish", BUDGET_SOURCE)),
        Key=key(statement(BUDGETS, ["kms:Decrypt", "kms:GenerateDataKey*"], BUDGET_SOURCE)),
    )
    assert ids(tpl) == []


def test_a_budget_that_only_e_mails_publishes_nothing() -> None:
    tpl = template(Topic=topic(), Budget=budget("EMAIL"))
    assert ids(tpl) == []
