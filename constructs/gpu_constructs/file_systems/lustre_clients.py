"""Security group rules that admit a Lustre client (a fleet, a notebook) to an FSx for Lustre file system."""

from __future__ import annotations

import hashlib

from aws_cdk import Names, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.errors import ValidationError, path_of
from gpu_constructs.file_systems.fsx import LUSTRE_PORTS
from gpu_constructs.file_systems.lustre_mount import LustreFileSystemLike

__all__ = ["allow_lustre_clients"]


def allow_lustre_clients(scope: Construct, file_system: LustreFileSystemLike, client: ec2.ISecurityGroup) -> None:
    """Open Lustre traffic between ``client`` and ``file_system``, once per stack and pair.

    The rules are standalone resources in ``scope``'s stack (the security groups are imported there), so a
    file system or security group owned by another stack gains no reference back to this one (no
    cross-stack cycle), and two constructs of one stack that share a security group add the rules once.
    Without a default port on the file system's ``connections``, the Lustre ports (FSx for Lustre user
    guide, "File system access control with Amazon VPC": TCP 988 and 1018-1023) are opened.
    """
    stack = Stack.of(scope)
    found = stack.node.try_find_child("LustreClientAccess")
    holder = found if isinstance(found, Construct) else Construct(stack, "LustreClientAccess")
    fs_groups = list(file_system.connections.security_groups)
    if not fs_groups:
        raise ValidationError(
            path_of(scope), "file_system.connections has no security group; allowed: a file system in a VPC"
        )
    key = "|".join([_stable_id(client), *(_stable_id(g) for g in fs_groups)])
    pair_id = "Pair" + hashlib.sha256(key.encode()).hexdigest()[:12]
    if holder.node.try_find_child(pair_id) is not None:
        return
    pair = Construct(holder, pair_id)
    imported_client = ec2.SecurityGroup.from_security_group_id(
        pair, "Client", client.security_group_id, allow_all_outbound=False, mutable=True
    )
    imported_fs = [
        ec2.SecurityGroup.from_security_group_id(
            pair, f"FileSystem{i}", g.security_group_id, allow_all_outbound=False, mutable=True
        )
        for i, g in enumerate(fs_groups)
    ]
    default = file_system.connections.default_port
    ports = (default,) if default is not None else LUSTRE_PORTS
    fs_connections = ec2.Connections(security_groups=imported_fs)
    client_connections = ec2.Connections(security_groups=[imported_client])
    # Clients open the connections (ingress on the file system, egress on the clients); the FSx guide
    # also allows the same ports from the file system to the clients.
    for port in ports:
        fs_connections.allow_from(client_connections, port, "Lustre LNET from GPU clients")
        client_connections.allow_from(fs_connections, port, "Lustre LNET from the FSx file system")


def _stable_id(construct: object) -> str:
    if isinstance(construct, Construct):
        return Names.unique_id(construct)
    return repr(construct)
