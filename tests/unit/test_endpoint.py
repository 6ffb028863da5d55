"""GpuEndpoint and the inference stack: model, endpoint config, endpoint, autoscaling, alarms, GitOps.

Synthesis is the cost: one small stack (four endpoints, nag off) is synthesized once per module, one
small app (three inference stacks) once for the GitOps and runtime tests, and the dev/prod apps come from
the session ``synth`` fixture. Every validation rule is checked at construction (no synthesis).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from gpu_constructs.endpoint import (
    GPU_SERVE_BATCHING_ENV,
    SINGLE_INSTANCE_WARNING_ID,
    TORCHSERVE_BATCHING_ENV,
    AsyncInference,
    Batching,
    BlueGreenDeployment,
    DataCapture,
    EndpointAlarms,
    EndpointAutoscaling,
    GpuEndpoint,
    ModelData,
    OffHoursSchedule,
    expected_wildcard_findings,
    flatten_reference,
)
from gpu_constructs.errors import ValidationError
from gpu_constructs.images import GpuImage

REGION = "us-east-1"
MODEL_KEY = "models/classifier/v1/model.tar.gz"
#: Logical id of an immutable resource: construct id + 8-hex content hash + CDK's 8-hex path hash.
HASHED_ID = re.compile(r"^(?P<prefix>[A-Za-z]+?)(?P<content>[0-9a-f]{8})[0-9A-F]{8}$")
#: The app's feature flags (cdk.json), so these stacks synthesize like the platform's.
CONTEXT: dict[str, Any] = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _stack(app: cdk.App | None = None, name: str = "Test") -> cdk.Stack:
    app = app or cdk.App(context=CONTEXT, analytics_reporting=False)
    return cdk.Stack(app, name, env=cdk.Environment(account="123456789012", region=REGION))


def _inference_image(scope: cdk.Stack, usage: str = "inference") -> GpuImage:
    version = "2.6" if usage == "inference" else "2.8"
    return GpuImage.from_dlc(scope, f"Dlc{usage.capitalize()}", framework_version=version, usage=usage)  # type: ignore[arg-type]


def _bucket(stack: cdk.Stack, key: kms.IKey) -> s3.Bucket:
    return s3.Bucket(stack, "Artifacts", encryption=s3.BucketEncryption.KMS, encryption_key=key)


def _vpc(stack: cdk.Stack) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["us-east-1a", "us-east-1b"],
        isolated_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
    )


# --------------------------------------------------------------------------------------------------
# One synthesized stack with four endpoints
# --------------------------------------------------------------------------------------------------


class Built:
    def __init__(self) -> None:
        from gpu_serve.metrics import LOG_METRIC_FILTERS

        self.stack = stack = _stack()
        self.key = kms.Key(stack, "DataKey", enable_key_rotation=True)
        self.bucket = _bucket(stack, self.key)
        image = _inference_image(stack)
        vpc = _vpc(stack)
        self.caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
        self.async_caller = iam.Role(stack, "AsyncCaller", assumed_by=iam.AccountRootPrincipal())
        # A production real-time endpoint on 4 GPUs with everything configured.
        self.realtime = GpuEndpoint(
            stack,
            "Realtime",
            image=image,
            model_data=ModelData.from_bucket(self.bucket, MODEL_KEY),
            instance_type="ml.g5.12xlarge",
            initial_instance_count=2,
            production=True,
            endpoint_name="rt",
            vpc=vpc,
            encryption_key=self.key,
            # the DLC (TorchServe) takes batch size 1 only: larger batches are refused (DlcTorchServeBatching)
            batching=Batching(max_batch_size=1, max_batch_delay_ms=8, env=TORCHSERVE_BATCHING_ENV),
            environment={"LOG_LEVEL": "info"},
            data_capture=DataCapture(bucket=self.bucket, sampling_percentage=25, capture_output=False),
            deployment=BlueGreenDeployment.canary(
                percent=50, bake=cdk.Duration.minutes(10), termination_wait=cdk.Duration.minutes(15)
            ),
            alarms=EndpointAlarms(max_5xx_percent=2, max_model_latency_p99=cdk.Duration.millis(250)),
            autoscaling=EndpointAutoscaling.on_gpu_utilization(70, min_capacity=2, max_capacity=8),
            off_hours=OffHoursSchedule(start_hour=6, end_hour=20, time_zone="Europe/Berlin", off_hours_capacity=2),
            log_metric_filters=[f for f in LOG_METRIC_FILTERS if f.metric_name == "BatchSize"],
        )
        self.realtime.grant_invoke(self.caller)
        # An asynchronous endpoint that scales to zero.
        self.success = sns.Topic(stack, "Success")
        self.errors = sns.Topic(stack, "Errors")
        self.async_ = GpuEndpoint(
            stack,
            "Async",
            image=image,
            model_data=ModelData.from_bucket(self.bucket, MODEL_KEY),
            instance_type="ml.g5.xlarge",
            endpoint_name="batch",
            vpc=vpc,
            encryption_key=self.key,
            async_inference=AsyncInference(
                bucket=self.bucket,
                success_topic=self.success,
                error_topic=self.errors,
                include_response_in_notifications=True,
                max_concurrent_invocations_per_instance=4,
            ),
            autoscaling=EndpointAutoscaling.on_backlog(5, min_capacity=0, max_capacity=3),
        )
        self.async_.grant_invoke(self.async_caller)
        # Every default; production with one instance (a warning).
        self.defaults = GpuEndpoint(
            stack,
            "Defaults",
            image=image,
            model_data=ModelData.from_bucket(self.bucket, MODEL_KEY),
            instance_type="ml.g5.xlarge",
            production=True,
        )
        # An explicit CPU variant on an EBS-only type with a volume.
        self.cpu = GpuEndpoint(
            stack,
            "Cpu",
            image=image,
            model_data=ModelData.from_uri("s3://models-elsewhere/team/model.tar.gz"),
            instance_type="ml.m5.xlarge",
            cpu_variant=True,
            volume_size_gib=50,
            endpoint_name="cpu",
            autoscaling=EndpointAutoscaling.on_invocations(100, min_capacity=1, max_capacity=2),
        )
        self.template = assertions.Template.from_stack(stack)
        self.annotations = assertions.Annotations.from_stack(stack)
        self.json = self.template.to_json()

    def resources(self, type_: str, prefix: str) -> dict[str, Any]:
        return {k: v for k, v in self.template.find_resources(type_).items() if k.startswith(prefix)}

    def one_id(self, type_: str, prefix: str) -> str:
        found = self.resources(type_, prefix)
        assert len(found) == 1, (type_, prefix, sorted(found))
        return next(iter(found))

    def one(self, type_: str, prefix: str) -> dict[str, Any]:
        return self.resources(type_, prefix)[self.one_id(type_, prefix)]["Properties"]

    def policy_statements(self, role_prefix: str) -> list[dict[str, Any]]:
        policy = self.one("AWS::IAM::Policy", f"{role_prefix}DefaultPolicy")
        return policy["PolicyDocument"]["Statement"]


@pytest.fixture(scope="module")
def built() -> Built:
    return Built()


def test_model_serves_image_and_artifact_with_isolation_in_vpc(built: Built) -> None:
    model = built.one("AWS::SageMaker::Model", "RealtimeModel")
    container = model["PrimaryContainer"]
    assert container["Image"].startswith("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.6")
    bucket_id = built.stack.get_logical_id(built.bucket.node.default_child)  # type: ignore[arg-type]
    assert container["ModelDataUrl"] == {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, f"/{MODEL_KEY}"]]}
    assert model["EnableNetworkIsolation"] is True
    assert model["VpcConfig"]["Subnets"] == ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"]
    assert len(model["VpcConfig"]["SecurityGroupIds"]) == 1
    # the default security group admits nothing and only sends HTTPS
    sg = built.one("AWS::EC2::SecurityGroup", "RealtimeSecurityGroup")
    assert "SecurityGroupIngress" not in sg
    assert sg["SecurityGroupEgress"] == [
        {"CidrIp": "0.0.0.0/0", "Description": "HTTPS to AWS APIs (VPC endpoints, S3)", "FromPort": 443,
         "IpProtocol": "tcp", "ToPort": 443}
    ]  # fmt: skip


def test_model_environment_carries_batching_and_user_variables(built: Built) -> None:
    env = built.one("AWS::SageMaker::Model", "RealtimeModel")["PrimaryContainer"]["Environment"]
    assert env == {"SAGEMAKER_TS_BATCH_SIZE": "1", "SAGEMAKER_TS_MAX_BATCH_DELAY": "8", "LOG_LEVEL": "info"}
    assert "Environment" not in built.one("AWS::SageMaker::Model", "DefaultsModel")["PrimaryContainer"]


def test_execution_role_is_least_privilege(built: Built) -> None:
    role = built.one("AWS::IAM::Role", "RealtimeExecutionRole")
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert "ManagedPolicyArns" not in role  # no AmazonSageMakerFullAccess or any managed policy
    statements = built.policy_statements("RealtimeExecutionRole")
    actions = [a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
    assert not [a for a in actions if "*" in a], "every action is named, no wildcard actions"
    by_action = {a: s for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    # exactly the model object, read-only
    assert json.dumps(by_action["s3:GetObject"]["Resource"]).endswith(f'"/{MODEL_KEY}"]]}}')
    # the image's repository only
    assert by_action["ecr:BatchGetImage"]["Resource"].endswith(":763104351884:repository/pytorch-inference")
    # logs of this endpoint's log group only
    assert by_action["logs:PutLogEvents"]["Resource"]["Fn::GetAtt"][0].startswith("RealtimeLogGroup")
    # metrics only in SageMaker's endpoint namespace; VPC network interfaces held to this VPC and region
    assert by_action["cloudwatch:PutMetricData"]["Condition"] == {
        "StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}
    }
    eni = by_action["ec2:CreateNetworkInterface"]["Condition"]
    assert eni["StringEquals"] == {"aws:RequestedRegion": REGION}
    assert "ec2:Vpc" in eni["ArnEqualsIfExists"]
    # data capture: write only under this endpoint's prefix
    put = by_action["s3:PutObject"]["Resource"]
    assert json.dumps(put).endswith('"/data-capture/rt/*"]]}')


def test_endpoint_config_variant_kms_and_timeouts(built: Built) -> None:
    config = built.one("AWS::SageMaker::EndpointConfig", "RealtimeEndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g5.12xlarge"
    assert variant["InitialInstanceCount"] == 2
    assert variant["VariantName"] == "AllTraffic"
    assert variant["ModelDataDownloadTimeoutInSeconds"] == 1200
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 600
    assert "VolumeSizeInGB" not in variant  # g5 has local NVMe
    assert config["KmsKeyId"] == {"Fn::GetAtt": [built.stack.get_logical_id(built.key.node.default_child), "Arn"]}  # type: ignore[arg-type]
    model_id = built.one_id("AWS::SageMaker::Model", "RealtimeModel")
    assert variant["ModelName"] == {"Fn::GetAtt": [model_id, "ModelName"]}


def test_volume_size_only_on_ebs_only_types(built: Built) -> None:
    (variant,) = built.one("AWS::SageMaker::EndpointConfig", "CpuEndpointConfig")["ProductionVariants"]
    assert variant["VolumeSizeInGB"] == 50
    assert variant["InstanceType"] == "ml.m5.xlarge"


def test_data_capture_to_bucket_with_kms(built: Built) -> None:
    capture = built.one("AWS::SageMaker::EndpointConfig", "RealtimeEndpointConfig")["DataCaptureConfig"]
    assert capture["EnableCapture"] is True
    assert capture["InitialSamplingPercentage"] == 25
    assert capture["CaptureOptions"] == [{"CaptureMode": "Input"}]
    assert json.dumps(capture["DestinationS3Uri"]).endswith('"/data-capture/rt/"]]}')
    assert capture["KmsKeyId"]["Fn::GetAtt"][0] == built.stack.get_logical_id(built.key.node.default_child)  # type: ignore[arg-type]
    assert capture["CaptureContentTypeHeader"] == {"JsonContentTypes": ["application/json"]}


def test_async_inference_config(built: Built) -> None:
    config = built.one("AWS::SageMaker::EndpointConfig", "AsyncEndpointConfig")["AsyncInferenceConfig"]
    assert config["ClientConfig"] == {"MaxConcurrentInvocationsPerInstance": 4}
    out = config["OutputConfig"]
    assert json.dumps(out["S3OutputPath"]).endswith('"/async/batch/output/"]]}')
    assert json.dumps(out["S3FailurePath"]).endswith('"/async/batch/failure/"]]}')
    success = built.stack.get_logical_id(built.success.node.default_child)  # type: ignore[arg-type]
    errors = built.stack.get_logical_id(built.errors.node.default_child)  # type: ignore[arg-type]
    assert out["NotificationConfig"] == {
        "SuccessTopic": {"Ref": success},
        "ErrorTopic": {"Ref": errors},
        "IncludeInferenceResponseIn": ["SUCCESS_NOTIFICATION_TOPIC", "ERROR_NOTIFICATION_TOPIC"],
    }
    assert built.async_.async_input_prefix == "async/batch/input/"
    statements = built.policy_statements("AsyncExecutionRole")
    published = [r for s in statements if s["Action"] == "sns:Publish" for r in _listed(s["Resource"])]
    assert sorted(published, key=json.dumps) == sorted([{"Ref": success}, {"Ref": errors}], key=json.dumps)


def test_blue_green_canary_with_rollback_alarms(built: Built) -> None:
    endpoint = built.one("AWS::SageMaker::Endpoint", "Realtime")
    dep = endpoint["DeploymentConfig"]
    policy = dep["BlueGreenUpdatePolicy"]
    assert policy["TrafficRoutingConfiguration"] == {
        "Type": "CANARY",
        "CanarySize": {"Type": "CAPACITY_PERCENT", "Value": 50},
        "WaitIntervalInSeconds": 600,
    }
    assert policy["TerminationWaitInSeconds"] == 900
    # bakes (2 x 600) + termination wait 900 + model download 1200 + start-up 600 + 600 margin
    assert policy["MaximumExecutionTimeoutInSeconds"] == 4500
    alarm_ids = {a["AlarmName"]["Ref"] for a in dep["AutoRollbackConfiguration"]["Alarms"]}
    assert alarm_ids == set(built.resources("AWS::CloudWatch::Alarm", "Realtime")) - {
        k for k in built.resources("AWS::CloudWatch::Alarm", "RealtimeScalableTarget")
    }
    assert len(alarm_ids) == 3
    assert endpoint["EndpointName"] == "rt"
    config_id = built.one_id("AWS::SageMaker::EndpointConfig", "RealtimeEndpointConfig")
    assert endpoint["EndpointConfigName"] == {"Fn::GetAtt": [config_id, "EndpointConfigName"]}
    # autoscaling owns the instance count; config changes still apply weights and data capture
    assert endpoint["RetainAllVariantProperties"] is True
    assert endpoint["ExcludeRetainedVariantProperties"] == [
        {"VariantPropertyType": "DesiredWeight"},
        {"VariantPropertyType": "DataCaptureConfig"},
    ]


def test_alarm_thresholds_and_encrypted_topic(built: Built) -> None:
    alarms = built.resources("AWS::CloudWatch::Alarm", "Realtime")
    by_id = {k.split("Realtime", 1)[1]: v["Properties"] for k, v in alarms.items()}
    errors = next(v for k, v in by_id.items() if k.startswith("Http5xxRateAlarm"))
    assert errors["Threshold"] == 2
    (expr, metric) = sorted(errors["Metrics"], key=lambda m: "Expression" not in m)
    assert expr["Expression"] == "100 * e"
    assert metric["MetricStat"]["Metric"]["MetricName"] == "Invocation5XXErrors"
    assert metric["MetricStat"]["Stat"] == "Average"
    latency = next(v for k, v in by_id.items() if k.startswith("ModelLatencyP99Alarm"))
    assert (latency["MetricName"], latency["ExtendedStatistic"], latency["Threshold"]) == (
        "ModelLatency",
        "p99",
        250_000,
    )
    gpu = next(v for k, v in by_id.items() if k.startswith("GpuMemoryAlarm"))
    assert (gpu["Namespace"], gpu["MetricName"]) == ("/aws/sagemaker/Endpoints", "GPUMemoryUtilization")
    assert gpu["Threshold"] == 90 * 4  # 4 GPUs on ml.g5.12xlarge, the metric sums them
    assert {d["Name"] for d in gpu["Dimensions"]} == {"EndpointName", "VariantName"}
    for alarm in (errors, latency, gpu):
        (action,) = alarm["AlarmActions"]
        assert action["Ref"].startswith("RealtimeAlarmTopic")
        assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["TreatMissingData"]) == (
            3,
            2,
            "notBreaching",
        )
    topic = built.one("AWS::SNS::Topic", "RealtimeAlarmTopic")
    assert topic["KmsMasterKeyId"]["Fn::GetAtt"][0].startswith("RealtimeMonitoringKey")
    key_policy = json.dumps(built.one("AWS::KMS::Key", "RealtimeMonitoringKey")["KeyPolicy"])
    assert "cloudwatch.amazonaws.com" in key_policy and "logs.us-east-1.amazonaws.com" in key_policy


def test_gpu_utilization_autoscaling_and_off_hours_schedule(built: Built) -> None:
    target = built.one("AWS::ApplicationAutoScaling::ScalableTarget", "RealtimeScalableTarget")
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 8)
    assert target["ResourceId"] == "endpoint/rt/variant/AllTraffic"
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint" in json.dumps(target["RoleARN"])
    down, up = sorted(target["ScheduledActions"], key=lambda a: a["ScheduledActionName"])
    assert down["Schedule"] == "cron(0 20 ? * MON-FRI *)" and down["Timezone"] == "Europe/Berlin"
    assert down["ScalableTargetAction"] == {"MinCapacity": 2, "MaxCapacity": 2}
    assert up["Schedule"] == "cron(0 6 ? * MON-FRI *)"
    assert up["ScalableTargetAction"] == {"MinCapacity": 2, "MaxCapacity": 8}
    policy = built.one("AWS::ApplicationAutoScaling::ScalingPolicy", "RealtimeScalableTargetGpuUtilization")
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["TargetValue"] == 70 * 4  # per GPU x GPUs: the metric sums the GPUs of an instance
    assert tracking["CustomizedMetricSpecification"]["MetricName"] == "GPUUtilization"
    assert tracking["CustomizedMetricSpecification"]["Namespace"] == "/aws/sagemaker/Endpoints"
    assert (tracking["ScaleInCooldown"], tracking["ScaleOutCooldown"]) == (300, 60)


def test_invocations_autoscaling(built: Built) -> None:
    policy = built.one("AWS::ApplicationAutoScaling::ScalingPolicy", "CpuScalableTargetInvocations")
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
    }
    assert tracking["TargetValue"] == 100


def test_async_scales_to_zero_and_back(built: Built) -> None:
    target = built.one("AWS::ApplicationAutoScaling::ScalableTarget", "AsyncScalableTarget")
    assert (target["MinCapacity"], target["MaxCapacity"]) == (0, 3)
    tracking = built.one("AWS::ApplicationAutoScaling::ScalingPolicy", "AsyncScalableTargetBacklog")[
        "TargetTrackingScalingPolicyConfiguration"
    ]
    assert tracking["CustomizedMetricSpecification"]["MetricName"] == "ApproximateBacklogSizePerInstance"
    assert tracking["CustomizedMetricSpecification"]["Dimensions"] == [{"Name": "EndpointName", "Value": "batch"}]
    assert tracking["TargetValue"] == 5
    step = built.one("AWS::ApplicationAutoScaling::ScalingPolicy", "AsyncScalableTargetScaleOutFromZero")
    assert step["StepScalingPolicyConfiguration"]["StepAdjustments"] == [
        {"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}
    ]
    wake = built.one("AWS::CloudWatch::Alarm", "AsyncScalableTargetScaleOutFromZero")
    assert (wake["MetricName"], wake["Threshold"]) == ("HasBacklogWithoutCapacity", 0.5)


def test_dashboard_shows_traffic_latency_gpu_and_batch_size(built: Built) -> None:
    body = json.dumps(built.one("AWS::CloudWatch::Dashboard", "RealtimeDashboard")["DashboardBody"])
    for needle in ("Invocations", "Invocation4XXErrors", "Invocation5XXErrors", "ModelLatency", "p50", "p99",
                   "GPUUtilization", "GPUMemoryUtilization", "CPUUtilization", "BatchSize", "GpuServe/rt"):  # fmt: skip
        assert needle in body, needle
    async_body = json.dumps(built.one("AWS::CloudWatch::Dashboard", "AsyncDashboard")["DashboardBody"])
    assert "ApproximateBacklogSize" in async_body and "InvocationsProcessed" in async_body
    cpu_body = json.dumps(built.one("AWS::CloudWatch::Dashboard", "CpuDashboard")["DashboardBody"])
    assert "GPUUtilization" not in cpu_body and "CPUUtilization" in cpu_body


def test_batch_size_metric_filter_from_runtime(built: Built) -> None:
    from gpu_serve.metrics import LOG_METRIC_FILTERS

    spec = next(f for f in LOG_METRIC_FILTERS if f.metric_name == "BatchSize")
    mf = built.one("AWS::Logs::MetricFilter", "RealtimeBatchSize")
    assert mf["FilterPattern"] == spec.filter_pattern
    assert mf["MetricTransformations"] == [
        {"MetricName": "BatchSize", "MetricNamespace": "GpuServe/rt", "MetricValue": "$.batch_size", "Unit": "Count"}
    ]


def test_log_group_is_named_encrypted_and_expires(built: Built) -> None:
    group = built.one("AWS::Logs::LogGroup", "RealtimeLogGroup")
    assert group["LogGroupName"] == "/aws/sagemaker/Endpoints/rt"
    assert group["RetentionInDays"] == 90
    assert group["KmsKeyId"]["Fn::GetAtt"][0].startswith("RealtimeMonitoringKey")


def test_defaults(built: Built) -> None:
    ep = built.defaults
    assert re.fullmatch(r"[a-z0-9-]{1,63}", ep.endpoint_name) and "defaults" in ep.endpoint_name
    model = built.one("AWS::SageMaker::Model", "DefaultsModel")
    assert model["EnableNetworkIsolation"] is True and "VpcConfig" not in model
    (variant,) = built.one("AWS::SageMaker::EndpointConfig", "DefaultsEndpointConfig")["ProductionVariants"]
    assert (variant["InitialInstanceCount"], variant["VariantName"]) == (1, "AllTraffic")
    assert (variant["ModelDataDownloadTimeoutInSeconds"], variant["ContainerStartupHealthCheckTimeoutInSeconds"]) == (
        1200,
        600,
    )
    config = built.one("AWS::SageMaker::EndpointConfig", "DefaultsEndpointConfig")
    assert "DataCaptureConfig" not in config and "AsyncInferenceConfig" not in config
    assert config["KmsKeyId"]["Fn::GetAtt"][0].startswith("DefaultsKey")  # a new key with rotation
    assert built.one("AWS::KMS::Key", "DefaultsKey")["EnableKeyRotation"] is True
    endpoint = built.one("AWS::SageMaker::Endpoint", "Defaults")
    policy = endpoint["DeploymentConfig"]["BlueGreenUpdatePolicy"]
    assert policy["TrafficRoutingConfiguration"] == {"Type": "ALL_AT_ONCE", "WaitIntervalInSeconds": 300}
    assert (policy["TerminationWaitInSeconds"], policy["MaximumExecutionTimeoutInSeconds"]) == (0, 2700)
    assert len(endpoint["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]) == 3
    assert "RetainAllVariantProperties" not in endpoint  # no autoscaling: config counts apply
    assert not built.resources("AWS::ApplicationAutoScaling::ScalableTarget", "Defaults")
    assert built.one("AWS::SNS::Topic", "DefaultsAlarmTopic")["KmsMasterKeyId"]
    assert built.one("AWS::Logs::LogGroup", "DefaultsLogGroup")["RetentionInDays"] == 90
    assert not built.resources("AWS::Logs::MetricFilter", "Defaults")
    assert built.one("AWS::CloudWatch::Dashboard", "DefaultsDashboard")["DashboardName"] == ep.endpoint_name


def test_cpu_variant_has_no_gpu_alarm(built: Built) -> None:
    alarms = built.resources("AWS::CloudWatch::Alarm", "Cpu")
    names = {v["Properties"].get("MetricName") for v in alarms.values()}
    assert "GPUMemoryUtilization" not in names and "ModelLatency" in names
    assert built.cpu.gpu_count == 0


def test_model_from_uri_reads_that_object_only(built: Built) -> None:
    statements = built.policy_statements("CpuExecutionRole")
    gets = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert [s["Resource"] for s in gets] == ["arn:aws:s3:::models-elsewhere/team/model.tar.gz"]


def test_immutable_resources_carry_a_content_hash_and_generated_names(built: Built) -> None:
    model_id = built.one_id("AWS::SageMaker::Model", "RealtimeModel")
    config_id = built.one_id("AWS::SageMaker::EndpointConfig", "RealtimeEndpointConfig")
    for logical_id, prefix in ((model_id, "RealtimeModel"), (config_id, "RealtimeEndpointConfig")):
        match = HASHED_ID.match(logical_id)
        assert match and match.group("prefix") == prefix, logical_id
    # CloudFormation names them, so it may also replace them in place when a deploy-time value changes
    assert "ModelName" not in built.one("AWS::SageMaker::Model", "RealtimeModel")
    assert "EndpointConfigName" not in built.one("AWS::SageMaker::EndpointConfig", "RealtimeEndpointConfig")
    # the endpoint itself keeps a plain, stable id and its configured name
    assert built.one_id("AWS::SageMaker::Endpoint", "Realtime") == built.stack.get_logical_id(built.realtime.resource)
    assert HASHED_ID.match(built.stack.get_logical_id(built.realtime.resource)) is None


def test_grant_invoke_real_time_and_async(built: Built) -> None:
    (stmt,) = built.policy_statements("Caller")
    assert stmt["Action"] == ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
    assert stmt["Resource"] == {"Ref": built.stack.get_logical_id(built.realtime.resource)}
    statements = built.policy_statements("AsyncCaller")
    assert statements[0]["Action"] == "sagemaker:InvokeEndpointAsync"
    text = json.dumps(statements)
    assert '/async/batch/input/*"' in text and '/async/batch/output/*"' in text and '/async/batch/failure/*"' in text
    put = next(s for s in statements if "s3:PutObject" in s["Action"])
    assert json.dumps(put["Resource"]).endswith('/async/batch/input/*"]]}')


def test_single_instance_production_endpoint_warns(built: Built) -> None:
    built.annotations.has_warning("/Test/Defaults", assertions.Match.string_like_regexp("Availability Zone outage"))
    warnings = built.annotations.find_warning("*", assertions.Match.string_like_regexp("Availability Zone outage"))
    assert [w.id for w in warnings] == ["/Test/Defaults"]  # not the two-instance production endpoint
    assert SINGLE_INSTANCE_WARNING_ID in json.dumps([w.entry.data for w in warnings])


def test_expected_wildcards_are_acknowledged_one_finding_at_a_time(built: Built) -> None:
    policy = built.realtime.role.node.find_child("DefaultPolicy").node.default_child
    assert policy is not None
    acks = {k for entry in policy.node.metadata if entry.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
            for k in entry.data}  # fmt: skip
    iam5 = sorted(a for a in acks if "IAM5" in a)
    bucket = built.stack.get_logical_id(built.bucket.node.default_child)  # type: ignore[arg-type]
    assert iam5 == [
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        f"AwsSolutions::AwsSolutions-IAM5[Resource::<{bucket}.Arn>/data-capture/rt/*]",
    ]


# --------------------------------------------------------------------------------------------------
# The wildcard analysis (pure functions)
# --------------------------------------------------------------------------------------------------


def test_flatten_reference_matches_cdk_nag() -> None:
    value = {"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket12", "Arn"]}, "/p/*"]]}
    assert flatten_reference(value) == "<Bucket12.Arn>/p/*"
    assert flatten_reference({"Fn::ImportValue": "stack:Export"}) == "stack:Export"
    assert flatten_reference({"Ref": "Topic"}) == "<Topic>"
    assert flatten_reference("arn:${AWS::Partition}:s3:::b/*") == "arn:<AWS::Partition>:s3:::b/*"


def test_unexpected_wildcards_are_not_acknowledged() -> None:
    prefix = {"Fn::Join": ["", ["arn:aws:s3:::b", "/data-capture/x/*"]]}
    doc = {
        "Statement": [
            {"Effect": "Allow", "Action": ["ecr:GetAuthorizationToken"], "Resource": "*"},
            {"Effect": "Allow", "Action": "s3:PutObject", "Resource": prefix},
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/other/*"},
        ]
    }
    found = expected_wildcard_findings(doc, {"data-capture/x/*": "reason"})
    assert set(found) == {"Resource::*", "Resource::arn:aws:s3:::b/data-capture/x/*"}
    # '*' on an action SageMaker does not need: the star finding stays unacknowledged
    doc["Statement"].append({"Effect": "Allow", "Action": "s3:DeleteObject", "Resource": "*"})
    assert "Resource::*" not in expected_wildcard_findings(doc, {})
    # a deny is never a finding
    deny = {"Statement": [{"Effect": "Deny", "Action": "s3:*", "Resource": "*"}]}
    assert expected_wildcard_findings(deny, {}) == {}


# --------------------------------------------------------------------------------------------------
# Validation rules (construction only)
# --------------------------------------------------------------------------------------------------


@pytest.fixture()
def make() -> Callable[..., GpuEndpoint]:
    def build(**overrides: Any) -> GpuEndpoint:
        stack = _stack()
        key = kms.Key(stack, "Key")
        bucket = _bucket(stack, key)
        props: dict[str, Any] = {
            "image": _inference_image(stack),
            "model_data": ModelData.from_bucket(bucket, MODEL_KEY),
            "instance_type": "ml.g5.xlarge",
            "encryption_key": key,
        }
        for name, value in overrides.items():
            props[name] = value(stack, bucket) if callable(value) and not isinstance(value, type) else value
        return GpuEndpoint(stack, "Ep", **props)

    return build


def _async(stack: cdk.Stack, bucket: s3.IBucket) -> AsyncInference:
    return AsyncInference(bucket=bucket)


def _training_image(stack: cdk.Stack, bucket: s3.IBucket) -> GpuImage:
    return _inference_image(stack, usage="training")


def _vpc_subnets_without_vpc(stack: cdk.Stack, bucket: s3.IBucket) -> ec2.SubnetSelection:
    return ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)


def _capture(**kw: Any) -> Callable[[cdk.Stack, s3.IBucket], DataCapture]:
    return lambda stack, bucket: DataCapture(bucket=bucket, **kw)


def _async_with(**kw: Any) -> Callable[[cdk.Stack, s3.IBucket], AsyncInference]:
    return lambda stack, bucket: AsyncInference(bucket=bucket, **kw)


def _model(kind: str, value: str) -> Callable[[cdk.Stack, s3.IBucket], ModelData]:
    if kind == "bucket":
        return lambda stack, bucket: ModelData.from_bucket(bucket, value)
    if kind == "uri":
        return lambda stack, bucket: ModelData.from_uri(value)
    return lambda stack, bucket: ModelData.from_ssm_parameter(value, bucket=bucket)


class _Filter:
    def __init__(self, name: str, unit: str = "Count") -> None:
        self.metric_name, self.filter_pattern, self.metric_value, self.unit = name, '{ $.x = "*" }', "$.x", unit


CANARY = BlueGreenDeployment.canary(percent=10)
SCALE = EndpointAutoscaling.on_invocations

RULES: list[tuple[str, dict[str, Any], str]] = [
    ("cpu type without cpu_variant", {"instance_type": "ml.m5.xlarge"}, r"has no NVIDIA GPU .* Fitting GPU types"),
    ("inferentia type", {"instance_type": "ml.inf2.xlarge"}, r"no NVIDIA GPU"),
    ("typo", {"instance_type": "ml.g5.xlarg"}, r"did you mean 'ml.g5.xlarge'"),
    ("EC2 spelling", {"instance_type": "g5.xlarge"}, r"not how SageMaker hosting spells"),
    ("cpu variant EC2 spelling", {"instance_type": "m5.xlarge", "cpu_variant": True}, r"the SageMaker spelling"),
    ("cpu variant not hosting", {"instance_type": "ml.t3.medium", "cpu_variant": True}, r"SageMaker hosting accepts"),
    ("training image", {"image": _training_image}, r"usage='training' cannot serve as an endpoint"),
    ("cuda cannot drive gpu", {"instance_type": "ml.p6-b200.48xlarge"}, r"CUDA 12.4 cannot drive the NVIDIA B200"),
    ("instance count 0", {"initial_instance_count": 0}, r"initial_instance_count=0 is not allowed"),
    ("endpoint name", {"endpoint_name": "bad_name"}, r"endpoint_name='bad_name'"),
    ("endpoint name too long", {"endpoint_name": "a" * 64}, r"endpoint_name="),
    ("variant name", {"variant_name": "-x"}, r"variant_name='-x'"),
    ("environment key", {"environment": {"1BAD": "x"}}, r"environment keys=\['1BAD'\]"),
    ("too many variables", {"environment": {f"V{i}": "x" for i in range(101)}}, r"at most 100 variables"),
    (
        "environment contradicts batching",
        {"environment": {"GPU_SERVE_MAX_BATCH_SIZE": "8"}, "batching": Batching(max_batch_size=16)},
        r"contradicts batching \(GPU_SERVE_MAX_BATCH_SIZE=16\)",
    ),
    ("batch size", {"batching": Batching(max_batch_size=0)}, r"batching.max_batch_size=0"),
    ("batch delay", {"batching": Batching(max_batch_delay_ms=20_000)}, r"batching.max_batch_delay_ms=20000"),
    ("subnets without vpc", {"vpc_subnets": _vpc_subnets_without_vpc}, r"vpc=None .* a VPC whenever vpc_subnets"),
    ("volume on NVMe type", {"volume_size_gib": 100}, r"none for ml.g5.xlarge: it has 250 GB of local NVMe"),
    (
        "volume too large",
        {"instance_type": "ml.p3.2xlarge", "volume_size_gib": 600},
        r"volume_size_gib=600 .* \[1, 512\]",
    ),
    (
        "download timeout",
        {"model_download_timeout": cdk.Duration.seconds(30)},
        r"model_download_timeout \(seconds\)=30",
    ),
    (
        "startup timeout",
        {"container_startup_health_check_timeout": cdk.Duration.hours(2)},
        r"container_startup_health_check_timeout \(seconds\)=7200",
    ),
    ("sampling percentage", {"data_capture": _capture(sampling_percentage=101)}, r"sampling_percentage=101"),
    ("capture nothing", {"data_capture": _capture(capture_input=False, capture_output=False)}, r"at least one of them"),
    ("capture prefix", {"data_capture": _capture(prefix="../x/")}, r"data_capture.prefix='../x/'"),
    (
        "async concurrency",
        {"async_inference": _async_with(max_concurrent_invocations_per_instance=0)},
        r"max_concurrent_invocations_per_instance=0",
    ),
    (
        "async response without topic",
        {"async_inference": _async_with(include_response_in_notifications=True)},
        r"include_response_in_notifications=True .* success_topic or error_topic",
    ),
    (
        "canary above 50",
        {"deployment": BlueGreenDeployment.canary(percent=60), "initial_instance_count": 2},
        r"1 to 50",
    ),
    (
        "linear below 10",
        {"deployment": BlueGreenDeployment.linear(step_percent=5), "initial_instance_count": 2},
        r"10 to 50",
    ),
    ("canary on one instance", {"deployment": CANARY}, r"2 or more instances"),
    ("step on all at once", {"deployment": BlueGreenDeployment(step_percent=10)}, r"None for ALL_AT_ONCE"),
    ("bake too long", {"deployment": BlueGreenDeployment.all_at_once(bake=cdk.Duration.hours(2))}, r"wait_interval"),
    (
        "termination wait",
        {"deployment": BlueGreenDeployment(termination_wait=cdk.Duration.hours(2))},
        r"termination_wait \(seconds\)=7200",
    ),
    (
        "timeout range",
        {"deployment": BlueGreenDeployment(max_execution_timeout=cdk.Duration.minutes(5))},
        r"max_execution_timeout \(seconds\)=300 .* 600 to 28800",
    ),
    (
        "timeout shorter than bakes",
        {
            "deployment": BlueGreenDeployment.linear(
                step_percent=10, interval=cdk.Duration.minutes(10), max_execution_timeout=cdk.Duration.minutes(60)
            ),
            "initial_instance_count": 2,
        },
        r"more than the 6000 s of bake intervals",
    ),
    ("5xx threshold", {"alarms": EndpointAlarms(max_5xx_percent=0)}, r"alarms.max_5xx_percent=0"),
    ("gpu memory threshold", {"alarms": EndpointAlarms(max_gpu_memory_percent=150)}, r"max_gpu_memory_percent=150"),
    ("latency threshold", {"alarms": EndpointAlarms(max_model_latency_p99=cdk.Duration.millis(0))}, r"> 0 ms"),
    ("alarm period", {"alarms": EndpointAlarms(period=cdk.Duration.seconds(45))}, r"alarms.period \(seconds\)=45"),
    ("datapoints", {"alarms": EndpointAlarms(evaluation_periods=2, datapoints_to_alarm=3)}, r"datapoints_to_alarm=3"),
    ("min above max", {"autoscaling": SCALE(10, min_capacity=3, max_capacity=2)}, r"min_capacity=3 .* at most max"),
    ("max zero", {"autoscaling": SCALE(10, min_capacity=0, max_capacity=0)}, r"max_capacity >= 1"),
    ("zero for real-time", {"autoscaling": SCALE(10, min_capacity=0, max_capacity=2)}, r"scale to zero is only"),
    (
        "count outside range",
        {"autoscaling": SCALE(10, min_capacity=2, max_capacity=4)},
        r"initial_instance_count=1 .* \[2, 4\]",
    ),
    ("target not positive", {"autoscaling": SCALE(0, min_capacity=1, max_capacity=2)}, r"autoscaling.target=0"),
    (
        "backlog on real-time",
        {"autoscaling": EndpointAutoscaling.on_backlog(5, min_capacity=1, max_capacity=2)},
        r"autoscaling.metric='backlog_per_instance' .* real-time",
    ),
    (
        "invocations on async",
        {"async_inference": _async, "autoscaling": SCALE(10, min_capacity=1, max_capacity=2)},
        r"'invocations_per_instance' is not allowed; allowed: 'gpu_utilization', 'backlog_per_instance'",
    ),
    (
        "gpu metric on cpu variant",
        {
            "instance_type": "ml.m5.xlarge",
            "cpu_variant": True,
            "autoscaling": EndpointAutoscaling.on_gpu_utilization(70, min_capacity=1, max_capacity=2),
        },
        r"for a CPU variant",
    ),
    (
        "gpu target above 100",
        {"autoscaling": EndpointAutoscaling.on_gpu_utilization(150, min_capacity=1, max_capacity=2)},
        r"percent per GPU\)=150",
    ),
    (
        "zero without backlog metric",
        {
            "async_inference": _async,
            "autoscaling": EndpointAutoscaling.on_gpu_utilization(70, min_capacity=0, max_capacity=2),
        },
        r"'backlog_per_instance' when min_capacity is 0",
    ),
    ("off-hours hour", {"off_hours": OffHoursSchedule(end_hour=24)}, r"off_hours.end_hour=24"),
    ("off-hours same hours", {"off_hours": OffHoursSchedule(start_hour=8, end_hour=8)}, r"other than start_hour"),
    ("off-hours days", {"off_hours": OffHoursSchedule(week_days="Monday")}, r"off_hours.week_days='Monday'"),
    ("off-hours zone", {"off_hours": OffHoursSchedule(time_zone="Mars/Olympus")}, r"off_hours.time_zone"),
    ("off-hours zero real-time", {"off_hours": OffHoursSchedule(off_hours_capacity=0)}, r"cannot scale to zero"),
    ("log filter names", {"log_metric_filters": [_Filter("A"), _Filter("A")]}, r"each metric name once"),
    ("log filter unit", {"log_metric_filters": [_Filter("A", unit="Furlongs")]}, r"\['Furlongs'\]"),
    ("model key", {"model_data": _model("bucket", "models/x/model.pt")}, r"model_data key='models/x/model.pt'"),
    ("model uri", {"model_data": _model("uri", "https://x/model.tar.gz")}, r"model_data uri="),
    ("model parameter", {"model_data": _model("ssm", "bad name!")}, r"model_data parameter_name='bad name!'"),
    (
        "batching on the dlc",
        {"batching": Batching(max_batch_size=16)},
        r"^Test/Ep: batching.max_batch_size=16 is unsafe on the AWS PyTorch inference DLC: .* fails the whole batch "
        r"when one request fails; allowed: 1 \(or no batching\)\. To batch, serve with the platform's inference "
        r"image \(GpuImage.from_codebuild/from_asset of containers/inference, the gpu_serve runtime\)",
    ),
    (
        "torchserve batch size in environment",
        {"environment": {"SAGEMAKER_TS_BATCH_SIZE": "8"}},
        r"environment SAGEMAKER_TS_BATCH_SIZE: max_batch_size=8 is unsafe on the AWS PyTorch inference DLC",
    ),
    (
        "torchserve batch size not a number",
        {"environment": {"SAGEMAKER_TS_BATCH_SIZE": "many"}},
        r"environment SAGEMAKER_TS_BATCH_SIZE='many' is not allowed; allowed: an integer",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_validation_rules(make: Callable[..., GpuEndpoint], overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        make(**overrides)
    assert info.value.where.startswith("Test/Ep") or info.value.where.startswith("Test/"), info.value.where


def test_valid_edge_values_pass(make: Callable[..., GpuEndpoint]) -> None:
    ep = make(
        initial_instance_count=2,
        deployment=BlueGreenDeployment.linear(step_percent=50, max_execution_timeout=cdk.Duration.hours(8)),
        autoscaling=EndpointAutoscaling.on_gpu_utilization(100, min_capacity=2, max_capacity=2),
        off_hours=OffHoursSchedule(start_hour=0, end_hour=23, week_days="MON,WED,FRI", off_hours_capacity=1),
        model_data=_model("ssm", "/gpu/models/latest"),
        alarms=EndpointAlarms(period=cdk.Duration.seconds(30), evaluation_periods=1, datapoints_to_alarm=1),
    )
    assert ep.deployment.shift_steps == 1 and ep.gpu_count == 1
    # deploy-time model data: CloudFormation names the model, which it can then replace
    assert cdk.Token.is_unresolved(ep.model_name)


def test_dlc_batching_refusal_is_per_image_and_variable() -> None:
    from aws_cdk import aws_ecr as ecr

    def endpoint(name: str, image: Any, **kwargs: Any) -> GpuEndpoint:
        stack = _stack(name=name)
        key = kms.Key(stack, "Key")
        return GpuEndpoint(
            stack,
            "Ep",
            image=image(stack) if callable(image) else image,
            model_data=ModelData.from_bucket(_bucket(stack, key), MODEL_KEY),
            instance_type="ml.g5.xlarge",
            encryption_key=key,
            **kwargs,
        )

    def own(stack: cdk.Stack) -> GpuImage:
        repo = ecr.Repository.from_repository_name(stack, "Own", "gpu-inference")
        return GpuImage.from_ecr_repository(repo, "v7", usage="inference", cuda_version="12.8")

    # allowed: batch size 1 on the DLC, any batching on the platform's image (gpu_serve)
    endpoint("DlcOne", _inference_image, batching=Batching(max_batch_size=1, env=TORCHSERVE_BATCHING_ENV))
    endpoint("OwnBatches", own, batching=Batching(max_batch_size=64))
    # refused: TorchServe's variable above 1 whatever the image (only the DLC's toolkit reads it) ...
    with pytest.raises(ValidationError, match=r"^Own/Ep: environment SAGEMAKER_TS_BATCH_SIZE: max_batch_size=4"):
        endpoint("Own", own, batching=Batching(max_batch_size=4, env=TORCHSERVE_BATCHING_ENV))
    # ... and batching on a DLC through gpu_serve's variables, which TorchServe would silently ignore
    with pytest.raises(ValidationError, match=r"^Dlc/Ep: batching.max_batch_size=2 is unsafe"):
        endpoint("Dlc", _inference_image, batching=Batching(max_batch_size=2))


def test_batching_env_names_match_the_runtimes() -> None:
    from gpu_serve.config import ENV_VARS

    assert {GPU_SERVE_BATCHING_ENV.max_batch_size, GPU_SERVE_BATCHING_ENV.max_batch_delay_ms} <= set(ENV_VARS)
    assert (TORCHSERVE_BATCHING_ENV.max_batch_size, TORCHSERVE_BATCHING_ENV.max_batch_delay_ms) == (
        "SAGEMAKER_TS_BATCH_SIZE",
        "SAGEMAKER_TS_MAX_BATCH_DELAY",
    )


# --------------------------------------------------------------------------------------------------
# The inference stack: GitOps promotion and the runtime choice (one small app)
# --------------------------------------------------------------------------------------------------


class StackApp:
    """Network, data and images stacks plus three inference stacks that differ in one thing each."""

    def __init__(self) -> None:
        from aws_cdk import aws_ecr as ecr

        from stacks.config import EndpointBatchingConfig, load_config
        from stacks.data_stack import DataStack
        from stacks.images_stack import ImagesStack
        from stacks.inference_stack import InferenceStack
        from stacks.network_stack import NetworkStack

        config = load_config("dev")
        endpoint = config.inference.endpoints["classifier"]
        promoted = config.model_copy(
            update={
                "inference": config.inference.model_copy(
                    update={
                        "endpoints": {
                            "classifier": endpoint.model_copy(
                                update={"model_data": "models/classifier/v2/model.tar.gz"}
                            )
                        }
                    }
                )
            }
        )
        app = cdk.App(context=CONTEXT, analytics_reporting=False)
        common: dict[str, Any] = {
            "config": config,
            "env": cdk.Environment(account=config.account, region=config.region),
        }
        network = NetworkStack(app, "Network", **common)
        data = DataStack(app, "Data", **common)
        images = ImagesStack(app, "Images", **common)
        deps: dict[str, Any] = {"network": network.network, "storage": data.storage}
        self.before = InferenceStack(app, "Before", image=images.inference_image, **deps, **common)
        self.after = InferenceStack(
            app, "After", image=images.inference_image, **deps, **{**common, "config": promoted}
        )
        repo = ecr.Repository.from_repository_name(images, "Own", "gpu-inference")
        own = GpuImage.from_ecr_repository(repo, "v7", usage="inference", cuda_version="12.8")
        batched = config.inference.model_copy(
            update={
                "endpoints": {
                    "classifier": endpoint.model_copy(
                        update={"batching": EndpointBatchingConfig(max_batch_size=16, max_batch_delay_ms=5)}
                    )
                }
            }
        )
        own_config = config.model_copy(update={"inference": batched})
        self.own_image = InferenceStack(app, "OwnImage", image=own, **deps, **{**common, "config": own_config})
        self.templates = {
            name: assertions.Template.from_stack(stack).to_json()
            for name, stack in (("before", self.before), ("after", self.after), ("own", self.own_image))
        }

    def of_type(self, name: str, type_: str) -> dict[str, Any]:
        return {k: v for k, v in self.templates[name]["Resources"].items() if v["Type"] == type_}


@pytest.fixture(scope="module")
def stack_app() -> StackApp:
    return StackApp()


def test_model_uri_change_replaces_model_and_config_but_updates_endpoint(stack_app: StackApp) -> None:
    """GitOps promotion: only the model URI changes in config -> blue/green update, not replacement."""
    sm = "AWS::SageMaker::"
    (b_model_id, b_model), (a_model_id, a_model) = (
        next(iter(stack_app.of_type(name, sm + "Model").items())) for name in ("before", "after")
    )
    assert b_model_id != a_model_id  # a new, immutable model (CloudFormation creates it, then deletes the old)
    assert HASHED_ID.match(b_model_id) and HASHED_ID.match(a_model_id)
    assert json.dumps(b_model["Properties"]["PrimaryContainer"]["ModelDataUrl"]).endswith(
        '/classifier/v1/model.tar.gz"]]}'
    )
    assert json.dumps(a_model["Properties"]["PrimaryContainer"]["ModelDataUrl"]).endswith(
        '/classifier/v2/model.tar.gz"]]}'
    )

    (b_cfg_id, b_cfg), (a_cfg_id, a_cfg) = (
        next(iter(stack_app.of_type(name, sm + "EndpointConfig").items())) for name in ("before", "after")
    )
    assert b_cfg_id != a_cfg_id  # a new, immutable endpoint config
    assert a_cfg["Properties"]["ProductionVariants"][0]["ModelName"] == {"Fn::GetAtt": [a_model_id, "ModelName"]}
    b_variant, a_variant = b_cfg["Properties"]["ProductionVariants"][0], a_cfg["Properties"]["ProductionVariants"][0]
    assert {k: v for k, v in b_variant.items() if k != "ModelName"} == {
        k: v for k, v in a_variant.items() if k != "ModelName"
    }

    before_eps, after_eps = stack_app.of_type("before", sm + "Endpoint"), stack_app.of_type("after", sm + "Endpoint")
    assert set(before_eps) == set(after_eps) and len(before_eps) == 1  # same logical id: updated, not replaced
    (ep_id,) = before_eps
    b_ep, a_ep = before_eps[ep_id]["Properties"], after_eps[ep_id]["Properties"]
    assert b_ep["EndpointName"] == a_ep["EndpointName"] == "gpu-dev-classifier"  # the create-only name is unchanged
    assert b_ep["EndpointConfigName"] == {"Fn::GetAtt": [b_cfg_id, "EndpointConfigName"]}
    assert a_ep["EndpointConfigName"] == {"Fn::GetAtt": [a_cfg_id, "EndpointConfigName"]}
    # the only change of the endpoint is the config it points to: SageMaker runs the blue/green deployment
    assert {k: v for k, v in b_ep.items() if k != "EndpointConfigName"} == {
        k: v for k, v in a_ep.items() if k != "EndpointConfigName"
    }
    assert "BlueGreenUpdatePolicy" in a_ep["DeploymentConfig"]
    # nothing else changes, except that the role may now read the new artifact (exactly that object)
    before_rest = {
        k: v for k, v in stack_app.templates["before"]["Resources"].items() if k not in (b_model_id, b_cfg_id, ep_id)
    }
    after_rest = {
        k: v for k, v in stack_app.templates["after"]["Resources"].items() if k not in (a_model_id, a_cfg_id, ep_id)
    }
    before_text = json.dumps(before_rest, sort_keys=True).replace("(Before)", "(After)")  # key descriptions
    after_text = json.dumps(after_rest, sort_keys=True)
    assert before_text != after_text and "/models/classifier/v2/model.tar.gz" in after_text
    assert before_text.replace("classifier/v1/", "classifier/v2/").replace(b_model_id, a_model_id) == after_text


def test_dlc_image_gets_no_batching_and_no_log_filters(stack_app: StackApp) -> None:
    # dev serves the stock DLC with batching: null (TorchServe's own batch size 1): batching is refused there
    (model,) = stack_app.of_type("before", "AWS::SageMaker::Model").values()
    assert stack_app.before.config.inference.endpoints["classifier"].batching is None
    assert "Environment" not in model["Properties"]["PrimaryContainer"]
    assert stack_app.before.runtime == "torchserve"
    assert not stack_app.of_type("before", "AWS::Logs::MetricFilter")


def test_platform_image_gets_gpu_serve_batching_and_batch_size_metric(stack_app: StackApp) -> None:
    (model,) = stack_app.of_type("own", "AWS::SageMaker::Model").values()
    assert model["Properties"]["PrimaryContainer"]["Environment"] == {
        "GPU_SERVE_MAX_BATCH_SIZE": "16",
        "GPU_SERVE_MAX_BATCH_DELAY_MS": "5",
    }
    filters = {
        v["Properties"]["MetricTransformations"][0]["MetricName"]
        for v in stack_app.of_type("own", "AWS::Logs::MetricFilter").values()
    }
    assert filters == {"BatchSize", "QueueLatency", "InvocationsThrottled"}


def test_stack_uses_network_and_data_stacks(stack_app: StackApp) -> None:
    template = stack_app.templates["before"]
    (model,) = (v for v in template["Resources"].values() if v["Type"] == "AWS::SageMaker::Model")
    vpc = model["Properties"]["VpcConfig"]
    assert all("Fn::ImportValue" in s and "Endpoints" in s["Fn::ImportValue"] for s in vpc["Subnets"])
    assert "EndpointSecurityGroup" in vpc["SecurityGroupIds"][0]["Fn::ImportValue"]
    (config,) = (v for v in template["Resources"].values() if v["Type"] == "AWS::SageMaker::EndpointConfig")
    assert "DataKey" in config["Properties"]["KmsKeyId"]["Fn::ImportValue"]
    assert set(template["Outputs"]) >= {"AlarmTopicArn", "ClassifierEndpointName", "ClassifierModelName"}


# --------------------------------------------------------------------------------------------------
# The deployed environments (session fixture: dev and prod with nag on)
# --------------------------------------------------------------------------------------------------


def _resources(template: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [v["Properties"] for v in template["Resources"].values() if v["Type"] == type_]


def test_dev_one_g5_real_time_variant_with_data_capture(synth: Callable[[str], Any]) -> None:
    template = synth("dev").template("inference")
    (config,) = _resources(template, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["ProductionVariants"]
    assert variant["InstanceType"].startswith("ml.g5.") and variant["InitialInstanceCount"] == 1
    assert "AsyncInferenceConfig" not in config
    assert config["DataCaptureConfig"]["EnableCapture"] is True
    (endpoint,) = _resources(template, "AWS::SageMaker::Endpoint")
    assert endpoint["EndpointName"] == "gpu-dev-classifier"


def test_prod_canary_rollback_gpu_autoscaling_and_async(synth: Callable[[str], Any]) -> None:
    result = synth("prod")
    template = result.template("inference")
    endpoints = {e["EndpointName"]: e for e in _resources(template, "AWS::SageMaker::Endpoint")}
    assert set(endpoints) == {"gpu-prod-classifier", "gpu-prod-classifier-async"}
    realtime = endpoints["gpu-prod-classifier"]["DeploymentConfig"]
    assert realtime["BlueGreenUpdatePolicy"]["TrafficRoutingConfiguration"]["Type"] == "CANARY"
    assert len(realtime["AutoRollbackConfiguration"]["Alarms"]) == 3
    configs = {"AsyncInferenceConfig" in c: c for c in _resources(template, "AWS::SageMaker::EndpointConfig")}
    assert configs[False]["ProductionVariants"][0]["InitialInstanceCount"] == 2
    assert configs[True]["AsyncInferenceConfig"]["OutputConfig"]["NotificationConfig"]
    # the image built at deploy time is read from the images stack's SSM parameter, not imported
    for model in _resources(template, "AWS::SageMaker::Model"):
        (param,) = model["PrimaryContainer"]["Image"].values()
        assert template["Parameters"][param] == {
            "Type": "AWS::SSM::Parameter::Value<String>",
            "Default": "/gpu-prod/images/inference",
        }
    names = {p["Name"] for p in _resources(result.template("images"), "AWS::SSM::Parameter")}
    assert "/gpu-prod/images/inference" in names
    metrics = {
        p["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]["MetricName"]
        for p in _resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
        if "TargetTrackingScalingPolicyConfiguration" in p
    }
    assert metrics == {"GPUUtilization", "ApproximateBacklogSizePerInstance"}
    targets = {t["ResourceId"]: t for t in _resources(template, "AWS::ApplicationAutoScaling::ScalableTarget")}
    assert targets["endpoint/gpu-prod-classifier-async/variant/AllTraffic"]["MinCapacity"] == 0
    # two instances in production: no single-instance warning
    messages = assertions.Annotations.from_stack(result.platform.inference).find_warning(
        "*", assertions.Match.string_like_regexp("Availability Zone outage")
    )
    assert messages == []


# --------------------------------------------------------------------------------------------------
# Config rules (no CDK)
# --------------------------------------------------------------------------------------------------

BASE = """
env_name: dev
region: us-east-1
availability_zones: [us-east-1a, us-east-1b]
inference:
  enabled: true
  endpoints:
    classifier:
{body}
"""


def _parse(body: str) -> Any:
    from stacks.config import parse_config

    text = BASE.format(body="\n".join("      " + line for line in body.strip().splitlines()))
    return parse_config(text, Path("config/dev.yaml"), "dev")


def test_config_defaults() -> None:
    ep = _parse("model_data: models/a/v1/model.tar.gz").inference.endpoints["classifier"]
    assert (ep.instance_type, ep.instance_count, ep.cpu_variant, ep.network_isolation) == (
        "ml.g5.xlarge",
        1,
        False,
        True,
    )
    assert (ep.model_download_timeout_seconds, ep.startup_health_check_timeout_seconds) == (1200, 600)
    assert ep.batching is None  # the image's own batching (gpu_serve: 32 rows, 5 ms; the DLC: none)
    assert ep.data_capture is None and ep.async_inference is None and ep.autoscaling is None and ep.off_hours is None
    assert (ep.deployment.traffic, ep.deployment.wait_minutes, ep.deployment.auto_rollback) == ("all_at_once", 5, True)
    assert (ep.alarms.max_5xx_percent, ep.alarms.max_model_latency_p99_ms, ep.alarms.max_gpu_memory_percent) == (
        1,
        1000,
        90,
    )
    canary = _parse("model_data: m/model.tar.gz\ninstance_count: 2\ndeployment: {traffic: canary}")
    assert canary.inference.endpoints["classifier"].deployment.step == 10
    linear = _parse("model_data: m/model.tar.gz\ninstance_count: 2\ndeployment: {traffic: linear}")
    assert linear.inference.endpoints["classifier"].deployment.step == 25
    from stacks.config import InferenceConfig

    assert InferenceConfig().enabled is False  # existing config files without the section keep working


def test_config_data_capture_json_content_types_reach_the_capture() -> None:
    """The config builds the library's DataCapture: its json_content_types become CaptureContentTypeHeader."""
    default = _parse("model_data: m/model.tar.gz\ndata_capture: {}").inference.endpoints["classifier"]
    assert default.data_capture.capture().json_content_types == ("application/json",)
    body = "model_data: m/model.tar.gz\ndata_capture: {json_content_types: [application/jsonlines, application/json]}"
    capture = _parse(body).inference.endpoints["classifier"].data_capture.capture()
    assert capture.json_content_types == ("application/jsonlines", "application/json")


M = "model_data: m/model.tar.gz\n"


def _scale(metric: str, target: float, low: int, high: int, extra: str = "") -> str:
    return f"autoscaling: {{metric: {metric}, target: {target}, min_capacity: {low}, max_capacity: {high}{extra}}}"


CONFIG_RULES: list[tuple[str, str, str]] = [
    ("model key", "model_data: models/a/model.pt", r"model_data: 'models/a/model.pt'.*ending in .tar.gz"),
    ("model uri", "model_data: s3://Bad_Bucket/model.tar.gz", r"s3://<bucket>/<key>.tar.gz"),
    ("model ssm", "model_data: 'ssm:bad name'", r"ssm:<parameter name>"),
    ("non-gpu type", M + "instance_type: ml.m5.xlarge", r"no NVIDIA GPU"),
    ("cpu variant type", M + "instance_type: ml.t3.medium\ncpu_variant: true", r"not a SageMaker hosting type"),
    ("volume on nvme", M + "volume_size_gb: 100", r"250 GB of local NVMe"),
    ("volume range", M + "instance_type: ml.p3.2xlarge\nvolume_size_gb: 600", r"1..512"),
    ("count", M + "instance_count: 0", r"instance_count: 0: allowed: 1 or more"),
    ("timeout", M + "model_download_timeout_seconds: 10", r"60..3600"),
    ("env key", M + "environment: {1X: a}", r"environment keys=\['1X'\] is not allowed; allowed: names"),
    (
        "batch size",
        M + "batching: {max_batch_size: 0}",
        r"batching: max_batch_size=0 is not allowed; allowed: .*\[1, 4096\]",
    ),
    (
        "batching on the dlc",  # images.inference defaults to the stock PyTorch DLC
        M + "batching: {max_batch_size: 16}",
        r"inference.endpoints.classifier.batching.max_batch_size=16 is unsafe on the AWS PyTorch inference DLC: "
        r".*allowed: 1 \(or no batching\)\. To batch, serve with the platform's inference image .* "
        r"\(images.inference.kind is 'dlc'\)",
    ),
    (
        "capture pct",
        M + "data_capture: {sampling_percentage: 150}",
        r"sampling_percentage=150 is not allowed; allowed: an integer in \[0, 100\]",
    ),
    (
        "capture none",
        M + "data_capture: {capture_input: false, capture_output: false}",
        r"capture_input/capture_output=\(False, False\) is not allowed; allowed: at least one of them True",
    ),
    (
        "async concurrency",
        M + "async_inference: {max_concurrent_invocations_per_instance: 0}",
        r"max_concurrent_invocations_per_instance=0 is not allowed; allowed: an integer in \[1, 1000\]",
    ),
    (
        "async response",
        M + "async_inference: {notifications: false, include_response_in_notifications: true}",
        r"needs notifications",
    ),
    ("canary size", M + "instance_count: 2\ndeployment: {traffic: canary, step_percent: 60}", r"1..50"),
    ("linear step", M + "instance_count: 2\ndeployment: {traffic: linear, step_percent: 5}", r"10..50"),
    ("step all at once", M + "deployment: {step_percent: 5}", r"not used by traffic 'all_at_once'"),
    (
        "canary one instance",
        M + "deployment: {traffic: canary}",
        r"instance_count with CANARY traffic=1 is not allowed; allowed: 2 or more instances: .* "
        r"use traffic: all_at_once for a single instance",
    ),
    ("bake", M + "deployment: {wait_minutes: 90}", r"0..60 minutes"),
    ("deploy timeout", M + "deployment: {max_execution_timeout_minutes: 5}", r"10..480"),
    ("periods", M + "alarms: {evaluation_periods: 61}", r"alarms\.evaluation_periods: 61: allowed: 1\.\.60"),
    (
        "5xx",
        M + "alarms: {max_5xx_percent: 0}",
        r"max_5xx_percent=0.0 is not allowed; allowed: a percentage in \(0, 100\]",
    ),
    (
        "latency",
        M + "alarms: {max_model_latency_p99_ms: -1}",
        r"max_model_latency_p99_ms \(ms\)=-1.0 is not allowed; allowed: > 0 ms",
    ),
    (
        "datapoints",
        M + "alarms: {evaluation_periods: 1, datapoints_to_alarm: 2}",
        r"datapoints_to_alarm=2 is not allowed; allowed: 1 to evaluation_periods \(1\)",
    ),
    (
        "min > max",
        M + _scale("invocations_per_instance", 5, 3, 2),
        r"autoscaling.min_capacity=3 is not allowed; allowed: at most max_capacity \(2\)",
    ),
    ("zero real-time", M + _scale("invocations_per_instance", 5, 0, 2), r"only for async"),
    (
        "zero without backlog",
        M + "async_inference: {}\n" + _scale("gpu_utilization", 50, 0, 2),
        r"autoscaling.metric='gpu_utilization' is not allowed; allowed: .*only a backlog can wake",
    ),
    (
        "backlog real-time",
        M + _scale("backlog_per_instance", 5, 1, 2),
        r"metric='backlog_per_instance' is not allowed; allowed: .* for a real-time endpoint",
    ),
    (
        "invocations async",
        M + "async_inference: {}\n" + _scale("invocations_per_instance", 5, 1, 2),
        r"metric='invocations_per_instance' is not allowed; allowed: .* for an asynchronous endpoint",
    ),
    (
        "gpu cpu variant",
        M + "instance_type: ml.m5.xlarge\ncpu_variant: true\n" + _scale("gpu_utilization", 50, 1, 2),
        r"CPU variant",
    ),
    (
        "gpu target",
        M + _scale("gpu_utilization", 150, 1, 2),
        r"autoscaling.target \(percent per GPU\)=150.0 is not allowed; allowed: a percentage in \(0, 100\]",
    ),
    (
        "count outside",
        M + _scale("gpu_utilization", 50, 2, 3),
        r"instance_count=1 is not allowed; allowed: within the autoscaling range \[2, 3\]",
    ),
    ("cooldown", M + _scale("gpu_utilization", 50, 1, 3, ", scale_in_cooldown_seconds: -1"), r"0..3600"),
    ("zone", M + "off_hours: {time_zone: Mars/Base}", r"IANA time zone"),
    (
        "hour",
        M + "off_hours: {start_hour: 25}",
        r"off_hours.start_hour=25 is not allowed; allowed: an hour in \[0, 23\]",
    ),
    (
        "same hours",
        M + "off_hours: {start_hour: 8, end_hour: 8}",
        r"end_hour=8 .*allowed: an hour other than start_hour",
    ),
    ("days", M + "off_hours: {week_days: weekdays}", r"day-of-week"),
    (
        "off capacity",
        M + "off_hours: {capacity: 0}",
        r"off_hours.capacity=0 is not allowed; allowed: an integer in \[1, 1\]",
    ),
    ("typo key", M + "instance_typ: ml.g5.xlarge", r"unknown key"),
]


@pytest.mark.parametrize(("body", "message"), [r[1:] for r in CONFIG_RULES], ids=[r[0] for r in CONFIG_RULES])
def test_config_rules(body: str, message: str) -> None:
    from stacks.config import ConfigError

    with pytest.raises(ConfigError, match=message) as info:
        _parse(body)
    assert "config/dev.yaml" in str(info.value) and "inference.endpoints.classifier" in str(info.value)


GPU_SERVE_IMAGE = "images:\n  inference: {kind: codebuild, cuda_version: '12.4'}\n"


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (
            "{GPU_SERVE_MODEL_PROCESSES: many}",
            r"inference.endpoints.classifier.environment: GPU_SERVE_MODEL_PROCESSES='many' is not allowed; "
            r"allowed: auto or an integer from 0 to 64 \(images.inference.kind is 'codebuild': the image runs "
            r"gpu_serve, which would refuse to start\)",
        ),
        ("{GPU_SERVE_DEVICE: tpu}", r"GPU_SERVE_DEVICE='tpu' is not allowed; allowed: auto, cpu, cuda, cuda:N"),
        ("{GPU_SERVE_NUM_THREADS: '0'}", r"GPU_SERVE_NUM_THREADS"),
        (
            "{GPU_SERVE_MODEL_PROCESS: '2'}",  # a typo: the server would ignore it and start one process per GPU
            r"\['GPU_SERVE_MODEL_PROCESS'\] are not gpu_serve variables; allowed: .*GPU_SERVE_MODEL_PROCESSES",
        ),
    ],
)
def test_config_refuses_a_gpu_serve_variable_the_server_would_refuse(environment: str, message: str) -> None:
    from stacks.config import ConfigError, parse_config

    text = GPU_SERVE_IMAGE + BASE.format(body=f"      model_data: m/model.tar.gz\n      environment: {environment}")
    with pytest.raises(ConfigError, match=message):
        parse_config(text, Path("config/dev.yaml"), "dev")


def test_config_passes_gpu_serve_variables_the_server_accepts_and_leaves_other_images_alone() -> None:
    from stacks.config import parse_config

    good = "{GPU_SERVE_MODEL_PROCESSES: auto, GPU_SERVE_DEVICE: 'cuda:0', MY_APP_SETTING: x}"
    text = GPU_SERVE_IMAGE + BASE.format(body=f"      model_data: m/model.tar.gz\n      environment: {good}")
    env = parse_config(text, Path("config/dev.yaml"), "dev").inference.endpoints["classifier"].environment
    assert env["GPU_SERVE_MODEL_PROCESSES"] == "auto"
    # the stock DLC does not run gpu_serve: its variables mean nothing there and are not read
    dlc = BASE.format(body="      model_data: m/model.tar.gz\n      environment: {GPU_SERVE_MODEL_PROCESSES: many}")
    assert parse_config(dlc, Path("config/dev.yaml"), "dev").images.inference.kind == "dlc"


def test_config_endpoint_keys_and_enabled() -> None:
    from stacks.config import ConfigError, parse_config

    bad_key = BASE.replace("classifier:", "Classifier_1:").format(body="      model_data: m/model.tar.gz")
    with pytest.raises(ConfigError, match=r"endpoint keys \['Classifier_1'\] are not allowed"):
        parse_config(bad_key, Path("config/dev.yaml"), "dev")
    empty = "env_name: dev\nregion: us-east-1\navailability_zones: [us-east-1a]\ninference: {enabled: true}\n"
    with pytest.raises(ConfigError, match=r"needs at least one entry under endpoints"):
        parse_config(empty, Path("config/dev.yaml"), "dev")
    emails = empty.replace("{enabled: true}", "{alarm_emails: [not-an-email]}")
    with pytest.raises(ConfigError, match=r"not e-mail addresses"):
        parse_config(emails, Path("config/dev.yaml"), "dev")
