"""FSx for Lustre for GPU training: a file system linked to an S3 prefix, its channel and sizing helpers.

``GpuLustreFileSystem`` wraps ``aws_fsx.LustreFileSystem`` (L2) with the platform's rules and adds a data
repository association (``AWS::FSx::DataRepositoryAssociation``, L1) that links a directory of the file
system to a bucket prefix with automatic import and optional automatic export.

Every limit encoded here is taken from AWS documentation:

* storage capacity for SCRATCH_2 and PERSISTENT_2 (SSD): 1200 GiB, 2400 GiB, then increments of 2400 GiB
  (FSx API reference, ``CreateFileSystem.StorageCapacity``);
* ``PerUnitStorageThroughput`` is only valid for PERSISTENT types; PERSISTENT_2 SSD accepts 125, 250, 500
  and 1000 MB/s/TiB (``CreateFileSystemLustreConfiguration.PerUnitStorageThroughput``);
* performance per TiB (FSx for Lustre User Guide, "Performance characteristics of SSD and HDD storage
  classes"): SCRATCH_2 has 200 MB/s/TiB baseline network throughput (1300 burst) and 200 MB/s/TiB disk
  read; PERSISTENT-125/250/500/1000 have 320/640/1300/2600 MB/s/TiB baseline network throughput and
  125/250/500/1000 MB/s/TiB disk throughput;
* data repository associations "are supported on all FSx for Lustre 2.12 and 2.15 file systems, excluding
  scratch_1 deployment type", at most 8 per file system (FSx API reference,
  ``CreateDataRepositoryAssociation``);
* scratch file systems are always encrypted with keys managed by Amazon FSx; a customer KMS key can only
  be chosen for persistent file systems (User Guide, "Encrypting data at rest");
* Lustre traffic uses TCP 988 and 1018-1023; the file system's security group must admit them from itself
  and from the clients' groups (User Guide, "File system access control with Amazon VPC");
* an S3 bucket encrypted with a customer managed KMS key must let the FSx S3 service-linked role
  (``s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_<fs-id>``) use the key through S3
  (User Guide, "Working with server-side encrypted Amazon S3 buckets");
* the SageMaker channel: ``FileSystemDataSource`` with ``FileSystemType`` ``FSxLustre`` or ``EFS``,
  ``FileSystemAccessMode`` ``ro`` or ``rw`` and, for Lustre, ``DirectoryPath`` ``/<MountName>/<path>``
  (SageMaker API reference, ``FileSystemDataSource``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import jsii
from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from gpu_constructs import nag
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.file_systems.base import FileSystemChannelSource
from gpu_constructs.file_systems.fsx_facts import (
    ABSOLUTE_PATH_RE,
    CAPACITY_FIRST_STEPS,
    CAPACITY_INCREMENT_GIB,
    CHUNK_SIZE_RANGE_MIB,
    DEPLOYMENT_TYPES,
    DRA_LUSTRE_VERSIONS,
    FILE_SYSTEM_ID_ALLOWED,
    LUSTRE_PORT_RANGES,
    LUSTRE_TYPES,
    LUSTRE_VERSIONS,
    MAX_DATA_REPOSITORY_ASSOCIATIONS,
    AccessMode,
    FileSystemType,
    LustreDeploymentTypeName,
    LustreSizing,
    LustreTypeFacts,
    allowed_capacity_text,
    check_deployment_type,
    is_file_system_id,
    sagemaker_channel,
    size_lustre,
    valid_storage_capacity,
)
from gpu_constructs.keys import given_or_new_key
from gpu_constructs.network import select_subnets
from gpu_constructs.s3_keys import as_key_prefix, check_key_prefix
from gpu_constructs.security_groups import cluster_security_group

__all__ = [
    "CAPACITY_FIRST_STEPS",
    "CAPACITY_INCREMENT_GIB",
    "DEPLOYMENT_TYPES",
    "LUSTRE_PORTS",
    "LUSTRE_TYPES",
    "MAX_DATA_REPOSITORY_ASSOCIATIONS",
    "AccessMode",
    "FileSystemType",
    "GpuLustreFileSystem",
    "LustreDataRepository",
    "LustreDeploymentTypeName",
    "LustreSizing",
    "LustreTypeFacts",
    "sagemaker_channel",
    "size_lustre",
    "valid_storage_capacity",
]

#: Lustre ports as ``ec2.Port`` (TCP 988 and 1018-1023).
LUSTRE_PORTS: tuple[ec2.Port, ...] = tuple(
    ec2.Port.tcp(lo) if lo == hi else ec2.Port.tcp_range(lo, hi) for lo, hi in LUSTRE_PORT_RANGES
)
_VERSION_ENUMS: dict[str, fsx.FileSystemTypeVersion] = {
    "2.12": fsx.FileSystemTypeVersion.V_2_12,
    "2.15": fsx.FileSystemTypeVersion.V_2_15,
}
WILDCARD_PRINCIPAL_REASON = (
    "Safe because the wildcard principal is narrowed by conditions: only this account's FSx S3 service-linked "
    "roles (aws:PrincipalArn), only through S3 in this region (kms:ViaService), only for this account "
    "(kms:CallerAccount); the role name carries the file system id, unknown until deployment"
)


# --------------------------------------------------------------------------------------------------
# Data repository (S3 link)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LustreDataRepository:
    """A link between a file system directory and an S3 bucket prefix (one data repository association).

    :param bucket: the bucket (e.g. the platform's datasets bucket).
    :param prefix: key prefix linked (default: ``""``, the whole bucket).
    :param file_system_path: directory of the file system the prefix appears under (default: ``/datasets``).
    :param auto_import: import new, changed and deleted S3 objects automatically (default: True).
    :param auto_export: export new, changed and deleted files back to S3 automatically (default: False;
        training outputs normally go to the artifacts bucket through SageMaker, not through Lustre).
    :param imported_file_chunk_size_mib: stripe size of imported files (default: FSx default, 1024 MiB).
    :param batch_import_metadata_on_create: import the prefix's metadata when the association is created
        (default: True, so existing objects are visible at once).
    :param grant_bucket_key: add a key-policy statement letting the file system's FSx S3 service-linked
        role use the bucket's customer managed KMS key through S3 (default: True; only possible when the
        key is defined in this app).
    :param events: the S3/file events that auto import and auto export apply (default: NEW, CHANGED and
        DELETED; a non-empty subset of them).
    """

    bucket: s3.IBucket
    prefix: str = ""
    file_system_path: str = "/datasets"
    auto_import: bool = True
    auto_export: bool = False
    imported_file_chunk_size_mib: int | None = None
    batch_import_metadata_on_create: bool = True
    grant_bucket_key: bool = True
    events: tuple[str, ...] = field(default=("NEW", "CHANGED", "DELETED"))


# --------------------------------------------------------------------------------------------------
# The file system
# --------------------------------------------------------------------------------------------------


def _lustre_directory(scope: Construct, mount_name: str, path: str, default: str = "") -> str:
    """``/<mount name>/<path>`` for a relative ``path`` (``default`` when empty), ``/<mount name>`` for none."""
    if path.startswith("/") or ".." in path:
        raise fail(scope, "path", path, "a path relative to the file system root, without '..'")
    path = path or default
    return f"/{mount_name}/{path}".rstrip("/") if path else f"/{mount_name}"


@jsii.implements(ec2.IConnectable)
class GpuLustreFileSystem(FileSystemChannelSource):
    """An FSx for Lustre file system for GPU training, optionally linked to an S3 prefix.

    :param vpc: the VPC (required: FSx for Lustre lives in one subnet of a VPC).
    :param vpc_subnets: where to place it; the first selected subnet is used (default: the VPC's first
        private subnet). Training jobs must run in a subnet of the same AZ for full throughput.
    :param deployment_type: ``SCRATCH_2`` (default) or ``PERSISTENT_2``.
    :param storage_capacity_gib: 1200, 2400 or a multiple of 2400 (default: 1200).
    :param per_unit_storage_throughput: PERSISTENT_2 only: 125, 250, 500 or 1000 MB/s/TiB (default: 125
        for PERSISTENT_2; must be None for SCRATCH_2).
    :param data_compression: LZ4 compression of file data (default: True).
    :param kms_key: PERSISTENT_2 only: the key for data at rest (default: a new key with rotation; scratch
        file systems always use FSx-managed keys).
    :param security_group: the file system's group (default: a new group that admits the Lustre ports
        from itself only; add clients with :meth:`allow_clients`).
    :param data_repository: link to an S3 prefix (default: none).
    :param lustre_version: ``2.15`` (default) or ``2.12``; both support data repository associations.
    :param mount_path: where clients mount it (default: ``/fsx``).
    :param removal_policy: default: RETAIN.
    :param automatic_backup_retention: PERSISTENT_2 only: daily backups kept this long (default: none; the
        data's source of truth is the S3 bucket).
    """

    channel_file_system_type = "FSxLustre"

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc | None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        deployment_type: LustreDeploymentTypeName | fsx.LustreDeploymentType = "SCRATCH_2",
        storage_capacity_gib: int = 1200,
        per_unit_storage_throughput: int | None = None,
        data_compression: bool = True,
        kms_key: kms.IKey | None = None,
        security_group: ec2.ISecurityGroup | None = None,
        data_repository: LustreDataRepository | None = None,
        lustre_version: str = "2.15",
        mount_path: str = "/fsx",
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        automatic_backup_retention: Duration | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        kind = check_deployment_type(path_of(self), deployment_type)
        facts = LUSTRE_TYPES[kind]
        vpc = self._validate_vpc(vpc)
        self._validate_capacity(kind, storage_capacity_gib)
        throughput = self._validate_throughput(facts, per_unit_storage_throughput)
        self._validate_kms(facts, kms_key)
        self._validate_version(lustre_version, data_repository)
        self._validate_mount_path(mount_path)
        self._validate_backup(facts, automatic_backup_retention)
        if data_repository is not None:
            self._validate_repository(data_repository)
        subnet = self._select_subnet(vpc, vpc_subnets)

        self.deployment_type: LustreDeploymentTypeName = kind
        self.storage_capacity_gib = storage_capacity_gib
        self.per_unit_storage_throughput = throughput
        self.mount_path = mount_path
        self.subnet: ec2.ISubnet = subnet
        self.vpc = vpc

        if security_group is None:
            security_group = cluster_security_group(
                self,
                "SecurityGroup",
                vpc=vpc,
                description="FSx for Lustre: Lustre ports (988, 1018-1023) from this group and its clients only",
                https_egress=None,
                internal="Lustre traffic between the file servers",
                internal_ports=LUSTRE_PORTS,
            )
        self.security_group = security_group
        self._connections = ec2.Connections(security_groups=[security_group])

        if facts.customer_kms_key:
            description = f"Encrypts the FSx for Lustre file system {self.node.path}"
            kms_key = given_or_new_key(kms_key, self, "Key", description=description, removal_policy=removal_policy)
        self.kms_key: kms.IKey | None = kms_key

        config = fsx.LustreConfiguration(
            deployment_type=getattr(fsx.LustreDeploymentType, kind),
            per_unit_storage_throughput=throughput,
            data_compression_type=(
                fsx.LustreDataCompressionType.LZ4 if data_compression else fsx.LustreDataCompressionType.NONE
            ),
            automatic_backup_retention=automatic_backup_retention,
        )
        self.file_system = fsx.LustreFileSystem(
            self,
            "Resource",
            vpc=vpc,
            vpc_subnet=subnet,
            storage_capacity_gib=storage_capacity_gib,
            lustre_configuration=config,
            security_group=security_group,
            kms_key=kms_key,
            file_system_type_version=_VERSION_ENUMS[lustre_version],
            removal_policy=removal_policy,
        )
        self._remove_l2_port_range(security_group)
        self.data_repository = data_repository
        self.data_repository_association: fsx.CfnDataRepositoryAssociation | None = None
        if data_repository is not None:
            self.data_repository_association = self._link(data_repository)

    # -- validation -------------------------------------------------------------------------------------

    def _validate_vpc(self, vpc: ec2.IVpc | None) -> ec2.IVpc:
        if vpc is None:
            raise fail(self, "vpc", None, "an ec2.IVpc (FSx for Lustre lives in a subnet of a VPC)")
        return vpc

    def _validate_capacity(self, kind: str, capacity: int) -> None:
        if is_token(capacity):
            return
        if not valid_storage_capacity(capacity):
            raise ValidationError(
                path_of(self),
                f"storage_capacity_gib={capacity!r} is not allowed for {kind}; allowed: {allowed_capacity_text()}",
            )

    def _validate_throughput(self, facts: LustreTypeFacts, value: int | None) -> int | None:
        if not facts.per_unit_throughputs:
            if value is not None:
                raise ValidationError(
                    path_of(self),
                    f"per_unit_storage_throughput={value!r} is not allowed for {facts.name}; allowed: None "
                    f"(scratch throughput is fixed at {facts.read_mbps_per_tib(None)} MB/s/TiB; "
                    "use PERSISTENT_2 to choose 125, 250, 500 or 1000)",
                )
            return None
        if value is None:
            return facts.per_unit_throughputs[0]
        if not is_token(value) and value not in facts.per_unit_throughputs:
            raise ValidationError(
                path_of(self),
                f"per_unit_storage_throughput={value!r} is not allowed for {facts.name}; allowed: "
                f"{', '.join(map(str, facts.per_unit_throughputs))} (MB/s/TiB)",
            )
        return value

    def _validate_kms(self, facts: LustreTypeFacts, key: kms.IKey | None) -> None:
        if key is not None and not facts.customer_kms_key:
            raise ValidationError(
                path_of(self),
                f"kms_key is not allowed for {facts.name}: scratch file systems are always encrypted with keys "
                "managed by Amazon FSx; allowed: kms_key=None, or deployment_type='PERSISTENT_2'",
            )

    def _validate_version(self, version: str, repository: LustreDataRepository | None) -> None:
        if version not in LUSTRE_VERSIONS:
            raise fail(self, "lustre_version", version, ", ".join(LUSTRE_VERSIONS))
        if repository is not None and version not in DRA_LUSTRE_VERSIONS:
            raise fail(self, "lustre_version", version, f"{', '.join(DRA_LUSTRE_VERSIONS)} with a data_repository")

    def _validate_mount_path(self, mount_path: str) -> None:
        if not ABSOLUTE_PATH_RE.fullmatch(mount_path or "") or ".." in mount_path or mount_path == "/":
            raise fail(self, "mount_path", mount_path, "an absolute directory such as '/fsx' (letters, digits, ._-/)")

    def _validate_backup(self, facts: LustreTypeFacts, retention: Duration | None) -> None:
        if retention is None:
            return
        if not facts.replicated:
            raise fail(self, "automatic_backup_retention", retention.to_human_string(), "None for SCRATCH_2")
        days = retention.to_days()
        if not 0 <= days <= 90:
            raise fail(self, "automatic_backup_retention", f"{days} days", "0 to 90 days")

    def _validate_repository(self, repo: LustreDataRepository) -> None:
        path = repo.file_system_path
        if not ABSOLUTE_PATH_RE.fullmatch(path or "") or ".." in path or "//" in path:
            raise fail(self, "data_repository.file_system_path", path, "an absolute path such as '/datasets'")
        check_key_prefix(self, "data_repository.prefix", repo.prefix)
        bad_events = [e for e in repo.events if e not in ("NEW", "CHANGED", "DELETED")]
        if bad_events or not repo.events:
            raise fail(self, "data_repository.events", list(repo.events), "a non-empty subset of NEW, CHANGED, DELETED")
        if not repo.auto_import and not repo.auto_export and not repo.batch_import_metadata_on_create:
            raise fail(
                self,
                "data_repository",
                "auto_import=False, auto_export=False, batch_import_metadata_on_create=False",
                "at least one of them True (otherwise the link moves no data)",
            )
        size = repo.imported_file_chunk_size_mib
        if size is not None and not is_token(size):
            lo, hi = CHUNK_SIZE_RANGE_MIB
            if isinstance(size, bool) or not isinstance(size, int) or not lo <= size <= hi:
                raise fail(self, "data_repository.imported_file_chunk_size_mib", size, f"an integer {lo}..{hi}")

    def _select_subnet(self, vpc: ec2.IVpc, selection: ec2.SubnetSelection | None) -> ec2.ISubnet:
        subnets = select_subnets(vpc, selection).subnets if selection is not None else vpc.private_subnets
        if not subnets and selection is None:
            subnets = vpc.isolated_subnets
        if not subnets:
            raise fail(self, "vpc_subnets", "<empty selection>", "a selection with at least one subnet")
        return subnets[0]

    @staticmethod
    def _remove_l2_port_range(security_group: ec2.ISecurityGroup) -> None:
        """The L2 opens TCP 988-1023 within its group; the platform opens only 988 and 1018-1023."""
        for child in list(security_group.node.children):
            if isinstance(child, ec2.CfnSecurityGroupIngress) and child.node.id.endswith(":988-1023"):
                security_group.node.try_remove_child(child.node.id)

    # -- S3 link ----------------------------------------------------------------------------------------

    def _link(self, repo: LustreDataRepository) -> fsx.CfnDataRepositoryAssociation:
        repository_path = f"s3://{repo.bucket.bucket_name}/{as_key_prefix(repo.prefix)}"
        events = list(repo.events)
        association = fsx.CfnDataRepositoryAssociation(
            self,
            "DataRepositoryAssociation",
            file_system_id=self.file_system.file_system_id,
            file_system_path=repo.file_system_path,
            data_repository_path=repository_path,
            batch_import_meta_data_on_create=repo.batch_import_metadata_on_create,
            imported_file_chunk_size=repo.imported_file_chunk_size_mib,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=(
                    fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=events)
                    if repo.auto_import
                    else None
                ),
                auto_export_policy=(
                    fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=events)
                    if repo.auto_export
                    else None
                ),
            ),
        )
        key = repo.bucket.encryption_key
        if repo.grant_bucket_key and key is not None:
            self._allow_service_linked_role(key, write=repo.auto_export)
        return association

    def _allow_service_linked_role(self, key: kms.IKey, *, write: bool) -> None:
        """Let this account's FSx S3 service-linked roles use the bucket's key, only through S3 in this region.

        The statement names no bucket ARN: the key usually lives in the bucket's stack, and a reference from
        the key policy to a bucket encrypted with that key would be a circular dependency. Each role can only
        reach the bucket linked to its own file system.
        """
        stack = Stack.of(self)
        actions = ["kms:Decrypt", "kms:DescribeKey"]
        if write:
            actions += ["kms:Encrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*"]
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowFsxS3ServiceLinkedRolesThroughS3",
                principals=[iam.AnyPrincipal()],
                actions=actions,
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "aws:PrincipalArn": (
                            f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/"
                            "s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-*"
                        )
                    },
                    "StringEquals": {
                        "kms:CallerAccount": stack.account,
                        "kms:ViaService": f"s3.{stack.region}.amazonaws.com",
                    },
                },
            )
        )
        if isinstance(key, kms.Key):
            nag.checkov_skip(key, "CKV_AWS_33", WILDCARD_PRINCIPAL_REASON)

    # -- what it exposes --------------------------------------------------------------------------------

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    @property
    def dns_name(self) -> str:
        return self.file_system.dns_name

    @property
    def mount_name(self) -> str:
        return self.file_system.mount_name

    @property
    def availability_zone(self) -> str:
        return self.subnet.availability_zone

    def allow_clients(self, *clients: ec2.IConnectable, description: str = "Lustre client") -> None:
        """Admit Lustre traffic (TCP 988 and 1018-1023) between the file system and each client, both ways.

        The rules name the clients' security groups, never CIDRs; with a client in another stack, the
        rules are created in this construct's stack.
        """
        if not clients:
            raise fail(self, "clients", [], "at least one ec2.IConnectable (a security group, a fleet, ...)")
        for client in clients:
            for port in LUSTRE_PORTS:
                self.connections.allow_from(client, port, f"{description} to FSx for Lustre")
                self.connections.allow_to(client, port, f"FSx for Lustre to {description}")

    def directory_path(self, path: str = "") -> str:
        """``DirectoryPath`` of a SageMaker channel: ``/<mount name>/<path>``; ``path`` is relative to the
        file system root (default: the linked directory, e.g. ``datasets``, or the root without a link)."""
        linked = self.data_repository.file_system_path.strip("/") if self.data_repository is not None else ""
        return _lustre_directory(self, self.mount_name, path, linked)

    def _channel_target(self, path: str | None) -> tuple[str, str]:
        return self.file_system_id, self.directory_path(path or "")

    def mount_command(self, mount_path: str | None = None) -> str:
        """The Linux command that mounts the file system (EC2 user data); needs the Lustre client."""
        target = mount_path or self.mount_path
        self._validate_mount_path(target)
        return f"mkdir -p {target} && mount -t lustre -o relatime,flock {self.dns_name}@tcp:/{self.mount_name} {target}"


@jsii.implements(ec2.IConnectable)
class ImportedLustreFileSystem(FileSystemChannelSource):
    """An existing FSx for Lustre file system, for fleets, notebooks and training channels.

    It creates nothing: it carries the attributes a client needs (mount ``<dns_name>@tcp:/<mount_name>``)
    and ``connections`` over the file system's existing security groups, so ``GpuFleet(file_system=...)``
    and ``GpuNotebook(file_system=...)`` open the Lustre ports to their clients as for a new one.

    :param file_system_id: ``fs-...`` (required).
    :param dns_name: the file system's DNS name, ``fs-....fsx.<region>.amazonaws.com`` (required).
    :param mount_name: the Lustre mount name (required; ``fsx`` for SCRATCH_1 file systems).
    :param security_groups: the file system's security groups (required, at least one; ``connections`` has no
        default port: clients open :data:`LUSTRE_PORTS`).
    :param mount_path: where clients mount it (default: ``/fsx``).
    """

    channel_file_system_type = "FSxLustre"

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        file_system_id: str,
        dns_name: str,
        mount_name: str,
        security_groups: Sequence[ec2.ISecurityGroup],
        mount_path: str = "/fsx",
    ) -> None:
        super().__init__(scope, construct_id)
        if not is_token(file_system_id) and not is_file_system_id(file_system_id):
            raise fail(self, "file_system_id", file_system_id, FILE_SYSTEM_ID_ALLOWED)
        if not security_groups:
            raise fail(self, "security_groups", [], "at least one security group of the file system")
        if not mount_path.startswith("/") or ".." in mount_path:
            raise fail(self, "mount_path", mount_path, "an absolute path without '..'")
        self.file_system_id = file_system_id
        self.dns_name = dns_name
        self.mount_name = mount_name
        self.mount_path = mount_path
        self._connections = ec2.Connections(security_groups=list(security_groups))

    def directory_path(self, path: str = "") -> str:
        """``DirectoryPath`` of a SageMaker channel: ``/<mount name>/<path>`` (default: the root)."""
        return _lustre_directory(self, self.mount_name, path)

    def _channel_target(self, path: str | None) -> tuple[str, str]:
        return self.file_system_id, self.directory_path(path or "")


def lustre_ports_text(ports: Sequence[ec2.Port] = LUSTRE_PORTS) -> str:
    return ", ".join(p.to_string() for p in ports)
