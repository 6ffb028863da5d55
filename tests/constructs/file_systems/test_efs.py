"""GpuEfsFileSystem: encryption, NFS only from client groups, lifecycle, grants, channel, validation."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from unit_helpers import isolated_vpc_stack

from gpu_constructs import ValidationError
from gpu_constructs.file_systems.efs import GpuEfsFileSystem
from stacks.config import ConfigError, parse_config


@pytest.fixture(scope="module")
def efs_fs() -> tuple[GpuEfsFileSystem, assertions.Template]:
    stack, vpc = isolated_vpc_stack()
    fs = GpuEfsFileSystem(stack, "Efs", vpc=vpc)
    client = ec2.SecurityGroup(stack, "Clients", vpc=vpc, allow_all_outbound=False)
    fs.allow_clients(client)
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    fs.grant_read(role)
    return fs, assertions.Template.from_stack(stack)


def test_encrypted_elastic_with_lifecycle_and_backups(efs_fs) -> None:
    _, template = efs_fs
    template.has_resource_properties(
        "AWS::EFS::FileSystem",
        {
            "Encrypted": True,
            "KmsKeyId": assertions.Match.any_value(),
            "ThroughputMode": "elastic",
            "PerformanceMode": "generalPurpose",
            "LifecyclePolicies": [{"TransitionToIA": "AFTER_30_DAYS"}],
            "BackupPolicy": {"Status": "ENABLED"},
        },
    )
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.resource_count_is("AWS::EFS::MountTarget", 2)


def test_nfs_only_from_client_groups(efs_fs) -> None:
    _, template = efs_fs
    ingress = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    assert [(r["FromPort"], r["ToPort"]) for r in ingress] == [(2049, 2049)]
    assert "SourceSecurityGroupId" in ingress[0] and "CidrIp" not in ingress[0]


def test_grant_read_is_client_mount(efs_fs) -> None:
    _, template = efs_fs
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {"PolicyDocument": {"Statement": [assertions.Match.object_like({"Action": "elasticfilesystem:ClientMount"})]}},
    )


def test_channel(efs_fs) -> None:
    fs, _ = efs_fs
    resolved = cdk.Stack.of(fs).resolve(fs.sagemaker_channel("labels", path="/labels", access_mode="ro"))
    source = resolved["DataSource"]["FileSystemDataSource"]
    assert source["FileSystemType"] == "EFS" and source["DirectoryPath"] == "/labels"
    assert resolved["ChannelName"] == "labels" and "Ref" in source["FileSystemId"]
    with pytest.raises(ValidationError, match=r"path='labels' is not allowed; allowed: an absolute path"):
        fs.sagemaker_channel(path="labels")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vpc": None}, r"T/Efs: vpc=None is not allowed"),
        (
            {"throughput_mode": "provisioned"},
            r"throughput_mode='provisioned' is not allowed; allowed: elastic, bursting",
        ),
        ({"performance_mode": "fast"}, r"performance_mode='fast'"),
        (
            {"performance_mode": "maxIO"},
            r"performance_mode='maxIO' is not allowed; allowed: generalPurpose with elastic",
        ),
        ({"transition_to_ia_days": 45}, r"transition_to_ia_days=45 is not allowed; allowed: None or one of"),
    ],
)
def test_bad_input_fails(kwargs, message) -> None:
    stack, vpc = isolated_vpc_stack()
    kwargs.setdefault("vpc", vpc)
    with pytest.raises(ValidationError, match=message):
        GpuEfsFileSystem(stack, "Efs", **kwargs)


def test_config_section() -> None:
    base = "env_name: t\nregion: us-east-1\navailability_zones: [us-east-1a]\n"
    with pytest.raises(ConfigError, match=r"file_systems.efs.transition_to_ia_days: 45: allowed: null or one of"):
        parse_config(base + "file_systems:\n  efs:\n    transition_to_ia_days: 45\n", Path("t.yaml"), "t")
    config = parse_config(base + "file_systems:\n  efs:\n    enabled: true\n", Path("t.yaml"), "t")
    assert config.file_systems.efs.enabled and config.file_systems.efs.throughput_mode == "elastic"
