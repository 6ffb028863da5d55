"""A service principal admitted by a key, topic or queue policy must be pinned to this account's sources.

A resource policy that allows an AWS service principal (``cloudwatch.amazonaws.com``, ``sns.amazonaws.com``,
...) with no condition lets that service act on the resource on behalf of *any* customer: another account
can point its own alarm, rule, bucket or topic at the resource and have the service publish to it or use the
key for it (IAM User Guide, "The confused deputy problem",
https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html: "We recommend using the
``aws:SourceArn``, ``aws:SourceAccount``, ``aws:SourceOrgID``, or ``aws:SourceOrgPaths`` global condition
context keys in resource-based policies to limit the permissions that a service has to a specific resource").
For key policies of encrypted topics the Amazon SNS Developer Guide says the same ("Enable compatibility
between event sources from AWS services and encrypted topics", step 3,
https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services).

Checked: every ``Allow`` statement with a ``Principal.Service`` in the ``KeyPolicy`` of an ``AWS::KMS::Key``
and in the ``PolicyDocument`` of ``AWS::SNS::TopicPolicy``/``TopicInlinePolicy`` and
``AWS::SQS::QueuePolicy``/``QueueInlinePolicy``. It must require ``aws:SourceAccount``, ``aws:SourceArn``,
``aws:SourceOrgID`` or ``aws:SourceOrgPaths`` (an ``...IfExists`` operator does not count), or carry the
condition that the service documents *instead* (:data:`DOCUMENTED_ALTERNATIVES`):

* ``logs.<region>.amazonaws.com`` on a key: ``kms:EncryptionContext:aws:logs:arn`` (Amazon CloudWatch Logs
  User Guide, "Encrypt log data in CloudWatch Logs using AWS Key Management Service", step 2, the key policy
  condition ``"ArnLike": {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:region:account-id:*"}``,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html);
* ``events.amazonaws.com`` on a key: "Adding the ``aws:SourceAccount``, ``aws:SourceArn``, and
  ``aws:SourceOrgID`` to a AWS KMS policy is not supported for EventBridge-to-encrypted topics" (SNS guide,
  above), so the SNS encryption context ``kms:EncryptionContext:aws:sns:topicArn`` (Amazon SNS Developer
  Guide, "Enabling server-side encryption (SSE) for an Amazon SNS topic", "Permissions for custom KMS keys",
  https://docs.aws.amazon.com/sns/latest/dg/sns-enable-encryption-for-topic.html) or, for an encrypted event
  bus, ``kms:EncryptionContext:aws:events:event-bus:arn`` (Amazon EventBridge User Guide, "Authorizing
  EventBridge to use a customer managed key",
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-encryption-key-policy.html);
* ``events.amazonaws.com`` allowed only ``sns:Publish`` in a topic policy: no condition at all, because "You
  can't use ``Condition`` blocks in Amazon SNS topic policies for EventBridge" (Amazon EventBridge User
  Guide, "Using resource-based policies for Amazon EventBridge", "Amazon SNS permissions",
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-sns-permissions).

S3 bucket policies are not checked: services that deliver to S3 document bucket policies without source
conditions and scope them by object key instead (Elastic Load Balancing User Guide for Application Load
Balancers, "Enable access logs for your Application Load Balancer", the bucket policy for the principal
``logdelivery.elasticloadbalancing.amazonaws.com`` on ``.../AWSLogs/<account-id>/*``,
https://docs.aws.amazon.com/elasticloadbalancing/latest/application/enable-access-logging.html), so the rule
would flag correct policies of other apps; the platform's own bucket policies (S3 server access logging,
``logging.s3.amazonaws.com``) carry ``aws:SourceArn`` and ``aws:SourceAccount`` already (checked on the
synthesized templates of every environment).

One finding per unpinned service principal, named by the service (``[cloudwatch.amazonaws.com]``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpu_constructs.rules import _policy as policy
from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, rule, service_principals, statements

#: The policy property of each resource type the rule reads.
POLICY_PROPERTIES: dict[str, str] = {
    "AWS::KMS::Key": "KeyPolicy",
    "AWS::SNS::TopicPolicy": "PolicyDocument",
    "AWS::SNS::TopicInlinePolicy": "PolicyDocument",
    "AWS::SQS::QueuePolicy": "PolicyDocument",
    "AWS::SQS::QueueInlinePolicy": "PolicyDocument",
}

_LOGS = re.compile(r"^logs\.[^.]+\.amazonaws\.com(\.cn)?$")
_KEY_TYPES = frozenset({"AWS::KMS::Key"})
_TOPIC_TYPES = frozenset({"AWS::SNS::TopicPolicy", "AWS::SNS::TopicInlinePolicy"})


def _is_logs(service: str) -> bool:
    return bool(_LOGS.match(service))


def _is_events(service: str) -> bool:
    return service == "events.amazonaws.com"


#: (resource types, which service principals, the condition keys the service documents instead of the source
#: keys; ``None`` = the service documents that no condition may be used, actions the exemption is limited to).
DOCUMENTED_ALTERNATIVES: tuple[tuple[frozenset[str], Any, frozenset[str] | None, frozenset[str] | None], ...] = (
    (_KEY_TYPES, _is_logs, frozenset({"kms:encryptioncontext:aws:logs:arn"}), None),
    (
        _KEY_TYPES,
        _is_events,
        frozenset({"kms:encryptioncontext:aws:sns:topicarn", "kms:encryptioncontext:aws:events:event-bus:arn"}),
        None,
    ),
    (_TOPIC_TYPES, _is_events, None, frozenset({"sns:publish"})),
)


def _documented_alternative(resource_type: str, service: str, statement: Mapping[str, Any]) -> bool:
    keys = set(policy.condition_keys(statement))
    for types, matches, condition_keys, only_actions in DOCUMENTED_ALTERNATIVES:
        if resource_type not in types or not matches(service):
            continue
        if only_actions is not None and not {a.lower() for a in policy.actions(statement)} <= only_actions:
            continue
        if condition_keys is None or keys & condition_keys:
            return True
    return False


@rule(
    id="ServicePrincipalWithoutSourceCondition",
    resource_types=tuple(POLICY_PROPERTIES),
    info="A key, topic or queue policy allows an AWS service principal without aws:SourceAccount/aws:SourceArn "
    "(or the condition the service documents instead): another account can make the service use the resource.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    document = resource.properties.get(POLICY_PROPERTIES[resource.type])
    if not isinstance(document, Mapping):
        return NOT_APPLICABLE
    findings: list[str] = []
    for statement in statements(document):
        if not policy.is_allow(statement) or policy.has_source_condition(statement):
            continue
        findings += [
            service
            for service in service_principals(statement)
            if not _documented_alternative(resource.type, service, statement)
        ]
    return findings
