"""``GpuNetwork``: a private VPC for GPU training, endpoints and fleets, with no internet path by default.

It creates (or adopts) a VPC whose workloads reach AWS only through VPC endpoints: an S3 gateway endpoint
plus the interface endpoints that SageMaker, ECR, CloudWatch, STS, KMS and SSM traffic needs. Flow logs
go to a KMS-encrypted log group. Security groups for the three workload kinds are exposed for later
stacks, and every interface endpoint admits HTTPS only from those groups (through ``connections``).

What a workload's subnets can reach is a value, :class:`NetworkReachability`: the interface endpoints
and the S3 gateway endpoint of the VPC, and whether a NAT or internet path exists.
:meth:`GpuNetwork.reachability` reports it for the network's subnet groups; constructs whose boot or
lifecycle scripts call AWS APIs (``GpuFleet``) check it at synth and name the endpoint or NAT path that
is missing. :func:`infer_reachability` reads it from any ``ec2.IVpc`` of the app: the endpoints added to
the VPC construct and the subnet types (``PRIVATE_ISOLATED`` subnets have no internet path, every other
kind has one); endpoints created outside the app are declared with :class:`NetworkReachability`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from gpu_constructs import nag
from gpu_constructs.constants import (  # re-exported: the table lives in a CDK-free module
    DEFAULT_INTERFACE_ENDPOINTS,
    ENDPOINT_SERVICE_NAMES,
    ENDPOINT_SUBNETS,
    FLEET_SUBNETS,
    S3_GATEWAY,
    TRAINING_SUBNETS,
)
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.keys import allow_cloudwatch_logs, given_or_new_key
from gpu_constructs.security_groups import cluster_security_group

NAT_ROUTE_REASON = (
    "Safe because this default route is in a public subnet that holds only a NAT gateway: nothing else "
    "launches there and public IPs are off; workloads run in private subnets behind the NAT"
)
FLOW_LOG_POLICY_REASON = (
    "Safe because this inline policy is created by CDK for exactly one role (the flow-log delivery role), "
    "is deleted with it and cannot be attached elsewhere; it only allows writing to one log group"
)


#: checkov findings on aws-cdk-lib's custom-resource Lambda that removes the default security group rules.
DEFAULT_SG_PROVIDER_SKIPS: dict[str, str] = {
    "CKV_AWS_116": "Safe because the function runs only during CloudFormation deployments, which retry and "
    "report failures themselves; there are no asynchronous events to dead-letter",
    "CKV_AWS_117": "Safe because the function only calls the EC2 API at deploy time and holds no data; placing "
    "it in the isolated VPC it configures would make it depend on the endpoints it creates",
    "CKV_AWS_115": "Safe because CloudFormation invokes it once per VPC change; it cannot be triggered by "
    "anything else, so a reserved concurrency limit protects nothing",
}


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


_KNOWN_SERVICES = (*ENDPOINT_SERVICE_NAMES, S3_GATEWAY)


@dataclass(frozen=True)
class NetworkReachability:
    """What workloads in some subnets can reach: VPC endpoints by short name, and the internet.

    :param endpoints: short names of the interface endpoints (keys of
        :data:`~gpu_constructs.constants.DEFAULT_INTERFACE_ENDPOINTS`, e.g. ``autoscaling``) with private
        DNS in the VPC, plus ``s3`` for an S3 gateway endpoint on the subnets' route tables.
    :param internet: the subnets route to the internet (a NAT gateway, a NAT instance, a transit gateway
        with egress, or an internet gateway): every public AWS endpoint and package repository is reachable.
    :param source: how this was established, for error messages (default: "declared").
    """

    endpoints: frozenset[str] = frozenset()
    internet: bool = False
    source: str = "declared"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.endpoints) - set(_KNOWN_SERVICES))
        if unknown:
            raise ValidationError(
                "NetworkReachability",
                f"endpoints={unknown} are not known endpoint names; allowed: {', '.join(_KNOWN_SERVICES)}",
            )

    @classmethod
    def of(cls, *endpoints: str, internet: bool = False, source: str = "declared") -> NetworkReachability:
        return cls(frozenset(endpoints), internet, source)

    def reaches(self, service: str) -> bool:
        """True when ``service`` (an endpoint short name or ``s3``) is reachable from these subnets."""
        return self.internet or service in self.endpoints

    def missing(self, services: Iterable[str]) -> list[str]:
        return [s for s in services if not self.reaches(s)]

    def describe(self) -> str:
        parts = sorted(self.endpoints)
        route = "a NAT/internet path" if self.internet else "no NAT or internet path"
        return f"{self.source}: endpoints [{', '.join(parts)}], {route}"


def _endpoint_short_name(service_name: str) -> str | None:
    """The short name of an endpoint service (``...<region>.autoscaling`` -> ``autoscaling``).

    The CDK renders a service name as ``<prefix>.<region>.<service><suffix token>`` (the token is empty in
    the commercial partitions): the trailing token is dropped first."""
    service_name = re.sub(r"\$\{Token\[[^\]]*\]\}$", "", service_name)
    for short, suffix in ENDPOINT_SERVICE_NAMES.items():
        if service_name.endswith(f".{suffix}"):
            return short
    return None


def select_subnets(vpc: ec2.IVpc, selection: ec2.SubnetSelection | None) -> ec2.SelectedSubnets:
    """``vpc.select_subnets`` with a ``SubnetSelection`` value (the Python binding takes keywords only).

    ``None`` selects what ``vpc.select_subnets()`` does without arguments: the VPC's private subnets (else its
    isolated ones, else its public ones).
    """
    if selection is None:
        return vpc.select_subnets()
    return vpc.select_subnets(
        availability_zones=selection.availability_zones,
        one_per_az=selection.one_per_az,
        subnet_filters=selection.subnet_filters,
        subnet_group_name=selection.subnet_group_name,
        subnets=selection.subnets,
        subnet_type=selection.subnet_type,
    )


def infer_reachability(vpc: ec2.IVpc, subnets: ec2.SubnetSelection | None = None) -> NetworkReachability:
    """Read the reachability of ``subnets`` of ``vpc`` from the construct tree (see the module docstring).

    Interface endpoints count when they were added to the VPC construct (``vpc.add_interface_endpoint``,
    as :class:`GpuNetwork` does, for a new or an imported VPC) with private DNS; the S3 gateway endpoint
    counts when it was added there too. The internet counts when none of the selected subnets is
    ``PRIVATE_ISOLATED`` (CDK's subnet types: ``PRIVATE_WITH_EGRESS`` routes through a NAT, ``PUBLIC``
    through an internet gateway). Anything created outside this app is invisible: declare it.
    """
    endpoints: set[str] = set()
    for child in vpc.node.children:
        if isinstance(child, ec2.InterfaceVpcEndpoint):
            cfn = child.node.default_child
            if isinstance(cfn, ec2.CfnVPCEndpoint) and cfn.private_dns_enabled:
                short = _endpoint_short_name(str(cfn.service_name))
                if short is not None:
                    endpoints.add(short)
        elif isinstance(child, ec2.GatewayVpcEndpoint):
            cfn = child.node.default_child
            if isinstance(cfn, ec2.CfnVPCEndpoint) and str(cfn.service_name).endswith(".s3"):
                endpoints.add(S3_GATEWAY)
    selected = select_subnets(vpc, subnets) if subnets is not None else None
    chosen = list(selected.subnets) if selected is not None else list(vpc.private_subnets + vpc.isolated_subnets)
    isolated_ids = {s.subnet_id for s in vpc.isolated_subnets}
    internet = bool(chosen) and not any(s.subnet_id in isolated_ids for s in chosen)
    return NetworkReachability(frozenset(endpoints), internet, f"inferred from VPC {vpc.node.path}")


class GpuNetwork(Construct):
    """A private VPC for GPU workloads.

    :param availability_zones: AZs for the new VPC (from config; nothing is looked up). Required unless
        ``vpc`` is given.
    :param vpc: an existing VPC to adopt instead of creating one (default: a new VPC). Endpoints and
        security groups are still created in it; flow logs are added only to a new VPC.
    :param cidr: IPv4 CIDR of a new VPC (default: ``10.0.0.0/16``).
    :param subnet_cidr_mask: prefix length of each subnet (default: 20, 4,091 usable IPs per subnet).
    :param nat_gateways: NAT gateways (default: 0 — private subnets are isolated, no internet path).
    :param interface_endpoints: short names from :data:`DEFAULT_INTERFACE_ENDPOINTS` to create
        (default: all of them).
    :param flow_logs_key: KMS key of the flow-log group (default: a new key with rotation).
    :param flow_logs_retention: retention of the flow-log group (default: 90 days).
    :param removal_policy: policy of the log group and key (default: RETAIN).
    :param s3_gateway_endpoint: add an S3 gateway endpoint (default: True; set False when an adopted VPC
        already has one).
    :param training_security_group: an existing group for training jobs (default: a new group with HTTPS
        egress and all traffic between its members).
    :param endpoint_security_group: an existing group for inference endpoints (default: a new group with
        HTTPS egress only).
    :param fleet_security_group: an existing group for fleets and notebooks (default: a new group with
        HTTPS egress and all traffic between its members).
    :param internet_access: for an adopted ``vpc``: whether its workload subnets route to the internet (NAT
        or internet gateway). Default: read from the subnet types the VPC reports (not
        ``PRIVATE_ISOLATED``). Ignored for a new VPC (``nat_gateways`` decides).
    :param existing_endpoints: for an adopted ``vpc``: interface endpoints (short names, ``s3`` for the
        gateway) that already exist there with private DNS, so :meth:`reachability` reports them (default:
        none).
    :param workload_subnets: subnets per workload group, keyed by ``TRAINING_SUBNETS``,
        ``ENDPOINT_SUBNETS`` or ``FLEET_SUBNETS`` (default: the new VPC's subnet group of that name; for
        an adopted VPC whose subnets carry other names, give the selections here, e.g.
        ``ec2.SubnetSelection(subnets=[...])``). :meth:`subnets` returns them.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        availability_zones: Sequence[str] | None = None,
        vpc: ec2.IVpc | None = None,
        cidr: str = "10.0.0.0/16",
        subnet_cidr_mask: int = 20,
        nat_gateways: int = 0,
        interface_endpoints: Sequence[str] | None = None,
        flow_logs_key: kms.IKey | None = None,
        flow_logs_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        s3_gateway_endpoint: bool = True,
        training_security_group: ec2.ISecurityGroup | None = None,
        endpoint_security_group: ec2.ISecurityGroup | None = None,
        fleet_security_group: ec2.ISecurityGroup | None = None,
        workload_subnets: Mapping[str, ec2.SubnetSelection] | None = None,
        internet_access: bool | None = None,
        existing_endpoints: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        endpoint_names = list(DEFAULT_INTERFACE_ENDPOINTS if interface_endpoints is None else interface_endpoints)
        self._validate_endpoints(endpoint_names)
        self._validate_nat(nat_gateways, availability_zones)
        self._validate_mask(subnet_cidr_mask)
        self._validate_workload_subnets(workload_subnets)
        self._workload_subnets = dict(workload_subnets or {})
        self._validate_existing_endpoints(existing_endpoints)
        self._internet_access = internet_access if vpc is not None else None
        self._existing_endpoints = frozenset(existing_endpoints) if vpc is not None else frozenset()
        self._nat_gateways = nat_gateways if vpc is None else 0

        self.flow_logs_key: kms.IKey | None = None
        self.flow_log_group: logs.ILogGroup | None = None
        if vpc is None:
            vpc = self._new_vpc(availability_zones, cidr, subnet_cidr_mask, nat_gateways)
            self._add_flow_logs(vpc, flow_logs_key, flow_logs_retention, removal_policy)
        self._adopted = not isinstance(vpc, ec2.Vpc) or vpc.node.scope is not self
        self.vpc: ec2.IVpc = vpc

        self.s3_endpoint: ec2.GatewayVpcEndpoint | None = None
        if s3_gateway_endpoint:
            self.s3_endpoint = vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)

        # Workload security groups. Egress is HTTPS only (AWS APIs via endpoints / S3 gateway) plus all
        # traffic within the group for collective communication (NCCL / EFA between training hosts).
        # An existing group is used as it is: its rules stay the owner's.
        self.training_security_group: ec2.ISecurityGroup = training_security_group or self._workload_sg(
            "TrainingSecurityGroup", "SageMaker training jobs and processing jobs", intra_group=True
        )
        self.endpoint_security_group: ec2.ISecurityGroup = endpoint_security_group or self._workload_sg(
            "EndpointSecurityGroup", "SageMaker inference endpoints", intra_group=False
        )
        self.fleet_security_group: ec2.ISecurityGroup = fleet_security_group or self._workload_sg(
            "FleetSecurityGroup", "EC2 GPU fleets and notebooks", intra_group=True
        )

        self.endpoint_security_group_for_vpce = ec2.SecurityGroup(
            self,
            "VpcEndpointSecurityGroup",
            vpc=vpc,
            description="Interface VPC endpoints: HTTPS from the platform workload security groups",
            allow_all_outbound=False,
        )
        self.interface_endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {
            name: self._add_interface_endpoint(vpc, name) for name in endpoint_names
        }
        for sg in self.workload_security_groups:
            self.endpoint_security_group_for_vpce.connections.allow_from(
                sg, ec2.Port.tcp(443), f"HTTPS to AWS APIs from {sg.node.id}"
            )

    # -- the new VPC ------------------------------------------------------------------------------------

    def _new_vpc(
        self, availability_zones: Sequence[str] | None, cidr: str, subnet_cidr_mask: int, nat_gateways: int
    ) -> ec2.Vpc:
        """The VPC of this network when none is adopted: the workload subnet groups (and a public one for NAT
        gateways) in ``availability_zones``, the default security group closed, the NAT routes acknowledged."""
        if not availability_zones:
            raise ValidationError(
                path_of(self),
                "availability_zones is required when no existing vpc is given; allowed: e.g. "
                "['us-east-1a', 'us-east-1b']",
            )
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(availability_zones),
            nat_gateways=nat_gateways,
            subnet_configuration=self._subnet_configuration(subnet_cidr_mask, nat_gateways),
            enable_dns_hostnames=True,
            enable_dns_support=True,
            restrict_default_security_group=True,
        )
        for subnet in vpc.public_subnets:
            route = subnet.node.try_find_child("DefaultRoute")
            if route is not None:
                nag.acknowledge_compliance(route, "VPCNoUnrestrictedRouteToIGW", NAT_ROUTE_REASON)
        self._skip_default_sg_provider_checks()
        return vpc

    @staticmethod
    def _subnet_configuration(cidr_mask: int, nat_gateways: int) -> list[ec2.SubnetConfiguration]:
        """One private subnet group per workload kind (isolated without NAT gateways), after a public group
        that holds only the NAT gateways when there are any."""
        private_type = ec2.SubnetType.PRIVATE_WITH_EGRESS if nat_gateways else ec2.SubnetType.PRIVATE_ISOLATED
        subnets = [
            ec2.SubnetConfiguration(name=name, subnet_type=private_type, cidr_mask=cidr_mask)
            for name in (TRAINING_SUBNETS, ENDPOINT_SUBNETS, FLEET_SUBNETS)
        ]
        if nat_gateways:
            public = ec2.SubnetConfiguration(
                name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=cidr_mask, map_public_ip_on_launch=False
            )
            subnets.insert(0, public)
        return subnets

    # -- validation -------------------------------------------------------------------------------------

    def _validate_endpoints(self, names: list[str]) -> None:
        unknown = [n for n in names if n not in DEFAULT_INTERFACE_ENDPOINTS]
        if unknown:
            raise fail(self, "interface_endpoints", unknown, ", ".join(DEFAULT_INTERFACE_ENDPOINTS))

    def _validate_existing_endpoints(self, names: Sequence[str]) -> None:
        unknown = [n for n in names if n not in _KNOWN_SERVICES]
        if unknown:
            raise fail(self, "existing_endpoints", unknown, ", ".join(_KNOWN_SERVICES))

    def _validate_nat(self, nat_gateways: int, azs: Sequence[str] | None) -> None:
        if is_token(nat_gateways):
            return
        upper = len(azs) if azs else 0
        if nat_gateways < 0 or (azs and nat_gateways > upper):
            raise fail(self, "nat_gateways", nat_gateways, f"0..{upper} (at most one per AZ)")

    def _validate_workload_subnets(self, selections: Mapping[str, ec2.SubnetSelection] | None) -> None:
        allowed = (TRAINING_SUBNETS, ENDPOINT_SUBNETS, FLEET_SUBNETS)
        unknown = sorted(set(selections or {}) - set(allowed))
        if unknown:
            raise fail(self, "workload_subnets", unknown, f"keys among {', '.join(allowed)}")

    def _validate_mask(self, mask: int) -> None:
        if not 16 <= mask <= 28:
            raise fail(self, "subnet_cidr_mask", mask, "16..28")

    # -- helpers ----------------------------------------------------------------------------------------

    def _workload_sg(self, construct_id: str, description: str, *, intra_group: bool) -> ec2.SecurityGroup:
        internal = "NCCL and EFA traffic between members of this group" if intra_group else None
        return cluster_security_group(self, construct_id, vpc=self.vpc, description=description, internal=internal)

    def _add_interface_endpoint(self, vpc: ec2.IVpc, name: str) -> ec2.InterfaceVpcEndpoint:
        """The interface endpoint ``name`` (a key of :data:`DEFAULT_INTERFACE_ENDPOINTS`) in the endpoint subnets,
        with private DNS, open only to the endpoint security group."""
        return vpc.add_interface_endpoint(
            f"{_pascal(name)}Endpoint",
            service=getattr(ec2.InterfaceVpcEndpointAwsService, DEFAULT_INTERFACE_ENDPOINTS[name]),
            private_dns_enabled=True,
            open=False,
            security_groups=[self.endpoint_security_group_for_vpce],
            subnets=self._workload_subnets.get(ENDPOINT_SUBNETS) or self._endpoint_subnets(vpc),
        )

    @property
    def workload_security_groups(self) -> list[ec2.ISecurityGroup]:
        """The training, endpoint and fleet security groups (created here or passed in)."""
        return [self.training_security_group, self.endpoint_security_group, self.fleet_security_group]

    @staticmethod
    def _endpoint_subnets(vpc: ec2.IVpc) -> ec2.SubnetSelection:
        names = {s.node.id for s in vpc.private_subnets + vpc.isolated_subnets}
        if any(n.startswith(ENDPOINT_SUBNETS) for n in names):
            return ec2.SubnetSelection(subnet_group_name=ENDPOINT_SUBNETS)
        return (
            ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
            if vpc.isolated_subnets
            else (ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS))
        )

    def _skip_default_sg_provider_checks(self) -> None:
        """Document the checkov findings on the CDK-owned Lambda that closes the VPC's default SG."""
        provider = Stack.of(self).node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        handler = provider.node.try_find_child("Handler") if provider is not None else None
        if handler is None:
            return
        for check_id, comment in DEFAULT_SG_PROVIDER_SKIPS.items():
            nag.checkov_skip(handler, check_id, comment)

    def _add_flow_logs(
        self,
        vpc: ec2.Vpc,
        key: kms.IKey | None,
        retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
    ) -> None:
        description = f"Encrypts VPC flow logs of {self.node.path}"
        key = given_or_new_key(key, self, "FlowLogsKey", description=description, removal_policy=removal_policy)
        stack = Stack.of(self)
        # CloudWatch Logs may use the key only for this account's log groups in this region.
        allow_cloudwatch_logs(key, stack, sid="AllowCloudWatchLogsForThisAccount")
        group = logs.LogGroup(
            self,
            "FlowLogGroup",
            encryption_key=key,
            retention=retention,
            removal_policy=removal_policy,
        )
        flow_log = vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        policy = flow_log.node.try_find_child("IAMRole")
        default_policy = policy.node.try_find_child("DefaultPolicy") if policy is not None else None
        if default_policy is not None:
            nag.acknowledge_compliance(default_policy, "IAMNoInlinePolicy", FLOW_LOG_POLICY_REASON)
        self.flow_logs_key = key
        self.flow_log_group = group

    def reachability(self, group: str = FLEET_SUBNETS) -> NetworkReachability:
        """What workloads in one subnet group reach: this network's endpoints, declared ones, and the
        internet (a new VPC: ``nat_gateways > 0``; an adopted one: ``internet_access``, or the subnet types)."""
        endpoints = set(self.interface_endpoints) | set(self._existing_endpoints)
        if self.s3_endpoint is not None:
            endpoints.add(S3_GATEWAY)
        if self._internet_access is not None:
            internet = self._internet_access
        elif self._adopted:
            internet = infer_reachability(self.vpc, self.subnets(group)).internet
        else:
            internet = self._nat_gateways > 0
        return NetworkReachability(frozenset(endpoints), internet, f"GpuNetwork {self.node.path} ({group} subnets)")

    def subnets(self, group: str) -> ec2.SubnetSelection:
        """Subnet selection of one workload group (``TRAINING_SUBNETS``, ``ENDPOINT_SUBNETS``, ``FLEET_SUBNETS``)."""
        if group not in (TRAINING_SUBNETS, ENDPOINT_SUBNETS, FLEET_SUBNETS):
            raise fail(self, "group", group, f"{TRAINING_SUBNETS}, {ENDPOINT_SUBNETS}, {FLEET_SUBNETS}")
        if group in self._workload_subnets:
            return self._workload_subnets[group]
        return ec2.SubnetSelection(subnet_group_name=group)
