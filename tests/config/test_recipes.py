"""The cross-cutting recipes, one helper each: KMS key, cluster security group, token check, wildcard
acknowledgment, file-system id and the image protocol."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from gpu_constructs import GpuImage, nag
from gpu_constructs.errors import is_token
from gpu_constructs.file_systems.fsx_facts import FILE_SYSTEM_ID_RE, is_file_system_id, sagemaker_channel
from gpu_constructs.images import ImageLike
from gpu_constructs.keys import new_key, pending_window
from gpu_constructs.security_groups import INTRA_GROUP_REASON, cluster_security_group

REASON = "Safe because the test grants exactly this on purpose"


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "S", env=cdk.Environment(account="111122223333", region="us-east-1"))


# -- KMS key ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "days", "deletion"),
    [(cdk.RemovalPolicy.RETAIN, 30, "Retain"), (cdk.RemovalPolicy.DESTROY, 7, "Delete")],
)
def test_new_key_rotation_window_and_removal(policy: cdk.RemovalPolicy, days: int, deletion: str) -> None:
    stack = _stack()
    key = new_key(stack, "Key", description="Encrypts the test", removal_policy=policy)
    assert isinstance(key, kms.Key) and pending_window(policy).to_days() == days
    template = assertions.Template.from_stack(stack)
    template.has_resource(
        "AWS::KMS::Key",
        {
            "Properties": {"Description": "Encrypts the test", "EnableKeyRotation": True, "PendingWindowInDays": days},
            "DeletionPolicy": deletion,
        },
    )


def test_new_key_defaults_to_retain() -> None:
    stack = _stack()
    new_key(stack, "Key", description="Encrypts the test")
    assertions.Template.from_stack(stack).has_resource(
        "AWS::KMS::Key", {"Properties": {"PendingWindowInDays": 30}, "DeletionPolicy": "Retain"}
    )


# -- cluster security group -------------------------------------------------------------------------


def _vpc(stack: cdk.Stack) -> ec2.Vpc:
    return ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0, restrict_default_security_group=False)


def test_cluster_group_https_egress_and_all_traffic_within() -> None:
    stack = _stack()
    group = cluster_security_group(stack, "Group", vpc=_vpc(stack), description="d", internal="NCCL within")
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::EC2::SecurityGroup",
        {
            "GroupDescription": "d",
            "SecurityGroupEgress": [
                {"CidrIp": "0.0.0.0/0", "FromPort": 443, "ToPort": 443, "IpProtocol": "tcp",
                 "Description": "HTTPS to AWS APIs (VPC endpoints, S3)"}
            ],
        },
    )  # fmt: skip
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress", {"IpProtocol": "-1", "Description": "NCCL within"}
    )
    ingress = group.node.find_child(f"from {cdk.Names.unique_id(group)}:ALL TRAFFIC")
    assert ingress is not None
    assert INTRA_GROUP_REASON.startswith("Safe because")


def test_cluster_group_without_internal_rule_or_egress() -> None:
    stack = _stack()
    cluster_security_group(stack, "Group", vpc=_vpc(stack), description="d", https_egress=None)
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::SecurityGroupIngress", 0)
    egress = template.find_resources("AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": "d"}})
    (group,) = egress.values()
    # allow_all_outbound=False with no rule: the CDK writes its "disallow all traffic" placeholder.
    assert group["Properties"]["SecurityGroupEgress"][0]["CidrIp"] == "255.255.255.255/32"


def test_cluster_group_internal_ports() -> None:
    stack = _stack()
    cluster_security_group(
        stack, "Group", vpc=_vpc(stack), description="d", https_egress=None, internal="Lustre",
        internal_ports=[ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023)],
    )  # fmt: skip
    assertions.Template.from_stack(stack).resource_count_is("AWS::EC2::SecurityGroupIngress", 2)


# -- token check ------------------------------------------------------------------------------------


def test_is_token_strings_numbers_and_list_elements() -> None:
    assert not is_token(None) and not is_token(True) and not is_token("fs-0123") and not is_token(3)
    assert not is_token(["${Token[X.1]}"])  # only scalars are checked
    assert is_token("${Token[AWS.AccountId.1]}") and is_token("prefix-${Token[TOKEN.7]}")
    assert is_token(cdk.Aws.ACCOUNT_ID)
    assert is_token(cdk.Token.as_number(cdk.Fn.ref("X")))
    assert is_token(cdk.Token.as_list(cdk.Fn.ref("Y"))[0])  # "#{Token[...]}"


# -- file system id ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("fs-01234567", True),
        ("fs-0123456789abcdef0", True),
        ("fs-0123456789abcdef01", True),  # 18 hex digits: length 21, the FSx API maximum
        ("fs-0123456789abcdef012", False),  # length 22
        ("fs-0123456", False),
        ("fs-0123456789ABCDEF0", False),
        ("12345", False),
        (None, False),
    ],
)
def test_file_system_id_follows_the_fsx_api(value: str | None, ok: bool) -> None:
    assert is_file_system_id(value) is ok
    assert FILE_SYSTEM_ID_RE.pattern == r"^fs-[0-9a-f]{8,18}$"


def test_sagemaker_channel_accepts_a_token_id_and_names_the_rule() -> None:
    channel = sagemaker_channel(
        channel_name="train",
        file_system_id="${Token[TOKEN.9]}",
        directory_path="/fsx/data",
        file_system_type="FSxLustre",
    )
    assert channel["DataSource"]["FileSystemDataSource"]["FileSystemId"] == "${Token[TOKEN.9]}"
    with pytest.raises(ValueError, match="8 to 18 lowercase hex digits"):
        sagemaker_channel(
            channel_name="train", file_system_id="fs-xyz", directory_path="/fsx/data", file_system_type="FSxLustre"
        )


# -- image protocol ---------------------------------------------------------------------------------


def test_gpu_image_is_the_image_protocol() -> None:
    image = GpuImage(
        image_uri="123.dkr.ecr.us-east-1.amazonaws.com/x:1", usage="training", cuda_version=None, kind="ecr"
    )
    assert isinstance(image, ImageLike)
    assert not isinstance(object(), ImageLike)


# -- wildcard acknowledgment ------------------------------------------------------------------------


def _policy(stack: cdk.Stack, *statements: iam.PolicyStatement) -> iam.Policy:
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    policy = iam.Policy(stack, "Policy", statements=list(statements))
    policy.attach_to_role(role)
    return policy


def _acks(validation: nag.WildcardAcknowledgment, policy: iam.Policy) -> dict[str, str]:
    cfn = policy.node.default_child
    assert isinstance(cfn, iam.CfnPolicy)
    stack = cdk.Stack.of(policy)
    return validation.expected_findings(stack.resolve(cfn.policy_document), stack)


def test_wildcard_findings_of_allow_statements_only() -> None:
    statements = [
        {"Effect": "Allow", "Action": ["s3:GetObject*", "s3:ListBucket"], "Resource": "arn:aws:s3:::b/data/*"},
        {"Effect": "Deny", "Action": "kms:*", "Resource": "*"},
    ]
    assert nag.wildcard_findings(statements) == {"Action::s3:GetObject*", "Resource::arn:aws:s3:::b/data/*"}
    assert nag.star_resource_actions(statements) == set()


def test_patterns_and_star_actions_acknowledge_only_what_matches() -> None:
    stack = _stack()
    policy = _policy(
        stack,
        iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::b/data/*", "arn:aws:s3:::b/other/*"]),
        iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
    )
    validation = nag.acknowledge_wildcards(
        policy,
        [(r"Resource::arn:aws:s3:::b/data/\*", REASON)],
        star_actions={"ecr:GetAuthorizationToken"},
        star_reason=REASON,
    )
    assert _acks(validation, policy) == {"Resource::arn:aws:s3:::b/data/*": REASON, "Resource::*": REASON}


def test_star_resource_stays_reported_when_another_action_is_on_star() -> None:
    stack = _stack()
    policy = _policy(stack, iam.PolicyStatement(actions=["ecr:GetAuthorizationToken", "s3:PutObject"], resources=["*"]))
    validation = nag.acknowledge_wildcards(policy, star_actions={"ecr:GetAuthorizationToken"}, star_reason=REASON)
    assert _acks(validation, policy) == {}


def test_expected_statements_keys_and_function() -> None:
    stack = _stack()
    key = kms.Key(stack, "Key")
    data = iam.PolicyStatement(actions=["s3:GetObject*"], resources=["arn:aws:s3:::b/data/*"])
    star = iam.PolicyStatement(actions=["cloudwatch:PutMetricData"], resources=["*"])
    key_use = iam.PolicyStatement(actions=["kms:GenerateDataKey*"], resources=[key.key_arn])
    other = iam.PolicyStatement(actions=["s3:List*"], resources=["arn:aws:s3:::c"])
    policy = _policy(stack, data, star, key_use, other)
    validation = nag.WildcardAcknowledgment(policy, expected=lambda doc, _stack: {"Action::s3:List*": "function says"})
    validation.expect(data, REASON)
    validation.expect(star, REASON + " (star)")
    validation.expect_key_actions(key, REASON + " (key)")
    assert _acks(validation, policy) == {
        "Action::s3:GetObject*": REASON,
        "Resource::arn:aws:s3:::b/data/*": REASON,
        "Resource::*": REASON + " (star)",
        "Action::kms:GenerateDataKey*": REASON + " (key)",
        "Action::s3:List*": "function says",
    }
    with pytest.raises(ValueError, match="reason="):
        validation.expect(data, "too short")


def test_acknowledgments_land_on_the_l1_policy_at_validation() -> None:
    stack = _stack()
    policy = _policy(stack, iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::b/data/*"]))
    nag.acknowledge_wildcards(policy, [(r"Resource::arn:aws:s3:::b/data/\*", REASON)])
    assert policy.node.validate() == []  # runs the acknowledgment once
    assert policy.node.validate() == []
    with pytest.raises(ValueError, match="reason="):
        nag.acknowledge_wildcards(policy, [(r"Resource::.*", "no reason given")])
