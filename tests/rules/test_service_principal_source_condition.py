"""ServicePrincipalWithoutSourceCondition: service principals in key, topic and queue policies are pinned."""

from __future__ import annotations

from typing import Any

from rule_helpers import findings, template

RULE = "ServicePrincipalWithoutSourceCondition"
ID = "GpuPlatform::GpuPlatform-ServicePrincipalWithoutSourceCondition"


def allow(service: Any, actions: Any, condition: dict[str, Any] | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"Effect": "Allow", "Principal": {"Service": service}, "Action": actions, "Resource": "*"}
    if condition:
        s["Condition"] = condition
    return s


def key(*stmts: dict[str, Any]) -> dict[str, Any]:
    return {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Statement": list(stmts)}}}


def policy(resource_type: str, *stmts: dict[str, Any]) -> dict[str, Any]:
    return {"Type": resource_type, "Properties": {"PolicyDocument": {"Statement": list(stmts)}}}


KMS = ["kms:Decrypt", "kms:GenerateDataKey*"]
ACCOUNT = {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_unpinned_service_principals_are_findings_per_service() -> None:
    tpl = template(
        Key=key(allow(["cloudwatch.amazonaws.com", "s3.amazonaws.com"], KMS)),
        Topic=policy("AWS::SNS::TopicPolicy", allow("cloudwatch.amazonaws.com", "sns:Publish")),
        Queue=policy("AWS::SQS::QueuePolicy", allow("events.amazonaws.com", "sqs:SendMessage")),
        Inline=policy("AWS::SQS::QueueInlinePolicy", allow("sns.amazonaws.com", "sqs:SendMessage")),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Inline", f"{ID}[sns.amazonaws.com]"),
        ("Key", f"{ID}[cloudwatch.amazonaws.com]"),
        ("Key", f"{ID}[s3.amazonaws.com]"),
        ("Queue", f"{ID}[events.amazonaws.com]"),
        ("Topic", f"{ID}[cloudwatch.amazonaws.com]"),
    ]


def test_if_exists_and_unrelated_conditions_do_not_pin() -> None:
    tpl = template(
        Key=key(
            allow("cloudwatch.amazonaws.com", KMS, {"StringEqualsIfExists": {"aws:SourceAccount": "111122223333"}}),
            allow("sns.amazonaws.com", KMS, {"Bool": {"aws:SecureTransport": "true"}}),
        )
    )
    assert sorted(f.id for f in findings(RULE, tpl)) == [f"{ID}[cloudwatch.amazonaws.com]", f"{ID}[sns.amazonaws.com]"]


def test_documented_alternatives_apply_only_where_documented() -> None:
    logs_context = {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:eu-west-1:111122223333:*"}}
    tpl = template(
        # EventBridge with no condition in a *queue* policy: SQS documents aws:SourceArn for it.
        Queue=policy("AWS::SQS::QueuePolicy", allow("events.amazonaws.com", "sqs:SendMessage")),
        # EventBridge in a topic policy with more than sns:Publish: not the documented case.
        Topic=policy("AWS::SNS::TopicPolicy", allow("events.amazonaws.com", ["sns:Publish", "sns:Subscribe"])),
        # The CloudWatch Logs encryption context does not pin another service.
        Key=key(allow("cloudwatch.amazonaws.com", KMS, logs_context)),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("Key", f"{ID}[cloudwatch.amazonaws.com]"),
        ("Queue", f"{ID}[events.amazonaws.com]"),
        ("Topic", f"{ID}[events.amazonaws.com]"),
    ]


def test_pinned_statements_and_documented_alternatives_are_compliant() -> None:
    tpl = template(
        Key=key(
            allow("cloudwatch.amazonaws.com", KMS, {**ACCOUNT, "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:*"}}),
            allow("logging.s3.amazonaws.com", KMS, ACCOUNT),
            allow(
                {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]},
                KMS,
                {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:eu-west-1:111122223333:*"}},
            ),
            allow(
                "logs.eu-west-1.amazonaws.com",
                KMS,
                {"ArnEquals": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:eu-west-1:1:log-group:x"}},
            ),
            allow(
                "events.amazonaws.com",
                KMS,
                {"StringLike": {"kms:EncryptionContext:aws:sns:topicArn": "arn:aws:sns:eu-west-1:111122223333:*"}},
            ),
            allow("sns.amazonaws.com", KMS, {"ArnLike": {"AWS:SourceArn": "arn:aws:sns:eu-west-1:111122223333:t"}}),
            {"Effect": "Deny", "Principal": {"Service": "s3.amazonaws.com"}, "Action": "kms:*", "Resource": "*"},
            {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::111122223333:root"}, "Action": "kms:*"},
        ),
        Topic=policy("AWS::SNS::TopicInlinePolicy", allow("events.amazonaws.com", "sns:Publish")),
        Queue=policy(
            "AWS::SQS::QueuePolicy",
            allow("sns.amazonaws.com", "sqs:SendMessage", {"StringEquals": {"aws:SourceOrgID": "o-abc"}}),
        ),
    )
    assert findings(RULE, tpl) == []


def test_unreadable_or_absent_policy_is_not_judged() -> None:
    tpl = template(
        A={"Type": "AWS::KMS::Key", "Properties": {}},
        B={"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Fn::If": ["C", {}, {}]}}},
        C={
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {
                "PolicyDocument": {
                    "Statement": [allow("logdelivery.elasticloadbalancing.amazonaws.com", "s3:PutObject")]
                }
            },
        },
    )
    assert findings(RULE, tpl) == []
