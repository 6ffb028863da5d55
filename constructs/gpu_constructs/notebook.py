"""``GpuNotebook``: a SageMaker notebook instance on a GPU type, private, encrypted, checked at every start.

The seeds' case: someone picked a CPU notebook and wondered why there is no GPU. Here the instance type
goes through the catalog: a type without an NVIDIA GPU (or one SageMaker notebooks do not offer) is an
error that names fitting GPU notebook types. The notebook runs in the VPC with no direct internet access,
an encrypted ML storage volume, root access off, IMDSv2 only and a least-privilege role, and its OnStart
lifecycle script (``assets/notebook_on_start.sh``) checks the GPUs (nvidia-smi, then torch), runs
``gpuctl doctor`` and optionally mounts FSx for Lustre. A failed check fails the start, with the reason in
the ``/aws/sagemaker/NotebookInstances`` log group.
"""

from __future__ import annotations

import re

import jsii
from aws_cdk import Duration, Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from gpu_constructs import nag
from gpu_constructs.catalog import InstanceType, lookup, require_nvidia_gpu
from gpu_constructs.errors import ValidationError, fail, is_token, path_of, require_range
from gpu_constructs.fleet import (
    DATA_GRANT_REASON,
    LustreFileSystemLike,
    PolicyWildcards,
    allow_lustre_clients,
    render_script,
)

__all__ = ["LIFECYCLE_CONTENT_LIMIT", "NOTEBOOK_LOG_GROUP", "GpuNotebook"]

#: Where SageMaker writes notebook instance logs (lifecycle scripts: stream <name>/LifecycleConfigOnStart).
NOTEBOOK_LOG_GROUP = "/aws/sagemaker/NotebookInstances"

_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_S3_URI_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9!_.*'()/=+-]+\.whl$")
_MOUNT_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
#: SageMaker limit of a lifecycle configuration's base64 content (NotebookInstanceLifecycleHook.Content).
LIFECYCLE_CONTENT_LIMIT = 16384
# SageMaker stops a lifecycle script after five minutes.
_LIFECYCLE_LIMIT_SECONDS = 300


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class GpuNotebook(Construct):
    """A SageMaker notebook instance on a catalog GPU type, in the VPC, checked at every start.

    :param notebook_name: name of the notebook instance (``[a-zA-Z0-9](-*[a-zA-Z0-9])*``, up to 63).
    :param instance_type: SageMaker notebook type from the catalog, with the ``ml.`` prefix
        (e.g. ``ml.g5.xlarge``).
    :param subnet: the private subnet of the notebook's network interface.
    :param security_groups: security groups of that interface (at least one).
    :param volume_key: KMS key of the ML storage volume (the platform's data key).
    :param gpu: a GPU is required (default: True). A type without an NVIDIA GPU is then an error naming
        fitting GPU types; False allows CPU types and skips the GPU check.
    :param volume_size_gib: ML storage volume (default: 50 GiB; 5..16384).
    :param role: execution role (default: a new role with CloudWatch Logs for the notebook's streams
        only; data access comes from grants on ``grant_principal``).
    :param gpuctl_package_uri: ``s3://`` URI of a wheel that provides ``gpuctl``; the start script installs
        it into the PyTorch environment when gpuctl is missing (default: none, gpuctl must be present).
        Grant the role read access to it.
    :param file_system: an FSx for Lustre file system to mount at start (default: none).
    :param open_lustre_ports: open Lustre traffic between it and the first security group (default: True);
        False when the file system's owner already admits the group (duplicate rules fail to deploy).
    :param lustre_mount_path: default ``/home/ec2-user/SageMaker/fsx``.
    :param lustre_mount_attempts: default 12. :param lustre_retry_interval: default 10 seconds; together
        they must stay below the 5-minute limit of lifecycle scripts.
    :param platform_identifier: notebook platform, e.g. ``notebook-al2-v3`` (default: SageMaker's default).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        notebook_name: str,
        instance_type: str,
        subnet: ec2.ISubnet,
        security_groups: list[ec2.ISecurityGroup],
        volume_key: kms.IKey,
        gpu: bool = True,
        volume_size_gib: int = 50,
        role: iam.IRole | None = None,
        gpuctl_package_uri: str | None = None,
        file_system: LustreFileSystemLike | None = None,
        open_lustre_ports: bool = True,
        lustre_mount_path: str = "/home/ec2-user/SageMaker/fsx",
        lustre_mount_attempts: int = 12,
        lustre_retry_interval: Duration = Duration.seconds(10),
        platform_identifier: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._wildcards: PolicyWildcards | None = None
        self._validate_name(notebook_name)
        self.instance: InstanceType = self._validate_instance_type(instance_type, gpu)
        self._validate_volume(volume_size_gib)
        self._validate_security_groups(security_groups)
        self._validate_package_uri(gpuctl_package_uri)
        self._validate_lustre(file_system, lustre_mount_path, lustre_mount_attempts, lustre_retry_interval)
        stack = Stack.of(self)
        self.notebook_name = notebook_name
        self.gpu_count = self.instance.nvidia_gpu_count if gpu else 0

        if role is None:
            new_role = iam.Role(
                self,
                "Role",
                assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                description=f"GPU notebook {notebook_name}: its own log streams; data access by grants",
            )
            log_streams = (
                f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{NOTEBOOK_LOG_GROUP}:"
                f"log-stream:{notebook_name}/*"
            )
            statements = [
                (
                    iam.PolicyStatement(
                        sid="NotebookLogGroup",
                        actions=["logs:CreateLogGroup", "logs:DescribeLogStreams", "logs:CreateLogStream"],
                        resources=[
                            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:"
                            f"{NOTEBOOK_LOG_GROUP}:*"
                        ],
                    ),
                    LOG_GROUP_REASON,
                ),
                (
                    iam.PolicyStatement(
                        sid="NotebookLogStreams", actions=["logs:PutLogEvents"], resources=[log_streams]
                    ),
                    LOG_STREAM_REASON,
                ),
            ]
            for statement, _reason in statements:
                new_role.add_to_principal_policy(statement)
            policy = new_role.node.try_find_child("DefaultPolicy")
            assert policy is not None
            nag.acknowledge_compliance(policy, "IAMNoInlinePolicy", ROLE_POLICY_REASON)
            self._wildcards = PolicyWildcards(policy)
            for statement, reason in statements:
                self._wildcards.expect(statement, reason)
            self.node.add_validation(self._wildcards)
            role = new_role
        self.role = role
        self._connections = ec2.Connections(security_groups=list(security_groups))
        if file_system is not None and open_lustre_ports:
            allow_lustre_clients(self, file_system, security_groups[0])

        settings = {
            "NOTEBOOK_NAME": notebook_name,
            "INSTANCE_TYPE": self.instance.sagemaker_name,
            "EXPECTED_GPUS": str(self.gpu_count),
            "AWS_REGION": stack.region,
        }
        if gpuctl_package_uri:
            settings["GPUCTL_PACKAGE_URI"] = gpuctl_package_uri
        if file_system is not None:
            settings.update(
                {
                    "LUSTRE_DNS_NAME": file_system.dns_name,
                    "LUSTRE_MOUNT_NAME": file_system.mount_name,
                    "LUSTRE_MOUNT_PATH": lustre_mount_path,
                    "LUSTRE_MOUNT_ATTEMPTS": str(lustre_mount_attempts),
                    "LUSTRE_RETRY_SECONDS": str(int(lustre_retry_interval.to_seconds())),
                }
            )
        self.start_script = render_script("notebook_on_start.sh", settings)
        self._validate_script_size(self.start_script)
        self.lifecycle_config = sagemaker.CfnNotebookInstanceLifecycleConfig(
            self,
            "LifecycleConfig",
            notebook_instance_lifecycle_config_name=f"{notebook_name}-gpu-check",
            on_start=[
                sagemaker.CfnNotebookInstanceLifecycleConfig.NotebookInstanceLifecycleHookProperty(
                    content=Fn.base64(self.start_script)
                )
            ],
        )
        self.notebook = sagemaker.CfnNotebookInstance(
            self,
            "Resource",
            notebook_instance_name=notebook_name,
            instance_type=self.instance.sagemaker_name,
            role_arn=role.role_arn,
            subnet_id=subnet.subnet_id,
            security_group_ids=[sg.security_group_id for sg in security_groups],
            direct_internet_access="Disabled",
            root_access="Disabled",
            kms_key_id=volume_key.key_arn,
            volume_size_in_gb=volume_size_gib,
            lifecycle_config_name=self.lifecycle_config.attr_notebook_instance_lifecycle_config_name,
            instance_metadata_service_configuration=sagemaker.CfnNotebookInstance.InstanceMetadataServiceConfigurationProperty(
                minimum_instance_metadata_service_version="2"
            ),
            platform_identifier=platform_identifier,
        )
        # The role's policy must exist before SageMaker starts the notebook and runs the lifecycle script.
        policy_node = role.node.try_find_child("DefaultPolicy")
        if policy_node is not None:
            self.notebook.node.add_dependency(policy_node)

    # -- validation -------------------------------------------------------------------------------------

    def _validate_name(self, name: str) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise fail(self, "notebook_name", name, "1-63 letters, digits and hyphens, starting with a letter or digit")

    def _validate_instance_type(self, instance_type: str, gpu: bool) -> InstanceType:
        where = path_of(self)
        if gpu:
            return require_nvidia_gpu(instance_type, where=where, usage="notebook")
        it = lookup(instance_type, where=where)
        if instance_type != it.sagemaker_name or "notebook" not in it.sagemaker_uses:
            raise fail(
                self,
                "instance_type",
                instance_type,
                "a SageMaker notebook type with the 'ml.' prefix, e.g. 'ml.t3.medium' (see docs/gpu-instances.md)",
            )
        return it

    def _validate_volume(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int):
            raise fail(self, "volume_size_gib", size, "a whole number of GiB from 5 to 16384")
        require_range(self, "volume_size_gib", size, minimum=5, maximum=16384)

    def _validate_security_groups(self, groups: list[ec2.ISecurityGroup]) -> None:
        if not groups or len(groups) > 5:
            raise fail(self, "security_groups", len(groups or []), "1 to 5 security groups")

    def _validate_package_uri(self, uri: str | None) -> None:
        if uri is None or is_token(uri):
            return
        if not _S3_URI_RE.match(uri):
            raise fail(self, "gpuctl_package_uri", uri, "an s3://bucket/key.whl URI of the gpuctl wheel")

    def _validate_lustre(
        self, file_system: LustreFileSystemLike | None, path: str, attempts: int, interval: Duration
    ) -> None:
        if file_system is None:
            return
        if not isinstance(file_system, LustreFileSystemLike):
            raise fail(self, "file_system", file_system, "an object with dns_name, mount_name and connections")
        if not _MOUNT_PATH_RE.match(path) or ".." in path:
            raise fail(self, "lustre_mount_path", path, "an absolute path of letters, digits and ._-/")
        require_range(self, "lustre_mount_attempts", attempts, minimum=1)
        require_range(self, "lustre_retry_interval (seconds)", interval.to_seconds(), minimum=0)
        budget = attempts * interval.to_seconds()
        if budget > _LIFECYCLE_LIMIT_SECONDS - 60:
            raise fail(
                self,
                "lustre_mount_attempts x lustre_retry_interval (seconds)",
                budget,
                f"at most {_LIFECYCLE_LIMIT_SECONDS - 60} (SageMaker stops lifecycle scripts after 5 minutes)",
            )

    def _validate_script_size(self, script: str) -> None:
        # OnStart content is base64, at most 16384 characters; tokens (region, bucket, DNS name) render as
        # ~20-character placeholders here, so keep 512 bytes for their values.
        encoded = 4 * -(-(len(script.encode()) + 512) // 3)
        if encoded > LIFECYCLE_CONTENT_LIMIT:
            raise ValidationError(
                path_of(self),
                f"the rendered start script needs about {encoded} base64 characters; allowed: at most "
                f"{LIFECYCLE_CONTENT_LIMIT} (SageMaker lifecycle configuration content)",
            )

    # -- exposed ----------------------------------------------------------------------------------------

    def acknowledge_data_grants(self, *grants: iam.Grant, encryption_key: kms.IKey | None = None) -> None:
        """Acknowledge the wildcard findings (IAM5) of S3 data grants to the notebook's own role, exactly those
        (see :meth:`GpuFleet.acknowledge_data_grants`); nothing for a role passed in."""
        if self._wildcards is None:
            return
        for grant in grants:
            for statement in grant.principal_statements:
                self._wildcards.expect(statement, DATA_GRANT_REASON)
        if encryption_key is not None:
            self._wildcards.expect_key_actions(encryption_key, DATA_GRANT_REASON)

    @property
    def connections(self) -> ec2.Connections:
        return self._connections

    @property
    def grant_principal(self) -> iam.IPrincipal:
        return self.role.grant_principal

    @property
    def notebook_instance_name(self) -> str:
        return self.notebook.attr_notebook_instance_name


ROLE_POLICY_REASON = (
    "Safe because this inline policy is created by CDK for exactly one role (the notebook's execution role), "
    "is deleted with it and cannot be attached elsewhere; it holds only scoped log and data grants"
)
LOG_GROUP_REASON = (
    "Safe because the statement covers only the SageMaker notebook log group, where SageMaker writes this "
    "notebook's streams; the wildcard is the stream suffix of the log group ARN"
)
LOG_STREAM_REASON = (
    "Safe because PutLogEvents is limited to the log streams named after this notebook, whose suffixes "
    "(LifecycleConfigOnStart, jupyter.log) SageMaker chooses"
)
