"""GpuEndpoint's model and permissions: the container, the execution role, invoke grants, content-hashed
immutable resources and the cdk-nag wildcard acknowledgements (on the shared four-endpoint stack).
"""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from endpoint_helpers import (
    HASHED_ID,
    MODEL_KEY,
    REGION,
    Built,
    built_endpoints,
)

from gpu_constructs.endpoint import (
    expected_wildcard_findings,
    flatten_reference,
)


@pytest.fixture(scope="module")
def built() -> Built:
    return built_endpoints()


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
