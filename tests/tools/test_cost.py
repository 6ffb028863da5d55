"""The cost estimate and cost diff of a cloud assembly, on small hand-written templates with exact dollar values
(prices from gpu_constructs.catalog.pricing, 730 hours a month)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from platform_tools import summary
from platform_tools.cost import CostError, diff, diff_json, diff_lines, estimate_assembly, estimate_lines

ENV = "aws://123456789012/us-east-1"


def _endpoint(name: str, config: str, variants: list[dict[str, Any]], *, asynchronous: bool = False) -> dict[str, Any]:
    props: dict[str, Any] = {"ProductionVariants": variants}
    if asynchronous:
        props["AsyncInferenceConfig"] = {"OutputConfig": {"S3OutputPath": "s3://b/out"}}
    return {
        f"{config}": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": props},
        f"{name.title().replace('-', '')}1A2B3C4D": {
            "Type": "AWS::SageMaker::Endpoint",
            "Properties": {"EndpointName": name, "EndpointConfigName": {"Fn::GetAtt": [config, "EndpointConfigName"]}},
        },
    }


def _scalable(name: str, minimum: int) -> dict[str, Any]:
    return {
        "Type": "AWS::ApplicationAutoScaling::ScalableTarget",
        "Properties": {
            "MinCapacity": minimum,
            "MaxCapacity": 6,
            "ResourceId": f"endpoint/{name}/variant/AllTraffic",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "ServiceNamespace": "sagemaker",
        },
    }


def _state_machine() -> dict[str, Any]:
    definition = {
        "StartAt": "Defaults",
        "States": {
            "Defaults": {
                "Type": "Pass",
                "Parameters": {"defaults": {"instance_type": "ml.g5.xlarge", "job_name.$": "$.run_id"}},
                "Next": "Train",
            },
            "Train": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sagemaker:createTrainingJob.sync",
                "Parameters": {
                    "ResourceConfig": {
                        "InstanceType.$": "$.args.instance_type",
                        "InstanceCount": 2,
                        "VolumeSizeInGB": 1,
                    }
                },
                "End": True,
            },
            "OnList": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:sagemaker:createTrainingJob",
                "Parameters": {
                    "ResourceConfig": {
                        "InstancePreferences": [
                            {"InstanceType": "ml.g5.2xlarge", "InstanceCount": 2},
                            {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 1},
                        ],
                        "VolumeSizeInGB": 1,
                    }
                },
                "End": True,
            },
        },
    }
    text = json.dumps(definition)
    head, _, tail = text.partition('"$.run_id"')
    return {
        "Type": "AWS::StepFunctions::StateMachine",
        "Properties": {
            "StateMachineName": "gpu-test-train",
            "DefinitionString": {"Fn::Join": ["", [head + '"', {"Ref": "AWS::AccountId"}, '"' + tail]]},
        },
    }


def _templates() -> dict[str, tuple[str, dict[str, Any]]]:
    inference = {
        **_endpoint(
            "gpu-test-classifier",
            "ClassifierConfigABCDEF01",
            [{"VariantName": "AllTraffic", "InstanceType": "ml.g5.2xlarge", "InitialInstanceCount": 1}],
        ),
        "ClassifierScalableTarget1234ABCD": _scalable("gpu-test-classifier", 2),
        **_endpoint(
            "gpu-test-pools",
            "PoolsConfigABCDEF02",
            [
                {
                    "VariantName": "AllTraffic",
                    "InitialInstanceCount": 1,
                    "InstancePools": [
                        {"InstanceType": "ml.g6e.xlarge", "Priority": 2},
                        {"InstanceType": "ml.g5.xlarge", "Priority": 1},
                    ],
                }
            ],
        ),
        **_endpoint(
            "gpu-test-async",
            "AsyncConfigABCDEF03",
            [{"VariantName": "AllTraffic", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}],
            asynchronous=True,
        ),
        "AsyncScalableTarget1234ABCD": _scalable("gpu-test-async", 0),
        "UnusedConfigABCDEF04": {
            "Type": "AWS::SageMaker::EndpointConfig",
            "Properties": {"ProductionVariants": [{"InstanceType": "ml.p4d.24xlarge", "InitialInstanceCount": 4}]},
        },
    }
    network = {
        "NatA1111AAAA": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
        "NatB2222BBBB": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
        **{
            f"Endpoint{i}ABCD{i}234": {
                "Type": "AWS::EC2::VPCEndpoint",
                "Properties": {"VpcEndpointType": "Interface", "SubnetIds": [{"Ref": "S1"}, {"Ref": "S2"}]},
            }
            for i in range(3)
        },
        "S3Endpoint9999AAAA": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Gateway"}},
    }
    storage = {
        "Lustre12345678": {
            "Type": "AWS::FSx::FileSystem",
            "Properties": {
                "FileSystemType": "LUSTRE",
                "StorageCapacity": 2400,
                "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 125},
            },
        }
    }
    fleets = {
        "Explore12345678": {
            "Type": "AWS::SageMaker::NotebookInstance",
            "Properties": {"NotebookInstanceName": "gpu-test-explore", "InstanceType": "ml.g5.xlarge"},
        },
        "WorkbenchLt1234ABCD": {
            "Type": "AWS::EC2::LaunchTemplate",
            "Properties": {"LaunchTemplateData": {"InstanceType": "g5.xlarge"}},
        },
        "WorkbenchAsg1234ABCD": {
            "Type": "AWS::AutoScaling::AutoScalingGroup",
            "Properties": {
                "AutoScalingGroupName": "gpu-test-workbench",
                "MinSize": "1",
                "MaxSize": "2",
                "MixedInstancesPolicy": {
                    "InstancesDistribution": {"OnDemandBaseCapacity": 0, "OnDemandPercentageAboveBaseCapacity": 0},
                    "LaunchTemplate": {
                        "LaunchTemplateSpecification": {"LaunchTemplateId": {"Ref": "WorkbenchLt1234ABCD"}},
                        "Overrides": [{"InstanceType": "g5.2xlarge"}, {"InstanceType": "g6.xlarge"}],
                    },
                },
            },
        },
        "BigLt1234ABCD": {
            "Type": "AWS::EC2::LaunchTemplate",
            "Properties": {"LaunchTemplateData": {"InstanceType": "p5.48xlarge"}},
        },
        "BigAsg1234ABCD": {
            "Type": "AWS::AutoScaling::AutoScalingGroup",
            "Properties": {
                "MinSize": "0",
                "MaxSize": "1",
                "LaunchTemplate": {"LaunchTemplateId": {"Ref": "BigLt1234ABCD"}},
            },
        },
    }
    return {
        "gpu-test-network": (ENV, {"Resources": network}),
        "gpu-test-storage": (ENV, {"Resources": storage}),
        "gpu-test-inference": (ENV, {"Resources": inference}),
        "gpu-test-fleets": (ENV, {"Resources": fleets}),
        "gpu-test-training": (ENV, {"Resources": {"Pipeline1234ABCD": _state_machine()}}),
        "gpu-test-data": (ENV, {"Resources": {"Bucket1234ABCD": {"Type": "AWS::S3::Bucket", "Properties": {}}}}),
    }


def write_assembly(directory: Path, templates: dict[str, tuple[str, dict[str, Any]]]) -> Path:
    """A minimal cloud assembly: manifest.json with one stack artifact per template."""
    directory.mkdir(parents=True, exist_ok=True)
    artifacts = {}
    for name, (environment, template) in templates.items():
        (directory / f"{name}.template.json").write_text(json.dumps(template))
        artifacts[name] = {
            "type": "aws:cloudformation:stack",
            "environment": environment,
            "properties": {"templateFile": f"{name}.template.json", "stackName": name},
        }
    (directory / "manifest.json").write_text(json.dumps({"version": "48.0.0", "artifacts": artifacts}))
    return directory


@pytest.fixture()
def assembly(tmp_path: Path) -> Path:
    return write_assembly(tmp_path / "base", _templates())


def test_always_on_items_per_stack(assembly: Path) -> None:
    estimate = estimate_assembly(assembly)
    found = {(i.stack, i.kind, i.name): (i.instance_type, i.quantity, i.monthly_usd) for i in estimate.items}
    assert found == {
        # 2 NAT gateways x $0.045 x 730; 3 interface endpoints x 2 AZs x $0.01 x 730; the gateway endpoint is free
        ("gpu-test-network", "NAT gateways", "NAT"): (None, 2, 65.70),
        ("gpu-test-network", "interface endpoints", "VPC endpoints"): (None, 6, 43.80),
        # 2,400 GiB PERSISTENT_2 at 125 MB/s/TiB x $0.145
        ("gpu-test-storage", "file system", "Lustre"): (None, 2400, 348.00),
        # autoscaling min 2 (initial 1) x ml.g5.2xlarge $1.515 x 730
        ("gpu-test-inference", "endpoint", "gpu-test-classifier"): ("ml.g5.2xlarge", 2, 2211.90),
        # instance pools: the priority-1 pool, ml.g5.xlarge $1.408 x 730
        ("gpu-test-inference", "endpoint", "gpu-test-pools"): ("ml.g5.xlarge", 1, 1027.84),
        # async endpoint scaled to 0
        ("gpu-test-inference", "endpoint", "gpu-test-async"): ("ml.g5.xlarge", 0, 0.00),
        # notebook while running
        ("gpu-test-fleets", "notebook", "gpu-test-explore"): ("ml.g5.xlarge", 1, 1027.84),
        # MinSize 1 x the first override g5.2xlarge $1.212 x 730; MinSize 0 of p5.48xlarge
        ("gpu-test-fleets", "auto scaling group", "gpu-test-workbench"): ("g5.2xlarge", 1, 884.76),
        ("gpu-test-fleets", "auto scaling group", "BigAsg"): ("p5.48xlarge", 0, 0.00),
    }
    assert estimate.stack_total("gpu-test-network") == pytest.approx(109.50)
    assert estimate.stack_total("gpu-test-inference") == pytest.approx(3239.74)
    assert estimate.stack_total("gpu-test-data") == 0
    assert estimate.total == pytest.approx(5609.84)
    assert estimate.hours_per_month == 730


def test_training_setup_first_choice_and_most_expensive_fallback(assembly: Path) -> None:
    (setup,) = estimate_assembly(assembly).training
    assert setup.stack == "gpu-test-training"
    assert setup.name == "gpu-test-train"
    # the preference list first, then the single-type task's default (instance_type of the Defaults state)
    assert setup.choices == (("ml.g5.2xlarge", 2), ("ml.g5.12xlarge", 1), ("ml.g5.xlarge", 2))
    assert setup.hourly_usd == (3.03, 7.09, 2.816)
    assert setup.worst_fallback() == ("ml.g5.12xlarge", 1, 7.09)


def test_summary_lines(assembly: Path) -> None:
    lines = estimate_lines(estimate_assembly(assembly))
    assert lines[0].startswith("cost (on-demand list prices as of ")
    assert "730 hours/month" in lines[0]
    assert "  gpu-test-inference: $3,239.74/month always on (us-east-1)" in lines
    assert "    $2,211.90/month  endpoint gpu-test-classifier ml.g5.2xlarge x2 (autoscaling min 2, initial 1)" in lines
    assert "    $1,027.84/month  notebook gpu-test-explore ml.g5.xlarge x1 (while running)" in lines
    assert (
        "    $884.76/month  auto scaling group gpu-test-workbench g5.2xlarge x1 "
        "(MinSize, on-demand price, spot above the on-demand part)" in lines
    )
    assert "    $0.00/month  auto scaling group BigAsg p5.48xlarge x0 (MinSize, on-demand price)" in lines
    assert "  total: $5,609.84/month always on" in lines
    assert (
        "  training gpu-test-training gpu-test-train: ml.g5.2xlarge x2 $3.03/hour; "
        "most expensive fallback ml.g5.12xlarge x1 $7.09/hour" in lines
    )
    assert not any("gpu-test-data" in line for line in lines)  # a stack with nothing always on is not listed


def test_unknown_region_and_unpriced_types(tmp_path: Path) -> None:
    templates = _templates()
    templates["gpu-test-inference"] = ("aws://123456789012/eu-west-1", templates["gpu-test-inference"][1])
    templates["gpu-test-storage"] = ("aws://unknown-account/unknown-region", templates["gpu-test-storage"][1])
    estimate = estimate_assembly(write_assembly(tmp_path / "x", templates))
    assert [i.monthly_usd for i in estimate.items if i.stack == "gpu-test-inference"] == [None, None, None]
    assert estimate.stack_total("gpu-test-storage") == 348.00  # region-agnostic: priced as us-east-1
    assert estimate.notes == ("gpu-test-storage: region-agnostic stack priced as us-east-1",)
    lines = estimate_lines(estimate)
    assert "  total: $2,370.10/month always on (+ 3 item(s) without a price)" in lines
    assert "    price unknown  endpoint gpu-test-classifier ml.g5.2xlarge x2 (autoscaling min 2, initial 1)" in lines


def test_diff_names_each_change_with_its_dollars(tmp_path: Path, assembly: Path) -> None:
    templates = copy.deepcopy(_templates())
    inference = templates["gpu-test-inference"][1]["Resources"]
    inference["ClassifierScalableTarget1234ABCD"]["Properties"]["MinCapacity"] = 3
    del templates["gpu-test-network"][1]["Resources"]["NatB2222BBBB"]
    templates["gpu-test-fleets"][1]["Resources"]["Explore12345678"]["Properties"]["InstanceType"] = "ml.g5.4xlarge"
    del templates["gpu-test-storage"]
    head = write_assembly(tmp_path / "head", templates)
    base_estimate, head_estimate = estimate_assembly(assembly), estimate_assembly(head)
    lines = diff_lines(base_estimate, head_estimate)
    assert lines == [
        "-$32.85/month: gpu-test-network: NAT gateways NAT 2 NAT gateways -> 1 NAT gateways",
        "-$348.00/month: gpu-test-storage: file system Lustre 2400 GiB FSx for Lustre (PERSISTENT_2, 125 MB/s/TiB) "
        "-> (removed)",
        "+$1,105.95/month: gpu-test-inference: endpoint gpu-test-classifier ml.g5.2xlarge x2 -> x3",
        "+$454.06/month: gpu-test-fleets: notebook gpu-test-explore ml.g5.xlarge x1 -> ml.g5.4xlarge x1",
        "always on: $5,609.84/month -> $6,789.00/month (+$1,179.16/month; on-demand list prices as of "
        f"{head_estimate.prices_as_of}, 730 hours/month)",
    ]
    data = diff_json(base_estimate, head_estimate)
    assert data["delta_monthly_usd"] == 1179.16
    assert [c["monthly_delta_usd"] for c in data["changes"]] == [-32.85, -348.0, 1105.95, 454.06]


def test_diff_of_training_setups_and_no_change(tmp_path: Path, assembly: Path) -> None:
    assert diff_lines(estimate_assembly(assembly), estimate_assembly(assembly))[0] == "no cost change"
    templates = copy.deepcopy(_templates())
    machine = templates["gpu-test-training"][1]["Resources"]["Pipeline1234ABCD"]["Properties"]
    parts = machine["DefinitionString"]["Fn::Join"][1]
    machine["DefinitionString"]["Fn::Join"][1] = [
        p.replace('"ml.g5.2xlarge", "InstanceCount": 2', '"ml.g5.4xlarge", "InstanceCount": 2')
        if isinstance(p, str)
        else p
        for p in parts
    ]
    (change,) = diff(estimate_assembly(assembly), estimate_assembly(write_assembly(tmp_path / "t", templates)))
    # first choice 2 x ml.g5.4xlarge ($2.03) instead of 2 x ml.g5.2xlarge ($1.515): +$1.03/hour
    assert change.describe() == (
        "+$1.03/hour: gpu-test-training: training gpu-test-train ml.g5.2xlarge x2, ml.g5.12xlarge x1, ml.g5.xlarge x2 "
        "-> ml.g5.4xlarge x2, ml.g5.12xlarge x1, ml.g5.xlarge x2"
    )


def test_a_directory_without_an_assembly_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CostError, match=r"has no cloud assembly \(.*manifest.json not found\): run cdk synth first"):
        estimate_assembly(tmp_path)
    write_assembly(tmp_path / "empty", {})
    with pytest.raises(CostError, match="has no stack templates"):
        estimate_assembly(tmp_path / "empty")


def test_make_synth_summary_prints_the_cost(assembly: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (assembly / "policy-validation-report.json").write_text(json.dumps({"pluginReports": []}))
    assert summary.main([str(assembly)]) == 0
    out = capsys.readouterr().out
    assert "  total: $5,609.84/month always on" in out
    assert out.index("6 stacks, ") < out.index("cost (on-demand") < out.index("cdk-nag (")


def test_a_stage_stack_that_is_an_app_stack_is_counted_once(tmp_path: Path) -> None:
    """A pipeline stage deploys the very stacks ``cdk deploy`` would (same name, same environment): one stack."""
    templates = _templates()
    root = write_assembly(tmp_path / "app", {"gpu-test-inference": templates["gpu-test-inference"]})
    write_assembly(root / "assembly-Pipeline-Prod", {"gpu-test-inference": templates["gpu-test-inference"]})
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["artifacts"]["assembly-Pipeline-Prod"] = {
        "type": "cdk:cloud-assembly",
        "properties": {"directoryName": "assembly-Pipeline-Prod", "displayName": "Pipeline/Prod"},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    estimate = estimate_assembly(root)
    assert estimate.stacks == ("gpu-test-inference", "Prod/gpu-test-inference")
    assert estimate.same_as == {"Prod/gpu-test-inference": "gpu-test-inference"}
    assert estimate.total == pytest.approx(3239.74)
    lines = estimate_lines(estimate)
    assert "  Prod/gpu-test-inference: the same stack as gpu-test-inference (counted once)" in lines
    assert "  total: $3,239.74/month always on" in lines


def test_managed_spot_training_says_the_price_is_an_upper_bound(tmp_path: Path) -> None:
    templates = copy.deepcopy(_templates())
    machine = templates["gpu-test-training"][1]["Resources"]["Pipeline1234ABCD"]["Properties"]
    parts = machine["DefinitionString"]["Fn::Join"][1]
    machine["DefinitionString"]["Fn::Join"][1] = [
        p.replace(
            '"Resource": "arn:aws:states:::sagemaker:createTrainingJob.sync", "Parameters": {',
            '"Resource": "arn:aws:states:::sagemaker:createTrainingJob.sync", "Parameters": '
            '{"EnableManagedSpotTraining": true, ',
        )
        if isinstance(p, str)
        else p
        for p in parts
    ]
    estimate = estimate_assembly(write_assembly(tmp_path / "spot", templates))
    (setup,) = estimate.training
    assert setup.spot
    assert any(
        line.endswith("$7.09/hour (managed spot: on-demand price shown, spot costs less)")
        for line in estimate_lines(estimate)
    )
