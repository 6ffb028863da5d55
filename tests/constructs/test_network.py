"""GpuNetwork and the network stack: VPC, subnets, endpoints, flow logs, security groups."""

from __future__ import annotations

import re

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from unit_helpers import env_template_fixtures

from gpu_constructs import GpuNetwork, ValidationError

dev, prod = env_template_fixtures("network")


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
    assert types.count("Gateway") == 1 and types.count("Interface") == 12
    names = sorted(str(e["Properties"]["ServiceName"]) for e in endpoints.values())
    for service in ("sagemaker.api", "sagemaker.runtime", "ecr.api", "ecr.dkr", ".logs", "monitoring", "sts",
                    "kms", ".ssm", "ssmmessages", "ec2messages", ".autoscaling", ".s3"):  # fmt: skip
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


# -- reachability (issue 12: the dev fleet's boot script calls EC2 Auto Scaling) -------------------------


def _endpoint_suffixes(template: assertions.Template) -> set[str]:
    found = set()
    for endpoint in template.find_resources("AWS::EC2::VPCEndpoint").values():
        name = endpoint["Properties"]["ServiceName"]
        parts = name["Fn::Join"][1] if isinstance(name, dict) else [name]
        # "com.amazonaws.us-east-1.autoscaling" (literal region) or [..., ".autoscaling"] (a Join on the region)
        found.add(re.sub(r"^com\.amazonaws\.[a-z0-9-]+\.", "", str(parts[-1])).lstrip("."))
    return found


def test_dev_network_has_the_autoscaling_endpoint_the_fleet_boot_script_calls(dev: assertions.Template) -> None:
    # No NAT in dev: complete-lifecycle-action / set-instance-health reach EC2 Auto Scaling only this way.
    assert "autoscaling" in _endpoint_suffixes(dev)


def test_prod_network_has_the_autoscaling_endpoint(prod: assertions.Template) -> None:
    assert "autoscaling" in _endpoint_suffixes(prod)


def test_endpoints_follow_the_enabled_features() -> None:
    from stacks.config import load_config
    from stacks.network_stack import interface_endpoints

    dev = load_config("dev")
    with_fleets = interface_endpoints(dev)
    assert {"autoscaling", "ssm", "ssm_messages", "ec2_messages"} <= set(with_fleets)
    no_fleets = dev.model_copy(update={"fleets": dev.fleets.model_copy(update={"groups": ()})})
    assert not {"autoscaling", "ssm", "ssm_messages", "ec2_messages"} & set(interface_endpoints(no_fleets))
    explicit = dev.model_copy(update={"network": dev.network.model_copy(update={"interface_endpoints": ("sts",)})})
    assert interface_endpoints(explicit) == ("sts",)


def test_reachability_of_a_new_private_network() -> None:
    net = GpuNetwork(_stack(), "Net", availability_zones=["us-east-1a"], interface_endpoints=["autoscaling"])
    reach = net.reachability()
    assert reach.endpoints == frozenset({"autoscaling", "s3"}) and reach.internet is False
    assert reach.reaches("autoscaling") and reach.reaches("s3") and not reach.reaches("logs")


def test_reachability_with_nat_reaches_everything() -> None:
    net = GpuNetwork(_stack(), "Net", availability_zones=["us-east-1a"], nat_gateways=1, interface_endpoints=[])
    assert net.reachability().internet is True and net.reachability().reaches("autoscaling")


def test_reachability_of_an_adopted_vpc_is_declared_or_read_from_subnet_types() -> None:
    stack = _stack()
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"],
        private_subnet_ids=["subnet-a"], private_subnet_names=["Fleets"],
    )  # fmt: skip
    inferred = GpuNetwork(stack, "Net", vpc=vpc, interface_endpoints=[], s3_gateway_endpoint=False)
    assert inferred.reachability().internet is True  # PRIVATE_WITH_EGRESS subnets route to a NAT
    declared = GpuNetwork(
        stack, "Net2", vpc=vpc, interface_endpoints=[], s3_gateway_endpoint=False,
        internet_access=False, existing_endpoints=["autoscaling", "logs"],
    )  # fmt: skip
    reach = declared.reachability()
    assert reach.internet is False and reach.endpoints == frozenset({"autoscaling", "logs"})


def test_unknown_existing_endpoint_is_rejected() -> None:
    stack = _stack()
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], isolated_subnet_ids=["subnet-a"]
    )
    with pytest.raises(ValidationError, match=r"existing_endpoints=\['autoscale'\].*allowed: sagemaker_api"):
        GpuNetwork(stack, "Net", vpc=vpc, existing_endpoints=["autoscale"])
