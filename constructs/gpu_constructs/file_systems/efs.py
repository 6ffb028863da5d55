"""``GpuEfsFileSystem``: Amazon EFS for small shared datasets, with the same conventions as the Lustre one.

EFS suits datasets of a few GB that many jobs and notebooks share and update (labels, vocabularies,
small evaluation sets): it is elastic (no capacity to size), multi-AZ, and mounts over NFS (TCP 2049).
For large training datasets, FSx for Lustre linked to S3 is faster (see README, "Choosing an input mode").

SageMaker mounts it through a ``FileSystemDataSource`` channel with ``FileSystemType`` ``EFS`` and a
``DirectoryPath`` relative to the file system root (SageMaker API reference, ``FileSystemDataSource``).
"""

from __future__ import annotations

from typing import Literal

import jsii
from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from gpu_constructs.errors import fail
from gpu_constructs.file_systems.base import FileSystemChannelSource
from gpu_constructs.file_systems.fsx_facts import ABSOLUTE_PATH_RE
from gpu_constructs.keys import given_or_new_key

__all__ = ["EFS_PORT", "GpuEfsFileSystem"]

#: NFS port.
EFS_PORT = ec2.Port.tcp(2049)

ThroughputModeName = Literal["elastic", "bursting"]
PerformanceModeName = Literal["generalPurpose", "maxIO"]
_THROUGHPUT = {"elastic": efs.ThroughputMode.ELASTIC, "bursting": efs.ThroughputMode.BURSTING}
_PERFORMANCE = {"generalPurpose": efs.PerformanceMode.GENERAL_PURPOSE, "maxIO": efs.PerformanceMode.MAX_IO}
#: Days after which EFS may move files to Infrequent Access (the values ``efs.LifecyclePolicy`` offers).
IA_DAYS = (1, 7, 14, 30, 60, 90, 180, 270, 365)


@jsii.implements(ec2.IConnectable)
class GpuEfsFileSystem(FileSystemChannelSource):
    """An encrypted EFS file system for small shared datasets.

    :param vpc: the VPC (required).
    :param vpc_subnets: where mount targets go, one per AZ (default: the VPC's private subnets).
    :param kms_key: key for data at rest (default: a new key with rotation).
    :param throughput_mode: ``elastic`` (default: pay per use, scales with load) or ``bursting``.
    :param performance_mode: ``generalPurpose`` (default, lowest latency) or ``maxIO``.
    :param transition_to_ia_days: move files not read for this many days to Infrequent Access
        (default: 30; allowed: 1, 7, 14, 30, 60, 90, 180, 270, 365; None: never).
    :param automatic_backups: AWS Backup daily backups (default: True).
    :param security_group: default: a new group with no ingress; add clients with :meth:`allow_clients`.
    :param removal_policy: default: RETAIN.
    """

    channel_file_system_type = "EFS"

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc | None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        kms_key: kms.IKey | None = None,
        throughput_mode: ThroughputModeName = "elastic",
        performance_mode: PerformanceModeName = "generalPurpose",
        transition_to_ia_days: int | None = 30,
        automatic_backups: bool = True,
        security_group: ec2.ISecurityGroup | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        if vpc is None:
            raise fail(self, "vpc", None, "an ec2.IVpc (EFS mount targets live in subnets of a VPC)")
        self._validate_modes(throughput_mode, performance_mode)
        self._validate_ia(transition_to_ia_days)
        kms_key = given_or_new_key(
            kms_key,
            self,
            "Key",
            description=f"Encrypts the EFS file system {self.node.path}",
            removal_policy=removal_policy,
        )
        self.kms_key: kms.IKey = kms_key
        if security_group is None:
            security_group = ec2.SecurityGroup(
                self,
                "SecurityGroup",
                vpc=vpc,
                description="EFS: NFS (2049) from its clients only",
                allow_all_outbound=False,
            )
        self.security_group = security_group
        self._connections = ec2.Connections(security_groups=[security_group], default_port=EFS_PORT)
        lifecycle = None
        if transition_to_ia_days is not None:
            lifecycle = getattr(
                efs.LifecyclePolicy, f"AFTER_{transition_to_ia_days}_DAY" + ("" if transition_to_ia_days == 1 else "S")
            )
        self.file_system = efs.FileSystem(
            self,
            "Resource",
            vpc=vpc,
            vpc_subnets=vpc_subnets,
            encrypted=True,
            kms_key=kms_key,
            throughput_mode=_THROUGHPUT[throughput_mode],
            performance_mode=_PERFORMANCE[performance_mode],
            lifecycle_policy=lifecycle,
            enable_automatic_backups=automatic_backups,
            security_group=security_group,
            removal_policy=removal_policy,
            allow_anonymous_access=False,
        )

    def _validate_modes(self, throughput: str, performance: str) -> None:
        if throughput not in _THROUGHPUT:
            raise fail(self, "throughput_mode", throughput, ", ".join(_THROUGHPUT))
        if performance not in _PERFORMANCE:
            raise fail(self, "performance_mode", performance, ", ".join(_PERFORMANCE))
        if throughput == "elastic" and performance == "maxIO":
            raise fail(
                self,
                "performance_mode",
                performance,
                "generalPurpose with elastic throughput (EFS does not combine them)",
            )

    def _validate_ia(self, days: int | None) -> None:
        if days is not None and days not in IA_DAYS:
            raise fail(self, "transition_to_ia_days", days, f"None or one of {list(IA_DAYS)}")

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    def allow_clients(self, *clients: ec2.IConnectable, description: str = "EFS client") -> None:
        """Admit NFS (TCP 2049) from each client's security group."""
        if not clients:
            raise fail(self, "clients", [], "at least one ec2.IConnectable")
        for client in clients:
            self.connections.allow_default_port_from(client, f"NFS from {description}")

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Mount read-only through IAM authorization (``elasticfilesystem:ClientMount``)."""
        return self.file_system.grant(grantee, "elasticfilesystem:ClientMount")

    def grant_read_write(self, grantee: iam.IGrantable) -> iam.Grant:
        """Mount and write (``ClientMount`` + ``ClientWrite``)."""
        return self.file_system.grant(grantee, "elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite")

    def _channel_target(self, path: str | None) -> tuple[str, str]:
        """A channel's ``path`` is absolute, from the EFS root (default: ``/``)."""
        path = "/" if path is None else path
        if not ABSOLUTE_PATH_RE.fullmatch(path or "") or ".." in path:
            raise fail(self, "path", path, "an absolute path from the file system root such as '/labels'")
        return self.file_system_id, path
