"""The platform's rule pack on a foreign CDK app: one finding per deliberate mistake, none on their twins.

The app uses no ``gpu_constructs`` construct at all, only aws-cdk-lib L1 and L2 resources, the way another team
would write them. It registers ``GpuPlatformChecks`` alone (no standard pack), so the validation report holds
exactly what this pack finds. Every rule of the pack gets one deliberate mistake, and next to each mistake a
correct look-alike (its twin) that a sloppy rule would flag: the report must list the mistakes and nothing else,
and must name every rule of the pack (a new rule without a mistake here fails :func:`test_one_finding_per_mistake`).

Mistakes are designed so each yields exactly one finding id; the exception is ``OidcProviderOncePerAccount``,
whose documented behaviour flags every creator of the duplicated provider (one finding per *other* provider):
its mistake is the pair of stacks, and it reports on both.

Acknowledging every mistake (one finding id on one L1, with a reason) makes the same app synthesize cleanly.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn

from gpu_constructs.rules import PACK_NAME, all_rules, finding_id

ACCOUNT = "111122223333"
OTHER_ACCOUNT = "444455556666"
REGION = "us-east-1"
GITHUB = "https://token.actions.githubusercontent.com"
GITLAB = "https://gitlab.com"
DLC = f"763104351884.dkr.ecr.{REGION}.amazonaws.com"
INFERENCE_IMAGE = f"{DLC}/pytorch-inference:2.6.0-gpu-py312-cu124-ubuntu22.04-sagemaker"
TRAINING_IMAGE = f"{DLC}/pytorch-training:2.6.0-gpu-py312-cu126-ubuntu22.04-sagemaker"
CUDA13_IMAGE = f"{DLC}/pytorch-training:2.9.0-gpu-py312-cu130-ubuntu22.04-sagemaker"
CPU_IMAGE = f"{DLC}/pytorch-training:2.6.0-cpu-py312-ubuntu22.04-sagemaker"
GPU_DLAMI = "{{resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id}}"
SUBNETS = ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"]


@dataclass(frozen=True)
class Mistake:
    """One expected finding: the rule, the finding (granular rules), the L1's path."""

    rule: str
    finding: str | None
    path: str

    @property
    def id(self) -> str:
        """The acknowledgment id: ``GpuPlatform::GpuPlatform-<rule>[<finding>]``."""
        return finding_id(self.rule, self.finding)

    @property
    def rule_name(self) -> str:
        """The name the validation report gives the finding: ``GpuPlatform-<rule>[<finding>]``."""
        return self.id.removeprefix(f"{PACK_NAME}::")


@dataclass
class ForeignApp:
    app: cdk.App
    #: Each expected finding and the L1 it is reported on.
    mistakes: list[tuple[Mistake, cdk.CfnResource]] = field(default_factory=list)

    def expect(self, l1: Any, rule: str, finding: str | None = None) -> None:
        assert isinstance(l1, cdk.CfnResource), l1
        self.mistakes.append((Mistake(rule, finding, l1.node.path), l1))


def _statement(service: str, actions: list[str], **conditions: Any) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        principals=[iam.ServicePrincipal(service)],
        actions=actions,
        resources=["*"],
        conditions=conditions or None,
    )


def _training(name: str, *, drop: tuple[str, ...] = (), **overrides: Any) -> dict[str, Any]:
    """A createTrainingJob.sync task: a correct request unless ``overrides`` (or ``drop``, keys removed; a nested
    key as ``Parent.Key``) say otherwise. Its script is named the SageMaker SDK v2 way (the DLC's training toolkit
    runs it)."""
    params: dict[str, Any] = {
        "TrainingJobName.$": "States.Format('foreign-{}', $$.Execution.Name)",
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/foreign-training",
        "AlgorithmSpecification": {"TrainingImage": TRAINING_IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": {"epochs": "30", "lr": "0.001"},
        "Environment": {"SAGEMAKER_PROGRAM": "train.py", "SAGEMAKER_SUBMIT_DIRECTORY": "s3://foreign-code/src.tar.gz"},
        "OutputDataConfig": {"S3OutputPath": "s3://foreign-artifacts/jobs/"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(params.get(key), dict):
            params[key] = {**params[key], **value}
        else:
            params[key] = value
    for key in drop:
        parent, _, leaf = key.rpartition(".")
        (params[parent] if parent else params).pop(leaf)
    return {
        "Type": "Task",
        "Comment": name,
        "Resource": f"arn:{cdk.Aws.PARTITION}:states:::sagemaker:createTrainingJob.sync",
        "Parameters": params,
    }


def _logs_and_oidc(foreign: ForeignApp, main: cdk.Stack, app: cdk.App) -> None:
    # RetainedNamedResource: a named log group kept on a failed first create. Twins: the same name kept only on
    # update or delete, and an unnamed retained group.
    bad = logs.LogGroup(
        main, "RetainedLogs", log_group_name="/foreign/retained", removal_policy=cdk.RemovalPolicy.RETAIN
    )
    foreign.expect(bad.node.default_child, "RetainedNamedResource")
    logs.LogGroup(
        main, "KeptLogs", log_group_name="/foreign/kept", removal_policy=cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
    )
    logs.LogGroup(main, "UnnamedLogs", removal_policy=cdk.RemovalPolicy.RETAIN)

    # OidcProviderOncePerAccount: two stacks of one account both create the GitHub provider; each is told about
    # the other. Twins: another issuer in the first stack, and the same issuer in a stack of another account.
    second = cdk.Stack(app, "ForeignCi", env=cdk.Environment(account=ACCOUNT, region="eu-west-1"))
    other_account = cdk.Stack(app, "PartnerCi", env=cdk.Environment(account=OTHER_ACCOUNT, region=REGION))
    first = iam.CfnOIDCProvider(main, "GithubOidc", url=GITHUB, client_id_list=["sts.amazonaws.com"])
    again = iam.CfnOIDCProvider(second, "GithubOidc", url=GITHUB, client_id_list=["sts.amazonaws.com"])
    iam.CfnOIDCProvider(main, "GitlabOidc", url=GITLAB, client_id_list=["https://gitlab.com"])
    iam.CfnOIDCProvider(other_account, "GithubOidc", url=GITHUB, client_id_list=["sts.amazonaws.com"])
    foreign.expect(first, "OidcProviderOncePerAccount", f"ForeignCi/{second.resolve(again.logical_id)}")
    foreign.expect(again, "OidcProviderOncePerAccount", f"Foreign/{main.resolve(first.logical_id)}")


def _topics_and_keys(foreign: ForeignApp, main: cdk.Stack) -> None:
    metric = cloudwatch.Metric(namespace="Foreign", metric_name="Errors", period=cdk.Duration.minutes(5))

    # TopicAdmitsPublishers: enforce_ssl gives the topic a policy of its own, which no longer lets CloudWatch
    # publish the alarm. Twin: the same topic whose policy admits CloudWatch (pinned to the account), also the
    # target of an EventBridge rule.
    silent = sns.Topic(main, "SilentAlarms", enforce_ssl=True)
    cloudwatch.Alarm(main, "SilentAlarm", metric=metric, threshold=1, evaluation_periods=1).add_alarm_action(
        cw_actions.SnsAction(silent)
    )
    foreign.expect(silent.node.default_child, "TopicAdmitsPublishers", "TopicPolicy:cloudwatch.amazonaws.com")
    heard = sns.Topic(main, "Alarms", enforce_ssl=True)
    heard.add_to_resource_policy(
        _statement("cloudwatch.amazonaws.com", ["sns:Publish"], StringEquals={"aws:SourceAccount": ACCOUNT})
    )
    cloudwatch.Alarm(main, "Alarm", metric=metric, threshold=1, evaluation_periods=1).add_alarm_action(
        cw_actions.SnsAction(heard)
    )
    events.Rule(
        main,
        "TrainingFailed",
        event_pattern=events.EventPattern(
            source=["aws.sagemaker"], detail_type=["SageMaker Training Job State Change"]
        ),
        targets=[targets.SnsTopic(heard)],
    )

    # ServicePrincipalWithoutSourceCondition: a key policy lets CloudWatch use the key for any account. Twin: the
    # same statement pinned with aws:SourceAccount.
    key_actions = ["kms:Decrypt", "kms:GenerateDataKey*"]
    open_key = kms.Key(main, "OpenKey", enable_key_rotation=True)
    open_key.add_to_resource_policy(_statement("cloudwatch.amazonaws.com", key_actions))
    foreign.expect(open_key.node.default_child, "ServicePrincipalWithoutSourceCondition", "cloudwatch.amazonaws.com")
    pinned_key = kms.Key(main, "PinnedKey", enable_key_rotation=True)
    pinned_key.add_to_resource_policy(
        _statement("cloudwatch.amazonaws.com", key_actions, StringEquals={"aws:SourceAccount": ACCOUNT})
    )


def _endpoints(foreign: ForeignApp, main: cdk.Stack) -> None:
    key = kms.Key(main, "EndpointKey", enable_key_rotation=True)
    role = f"arn:aws:iam::{ACCOUNT}:role/foreign-serving"
    data = "s3://foreign-artifacts/models/resnet/model.tar.gz"

    def model(name: str, batch_size: str) -> sagemaker.CfnModel:
        container = sagemaker.CfnModel.ContainerDefinitionProperty(
            image=INFERENCE_IMAGE, model_data_url=data, environment={"SAGEMAKER_TS_BATCH_SIZE": batch_size}
        )
        return sagemaker.CfnModel(main, name, execution_role_arn=role, primary_container=container)

    def config(name: str, m: sagemaker.CfnModel, instance_type: str, count: int, **kw: Any) -> Any:
        variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name="AllTraffic",
            model_name=m.attr_model_name,
            instance_type=instance_type,
            initial_instance_count=count,
            initial_variant_weight=1,
        )
        return sagemaker.CfnEndpointConfig(main, name, production_variants=[variant], **kw)

    def endpoint(name: str, c: sagemaker.CfnEndpointConfig, routing: str) -> sagemaker.CfnEndpoint:
        size = sagemaker.CfnEndpoint.CapacitySizeProperty(type="INSTANCE_COUNT", value=1)
        traffic = sagemaker.CfnEndpoint.TrafficRoutingConfigProperty(
            type=routing,
            wait_interval_in_seconds=300,
            canary_size=size if routing == "CANARY" else None,
        )
        policy = sagemaker.CfnEndpoint.BlueGreenUpdatePolicyProperty(traffic_routing_configuration=traffic)
        deployment = sagemaker.CfnEndpoint.DeploymentConfigProperty(blue_green_update_policy=policy)
        return sagemaker.CfnEndpoint(
            main, name, endpoint_config_name=c.attr_endpoint_config_name, deployment_config=deployment
        )

    # DlcTorchServeBatching: TorchServe batches of 8 on the PyTorch inference DLC. Twin: batch size 1.
    batching = model("BatchingModel", "8")
    foreign.expect(batching, "DlcTorchServeBatching", "PrimaryContainer:SAGEMAKER_TS_BATCH_SIZE=8")
    served = model("Model", "1")

    # EndpointKmsKeyIdFormat: a bucket ARN where the key goes. Twin: a key reference, on a type with
    # local NVMe (allowed by the current SageMaker model).
    bad_key = config("BucketAsKeyConfig", served, "ml.g5.xlarge", 2, kms_key_id="arn:aws:s3:::foreign-artifacts")
    foreign.expect(bad_key, "EndpointKmsKeyIdFormat", "KmsKeyId:format")
    pair = config("PairConfig", served, "ml.g5.xlarge", 2, kms_key_id=key.key_arn)

    # EndpointCanaryOnOneInstance: canary shifting on one instance. Twins: canary on two instances, all at once on
    # one instance.
    single = config("SingleConfig", served, "ml.g5.xlarge", 1)
    canary = endpoint("CanaryEndpoint", single, "CANARY")
    foreign.expect(canary, "EndpointCanaryOnOneInstance", "AllTraffic:InitialInstanceCount=1")
    endpoint("PairCanaryEndpoint", pair, "CANARY")
    endpoint("SingleEndpoint", single, "ALL_AT_ONCE")
    _endpoint_capacity(foreign, main, served)


def _endpoint_capacity(foreign: ForeignApp, main: cdk.Stack, served: sagemaker.CfnModel) -> None:
    def variant(**kw: Any) -> sagemaker.CfnEndpointConfig.ProductionVariantProperty:
        return sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name="AllTraffic", model_name=served.attr_model_name, initial_instance_count=1, **kw
        )

    def pools(*priorities: int) -> list[sagemaker.CfnEndpointConfig.InstancePoolProperty]:
        return [
            sagemaker.CfnEndpointConfig.InstancePoolProperty(instance_type=t, priority=p)
            for t, p in zip(("ml.g5.xlarge", "ml.g6.xlarge"), priorities, strict=True)
        ]

    # EndpointInstancePools: two GPU pools with one priority (which SageMaker tries first is undefined). Twin: the
    # same pools in order.
    tied = sagemaker.CfnEndpointConfig(
        main, "TiedPoolsConfig", production_variants=[variant(instance_pools=pools(1, 1))]
    )
    foreign.expect(tied, "EndpointInstancePools", "AllTraffic:duplicate-priority-1")
    sagemaker.CfnEndpointConfig(main, "PoolsConfig", production_variants=[variant(instance_pools=pools(1, 2))])

    # EndpointCapacityReservation: reservations only, but no reservation named. Twin: the same naming a training
    # plan.
    def reserved(name: str, arn: str | None) -> sagemaker.CfnEndpointConfig:
        reservation = sagemaker.CfnEndpointConfig.CapacityReservationConfigProperty(
            capacity_reservation_preference="capacity-reservations-only", ml_reservation_arn=arn
        )
        only = variant(instance_type="ml.g5.xlarge", capacity_reservation_config=reservation)
        return sagemaker.CfnEndpointConfig(main, name, production_variants=[only])

    foreign.expect(reserved("UnnamedReservationConfig", None), "EndpointCapacityReservation",
                   "AllTraffic:no-MlReservationArn")  # fmt: skip
    reserved("ReservedConfig", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/foreign-serving")


def _fleet(foreign: ForeignApp, main: cdk.Stack) -> None:
    # GpuWorkloadInstanceType: the NVIDIA-driver Deep Learning AMI on a CPU type. Twins: the same AMI on g5, and an
    # Auto Scaling group on it whose overrides are all NVIDIA GPU types.
    cpu = _launch_template(main, "CpuLaunchTemplate", "m5.xlarge")
    foreign.expect(cpu, "GpuWorkloadInstanceType", "LaunchTemplate:m5.xlarge:no-NVIDIA-GPU")
    gpu = _launch_template(main, "GpuLaunchTemplate", "g5.xlarge")
    overrides = [
        autoscaling.CfnAutoScalingGroup.LaunchTemplateOverridesProperty(instance_type=t)
        for t in ("g5.xlarge", "g6.xlarge")
    ]
    autoscaling.CfnAutoScalingGroup(
        main,
        "GpuGroup",
        min_size="0",
        max_size="2",
        vpc_zone_identifier=SUBNETS,
        mixed_instances_policy=autoscaling.CfnAutoScalingGroup.MixedInstancesPolicyProperty(
            launch_template=autoscaling.CfnAutoScalingGroup.LaunchTemplateProperty(
                launch_template_specification=autoscaling.CfnAutoScalingGroup.LaunchTemplateSpecificationProperty(
                    launch_template_id=gpu.ref, version=gpu.attr_latest_version_number
                ),
                overrides=overrides,
            )
        ),
    )

    # FleetCapacityBlockMarketType: a capacity-block template that names no block. Twin: the same naming its cr- id.
    def block(name: str, reservation: str | None) -> Any:
        target = ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(capacity_reservation_id=reservation)
        return _launch_template(
            main,
            name,
            "p5.48xlarge",
            instance_market_options=ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block"),
            capacity_reservation_specification=ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_target=target if reservation else None
            ),
        )

    foreign.expect(block("UnnamedBlockTemplate", None), "FleetCapacityBlockMarketType", "NoCapacityReservationId")
    block("BlockTemplate", "cr-0a1b2c3d4e5f60001")


def _alarms(foreign: ForeignApp, main: cdk.Stack) -> None:
    # AlarmOneMetricsInsightsQuery: an alarm over two Metrics Insights queries. Twin: one query and math over it.
    def query(name: str, metric: str) -> cloudwatch.CfnAlarm.MetricDataQueryProperty:
        return cloudwatch.CfnAlarm.MetricDataQueryProperty(
            id=name, expression=f'SELECT AVG({metric}) FROM SCHEMA("/aws/sagemaker/TrainingJobs", Host)',
            period=300, return_data=False,
        )  # fmt: skip

    def alarm(name: str, metrics: list[Any]) -> cloudwatch.CfnAlarm:
        return cloudwatch.CfnAlarm(
            main, name, comparison_operator="GreaterThanThreshold", evaluation_periods=1, threshold=1, metrics=metrics
        )

    ratio = cloudwatch.CfnAlarm.MetricDataQueryProperty(id="ratio", expression="gpu / cpu", return_data=True)
    foreign.expect(alarm("TwoQueries", [query("gpu", "GPUUtilization"), query("cpu", "CPUUtilization"), ratio]),
                   "AlarmOneMetricsInsightsQuery")  # fmt: skip
    half = cloudwatch.CfnAlarm.MetricDataQueryProperty(id="half", expression="gpu / 2", return_data=True)
    alarm("OneQuery", [query("gpu", "GPUUtilization"), half])


def _event_targets(foreign: ForeignApp, main: cdk.Stack) -> None:
    # EventRuleLambdaTargetPermitted: a schedule (L1) that targets a function without a permission for it. Twin: the
    # L2 rule and target, which add the function's permission for the rule.
    def function(name: str) -> lambda_.Function:
        return lambda_.Function(
            main,
            name,
            runtime=lambda_.Runtime.PYTHON_3_12,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
        )

    unheard = function("UnheardStop")
    schedule = events.CfnRule(
        main,
        "UnheardSchedule",
        schedule_expression="rate(1 hour)",
        targets=[events.CfnRule.TargetProperty(id="Stop", arn=unheard.function_arn)],
    )
    target = unheard.node.default_child
    assert isinstance(target, lambda_.CfnFunction)
    foreign.expect(schedule, "EventRuleLambdaTargetPermitted", f"Target:{main.resolve(target.logical_id)}")
    events.Rule(
        main,
        "StopSchedule",
        schedule=events.Schedule.rate(cdk.Duration.hours(1)),
        targets=[targets.LambdaFunction(function("Stop"))],
    )


def _launch_template(scope: cdk.Stack, name: str, instance_type: str, **data_props: Any) -> Any:
    """A launch template for the GPU Deep Learning AMI (its public SSM parameter) on ``instance_type``."""
    data = ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
        image_id=GPU_DLAMI, instance_type=instance_type, **data_props
    )
    return ec2.CfnLaunchTemplate(scope, name, launch_template_data=data)


def _fallback_states() -> list[tuple[str, dict[str, Any], tuple[str, str] | None]]:
    """Training states with an ``InstancePreferences`` fallback list (same shape as ``_training_pipeline``'s).

    InstancePreferencesExclusive: the list beside the job's ``InstanceType``. InstancePreferencesShape: a count on
    one entry only. Twins: the list in place of ``InstanceType`` with the job's count, and with a count on every
    entry instead.
    """

    def preferences(*counts: int | None) -> list[dict[str, Any]]:
        types = ("ml.g5.xlarge", "ml.g6.xlarge")
        return [
            {"InstanceType": t, **({"InstanceCount": c} if c is not None else {})}
            for t, c in zip(types, counts, strict=True)
        ]

    no_type = ("ResourceConfig.InstanceType",)
    return [
        (
            "FallbackAndType",
            {"ResourceConfig": {"InstancePreferences": preferences(None, None)}},
            ("InstancePreferencesExclusive", "FallbackAndType:InstanceType"),
        ),
        ("Fallback", {"ResourceConfig": {"InstancePreferences": preferences(None, None)}, "drop": no_type}, None),
        (
            "CountOnOne",
            {
                "ResourceConfig": {"InstancePreferences": preferences(1, None)},
                "drop": (*no_type, "ResourceConfig.InstanceCount"),
            },
            ("InstancePreferencesShape", "CountOnOne:count-on-some"),
        ),
        (
            "CountPerEntry",
            {
                "ResourceConfig": {"InstancePreferences": preferences(1, 1)},
                "drop": (*no_type, "ResourceConfig.InstanceCount"),
            },
            None,
        ),
    ]


def _training_pipeline(foreign: ForeignApp, main: cdk.Stack) -> None:
    checkpoint = {"S3Uri": "s3://foreign-artifacts/checkpoints/", "LocalPath": "/opt/ml/checkpoints"}
    spot = {"EnableManagedSpotTraining": True, "CheckpointConfig": checkpoint}
    # (state, request overrides, expected (rule, finding) or None for a twin). Twins: a plain GPU job; spot with a
    # checkpoint and MaxWait equal to MaxRuntime (allowed); a volume key on a type without local NVMe (p3); a CPU
    # image on a CPU type; CUDA 13 on Ampere.
    states: list[tuple[str, dict[str, Any], tuple[str, str] | None]] = [
        ("Train", {}, None),
        ("NoCode", {"drop": ("Environment",)}, ("TrainingDlcWithoutCode", "NoCode")),
        (
            "SpotNoCheckpoint",
            {"EnableManagedSpotTraining": True, "StoppingCondition": {"MaxWaitTimeInSeconds": 7200}},
            ("TrainingSpotWithoutCheckpoint", "SpotNoCheckpoint"),
        ),
        ("SpotTrain", {**spot, "StoppingCondition": {"MaxWaitTimeInSeconds": 3600}}, None),
        (
            "ShortWait",
            {**spot, "StoppingCondition": {"MaxWaitTimeInSeconds": 1800}},
            ("TrainingMaxWaitBelowMaxRuntime", "ShortWait:MaxWaitBelowMaxRuntime"),
        ),
        (
            "EncryptedNvme",
            {"ResourceConfig": {"VolumeKmsKeyId": "alias/foreign-training"}},
            ("TrainingVolumeKmsOnInstanceStorage", "EncryptedNvme"),
        ),
        (
            "EncryptedEbs",
            {"ResourceConfig": {"InstanceType": "ml.p3.2xlarge", "VolumeKmsKeyId": "alias/foreign-training"}},
            None,
        ),
        (
            "NumericEpochs",
            {"HyperParameters": {"epochs": 30, "lr": "0.001"}},
            ("TrainingHyperParameterNotString", "NumericEpochs:epochs"),
        ),
        (
            "GpuImageOnCpu",
            {"ResourceConfig": {"InstanceType": "ml.m5.xlarge"}},
            ("TrainingInstanceNotNvidiaGpu", "GpuImageOnCpu"),
        ),
        (
            "CpuImageOnCpu",
            {
                "AlgorithmSpecification": {"TrainingImage": CPU_IMAGE},
                "ResourceConfig": {"InstanceType": "ml.m5.xlarge"},
            },
            None,
        ),
        (
            "Cuda13OnVolta",
            {
                "AlgorithmSpecification": {"TrainingImage": CUDA13_IMAGE},
                "ResourceConfig": {"InstanceType": "ml.p3.2xlarge"},
            },
            ("TrainingImageCudaArchitecture", "Cuda13OnVolta:cu130"),
        ),
        (
            "Cuda13OnAmpere",
            {
                "AlgorithmSpecification": {"TrainingImage": CUDA13_IMAGE},
                "ResourceConfig": {"InstanceType": "ml.g5.xlarge"},
            },
            None,
        ),
        *_fallback_states(),
    ]
    # SageMakerJobRoleAuthorized: a channel the role may read but not list (SageMaker lists every S3Prefix input
    # first). Twin: every other state, whose role may do all its requests (and the machine may start and pass).
    source = {"S3DataType": "S3Prefix", "S3Uri": "s3://foreign-data/train/"}
    unlisted = {"ChannelName": "train", "DataSource": {"S3DataSource": source}}
    states.append(
        (
            "UnlistedChannel",
            {"InputDataConfig": [unlisted]},
            ("SageMakerJobRoleAuthorized", "UnlistedChannel:channel:train:s3:ListBucket"),
        )
    )
    role = iam.Role(
        main, "TrainingRole", role_name="foreign-training", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com")
    )
    role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::foreign-data/train/*"]))
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["s3:GetObject", "s3:PutObject", "s3:ListBucket"],
            resources=["arn:aws:s3:::foreign-artifacts", "arn:aws:s3:::foreign-artifacts/*"],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/TrainingJobs:*"],
        )
    )
    role.add_to_policy(iam.PolicyStatement(actions=["cloudwatch:PutMetricData"], resources=["*"]))
    chain: sfn.IChainable | None = None
    tail: Any = None
    for name, overrides, _ in states:
        state = sfn.CustomState(main, name, state_json=_training(name, **overrides))
        if tail is None:
            chain = state
        else:
            tail.next(state)
        tail = state
    assert chain is not None
    machine = sfn.StateMachine(main, "TrainingMachine", definition_body=sfn.DefinitionBody.from_chainable(chain))
    machine.add_to_role_policy(
        iam.PolicyStatement(
            actions=["sagemaker:CreateTrainingJob"],
            resources=[f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/foreign-*"],
        )
    )
    role.grant_pass_role(machine)
    for _, _, expected in states:
        if expected is not None:
            foreign.expect(machine.node.default_child, *expected)


def build(outdir: Path, *, acknowledge: bool = False) -> ForeignApp:
    """The foreign app with every mistake (acknowledged on its L1 when ``acknowledge``), the pack registered."""
    from gpu_constructs.rules import GpuPlatformChecks

    app = cdk.App(outdir=str(outdir), context={"@aws-cdk/core:validationReportJson": True}, analytics_reporting=False)
    main = cdk.Stack(app, "Foreign", env=cdk.Environment(account=ACCOUNT, region=REGION))
    foreign = ForeignApp(app)
    _logs_and_oidc(foreign, main, app)
    _topics_and_keys(foreign, main)
    _endpoints(foreign, main)
    _fleet(foreign, main)
    _training_pipeline(foreign, main)
    _alarms(foreign, main)
    _event_targets(foreign, main)
    if acknowledge:
        for mistake, l1 in foreign.mistakes:
            cdk.Validations.of(l1).acknowledge(
                cdk.Acknowledgment(id=mistake.id, reason=f"Deliberate in this test because it proves {mistake.rule}")
            )
    cdk.Validations.of(app).add_plugins(GpuPlatformChecks())
    return foreign


def _reported(outdir: Path) -> Counter[tuple[str, str]]:
    """(rule name, construct path) of every violation the pack put in the assembly's validation report.

    The report also holds CDK's built-in "CloudFormation Validate" plugin (schema warnings); only this pack counts.
    A plugin without violations is left out of the report.
    """
    report = json.loads((outdir / "policy-validation-report.json").read_text())
    return Counter(
        (violation["ruleName"], construct["constructPath"])
        for plugin in report["pluginReports"]
        if plugin["summary"]["pluginName"] == PACK_NAME
        for violation in plugin["violations"]
        for construct in violation["violatingConstructs"]
    )


def test_one_finding_per_mistake(tmp_path: Path) -> None:
    foreign = build(tmp_path)
    with pytest.raises(RuntimeError, match=f"{PACK_NAME}-RetainedNamedResource"):
        foreign.app.synth()
    reported = _reported(tmp_path)
    assert reported == Counter((m.rule_name, m.path) for m, _ in foreign.mistakes)
    rules_found = {name.removeprefix(f"{PACK_NAME}-").split("[", 1)[0] for name, _ in reported}
    assert rules_found == {r.id for r in all_rules()}, "every rule of the pack needs a mistake in this app"


def test_acknowledged_mistakes_synthesize(tmp_path: Path) -> None:
    foreign = build(tmp_path, acknowledge=True)
    assembly = foreign.app.synth()
    assert {s.stack_name for s in assembly.stacks} == {"Foreign", "ForeignCi", "PartnerCi"}
    assert len(foreign.mistakes) == len(all_rules()) + 1  # the OIDC pair reports on both providers
    assert _reported(tmp_path) == Counter()
