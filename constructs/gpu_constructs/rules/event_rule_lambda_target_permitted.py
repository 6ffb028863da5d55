"""An EventBridge rule that targets a Lambda function needs the function's permission, or it never runs it.

"When a rule runs in EventBridge, all of the targets associated with the rule are invoked. [...] To make API
calls against the resources you own, EventBridge needs the appropriate permissions. [...] For Lambda, Amazon SNS,
and Amazon SQS resources, EventBridge can use either an IAM execution role or a resource-based policy. [...] If no
execution role is configured, EventBridge uses resource-based policies on the target resource." (Amazon EventBridge
User Guide, "Using resource-based policies for Amazon EventBridge", "AWS Lambda permissions",
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-lambda-permissions, whose
example is ``aws lambda add-permission --action lambda:InvokeFunction --principal events.amazonaws.com
--source-arn arn:aws:events:...:rule/...``). Without it nothing fails at deploy: the rule matches, every invocation
is refused, and only the rule's ``FailedInvocations`` metric shows it; an idle-stop function on a schedule then
never stops anything.

Reads every ``AWS::Events::Rule`` target without a ``RoleArn`` whose ``Arn`` refers (``Fn::GetAtt [F, Arn]`` or
``Ref``) to an ``AWS::Lambda::Function`` of the same template, and looks for an ``AWS::Lambda::Permission`` of that
template whose ``FunctionName`` refers to the function, whose ``Action`` is ``lambda:InvokeFunction`` (or
``lambda:*``), whose ``Principal`` is ``events.amazonaws.com``, and whose ``SourceArn`` is absent or refers to this
rule. A target in another template, or a function named by a literal ARN, is not judged. Finding (one per target):
``Target:<function logical id>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, as_list, literal, ref_id, rule

EVENTBRIDGE = "events.amazonaws.com"
INVOKE_ACTIONS = frozenset({"lambda:InvokeFunction", "lambda:*"})


def _admits(permission: Mapping[str, Any], function: str, rule_id: str) -> bool:
    props = permission.get("Properties") or {}
    if ref_id(props.get("FunctionName")) != function:
        return False
    if literal(props.get("Action")) not in INVOKE_ACTIONS or literal(props.get("Principal")) != EVENTBRIDGE:
        return False
    source = props.get("SourceArn")
    return source is None or ref_id(source) == rule_id


@rule(
    id="EventRuleLambdaTargetPermitted",
    resource_types=("AWS::Events::Rule",),
    info="An EventBridge rule targets a Lambda function that does not let events.amazonaws.com invoke it (no "
    "AWS::Lambda::Permission for this rule): every invocation is refused. Add the permission (CDK's "
    "aws_events_targets.LambdaFunction does).",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    functions = []
    for target in as_list(resource.properties.get("Targets")):
        if not isinstance(target, Mapping) or target.get("RoleArn") is not None:
            continue
        function = ref_id(target.get("Arn"))
        found = resource.other(function)
        if function is not None and found is not None and found.get("Type") == "AWS::Lambda::Function":
            functions.append(function)
    if not functions:
        return NOT_APPLICABLE
    permissions = [definition for _, definition in resource.of_type("AWS::Lambda::Permission")]
    return [
        f"Target:{function}"
        for function in functions
        if not any(_admits(permission, function, resource.logical_id) for permission in permissions)
    ]
