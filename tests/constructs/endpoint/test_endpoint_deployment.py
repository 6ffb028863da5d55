"""GpuEndpoint's endpoint config and endpoint: variants, data capture, async inference, blue/green
deployment, the defaults and the single-instance warning (on the shared four-endpoint stack).
"""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk import assertions
from endpoint_helpers import (
    Built,
    as_list,
    built_endpoints,
)

from gpu_constructs.endpoint import (
    SINGLE_INSTANCE_WARNING_ID,
)


@pytest.fixture(scope="module")
def built() -> Built:
    return built_endpoints()


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
    published = [r for s in statements if s["Action"] == "sns:Publish" for r in as_list(s["Resource"])]
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


def test_single_instance_production_endpoint_warns(built: Built) -> None:
    built.annotations.has_warning("/Test/Defaults", assertions.Match.string_like_regexp("Availability Zone outage"))
    warnings = built.annotations.find_warning("*", assertions.Match.string_like_regexp("Availability Zone outage"))
    assert [w.id for w in warnings] == ["/Test/Defaults"]  # not the two-instance production endpoint
    assert SINGLE_INSTANCE_WARNING_ID in json.dumps([w.entry.data for w in warnings])
