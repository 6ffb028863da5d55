"""The platform's workload security group recipe: no ingress from outside, HTTPS egress, optionally all traffic
between the group's own members.

GPU workloads reach AWS only through VPC endpoints and the S3 gateway endpoint, so their groups allow HTTPS
(443) out and nothing else out. Multi-node work (NCCL over TCP, EFA) needs all traffic between the hosts of
one job or fleet: the group admits itself (``connections.allow_internally``), never a CIDR, and the
compliance packs' "restricted common ports" finding on that self-referencing rule is acknowledged with the
caller's reason. :func:`cluster_security_group` is the one place that builds such a group.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Names
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs import nag

#: Description of the HTTPS egress rule of a workload group.
HTTPS_EGRESS_DESCRIPTION = "HTTPS to AWS APIs (VPC endpoints, S3)"
#: Why all traffic from the group to itself is safe (multi-node training and EFA).
INTRA_GROUP_REASON = (
    "Safe because the only source is this security group itself, not a CIDR: multi-node training (NCCL "
    "over TCP and EFA) needs all traffic between the group's members, as SageMaker and EFA require"
)


def cluster_security_group(
    scope: Construct,
    construct_id: str,
    *,
    vpc: ec2.IVpc,
    description: str,
    https_egress: str | None = HTTPS_EGRESS_DESCRIPTION,
    internal: str | None = None,
    internal_ports: Sequence[ec2.Port] | None = None,
    internal_reason: str = INTRA_GROUP_REASON,
) -> ec2.SecurityGroup:
    """A security group with no outbound rule but those given, created under ``scope`` as ``construct_id``.

    :param https_egress: description of an HTTPS (443) egress rule to anywhere (default: "HTTPS to AWS APIs
        (VPC endpoints, S3)"); None adds no egress rule.
    :param internal: description of the rules admitting the group's own members (default: None, no such rule).
    :param internal_ports: the ports members may use among themselves (default: all traffic).
    :param internal_reason: why the self-referencing all-traffic rule is safe, acknowledged for the compliance
        packs' ``EC2RestrictedCommonPorts`` finding (default: multi-node training and EFA).

    Example: ``cluster_security_group(self, "SecurityGroup", vpc=vpc, description="GPU fleet",
    internal="EFA and NCCL traffic within the fleet")``.
    """
    group = ec2.SecurityGroup(scope, construct_id, vpc=vpc, description=description, allow_all_outbound=False)
    if https_egress is not None:
        group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), https_egress)
    if internal is not None:
        for port in internal_ports or [ec2.Port.all_traffic()]:
            group.connections.allow_internally(port, internal)
        ingress = group.node.try_find_child(f"from {Names.unique_id(group)}:ALL TRAFFIC")
        if ingress is not None:
            nag.acknowledge_compliance(ingress, "EC2RestrictedCommonPorts", internal_reason)
    return group
