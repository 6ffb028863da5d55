"""Alarm and event topics admit exactly their publishers, on the topic policy and on the topic's KMS key.

Issue 12, failure 5: the training and inference topics did not admit ``cloudwatch.amazonaws.com`` (their
``enforce_ssl`` topic policy replaces the default one), and their keys allowed CloudWatch and EventBridge
with no condition. These tests read the synthesized stacks of every environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from gpu_constructs.errors import ValidationError
from gpu_constructs.rules import check_template
from gpu_constructs.templates import as_list, flatten, ref_id
from gpu_constructs.topics import Publisher, admit_publishers, alarm_action, notification_topic, rule_target

ALARM_ACTIONS = ("AlarmActions", "OKActions", "InsufficientDataActions")
RULES = ["TopicAdmitsPublishers", "ServicePrincipalWithoutSourceCondition"]


def _resources(template: Mapping[str, Any], resource_type: str) -> dict[str, Mapping[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def _alarm_topics(template: Mapping[str, Any]) -> set[str]:
    return {
        ref
        for alarm in _resources(template, "AWS::CloudWatch::Alarm").values()
        for prop in ALARM_ACTIONS
        for action in as_list(alarm["Properties"].get(prop))
        if (ref := ref_id(action)) and template["Resources"].get(ref, {}).get("Type") == "AWS::SNS::Topic"
    }


def _topic_statements(template: Mapping[str, Any], topic: str) -> list[Mapping[str, Any]]:
    return [
        s
        for policy in _resources(template, "AWS::SNS::TopicPolicy").values()
        if any(ref_id(t) == topic for t in policy["Properties"]["Topics"])
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _key_statements(template: Mapping[str, Any], topic: str) -> list[Mapping[str, Any]]:
    key_id = ref_id(template["Resources"][topic]["Properties"]["KmsMasterKeyId"])
    assert key_id is not None, f"{topic} is not encrypted with a key of its own stack"
    return template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]


def _for(statements: list[Mapping[str, Any]], service: str) -> list[Mapping[str, Any]]:
    return [s for s in statements if s["Effect"] == "Allow" and service in as_list(s["Principal"].get("Service"))]


def _one(statements: list[Mapping[str, Any]], service: str, where: str) -> Mapping[str, Any]:
    found = _for(statements, service)
    assert len(found) == 1, f"{where}: expected one Allow statement for {service}, found {found}"
    return found[0]


def _assert_alarm_conditions(statement: Mapping[str, Any]) -> None:
    condition = statement.get("Condition", {})
    assert {"StringEquals", "ArnLike"} <= set(condition), f"no aws:SourceAccount/aws:SourceArn in {statement}"
    assert condition["StringEquals"]["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}
    source_arn = flatten(condition["ArnLike"]["aws:SourceArn"])
    assert ":cloudwatch:" in source_arn and source_arn.endswith(":${AWS::AccountId}:alarm:*"), source_arn


CASES = [(env, stack) for env in ("dev", "prod") for stack in ("training", "inference", "fleets")]


@pytest.mark.parametrize(("env", "stack"), CASES)
def test_alarm_topics_admit_cloudwatch_on_topic_and_key(synth: Any, env: str, stack: str) -> None:
    template = synth(env).template(stack)
    topics = _alarm_topics(template)
    assert topics, f"no alarm action in the {env} {stack} stack"
    for topic in sorted(topics):
        publish = _one(_topic_statements(template, topic), "cloudwatch.amazonaws.com", f"{env} {stack} {topic} policy")
        assert publish["Action"] == "sns:Publish"
        assert publish["Resource"] == {"Ref": topic}
        _assert_alarm_conditions(publish)
        use_key = _one(_key_statements(template, topic), "cloudwatch.amazonaws.com", f"{env} {stack} {topic} key")
        assert use_key["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]
        _assert_alarm_conditions(use_key)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_training_topic_admits_eventbridge_as_documented(synth: Any, env: str) -> None:
    template = synth(env).template("training")
    topics = _resources(template, "AWS::SNS::Topic")
    # The stack's other rule (the idle-stop schedule) targets a function, not a topic.
    [topic] = {
        str(ref_id(t["Arn"]))
        for rule in _resources(template, "AWS::Events::Rule").values()
        for t in rule["Properties"]["Targets"]
        if ref_id(t["Arn"]) in topics
    }
    # Topic policy: EventBridge documents that no Condition block may be used for it.
    publish = _one(_topic_statements(template, topic), "events.amazonaws.com", f"{env} training topic policy")
    assert publish["Action"] == "sns:Publish" and "Condition" not in publish
    # Key policy: no aws:Source* (unsupported for EventBridge-to-encrypted topics), the SNS encryption context.
    use_key = _one(_key_statements(template, topic), "events.amazonaws.com", f"{env} training key")
    assert use_key["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert list(use_key.get("Condition", {})) == ["StringLike"], use_key
    context = flatten(use_key["Condition"]["StringLike"]["kms:EncryptionContext:aws:sns:topicArn"])
    assert context.endswith(":sns:" + ("us-east-1" if env == "dev" else "us-west-2") + ":${AWS::AccountId}:*")


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_platform_stacks_pass_the_publisher_rules(synth: Any, env: str) -> None:
    found = [f"{name}: {f}" for name, t in synth(env).templates.items() for f in check_template(t, rules=RULES)]
    assert found == []


# -- the helpers ------------------------------------------------------------------------------------------


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Topics", env=cdk.Environment(account="111122223333", region="eu-west-1"))


def _alarm(stack: cdk.Stack, name: str) -> cloudwatch.Alarm:
    metric = cloudwatch.Metric(namespace="Test", metric_name="Errors")
    return metric.create_alarm(stack, name, threshold=1, evaluation_periods=1)


def test_alarm_action_admits_cloudwatch_once_for_many_alarms() -> None:
    stack = _stack()
    topic = notification_topic(stack, "Alarms", display_name="alarms", master_key=kms.Key(stack, "Key"))
    for name in ("A", "B"):
        _alarm(stack, name).add_alarm_action(alarm_action(topic))
    template = assertions.Template.from_stack(stack).to_json()
    [topic_id] = _resources(template, "AWS::SNS::Topic")
    assert len(_for(_topic_statements(template, topic_id), "cloudwatch.amazonaws.com")) == 1
    [use_key] = _for(_key_statements(template, topic_id), "cloudwatch.amazonaws.com")
    assert use_key["Condition"]["StringEquals"] == {"aws:SourceAccount": "111122223333"}
    assert flatten(use_key["Condition"]["ArnLike"]["aws:SourceArn"]) == (
        "arn:${AWS::Partition}:cloudwatch:eu-west-1:111122223333:alarm:*"
    )
    assert check_template(template, rules=RULES) == []


def test_notification_topic_is_https_only_with_email_subscriptions() -> None:
    stack = _stack()
    notification_topic(
        stack, "Alarms", display_name="alarms", master_key=kms.Key(stack, "Key"), emails=["ops@example.com"]
    )
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"})
    template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": assertions.Match.array_with(
                    [
                        assertions.Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            }
        },
    )


def test_rule_target_has_no_unconditioned_key_statement() -> None:
    stack = _stack()
    topic = notification_topic(stack, "Events", display_name="events", master_key=kms.Key(stack, "Key"))
    rule = events.Rule(stack, "Rule", event_pattern=events.EventPattern(source=["aws.sagemaker"]))
    rule.add_target(rule_target(topic, message=events.RuleTargetInput.from_text("failed")))
    template = assertions.Template.from_stack(stack).to_json()
    [rule_def] = _resources(template, "AWS::Events::Rule").values()
    [target] = rule_def["Properties"]["Targets"]
    assert ref_id(target["Arn"]) in _resources(template, "AWS::SNS::Topic") and target["Input"] == '"failed"'
    [topic_id] = _resources(template, "AWS::SNS::Topic")
    [use_key] = _for(_key_statements(template, topic_id), "events.amazonaws.com")
    assert "StringLike" in use_key["Condition"]
    assert check_template(template, rules=RULES) == []


def test_s3_publisher_is_pinned_to_the_bucket_and_account() -> None:
    stack = _stack()
    bucket = s3.Bucket(stack, "Bucket")
    topic = notification_topic(
        stack,
        "Objects",
        display_name="objects",
        master_key=kms.Key(stack, "Key"),
        publishers=[Publisher.s3_bucket(bucket)],
    )
    template = assertions.Template.from_stack(stack).to_json()
    [topic_id] = _resources(template, "AWS::SNS::Topic")
    assert topic.topic_arn  # the topic exists
    for statement in (
        *_for(_topic_statements(template, topic_id), "s3.amazonaws.com"),
        *_for(_key_statements(template, topic_id), "s3.amazonaws.com"),
    ):
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "111122223333"}
        assert ref_id(statement["Condition"]["ArnLike"]["aws:SourceArn"]) in _resources(template, "AWS::S3::Bucket")


def test_aws_managed_sns_key_is_refused_with_a_clear_message() -> None:
    stack = _stack()
    topic = sns.Topic(stack, "Managed", master_key=kms.Alias.from_alias_name(stack, "SnsKey", "alias/aws/sns"))
    with pytest.raises(ValidationError, match=r"Topics/Managed: master key 'alias/aws/sns' is not allowed .*"
                       r"cloudwatch.amazonaws.com.*allowed: a customer managed KMS key"):  # fmt: skip
        alarm_action(topic)


def test_imported_topic_gets_a_warning_naming_the_statement_to_add() -> None:
    stack = _stack()
    topic = sns.Topic.from_topic_arn(stack, "Imported", "arn:aws:sns:eu-west-1:111122223333:ops")
    admit_publishers(topic, Publisher.cloudwatch_alarms(stack))
    warnings = assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.string_like_regexp(
        "Add the policy of an imported topic: allow cloudwatch.amazonaws.com sns:Publish"))  # fmt: skip
    assert len(warnings) == 1
