"""The training stack: the training pipeline (state machine, job roles, dashboard, alarms) of one environment.

Jobs run in the network stack's training subnets with its training security group (which the FSx file
system admits), read the datasets bucket of the data stack (or the FSx for Lustre file system of the
storage stack), write to the artifacts bucket, and use the training image of the images stack.

The stack publishes what ``gpuctl`` needs as outputs, so users type no ARNs: the state machine, the
execution role, the job-name prefix and the SSM parameter that holds the whole job spec (JSON of
:class:`~gpu_constructs.training_spec.TrainingJobSpec`).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Size
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.constants import TRAINING_SUBNETS
from gpu_constructs.errors import ValidationError
from gpu_constructs.fsx import GpuLustreFileSystem
from gpu_constructs.retention import retention_days
from gpu_constructs.storage import PlatformStorage
from gpu_constructs.training import TrainingImageLike, TrainingPipeline
from gpu_constructs.training_spec import DATA_VERSION_PLACEHOLDER, Channel, FsxChannel, S3Channel
from gpu_train import hyperparameters as runtime_hyperparameters
from gpu_train.metrics import METRIC_DEFINITIONS
from stacks.base import REPOSITORY_ROOT, WorkloadStack
from stacks.config import ConfigError, TrainingConfig
from stacks.config.training import TrainingCodeConfig
from stacks.image_parameter import image_from_parameter

#: Outputs ``gpuctl`` reads (CloudFormation DescribeStacks).
OUTPUT_STATE_MACHINE = "StateMachineArn"
OUTPUT_ROLE = "ExecutionRoleArn"
OUTPUT_PREFIX = "JobNamePrefix"
OUTPUT_SPEC_PARAMETER = "JobSpecParameter"
OUTPUT_DASHBOARD = "DashboardName"
OUTPUT_TOPIC = "NotificationTopicArn"
OUTPUT_LOG_GROUP = "StateMachineLogGroup"


def training_stack_name(resource_prefix: str) -> str:
    return f"{resource_prefix}-training"


class TrainingStack(WorkloadStack):
    """The GPU training pipeline configured by ``training`` in ``config/<env>.yaml``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        image: TrainingImageLike,
        lustre: GpuLustreFileSystem | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        config, network, storage = self.config, self.network, self.storage
        training = config.training
        image = image_from_parameter(self, image, config, "training")
        code = training.code
        if code is None:
            check_hyperparameters(training)  # the built-in trainer's own parser
        prefix = f"{config.resource_prefix}-{training.name}"
        channels, subnets = training_channels(training, storage, lustre)
        self.pipeline = TrainingPipeline(
            self,
            "Pipeline",
            image=image,
            storage=storage,
            job_name_prefix=prefix,
            instance_type=training.instance_type,
            instance_count=training.instance_count,
            channels=channels,
            dataset_prefix=training.dataset_prefix,
            readable_inputs=training.readable(),
            volume_size=Size.gibibytes(training.volume_size_gb),
            hyperparameters=training.hyperparameters,
            metric_definitions=(
                METRIC_DEFINITIONS
                if code is None
                else [{"Name": name, "Regex": regex} for name, regex in sorted(code.metrics.items())]
            ),
            max_runtime=training.max_runtime(),
            spot=training.spot,
            max_wait=training.max_wait(),
            max_retry_attempts=training.max_retry_attempts,
            vpc=network.vpc,
            vpc_subnets=subnets,
            security_groups=[network.training_security_group],
            inter_container_encryption=training.inter_container_encryption,
            network_isolation=training.network_isolation,
            data_version=training.data_version,
            allowed_instance_types=training.allowed_instance_types,
            prepare=training.prepare.options(splits=training.channels),
            production=config.is_production,
            log_retention=retention_days(config.data.log_retention_days, "data.log_retention_days"),
            removal_policy=self.removal,
            notification_emails=training.notification_emails,
            alarm_thresholds=training.alarms.thresholds(),
            tags={"gpu-platform:setup": prefix, **dict(sorted(config.tags.items()))},
            **code_options(code),
            package_index=network.reachability(TRAINING_SUBNETS).internet and not training.network_isolation,
        )
        pipeline = self.pipeline
        CfnOutput(self, OUTPUT_STATE_MACHINE, value=pipeline.state_machine.state_machine_arn)
        CfnOutput(self, OUTPUT_ROLE, value=pipeline.role.role_arn)
        CfnOutput(self, OUTPUT_PREFIX, value=prefix)
        CfnOutput(
            self,
            OUTPUT_SPEC_PARAMETER,
            value=pipeline.spec_parameter.parameter_name,
            description="SSM parameter with the training job spec (gpuctl train renders CreateTrainingJob from it)",
        )
        CfnOutput(self, OUTPUT_DASHBOARD, value=pipeline.dashboard.dashboard_name)
        CfnOutput(self, OUTPUT_TOPIC, value=pipeline.topic.topic_arn)
        CfnOutput(self, OUTPUT_LOG_GROUP, value=pipeline.log_group.log_group_name)


def code_options(code: TrainingCodeConfig | None) -> dict[str, Any]:
    """The pipeline's code arguments: the configured folder (relative to the repository root), or none (the
    built-in trainer)."""
    if code is None:
        return {}
    return {
        "source_dir": REPOSITORY_ROOT / code.source_dir,
        "entry_point": code.entry_point,
        "distribution": code.distribution,
        "framework": code.framework,
    }


def check_hyperparameters(training: TrainingConfig) -> None:
    """The runtime's own parser: an unknown name or a bad value fails at synth, not after the job starts."""
    try:
        runtime_hyperparameters.parse(training.hyperparameters)
    except ValueError as exc:
        raise ConfigError(f"training.hyperparameters: {exc}") from None


def training_channels(
    training: TrainingConfig, storage: PlatformStorage, lustre: GpuLustreFileSystem | None
) -> tuple[list[Channel], ec2.SubnetSelection]:
    """The channels of ``training`` (S3 URIs or FSx paths with ``{data_version}``) and the jobs' subnets."""
    bucket = storage.datasets_bucket.bucket_name
    version = DATA_VERSION_PLACEHOLDER
    if training.input == "s3":
        s3_channels: list[Channel] = [
            S3Channel(
                name=name,
                s3_uri=f"s3://{bucket}/{training.dataset_prefix}{version}/{name}/",
                input_mode=training.input_mode,
                distribution=training.distribution,
            )
            for name in training.channels
        ]
        return s3_channels, ec2.SubnetSelection(subnet_group_name=TRAINING_SUBNETS)
    if lustre is None or lustre.data_repository is None:
        raise ConfigError(
            "training.input: 'fsx' needs file_systems.lustre.enabled: true with a link to the datasets bucket; "
            "allowed: enable the file system, or input: s3"
        )
    link = lustre.data_repository
    if not training.dataset_prefix.startswith(link.prefix):
        raise ConfigError(
            f"training.dataset_prefix: {training.dataset_prefix!r} is outside the prefix linked to FSx "
            f"({link.prefix!r}, file_systems.lustre.import_prefix); allowed: a prefix starting with {link.prefix!r}"
        )
    inside = training.dataset_prefix[len(link.prefix) :]
    root = link.file_system_path.strip("/")
    try:
        fsx_channels: list[Channel] = [
            FsxChannel(
                name=name,
                file_system_id=lustre.file_system_id,
                directory_path=lustre.directory_path(f"{root}/{inside}{version}/{name}".lstrip("/")),
            )
            for name in training.channels
        ]
    except ValidationError as exc:
        raise ConfigError(f"training: {exc}") from None
    # Jobs run in the file system's subnet: same AZ, no cross-AZ Lustre traffic.
    return fsx_channels, ec2.SubnetSelection(subnets=[lustre.subnet])
