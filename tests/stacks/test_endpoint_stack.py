"""The inference stack: GitOps promotion and the runtime choice (one small app with three inference stacks,
synthesized once per module), and the deployed dev and prod environments (the session ``synth`` fixture).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from endpoint_helpers import (
    CONTEXT,
    HASHED_ID,
)

from gpu_constructs.images import GpuImage


class StackApp:
    """Network, data and images stacks plus three inference stacks that differ in one thing each."""

    def __init__(self) -> None:
        from aws_cdk import aws_ecr as ecr

        from stacks.config import EndpointBatchingConfig, load_config
        from stacks.context import StackContext
        from stacks.data_stack import DataStack
        from stacks.images_stack import ImagesStack
        from stacks.inference_stack import InferenceStack
        from stacks.network_stack import NetworkStack, interface_endpoints

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
            "context": StackContext.from_config(config),
            "props": cdk.StackProps(env=cdk.Environment(account=config.account, region=config.region)),
        }
        network = NetworkStack(
            app, "Network", network=config.network, interface_endpoints=interface_endpoints(config), **common
        )
        data = DataStack(app, "Data", data=config.data, **common)
        images = ImagesStack(app, "Images", images=config.images, **common)
        deps: dict[str, Any] = {"network": network.network, "storage": data.storage}
        self.before = InferenceStack(
            app, "Before", image=images.inference_image, inference=config.inference, **deps, **common
        )
        self.after = InferenceStack(
            app, "After", image=images.inference_image, inference=promoted.inference, **deps, **common
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
        self.own_image = InferenceStack(app, "OwnImage", image=own, inference=own_config.inference, **deps, **common)
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
    assert stack_app.before.inference.endpoints["classifier"].batching is None
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
    # instance pools (config: instance_pools) replace the InstanceType: ml.g5.xlarge first, then ml.g6.xlarge
    assert "InstanceType" not in variant and variant["InitialInstanceCount"] == 1
    assert variant["InstancePools"] == [
        {"InstanceType": "ml.g5.xlarge", "Priority": 1},
        {"InstanceType": "ml.g6.xlarge", "Priority": 2},
    ]
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
    pools = configs[False]["ProductionVariants"][0]["InstancePools"]
    assert [(p["InstanceType"], p["Priority"]) for p in pools] == [
        ("ml.g5.2xlarge", 1),
        ("ml.g6.2xlarge", 2),
        ("ml.g6e.2xlarge", 3),
    ]
    assert configs[True]["ProductionVariants"][0]["InstanceType"] == "ml.g5.xlarge"  # no pools: one type
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
