"""An SNS topic that an AWS service publishes to must admit that service on the topic and on the topic's key.

A CloudWatch alarm action, an EventBridge rule target, an S3 event notification and an AWS Budgets notification
publish to SNS *as the service principal* (``cloudwatch.amazonaws.com``, ``events.amazonaws.com``,
``s3.amazonaws.com``, ``budgets.amazonaws.com``). When the
topic does not admit it, the publish fails silently: nothing is deployed wrong, no e-mail ever arrives, and
only the alarm history says "Failed to execute action ... is not authorized to perform: SNS:Publish".

* **Topic policy.** An ``AWS::SNS::TopicPolicy`` replaces the topic's default policy (the default one lets the
  account's own principals, and with them CloudWatch alarms of the account, publish); CDK creates one as soon
  as anything is added to the topic's resource policy, ``enforce_ssl=True`` included. From then on the service
  needs an ``Allow`` of ``sns:Publish`` (AWS re:Post Knowledge Center, "Why didn't I receive an SNS
  notification for my CloudWatch alarm trigger?",
  https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger). EventBridge and S3 need it
  even on the default policy (Amazon EventBridge User Guide, "Using resource-based policies for Amazon
  EventBridge", "Amazon SNS permissions",
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-sns-permissions;
  Amazon S3 User Guide, "Granting permissions to publish event notification messages to a destination",
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/grant-destinations-permissions-to-s3.html), and so does
  AWS Budgets: "Your budget must have permissions to send a notification to your topic" (AWS Cost Management
  User Guide, "Creating an Amazon SNS topic for budget notifications",
  https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-sns-policy.html, whose statement allows
  ``budgets.amazonaws.com`` ``SNS:Publish`` with ``aws:SourceAccount`` and ``aws:SourceArn``
  ``arn:aws:budgets::<account-id>:*``).
* **Key policy.** On an encrypted topic the service must be allowed ``kms:GenerateDataKey*`` and
  ``kms:Decrypt`` by the key policy, so the key must be a customer managed key (Amazon SNS Developer Guide,
  "Enable compatibility between event sources from AWS services and encrypted topics",
  https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services, steps 1-2).
  The AWS managed key ``alias/aws/sns`` cannot be used at all: its key policy cannot be edited, and an alarm
  that publishes with it fails with "CloudWatch Alarms does not have authorization to access the SNS topic
  encryption key" (AWS re:Post Knowledge Center, "How do I configure a CloudWatch alarm with an encrypted SNS
  topic?", https://repost.aws/knowledge-center/cloudwatch-configure-alarm-sns).
* **EventBridge and source conditions on the key.** "Adding the ``aws:SourceAccount``, ``aws:SourceArn``, and
  ``aws:SourceOrgID`` to a AWS KMS policy is not supported for EventBridge-to-encrypted topics" (SNS guide,
  same section, step 3, Important): a key statement for ``events.amazonaws.com`` that carries them admits
  nothing. Limit it with the SNS encryption context ``kms:EncryptionContext:aws:sns:topicArn`` instead.

Publishers are found in the same template: ``AlarmActions``/``OKActions``/``InsufficientDataActions`` of an
``AWS::CloudWatch::Alarm`` or ``AWS::CloudWatch::CompositeAlarm``, ``Targets[].Arn`` of an ``AWS::Events::Rule``
(targets with a ``RoleArn`` publish as that role and are skipped),
``NotificationConfiguration.TopicConfigurations[].Topic`` of an ``AWS::S3::Bucket``, ``TopicArn`` of CDK's
``Custom::S3BucketNotifications`` and ``NotificationsWithSubscribers[].Subscribers[].Address`` (``SubscriptionType``
``SNS``) of an ``AWS::Budgets::Budget``, each a ``Ref`` to the topic.
The key is checked when ``KmsMasterKeyId`` refers to an ``AWS::KMS::Key`` (or an ``AWS::KMS::Alias`` of one)
in the same template; a key or topic policy that cannot be read (an intrinsic function) is not judged.

Findings (one per service, so each can be acknowledged alone): ``TopicPolicy:<service>`` (no topic-policy
statement admits it), ``KeyPolicy:<service>`` (the key policy does not allow it both KMS actions),
``KeyPolicySourceCondition:events.amazonaws.com`` (only statements with unsupported source conditions allow
EventBridge), ``AwsManagedKey:<service>`` (the topic uses ``alias/aws/sns``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpu_constructs.rules import _policy as policy
from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, as_list, flatten, ref_id, rule, statements

CLOUDWATCH = "cloudwatch.amazonaws.com"
EVENTBRIDGE = "events.amazonaws.com"
S3 = "s3.amazonaws.com"
BUDGETS = "budgets.amazonaws.com"

#: Services that the topic's default policy (no ``AWS::SNS::TopicPolicy``) already admits: it allows publishing
#: to principals of the topic owner's account (``AWS:SourceOwner``), which covers the account's own alarms.
ADMITTED_BY_DEFAULT_POLICY = frozenset({CLOUDWATCH})

#: What a publishing service needs on the key of an encrypted topic (SNS guide, step 2).
KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")

ALARM_ACTION_PROPERTIES = ("AlarmActions", "OKActions", "InsufficientDataActions")
#: Metric alarms and composite alarms both notify as ``cloudwatch.amazonaws.com``.
ALARM_TYPES = ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
AWS_MANAGED_SNS_KEY = "alias/aws/sns"


def publishers(resource: Resource) -> set[str]:
    """The service principals that publish to the topic, from the alarms, rules and buckets of its template."""
    topic = resource.logical_id
    found: set[str] = set()
    for alarm_type in ALARM_TYPES:
        for _, alarm in resource.of_type(alarm_type):
            props = alarm.get("Properties") or {}
            if any(ref_id(a) == topic for p in ALARM_ACTION_PROPERTIES for a in as_list(props.get(p))):
                found.add(CLOUDWATCH)
    for _, events_rule in resource.of_type("AWS::Events::Rule"):
        for target in as_list((events_rule.get("Properties") or {}).get("Targets")):
            if isinstance(target, Mapping) and ref_id(target.get("Arn")) == topic and not target.get("RoleArn"):
                found.add(EVENTBRIDGE)
    for _, bucket in resource.of_type("AWS::S3::Bucket"):
        if topic in _notified_topics((bucket.get("Properties") or {}).get("NotificationConfiguration"), "Topic"):
            found.add(S3)
    for _, custom in resource.of_type("Custom::S3BucketNotifications"):
        config = (custom.get("Properties") or {}).get("NotificationConfiguration")
        if topic in _notified_topics(config, "TopicArn"):
            found.add(S3)
    for _, budget in resource.of_type("AWS::Budgets::Budget"):
        if topic in _budget_topics((budget.get("Properties") or {}).get("NotificationsWithSubscribers")):
            found.add(BUDGETS)
    return found


def _budget_topics(notifications: Any) -> set[str]:
    """Topics that a budget's notifications name as ``SNS`` subscribers."""
    return {
        ref
        for n in as_list(notifications)
        if isinstance(n, Mapping)
        for s in as_list(n.get("Subscribers"))
        if isinstance(s, Mapping) and s.get("SubscriptionType") == "SNS" and (ref := ref_id(s.get("Address")))
    }


def _notified_topics(config: Any, field: str) -> set[str]:
    if not isinstance(config, Mapping):
        return set()
    return {
        ref
        for c in as_list(config.get("TopicConfigurations"))
        if isinstance(c, Mapping) and (ref := ref_id(c.get(field)))
    }


def _topic_documents(resource: Resource) -> Iterator[Any]:
    """The policy documents that apply to the topic (``TopicPolicy`` listing it, ``TopicInlinePolicy`` of it)."""
    topic = resource.logical_id
    for _, tp in resource.of_type("AWS::SNS::TopicPolicy"):
        props = tp.get("Properties") or {}
        if any(ref_id(t) == topic for t in as_list(props.get("Topics"))):
            yield props.get("PolicyDocument")
    for _, tp in resource.of_type("AWS::SNS::TopicInlinePolicy"):
        props = tp.get("Properties") or {}
        if ref_id(props.get("TopicArn")) == topic:
            yield props.get("PolicyDocument")


def _key_definition(resource: Resource, key_ref: Any) -> Mapping[str, Any] | None:
    """The ``AWS::KMS::Key`` that ``KmsMasterKeyId`` refers to in this template (through an alias too)."""
    definition = resource.other(ref_id(key_ref))
    if definition is not None and definition.get("Type") == "AWS::KMS::Alias":
        definition = resource.other(ref_id((definition.get("Properties") or {}).get("TargetKeyId")))
    if definition is not None and definition.get("Type") == "AWS::KMS::Key":
        return definition
    return None


def _readable(document: Any) -> bool:
    return isinstance(document, Mapping) and isinstance(document.get("Statement"), list | Mapping)


def _topic_findings(resource: Resource, services: set[str]) -> list[str]:
    documents = list(_topic_documents(resource))
    if not documents:
        return [f"TopicPolicy:{s}" for s in sorted(services - ADMITTED_BY_DEFAULT_POLICY)]
    if not all(_readable(d) for d in documents):
        return []
    granted = [s for d in documents for s in statements(d) if policy.allows_action(s, "sns:Publish")]
    return [f"TopicPolicy:{svc}" for svc in sorted(services) if not any(policy.admits_service(s, svc) for s in granted)]


def _key_findings(key: Mapping[str, Any], services: set[str]) -> list[str]:
    document = (key.get("Properties") or {}).get("KeyPolicy")
    if document is not None and not _readable(document):
        return []
    findings: list[str] = []
    for svc in sorted(services):
        admitting = [s for s in statements(document) if policy.admits_service(s, svc)]
        usable = [s for s in admitting if not (svc == EVENTBRIDGE and policy.has_source_condition(s))]
        if policy.allows_all(usable, KEY_ACTIONS):
            continue
        if policy.allows_all(admitting, KEY_ACTIONS):
            findings.append(f"KeyPolicySourceCondition:{svc}")
        else:
            findings.append(f"KeyPolicy:{svc}")
    return findings


@rule(
    id="TopicAdmitsPublishers",
    resource_types=("AWS::SNS::Topic",),
    info="An SNS topic that CloudWatch alarms, EventBridge rules, S3 or Budgets notifications publish to does not "
    "admit that service on its topic policy or its KMS key: the notifications are dropped silently.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    services = publishers(resource)
    if not services:
        return NOT_APPLICABLE
    findings = _topic_findings(resource, services)
    key_ref = resource.properties.get("KmsMasterKeyId")
    if flatten(key_ref).endswith(AWS_MANAGED_SNS_KEY):
        findings += [f"AwsManagedKey:{s}" for s in sorted(services)]
    elif (key := _key_definition(resource, key_ref)) is not None:
        findings += _key_findings(key, services)
    return findings
