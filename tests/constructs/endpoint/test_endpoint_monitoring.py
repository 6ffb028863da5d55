"""GpuEndpoint's monitoring and scaling: alarms, dashboards, log group and metric filters, autoscaling and
the off-hours schedule (on the shared four-endpoint stack).
"""

from __future__ import annotations

import json

import pytest
from endpoint_helpers import (
    Built,
    built_endpoints,
)


@pytest.fixture(scope="module")
def built() -> Built:
    return built_endpoints()


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


def test_cpu_variant_has_no_gpu_alarm(built: Built) -> None:
    alarms = built.resources("AWS::CloudWatch::Alarm", "Cpu")
    names = {v["Properties"].get("MetricName") for v in alarms.values()}
    assert "GPUMemoryUtilization" not in names and "ModelLatency" in names
    assert built.cpu.gpu_count == 0


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
