"""``IdleStop``: the deployed function that stops idle GPUs, its schedule, its alarm rule and its permissions.

One Python function (:mod:`gpu_constructs.idle.handler`, botocore only, packaged as that one file) does three things,
each configured by a value type of :mod:`gpu_constructs.idle.options`:

* every 5 minutes (an EventBridge schedule) it stops the idle training jobs of :class:`IdleTrainingJobs` and the
  notebook instances over their :class:`NotebookSessionLimit`. A sweep, not an alarm per job: jobs are started after
  the deploy (by the state machine or ``gpuctl train``), so no alarm can name them at synth time, and the platform's
  idle alarm (a Metrics Insights query over every training host) says that *a* host is idle, not which job it is;
* on a ``CloudWatch Alarm State Change`` event of an :class:`IdleFleetGroup`'s idle alarm in state ``ALARM`` it scales
  that group to 0. The rule matches the alarms by ARN: "CloudWatch sends events to Amazon EventBridge whenever a
  CloudWatch alarm is created, updated, deleted, or changes alarm state", with ``source`` ``aws.cloudwatch``,
  ``detail-type`` ``CloudWatch Alarm State Change``, the alarm's ARN in ``resources`` and the new state in
  ``detail.state.value`` (Amazon CloudWatch User Guide, "Alarm events and EventBridge",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html);
* it publishes every action to ``topic`` (granted ``sns:Publish`` and, for an encrypted topic, the key).

Permissions are scoped to what the function names: ``sagemaker:DescribeTrainingJob``/``StopTrainingJob`` on
``training-job/<prefix>-*``, ``sagemaker:StopNotebookInstance`` on each ``notebook-instance/<name>``,
``autoscaling:UpdateAutoScalingGroup`` on each ``autoScalingGroupName/<name>`` (the resource types of the Service
Authorization Reference, "Actions, resources, and condition keys for Amazon SageMaker AI" and "... for Amazon EC2
Auto Scaling", https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonsagemaker.html and
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html; SageMaker writes
names in ARNs in lower case, as the authorization model's ``api_calls`` does). ``sagemaker:ListTrainingJobs``,
``sagemaker:ListNotebookInstances`` and ``cloudwatch:GetMetricData`` support no resource-level permissions (same
reference: no resource type) and are granted on ``*``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs import nag
from gpu_constructs.errors import ValidationError, path_of
from gpu_constructs.idle import handler as handler_module
from gpu_constructs.idle.limits import BUCKET_MINUTES
from gpu_constructs.idle.options import IdleFleetGroup, IdleTrainingJobs, NotebookSessionLimit
from gpu_constructs.keys import allow_cloudwatch_logs, given_or_new_key
from gpu_constructs.removal import named_log_group
from gpu_constructs.role_acknowledgments import acknowledge_role_policy

__all__ = ["IdleStop"]

#: The function's source: this one file of the package, with nothing else of its folder.
HANDLER_FILE = Path(handler_module.__file__).name
HANDLER_DIR = Path(handler_module.__file__).parent
#: The sweep's schedule: the handler's bucket, so every sweep sees a new bucket.
SWEEP_INTERVAL = Duration.minutes(BUCKET_MINUTES)
_POLICY_REASON = (
    "Safe because this policy belongs to the idle-stop function's own role alone and holds exactly its grants "
    "(list, read metrics, stop the named jobs, notebooks and groups, publish to one topic)"
)
_FUNCTION_REASONS = {
    "LambdaConcurrency": "Safe because the function runs once per 5-minute schedule tick and once per idle alarm; "
    "reserving concurrency would take it from the account's other functions and fails in accounts at the minimum "
    "unreserved concurrency",
    "LambdaDLQ": "Safe because a failed sweep is repeated by the next tick 5 minutes later, every action and "
    "every failed action is published to the notification topic, and a lost alarm event leaves the alarm (which "
    "notifies the topic itself) in ALARM",
    "LambdaInsideVPC": "Safe because the function only calls control-plane APIs (SageMaker, CloudWatch, Auto "
    "Scaling, SNS) and holds no data; in the private VPC it would depend on interface endpoints the platform's "
    "subnets need for nothing else",
}
_CHECKOV_SKIPS = {
    "CKV_AWS_115": _FUNCTION_REASONS["LambdaConcurrency"],
    "CKV_AWS_116": _FUNCTION_REASONS["LambdaDLQ"],
    "CKV_AWS_117": _FUNCTION_REASONS["LambdaInsideVPC"],
}


class IdleStop(Construct):
    """Stops idle training jobs, notebooks over their session limit and idle fleet groups; each event goes to
    ``topic``.

    :param topic: the notification topic every action is published to.
    :param name: the resource-name prefix of the function's log group ``/gpu-platform/idle-stop/<name>``.
    :param training: the training jobs to watch (default: none).
    :param fleet_groups: the fleet groups to scale to 0 on their idle alarm (default: none).
    :param notebooks: the notebook instances with a session limit (default: none).
    :param dry_run: publish what would be stopped and stop nothing, for everything (default: False; each value
        type has its own ``dry_run`` too).
    :param encryption_key: KMS key of the log group and the function's environment (default: a new key).
    :param log_retention: of the function's log group (default: one month).
    :param removal_policy: of the log group and a new key (default: RETAIN).

    Raises ``ValidationError`` when nothing is watched, or a value type's setting is not allowed.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        topic: sns.ITopic,
        name: str,
        training: IdleTrainingJobs | None = None,
        fleet_groups: Sequence[IdleFleetGroup] = (),
        notebooks: Sequence[NotebookSessionLimit] = (),
        dry_run: bool = False,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        where = path_of(self)
        if training is None and not fleet_groups and not notebooks:
            raise ValidationError(
                where, "nothing to watch; allowed: training, fleet_groups or notebooks (at least one)"
            )
        if training is not None:
            training.validate(f"{where}.training")
        for group in fleet_groups:
            group.validate(f"{where}.fleet_groups")
        for notebook in notebooks:
            notebook.validate(f"{where}.notebooks")
        self.topic = topic
        self.training = training
        self.fleet_groups = tuple(fleet_groups)
        self.notebooks = tuple(notebooks)
        self.dry_run = dry_run
        stack = Stack.of(self)
        self.encryption_key = given_or_new_key(
            encryption_key, self, "Key", description="Encrypts the idle-stop function's logs and settings",
            removal_policy=removal_policy,
        )  # fmt: skip
        self.log_group_name = f"/gpu-platform/idle-stop/{name}"
        allow_cloudwatch_logs(
            self.encryption_key, stack, sid=f"AllowIdleStopLogs{self.node.addr[:8]}", log_group=self.log_group_name,
            exact=True,
        )  # fmt: skip
        self.log_group = named_log_group(
            self, "Logs", self.log_group_name, self.encryption_key, log_retention, removal_policy
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"The idle-stop function of {name}",
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler=f"{Path(HANDLER_FILE).stem}.handler",
            code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["*", f"!{HANDLER_FILE}"]),
            description=f"Stops idle GPUs of {name} and publishes each event",
            timeout=Duration.minutes(2),
            memory_size=256,
            role=self.role,
            log_group=self.log_group,
            environment={handler_module.SETTINGS_VARIABLE: json.dumps(self.settings(), sort_keys=True)},
            environment_encryption=self.encryption_key,
        )
        self._grant(stack)
        self._rules()
        self._acknowledge()

    def settings(self) -> dict[str, Any]:
        """The function's settings (``IDLE_STOP_SETTINGS``, :class:`gpu_constructs.idle.handler.Settings`)."""
        settings: dict[str, Any] = {"topic_arn": self.topic.topic_arn, "dry_run": self.dry_run}
        if self.training is not None:
            t = self.training
            settings["training"] = {
                "job_name_prefix": t.job_name_prefix,
                "idle_minutes": int(t.idle_period.to_minutes()),
                "gpu_idle_percent": t.gpu_idle_percent,
                "progress_metric": t.progress_metric,
            }
        if self.notebooks:
            settings["notebooks"] = {n.notebook_name: int(n.max_session.to_minutes()) for n in self.notebooks}
        if self.fleet_groups:
            settings["fleet_groups"] = [g.group_name for g in self.fleet_groups]
        dry = [self.training.job_name_prefix] if self.training is not None and self.training.dry_run else []
        dry += [n.notebook_name for n in self.notebooks if n.dry_run]
        dry += [g.group_name for g in self.fleet_groups if g.dry_run]
        if dry:
            settings["dry_run_names"] = dry
        return settings

    def _grant(self, stack: Stack) -> None:
        arn = f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}"
        statements: list[tuple[iam.PolicyStatement, str]] = []
        listing: list[str] = []
        if self.training is not None:
            listing += ["sagemaker:ListTrainingJobs", "cloudwatch:GetMetricData"]
            jobs = f"{arn}:training-job/{self.training.job_name_prefix.lower()}-*"
            statements.append((
                iam.PolicyStatement(actions=["sagemaker:DescribeTrainingJob", "sagemaker:StopTrainingJob"],
                                    resources=[jobs]),
                "Safe because the wildcard is the id part of the setup's own job names <prefix>-*, which the jobs "
                "get at launch, after the deploy",
            ))  # fmt: skip
        if self.notebooks:
            listing.append("sagemaker:ListNotebookInstances")
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["sagemaker:StopNotebookInstance"],
                    resources=[f"{arn}:notebook-instance/{n.notebook_name.lower()}" for n in self.notebooks],
                )
            )
        if self.fleet_groups:
            groups = f"arn:{stack.partition}:autoscaling:{stack.region}:{stack.account}:autoScalingGroup:*"
            statements.append((
                iam.PolicyStatement(actions=["autoscaling:UpdateAutoScalingGroup"],
                                    resources=[f"{groups}:autoScalingGroupName/{g.group_name}"
                                               for g in self.fleet_groups]),
                "Safe because the wildcard is the group id that Auto Scaling assigns at creation; each ARN names "
                "one of the platform's groups by name",
            ))  # fmt: skip
        if listing:
            statements.append((
                iam.PolicyStatement(actions=sorted(listing), resources=["*"]),
                "Safe because sagemaker:ListTrainingJobs, sagemaker:ListNotebookInstances and cloudwatch:"
                "GetMetricData support no resource-level permissions (Service Authorization Reference) and only read",
            ))  # fmt: skip
        self.log_group.grant_write(self.role)
        # The function's settings are encrypted with this key: the role may decrypt them, whether Lambda decrypts
        # with the execution role or with its own grant.
        self.encryption_key.grant_decrypt(self.role)
        self.topic.grant_publish(self.role)
        wildcards = acknowledge_role_policy(self, self.role, statements, _POLICY_REASON)
        if wildcards is not None:
            wildcards.expect_key_actions(
                self.encryption_key,
                "Safe because the wildcard KMS actions are CDK's decrypt grant for the function's own key",
            )
            topic_key = self.topic.master_key
            if topic_key is not None:
                wildcards.expect_key_actions(
                    topic_key, "Safe because kms:GenerateDataKey* on the topic's own key is what publishing to the "
                    "encrypted topic needs (CDK's publish grant)",
                )  # fmt: skip
            wildcards.expect(
                iam.PolicyStatement(actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                                    resources=[self.log_group.log_group_arn]),
                "Safe because the wildcard is the log streams of the function's own log group",
            )  # fmt: skip

    def _rules(self) -> None:
        target = targets.LambdaFunction(self.function, retry_attempts=2, max_event_age=Duration.hours(1))
        if self.training is not None or self.notebooks:
            self.schedule = events.Rule(
                self,
                "Schedule",
                description="Sweeps the idle training jobs and notebooks every 5 minutes",
                schedule=events.Schedule.rate(SWEEP_INTERVAL),
                targets=[target],
            )
        if self.fleet_groups:
            self.alarm_rule = events.Rule(
                self,
                "IdleAlarmRule",
                description="Idle-GPU alarms of fleet groups that go to ALARM: scale the group to 0",
                event_pattern=events.EventPattern(
                    source=["aws.cloudwatch"],
                    detail_type=[handler_module.ALARM_EVENT],
                    resources=[g.idle_alarm.alarm_arn for g in self.fleet_groups],
                    detail={"state": {"value": ["ALARM"]}},
                ),
                targets=[target],
            )

    def _acknowledge(self) -> None:
        for rule, reason in _FUNCTION_REASONS.items():
            if rule == "LambdaInsideVPC":
                nag.acknowledge_compliance(self.function, rule, reason)
            else:
                nag.acknowledge_compliance(self.function, rule, reason, packs=(nag.HIPAA, nag.NIST_R5))
        for check_id, comment in _CHECKOV_SKIPS.items():
            nag.checkov_skip(self.function, check_id, comment)
