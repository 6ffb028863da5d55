"""The training stack: the training pipeline (state machine, job roles, dashboard, alarms) of one environment.

Jobs run in the network stack's training subnets with its training security group (which the FSx file
system admits), read the datasets bucket of the data stack (or the FSx for Lustre file system of the
storage stack), write to the artifacts bucket, and use the training image of the images stack.

The stack publishes what ``gpuctl`` needs as outputs, so users type no ARNs: the state machine, the
execution role, the job-name prefix and the SSM parameter that holds the whole job spec (JSON of
:class:`~gpu_constructs.training_spec.TrainingJobSpec`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import CfnOutput, Duration, StackProps
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.constants import TRAINING_SUBNETS
from gpu_constructs.errors import ValidationError
from gpu_constructs.file_systems.fsx import GpuLustreFileSystem
from gpu_constructs.idle import IdleStop, IdleTrainingJobs
from gpu_constructs.network import GpuNetwork
from gpu_constructs.storage import PlatformStorage
from gpu_constructs.training import TrainingImageLike, TrainingPipeline
from gpu_constructs.training_spec import DATA_VERSION_PLACEHOLDER, Channel, FsxChannel, S3Channel
from gpu_train import hyperparameters as runtime_hyperparameters
from gpu_train.metrics import METRIC_DEFINITIONS
from stacks.base import REPOSITORY_ROOT, WorkloadStack
from stacks.config import ConfigError, TrainingConfig
from stacks.context import StackContext
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
    """The GPU training pipeline configured by ``training`` in ``config/<env>.yaml``.

    :param training: the ``training`` section.
    :param image: the training image (the images stack's).
    :param lustre: the storage stack's FSx for Lustre file system, needed when ``training.input`` is ``fsx``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        training: TrainingConfig,
        image: TrainingImageLike,
        network: GpuNetwork,
        storage: PlatformStorage,
        lustre: GpuLustreFileSystem | None = None,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, network=network, storage=storage, props=props)
        image = image_from_parameter(self, image, context, "training")
        code = training.code
        if code is None:
            check_hyperparameters(training)  # the built-in trainer's own parser
        prefix = context.resource_name(training.name)
        channels, subnets = training_channels(training, storage, lustre)
        self.pipeline = TrainingPipeline(
            self,
            "Pipeline",
            image=image,
            storage=storage,
            job_name_prefix=prefix,
            channels=channels,
            metric_definitions=METRIC_DEFINITIONS if code is None else code.metric_definitions(),
            vpc=network.vpc,
            vpc_subnets=subnets,
            security_groups=[network.training_security_group],
            production=context.production,
            log_retention=context.log_retention,
            removal_policy=self.removal,
            tags={"gpu-platform:setup": prefix, **context.tags},
            code=training.code_options(
                REPOSITORY_ROOT,
                package_index=network.reachability(TRAINING_SUBNETS).internet and not training.network_isolation,
            ),
            **training.pipeline_props(),
        )
        pipeline = self.pipeline
        self.idle_stop = idle_stop(self, training, prefix, pipeline, context)
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


def progress_metric(metric_definitions: Sequence[Mapping[str, str]]) -> str | None:
    """The metric that records one data point per logged training step: the first ``train:*`` metric of the job's
    ``MetricDefinitions`` (the built-in trainer's ``train:loss``), or ``None`` when there is none."""
    return next((m["Name"] for m in metric_definitions if m["Name"].startswith("train:")), None)


def idle_stop(
    scope: Construct, training: TrainingConfig, prefix: str, pipeline: TrainingPipeline, context: StackContext
) -> IdleStop | None:
    """The idle-stop function of the setup's jobs when ``training.auto_stop`` is on for this environment."""
    auto = training.auto_stop
    if not auto.active(context.production):
        return None
    return IdleStop(
        scope,
        "TrainingIdleStop",  # not the fleets stack's id: roles of the two stacks get distinct logical ids
        topic=pipeline.topic,
        name=prefix,
        training=IdleTrainingJobs(
            prefix,
            idle_period=Duration.minutes(auto.idle_minutes),
            gpu_idle_percent=auto.gpu_idle_percent,
            progress_metric=progress_metric(pipeline.spec.metric_definitions),
            dry_run=auto.dry_run,
        ),
        encryption_key=pipeline.encryption_key,
        log_retention=context.log_retention,
        removal_policy=context.removal_policy,
    )


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
