"""Topics that AWS services publish to: one recipe for who may publish to a topic and use its key.

A CloudWatch alarm action, an EventBridge rule target or an S3 event notification publishes *as the AWS
service*, not as a role of the account, so the service principal needs two permissions, and a missing one
fails silently (the alarm history says "Failed to execute action", no e-mail is sent):

* the **topic policy** must allow ``sns:Publish`` to the service. An ``AWS::SNS::TopicPolicy`` replaces the
  topic's default policy, and CDK creates one as soon as anything is added to the topic's resource policy
  (``enforce_ssl=True`` adds its Deny statement), so after that only the statements written here admit a
  publisher (AWS re:Post Knowledge Center, "Why didn't I receive an SNS notification for my CloudWatch alarm
  trigger?", https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger; Amazon EventBridge
  User Guide, "Using resource-based policies for Amazon EventBridge", "Amazon SNS permissions",
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-sns-permissions);
* when the topic is encrypted, the **key policy** must allow the service ``kms:GenerateDataKey*`` and
  ``kms:Decrypt``, and the key must be a customer managed key: the AWS managed key ``alias/aws/sns`` cannot be
  used, because its policy cannot be edited to admit the service (Amazon SNS Developer Guide, "Enable
  compatibility between event sources from AWS services and encrypted topics",
  https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services, steps 1-2;
  for alarms, AWS re:Post Knowledge Center, "How do I configure a CloudWatch alarm with an encrypted SNS
  topic?", https://repost.aws/knowledge-center/cloudwatch-configure-alarm-sns: with ``alias/aws/sns`` the
  alarm history shows "CloudWatch Alarms does not have authorization to access the SNS topic encryption
  key").

Conditions (IAM User Guide, "The confused deputy problem",
https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html): every statement carries
``aws:SourceAccount`` / ``aws:SourceArn`` where the service supports them (SNS guide, same section, step 3),
except where AWS documents that it does not:

* EventBridge: "You can't use ``Condition`` blocks in Amazon SNS topic policies for EventBridge" (EventBridge
  guide, section above), and "Adding the ``aws:SourceAccount``, ``aws:SourceArn``, and ``aws:SourceOrgID`` to
  a AWS KMS policy is not supported for EventBridge-to-encrypted topics" (SNS guide, step 3, Important). The
  topic statement therefore has no condition, and the key statement is limited by the encryption context
  that SNS binds to every data key of a topic, ``kms:EncryptionContext:aws:sns:topicArn`` (SNS Developer Guide,
  "Enabling server-side encryption (SSE) for an Amazon SNS topic", "Permissions for custom KMS keys",
  https://docs.aws.amazon.com/sns/latest/dg/sns-enable-encryption-for-topic.html), to this account's topics
  in this region (a topic's own ARN would be a dependency cycle: the topic refers to the key).
* CloudWatch alarms and S3: ``aws:SourceAccount`` plus ``aws:SourceArn`` (the account's alarms in this
  region; the notifying bucket) on both the topic and the key statement (Amazon S3 User Guide, "Granting
  permissions to publish event notification messages to a destination",
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/grant-destinations-permissions-to-s3.html).

Use :func:`notification_topic` to create such a topic, :func:`alarm_action` for an alarm action and
:func:`rule_target` for an EventBridge target: each admits its publisher, so none can be forgotten. The rule
pack checks the result on any template (``GpuPlatform-TopicAdmitsPublishers``,
``GpuPlatform-ServicePrincipalWithoutSourceCondition``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsii
from aws_cdk import Annotations, Stack, Token
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk.interfaces.aws_events import IRuleRef
from constructs import Construct, IConstruct

from gpu_constructs.errors import ValidationError, path_of

#: Service principals that publish to SNS topics for the platform.
CLOUDWATCH_ALARMS = "cloudwatch.amazonaws.com"
EVENTBRIDGE = "events.amazonaws.com"
S3_NOTIFICATIONS = "s3.amazonaws.com"
BUDGETS = "budgets.amazonaws.com"

#: What a publishing service needs on the customer managed key of an encrypted topic (SNS guide, step 2).
PUBLISHER_KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey*")

#: The AWS managed SNS key, which no AWS service can publish with (its key policy cannot be edited).
AWS_MANAGED_SNS_KEY_ALIAS = "alias/aws/sns"

#: The SNS encryption-context key that names the topic a data key belongs to.
SNS_TOPIC_CONTEXT_KEY = "kms:EncryptionContext:aws:sns:topicArn"


@dataclass(frozen=True)
class Publisher:
    """An AWS service that publishes to a topic, and the conditions that pin it to this account's sources.

    Build one with :meth:`cloudwatch_alarms`, :meth:`event_rules`, :meth:`s3_bucket` or :meth:`budgets`.
    """

    #: The publishing service principal, e.g. ``cloudwatch.amazonaws.com``.
    service: str
    #: Conditions of the topic-policy statement (empty where AWS documents that none may be used).
    topic_conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Conditions of the key-policy statement.
    key_conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: A short name for statement ids, unique per source (``CloudWatchAlarms``, ``EventBridge``, ``S3<id>``).
    label: str = ""

    @classmethod
    def cloudwatch_alarms(cls, scope: IConstruct) -> Publisher:
        """CloudWatch alarms of ``scope``'s account and region (alarm actions, OK and insufficient-data actions)."""
        stack = Stack.of(scope)
        source = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"},
        }
        return cls(CLOUDWATCH_ALARMS, source, source, "CloudWatchAlarms")

    @classmethod
    def event_rules(cls, scope: IConstruct) -> Publisher:
        """EventBridge rules with the topic as target (no topic-policy condition, key limited by encryption context)."""
        stack = Stack.of(scope)
        topics = f"arn:{stack.partition}:sns:{stack.region}:{stack.account}:*"
        return cls(EVENTBRIDGE, {}, {"StringLike": {SNS_TOPIC_CONTEXT_KEY: topics}}, "EventBridgeRules")

    @classmethod
    def s3_bucket(cls, bucket: s3.IBucket) -> Publisher:
        """Event notifications of one S3 bucket of the stack's account."""
        stack = Stack.of(bucket)
        source = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": bucket.bucket_arn},
        }
        return cls(S3_NOTIFICATIONS, source, source, "S3" + bucket.node.addr[:12])

    @classmethod
    def budgets(cls, scope: IConstruct) -> Publisher:
        """AWS Budgets notifications of ``scope``'s account.

        The topic statement is the one of the AWS Cost Management User Guide, "Creating an Amazon SNS topic for
        budget notifications" (https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-sns-policy.html):
        ``"StringEquals": {"aws:SourceAccount": "<account-id>"}, "ArnLike": {"aws:SourceArn":
        "arn:aws:budgets::<account-id>:*"}`` (budget ARNs have no region). The same conditions pin the key
        statement (SNS Developer Guide, "Enable compatibility between event sources from AWS services and encrypted
        topics", step 3). The guide also says "Amazon SNS topics must be in the same account as the Budgets you're
        configuring. Cross-account Amazon SNS isn't supported."
        """
        stack = Stack.of(scope)
        source = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:budgets::{stack.account}:*"},
        }
        return cls(BUDGETS, source, source, "Budgets")


def _is_aws_managed_sns_key(key: kms.IKey) -> bool:
    alias = getattr(key, "alias_name", None)
    return isinstance(alias, str) and not Token.is_unresolved(alias) and alias == AWS_MANAGED_SNS_KEY_ALIAS


def admit_publishers(topic: sns.ITopic, *publishers: Publisher, key: kms.IKey | None = None) -> None:
    """Let each publisher publish to ``topic`` and, when it is encrypted, use its key (``key`` or the topic's).

    Adds one topic-policy statement and one key-policy statement per publisher (identical statements added
    twice render once). An imported topic or key gets no statement: a warning names what to add by hand.

    :raises ValidationError: the topic is encrypted with the AWS managed key ``alias/aws/sns``.
    """
    key = key or topic.master_key
    if key is not None and _is_aws_managed_sns_key(key):
        raise ValidationError(
            path_of(topic.node.path),
            f"master key {AWS_MANAGED_SNS_KEY_ALIAS!r} is not allowed for a topic that "
            f"{', '.join(p.service for p in publishers)} publish to: its key policy cannot admit an AWS service; "
            "allowed: a customer managed KMS key (for example the platform's monitoring key)",
        )
    for publisher in publishers:
        topic_statement = iam.PolicyStatement(
            sid=f"Allow{publisher.label}Publish",
            principals=[iam.ServicePrincipal(publisher.service)],
            actions=["sns:Publish"],
            resources=[topic.topic_arn],
            conditions=publisher.topic_conditions or None,
        )
        if not topic.add_to_resource_policy(topic_statement).statement_added:
            _warn(topic, "topic-policy", f"the policy of an imported topic: allow {publisher.service} sns:Publish")
        if key is None:
            continue
        key_statement = iam.PolicyStatement(
            sid=f"Allow{publisher.label}ToPublishEncrypted",
            principals=[iam.ServicePrincipal(publisher.service)],
            actions=list(PUBLISHER_KEY_ACTIONS),
            resources=["*"],
            conditions=publisher.key_conditions or None,
        )
        if not key.add_to_resource_policy(key_statement).statement_added:
            _warn(topic, "key-policy", f"the key policy of an imported key: allow {publisher.service} "
                  f"{' and '.join(PUBLISHER_KEY_ACTIONS)}")  # fmt: skip


def _warn(topic: sns.ITopic, what: str, text: str) -> None:
    Annotations.of(topic).add_warning_v2(
        f"gpu-constructs:publisher-{what}", f"Add {text}, or its notifications are never delivered"
    )


def notification_topic(
    scope: Construct,
    construct_id: str,
    *,
    display_name: str,
    master_key: kms.IKey,
    emails: Iterable[str] = (),
    publishers: Sequence[Publisher] = (),
) -> sns.Topic:
    """An SNS topic for alarms and events: encrypted with ``master_key`` (a customer managed key), HTTPS-only,
    e-mail subscriptions for ``emails``, and the given ``publishers`` admitted on topic and key.

    The topic is created as ``scope/construct_id`` (no wrapper construct, so its logical id is that of a plain
    ``sns.Topic`` with this id).
    """
    topic = sns.Topic(scope, construct_id, display_name=display_name, master_key=master_key, enforce_ssl=True)
    for address in emails:
        topic.add_subscription(subscriptions.EmailSubscription(address))
    if publishers:
        admit_publishers(topic, *publishers)
    return topic


def alarm_action(topic: sns.ITopic) -> cw_actions.SnsAction:
    """The alarm action that notifies ``topic``, with CloudWatch alarms admitted on the topic and its key."""
    admit_publishers(topic, Publisher.cloudwatch_alarms(topic))
    return cw_actions.SnsAction(topic)


@jsii.implements(events.IRuleTarget)
class _TopicTarget:
    def __init__(self, topic: sns.ITopic, message: events.RuleTargetInput | None) -> None:
        self._topic = topic
        self._message = message

    def bind(self, rule: IRuleRef, id: str | None = None) -> events.RuleTargetConfig:
        admit_publishers(self._topic, Publisher.event_rules(rule))
        return events.RuleTargetConfig(arn=self._topic.topic_arn, input=self._message, target_resource=self._topic)


def rule_target(topic: sns.ITopic, *, message: events.RuleTargetInput | None = None) -> events.IRuleTarget:
    """An EventBridge rule target that publishes ``message`` (default: the event) to ``topic``.

    Unlike ``aws_events_targets.SnsTopic``, whose key-policy statement for EventBridge carries no condition,
    the key statement is limited by the SNS encryption context to this account's topics in this region.
    """
    target: events.IRuleTarget = _TopicTarget(topic, message)
    return target


__all__ = [
    "AWS_MANAGED_SNS_KEY_ALIAS",
    "BUDGETS",
    "CLOUDWATCH_ALARMS",
    "EVENTBRIDGE",
    "PUBLISHER_KEY_ACTIONS",
    "S3_NOTIFICATIONS",
    "Publisher",
    "admit_publishers",
    "alarm_action",
    "notification_topic",
    "rule_target",
]
