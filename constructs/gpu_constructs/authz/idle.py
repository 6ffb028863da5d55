"""The requests the idle-stop function makes with its execution role, read from the synthesized function.

For every ``AWS::Lambda::Function`` whose environment holds ``IDLE_STOP_SETTINGS`` (:mod:`gpu_constructs.idle`), the
settings (JSON, resolved by :class:`~gpu_constructs.authz.assembly.Assembly`) give the calls of
:mod:`gpu_constructs.idle.handler`, made with the function's ``Role`` (a Lambda function "assumes the execution role
when you invoke your function": AWS Lambda Developer Guide, "Defining Lambda function permissions with an execution
role", https://docs.aws.amazon.com/lambda/latest/dg/lambda-intro-execution-role.html), in the region of its stack:

* ``training``: ``ListTrainingJobs`` and ``GetMetricData`` (no resource-level permissions: ``*``), then
  ``DescribeTrainingJob`` and ``StopTrainingJob`` on a job ``<prefix>-job`` (SageMaker ARNs hold lower-case names);
* ``notebooks``: ``ListNotebookInstances`` (``*``) and ``StopNotebookInstance`` on each notebook;
* ``fleet_groups``: ``UpdateAutoScalingGroup`` on each group (the ARN's group id is assigned at creation: a
  stand-in here);
* ``publish``: ``sns:Publish`` on the topic and, for a topic encrypted with a customer managed key,
  ``kms:GenerateDataKey`` and ``kms:Decrypt`` through SNS (Amazon SNS Developer Guide, "Key management": "Allow a
  user to send messages to a topic with SSE");
* ``logs``: ``logs:CreateLogStream`` and ``logs:PutLogEvents`` on a stream of the function's log group
  (``LoggingConfig.LogGroup``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_constructs.authz.assembly import PARTITION, Assembly, Located
from gpu_constructs.authz.policy import AuthRequest
from gpu_constructs.idle.handler import SETTINGS_VARIABLE
from gpu_constructs.templates import StackView

__all__ = ["IdleStopJourney", "idle_stop_journeys", "idle_stop_requests", "topic_publish_requests"]

#: The id part of a group ARN, which Auto Scaling assigns when it creates the group.
GROUP_ID_STAND_IN = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class IdleStopJourney:
    """One idle-stop function: where it is and the requests its role makes."""

    stack: StackView
    logical_id: str
    role: str
    requests: tuple[AuthRequest, ...]


def idle_stop_journeys(assembly: Assembly) -> list[IdleStopJourney]:
    """Every idle-stop function of the assembly with its requests (see the module docstring)."""
    journeys = []
    for function in assembly.resources("AWS::Lambda::Function"):
        variables = ((function.properties.get("Environment") or {}).get("Variables")) or {}
        if SETTINGS_VARIABLE not in variables:
            continue
        settings = json.loads(assembly.text(variables[SETTINGS_VARIABLE], function.stack))
        role = assembly.text(function.properties["Role"], function.stack)
        requests = idle_stop_requests(assembly, function, role, settings)
        journeys.append(IdleStopJourney(function.stack, function.logical_id, role, tuple(requests)))
    return journeys


def idle_stop_requests(
    assembly: Assembly, function: Located, role: str, settings: Mapping[str, Any]
) -> list[AuthRequest]:
    """The requests of one function with ``settings`` (its ``IDLE_STOP_SETTINGS``), in the order it makes them."""
    stack = function.stack
    region, account = assembly.region(stack), assembly.account(stack)
    sagemaker = f"arn:{PARTITION}:sagemaker:{region}:{account}"
    out: list[AuthRequest] = []
    training = settings.get("training")
    if training:
        why = "the sweep finds the setup's idle training jobs and stops them"
        job = f"{sagemaker}:training-job/{str(training['job_name_prefix']).lower()}-job"
        out += [
            AuthRequest(role, "sagemaker:ListTrainingJobs", "*", {}, why, "training"),
            AuthRequest(role, "sagemaker:DescribeTrainingJob", job, {}, why, "training"),
            AuthRequest(role, "cloudwatch:GetMetricData", "*", {}, why, "training"),
            AuthRequest(role, "sagemaker:StopTrainingJob", job, {}, why, "training"),
        ]
    notebooks = settings.get("notebooks") or {}
    if notebooks:
        why = "the sweep stops notebooks over their session limit"
        out.append(AuthRequest(role, "sagemaker:ListNotebookInstances", "*", {}, why, "notebooks"))
        out += [
            AuthRequest(role, "sagemaker:StopNotebookInstance", f"{sagemaker}:notebook-instance/{name.lower()}", {},
                        why, "notebooks")
            for name in notebooks
        ]  # fmt: skip
    groups = f"arn:{PARTITION}:autoscaling:{region}:{account}:autoScalingGroup:{GROUP_ID_STAND_IN}"
    out += [
        AuthRequest(role, "autoscaling:UpdateAutoScalingGroup", f"{groups}:autoScalingGroupName/{name}", {},
                    "a fleet group's idle alarm scales it to 0", "fleet-groups")
        for name in settings.get("fleet_groups") or ()
    ]  # fmt: skip
    out += topic_publish_requests(assembly, role, region, str(settings["topic_arn"]), "each action is published")
    logging = function.properties.get("LoggingConfig") or {}
    if logging.get("LogGroup") is not None:
        group = assembly.text(logging["LogGroup"], stack)
        stream = f"arn:{PARTITION}:logs:{region}:{account}:log-group:{group}:log-stream:2026/01/01/[$LATEST]0"
        out += [
            AuthRequest(role, action, stream, {}, "the function writes its log", "logs")
            for action in ("logs:CreateLogStream", "logs:PutLogEvents")
        ]
    return out


def topic_publish_requests(assembly: Assembly, role: str, region: str, topic: str, why: str) -> list[AuthRequest]:
    """``sns:Publish`` on ``topic`` and, when it is encrypted with a key of the assembly, the key requests SNS makes
    for the publisher."""
    out = [AuthRequest(role, "sns:Publish", topic, {"aws:SecureTransport": "true"}, why, "publish")]
    found = assembly.find_by_arn("AWS::SNS::Topic", topic)
    master = found.properties.get("KmsMasterKeyId") if found is not None else None
    if found is not None and master is not None:
        key = assembly.key_arn(assembly.text(master, found.stack), found.stack)
        if ":alias/" not in key:
            context = {"kms:ViaService": f"sns.{region}.amazonaws.com", "kms:CallerAccount": role.split(":")[4]}
            out += [
                AuthRequest(role, action, key, context, why, "publish")
                for action in ("kms:GenerateDataKey", "kms:Decrypt")
            ]
    return out
