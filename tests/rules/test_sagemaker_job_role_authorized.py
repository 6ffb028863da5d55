"""SageMakerJobRoleAuthorized: the requests SageMaker makes with a job's role, evaluated against the policies.

The failing examples: a foreign template whose role may read but not list a channel, and the platform's own
dev and prod templates with the listing statements the job roles had before (what main synthesized then).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from rule_helpers import findings, template

from gpu_constructs.rules._rule import Resource
from gpu_constructs.rules.pack import _assembly_stacks
from gpu_constructs.rules.sagemaker_job_role_authorized import check as rule
from gpu_constructs.templates import StackView

RULE = "SageMakerJobRoleAuthorized"
ASSETS = "cdk-hnb659fds-assets-"


def _machine(task_params: dict[str, Any], resource: str = "arn:aws:states:::sagemaker:createTrainingJob.sync") -> dict:
    definition = {"StartAt": "Train", "States": {"Train": {"Type": "Task", "Resource": resource, "End": True,
                                                           "Parameters": task_params}}}  # fmt: skip
    return {
        "Type": "AWS::StepFunctions::StateMachine",
        "Properties": {"DefinitionString": json.dumps(definition), "RoleArn": {"Fn::GetAtt": ["MachineRole", "Arn"]}},
    }


def _role(name: str) -> dict[str, Any]:
    return {"Type": "AWS::IAM::Role", "Properties": {"RoleName": name, "AssumeRolePolicyDocument": {}}}


def _policy(role: str, *statements: dict[str, Any]) -> dict[str, Any]:
    return {
        "Type": "AWS::IAM::Policy",
        "Properties": {"Roles": [{"Ref": role}], "PolicyDocument": {"Statement": list(statements)}},
    }


DLC = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
JOB = {
    "TrainingJobName": "train-1",
    "RoleArn": "arn:aws:iam::123456789012:role/job",
    "AlgorithmSpecification": {"TrainingImage": DLC, "TrainingInputMode": "File"},
    "InputDataConfig": [
        {"ChannelName": "code",
         "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://code/p/code.tar.gz"}}}
    ],
    "OutputDataConfig": {"S3OutputPath": "s3://out/output/"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
}  # fmt: skip
JOB_GRANTS = (
    {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::code/p/*"},
    {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::out/output/*"},
    {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
     "Resource": "arn:aws:logs:*:*:log-group:/aws/sagemaker/TrainingJobs:*"},
    {"Effect": "Allow", "Action": "cloudwatch:PutMetricData", "Resource": "*"},
)  # fmt: skip
LIST_CODE = {
    "Effect": "Allow",
    "Action": "s3:ListBucket",
    "Resource": "arn:aws:s3:::code",
    "Condition": {"StringLike": {"s3:prefix": ["p/*", "p"]}},
}
MACHINE_GRANTS = (
    {"Effect": "Allow", "Action": ["sagemaker:CreateTrainingJob"],
     "Resource": "arn:aws:sagemaker:*:*:training-job/train-*"},
    {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "arn:aws:iam::123456789012:role/job",
     "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}},
)  # fmt: skip


def _app(job: dict[str, Any], job_grants: tuple[dict[str, Any], ...], machine_grants: tuple[dict[str, Any], ...]):
    return template(
        Machine=_machine(job),
        JobRole=_role("job"),
        JobPolicy=_policy("JobRole", *job_grants),
        MachineRole=_role("machine"),
        MachinePolicy=_policy("MachineRole", *machine_grants),
    )


def _ids(tpl: dict[str, Any]) -> set[str]:
    return {f.finding or "" for f in findings(RULE, tpl, account="123456789012", region="us-east-1")}


def test_a_role_that_may_read_and_list_every_input_is_compliant() -> None:
    assert _ids(_app(JOB, (*JOB_GRANTS, LIST_CODE), MACHINE_GRANTS)) == set()


def test_a_role_that_may_read_but_not_list_an_s3prefix_channel_is_reported() -> None:
    assert _ids(_app(JOB, JOB_GRANTS, MACHINE_GRANTS)) == {"Train:channel:code:s3:ListBucket"}


def test_a_listing_scoped_to_another_prefix_does_not_count() -> None:
    other = copy.deepcopy(LIST_CODE)
    other["Condition"]["StringLike"]["s3:prefix"] = ["q/*"]
    assert _ids(_app(JOB, (*JOB_GRANTS, other), MACHINE_GRANTS)) == {"Train:channel:code:s3:ListBucket"}


def test_a_missing_output_write_and_pass_role_are_reported() -> None:
    no_put = tuple(g for g in JOB_GRANTS if g["Action"] != "s3:PutObject")
    assert _ids(_app(JOB, (*no_put, LIST_CODE), MACHINE_GRANTS[:1])) == {
        "Train:output:s3:PutObject",
        "Train:pass-role:iam:PassRole",
    }


def test_an_aws_sdk_processing_task_is_read_too() -> None:
    job = {
        "ProcessingJobName": "shard-1",
        "RoleArn": "arn:aws:iam::123456789012:role/job",
        "AppSpecification": {"ImageUri": DLC},
        "ProcessingInputs": [{"InputName": "raw", "S3Input": {"S3Uri": "s3://code/p/raw/", "S3DataType": "S3Prefix"}}],
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 30}
        },
    }  # fmt: skip
    tpl = _app(job, JOB_GRANTS, MACHINE_GRANTS)
    tpl["Resources"]["Machine"] = _machine(job, "arn:aws:states:::aws-sdk:sagemaker:createProcessingJob")
    assert _ids(tpl) == {
        "Train:input:raw:s3:ListBucket",
        "Train:logs:logs:CreateLogStream",  # the grants name the training jobs' log group only
        "Train:logs:logs:PutLogEvents",
        "Train:start:sagemaker:CreateProcessingJob",
    }


def test_values_chosen_at_run_time_and_foreign_roles_are_not_judged() -> None:
    runtime = copy.deepcopy(JOB)
    source = runtime["InputDataConfig"][0]["DataSource"]["S3DataSource"]
    source["S3Uri.$"] = source.pop("S3Uri") and "$.code"
    assert _ids(_app(runtime, JOB_GRANTS, MACHINE_GRANTS)) == set()
    foreign = {**JOB, "RoleArn": "arn:aws:iam::123456789012:role/not-in-this-app"}
    assert _ids(_app(foreign, (), MACHINE_GRANTS)) == set()


# -- the platform's own templates -------------------------------------------------------------------------------


def _without_asset_listings(stacks: list[StackView]) -> list[StackView]:
    """The stacks with every ``s3:ListBucket`` of the CDK asset bucket removed (the job roles' grants before)."""
    out = []
    for stack in stacks:
        tpl = copy.deepcopy(dict(stack.template))
        for resource in tpl["Resources"].values():
            if resource["Type"] != "AWS::IAM::Policy":
                continue
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            resource["Properties"]["PolicyDocument"]["Statement"] = [
                s for s in statements if not (s["Action"] == "s3:ListBucket" and ASSETS in json.dumps(s["Resource"]))
            ]
        out.append(StackView(stack.name, stack.account, stack.region, tpl, stack.path))
    return out


def _machine_findings(stacks: list[StackView], stack_suffix: str) -> list[str]:
    [stack] = [s for s in stacks if s.name.endswith(stack_suffix)]
    [(logical, machine)] = [
        (k, v) for k, v in stack.resources.items() if v["Type"] == "AWS::StepFunctions::StateMachine"
    ]
    result = rule.evaluate(Resource(logical, machine, stack, tuple(stacks)))
    assert isinstance(result, list)
    return result


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_platforms_state_machines_are_authorized(synth: Any, env: str) -> None:
    outdir: Path = synth(env).outdir
    stacks = [s for s in _assembly_stacks(outdir) if Path(s.path).parent == outdir]
    assert _machine_findings(stacks, f"{env}-training") == []


def test_the_job_roles_grants_of_before_are_reported_dev(synth: Any) -> None:
    outdir: Path = synth("dev").outdir
    stacks = _without_asset_listings([s for s in _assembly_stacks(outdir) if Path(s.path).parent == outdir])
    assert _machine_findings(stacks, "dev-training") == [
        "ShardDataset:input:sm_drivers:s3:ListBucket",
        "Train:channel:code:s3:ListBucket",  # the setup's code package, the Defaults state's static.channels
        "Train:channel:sm_drivers:s3:ListBucket",
        # the job on the fallback list (aws-sdk:sagemaker:createTrainingJob) reads the same channels
        "TrainOnPreferences:channel:code:s3:ListBucket",
        "TrainOnPreferences:channel:sm_drivers:s3:ListBucket",
    ]


def test_the_job_roles_grants_of_before_are_reported_prod_prepare_step(synth: Any) -> None:
    outdir: Path = synth("prod").outdir
    stacks = _without_asset_listings([s for s in _assembly_stacks(outdir) if Path(s.path).parent == outdir])
    assert _machine_findings(stacks, "prod-training") == [
        "ShardDataset:input:sm_drivers:s3:ListBucket",
        "Train:channel:code:s3:ListBucket",  # the setup's code package, the Defaults state's static.channels
        "Train:channel:sm_drivers:s3:ListBucket",
        # the job on the fallback list (aws-sdk:sagemaker:createTrainingJob) reads the same channels
        "TrainOnPreferences:channel:code:s3:ListBucket",
        "TrainOnPreferences:channel:sm_drivers:s3:ListBucket",
    ]
