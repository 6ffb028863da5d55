"""TrainingPipeline and the training stack: state machine, IAM, monitoring, notifications, validation.

The dev (single GPU, FastFile) and prod (multi-host, FSx, spot) stacks come from the session ``synth``
fixture; construct-level rules use one small stack with cdk-nag off.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import pytest
from asl_runner import evaluate_jsonata, run
from aws_cdk import assertions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from gpu_constructs import GpuNetwork, PlatformStorage, ValidationError
from gpu_constructs.constants import TRAINING_SUBNETS
from gpu_constructs.images import GpuImage
from gpu_constructs.training import PrepareOptions, TrainingAlarms, TrainingCodeOptions, TrainingPipeline
from gpu_constructs.training_spec import FsxChannel, S3Channel, service_model_problems, substitute_sfn_samples
from gpu_train.metrics import METRIC_DEFINITIONS

ACCOUNT = "123456789012"

# --------------------------------------------------------------------------------------------------
# Helpers: a definition with deploy-time values filled in, so botocore can validate it
# --------------------------------------------------------------------------------------------------


def _fake(node: Any, resources: Mapping[str, Any]) -> Any:
    """A plausible deployed value for an intrinsic function (what CloudFormation would substitute)."""
    if "Ref" in node:
        ref = node["Ref"]
        pseudo = {"AWS::AccountId": ACCOUNT, "AWS::Partition": "aws", "AWS::Region": "us-east-1"}
        if ref in pseudo:
            return pseudo[ref]
        kind = resources.get(ref, {}).get("Type", "")
        return {
            "AWS::S3::Bucket": "gpu-test-bucket",
            "AWS::EC2::Subnet": "subnet-0123456789abcdef0",
            "AWS::EC2::VPC": "vpc-0123456789abcdef0",
            "AWS::KMS::Key": "1234abcd-12ab-34cd-56ef-1234567890ab",
        }.get(kind, "ref-value")
    if "Fn::GetAtt" in node:
        logical, attribute = node["Fn::GetAtt"]
        kind = resources.get(logical, {}).get("Type", "")
        if attribute == "GroupId":
            return "sg-0123456789abcdef0"
        return {
            "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/test-role",
            "AWS::KMS::Key": f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "AWS::S3::Bucket": "arn:aws:s3:::gpu-test-bucket",
        }.get(kind, "getatt-value")
    if "Fn::Sub" in node and isinstance(node["Fn::Sub"], str):  # asset URLs: ${AWS::AccountId} ...
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(_fake({"Ref": m.group(1)}, resources)), node["Fn::Sub"])
    if "Fn::Select" in node:
        index, items = node["Fn::Select"]
        values = _fake(items, resources) if isinstance(items, dict) else items
        return str(values[int(index)])
    if "Fn::Split" in node:
        delimiter, value = node["Fn::Split"]
        return _fake(value, resources).split(delimiter)
    if "Fn::ImportValue" in node:
        name = node["Fn::ImportValue"]
        if "Repository" in name and "Arn" in name:
            return f"arn:aws:ecr:us-west-2:{ACCOUNT}:repository/gpu-prod-training"
        if "Repository" in name:
            return "gpu-prod-training"
        if "ImageTag" in name:
            return "0123abcd"
        if "Subnet" in name:
            return "subnet-0123456789abcdef0"
        if "SecurityGroup" in name:
            return "sg-0123456789abcdef0"
        if "Key" in name:
            return f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
        if "MountName" in name:
            return "abcdefgh"
        if "Lustre" in name:
            return "fs-0123456789abcdef0"
        return "gpu-test-bucket"
    raise AssertionError(f"unexpected intrinsic {node}")


def definition(template: Mapping[str, Any]) -> dict[str, Any]:
    """The state machine's ASL with every token replaced by a deployed-looking value."""
    machines = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    assert len(machines) == 1
    body = machines[0]["Properties"]["DefinitionString"]
    if isinstance(body, dict):
        body = "".join(p if isinstance(p, str) else _fake(p, template["Resources"]) for p in body["Fn::Join"][1])
    return json.loads(body)


def samples(parameters: Any, found: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sample values for every ``.$`` path of task parameters (job names, data version ...)."""
    found = {} if found is None else found
    if isinstance(parameters, dict):
        for key, value in parameters.items():
            if key.endswith(".$"):
                found[value] = _sample_for(key[:-2], value)
            else:
                samples(value, found)
    elif isinstance(parameters, list):
        for value in parameters:
            samples(value, found)
    return found


def _sample_for(key: str, path: str) -> Any:
    if key == "HyperParameters":
        return {"epochs": "1", "processes_per_host": "1", "num_workers": "2"}
    if key == "InputDataConfig":  # the MergeInputs state's: a user's channel and the code's
        file = {"S3DataType": "S3Prefix", "S3DataDistributionType": "FullyReplicated"}
        return [
            {"ChannelName": name, "DataSource": {"S3DataSource": {**file, "S3Uri": uri}}, "InputMode": "File"}
            for name, uri in (("training", "s3://b/data/"), ("code", "s3://b/c.tar.gz"), ("sm_drivers", "s3://b/d"))
        ]
    if key == "InstanceType":
        return "ml.g5.2xlarge"
    if key in ("TrainingJobName", "ProcessingJobName"):
        return "gpu-test-train-abc12345"
    if key == "ContainerArguments":  # States.Array('--entry-point', $.args.entry_point, ...)
        return [
            a.strip().strip("'") if "$" not in a else "train.py" for a in path[len("States.Array(") : -1].split(",")
        ]
    if path.startswith("$.derived."):  # the launcher's settings in Environment: the derived distribution
        return "1"
    if key == "S3Uri" and path == "$.args.code":
        return "s3://gpu-test-bucket/code/gpu-test-train/0123/sourcedir.tar.gz"
    match = re.fullmatch(r"States\.Format\('(.*)', .*\)", path)
    assert match, path
    return match.group(1).replace("{}", "v7").replace("\\'", "'")


def policy_statements(template: Mapping[str, Any], role_hint: str) -> list[dict[str, Any]]:
    policies = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for logical, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and role_hint in logical
    ]
    assert len(policies) == 1, role_hint
    return policies[0]


def by_sid(statements: list[dict[str, Any]], sid: str) -> dict[str, Any]:
    found = [s for s in statements if s.get("Sid") == sid]
    assert len(found) == 1, sid
    return found[0]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# --------------------------------------------------------------------------------------------------
# The deployed stacks (session synth, all four nag packs on)
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev(synth: Any) -> dict[str, Any]:
    return synth("dev").template("training")


@pytest.fixture(scope="module")
def prod(synth: Any) -> dict[str, Any]:
    return synth("prod").template("training")


def test_train_state_is_a_sync_sagemaker_task_whose_parameters_validate(dev: dict, prod: dict) -> None:
    for template in (dev, prod):
        states = definition(template)["States"]
        train = states["Train"]
        assert train["Resource"] == "arn:aws:states:::sagemaker:createTrainingJob.sync"
        parameters = train["Parameters"]
        resolved = substitute_sfn_samples(parameters, samples(parameters))
        assert service_model_problems("CreateTrainingJob", resolved) == []
        assert parameters["TrainingJobName.$"] == "$.args.job_name"
        assert parameters["ResourceConfig"]["InstanceType.$"] == "$.args.instance_type"
        assert parameters["HyperParameters.$"] == "$.run.hyperparameters"
        assert parameters["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
        # A job on the fallback list: the AWS SDK integration, the same request with InstancePreferences.
        listed = states["TrainOnPreferences"]
        assert listed["Resource"] == "arn:aws:states:::aws-sdk:sagemaker:createTrainingJob"
        resolved = substitute_sfn_samples(listed["Parameters"], samples(listed["Parameters"]))
        assert service_model_problems("CreateTrainingJob", resolved) == []
        assert "InstanceType" not in listed["Parameters"]["ResourceConfig"]
        assert "EnableManagedSpotTraining" not in listed["Parameters"]
        shard = states["ShardDataset"]
        assert shard["Resource"] == "arn:aws:states:::sagemaker:createProcessingJob.sync"
        resolved = substitute_sfn_samples(shard["Parameters"], samples(shard["Parameters"]))
        assert service_model_problems("CreateProcessingJob", resolved) == []


def test_dev_is_single_gpu_fastfile(dev: dict) -> None:
    parameters = definition(dev)["States"]["Train"]["Parameters"]
    assert parameters["ResourceConfig"]["InstanceCount"] == 1
    # The channels are the MergeInputs state's: the dataset's for the setup's code, the code's last.
    assert parameters["InputDataConfig.$"] == "$.run.input_data_config"
    sent = run(definition(dev), {"instance_type": "ml.g5.xlarge"}).task("Train").parameters
    code = definition(dev)["States"]["Defaults"]["Parameters"]["defaults"]["code"]
    channels = {c["ChannelName"]: c for c in sent["InputDataConfig"]}
    assert list(channels) == ["train", "validation", "code", "sm_drivers"]
    assert {channels[name]["InputMode"] for name in ("train", "validation")} == {"FastFile"}
    # The code package (from the execution input, the synthesized asset by default) and the launcher, in File mode.
    assert channels["code"]["DataSource"]["S3DataSource"]["S3Uri"] == code
    assert channels["code"]["InputMode"] == channels["sm_drivers"]["InputMode"] == "File"
    driver = channels["sm_drivers"]["DataSource"]["S3DataSource"]["S3Uri"]
    assert driver.startswith("s3://cdk-hnb659fds-assets-") and driver.endswith(".pyz")
    algorithm = parameters["AlgorithmSpecification"]
    assert algorithm["ContainerEntrypoint"][:2] == ["/bin/sh", "-c"]
    assert "$.args.entry_point" in algorithm["ContainerArguments.$"]
    assert parameters["EnableManagedSpotTraining"] is False
    assert "CheckpointConfig" not in parameters
    # No default type: an execution without instance_type runs on the fallback list.
    defaults = definition(dev)["States"]["Defaults"]["Parameters"]["defaults"]
    assert "instance_type" not in defaults
    listed = run(definition(dev), {}).task("TrainOnPreferences").parameters
    assert listed["ResourceConfig"]["InstancePreferences"] == [
        {"InstanceType": "ml.g5.xlarge"},
        {"InstanceType": "ml.g5.2xlarge"},
        {"InstanceType": "ml.g6.2xlarge"},
    ]
    assert listed["ResourceConfig"]["InstanceCount"] == 1
    # The types share one process per host but not the loader workers: the runtime sizes those on the host.
    assert sent["HyperParameters"]["num_workers"] == "2"  # ml.g5.xlarge's 4 vCPUs
    assert (listed["HyperParameters"]["processes_per_host"], listed["HyperParameters"]["num_workers"]) == ("1", "-1")


def test_prod_is_multi_host_fsx_on_demand_with_a_fallback_list(prod: dict) -> None:
    parameters = definition(prod)["States"]["Train"]["Parameters"]
    assert parameters["ResourceConfig"]["InstanceCount"] == 2
    assert parameters["EnableInterContainerTrafficEncryption"] is True
    assert parameters["EnableManagedSpotTraining"] is False  # InstancePreferences are exclusive with spot
    assert parameters["StoppingCondition"] == {"MaxRuntimeInSeconds": 48 * 3600}
    # training.checkpoints: true: on demand, both tasks keep the job's checkpoints under its own prefix.
    assert parameters["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    on_list = run(definition(prod), {}).task("TrainOnPreferences").parameters
    assert on_list["CheckpointConfig"]["S3Uri"].endswith(f"/checkpoints/gpu-prod-train/{on_list['TrainingJobName']}/")
    listed = definition(prod)["States"]["TrainOnPreferences"]["Parameters"]["ResourceConfig"]
    assert listed["InstancePreferences"] == [
        {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
        {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 2},
    ]
    assert "InstanceCount" not in listed  # counts per preference, none for the job
    for channel in (
        run(definition(prod), {"data_version": "v9"}).task("TrainOnPreferences").parameters["InputDataConfig"]
    ):
        if channel["ChannelName"] in ("code", "sm_drivers"):
            continue
        fsx = channel["DataSource"]["FileSystemDataSource"]
        assert fsx["FileSystemType"] == "FSxLustre" and fsx["FileSystemAccessMode"] == "ro"
        assert fsx["DirectoryPath"].startswith("/abcdefgh/datasets/imagenet/v9/")
        assert channel["InputMode"] == "File"
    assert parameters["VpcConfig"]["Subnets"] == ["subnet-0123456789abcdef0"]  # the file system's subnet only
    derive = definition(prod)["States"]["Derive8x10"]
    assert derive["Result"] == {"processes_per_host": "8", "num_workers": "10"}


def test_instance_type_is_checked_against_the_catalog_by_a_choice(dev: dict) -> None:
    states = definition(dev)["States"]
    assert not [s for s in states.values() if s.get("Resource", "").startswith("arn:aws:states:::lambda")]
    allowed: dict[str, str] = {}
    first, *by_type = states["ValidateInstanceType"]["Choices"]
    # No instance_type in the input (the defaults give none with a fallback list): the list.
    assert first == {"Not": {"Variable": "$.args.instance_type", "IsPresent": True}, "Next": "UsePreferences"}
    for choice in by_type:
        for rule in choice.get("Or", [choice]):
            allowed[rule["StringEquals"]] = choice["Next"]
    assert allowed["ml.g5.xlarge"] == "Derive1x2" and allowed["ml.p4d.24xlarge"] == "Derive8x10"
    assert not any(t.startswith(("ml.m5", "ml.c5", "ml.t3", "ml.inf", "ml.trn")) for t in allowed)
    assert "ml.p3.2xlarge" not in allowed  # EBS-only type: the storage kind differs from ml.g5.xlarge
    assert states["ValidateInstanceType"]["Default"] == "InstanceTypeNotAllowed"
    fail = states["InstanceTypeNotAllowed"]
    assert fail["Type"] == "Fail" and "ml.g5.xlarge" in fail["CausePath"]
    assert states["ValidateJobName"]["Choices"][0]["And"][1]["StringMatches"] == "gpu-dev-train-*"


def test_failures_end_with_the_jobs_failure_reason(dev: dict) -> None:
    states = definition(dev)["States"]
    assert states["Train"]["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "DescribeFailedTrainingJob"}
    ]
    describe = states["DescribeFailedTrainingJob"]
    assert describe["Resource"] == "arn:aws:states:::aws-sdk:sagemaker:describeTrainingJob"
    assert describe["Catch"][0]["Next"] == "TrainingJobNotCreated"
    failed = states["TrainingJobFailed"]
    assert "$.failure.job.FailureReason" in failed["CausePath"]
    assert states["TrainingJobNotCreated"]["CausePath"] == "$.error.Cause"
    output = states["Output"]["Parameters"]
    assert output["model_artifact.$"] == "$.result.job.ModelArtifacts.S3ModelArtifacts"
    assert output["final_metrics.$"] == "$.result.job.FinalMetricDataList"


def test_state_machine_logs_all_to_an_encrypted_group_with_xray(dev: dict) -> None:
    template = assertions.Template.from_json(dev)
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": assertions.Match.object_like({"Level": "ALL", "IncludeExecutionData": True}),
        },
    )
    template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "LogGroupName": "/aws/vendedlogs/states/gpu-dev-train",
            "KmsKeyId": assertions.Match.any_value(),
            "RetentionInDays": 30,
        },
    )


def test_state_machine_role_is_scoped_to_the_prefix_and_the_job_roles(dev: dict) -> None:
    statements = policy_statements(dev, "StateMachineRole")
    jobs = by_sid(statements, "TrainingJobsWithThePrefix")
    assert "sagemaker:CreateTrainingJob" in jobs["Action"]
    assert jobs["Resource"]["Fn::Join"][1][-1] == ":training-job/gpu-dev-train-*"
    passing = by_sid(statements, "PassOnlyTheJobRoles")
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    passed = sorted(r["Fn::GetAtt"][0] for r in passing["Resource"])
    assert len(passed) == 2 and "ExecutionRole" in passed[0] and "PrepareRole" in passed[1]
    rules = by_sid(statements, "SyncIntegrationManagedRules")
    assert sorted(rules["Action"]) == ["events:DescribeRule", "events:PutRule", "events:PutTargets"]
    names = sorted(r["Fn::Join"][1][-1] for r in rules["Resource"])
    assert names == [
        ":rule/StepFunctionsGetEventsForSageMakerProcessingJobsRule",
        ":rule/StepFunctionsGetEventsForSageMakerTrainingJobsRule",
    ]
    for statement in statements:  # nothing else may create jobs
        actions = as_list(statement["Action"])
        if any(a.startswith("sagemaker:Create") for a in actions):
            assert statement["Sid"] in ("TrainingJobsWithThePrefix", "ShardingJobsWithThePrefix")


def test_execution_role_is_least_privilege(dev: dict) -> None:
    roles = [
        r for logical, r in dev["Resources"].items() if "ExecutionRole" in logical and r["Type"] == "AWS::IAM::Role"
    ]
    assert len(roles) == 1 and "ManagedPolicyArns" not in roles[0]["Properties"]
    trust = roles[0]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    statements = policy_statements(dev, "ExecutionRole")
    logs = by_sid(statements, "JobLogs")
    assert all(":log-group:/aws/sagemaker/TrainingJobs" in r["Fn::Join"][1][-1] for r in logs["Resource"])
    metrics = by_sid(statements, "JobMetrics")
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}}
    enis = by_sid(statements, "JobNetworkInterfaces")
    assert "ec2:CreateNetworkInterface" in enis["Action"]
    assert "ec2:Vpc" in enis["Condition"]["ArnEqualsIfExists"]
    assert not any(a.startswith("s3:") and "*" in a for s in statements for a in as_list(s["Action"]))
    reads = [s for s in statements if "s3:GetObject" in as_list(s["Action"])]
    read_paths = [json.dumps(r) for s in reads for r in as_list(s["Resource"])]
    # config training.readable_inputs' default: the whole datasets bucket (which covers the dataset prefix).
    assert any("Datasets" in p and p.endswith('"/*"]]}') for p in read_paths), read_paths
    writes = [s for s in statements if "s3:PutObject" in as_list(s["Action"])]
    assert [json.dumps(s["Resource"]).endswith('"/output/gpu-dev-train/*"]]}') for s in writes] == [True]
    assert all(s["Effect"] == "Allow" and "*" not in as_list(s["Action"]) for s in statements)


def _queries(alarm: Mapping[str, Any]) -> list[str]:
    return [m["Expression"] for m in alarm["Metrics"] if m.get("Expression", "").upper().startswith("SELECT")]


def _watched(alarm: Mapping[str, Any]) -> str:
    return next(m["Expression"] for m in alarm["Metrics"] if m.get("ReturnData", True))


def test_alarms_input_bound_composite_of_single_query_alarms_and_idle_gpu(dev: dict) -> None:
    resources = dev["Resources"]
    alarms = {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    composites = {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::CloudWatch::CompositeAlarm"}
    assert len(alarms) == 4 and len(composites) == 1
    ((bound_id, bound),) = composites.items()
    # not the former metric alarm's logical id: CloudFormation refuses to change the type of a logical id
    assert "InputBoundCompositeAlarm" in bound_id and not any("InputBoundAlarm" in k for k in resources)
    part_ids = {
        name: next(k for k in alarms if f"InputBound{name}Alarm" in k) for name in ("GpuLow", "CpuBusy", "DiskBusy")
    }
    # The composite: GPU low AND (CPU busy OR disk busy), by the parts' ARNs.
    rule = "".join(p if isinstance(p, str) else f"<{p['Fn::GetAtt'][0]}>" for p in bound["AlarmRule"]["Fn::Join"][1])
    gpu_low, cpu_busy, disk_busy = (f"<{part_ids[n]}>" for n in ("GpuLow", "CpuBusy", "DiskBusy"))
    assert rule == f'(ALARM("{gpu_low}") AND (ALARM("{cpu_busy}") OR ALARM("{disk_busy}")))'
    assert bound["AlarmDescription"].startswith(
        "Training looks input-bound: average GPU utilization below 50% per GPU while CPU (per vCPU of ml.g5.xlarge) "
        "or disk is above 80%."
    )
    assert bound["AlarmActions"] and bound["OKActions"] == bound["AlarmActions"]
    # Each part holds exactly one Metrics Insights query; ml.g5.xlarge has 1 GPU and 4 vCPUs.
    schema = 'FROM SCHEMA("/aws/sagemaker/TrainingJobs", Host)'
    gpu, cpu, disk = (alarms[part_ids[n]] for n in ("GpuLow", "CpuBusy", "DiskBusy"))
    assert _queries(gpu) == [f"SELECT AVG(GPUUtilization) {schema}"] and _watched(gpu) == "q / 1"
    assert _queries(cpu) == [f"SELECT AVG(CPUUtilization) {schema}"] and _watched(cpu) == "q / 4"
    assert _queries(disk) == [f"SELECT AVG(DiskUtilization) {schema}"] == [_watched(disk)]
    assert (gpu["ComparisonOperator"], gpu["Threshold"]) == ("LessThanThreshold", 50)
    for part in (cpu, disk):
        assert (part["ComparisonOperator"], part["Threshold"]) == ("GreaterThanThreshold", 80)
    for part in (gpu, cpu, disk):
        assert part["EvaluationPeriods"] == 3 and part["TreatMissingData"] == "notBreaching"
        assert not any(part.get(k) for k in ("AlarmActions", "OKActions", "InsufficientDataActions"))
    idle = next(a for a in alarms.values() if "idle" in a["AlarmDescription"])
    assert _queries(idle) == [f"SELECT MIN(GPUUtilization) {schema}"] and _watched(idle) == "gpumin / 1"
    assert idle["ComparisonOperator"] == "LessThanThreshold" and idle["Threshold"] == 5
    assert idle["EvaluationPeriods"] == 6 and idle["TreatMissingData"] == "notBreaching"
    assert idle["AlarmActions"] and idle["OKActions"]


def test_dashboard_shows_gpu_cpu_disk_and_samples_per_sec(dev: dict) -> None:
    dashboards = [r["Properties"] for r in dev["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    assert len(dashboards) == 1
    body = json.dumps(dashboards[0]["DashboardBody"])
    for metric in ("GPUUtilization", "GPUMemoryUtilization", "CPUUtilization", "DiskUtilization"):
        assert f'MetricName=\\\\\\"{metric}\\\\\\"' in body, metric
    assert "train:samples_per_sec" in body and "/aws/sagemaker/TrainingJobs,Host" in body
    assert "gpu-dev-train" in body


def test_failed_jobs_notify_an_encrypted_topic(dev: dict) -> None:
    template = assertions.Template.from_json(dev)
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.sagemaker"],
                "detail-type": ["SageMaker Training Job State Change"],
                "detail": {"TrainingJobStatus": ["Failed"], "TrainingJobName": [{"prefix": "gpu-dev-train-"}]},
            }
        },
    )
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": assertions.Match.any_value()})
    keys = [
        r["Properties"]["KeyPolicy"]["Statement"] for r in dev["Resources"].values() if r["Type"] == "AWS::KMS::Key"
    ]
    principals = [json.dumps(s.get("Principal")) for statements in keys for s in statements]
    assert any("events.amazonaws.com" in p for p in principals)
    assert any("cloudwatch.amazonaws.com" in p for p in principals)


def test_outputs_let_gpuctl_find_everything(dev: dict) -> None:
    outputs = dev["Outputs"]
    for name in ("StateMachineArn", "ExecutionRoleArn", "JobNamePrefix", "JobSpecParameter", "DashboardName"):
        assert name in outputs
    assert outputs["JobNamePrefix"]["Value"] == "gpu-dev-train"
    assert not any("Fn::ImportValue" in json.dumps(o) for o in outputs.values())  # cfn-lint W6001
    parameters = [r["Properties"] for r in dev["Resources"].values() if r["Type"] == "AWS::SSM::Parameter"]
    assert len(parameters) == 1 and parameters[0]["Name"] == "/gpu-dev-train/job-spec"
    assert parameters[0]["Tier"] == "Standard"
    parts = parameters[0]["Value"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else _fake(p, dev["Resources"]) for p in parts)
    assert len(text) < 4096  # the Standard tier's limit
    from gpu_constructs.training_spec import TrainingJobSpec

    spec = TrainingJobSpec.from_json(text)
    request = spec.to_request("gpu-dev-train-check")
    assert [p["InstanceType"] for p in request["ResourceConfig"]["InstancePreferences"]] == list(spec.preference_types)
    assert service_model_problems("CreateTrainingJob", request) == []
    one = spec.to_request("gpu-dev-train-check", instance_type="ml.g5.xlarge")  # gpuctl train --instance-type
    assert (
        one["ResourceConfig"]["InstanceType"] == "ml.g5.xlarge" and "InstancePreferences" not in one["ResourceConfig"]
    )


# --------------------------------------------------------------------------------------------------
# Construct-level rules (one small stack, nag off)
# --------------------------------------------------------------------------------------------------


class _Parts:
    def __init__(self) -> None:
        self.app = cdk.App()
        self.stack = cdk.Stack(self.app, "T", env=cdk.Environment(account=ACCOUNT, region="us-east-1"))
        self.network = GpuNetwork(self.stack, "Net", availability_zones=["us-east-1a"], interface_endpoints=[])
        self.storage = PlatformStorage(self.stack, "Data", removal_policy=cdk.RemovalPolicy.DESTROY)
        self.image = GpuImage.from_dlc(self.stack, "Image", framework_version="2.8", usage="training")
        self.count = 0

    def channels(self) -> list[S3Channel]:
        bucket = self.storage.datasets_bucket.bucket_name
        return [S3Channel("train", f"s3://{bucket}/ds/{{data_version}}/train/")]

    def pipeline(self, **overrides: Any) -> TrainingPipeline:
        self.count += 1
        props: dict[str, Any] = {
            "image": self.image,
            "storage": self.storage,
            "job_name_prefix": "gpu-test-train",
            "instance_type": "ml.g5.2xlarge",
            "channels": self.channels(),
            "dataset_prefix": "ds/",
            "vpc": self.network.vpc,
            "vpc_subnets": self.network.subnets(TRAINING_SUBNETS),
            "security_groups": [self.network.training_security_group],
            "removal_policy": cdk.RemovalPolicy.DESTROY,
        }
        props.update(overrides)
        return TrainingPipeline(self.stack, f"P{self.count}", **props)


@pytest.fixture(scope="module")
def parts() -> _Parts:
    return _Parts()


def test_grants_for_gpuctl_users(parts: _Parts) -> None:
    pipeline = parts.pipeline(prepare=PrepareOptions(source_prefix="raw/"), notification_emails=["ml@example.com"])
    user = iam.Role(parts.stack, "Operator", assumed_by=iam.AccountRootPrincipal())
    pipeline.grant_run_jobs(user)
    pipeline.grant_start_execution(user)
    assert pipeline.grant_principal is pipeline.role
    assert pipeline.sharding_spec is not None and pipeline.prepare_role is not None
    assert pipeline.connections.security_groups == [parts.network.training_security_group]
    template = assertions.Template.from_stack(parts.stack)
    statements = policy_statements(template.to_json(), "OperatorDefaultPolicy")
    create = next(s for s in statements if "sagemaker:CreateTrainingJob" in as_list(s["Action"]))
    assert create["Resource"]["Fn::Join"][1][-1].endswith(":training-job/gpu-test-train-*")
    passing = next(s for s in statements if s["Action"] == "iam:PassRole")
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert any("states:StartExecution" in as_list(s["Action"]) for s in statements)
    template.has_resource_properties("AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ml@example.com"})


def test_the_pipeline_is_a_grantee_whose_grants_go_to_the_job_role() -> None:
    """TrainingPipeline declares iam.IGrantable, so a grant takes the pipeline itself (as it takes a fleet or an
    endpoint) and lands in the policy of the role the jobs run as."""
    parts = _Parts()  # a stack of its own: the module's shared one is synthesized by earlier tests
    pipeline = parts.pipeline()
    bucket = s3.Bucket(parts.stack, f"GranteeData{parts.count}")
    assert bucket.grant_read(pipeline, "extra/*").success
    grant = iam.Grant.add_to_principal(
        grantee=pipeline, actions=["s3:GetObjectTagging"], resource_arns=[bucket.arn_for_objects("extra/*")]
    )
    assert grant.success
    assert pipeline.grant_principal is pipeline.role
    template = assertions.Template.from_stack(parts.stack).to_json()
    role_ref = {"Ref": parts.stack.get_logical_id(pipeline.role.node.default_child)}
    statements = [
        statement
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and role_ref in r["Properties"]["Roles"]
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    bucket_arn = {"Fn::GetAtt": [parts.stack.get_logical_id(bucket.node.default_child), "Arn"]}
    granted = [s for s in statements if json.dumps(bucket_arn) in json.dumps(s)]
    actions = {a for s in granted for a in as_list(s["Action"])}
    assert {"s3:GetObject*", "s3:GetObjectTagging"} <= actions


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"job_name_prefix": "Bad_Prefix"}, r"job_name_prefix='Bad_Prefix' is not allowed"),
        ({"dataset_prefix": "/abs"}, r"dataset_prefix='/abs' is not allowed"),
        ({"dataset_prefix": "other/"}, r"channels\['train'\]\.s3_uri=.* allowed: a URI under the dataset prefix"),
        ({"instance_type": "ml.m5.xlarge"}, r"'ml.m5.xlarge' has no NVIDIA GPU"),
        ({"instance_type": "ml.g5.2xlarg"}, r"did you mean 'ml.g5.2xlarge'"),
        ({"processes_per_host": 2}, r"processes_per_host=2 needs 2 GPUs"),
        ({"spot": True, "max_wait": cdk.Duration.hours(1)}, r"max_wait=3600 s is less than max_runtime=86400 s"),
        ({"instance_count": 2, "inter_container_encryption": False, "production": True}, r"not allowed in production"),
        ({"allowed_instance_types": ["ml.p3.2xlarge"]}, r"types with the same storage kind"),
        ({"notification_emails": ["not-an-address"]}, r"notification_emails='not-an-address' is not allowed"),
        (
            {"alarms": TrainingAlarms(gpu_low_percent=10, idle_gpu_percent=20)},
            r"alarms.idle_gpu_percent=20 is not allowed; allowed: less than gpu_low_percent=10",
        ),
    ],
)
def test_construct_rules(parts: _Parts, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        parts.pipeline(**overrides)
    assert str(info.value).startswith("T/P")  # names the construct path


def _checkpointing(**overrides: Any) -> tuple[dict[str, Any], list[str]]:
    """A pipeline on a fallback list (its own stack): the Train and TrainOnPreferences requests as sent, and the
    S3 resources the job role may write."""
    parts = _Parts()
    parts.pipeline(instance_preferences=["ml.g5.2xlarge", "ml.g6.2xlarge"], **overrides)
    template = assertions.Template.from_stack(parts.stack).to_json()
    tasks = {
        "Train": run(definition(template), {"instance_type": "ml.g5.2xlarge"}).task("Train").parameters,
        "TrainOnPreferences": run(definition(template), {}).task("TrainOnPreferences").parameters,
    }
    statements = policy_statements(template, "ExecutionRole")
    writes = [
        json.dumps(r) for s in statements if "s3:PutObject" in as_list(s["Action"]) for r in as_list(s["Resource"])
    ]
    return tasks, writes


def test_checkpoints_true_keeps_checkpoints_of_on_demand_jobs() -> None:
    """``checkpoints=True`` without spot: both tasks (one type, the fallback list) sync /opt/ml/checkpoints with the
    job's own prefix, and the job role reads and writes the checkpoints prefix."""
    tasks, writes = _checkpointing(checkpoints=True)
    for name, sent in tasks.items():
        assert sent.get("EnableManagedSpotTraining") in (None, False), name
        config = sent["CheckpointConfig"]
        assert config["LocalPath"] == "/opt/ml/checkpoints", name
        job = sent["TrainingJobName"]
        assert config["S3Uri"] == f"s3://gpu-test-bucket/checkpoints/gpu-test-train/{job}/", name
        assert service_model_problems("CreateTrainingJob", sent) == [], name
    assert any(w.endswith('"/checkpoints/gpu-test-train/*"]]}') for w in writes), writes


def test_checkpoints_default_to_spot() -> None:
    """``checkpoints=None`` (the default) without spot: no CheckpointConfig and no checkpoint grant."""
    tasks, writes = _checkpointing()
    assert all("CheckpointConfig" not in sent for sent in tasks.values())
    assert not any("checkpoints" in w for w in writes), writes


def test_spot_refuses_checkpoints_false(parts: _Parts) -> None:
    with pytest.raises(
        ValidationError, match=r"checkpoints=False is not allowed; allowed: True or None with spot=True"
    ):
        parts.pipeline(spot=True, checkpoints=False)
    with pytest.raises(ValidationError, match=r"checkpoints='yes' is not allowed; allowed: True, False or None"):
        parts.pipeline(checkpoints="yes")


def test_fsx_channel_needs_a_vpc(parts: _Parts) -> None:
    fsx = [FsxChannel("train", "fs-0123456789abcdef0", "/abcdefgh/ds/{data_version}/train")]
    with pytest.raises(ValidationError, match=r"vpc=None is not allowed; allowed: a VPC: FSx channel"):
        parts.pipeline(channels=fsx, vpc=None, vpc_subnets=None, security_groups=None)


def test_an_inference_image_cannot_train(parts: _Parts) -> None:
    inference = GpuImage.from_dlc(parts.stack, "InferenceImage", framework_version="2.6", usage="inference")
    with pytest.raises(ValidationError, match=r"image usage='inference' cannot serve as a training job"):
        parts.pipeline(image=inference)


def test_code_options_are_checked_before_anything_is_built(parts: _Parts) -> None:
    with pytest.raises(ValidationError, match=r"T/P\d+: code.distribution='mpi' is not allowed"):
        parts.pipeline(code=TrainingCodeOptions(distribution="mpi"))  # type: ignore[arg-type]


def test_durations_left_out_take_the_construct_defaults(parts: _Parts) -> None:
    """``PrepareOptions.max_runtime`` and ``TrainingAlarms.period`` default to ``None``: the construct's defaults
    (``PREPARE_MAX_RUNTIME``, ``ALARM_PERIOD``) are written once, in the library."""
    pipeline = parts.pipeline(prepare=PrepareOptions(source_prefix="raw/"), alarms=TrainingAlarms())
    assert pipeline.sharding_spec is not None and pipeline.sharding_spec.max_runtime.total_seconds() == 86400
    queries = parts.stack.resolve(pipeline.idle_gpu_alarm.node.default_child.metrics)  # type: ignore[union-attr]
    assert [q["period"] for q in queries if "period" in q] == [300]


# -- deprecated names: each still works for one release and warns with its replacement ----------------


def test_deprecated_alarm_thresholds_class_takes_and_reads_the_old_field_names() -> None:
    from gpu_constructs.training import AlarmThresholds

    with pytest.warns(DeprecationWarning) as caught:
        thresholds = AlarmThresholds(gpu_low_pct=40, busy_pct=70, idle_gpu_pct=4)
    messages = [str(w.message) for w in caught]
    assert any("AlarmThresholds is deprecated" in m and "TrainingAlarms" in m for m in messages)
    assert any("AlarmThresholds(gpu_low_pct=...) is deprecated" in m and "gpu_low_percent=" in m for m in messages)
    assert isinstance(thresholds, TrainingAlarms)
    assert (thresholds.gpu_low_percent, thresholds.busy_percent, thresholds.idle_gpu_percent) == (40, 70, 4)
    with pytest.warns(DeprecationWarning, match=r"AlarmThresholds\.busy_pct is deprecated.*busy_percent"):
        assert thresholds.busy_pct == 70


def test_deprecated_alarm_thresholds_keyword_still_sets_the_alarms(parts: _Parts) -> None:
    with pytest.warns(DeprecationWarning, match=r"TrainingPipeline\(alarm_thresholds=\.\.\.\) is deprecated.*alarms="):
        pipeline = parts.pipeline(alarm_thresholds=TrainingAlarms(gpu_low_percent=33))
    gpu_low = pipeline.node.find_child("InputBoundGpuLowAlarm").node.default_child
    assert parts.stack.resolve(gpu_low.threshold) == 33  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="'alarm_thresholds' and 'alarms' are the same setting"):
        parts.pipeline(alarm_thresholds=TrainingAlarms(), alarms=TrainingAlarms())


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("source_dir", "containers/training/default_code"),
        ("entry_point", "train.py"),
        ("distribution", "single"),
        ("framework", "pytorch"),
        ("package_index", True),
    ],
)
def test_deprecated_flat_code_keywords_still_set_the_code(parts: _Parts, keyword: str, value: Any) -> None:
    match = rf"TrainingPipeline\({keyword}=\.\.\.\) is deprecated.*code=TrainingCodeOptions\({keyword}=\.\.\.\)"
    with pytest.warns(DeprecationWarning, match=match):
        pipeline = parts.pipeline(**{keyword: value})
    assert pipeline.spec.code is not None
    if keyword != "source_dir":
        assert getattr(pipeline.spec.code, keyword) == value
    with pytest.raises(ValidationError, match=rf"'{keyword}' and 'code' are the same settings; give only 'code'"):
        parts.pipeline(code=TrainingCodeOptions(), **{keyword: value})


def test_deprecated_alarm_keys_of_the_config_still_load() -> None:
    from stacks.config import TrainingConfig

    with pytest.warns(DeprecationWarning, match=r"training\.alarms\(idle_gpu_pct=\.\.\.\) is deprecated"):
        config = TrainingConfig.model_validate({"alarms": {"idle_gpu_pct": 3}})
    assert config.alarms.idle_gpu_percent == 3


# --------------------------------------------------------------------------------------------------
# The training section of the config and the stack's helpers
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"spot": False, "max_wait_hours": 48}, "max_wait_hours is set but spot is false"),
        ({"spot": True, "max_runtime_hours": 48, "max_wait_hours": 24}, "max_wait_hours: 24 is less than"),
        ({"spot": True, "checkpoints": False}, "checkpoints: false with spot: true"),
        ({"input": "fsx", "input_mode": "FastFile"}, "input_mode must be File"),
        ({"instance_type": "ml.m5.xlarge"}, "has no NVIDIA GPU"),
        ({"hyperparameters": {"processes_per_host": "4"}}, "processes_per_host=4 needs 4 GPUs"),
        ({"hyperparameters": {"processes_per_host": "four"}}, "processes_per_host='four' is not an integer"),
        (
            {
                "instance_type": "ml.g5.12xlarge",
                "allowed_instance_types": ("ml.g5.2xlarge",),
                "hyperparameters": {"processes_per_host": "4"},
            },
            "processes_per_host=4 needs 4 GPUs but 'ml.g5.2xlarge' has a single GPU",
        ),
        (
            {"spot": True, "max_runtime_hours": 48, "max_wait_hours": 700},
            "allowed: 1..672 hours (SageMaker MaxWaitTimeInSeconds limit 2419200 s = 28 days)",
        ),
        ({"max_runtime_hours": 700}, "allowed: 1..672 hours (SageMaker MaxRuntimeInSeconds limit 2419200 s = 28 days)"),
        ({"dataset_prefix": "imagenet"}, "must be a relative S3 prefix ending in '/'"),
        ({"name": "Train"}, "must be 1-16 lowercase letters"),
        (
            {"alarms": {"gpu_low_percent": 10, "idle_gpu_percent": 20}},
            "idle_gpu_percent: 20.0: allowed: less than gpu_low_percent=10.0",
        ),
    ],
)
def test_training_config_rules(values: dict[str, Any], message: str) -> None:
    from pydantic import ValidationError as PydanticError

    from stacks.config import TrainingConfig

    with pytest.raises(PydanticError, match=re.escape(message)):
        TrainingConfig.model_validate(values)


def test_config_hyperparameters_become_strings_and_are_checked_by_the_runtime() -> None:
    from stacks.config import ConfigError, TrainingConfig
    from stacks.training_stack import check_hyperparameters

    config = TrainingConfig.model_validate({"hyperparameters": {"epochs": 3, "compile": True}})
    assert config.hyperparameters == {"epochs": "3", "compile": "true"}
    check_hyperparameters(config)
    with pytest.raises(ConfigError, match=r"training.hyperparameters: unknown hyperparameter 'epoch'"):
        check_hyperparameters(TrainingConfig.model_validate({"hyperparameters": {"epoch": "3"}}))


def test_fsx_input_needs_the_file_system(parts: _Parts) -> None:
    from stacks.config import ConfigError, TrainingConfig
    from stacks.training_stack import training_channels

    s3, selection = training_channels(TrainingConfig(), parts.storage, None)
    assert [c.name for c in s3] == ["train", "validation"] and selection.subnet_group_name == TRAINING_SUBNETS
    assert all(isinstance(c, S3Channel) and c.s3_uri.endswith("/imagenet/{data_version}/" + c.name + "/") for c in s3)
    with pytest.raises(ConfigError, match=r"'fsx' needs file_systems.lustre.enabled: true"):
        training_channels(TrainingConfig(input="fsx", input_mode="File"), parts.storage, None)


# --------------------------------------------------------------------------------------------------
# Execution input: numeric hyperparameters and processes_per_host (issue 12, items 9 and 10)
# --------------------------------------------------------------------------------------------------


SETUP_CODE = "s3://gpu-test-assets/setup-code.tar.gz"


def _run_hyperparameter_states(
    states: dict[str, Any], instance_type: str, hyperparameters: Any, *, code: str = SETUP_CODE
) -> dict[str, Any]:
    """MergeHyperparameters -> ValidateHyperparameters (-> InvalidHyperparameters) on a typical state; ``code`` is the
    execution's code package (by default the setup's own, as the Defaults state gives it)."""
    derive = next(
        states[choice["Next"]]
        for choice in states["ValidateInstanceType"]["Choices"]
        if instance_type in [rule.get("StringEquals") for rule in choice.get("Or", [choice])]
    )
    base = states["Defaults"]["Parameters"]["static"]["base_hyperparameters"]
    state = {
        "args": {
            "instance_type": instance_type,
            "hyperparameters": hyperparameters,
            "job_name": "gpu-dev-train-1",
            "code": code,
        },
        "static": {"base_hyperparameters": base, "code": SETUP_CODE},
        "derived": derive["Result"],
    }
    merge = states["MergeHyperparameters"]
    assert merge["Type"] == "Pass" and merge["QueryLanguage"] == "JSONata"
    output = evaluate_jsonata(merge["Output"], state)
    assert output["args"] == state["args"]  # the rest of the state passes through
    choice = states["ValidateHyperparameters"]
    (rule,) = choice["Choices"]
    failed = evaluate_jsonata(rule["Condition"], output)
    result = {"hyperparameters": output["run"]["hyperparameters"], "failed": failed}
    if failed:
        fail = states[rule["Next"]]
        assert fail["Type"] == "Fail" and fail["Error"] == "InvalidInput"
        result["cause"] = evaluate_jsonata(fail["Cause"], output)
    else:
        assert choice["Default"] in ("PrepareData?", "Train")
    return result


def test_numeric_execution_hyperparameters_become_strings(dev: dict) -> None:
    states = definition(dev)["States"]
    run = _run_hyperparameter_states(states, "ml.g5.xlarge", {"epochs": 30, "lr": 0.1, "amp": True, "arch": "vit"})
    assert run["failed"] is False
    assert run["hyperparameters"] == {
        "processes_per_host": "1",
        "num_workers": "2",
        "arch": "vit",
        "epochs": "30",
        "batch_size": "128",
        "lr": "0.1",
        "amp": "true",
    }
    # what the Train task sends is CreateTrainingJob-valid: botocore's map of strings
    parameters = states["Train"]["Parameters"]
    found = samples(parameters)
    found[parameters["HyperParameters.$"]] = run["hyperparameters"]
    assert service_model_problems("CreateTrainingJob", substitute_sfn_samples(parameters, found)) == []


@pytest.mark.parametrize(
    ("instance_type", "hyperparameters", "cause"),
    [
        (
            "ml.g5.xlarge",
            {"epochs": {"max": 30}},
            'hyperparameters.epochs={"max":30} is not allowed; allowed: a string, a number or true/false',
        ),
        ("ml.g5.xlarge", {"epochs": None}, "hyperparameters.epochs=null is not allowed"),
        ("ml.g5.xlarge", "epochs=30", "hyperparameters=epochs=30 is not allowed; allowed: an object of name: value"),
        (
            "ml.g5.xlarge",
            {"note": "x" * 2501},
            "a 2501-character value; allowed: names up to 256 and values up to 2500",
        ),
        (
            "ml.g5.xlarge",
            {"processes_per_host": 16},
            "hyperparameters.processes_per_host=16 is not allowed on ml.g5.xlarge; allowed: 0 (one process per GPU) "
            "or 1..1",
        ),
        ("ml.g5.xlarge", {"processes_per_host": "two"}, "hyperparameters.processes_per_host=two is not allowed"),
    ],
)
def test_bad_execution_hyperparameters_fail_with_the_key_the_value_and_what_is_allowed(
    dev: dict, instance_type: str, hyperparameters: Any, cause: str
) -> None:
    run = _run_hyperparameter_states(definition(dev)["States"], instance_type, hyperparameters)
    assert run["failed"] is True
    assert run["cause"].startswith("The execution input is not valid: ")
    assert cause in run["cause"]


def test_an_executions_own_code_package_gets_only_the_executions_hyperparameters(dev: dict) -> None:
    """Not the built-in trainer's defaults (dev config: arch, epochs, batch_size) nor the derived distribution:
    a script gets exactly what its user gave; the launcher's settings go to the Train state's Environment."""
    states = definition(dev)["States"]
    other = "s3://gpu-test-artifacts/code/gpu-dev-train/0123/sourcedir.tar.gz"
    run = _run_hyperparameter_states(states, "ml.g5.xlarge", {"lr": 0.01}, code=other)
    assert run == {"hyperparameters": {"lr": "0.01"}, "failed": False}
    assert _run_hyperparameter_states(states, "ml.g5.xlarge", {}, code=other)["hyperparameters"] == {}
    bad = _run_hyperparameter_states(states, "ml.g5.xlarge", {"processes_per_host": 2}, code=other)
    assert "processes_per_host=2 is not allowed on ml.g5.xlarge" in bad["cause"]  # the launcher reads it: checked
    environment = states["Train"]["Parameters"]["Environment"]
    assert environment == {
        "GPU_TRAIN_PROCESSES_PER_HOST.$": "$.derived.processes_per_host",
        "GPU_TRAIN_NUM_WORKERS.$": "$.derived.num_workers",
    }


def test_execution_processes_per_host_follows_the_gpus_of_the_chosen_type(dev: dict) -> None:
    states = definition(dev)["States"]
    four_gpus = "ml.g5.12xlarge"
    assert _run_hyperparameter_states(states, four_gpus, {"processes_per_host": 4})["failed"] is False
    assert _run_hyperparameter_states(states, four_gpus, {"processes_per_host": "0"})["failed"] is False
    run = _run_hyperparameter_states(states, four_gpus, {"processes_per_host": 8})
    assert (
        "processes_per_host=8 is not allowed on ml.g5.12xlarge; allowed: 0 (one process per GPU) or 1..4"
        in run["cause"]
    )


def test_the_state_machine_limits_are_the_catalogs(dev: dict) -> None:
    from gpu_constructs.catalog import processes_per_host_limit
    from gpu_constructs.training_spec import PROCESSES_PER_HOST_PATTERN

    expression = definition(dev)["States"]["MergeHyperparameters"]["Output"]
    assert f"/{PROCESSES_PER_HOST_PATTERN}/" in expression
    table = json.loads(re.search(r"\$lookup\((\{[^}]*\}), \$in\.args\.instance_type\)", expression).group(1))
    assert table and all(limit == processes_per_host_limit(name) for name, limit in table.items())


def test_processes_per_host_hyperparameter_of_the_construct_is_checked(parts: _Parts) -> None:
    with pytest.raises(
        ValidationError, match=re.escape("hyperparameters['processes_per_host']=4 needs 4 GPUs but 'ml.g5.2xlarge'")
    ):
        parts.pipeline(hyperparameters={"processes_per_host": "4"})


def _config_text(**replacements: str) -> str:
    from stacks.config import CONFIG_DIR

    text = (CONFIG_DIR / "prod.yaml").read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize(
    ("replacements", "message"),
    [
        pytest.param(
            {"spot: false                      # on demand": "max_wait_hours: 700\n  spot: false  # on demand"},
            "  training.max_wait_hours: 700: allowed: 1..672 hours (SageMaker MaxWaitTimeInSeconds limit 2419200 s = "
            "28 days)",
            id="max-wait-beyond-the-sagemaker-limit-in-hours",
        ),
        pytest.param(
            {
                'cuda_version: "12.8"           # CUDA of the Dockerfile\'s base image': 'cuda_version: "13.0"',
                "instance_type: ml.p4d.24xlarge   #": "instance_type: ml.p3.16xlarge   #",
                "  instance_preferences:\n    - {instance_type: ml.p4d.24xlarge, instance_count: 2}\n"
                "    - {instance_type: ml.p4de.24xlarge, instance_count: 2}\n": "",
            },
            "  training.instance_type: 'ml.p3.16xlarge' cannot run images.training (kind codebuild, CUDA 13.0): CUDA "
            "13.0 cannot drive the NVIDIA V100 of 'p3.16xlarge' (Volta, compute capability 7.0, sm_70); allowed: CUDA "
            "9.0 to 12.x (dropped in CUDA 13.0); change the instance type or the image",
            id="a-cuda-build-that-cannot-drive-the-gpu",
        ),
    ],
)
def test_training_config_errors_name_the_key_and_the_allowed_values(replacements: dict[str, str], message: str) -> None:
    from pathlib import Path

    from stacks.config import ConfigError, parse_config

    text = _config_text(**replacements)
    with pytest.raises(ConfigError) as info:
        parse_config(text, Path("config/prod.yaml"))
    assert str(info.value) == "config/prod.yaml: invalid configuration\n" + message


def test_the_job_role_reads_exactly_the_readable_inputs() -> None:
    """Another bucket with its own SSE-KMS key: list the prefix (s3:prefix condition), get its objects, decrypt
    with its key; the dataset prefix, which no readable input of the datasets bucket covers, keeps its own grant."""
    from gpu_constructs.training import ReadableInput

    parts = _Parts()
    key = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    team = ReadableInput(bucket_name="team-data", prefix="corpora/", kms_key_arn=key)
    pipeline = parts.pipeline(readable_inputs=[team], vpc=None, vpc_subnets=None, security_groups=None)
    assert pipeline.readable_inputs[1:] == ("s3://team-data/corpora/",)
    assert pipeline.readable_inputs[0].startswith("s3://") and pipeline.readable_inputs[0].endswith("/ds/")
    assert pipeline.spec.readable_inputs == pipeline.readable_inputs  # what gpuctl checks inputs against
    statements = policy_statements(assertions.Template.from_stack(parts.stack).to_json(), "P1ExecutionRole")
    bucket_arn = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::team-data"]]}
    objects_arn = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::team-data/corpora/*"]]}
    team_statements = [s for s in statements if "team-data" in json.dumps(s) or key in json.dumps(s)]
    assert team_statements == [
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": objects_arn},
        {
            "Action": "s3:ListBucket",
            "Condition": {"StringLike": {"s3:prefix": ["corpora/*", "corpora"]}},
            "Effect": "Allow",
            "Resource": bucket_arn,
        },
        {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": key},
    ]
    datasets = [s for s in statements if "DataDatasets" in json.dumps(s)]
    datasets_arn = {"Fn::GetAtt": [datasets[0]["Resource"]["Fn::Join"][1][0]["Fn::GetAtt"][0], "Arn"]}
    assert datasets == [
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": {"Fn::Join": ["", [datasets_arn, "/ds/*"]]}},
        {
            "Action": "s3:ListBucket",
            "Condition": {"StringLike": {"s3:prefix": ["ds/*", "ds"]}},
            "Effect": "Allow",
            "Resource": datasets_arn,
        },
    ]
    # An input outside them is refused by the spec (gpuctl) before any job.
    outside = pipeline.spec.with_inputs([S3Channel("training", "s3://team-data/other/")], dataset=False)
    assert outside.problems() == [
        "channel 'training': s3_uri='s3://team-data/other/' is not readable by the job role; allowed: a URI under "
        f"{pipeline.readable_inputs[0]}, s3://team-data/corpora/ (the prefixes config training.readable_inputs "
        "grants the job role)"
    ]
    inside = pipeline.spec.with_inputs([S3Channel("training", "s3://team-data/corpora/en/")], dataset=False)
    assert inside.problems() == []
