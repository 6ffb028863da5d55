"""GpuNetwork and the network stack: VPC, subnets, endpoints, flow logs, security groups."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2

from gpu_constructs import GpuNetwork, ValidationError


@pytest.fixture(scope="module")
def dev(synth):
    return assertions.Template.from_json(synth("dev").template("network"))


@pytest.fixture(scope="module")
def prod(synth):
    return assertions.Template.from_json(synth("prod").template("network"))


def test_vpc_uses_configured_azs_and_cidr(dev: assertions.Template) -> None:
    dev.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.20.0.0/16", "EnableDnsHostnames": True})
    azs = assertions.Capture()
    dev.has_resource_properties("AWS::EC2::Subnet", {"AvailabilityZone": azs})
    subnets = dev.find_resources("AWS::EC2::Subnet")
    assert {s["Properties"]["AvailabilityZone"] for s in subnets.values()} == {"us-east-1a", "us-east-1b"}
    # training, endpoints, fleets x 2 AZs; no public subnets without NAT
    assert len(subnets) == 6
    assert all(s["Properties"]["MapPublicIpOnLaunch"] is False for s in subnets.values())


def test_dev_has_no_internet_path(dev: assertions.Template) -> None:
    dev.resource_count_is("AWS::EC2::NatGateway", 0)
    dev.resource_count_is("AWS::EC2::InternetGateway", 0)


def test_prod_has_nat_per_az(prod: assertions.Template) -> None:
    prod.resource_count_is("AWS::EC2::NatGateway", 3)
    subnets = prod.find_resources("AWS::EC2::Subnet")
    assert {s["Properties"]["AvailabilityZone"] for s in subnets.values()} == {
        "us-west-2a",
        "us-west-2b",
        "us-west-2c",
    }
    assert len(subnets) == 12  # public (NAT only) + 3 private groups, x 3 AZs
    assert all(s["Properties"]["MapPublicIpOnLaunch"] is False for s in subnets.values())


def test_flow_logs_to_encrypted_log_group(dev: assertions.Template) -> None:
    dev.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"})
    dev.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "RetentionInDays": 30,
            "KmsKeyId": {"Fn::GetAtt": [assertions.Match.string_like_regexp("FlowLogsKey"), "Arn"]},
        },
    )
    dev.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_prod_flow_logs_retention(prod: assertions.Template) -> None:
    prod.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 365})


def test_gateway_and_interface_endpoints(dev: assertions.Template) -> None:
    endpoints = dev.find_resources("AWS::EC2::VPCEndpoint")
    types = [e["Properties"].get("VpcEndpointType", "Gateway") for e in endpoints.values()]
    assert types.count("Gateway") == 1 and types.count("Interface") == 11
    names = sorted(str(e["Properties"]["ServiceName"]) for e in endpoints.values())
    for service in ("sagemaker.api", "sagemaker.runtime", "ecr.api", "ecr.dkr", ".logs", "monitoring", "sts",
                    "kms", ".ssm", "ssmmessages", "ec2messages", ".s3"):  # fmt: skip
        assert any(service in n for n in names), f"missing endpoint {service}: {names}"
    interface = [e for e in endpoints.values() if e["Properties"].get("VpcEndpointType") == "Interface"]
    assert all(e["Properties"]["PrivateDnsEnabled"] is True for e in interface)


def test_endpoint_sg_admits_https_only_from_workload_groups(dev: assertions.Template) -> None:
    ingress = dev.find_resources("AWS::EC2::SecurityGroupIngress")
    https = [i["Properties"] for i in ingress.values() if i["Properties"].get("FromPort") == 443]
    assert len(https) == 3
    assert all("SourceSecurityGroupId" in p and "CidrIp" not in p for p in https)
    # no ingress from any CIDR anywhere
    groups = dev.find_resources("AWS::EC2::SecurityGroup")
    for group in groups.values():
        for rule in group["Properties"].get("SecurityGroupIngress", []):
            assert "CidrIp" not in rule, rule


def test_workload_groups_have_https_egress_only_and_intra_group_traffic(dev: assertions.Template) -> None:
    groups = dev.find_resources("AWS::EC2::SecurityGroup")
    workload = {k: v for k, v in groups.items() if "VpcEndpoint" not in k}
    assert len(workload) == 3
    for group in workload.values():
        egress = group["Properties"]["SecurityGroupEgress"]
        assert {"CidrIp": "0.0.0.0/0", "Description": "HTTPS to AWS APIs (VPC endpoints, S3)",
                "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443} in egress  # fmt: skip
        assert all(e.get("IpProtocol") != "-1" or "DestinationSecurityGroupId" in e for e in egress)
    self_rules = [
        i for i in dev.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if i["Properties"]["IpProtocol"] == "-1"
    ]  # fmt: skip
    assert len(self_rules) == 2  # training + fleets; endpoints need no intra-group traffic


def test_default_security_group_is_restricted(dev: assertions.Template) -> None:
    dev.resource_count_is("Custom::VpcRestrictDefaultSG", 1)


# -- construct validation ----------------------------------------------------------------------------


def _stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))


def test_unknown_interface_endpoint_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"T/Net: interface_endpoints=\['s3_api'\].*allowed: sagemaker_api"):
        GpuNetwork(_stack(), "Net", availability_zones=["us-east-1a"], interface_endpoints=["s3_api"])


def test_too_many_nat_gateways_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"T/Net: nat_gateways=3 is not allowed; allowed: 0..2"):
        GpuNetwork(_stack(), "Net", availability_zones=["us-east-1a", "us-east-1b"], nat_gateways=3)


def test_bad_subnet_mask_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"subnet_cidr_mask=30 is not allowed; allowed: 16..28"):
        GpuNetwork(_stack(), "Net", availability_zones=["us-east-1a"], subnet_cidr_mask=30)


def test_new_vpc_needs_azs() -> None:
    with pytest.raises(ValidationError, match="availability_zones is required"):
        GpuNetwork(_stack(), "Net")


def test_adopts_an_existing_vpc() -> None:
    stack = _stack()
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Existing", vpc_id="vpc-1234", availability_zones=["us-east-1a"],
        isolated_subnet_ids=["subnet-1"], isolated_subnet_route_table_ids=["rtb-1"],
        vpc_cidr_block="10.9.0.0/16",
    )  # fmt: skip
    net = GpuNetwork(stack, "Net", vpc=vpc, interface_endpoints=["sts"])
    template = assertions.Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::VPC", 0)
    template.resource_count_is("AWS::EC2::FlowLog", 0)
    template.has_resource_properties("AWS::EC2::VPCEndpoint", {"VpcId": "vpc-1234", "SubnetIds": ["subnet-1"]})
    assert net.vpc is vpc and list(net.interface_endpoints) == ["sts"]


def test_existing_vpc_may_keep_its_own_s3_endpoint() -> None:
    stack = _stack()
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Existing",
        vpc_id="vpc-1234",
        availability_zones=["us-east-1a"],
        isolated_subnet_ids=["subnet-1"],
    )
    net = GpuNetwork(stack, "Net", vpc=vpc, interface_endpoints=[], s3_gateway_endpoint=False)
    assertions.Template.from_stack(stack).resource_count_is("AWS::EC2::VPCEndpoint", 0)
    assert net.s3_endpoint is None


def test_subnets_rejects_unknown_group() -> None:
    net = GpuNetwork(_stack(), "Net", availability_zones=["us-east-1a"], interface_endpoints=[])
    with pytest.raises(ValidationError, match=r"group='Gpu' is not allowed; allowed: Training, Endpoints, Fleets"):
        net.subnets("Gpu")
