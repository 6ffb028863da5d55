"""GpuFleet: launch template, auto scaling group, EFA, placement, IAM, Lustre, monitoring, validation."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace as dataclasses_replace
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from constructs import Construct

from gpu_constructs import fleet as fleet_module
from gpu_constructs.constants import DEFAULT_INTERFACE_ENDPOINTS, fleet_endpoints
from gpu_constructs.dlami import DlamiImage
from gpu_constructs.errors import ValidationError
from gpu_constructs.fleet import (
    FleetAlarms,
    FleetCapacity,
    FleetSpotOptions,
    FleetVolumes,
    GpuFleet,
    LustreFileSystemLike,
    LustreMount,
    allow_lustre_clients,
)
from gpu_constructs.fleet import construct as fleet_construct_module
from gpu_constructs.network import NetworkReachability

DNS = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
#: Ships the Lustre client (dlami.LUSTRE_CLIENT_PREINSTALLED): mounts without a package repository.
PYTORCH_UBUNTU_2404 = DlamiImage.from_ssm("pytorch", "ubuntu-24.04", pytorch_version="2.12")
KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


class StandInLustre(Construct):
    """Stands in for the platform's Lustre construct: dns_name, mount_name, connections (TCP 988-1023)."""

    def __init__(self, scope: Construct, construct_id: str, vpc: ec2.IVpc) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(self, "SecurityGroup", vpc=vpc, allow_all_outbound=False)
        self.connections = ec2.Connections(
            security_groups=[self.security_group], default_port=ec2.Port.tcp_range(988, 1023)
        )
        self.dns_name = DNS
        self.mount_name = "abcdefgh"


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))


def _vpc(stack: cdk.Stack, *, endpoints: tuple[str, ...] | None = None) -> ec2.IVpc:
    """An imported isolated VPC with the endpoints a fleet calls (``endpoints``: short names to add)."""
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a", "us-east-1b"],
        isolated_subnet_ids=["subnet-a", "subnet-b"], isolated_subnet_names=["Fleets"],
        isolated_subnet_route_table_ids=["rtb-a", "rtb-b"],
    )  # fmt: skip
    endpoint_sg = ec2.SecurityGroup.from_security_group_id(stack, "EndpointSg", "sg-0123456789abcdef0")
    for name in fleet_endpoints() if endpoints is None else endpoints:
        service = getattr(ec2.InterfaceVpcEndpointAwsService, DEFAULT_INTERFACE_ENDPOINTS[name])
        vpc.add_interface_endpoint(
            f"{name}Endpoint", service=service, private_dns_enabled=True, open=False, security_groups=[endpoint_sg]
        )
    vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
    return vpc


@pytest.fixture(scope="module")
def spot_fleet() -> tuple[GpuFleet, assertions.Template, cdk.Stack]:
    """A dev-like fleet: PyTorch DLAMI, spot mix, data volume, Lustre, shared security group and key."""
    stack = _stack()
    vpc = _vpc(stack)
    volume_key = kms.Key(stack, "VolumeKey", enable_key_rotation=True)
    sg = ec2.SecurityGroup(stack, "FleetSg", vpc=vpc, allow_all_outbound=False)
    lustre = StandInLustre(stack, "Lustre", vpc)
    fleet = GpuFleet(
        stack,
        "Workbench",
        vpc=vpc,
        fleet_name="gpu-dev-workbench",
        instance_type="g5.xlarge",
        image=PYTORCH_UBUNTU_2404,
        volume_key=volume_key,
        security_group=sg,
        capacity=FleetCapacity(max_capacity=2),
        spot=FleetSpotOptions(instance_types=["g5.2xlarge", "g6.xlarge"]),
        volumes=FleetVolumes(data_volume_size=cdk.Size.gibibytes(500)),
        lustre=LustreMount(lustre),
    )
    # A second consumer of the same pair must not duplicate the rules (EC2 rejects duplicates).
    allow_lustre_clients(stack, lustre, sg)
    return fleet, assertions.Template.from_stack(stack), stack


@pytest.fixture(scope="module")
def efa_fleet() -> tuple[GpuFleet, assertions.Template, cdk.Stack]:
    """A prod-like fleet: p5.48xlarge, EFA, cluster placement group, base DLAMI, everything else default."""
    stack = _stack()
    vpc = _vpc(stack)
    fleet = GpuFleet(
        stack,
        "P5",
        vpc=vpc,
        fleet_name="gpu-prod-p5",
        instance_type="p5.48xlarge",
        volume_key=kms.Key.from_key_arn(stack, "ImportedKey", KEY_ARN),
        efa=True,
        placement_group=True,
    )
    return fleet, assertions.Template.from_stack(stack), stack


def _one(template: assertions.Template, kind: str) -> Any:
    found = template.find_resources(kind)
    assert len(found) == 1, sorted(found)
    return next(iter(found.values()))


def _user_data(template: assertions.Template) -> str:
    """The launch template's user data with tokens shown as <...>."""
    data = _one(template, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]
    if isinstance(data, str):
        return data
    return "".join(p if isinstance(p, str) else "<token>" for p in data["Fn::Join"][1])


# --------------------------------------------------------------------------------------------------
# Launch template
# --------------------------------------------------------------------------------------------------


def test_launch_template_security_settings(spot_fleet: Any) -> None:
    _, template, _ = spot_fleet
    data = _one(template, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 2, "HttpTokens": "required",
        "InstanceMetadataTags": "disabled",
    }  # fmt: skip
    assert data["Monitoring"] == {"Enabled": True}
    assert "KeyName" not in data and "KeyPair" not in data
    assert (
        data["NetworkInterfaces"]
        == [
            {
                "AssociatePublicIpAddress": False,
                "DeviceIndex": 0,
                "Groups": [{"Fn::GetAtt": [assertions.Match.any_value(), "GroupId"]}],
            }
        ]
        or data["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is False
    )
    assert data["InstanceType"] == "g5.xlarge"
    assert "IamInstanceProfile" in data


def test_volumes_are_encrypted_gp3_with_the_platform_key(spot_fleet: Any) -> None:
    _, template, stack = spot_fleet
    data = _one(template, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    key_ref = {"Fn::GetAtt": [stack.get_logical_id(stack.node.find_child("VolumeKey").node.default_child), "Arn"]}
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/sda1", "Ebs": {"DeleteOnTermination": True, "Encrypted": True, "KmsKeyId": key_ref,
                                            "VolumeSize": 200, "VolumeType": "gp3"}},
        {"DeviceName": "/dev/sdf", "Ebs": {"DeleteOnTermination": True, "Encrypted": True, "KmsKeyId": key_ref,
                                           "VolumeSize": 500, "VolumeType": "gp3"}},
    ]  # fmt: skip


def test_image_comes_from_the_dlami_ssm_parameter_at_deploy_time(spot_fleet: Any, efa_fleet: Any) -> None:
    for (_, template, _), name in (
        (
            spot_fleet,
            "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.12-ubuntu-24.04/latest/ami-id",
        ),
        (efa_fleet, "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"),
    ):
        params = template.to_json()["Parameters"]
        ssm = [p for p in params.values() if p["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"]
        assert [p["Default"] for p in ssm] == [name]
        image = _one(template, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]["ImageId"]
        assert image["Ref"] in params


def test_pinned_image_is_a_literal_ami_id() -> None:
    stack = _stack()
    GpuFleet(
        stack, "Fleet", vpc=_vpc(stack), fleet_name="pinned", instance_type="g5.xlarge",
        volume_key=kms.Key.from_key_arn(stack, "Key", KEY_ARN),
        image=DlamiImage.pinned({"us-east-1": "ami-0123456789abcdef0"}),
    )  # fmt: skip
    template = assertions.Template.from_stack(stack)
    data = _one(template, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    assert data["ImageId"] == "ami-0123456789abcdef0"
    assert "Parameters" not in template.to_json() or not any(
        p["Type"].startswith("AWS::SSM::Parameter::Value<AWS::EC2") for p in template.to_json()["Parameters"].values()
    )


def test_user_data_renders_the_boot_settings(spot_fleet: Any, efa_fleet: Any) -> None:
    script = _user_data(spot_fleet[1])
    assert script.startswith("#!/bin/bash\n# fleet_boot.sh from gpu_constructs")
    for line in (
        "export FLEET_NAME='gpu-dev-workbench'", "export ASG_NAME='gpu-dev-workbench'",
        "export LIFECYCLE_HOOK_NAME='gpu-boot-check'", "export EXPECTED_GPUS='1'", "export TORCH_CHECK='required'",
        "export TORCH_PYTHON='/opt/pytorch/bin/python'",
        "export LOG_GROUP_NAME='/gpu-platform/fleets/gpu-dev-workbench'",
        f"export LUSTRE_DNS_NAME='{DNS}'", "export LUSTRE_MOUNT_NAME='abcdefgh'", "export LUSTRE_MOUNT_PATH='/fsx'",
        "export LUSTRE_MOUNT_ATTEMPTS='30'", "export LUSTRE_RETRY_SECONDS='10'", "export DATA_MOUNT_PATH='/data'",
    ):  # fmt: skip
        assert line in script, line
    assert "check_nvidia_smi()" in script and "mount_lustre()" in script  # the library is inlined
    efa_script = _user_data(efa_fleet[1])
    assert "export EXPECTED_GPUS='8'" in efa_script and "export TORCH_CHECK='auto'" in efa_script
    assert "TORCH_PYTHON" not in efa_script.split("set -uo pipefail")[0] and "LUSTRE_DNS_NAME='" not in efa_script
    assert len(efa_script.encode()) < fleet_module.USER_DATA_LIMIT_BYTES - 1024


# --------------------------------------------------------------------------------------------------
# Auto scaling group
# --------------------------------------------------------------------------------------------------


def test_group_defaults_spot_mix_hook_and_notifications(spot_fleet: Any) -> None:
    fleet, template, _ = spot_fleet
    group = _one(template, "AWS::AutoScaling::AutoScalingGroup")["Properties"]
    assert group["AutoScalingGroupName"] == "gpu-dev-workbench" == fleet.auto_scaling_group_name
    assert (group["MinSize"], group["MaxSize"]) == ("0", "2") and "DesiredCapacity" not in group
    policy = group["MixedInstancesPolicy"]
    assert [o["InstanceType"] for o in policy["LaunchTemplate"]["Overrides"]] == [
        "g5.xlarge",
        "g5.2xlarge",
        "g6.xlarge",
    ]
    assert policy["InstancesDistribution"] == {
        "OnDemandBaseCapacity": 0, "OnDemandPercentageAboveBaseCapacity": 0,
        "SpotAllocationStrategy": "price-capacity-optimized",
    }  # fmt: skip
    assert group["CapacityRebalance"] is True
    assert (group["HealthCheckType"], group["HealthCheckGracePeriod"]) == ("EC2", 600)
    assert group["LifecycleHookSpecificationList"] == [
        {"DefaultResult": "ABANDON", "HeartbeatTimeout": 1800, "LifecycleHookName": "gpu-boot-check",
         "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"}
    ]  # fmt: skip
    (notification,) = group["NotificationConfigurations"]
    assert sorted(notification["NotificationTypes"]) == [
        "autoscaling:EC2_INSTANCE_LAUNCH", "autoscaling:EC2_INSTANCE_LAUNCH_ERROR",
        "autoscaling:EC2_INSTANCE_TERMINATE", "autoscaling:EC2_INSTANCE_TERMINATE_ERROR",
    ]  # fmt: skip
    assert {"Key": "gpu-platform:fleet", "PropagateAtLaunch": True, "Value": "gpu-dev-workbench"} in group["Tags"]


def test_notifications_topic_and_logs_are_kms_encrypted(spot_fleet: Any) -> None:
    _, template, _ = spot_fleet
    topic = _one(template, "AWS::SNS::Topic")["Properties"]
    assert "KmsMasterKeyId" in topic
    statements = _one(template, "AWS::SNS::TopicPolicy")["Properties"]["PolicyDocument"]["Statement"]
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} for s in statements)
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
    )
    group = _one(template, "AWS::Logs::LogGroup")["Properties"]
    assert group["LogGroupName"] == "/gpu-platform/fleets/gpu-dev-workbench"
    assert group["RetentionInDays"] == 30 and "KmsKeyId" in group


def test_efa_interfaces_one_per_network_card(efa_fleet: Any) -> None:
    fleet, template, _ = efa_fleet
    data = _one(template, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    interfaces = data["NetworkInterfaces"]
    assert fleet.efa_interfaces == 32 == len(interfaces)  # p5.48xlarge: 32 network cards (EC2 user guide)
    assert interfaces[0] == {
        "AssociatePublicIpAddress": False, "DeleteOnTermination": True, "DeviceIndex": 0,
        "Groups": interfaces[0]["Groups"], "InterfaceType": "efa", "NetworkCardIndex": 0,
    }  # fmt: skip
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces[1:]] == [
        (card, 1, "efa-only") for card in range(1, 32)
    ]
    assert all(i["Groups"] == interfaces[0]["Groups"] for i in interfaces)
    assert "SecurityGroupIds" not in data  # with interfaces, groups go on each interface


def test_efa_security_group_allows_all_traffic_within_itself_and_no_ssh(efa_fleet: Any) -> None:
    _, template, _ = efa_fleet
    group = _one(template, "AWS::EC2::SecurityGroup")["Properties"]
    assert {"CidrIp": "0.0.0.0/0", "Description": "HTTPS to AWS APIs (VPC endpoints, S3)", "FromPort": 443,
            "IpProtocol": "tcp", "ToPort": 443} in group["SecurityGroupEgress"]  # fmt: skip
    assert "SecurityGroupIngress" not in group
    (ingress,) = template.find_resources("AWS::EC2::SecurityGroupIngress").values()
    assert ingress["Properties"]["IpProtocol"] == "-1" and "SourceSecurityGroupId" in ingress["Properties"]
    (egress,) = template.find_resources("AWS::EC2::SecurityGroupEgress").values()
    assert egress["Properties"]["IpProtocol"] == "-1" and "DestinationSecurityGroupId" in egress["Properties"]


def test_cluster_placement_group_in_one_az(efa_fleet: Any) -> None:
    _, template, _ = efa_fleet
    assert _one(template, "AWS::EC2::PlacementGroup")["Properties"] == {"Strategy": "cluster"}
    data = _one(template, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]
    assert "GroupName" in data["Placement"]
    group = _one(template, "AWS::AutoScaling::AutoScalingGroup")["Properties"]
    assert group["VPCZoneIdentifier"] == ["subnet-a"]  # the us-east-1a subnet only
    assert "MixedInstancesPolicy" not in group and "LaunchTemplate" in group


def test_imported_volume_key_gets_a_warning(efa_fleet: Any) -> None:
    _, _, stack = efa_fleet
    warnings = assertions.Annotations.from_stack(stack).find_warning(
        "*", assertions.Match.string_like_regexp("volume_key")
    )
    assert len(warnings) == 1 and "EC2 Auto Scaling service-linked role" in str(warnings[0].entry.data)


# --------------------------------------------------------------------------------------------------
# IAM and keys
# --------------------------------------------------------------------------------------------------


def test_instance_role_is_least_privilege(spot_fleet: Any) -> None:
    _, template, _ = spot_fleet
    role = _one(template, "AWS::IAM::Role")["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert "ManagedPolicyArns" not in role  # no AmazonSSMManagedInstanceCore / CloudWatchAgentServerPolicy
    statements = {s["Sid"]: s for s in _one(template, "AWS::IAM::Policy")["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["SessionManagerChannels"]["Action"] == [
        "ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel",
    ]  # fmt: skip
    assert statements["SessionManagerRegistration"]["Action"] == "ssm:UpdateInstanceInformation"
    assert statements["CloudWatchAgentMetrics"]["Condition"] == {"StringEquals": {"cloudwatch:namespace": "CWAgent"}}
    assert statements["CloudWatchAgentLogs"]["Resource"]["Fn::GetAtt"][1] == "Arn"
    signals = statements["BootCheckSignals"]
    assert signals["Action"] == ["autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceHealth"]
    assert json.dumps(signals["Resource"]).endswith(':autoScalingGroup:*:autoScalingGroupName/gpu-dev-workbench"]]}')
    for statement in statements.values():
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        assert not any(a.endswith(":*") or a == "*" for a in actions), statement


def test_volume_key_lets_the_autoscaling_service_linked_role_launch_encrypted_volumes(spot_fleet: Any) -> None:
    _, template, stack = spot_fleet
    keys = template.find_resources("AWS::KMS::Key")
    volume_key = keys[stack.get_logical_id(stack.node.find_child("VolumeKey").node.default_child)]
    statements = {s.get("Sid"): s for s in volume_key["Properties"]["KeyPolicy"]["Statement"]}
    use = statements["AllowAutoScalingServiceLinkedRoleUseOfTheKey"]
    assert sorted(use["Action"]) == [
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:Encrypt",
        "kms:GenerateDataKey*",
        "kms:ReEncrypt*",
    ]
    assert "AWSServiceRoleForAutoScaling" in json.dumps(use["Condition"]["ArnEquals"]["aws:PrincipalArn"])
    assert "kms:CallerAccount" in use["Condition"]["StringEquals"]
    grant = statements["AllowAutoScalingServiceLinkedRoleAttachmentOfPersistentResources"]
    assert grant["Action"] == "kms:CreateGrant" and grant["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": True}
    assert volume_key["Metadata"]["checkov"]["skip"][0]["id"] == "CKV_AWS_33"


def test_monitoring_key_admits_logs_for_the_fleet_group_only(spot_fleet: Any) -> None:
    _, template, _ = spot_fleet
    keys = [
        k
        for k in template.find_resources("AWS::KMS::Key").values()
        if "GPU fleet" in k["Properties"].get("Description", "")
    ]
    (key,) = keys
    logs = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "logs.us-east-1.amazonaws.com"}
    ]
    (statement,) = logs
    arn = json.dumps(statement["Condition"]["ArnEquals"]["kms:EncryptionContext:aws:logs:arn"])
    assert arn.endswith(':log-group:/gpu-platform/fleets/gpu-dev-workbench"]]}')
    assert key["Properties"]["EnableKeyRotation"] is True


# --------------------------------------------------------------------------------------------------
# Lustre
# --------------------------------------------------------------------------------------------------


def test_lustre_traffic_is_opened_once_between_the_groups(spot_fleet: Any) -> None:
    _, template, _ = spot_fleet
    ingress = [i["Properties"] for i in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    egress = [e["Properties"] for e in template.find_resources("AWS::EC2::SecurityGroupEgress").values()]
    lustre_in = [i for i in ingress if (i["FromPort"], i["ToPort"]) == (988, 1023)]
    lustre_out = [e for e in egress if (e["FromPort"], e["ToPort"]) == (988, 1023)]
    # both directions, as the FSx guide lists them: clients -> fs and fs -> clients, ingress and egress
    assert len(lustre_in) == 2 and len(lustre_out) == 2
    assert {i["Description"] for i in lustre_in} == {
        "Lustre LNET from GPU clients",
        "Lustre LNET from the FSx file system",
    }
    assert all("SourceSecurityGroupId" in i and "CidrIp" not in i for i in lustre_in)
    assert not [i for i in ingress if i.get("FromPort") == 22]


def test_lustre_ports_can_be_left_to_the_file_system_owner() -> None:
    stack = _stack()
    vpc = _vpc(stack)
    GpuFleet(
        stack, "Fleet", vpc=vpc, fleet_name="f", instance_type="g5.xlarge",
        volume_key=kms.Key.from_key_arn(stack, "Key", KEY_ARN),
        lustre=LustreMount(StandInLustre(stack, "Lustre", vpc), open_ports=False), image=PYTORCH_UBUNTU_2404,
    )  # fmt: skip
    template = assertions.Template.from_stack(stack)
    rules = {
        **template.find_resources("AWS::EC2::SecurityGroupIngress"),
        **template.find_resources("AWS::EC2::SecurityGroupEgress"),
    }
    assert not [r for r in rules.values() if r["Properties"].get("FromPort") == 988]


def test_lustre_ports_without_a_default_port_are_988_and_1018_to_1023() -> None:
    stack = _stack()
    vpc = _vpc(stack)
    client = ec2.SecurityGroup(stack, "Client", vpc=vpc, allow_all_outbound=False)

    class NoDefaultPort:
        dns_name = DNS
        mount_name = "abcdefgh"
        connections = ec2.Connections(security_groups=[ec2.SecurityGroup(stack, "Fs", vpc=vpc)])

    allow_lustre_clients(stack, NoDefaultPort(), client)
    template = assertions.Template.from_stack(stack)
    ingress = [i["Properties"] for i in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    assert sorted((i["FromPort"], i["ToPort"]) for i in ingress) == [(988, 988), (988, 988), (1018, 1023), (1018, 1023)]


def test_platform_lustre_construct_fits_the_interface() -> None:
    from gpu_constructs.file_systems.fsx import GpuLustreFileSystem

    assert all(
        isinstance(getattr(GpuLustreFileSystem, name), property) for name in ("dns_name", "mount_name", "connections")
    )


# --------------------------------------------------------------------------------------------------
# Monitoring
# --------------------------------------------------------------------------------------------------


def test_alarms_on_gpu_metrics_per_group(spot_fleet: Any) -> None:
    fleet, template, _ = spot_fleet
    alarms = {
        a["Properties"]["AlarmDescription"].split(" ")[0]: a["Properties"]
        for a in template.find_resources("AWS::CloudWatch::Alarm").values()
    }
    by_metric = {a["MetricName"]: a for a in alarms.values()}
    idle = by_metric["nvidia_smi_utilization_gpu"]
    assert (idle["Namespace"], idle["Statistic"], idle["Period"]) == ("CWAgent", "Average", 300)
    assert idle["Dimensions"] == [{"Name": "AutoScalingGroupName", "Value": "gpu-dev-workbench"}]
    assert (idle["ComparisonOperator"], idle["Threshold"], idle["EvaluationPeriods"]) == ("LessThanThreshold", 5, 12)
    assert idle["TreatMissingData"] == "notBreaching"  # min 0: no instances, no data, no alarm
    temperature = by_metric["nvidia_smi_temperature_gpu"]
    assert (temperature["Statistic"], temperature["Threshold"]) == ("Maximum", 85)
    for name in ("XidErrors", "BootFailures"):
        assert by_metric[name]["Namespace"] == "GpuPlatform/Fleets/gpu-dev-workbench"
        assert (by_metric[name]["Statistic"], by_metric[name]["Threshold"]) == ("Sum", 1)
    assert all(len(a["AlarmActions"]) == 1 for a in by_metric.values())
    assert set(fleet.alarms) == {"IdleGpu", "GpuTemperature", "XidErrors", "BootFailures"}


def test_log_metric_filters_for_xid_errors_and_boot_failures(spot_fleet: Any) -> None:
    _, template, _ = spot_fleet
    filters = {
        f["Properties"]["MetricTransformations"][0]["MetricName"]: f["Properties"]
        for f in template.find_resources("AWS::Logs::MetricFilter").values()
    }
    assert filters["XidErrors"]["FilterPattern"] == '"NVRM: Xid"'
    assert filters["BootFailures"]["FilterPattern"] == '"GPU fleet boot FAILED"'
    assert filters["XidErrors"]["MetricTransformations"][0]["MetricNamespace"] == "GpuPlatform/Fleets/gpu-dev-workbench"


def test_dashboard_shows_gpu_metrics_of_the_group(spot_fleet: Any) -> None:
    _, template, stack = spot_fleet
    board = _one(template, "AWS::CloudWatch::Dashboard")["Properties"]
    assert board["DashboardName"] == "gpu-fleet-gpu-dev-workbench"
    body = json.dumps(stack.resolve(board["DashboardBody"]))
    for metric in ("nvidia_smi_utilization_gpu", "nvidia_smi_memory_used", "nvidia_smi_temperature_gpu",
                   "nvidia_smi_power_draw", "GroupInServiceInstances"):  # fmt: skip
        assert metric in body, metric


# --------------------------------------------------------------------------------------------------
# Validation: one test per rule
# --------------------------------------------------------------------------------------------------


def _cheap(**overrides: Any) -> GpuFleet:
    stack = _stack()
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a", "us-east-1b"],
        isolated_subnet_ids=["subnet-1", "subnet-2"],
    )  # fmt: skip
    kwargs: dict[str, Any] = {
        "vpc": vpc, "fleet_name": "f", "instance_type": "g5.xlarge",
        "volume_key": kms.Key.from_key_arn(stack, "Key", KEY_ARN),
    }  # fmt: skip
    kwargs.update(overrides)
    return GpuFleet(stack, "Fleet", **kwargs)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"fleet_name": "Bad_Name"}, r"T/Fleet: fleet_name='Bad_Name' is not allowed; allowed: 1-63 characters"),
        (
            {"capacity": FleetCapacity(min_capacity=3, max_capacity=2)},
            r"min_capacity=3 is not allowed; allowed: 0..max_capacity \(2\)",
        ),
        ({"capacity": FleetCapacity(max_capacity=0)}, r"max_capacity=0 is not allowed; allowed: 1 or more"),
        ({"capacity": FleetCapacity(min_capacity=-1)}, r"min_capacity=-1 is not allowed; allowed: a whole number >= 0"),
        ({"capacity": FleetCapacity(desired_capacity=5)}, r"desired_capacity=5 is not allowed; allowed: None or 0..1"),
        (
            {"instance_type": "m5.xlarge"},
            r"instance_type='m5.xlarge' has no NVIDIA GPU .*Fitting GPU types for ec2: 'g",
        ),
        (
            {"instance_type": "ml.g5.xlarge"},
            r"'ml.g5.xlarge' is not how EC2 spells this type; did you mean 'g5.xlarge'",
        ),
        ({"instance_type": "p3.2xlarge"}, r"'p3.2xlarge' cannot run base DLAMI.*support Turing .* and newer only"),
        (
            {"efa": True},
            r"instance_type='g5.xlarge' does not support EFA; allowed: an EFA-capable type such as g5.8xlarge",
        ),
        (
            {"spot": FleetSpotOptions(instance_types=["g5.12xlarge"])},
            r"spot.instance_types\[\]='g5.12xlarge' is not allowed; allowed: types with 1 GPU\(s\) like 'g5.xlarge'",
        ),
        (
            {"spot": FleetSpotOptions(instance_types=["g5.xlarge"])},
            r"spot.instance_types=\['g5.xlarge'\] is not allowed; allowed: distinct",
        ),
        (
            {"spot": FleetSpotOptions(instance_types=["m5.xlarge"])},
            r"spot.instance_types\[\]='m5.xlarge' has no NVIDIA GPU",
        ),
        (
            {"spot": FleetSpotOptions(allocation_strategy="cheapest")},
            r"spot.allocation_strategy='cheapest' is not allowed",
        ),
        (
            {"spot": FleetSpotOptions(on_demand_percentage_above_base=150)},
            r"on_demand_percentage_above_base=150 is not allowed; allowed: a number in \[0, 100\]",
        ),
        (
            {"instance_type": "p4d.24xlarge", "efa": True, "spot": FleetSpotOptions(instance_types=["p5.48xlarge"])},
            r"spot.instance_types\[\]='p5.48xlarge' is not allowed; allowed: types with 4 EFA interface\(s\)",
        ),
        (
            {"volumes": FleetVolumes(root_volume_size=cdk.Size.gibibytes(50))},
            r"root_volume_size \(GiB\)=50 is not allowed; allowed: a number in \[100, 16384\]",
        ),
        (
            {"volumes": FleetVolumes(data_volume_size=cdk.Size.gibibytes(20000))},
            r"data_volume_size \(GiB\)=20000 is not allowed",
        ),
        (
            {"volumes": FleetVolumes(data_volume_size=cdk.Size.gibibytes(10), data_mount_path="data")},
            r"data_mount_path='data' is not allowed",
        ),
        (
            {"lustre": LustreMount(object())},  # type: ignore[arg-type]
            r"file_system=<object object .*> is not allowed; allowed: an object with dns_name",
        ),
        ({"lustre": {"mount_path": "/"}}, r"lustre_mount_path='/' is not allowed"),
        ({"lustre": {"mount_attempts": 0}}, r"lustre_mount_attempts=0 is not allowed"),
        (
            {"lustre": {"retry_interval": cdk.Duration.minutes(10)}},
            r"lustre_retry_interval \(seconds\)=600",
        ),
        (
            {"torch_check": "required"},
            r"torch_check='required' is not allowed; allowed: 'auto' or 'off' for a base DLAMI",
        ),
        ({"torch_check": "maybe"}, r"torch_check='maybe' is not allowed; allowed: 'required', 'auto', 'off'"),
        ({"alarms": FleetAlarms(idle_gpu_threshold_percent=150)}, r"idle_gpu_threshold_percent=150 is not allowed"),
        (
            {"alarms": FleetAlarms(idle_gpu_period=cdk.Duration.minutes(7))},
            r"idle_gpu_period \(minutes\)=7 is not allowed; allowed: a multiple of 5",
        ),
        ({"alarms": FleetAlarms(max_gpu_temperature_celsius=200)}, r"max_gpu_temperature_celsius=200 is not allowed"),
        (
            {"boot_timeout": cdk.Duration.seconds(10)},
            r"boot_timeout \(seconds\)=10 is not allowed; allowed: a number in \[30, 7200\]",
        ),
        ({"image": DlamiImage.pinned({"us-west-2": "ami-0123456789abcdef0"})}, r"no pinned AMI for region 'us-east-1'"),
        (
            {"placement_group": True, "availability_zone": "us-east-1c"},
            r"availability_zone='us-east-1c' is not allowed; allowed: an AZ of the VPC: us-east-1a, us-east-1b",
        ),
        ({"image": DlamiImage.from_ssm(cpu_arch="arm64")}, r"built for arm64 but 'g5.xlarge' has x86_64 CPUs"),
    ],
)
def test_validation_rules(overrides: dict[str, Any], message: str) -> None:
    if isinstance(overrides.get("lustre"), dict):  # settings of a mount of a stand-in file system
        stack_holder = _stack()
        lustre = LustreMount(StandInLustre(stack_holder, "L", _vpc(stack_holder)), **overrides["lustre"])
        overrides = {**overrides, "lustre": lustre}
    with pytest.raises(ValidationError, match=message):
        _cheap(**overrides)


def test_user_data_limit_is_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_construct_module, "USER_DATA_LIMIT_BYTES", 4096)
    with pytest.raises(ValidationError, match=r"the rendered boot script needs about \d+ bytes; allowed: at most 4096"):
        _cheap()


def test_arm64_instance_gets_the_arm64_dlami_by_default() -> None:
    fleet = _cheap(instance_type="g5g.xlarge")
    assert fleet.image.cpu_arch == "arm64" and fleet.image.ssm_parameter_name.startswith(
        "/aws/service/deeplearning/ami/arm64/"
    )


def test_file_system_without_security_group_is_rejected() -> None:
    stack = _stack()
    vpc = _vpc(stack)

    class NoGroups:
        dns_name = DNS
        mount_name = "abcdefgh"
        connections = ec2.Connections()

    assert isinstance(NoGroups(), LustreFileSystemLike)
    sg = ec2.SecurityGroup(stack, "Sg", vpc=vpc)
    with pytest.raises(ValidationError, match=r"file_system.connections has no security group"):
        allow_lustre_clients(stack, NoGroups(), sg)


def test_render_script_rejects_unsafe_settings() -> None:
    with pytest.raises(ValueError, match=r"contains a single quote"):
        fleet_module.render_script("fleet_boot.sh", {"FLEET_NAME": "it's"})
    with pytest.raises(ValueError, match=r"not an upper-case shell variable name"):
        fleet_module.render_script("fleet_boot.sh", {"fleet-name": "x"})


def test_user_data_is_base64_safe(spot_fleet: Any) -> None:
    script = _user_data(spot_fleet[1])
    assert base64.b64decode(base64.b64encode(script.encode())).decode() == script
    assert "\r" not in script and script.count("#!/bin/bash") == 1


# --------------------------------------------------------------------------------------------------
# Config (fleets.groups): every rule fails before any construct is built, naming key and value
# --------------------------------------------------------------------------------------------------


def _config(groups: list[dict[str, Any]], **fleets: Any) -> Any:
    import yaml

    from stacks.config import parse_config

    doc = {
        "env_name": "dev", "region": "us-east-1", "availability_zones": ["us-east-1a", "us-east-1b"],
        "fleets": {"groups": groups, **fleets},
    }  # fmt: skip
    return parse_config(yaml.safe_dump(doc), Path("config/dev.yaml"))


def test_config_files_define_the_dev_and_prod_fleets() -> None:
    from stacks.config import load_config

    dev, prod = load_config("dev").fleets, load_config("prod").fleets
    assert [(g.name, g.instance_type, g.min_capacity, g.efa) for g in dev.groups] == [
        ("workbench", "g5.xlarge", 0, False)
    ]
    assert dev.groups[0].spot is not None and [n.instance_type for n in dev.notebooks] == ["ml.g5.xlarge"]
    (p5,) = prod.groups
    assert (p5.instance_type, p5.efa, p5.placement_group, p5.min_capacity) == ("p5.48xlarge", True, True, 0)


def test_config_builds_the_image_for_the_cpu_architecture() -> None:
    config = _config([{"name": "arm", "instance_type": "g5g.xlarge", "image": {"os": "amazon-linux-2023"}}])
    image = config.fleets.groups[0].image.image("arm64")
    assert image.ssm_parameter_name == (
        "/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-amazon-linux-2023/latest/ami-id"
    )


G5 = {"name": "w", "instance_type": "g5.xlarge"}


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({**G5, "name": "W!"}, r"fleets.groups.0.name: 'W!': must match \[a-z\]"),
        ({**G5, "instance_type": "m5.xlarge"}, r"instance_type='m5.xlarge' has no NVIDIA GPU"),
        ({**G5, "instance_type": "ml.g5.xlarge"}, r"did you mean 'g5.xlarge'"),
        (
            {**G5, "min_capacity": 2},
            r"fleets.groups\[w\]: min_capacity=2 is not allowed; allowed: 0..max_capacity \(1\)",
        ),
        ({**G5, "max_capacity": 0}, r"max_capacity=0 is not allowed; allowed: 1 or more"),
        ({**G5, "desired_capacity": 4}, r"desired_capacity=4 is not allowed; allowed: None or 0..1"),
        ({**G5, "image": {"framework": "pytorch"}}, r"pytorch_version=None is not allowed"),
        ({**G5, "image": {"framework": "jax"}}, r"fleets.groups.0.image.framework: 'jax'"),
        ({**G5, "instance_type": "p3.2xlarge"}, r"'p3.2xlarge' cannot run base DLAMI .* support Turing"),
        (
            {**G5, "spot": {"instance_types": ["g5.12xlarge"]}},
            r"spot.instance_types\[\]='g5.12xlarge' is not allowed; allowed: types with 1 GPU",
        ),
        (
            {**G5, "spot": {"on_demand_percentage_above_base": 101}},
            r"spot.on_demand_percentage_above_base=101 is not allowed; allowed: a number in \[0, 100\]",
        ),
        (
            {**G5, "spot": {"on_demand_base_capacity": -1}},
            r"spot.on_demand_base_capacity=-1 is not allowed; allowed: a number in \[0, inf\]",
        ),
        ({**G5, "efa": True}, r"instance_type='g5.xlarge' does not support EFA"),
        (
            {"name": "p", "instance_type": "p4d.24xlarge", "efa": True, "spot": {"instance_types": ["p5.48xlarge"]}},
            r"'p5.48xlarge' is not allowed; allowed: types with 4 EFA interface\(s\) like 'p4d.24xlarge'",
        ),
        ({**G5, "root_volume_gib": 50}, r"root_volume_gib=50 is not allowed; allowed: a number in \[100, 16384\]"),
        ({**G5, "data_volume_gib": 20000}, r"data_volume_gib=20000 is not allowed; allowed: a number in \[1, 16384\]"),
        ({**G5, "idle_gpu_percent": 150}, r"idle_gpu_percent=150.0 is not allowed; allowed: a number in \[0, 100\]"),
        ({**G5, "idle_minutes": 7}, r"idle_minutes=7 is not allowed; allowed: a multiple of 5"),
        (
            {**G5, "max_gpu_temperature_c": 200},
            r"max_gpu_temperature_c=200.0 is not allowed; allowed: a number in \[30, 120\]",
        ),
        ({**G5, "availability_zone": "us-east-1a"}, r"availability_zone is set but placement_group is false"),
        ({**G5, "datasets_prefix": "/abs"}, r"datasets_prefix: '/abs': must be a relative S3 key prefix"),
        ({**G5, "sizes": 1}, r"fleets.groups.0.sizes: 1: unknown key"),
    ],
)
def test_config_rules(group: dict[str, Any], message: str) -> None:
    from stacks.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        _config([group])


@pytest.mark.parametrize(
    ("fleets", "message"),
    [
        ({"notebooks": [{"name": "w"}]}, r"names \['w'\] are used more than once"),
        ({"notification_emails": ["ops"]}, r"\['ops'\] are not e-mail addresses"),
        ({"log_retention_days": 13}, r"fleets.log_retention_days: 13: must be one of the CloudWatch Logs retention"),
    ],
)
def test_config_section_rules(fleets: dict[str, Any], message: str) -> None:
    from stacks.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        _config([G5], **fleets)


def test_fleet_stack_rejects_a_placement_zone_outside_the_config() -> None:
    from stacks.config import ConfigError
    from stacks.context import StackContext
    from stacks.fleet_stack import FleetStack

    config = _config([{**G5, "placement_group": True, "availability_zone": "us-east-1c"}])
    with pytest.raises(ConfigError, match=r"fleets.groups\[w\].availability_zone: 'us-east-1c' is not one of the "):
        FleetStack(
            cdk.App(),
            "F",
            context=StackContext.from_config(config),
            fleets=config.fleets,
            lustre_mount_path=config.file_systems.lustre.mount_path,
            network=None,  # type: ignore[arg-type]
            storage=None,  # type: ignore[arg-type]
        )


# --------------------------------------------------------------------------------------------------
# Issue 12: APIs the boot script and agents call, the Lustre client, the file system's zone
# --------------------------------------------------------------------------------------------------


class ZonedLustre(StandInLustre):
    """A Lustre file system that reports its Availability Zone, like the platform's construct."""

    availability_zone = "us-east-1a"


def _fleet(stack: cdk.Stack, vpc: ec2.IVpc, **kwargs: Any) -> GpuFleet:
    kwargs.setdefault("instance_type", "g5.xlarge")
    kwargs.setdefault("image", PYTORCH_UBUNTU_2404)
    return GpuFleet(
        stack, "F", vpc=vpc, fleet_name="f", volume_key=kms.Key(stack, "K", enable_key_rotation=True), **kwargs
    )


def test_isolated_vpc_without_the_autoscaling_endpoint_fails_synth() -> None:
    stack = _stack()
    vpc = _vpc(stack, endpoints=("logs", "monitoring", "ssm", "ssm_messages", "ec2_messages"))
    _fleet(stack, vpc)
    errors = [str(e) for e in stack.node.find_all() for e in e.node.validate()]
    assert len(errors) == 1, errors
    assert "boot signals (lifecycle hook, instance health) calls com.amazonaws.us-east-1.autoscaling" in errors[0]
    assert "add the interface endpoint com.amazonaws.us-east-1.autoscaling" in errors[0]
    assert "nat_gateways >= 1" in errors[0]
    with pytest.raises(Exception, match=r"com\.amazonaws\.us-east-1\.autoscaling"):
        stack.node.root.synth()


def test_declared_reachability_is_checked_when_the_fleet_is_built() -> None:
    stack = _stack()
    reach = NetworkReachability.of("logs", "monitoring", "s3", "ssm", "ssm_messages", "ec2_messages")
    with pytest.raises(ValidationError, match=r"T/F: boot signals.*autoscaling.*\(reachability: declared"):
        _fleet(stack, _vpc(stack, endpoints=()), reachability=reach)
    ok = NetworkReachability.of(*fleet_endpoints(), "s3")
    _fleet(_stack(), _vpc(_stack(), endpoints=()), reachability=ok)
    _fleet(_stack(), _vpc(_stack(), endpoints=()), reachability=NetworkReachability(internet=True))


def test_base_ubuntu_fleet_mounting_lustre_without_nat_is_refused() -> None:
    stack = _stack()
    with pytest.raises(
        ValidationError,
        match=r"Lustre client install \(fsx-apt-repository, ubuntu-22\.04.*"
        r"needs a package repository on the internet; allowed: a NAT path",
    ):
        lustre = LustreMount(StandInLustre(stack, "L", _vpc(_stack(), endpoints=())))
        _fleet(stack, _vpc(stack, endpoints=()), lustre=lustre,
               image=DlamiImage.from_ssm(), reachability=NetworkReachability.of(*fleet_endpoints(), "s3"))  # fmt: skip


def test_lustre_client_install_routes() -> None:
    stack = _stack()
    vpc = _vpc(stack, endpoints=())
    lustre = StandInLustre(stack, "L", vpc)
    private = NetworkReachability.of(*fleet_endpoints(), "s3")
    # The PyTorch 2.12 Ubuntu 24.04 DLAMI ships the client; AL2023 installs it from the Region's S3 repositories.
    pytorch = DlamiImage.from_ssm("pytorch", "ubuntu-24.04", pytorch_version="2.12")
    assert pytorch.lustre_client_install == "preinstalled"
    _fleet(stack, vpc, image=pytorch, lustre=LustreMount(lustre), reachability=private)
    al2023 = DlamiImage.from_ssm("base", "amazon-linux-2023")
    fleet = GpuFleet(stack, "Al", vpc=vpc, fleet_name="al", instance_type="g5.xlarge", image=al2023,
                     volume_key=kms.Key(stack, "K2"), lustre=LustreMount(lustre), reachability=private)  # fmt: skip
    assert any(services == ("s3",) for services in fleet.required_services.values())
    with pytest.raises(ValidationError, match=r"Lustre client install \(amazon-linux-repository.*calls com\.amazonaws"
                       r"\.us-east-1\.s3.*add the gateway endpoint"):  # fmt: skip
        GpuFleet(stack, "Al2", vpc=vpc, fleet_name="al2", instance_type="g5.xlarge", image=al2023,
                 volume_key=kms.Key(stack, "K3"), lustre=LustreMount(lustre),
                 reachability=NetworkReachability.of(*fleet_endpoints()))  # fmt: skip


def test_pytorch_line_whose_notes_list_no_lustre_client_is_refused_without_nat() -> None:
    """The old dev fleet: PyTorch 2.9 on Ubuntu 24.04, no NAT. Its release notes list no Lustre client, so the
    boot script would have to install it from the FSx apt repository on the internet: refused at synth."""
    stack = _stack()
    vpc = _vpc(stack, endpoints=())
    old_dev = DlamiImage.from_ssm("pytorch", "ubuntu-24.04", pytorch_version="2.9")
    assert old_dev.lustre_client_install == "fsx-apt-repository"
    with pytest.raises(ValidationError) as caught:
        _fleet(stack, vpc, image=old_dev, lustre=LustreMount(StandInLustre(stack, "L", vpc)),
               reachability=NetworkReachability.of(*fleet_endpoints(), "s3"))  # fmt: skip
    assert caught.value.where == "T/F"
    assert str(caught.value) == (
        "T/F: Lustre client install (fsx-apt-repository, ubuntu-24.04: the DLAMI pytorch 2.9 ubuntu-24.04 x86_64 "
        "does not ship it) needs a package repository on the internet; allowed: a NAT path for the fleet's "
        "subnets (config network.nat_gateways >= 1, GpuNetwork(nat_gateways=...)), or an image that ships the "
        "client: a DLAMI line whose release notes list it (framework='pytorch' pytorch_version='2.11' "
        "os='ubuntu-24.04' cpu_arch='x86_64', framework='pytorch' pytorch_version='2.12' os='ubuntu-24.04' "
        "cpu_arch='x86_64'; config fleets.groups[].image), or a pinned image built with it "
        "(DlamiImage.pinned(..., lustre_client_preinstalled=True)) "
        "(reachability: declared: endpoints [autoscaling, ec2_messages, logs, monitoring, s3, ssm, ssm_messages], "
        "no NAT or internet path)"
    )


def test_pytorch_line_without_the_client_installs_it_at_boot_with_a_nat_path() -> None:
    stack = _stack()
    vpc = _vpc(stack, endpoints=())
    old_dev = DlamiImage.from_ssm("pytorch", "ubuntu-24.04", pytorch_version="2.9")
    fleet = _fleet(stack, vpc, image=old_dev, lustre=LustreMount(StandInLustre(stack, "L", vpc)),
                   reachability=NetworkReachability(internet=True))  # fmt: skip
    assert fleet.required_services[
        "Lustre client install (fsx-apt-repository, ubuntu-24.04: the DLAMI pytorch 2.9 ubuntu-24.04 x86_64 "
        "does not ship it)"
    ] == ("internet",)
    # The confirmed lines need nothing beyond the fleet's own endpoints.
    shipped = _fleet(_stack(), _vpc(_stack(), endpoints=()), lustre=LustreMount(StandInLustre(stack, "L2", vpc)),
                     reachability=NetworkReachability.of(*fleet_endpoints(), "s3"))  # fmt: skip
    assert not [feature for feature in shipped.required_services if feature.startswith("Lustre client install")]


def test_fleet_mounting_lustre_launches_in_the_file_system_zone() -> None:
    stack = _stack()
    vpc = _vpc(stack)
    _fleet(stack, vpc, lustre=LustreMount(ZonedLustre(stack, "L", vpc)))
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::AutoScaling::AutoScalingGroup", {"VPCZoneIdentifier": ["subnet-a"]})
    assert not assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.string_like_regexp("Lustre"))


def test_fleet_allowed_in_other_zones_warns_with_cost_and_latency() -> None:
    stack = _stack()
    vpc = _vpc(stack)
    _fleet(stack, vpc, lustre=LustreMount(ZonedLustre(stack, "L", vpc), same_zone=False))
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::AutoScaling::AutoScalingGroup", {"VPCZoneIdentifier": ["subnet-a", "subnet-b"]}
    )
    warnings = assertions.Annotations.from_stack(stack).find_warning(
        "*", assertions.Match.string_like_regexp("FSx for Lustre file system in us-east-1a")
    )
    assert len(warnings) == 1
    text = str(warnings[0].entry.data)
    assert "us-east-1b" in text and "inter-AZ data transfer" in text and "latency" in text


def test_placement_group_in_another_zone_than_the_file_system_warns() -> None:
    stack = _stack()
    vpc = _vpc(stack)
    _fleet(stack, vpc, instance_type="p5.48xlarge", efa=True, placement_group=True,
           availability_zone="us-east-1b", lustre=LustreMount(ZonedLustre(stack, "L", vpc)))  # fmt: skip
    annotations = assertions.Annotations.from_stack(stack)
    assert annotations.find_warning("*", assertions.Match.string_like_regexp("may launch instances in us-east-1b"))


# --------------------------------------------------------------------------------------------------
# Deprecated names: each warns, naming its replacement, and still works for one release
# --------------------------------------------------------------------------------------------------

#: A value of each deprecated flat keyword (the Lustre file system is filled in by the test).
_FLAT_VALUES: dict[str, Any] = {
    "min_capacity": 1,
    "max_capacity": 3,
    "desired_capacity": 2,
    "root_volume_size": cdk.Size.gibibytes(300),
    "data_volume_size": cdk.Size.gibibytes(100),
    "data_mount_path": "/scratch",
    "open_lustre_ports": False,
    "lustre_mount_path": "/lustre",
    "same_zone_as_file_system": False,
    "lustre_mount_attempts": 5,
    "lustre_retry_interval": cdk.Duration.seconds(3),
    "idle_gpu_threshold_percent": 10,
    "idle_gpu_period": cdk.Duration.minutes(30),
    "max_gpu_temperature_celsius": 90,
}


def _flat_fleet_template(stack: cdk.Stack, vpc: ec2.IVpc, **keywords: Any) -> dict[str, Any]:
    _fleet(stack, vpc, image=PYTORCH_UBUNTU_2404, **keywords)
    return assertions.Template.from_stack(stack).to_json()


def test_flat_keywords_warn_and_give_the_same_fleet_as_the_value_types() -> None:
    """Every deprecated flat keyword at once builds the template its value types build."""
    from gpu_constructs.fleet.flat_keywords import FLAT_KEYWORDS

    old = _stack()
    old_vpc = _vpc(old)
    with pytest.warns(DeprecationWarning) as caught:
        old_template = _flat_fleet_template(old, old_vpc, file_system=ZonedLustre(old, "L", old_vpc), **_FLAT_VALUES)
    warned = {str(w.message).split("(", 1)[1].split("=", 1)[0] for w in caught}
    assert warned == set(FLAT_KEYWORDS)
    message = next(str(w.message) for w in caught if "(min_capacity=" in str(w.message))
    assert message.startswith("GpuFleet(min_capacity=...) is deprecated")
    assert message.endswith("use capacity=FleetCapacity(min_capacity=...)")
    new = _stack()
    new_vpc = _vpc(new)
    new_template = _flat_fleet_template(
        new,
        new_vpc,
        capacity=FleetCapacity(min_capacity=1, max_capacity=3, desired_capacity=2),
        volumes=FleetVolumes(cdk.Size.gibibytes(300), cdk.Size.gibibytes(100), "/scratch"),
        lustre=LustreMount(
            ZonedLustre(new, "L", new_vpc),
            mount_path="/lustre",
            open_ports=False,
            same_zone=False,
            mount_attempts=5,
            retry_interval=cdk.Duration.seconds(3),
        ),
        alarms=FleetAlarms(10, cdk.Duration.minutes(30), 90),
    )
    assert old_template == new_template


@pytest.mark.parametrize("old", sorted(_FLAT_VALUES))
def test_each_flat_keyword_maps_onto_its_value_type(old: str) -> None:
    from gpu_constructs.fleet.flat_keywords import FLAT_KEYWORDS, FleetSettings, fold_flat_keywords

    keyword, field = FLAT_KEYWORDS[old]
    stack = _stack()
    file_system = StandInLustre(stack, "L", _vpc(stack))
    flat = {old: _FLAT_VALUES[old], **({"file_system": file_system} if keyword == "lustre" else {})}
    with pytest.warns(DeprecationWarning) as caught:
        folded = fold_flat_keywords("T/F", FleetSettings(None, None, None, None), flat)
    assert any(re.match(rf"GpuFleet\({old}=\.\.\.\) is deprecated.*use {keyword}=", str(w.message)) for w in caught)
    assert getattr(getattr(folded, keyword), field) == _FLAT_VALUES[old]


def test_a_flat_keyword_with_its_value_type_is_refused_and_an_unknown_one_is_a_type_error() -> None:
    with pytest.raises(ValidationError, match=r"'min_capacity' and 'capacity' are the same setting; give only capa"):
        _cheap(capacity=FleetCapacity(), min_capacity=1)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'min_capacty'"):
        _cheap(min_capacty=1)


def test_deprecated_fleet_alarm_thresholds_give_fleet_alarms() -> None:
    with pytest.warns(DeprecationWarning, match=r"FleetAlarmThresholds is deprecated.*use .*FleetAlarms"):
        alarms = fleet_module.FleetAlarmThresholds(10, 30, 90)
    assert isinstance(alarms, FleetAlarms) and alarms.idle_gpu_period is not None
    assert (alarms.idle_gpu_threshold_percent, alarms.idle_gpu_period.to_minutes()) == (10, 30)
    assert alarms.max_gpu_temperature_celsius == 90


def test_deprecated_check_verbs_warn_and_still_validate() -> None:
    from gpu_constructs.file_systems import lustre_mount

    image = DlamiImage.from_ssm()
    instance = image.check_instance_type("g5.xlarge", where="w")
    with (
        pytest.warns(DeprecationWarning, match=r"FleetCapacity.check is deprecated.*use FleetCapacity.validate"),
        pytest.raises(ValidationError, match="max_capacity=0"),
    ):
        FleetCapacity(max_capacity=0).check("w")
    with (
        pytest.warns(DeprecationWarning, match=r"FleetVolumes.check is deprecated.*use FleetVolumes.validate"),
        pytest.raises(ValidationError, match=r"root_volume_size \(GiB\)=50"),
    ):
        FleetVolumes(root_volume_size=cdk.Size.gibibytes(50)).check("w")
    with pytest.warns(DeprecationWarning, match=r"FleetSpotOptions.check is deprecated.*FleetSpotOptions.validate"):
        assert FleetSpotOptions(instance_types=["g6.xlarge"]).check("w", instance, image) == ("g6.xlarge",)
    stack = _stack()
    mount = LustreMount(StandInLustre(stack, "L", _vpc(stack)), mount_attempts=30)
    with (
        pytest.warns(DeprecationWarning, match=r"LustreMount.check is deprecated.*use LustreMount.validate"),
        pytest.raises(ValidationError, match=r"x lustre_retry_interval \(seconds\)=300"),
    ):
        dataclasses_replace(mount, retry_interval=cdk.Duration.seconds(10)).check("w", max_wait_seconds=240)
    with (
        pytest.warns(DeprecationWarning, match=r"lustre_mount.check_mount_path is deprecated.*is_mount_path"),
        pytest.raises(ValidationError, match=r"p='/' is not allowed"),
    ):
        lustre_mount.check_mount_path("w", "p", "/")
    with (
        pytest.warns(DeprecationWarning, match=r"lustre_mount.check_file_system is deprecated.*LustreMount.validate"),
        pytest.raises(ValidationError, match=r"file_system=1 is not allowed"),
    ):
        lustre_mount.check_file_system("w", 1)


def test_the_deprecated_idle_gpu_pct_key_still_loads_with_a_warning() -> None:
    """``fleets.groups[].idle_gpu_pct`` is ``idle_gpu_percent`` (the library's ``FleetAlarms`` name); a file with the
    old key keeps loading for one release."""
    from stacks.config.fleets import FleetGroupConfig

    with pytest.warns(DeprecationWarning, match=r"fleets\.groups\[\]\(idle_gpu_pct=\.\.\.\) is deprecated"):
        group = FleetGroupConfig.model_validate({**G5, "idle_gpu_pct": 7})
    assert group.idle_gpu_percent == 7
