"""``GpuNotebook``: a SageMaker notebook instance on a GPU type, private, encrypted, checked at every start.

The seeds' case: someone picked a CPU notebook and wondered why there is no GPU. Here the instance type
goes through the catalog: a type without an NVIDIA GPU (or one SageMaker notebooks do not offer) is an
error that names fitting GPU notebook types. The notebook runs in the VPC with no direct internet access,
an encrypted ML storage volume, root access off, IMDSv2 only and a least-privilege role, and its OnStart
lifecycle script (``assets/notebook_on_start.sh``) checks the GPUs (nvidia-smi, then torch) and optionally
mounts FSx for Lustre; a failed check fails the start, with the reason in the
``/aws/sagemaker/NotebookInstances`` log group. Then, as an optional step that never fails the start, it
installs a package (``NotebookPackage``: the platform ships its own ``gpuctl`` wheel as a CDK S3 asset)
into the PyTorch conda environment and runs ``gpuctl doctor``.

AWS facts this relies on:

- "Lifecycle configuration scripts cannot run for longer than 5 minutes. If a script runs for longer than
  5 minutes, it fails and the notebook instance is not created or started", and "Each lifecycle
  configuration script has a limit of 16384 characters" (SageMaker API Reference,
  NotebookInstanceLifecycleHook, https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_NotebookInstanceLifecycleHook.html).
  A failed start of a new notebook fails its CloudFormation create, which rolls the stack back: so only
  the checks the user asked for may fail it, and the optional step runs in the background.
- AWS's advice for long work: "Run tasks in parallel processes" and "Use the nohup command in your script
  to make sure that hangup signals are ignored" (SageMaker Developer Guide, "Lifecycle configuration
  timeout", https://docs.aws.amazon.com/sagemaker/latest/dg/studio-lifecycle-configurations-debug-timeout.html).
- The notebook's Python is 3.10 on every platform: ``conda_pytorch_p310`` "comes with Python 3.10" on
  ``notebook-al2-v1``/``-v2``/``-v3`` ("Amazon Linux 2 notebook instances",
  https://docs.aws.amazon.com/sagemaker/latest/dg/nbi-al2.html), and ``conda_pytorch`` "comes with
  Python 3.10" on ``notebook-al2023-v1`` ("AL2023 notebook instances",
  https://docs.aws.amazon.com/sagemaker/latest/dg/nbi-al2023.html), the default platform: botocore
  1.44.5, sagemaker CreateNotebookInstanceInput.PlatformIdentifier: "The default value is
  ``notebook-al2023-v1``". A package must therefore install on Python 3.10 (the platform's wheel says
  ``Requires-Python: >=3.10``; tests/constructs/notebook/test_notebook_package.py checks it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import Duration, Fn, Size, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from gpu_constructs.catalog import InstanceType, lookup, require_nvidia_gpu
from gpu_constructs.constants import SAGEMAKER_NAME_RE
from gpu_constructs.deprecation import renamed_keywords
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.file_systems.lustre_clients import allow_lustre_clients
from gpu_constructs.file_systems.lustre_mount import LustreFileSystemLike, LustreMount
from gpu_constructs.notebook.options import check_package_key, check_volume_size
from gpu_constructs.packaging.scripts import render_script
from gpu_constructs.packaging.wheel import WHEEL_NAME_ALLOWED, WHEEL_NAME_RE
from gpu_constructs.principals import RoleCompute
from gpu_constructs.role_acknowledgments import PolicyWildcards, acknowledge_role_policy

__all__ = ["LIFECYCLE_CONTENT_LIMIT", "NOTEBOOK_LOG_GROUP", "NOTEBOOK_PYTHON", "GpuNotebook", "NotebookPackage"]

#: Python of the notebooks' conda environments (conda_pytorch_p310, conda_pytorch) on every platform, AL2 and
#: AL2023 (see the module docstring): a NotebookPackage must install and run on it.
NOTEBOOK_PYTHON = "3.10"
#: Where SageMaker writes notebook instance logs (lifecycle scripts: stream <name>/LifecycleConfigOnStart).
NOTEBOOK_LOG_GROUP = "/aws/sagemaker/NotebookInstances"

#: SageMaker limit of a lifecycle configuration's base64 content (NotebookInstanceLifecycleHook.Content).
LIFECYCLE_CONTENT_LIMIT = 16384
# SageMaker stops a lifecycle script after five minutes.
_LIFECYCLE_LIMIT_SECONDS = 300
#: The start script's own work (GPU check, Lustre mount, waiting for the optional step) ends by then.
_START_BUDGET_SECONDS = _LIFECYCLE_LIMIT_SECONDS - 60
_START_BUDGET_REASON = " (SageMaker stops lifecycle scripts after 5 minutes)"
#: The ML storage volume when none is given.
DEFAULT_VOLUME_SIZE = Size.gibibytes(50)


@dataclass(frozen=True)
class NotebookPackage:
    """A wheel that the start script installs into the notebook's PyTorch conda environment.

    The install is ``pip install --no-index --no-deps`` (the notebook may have no path to a package
    index), so the wheel must bring everything the environment lacks, and it must accept the notebook's
    Python (``NOTEBOOK_PYTHON``, 3.10). It is optional: a missing object or a failed install is logged
    and skipped, never a failed start. Use a factory.
    """

    #: A wheel file on this machine (from_wheel_file), shipped as a CDK S3 asset.
    wheel_file: Path | None = None
    #: The bucket of a wheel already in S3 (from_bucket).
    bucket: s3.IBucket | None = None
    #: Its object key; the last part is the wheel's file name.
    key: str | None = None
    #: A KMS key the role may decrypt with to read the object (default: none).
    encryption_key: kms.IKey | None = None

    @staticmethod
    def from_wheel_file(path: str | os.PathLike[str], *, encryption_key: kms.IKey | None = None) -> NotebookPackage:
        """A wheel file on this machine, shipped with the stack as a CDK S3 asset (``cdk deploy`` uploads
        it before the stack deploys). The notebook's role may read exactly that object.

        :param encryption_key: the KMS key of the asset bucket, when it is a key whose policy does not
            already allow use through S3 by the account's principals (default: none). The CDK bootstrap's
            keys do: ``aws/s3`` (the CLI's default, ``AWS_MANAGED_KEY``) and the key of ``cdk bootstrap
            --bootstrap-customer-key``, whose policy (aws-cdk ``bootstrap-template.yaml``,
            ``FileAssetsBucketEncryptionKey``) allows ``kms:Decrypt`` to principal ``*`` under
            ``kms:CallerAccount`` = the account and ``kms:ViaService`` = ``s3.<region>.amazonaws.com``.
        """
        return NotebookPackage(wheel_file=Path(path), encryption_key=encryption_key)

    @staticmethod
    def from_bucket(bucket: s3.IBucket, key: str) -> NotebookPackage:
        """A wheel already in S3 (uploaded by you). The role may read exactly that object, and decrypt
        with the bucket's KMS key when the bucket has one."""
        return NotebookPackage(bucket=bucket, key=key, encryption_key=bucket.encryption_key)


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class GpuNotebook(RoleCompute, Construct):
    """A SageMaker notebook instance on a catalog GPU type, in the VPC, checked at every start.

    :param notebook_name: name of the notebook instance (``[a-zA-Z0-9](-*[a-zA-Z0-9])*``, up to 63).
    :param instance_type: SageMaker notebook type from the catalog, with the ``ml.`` prefix
        (e.g. ``ml.g5.xlarge``).
    :param subnet: the private subnet of the notebook's network interface.
    :param security_groups: security groups of that interface (at least one).
    :param volume_key: KMS key of the ML storage volume (the platform's data key).
    :param gpu: a GPU is required (default: True). A type without an NVIDIA GPU is then an error naming
        fitting GPU types; False allows CPU types and skips the GPU check.
    :param volume_size: ML storage volume, a whole number of GiB from 5 to 16384 (default: 50 GiB).
    :param role: execution role (default: a new role with CloudWatch Logs for the notebook's streams
        only; data access comes from grants on ``grant_principal``).
    :param package: a wheel (``NotebookPackage``) that provides ``gpuctl``; the start script installs it
        into the PyTorch environment in the background when gpuctl is missing, then runs ``gpuctl doctor``;
        neither can fail the start (default: none; doctor runs when gpuctl is already installed). The role
        may read exactly that object.
    :param file_system: an FSx for Lustre file system to mount at start (default: none).
    :param open_lustre_ports: open Lustre traffic between it and the first security group (default: True);
        False when the file system's owner already admits the group (duplicate rules fail to deploy).
    :param lustre_mount_path: default ``/home/ec2-user/SageMaker/fsx``.
    :param lustre_mount_attempts: default 12. :param lustre_retry_interval: default 10 seconds; together
        they must stay below the 5-minute limit of lifecycle scripts.
    :param platform_identifier: notebook platform, e.g. ``notebook-al2-v3`` (default: SageMaker's default).

    Deprecated keyword, for one release: ``volume_size_gib`` (an ``int``; use ``volume_size``).
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
        volume_size: Size | None = None,
        role: iam.IRole | None = None,
        package: NotebookPackage | None = None,
        file_system: LustreFileSystemLike | None = None,
        open_lustre_ports: bool = True,
        lustre_mount_path: str = "/home/ec2-user/SageMaker/fsx",
        lustre_mount_attempts: int = 12,
        lustre_retry_interval: Duration = Duration.seconds(10),
        platform_identifier: str | None = None,
        **deprecated: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        self._wildcards: PolicyWildcards | None = None
        volume_size = _volume_size(path_of(self), volume_size, deprecated)
        self._validate_name(notebook_name)
        self.instance: InstanceType = self._validate_instance_type(instance_type, gpu)
        self._validate_security_groups(security_groups)
        self._validate_package(package)
        mount = self._lustre_mount(
            file_system, lustre_mount_path, open_lustre_ports, lustre_mount_attempts, lustre_retry_interval
        )
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
            self._wildcards = acknowledge_role_policy(self, new_role, statements, ROLE_POLICY_REASON)
            role = new_role
        self.role = role
        self._connections = ec2.Connections(security_groups=list(security_groups))
        if mount is not None and mount.open_ports:
            allow_lustre_clients(self, mount.file_system, security_groups[0])

        settings = {
            "NOTEBOOK_NAME": notebook_name,
            "INSTANCE_TYPE": self.instance.sagemaker_name,
            "EXPECTED_GPUS": str(self.gpu_count),
            "AWS_REGION": stack.region,
            "START_BUDGET_SECONDS": str(_START_BUDGET_SECONDS),
        }
        self.package_asset: s3_assets.Asset | None = None
        if package is not None:
            settings["GPUCTL_PACKAGE_URI"], settings["GPUCTL_PACKAGE_FILE"] = self._bind_package(package, role)
        if mount is not None:
            settings.update(mount.script_settings())
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
            volume_size_in_gb=volume_size.to_gibibytes(),
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
        if not isinstance(name, str) or not SAGEMAKER_NAME_RE.match(name):
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

    def _lustre_mount(
        self,
        file_system: LustreFileSystemLike | None,
        mount_path: str,
        open_ports: bool,
        mount_attempts: int,
        retry_interval: Duration,
    ) -> LustreMount | None:
        """The mount of ``file_system`` (none without one), validated, its retries within the start script's share
        of the 5-minute limit of lifecycle scripts."""
        if file_system is None:
            return None
        mount = LustreMount(
            file_system, mount_path, open_ports=open_ports, mount_attempts=mount_attempts, retry_interval=retry_interval
        )
        budget = Duration.seconds(_START_BUDGET_SECONDS)
        mount.validate(path_of(self), max_wait=budget, max_wait_reason=_START_BUDGET_REASON)
        return mount

    def _validate_security_groups(self, groups: list[ec2.ISecurityGroup]) -> None:
        if not groups or len(groups) > 5:
            raise fail(self, "security_groups", len(groups or []), "1 to 5 security groups")

    def _validate_package(self, package: NotebookPackage | None) -> None:
        if package is None:
            return
        if not isinstance(package, NotebookPackage) or (package.wheel_file is None) == (package.bucket is None):
            raise fail(self, "package", package, "NotebookPackage.from_wheel_file(...) or .from_bucket(...)")
        if package.wheel_file is not None:
            if not WHEEL_NAME_RE.match(package.wheel_file.name):
                raise fail(self, "package (wheel file)", str(package.wheel_file), WHEEL_NAME_ALLOWED)
            if not package.wheel_file.is_file():
                raise fail(self, "package (wheel file)", str(package.wheel_file), "an existing file")
            return
        key = package.key
        if not isinstance(key, str) or is_token(key):
            raise fail(self, "package (bucket key)", key, "a literal S3 key (its file name is the wheel's)")
        check_package_key(path_of(self), key)

    def _bind_package(self, package: NotebookPackage, role: iam.IRole) -> tuple[str, str]:
        """The package's ``s3://`` URI and local file name; the role may read exactly that object."""
        if package.wheel_file is not None:
            asset = s3_assets.Asset(self, "Package", path=str(package.wheel_file))
            self.package_asset = asset
            bucket, key, uri = asset.bucket, asset.s3_object_key, asset.s3_object_url
            name = package.wheel_file.name
        else:
            assert package.bucket is not None and package.key is not None
            bucket, key = package.bucket, package.key
            uri, name = f"s3://{bucket.bucket_name}/{key}", key.rsplit("/", 1)[-1]
        # s3:GetObject on the one object: all `aws s3 cp` needs (HeadObject is authorized by GetObject).
        iam.Grant.add_to_principal(grantee=role, actions=["s3:GetObject"], resource_arns=[bucket.arn_for_objects(key)])
        if package.encryption_key is not None:
            package.encryption_key.grant_decrypt(role)
        return uri, name

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

    @property
    def notebook_instance_name(self) -> str:
        return self.notebook.attr_notebook_instance_name


def _volume_size(where: str, volume_size: Size | None, deprecated: dict[str, Any]) -> Size:
    """``volume_size``, or the deprecated ``volume_size_gib`` (whole GiB) as a ``Size``, or the default; validated."""
    keywords = renamed_keywords(
        "GpuNotebook", {"volume_size": volume_size, **deprecated}, {"volume_size_gib": "volume_size"}
    )
    unknown = sorted(set(keywords) - {"volume_size"})
    if unknown:
        raise TypeError(f"GpuNotebook() got an unexpected keyword argument {unknown[0]!r}")
    size = keywords["volume_size"]
    if size is None:
        return DEFAULT_VOLUME_SIZE
    if isinstance(size, Size):
        check_volume_size(where, size.to_gibibytes(), "volume_size (GiB)")
        return size
    check_volume_size(where, size, "volume_size_gib")  # the deprecated keyword's whole GiB
    return Size.gibibytes(size)


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
