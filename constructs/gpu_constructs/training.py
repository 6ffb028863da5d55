"""``TrainingPipeline``: the deployed training setup — roles, state machine, monitoring, notifications.

One :class:`~gpu_constructs.training_spec.TrainingJobSpec` (built here from the props) is rendered into
the Step Functions task of a state machine::

    Init -> Defaults -> ValidateJobName -> ValidateInstanceType -> Derive<procs>x<workers>
         -> MergeHyperparameters -> [PrepareData? -> ShardDataset] -> Train -> RecordResult -> Succeeded
                                                     |                   |
                                     DescribeFailedPrepare     DescribeFailedTrainingJob -> TrainingJobFailed
                                                                          '-> TrainingJobNotCreated

* an execution's input may override ``job_name``, ``instance_type`` (checked against the allowed types
  from the GPU catalog by a Choice state — no Lambda), ``data_version`` (the ``{data_version}`` part of
  every channel URI), ``hyperparameters`` (merged over the defaults) and ``prepare``;
* the optional prepare step runs ``gpuctl shard`` as a SageMaker processing job in the training image;
* ``Train`` is a custom state on ``arn:aws:states:::sagemaker:createTrainingJob.sync`` with the full
  CreateTrainingJob API (spot, checkpoints, VPC, FSx, metric definitions ...);
* the execution output records the model artifact, final metrics and billable time; a failure ends in a
  Fail state whose cause is the job's ``FailureReason``;
* every state transition is logged (level ALL) to a KMS-encrypted log group, with X-Ray tracing.

IAM is least privilege: the SageMaker execution role reads one dataset prefix, writes one output prefix
and one checkpoint prefix, pulls the image, writes its logs and metrics, uses the data key, and creates
network interfaces in the VPC; the state machine may only create, describe and stop jobs whose names
start with the job prefix, and pass only this construct's job roles to SageMaker.

Monitoring: a dashboard of the setup's jobs (GPU, GPU memory, CPU and disk utilization per host, the
job's samples/s and data-wait metrics), an input-bound alarm (GPU utilization low while CPU or disk is
busy, a metric-math alarm over CloudWatch Metrics Insights queries), an idle-GPU alarm, and job failure
notifications (EventBridge -> KMS-encrypted SNS topic).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import jsii
from aws_cdk import ArnFormat, Duration, Names, RemovalPolicy, Size, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct, IConstruct, IValidation

from gpu_constructs import nag
from gpu_constructs.catalog import instance_types, lookup, processes_per_host_limit, require_nvidia_gpu
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.keys import allow_cloudwatch_logs
from gpu_constructs.nag import as_list as _as_list
from gpu_constructs.removal import for_named_resource
from gpu_constructs.storage import PlatformStorage
from gpu_constructs.topics import alarm_action, notification_topic, rule_target
from gpu_constructs.training_spec import (
    DATA_VERSION_PLACEHOLDER,
    HP_NUM_WORKERS,
    HP_PROCESSES_PER_HOST,
    PROCESSES_PER_HOST_PATTERN,
    Channel,
    FsxChannel,
    S3Channel,
    SfnPaths,
    ShardingJobSpec,
    ShardSplit,
    TrainingJobSpec,
    hyperparameter_limits,
)

__all__ = [
    "SAGEMAKER_VPC_ACTIONS",
    "AlarmThresholds",
    "PrepareOptions",
    "TrainingImageLike",
    "TrainingPipeline",
]

TRAINING_NAMESPACE = "/aws/sagemaker/TrainingJobs"
PROCESSING_NAMESPACE = "/aws/sagemaker/ProcessingJobs"
#: What SageMaker needs to place a job in a VPC (CreateTrainingJob / CreateProcessingJob with VpcConfig);
#: the same list aws-cdk-lib's SageMaker tasks grant.
SAGEMAKER_VPC_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
)
#: Managed EventBridge rules the ``.sync`` SageMaker integrations create in the account.
SYNC_RULES = {
    "training": "StepFunctionsGetEventsForSageMakerTrainingJobsRule",
    "processing": "StepFunctionsGetEventsForSageMakerProcessingJobsRule",
}
_PATHS = SfnPaths(hyperparameters="$.run.hyperparameters")


@runtime_checkable
class TrainingImageLike(Protocol):
    """What the pipeline needs from an image (``gpu_constructs.images.GpuImage`` provides it)."""

    @property
    def image_uri(self) -> str: ...

    @property
    def usage(self) -> str: ...

    @property
    def cuda_version(self) -> str | None: ...

    def require_usage(self, expected: Literal["training", "inference"], where: str) -> None: ...

    def check_instance(self, instance_type: str, where: str) -> None: ...

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant | None: ...


@dataclass(frozen=True)
class PrepareOptions:
    """The optional prepare step: shard raw files with ``gpuctl shard`` in a processing job.

    :param source_prefix: datasets-bucket prefix of the raw files; split ``<name>`` is read from
        ``<source_prefix><name>/`` (ImageFolder layout or a manifest).
    :param splits: split names (default: the names of the S3 channels). Each split's shards go to the
        matching channel's S3 URI for the execution's data version.
    :param instance_type: processing type, CPU or GPU (default ``ml.m5.4xlarge``).
    :param volume_size: volume for raw files and shards (default 200 GiB).
    :param image_size / shard_size / seed: ``gpuctl shard`` options (defaults 224, ``128MB``, 0).
    :param max_runtime: default 1 day.
    :param run_by_default: run the step when the execution input does not say (default False).
    :param command: the program the image runs, before ``SRC DEST`` and the options (default
        ``("python3", "-m", "gpu_train", "shard")``, the training image's copy of ``gpuctl shard``).
    """

    source_prefix: str
    splits: tuple[str, ...] = ()
    instance_type: str = "ml.m5.4xlarge"
    volume_size: Size = Size.gibibytes(200)
    image_size: int = 224
    shard_size: str = "128MB"
    seed: int = 0
    max_runtime: Duration = Duration.days(1)
    run_by_default: bool = False
    command: tuple[str, ...] = ("python3", "-m", "gpu_train", "shard")


@dataclass(frozen=True)
class AlarmThresholds:
    """Thresholds of the training alarms (percentages are per GPU / per vCPU of the configured type).

    :param gpu_low_pct: input-bound alarm: GPU utilization below this ... (default 50)
    :param busy_pct: ... while CPU or disk utilization is above this (default 80).
    :param idle_gpu_pct: idle-GPU alarm: the least-used host's GPU utilization below this (default 5).
    :param period: metric period (default 5 minutes).
    :param input_bound_periods: consecutive periods before the input-bound alarm fires (default 3).
    :param idle_periods: consecutive periods before the idle-GPU alarm fires (default 6 = 30 min).
    """

    gpu_low_pct: float = 50
    busy_pct: float = 80
    idle_gpu_pct: float = 5
    period: Duration = Duration.minutes(5)
    input_bound_periods: int = 3
    idle_periods: int = 6


@jsii.implements(ec2.IConnectable)
class TrainingPipeline(Construct):
    """A deployed GPU training setup: job roles, the training state machine, dashboard and alarms.

    :param image: the training image (``GpuImage`` with usage ``training``).
    :param storage: datasets / artifacts buckets and the data key (``PlatformStorage``).
    :param job_name_prefix: every job of this setup starts with it (IAM scopes to ``<prefix>-*``);
        lowercase letters, digits, hyphens, at most 40 characters. Required.
    :param instance_type: default ``ml.*`` training type (NVIDIA GPU, from the catalog). Required.
    :param channels: input channels; S3 URIs must lie under ``s3://<datasets>/<dataset_prefix>``. Required.
    :param dataset_prefix: the datasets-bucket prefix the job may read (e.g. ``imagenet/``). Required.
    :param instance_count: hosts per job (default 1).
    :param volume_size: EBS volume per host (default 100 GiB; types with local NVMe use that instead).
    :param hyperparameters: default hyperparameters (strings; default none). Executions merge theirs over.
    :param environment: container environment (default none).
    :param metric_definitions: ``[{"Name", "Regex"}]`` (default none; pass the runtime's).
    :param max_runtime: default 1 day.
    :param spot: managed spot training with checkpoints (default False).
    :param max_wait: spot: runtime plus waiting for capacity (default 2 x max_runtime).
    :param max_retry_attempts: SageMaker retries of a failed job (default none).
    :param vpc: run jobs in this VPC (default: none; required for FSx channels).
    :param vpc_subnets: subnets of the jobs (default: the VPC's private subnets).
    :param security_groups: security groups of the jobs (default: a new one with HTTPS egress).
    :param inter_container_encryption: encrypt traffic between hosts (default True).
    :param network_isolation: no outbound network from the container (default False).
    :param processes_per_host / dataloader_workers: default: from the catalog per instance type.
    :param data_version: default data version (default ``v1``).
    :param allowed_instance_types: types an execution may choose (default: every NVIDIA training type
        of the catalog that the image's CUDA supports, has the same local-storage kind and enough GPUs).
    :param prepare: the optional prepare (sharding) step (default: none).
    :param production: production rules (multi-host needs inter-container encryption; default False).
    :param encryption_key: KMS key of the log group and SNS topic (default: a new key with rotation).
    :param log_retention: state machine log retention (default 90 days).
    :param removal_policy: of the log group and key (default RETAIN).
    :param notification_emails: addresses subscribed to failure and alarm notifications (default none).
    :param alarm_thresholds: see :class:`AlarmThresholds`.
    :param tags: tags of every job (default none).
    :param spec_parameter_name: SSM parameter holding the job spec JSON for ``gpuctl``
        (default ``/<job_name_prefix>/job-spec``).
    :param role: an existing execution role of the training jobs, trusted by ``sagemaker.amazonaws.com``
        (default: a new role). The setup adds its grants (datasets prefix, artifacts prefixes, image pull,
        logs, metrics, keys) to the role's policy; give a role this setup alone uses, imported mutable
        (``iam.Role.from_role_arn(...)``). The prepare step always has a role of its own.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        image: TrainingImageLike,
        storage: PlatformStorage,
        job_name_prefix: str,
        instance_type: str,
        channels: Sequence[Channel],
        dataset_prefix: str,
        instance_count: int = 1,
        volume_size: Size = Size.gibibytes(100),
        hyperparameters: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
        metric_definitions: Sequence[Mapping[str, str]] | None = None,
        max_runtime: Duration = Duration.days(1),
        spot: bool = False,
        max_wait: Duration | None = None,
        max_retry_attempts: int | None = None,
        vpc: ec2.IVpc | None = None,
        vpc_subnets: ec2.SubnetSelection | None = None,
        security_groups: Sequence[ec2.ISecurityGroup] | None = None,
        inter_container_encryption: bool = True,
        network_isolation: bool = False,
        processes_per_host: int | None = None,
        dataloader_workers: int | None = None,
        data_version: str = "v1",
        allowed_instance_types: Sequence[str] | None = None,
        prepare: PrepareOptions | None = None,
        production: bool = False,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        notification_emails: Sequence[str] = (),
        alarm_thresholds: AlarmThresholds | None = None,
        tags: Mapping[str, str] | None = None,
        spec_parameter_name: str | None = None,
        role: iam.IRole | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._validate_image(image, instance_type)
        self._validate_prefix(job_name_prefix)
        self._validate_dataset_prefix(dataset_prefix)
        self._validate_channels_in_dataset(channels, storage, dataset_prefix)
        self._validate_vpc(vpc, channels, security_groups)
        self._validate_emails(notification_emails)
        self.job_name_prefix = job_name_prefix
        self._dataset_prefix = dataset_prefix if dataset_prefix.endswith("/") else dataset_prefix + "/"
        self._source_prefix: str | None = None
        self.shard_job_name_prefix = f"{job_name_prefix}-shard"
        self.image = image
        self.storage = storage
        stack = Stack.of(self)

        # -- network ------------------------------------------------------------------------------------
        self.vpc = vpc
        self.security_groups: list[ec2.ISecurityGroup] = list(security_groups or [])
        if vpc is not None and not self.security_groups:
            group = ec2.SecurityGroup(
                self,
                "JobSecurityGroup",
                vpc=vpc,
                description=f"SageMaker jobs of {job_name_prefix}: HTTPS egress, all traffic between hosts",
                allow_all_outbound=False,
            )
            group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS to AWS APIs")
            group.connections.allow_internally(ec2.Port.all_traffic(), "NCCL between the hosts of one job")
            ingress = group.node.try_find_child(f"from {Names.unique_id(group)}:ALL TRAFFIC")
            if ingress is not None:
                nag.acknowledge_compliance(ingress, "EC2RestrictedCommonPorts", JOB_GROUP_INTERNAL_REASON)
            self.security_groups = [group]
        self._connections = ec2.Connections(security_groups=self.security_groups)
        subnet_ids: list[str] = []
        if vpc is not None:
            subnet_ids = vpc.select_subnets(**_selection_kwargs(vpc_subnets)).subnet_ids

        # -- roles --------------------------------------------------------------------------------------
        self.role = self._job_role("ExecutionRole", "training", vpc, existing=role)
        output_prefix = f"output/{job_name_prefix}/"
        checkpoint_prefix = f"checkpoints/{job_name_prefix}/"
        storage.grant_read_datasets(self.role, dataset_prefix)
        storage.grant_write_artifacts(self.role, output_prefix)
        if spot:
            storage.grant_read_write_checkpoints(self.role, checkpoint_prefix)
        image.grant_pull(self.role)

        # -- the job spec -------------------------------------------------------------------------------
        ref = lookup(instance_type, where=path_of(self))
        volume_key = storage.key.key_arn if not ref.has_local_nvme else None
        artifacts = storage.artifacts_bucket.bucket_name
        self.spec = TrainingJobSpec(
            image_uri=image.image_uri,
            role_arn=self.role.role_arn,
            instance_type=instance_type,
            output_s3_uri=f"s3://{artifacts}/{output_prefix}",
            channels=tuple(channels),
            instance_count=instance_count,
            volume_size_gb=int(volume_size.to_gibibytes()),
            volume_kms_key=volume_key,
            output_kms_key=storage.key.key_arn,
            hyperparameters=dict(hyperparameters or {}),
            environment=dict(environment or {}),
            metric_definitions=tuple(dict(m) for m in metric_definitions or ()),
            max_runtime_s=int(max_runtime.to_seconds()),
            spot=spot,
            max_wait_s=int(max_wait.to_seconds()) if max_wait is not None else None,
            checkpoint_s3_uri=f"s3://{artifacts}/{checkpoint_prefix}" if spot else None,
            subnets=tuple(subnet_ids),
            security_group_ids=tuple(sg.security_group_id for sg in self.security_groups),
            inter_container_encryption=inter_container_encryption,
            network_isolation=network_isolation,
            processes_per_host=processes_per_host,
            dataloader_workers=dataloader_workers,
            data_version=data_version,
            cuda_version=image.cuda_version,
            production=production,
            max_retry_attempts=max_retry_attempts,
            job_name_prefix=job_name_prefix,
            tags=dict(tags or {}),
        )
        self.spec.validate(path_of(self))
        self.allowed_instance_types = self._allowed_types(allowed_instance_types)

        # -- optional prepare step ----------------------------------------------------------------------
        self.prepare_role: iam.IRole | None = None
        self.sharding_spec: ShardingJobSpec | None = None
        if prepare is not None:
            self.sharding_spec = self._sharding_spec(prepare, channels, dataset_prefix, vpc, tags)

        # -- encryption key for logs and notifications --------------------------------------------------
        if encryption_key is None:
            encryption_key = kms.Key(
                self,
                "Key",
                description=f"Encrypts the training state machine logs and notifications of {job_name_prefix}",
                enable_key_rotation=True,
                removal_policy=removal_policy,
                pending_window=Duration.days(30 if removal_policy == RemovalPolicy.RETAIN else 7),
            )
        self.encryption_key = encryption_key
        self._allow_services_on_key(encryption_key, stack)

        # -- state machine ------------------------------------------------------------------------------
        self.log_group = logs.LogGroup(
            self,
            "StateMachineLogs",
            log_group_name=f"/aws/vendedlogs/states/{job_name_prefix}",
            encryption_key=encryption_key,
            retention=log_retention,
            removal_policy=for_named_resource(removal_policy),
        )
        timeout_s = (self.spec.effective_max_wait_s or self.spec.max_runtime_s) + 3600
        if self.sharding_spec is not None:
            timeout_s += self.sharding_spec.max_runtime_s
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(self._definition(data_version, prepare)),
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True,
            timeout=Duration.seconds(timeout_s),
            comment=f"Train on SageMaker: jobs {job_name_prefix}-*",
        )
        self._grant_state_machine(stack)

        # -- notifications, dashboard, alarms -----------------------------------------------------------
        # Alarm actions and the rule targets below admit CloudWatch and EventBridge on the topic and key.
        self.topic = notification_topic(
            self,
            "Notifications",
            display_name=f"GPU training {job_name_prefix}",
            master_key=encryption_key,
            emails=notification_emails,
        )
        self.failure_rule = events.Rule(
            self,
            "JobFailedRule",
            description=f"SageMaker training jobs {job_name_prefix}-* that fail",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker Training Job State Change"],
                detail={
                    "TrainingJobStatus": ["Failed"],
                    "TrainingJobName": events.Match.prefix(f"{job_name_prefix}-"),
                },
            ),
        )
        self.failure_rule.add_target(
            rule_target(
                self.topic,
                message=events.RuleTargetInput.from_text(
                    f"Training job {events.EventField.from_path('$.detail.TrainingJobName')} failed: "
                    f"{events.EventField.from_path('$.detail.FailureReason')}"
                ),
            )
        )
        self.execution_failed_rule = events.Rule(
            self,
            "ExecutionFailedRule",
            description=f"Executions of the {job_name_prefix} training state machine that do not succeed",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "status": ["FAILED", "TIMED_OUT", "ABORTED"],
                    "stateMachineArn": [self.state_machine.state_machine_arn],
                },
            ),
        )
        self.execution_failed_rule.add_target(
            rule_target(
                self.topic,
                message=events.RuleTargetInput.from_text(
                    f"Training pipeline execution {events.EventField.from_path('$.detail.name')} ended "
                    f"{events.EventField.from_path('$.detail.status')}: {events.EventField.from_path('$.detail.cause')}"
                ),
            )
        )
        thresholds = alarm_thresholds or AlarmThresholds()
        self._validate_thresholds(thresholds)
        self.input_bound_alarm, self.idle_gpu_alarm = self._alarms(ref, thresholds)
        self.dashboard = self._dashboard(thresholds)

        # -- the job spec for gpuctl --------------------------------------------------------------------
        spec_json = stack.to_json_string(self.spec.to_dict())
        estimate = len(json.dumps(self.spec.to_dict())) + 100 * spec_json.count("${Token[")
        self.spec_parameter = ssm.StringParameter(
            self,
            "JobSpec",
            parameter_name=spec_parameter_name or f"/{job_name_prefix}/job-spec",
            string_value=spec_json,
            description=f"Training job spec of {job_name_prefix}, read by gpuctl train",
            tier=ssm.ParameterTier.STANDARD if estimate < 3800 else ssm.ParameterTier.ADVANCED,
        )

    # -- IConnectable ------------------------------------------------------------------------------------

    @property
    def connections(self) -> ec2.Connections:
        """The jobs' security groups: open an FSx file system or other targets to the jobs with it."""
        return self._connections

    @property
    def grant_principal(self) -> iam.IPrincipal:
        """The SageMaker execution role: grant it access to further data the jobs read."""
        return self.role.grant_principal

    # -- grants -----------------------------------------------------------------------------------------

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Start executions of the state machine and read their status and history."""
        grant = self.state_machine.grant_start_execution(grantee)
        self.state_machine.grant_read(grantee)
        return grant

    def grant_run_jobs(self, grantee: iam.IGrantable) -> iam.Grant:
        """What ``gpuctl train/status/logs/stop`` need: jobs with the prefix, pass the role, read the logs,
        the job spec parameter and the stack's outputs."""
        stack = Stack.of(self)
        self.spec_parameter.grant_read(grantee)
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["cloudformation:DescribeStacks"],
            resource_arns=[stack.stack_id],
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["sagemaker:ListTrainingJobs"],
            resource_arns=["*"],
        )
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=[
                "sagemaker:CreateTrainingJob",
                "sagemaker:DescribeTrainingJob",
                "sagemaker:StopTrainingJob",
                "sagemaker:AddTags",
                "sagemaker:ListTags",
            ],
            resource_arns=[self._job_arn("training-job", self.job_name_prefix)],
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["iam:PassRole"],
            resource_arns=[self.role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        )
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["logs:DescribeLogStreams", "logs:GetLogEvents", "logs:FilterLogEvents"],
            resource_arns=[
                stack.format_arn(
                    service="logs",
                    resource="log-group",
                    resource_name=f"{TRAINING_NAMESPACE}:*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            ],
        )
        return grant

    # -- validation -------------------------------------------------------------------------------------

    def _validate_image(self, image: TrainingImageLike, instance_type: str) -> None:
        where = path_of(self)
        if not isinstance(image, TrainingImageLike):
            raise fail(self, "image", image, "a GpuImage (image_uri, usage, cuda_version, grant_pull ...)")
        image.require_usage("training", where)
        if not is_token(instance_type):
            require_nvidia_gpu(instance_type, where=where, usage="training")
            image.check_instance(instance_type, where)

    def _validate_prefix(self, prefix: str) -> None:
        import re

        if not isinstance(prefix, str) or not re.fullmatch(r"[a-z0-9](-?[a-z0-9]){0,39}", prefix):
            raise fail(
                self,
                "job_name_prefix",
                prefix,
                "1-40 lowercase letters, digits and single hyphens, starting and ending with a letter or digit "
                "(IAM matches SageMaker's lowercase job ARNs; 22 characters stay for the job's own suffix)",
            )

    def _validate_dataset_prefix(self, prefix: str) -> None:
        if not isinstance(prefix, str) or not prefix or prefix.startswith("/") or ".." in prefix:
            raise fail(self, "dataset_prefix", prefix, "a non-empty relative S3 prefix such as 'imagenet/'")

    def _validate_channels_in_dataset(
        self, channels: Sequence[Channel], storage: PlatformStorage, dataset_prefix: str
    ) -> None:
        if not channels:
            raise fail(self, "channels", list(channels), "at least one S3Channel or FsxChannel")
        prefix = dataset_prefix if dataset_prefix.endswith("/") else dataset_prefix + "/"
        root = f"s3://{storage.datasets_bucket.bucket_name}/{prefix}"
        for channel in channels:
            if isinstance(channel, S3Channel) and not channel.s3_uri.startswith(root):
                raise fail(
                    self,
                    f"channels[{channel.name!r}].s3_uri",
                    channel.s3_uri,
                    f"a URI under the dataset prefix the job role may read, {root}...",
                )

    def _validate_vpc(
        self,
        vpc: ec2.IVpc | None,
        channels: Sequence[Channel],
        security_groups: Sequence[ec2.ISecurityGroup] | None,
    ) -> None:
        fsx = [c.name for c in channels if isinstance(c, FsxChannel)]
        if fsx and vpc is None:
            raise fail(self, "vpc", None, f"a VPC: FSx channel(s) {fsx} are mounted over the file system's VPC")
        if security_groups and vpc is None:
            raise fail(self, "vpc", None, "a VPC when security_groups are given")

    def _validate_emails(self, emails: Sequence[str]) -> None:
        import re

        for address in emails:
            if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", address):
                raise fail(self, "notification_emails", address, "e-mail addresses such as ml-team@example.com")

    def _validate_thresholds(self, t: AlarmThresholds) -> None:
        for name in ("gpu_low_pct", "busy_pct", "idle_gpu_pct"):
            value = getattr(t, name)
            if not 0 < value <= 100:
                raise fail(self, f"alarm_thresholds.{name}", value, "a percentage in (0, 100]")
        if t.idle_gpu_pct >= t.gpu_low_pct:
            raise fail(
                self,
                "alarm_thresholds.idle_gpu_pct",
                t.idle_gpu_pct,
                f"less than gpu_low_pct={t.gpu_low_pct} (idle means lower than input-bound)",
            )
        for name in ("input_bound_periods", "idle_periods"):
            if getattr(t, name) < 1:
                raise fail(self, f"alarm_thresholds.{name}", getattr(t, name), "an integer >= 1")

    # -- helpers ----------------------------------------------------------------------------------------

    def _job_arn(self, kind: str, prefix: str) -> str:
        return Stack.of(self).format_arn(service="sagemaker", resource=kind, resource_name=f"{prefix}-*")

    def _job_role(
        self, construct_id: str, kind: str, vpc: ec2.IVpc | None, *, existing: iam.IRole | None = None
    ) -> iam.IRole:
        """A SageMaker job role (``existing`` or a new one) with logs, metrics and (in a VPC) network-interface
        permissions."""
        stack = Stack.of(self)
        namespace = TRAINING_NAMESPACE if kind == "training" else PROCESSING_NAMESPACE
        role = existing or iam.Role(
            self,
            construct_id,
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ),
            description=f"SageMaker {kind} jobs {self.job_name_prefix}-*",
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="JobLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=namespace,
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    ),
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=f"{namespace}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    ),
                ],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="JobMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": namespace}},
            )
        )
        # Encrypted volumes and outputs (the same actions the bucket grants use, plus DescribeKey).
        self.storage.key.grant(
            role, "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*", "kms:DescribeKey"
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="VolumeEncryption",
                actions=["kms:CreateGrant"],
                resources=[self.storage.key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            )
        )
        if vpc is not None:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="DescribeNetwork",
                    actions=[a for a in SAGEMAKER_VPC_ACTIONS if ":Describe" in a],
                    resources=["*"],
                )
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="JobNetworkInterfaces",
                    actions=[a for a in SAGEMAKER_VPC_ACTIONS if ":Describe" not in a],
                    resources=[
                        stack.format_arn(service="ec2", resource="network-interface", resource_name="*"),
                        stack.format_arn(service="ec2", resource="subnet", resource_name="*"),
                        stack.format_arn(service="ec2", resource="security-group", resource_name="*"),
                    ],
                    conditions={
                        "ArnEqualsIfExists": {
                            "ec2:Vpc": stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)
                        }
                    },
                )
            )
        # A new role's DefaultPolicy, or the Policy the CDK attaches to an imported (mutable) role.
        policy = role.node.try_find_child("DefaultPolicy") or role.node.try_find_child("Policy")
        if policy is not None:
            self._acknowledge_job_policy(policy, kind)
        return role

    def _acknowledge_job_policy(self, policy: IConstruct, kind: str) -> None:
        nag.acknowledge_compliance(
            policy,
            "IAMNoInlinePolicy",
            f"Safe because this inline policy is created by CDK for exactly one role (the SageMaker {kind} job "
            "role), is deleted with it and cannot be attached elsewhere; every statement is scoped to this setup",
        )
        self.node.add_validation(_ExpectedWildcards(policy, self._expected_wildcards()))

    def _expected_wildcards(self) -> list[tuple[str, str]]:
        """The IAM5 findings this construct causes on purpose (regex of the finding id, reason).

        Anything else — another prefix, a wildcard action not listed, ``*`` on another action — is not
        acknowledged, so cdk-nag still reports it.
        """
        prefixes = [self._dataset_prefix, f"output/{self.job_name_prefix}/", f"checkpoints/{self.job_name_prefix}/"]
        if self._source_prefix:
            prefixes.append(self._source_prefix)
        objects = "|".join(re.escape(p) for p in prefixes)
        arn = r"arn:[^*]*"
        return [
            (
                r"Action::(s3:(GetObject|GetBucket|List|Abort|DeleteObject)|kms:(GenerateDataKey|ReEncrypt))\*",
                "Safe because these are the action groups of the CDK's S3 bucket grants (read, put, read-write) "
                "and their KMS data-key actions, each limited to one object prefix of one platform bucket and to "
                "the platform's data key",
            ),
            (
                rf"Resource::[^*]*/({objects})\*",
                "Safe because the wildcard is the object-key suffix under one prefix of one platform bucket (the "
                "dataset, raw files, job output or checkpoints of this setup), since SageMaker names the objects",
            ),
            (
                rf"Resource::{arn}:logs:[^*]*:log-group:/aws/sagemaker/(TrainingJobs|ProcessingJobs):\*",
                "Safe because the wildcard only covers the log streams of SageMaker's own job log group, since "
                "SageMaker names one stream per job host",
            ),
            (
                rf"Resource::{arn}:ec2:[^*]*:(network-interface|subnet|security-group)/\*",
                "Safe because network interfaces are created at run time with ids unknown at deploy time, and "
                "the statement is limited by an ec2:Vpc condition to this VPC, since SageMaker needs them for VPC jobs",
            ),
            (
                rf"Resource::{arn}:sagemaker:[^*]*:(training-job/{re.escape(self.job_name_prefix)}|"
                rf"processing-job/{re.escape(self.shard_job_name_prefix)})-\*",
                "Safe because the wildcard is the suffix of job names that start with this setup's prefix, since "
                "each execution chooses a new job name",
            ),
        ]

    def _allowed_types(self, requested: Sequence[str] | None) -> tuple[str, ...]:
        """Types an execution may pick: same local-storage kind (VolumeKmsKeyId), CUDA support, GPU count."""
        where = path_of(self)
        ref = lookup(self.spec.instance_type, where=where)
        if requested is not None:
            names = list(dict.fromkeys(requested))
            if self.spec.instance_type not in names:
                names.insert(0, self.spec.instance_type)
            for name in names:
                self.spec.validate(where, instance_type=name)
                if lookup(name, where=where).has_local_nvme != ref.has_local_nvme:
                    raise fail(
                        self,
                        "allowed_instance_types",
                        name,
                        "types with the same storage kind as instance_type "
                        f"({'local NVMe' if ref.has_local_nvme else 'EBS only'}), because the volume KMS key "
                        "is set only for EBS-only types",
                    )
            return tuple(names)
        names = []
        for it in instance_types(usage="training", nvidia_only=True):
            if it.is_fractional_gpu or it.has_local_nvme != ref.has_local_nvme:
                continue
            if it.cuda is None or it.cuda.dropped_in is not None:
                continue
            if self.spec.problems(instance_type=it.sagemaker_name):
                continue
            names.append(it.sagemaker_name)
        if self.spec.instance_type not in names:
            names.insert(0, self.spec.instance_type)
        return tuple(names)

    def _sharding_spec(
        self,
        prepare: PrepareOptions,
        channels: Sequence[Channel],
        dataset_prefix: str,
        vpc: ec2.IVpc | None,
        tags: Mapping[str, str] | None,
    ) -> ShardingJobSpec:
        s3_channels = {c.name: c for c in channels if isinstance(c, S3Channel)}
        names = prepare.splits or tuple(s3_channels)
        bucket = self.storage.datasets_bucket.bucket_name
        prefix = dataset_prefix if dataset_prefix.endswith("/") else dataset_prefix + "/"
        source = prepare.source_prefix if prepare.source_prefix.endswith("/") else prepare.source_prefix + "/"
        self._source_prefix = source
        splits = []
        for name in names:
            channel = s3_channels.get(name)
            if channel is not None:
                dest = channel.s3_uri
            else:
                # FSx channels read what the file system imports from the datasets bucket.
                dest = f"s3://{bucket}/{prefix}{DATA_VERSION_PLACEHOLDER}/{name}/"
            splits.append(ShardSplit(name=name, source_s3_uri=f"s3://{bucket}/{source}{name}/", dest_s3_uri=dest))
        if not splits:
            raise fail(self, "prepare.splits", list(names), "at least one split (the S3 channel names by default)")
        role = self._job_role("PrepareRole", "processing", vpc)
        self.storage.grant_read_datasets(role, source)
        self.storage.datasets_bucket.grant_put(role, f"{prefix}*")
        self.image.grant_pull(role)
        self.prepare_role = role
        it = lookup(prepare.instance_type, where=path_of(self))
        spec = ShardingJobSpec(
            image_uri=self.image.image_uri,
            role_arn=role.role_arn,
            splits=tuple(splits),
            instance_type=prepare.instance_type,
            volume_size_gb=int(prepare.volume_size.to_gibibytes()),
            volume_kms_key=None if it.has_local_nvme else self.storage.key.key_arn,
            output_kms_key=self.storage.key.key_arn,
            image_size=prepare.image_size,
            shard_size=prepare.shard_size,
            seed=prepare.seed,
            command=tuple(prepare.command),
            max_runtime_s=int(prepare.max_runtime.to_seconds()),
            subnets=self.spec.subnets,
            security_group_ids=self.spec.security_group_ids,
            inter_container_encryption=self.spec.inter_container_encryption,
            data_version=self.spec.data_version,
            job_name_prefix=self.shard_job_name_prefix,
            tags=dict(tags or {}),
        )
        problems = spec.problems()
        if problems:
            raise ValidationError(path_of(self), "prepare: " + "; ".join(problems))
        return spec

    def _allow_services_on_key(self, key: kms.IKey, stack: Stack) -> None:
        allow_cloudwatch_logs(key, stack, sid="AllowCloudWatchLogsForThisAccount")
        # The publishers of the encrypted topic (CloudWatch alarms, EventBridge rules) are admitted on this key
        # by gpu_constructs.topics where the topic is bound (alarm_action, rule_target).

    # -- the state machine ------------------------------------------------------------------------------

    def _definition(self, data_version: str, prepare: PrepareOptions | None) -> sfn.IChainable:
        spec = self.spec
        prefix = self.job_name_prefix
        init = sfn.Pass(
            self,
            "Init",
            comment="A short run id for default job names, and the execution input",
            parameters={
                "run_id": sfn.JsonPath.array_get_item(sfn.JsonPath.string_split(sfn.JsonPath.uuid(), "-"), 0),
                "input": sfn.JsonPath.execution_input,
            },
        )
        defaults: dict[str, Any] = {
            "job_name": sfn.JsonPath.format(f"{prefix}-{{}}", sfn.JsonPath.string_at("$.run_id")),
            "instance_type": spec.instance_type,
            "data_version": data_version,
            "hyperparameters": {},
        }
        if prepare is not None:
            defaults["prepare"] = prepare.run_by_default
            defaults["prepare_job_name"] = sfn.JsonPath.format(
                f"{self.shard_job_name_prefix}-{{}}", sfn.JsonPath.string_at("$.run_id")
            )
        apply_defaults = sfn.Pass(
            self,
            "Defaults",
            comment="Defaults of every runtime value; the execution input overrides them",
            parameters={
                "defaults": defaults,
                "input": sfn.JsonPath.object_at("$.input"),
                "static": {
                    "base_hyperparameters": dict(spec.hyperparameters),
                    "result_defaults": {
                        "ModelArtifacts": {"S3ModelArtifacts": ""},
                        "FinalMetricDataList": [],
                        "TrainingTimeInSeconds": 0,
                        "BillableTimeInSeconds": 0,
                    },
                    "failure_defaults": {"FailureReason": "no failure reason given (the job may have been stopped)"},
                },
            },
        )
        merge_input = sfn.Pass(
            self,
            "MergeInput",
            parameters={
                "value": sfn.JsonPath.json_merge(
                    sfn.JsonPath.object_at("$.defaults"), sfn.JsonPath.object_at("$.input")
                )
            },
            result_path="$.merged",
        )
        unpack = sfn.Pass(
            self,
            "Arguments",
            parameters={
                "args": sfn.JsonPath.object_at("$.merged.value"),
                "static": sfn.JsonPath.object_at("$.static"),
            },
        )
        bad_name = sfn.Fail(
            self,
            "InvalidJobName",
            error="InvalidInput",
            cause_path=sfn.JsonPath.format(
                f"job_name {{}} is not allowed; allowed: a name that starts with {prefix}- and has at most 63 "
                "letters, digits and hyphens",
                sfn.JsonPath.string_at("$.args.job_name"),
            ),
        )
        check_name = sfn.Choice(self, "ValidateJobName", comment="IAM lets this pipeline run only <prefix>-* jobs")
        bad_type = sfn.Fail(
            self,
            "InstanceTypeNotAllowed",
            error="InvalidInput",
            cause_path=sfn.JsonPath.format(
                "instance_type {} is not allowed for this pipeline; allowed: " + ", ".join(self.allowed_instance_types),
                sfn.JsonPath.string_at("$.args.instance_type"),
            ),
        )
        check_type = sfn.Choice(
            self,
            "ValidateInstanceType",
            comment="NVIDIA GPU training types from the GPU catalog, grouped by their derived distribution",
        )
        limits = {name: processes_per_host_limit(name) for name in self.allowed_instance_types}
        merge_hp = sfn.Pass.jsonata(
            self,
            "MergeHyperparameters",
            comment="derived distribution <- base hyperparameters <- execution input, every value a string "
            "(numbers and booleans converted), checked against SageMaker's limits and the GPUs of the type",
            outputs="{% " + hyperparameter_expression(limits) + " %}",
        )
        bad_hp = sfn.Fail.jsonata(
            self,
            "InvalidHyperparameters",
            error="InvalidInput",
            cause="{% 'The execution input is not valid: ' & $join($states.input.run.problems, '; ') %}",
        )
        check_hp = sfn.Choice.jsonata(
            self, "ValidateHyperparameters", comment="Fail with every problem before SageMaker is called"
        )
        check_hp.when(sfn.Condition.jsonata("{% $count($states.input.run.problems) > 0 %}"), bad_hp)
        groups: dict[tuple[str, str], list[str]] = {}
        for name in self.allowed_instance_types:
            derived = spec.distribution_for(name)
            groups.setdefault((derived[HP_PROCESSES_PER_HOST], derived[HP_NUM_WORKERS]), []).append(name)
        for (procs, workers), names in sorted(groups.items(), key=lambda kv: (int(kv[0][0]), int(kv[0][1]))):
            derive = sfn.Pass(
                self,
                f"Derive{procs}x{workers}",
                comment=f"{procs} process(es) per host, {workers} data-loader workers each: {', '.join(names)}",
                result=sfn.Result.from_object({HP_PROCESSES_PER_HOST: procs, HP_NUM_WORKERS: workers}),
                result_path="$.derived",
            )
            conditions = [sfn.Condition.string_equals("$.args.instance_type", n) for n in names]
            rule = conditions[0] if len(conditions) == 1 else sfn.Condition.or_(*conditions)
            check_type.when(rule, derive.next(merge_hp))
        check_type.otherwise(bad_type)
        check_name.when(
            sfn.Condition.and_(
                sfn.Condition.is_string("$.args.job_name"),
                sfn.Condition.string_matches("$.args.job_name", f"{prefix}-*"),
            ),
            check_type,
        ).otherwise(bad_name)

        train = self._train_state()
        record = sfn.Pass(
            self,
            "RecordResult",
            parameters={
                "job": sfn.JsonPath.json_merge(
                    sfn.JsonPath.object_at("$.static.result_defaults"), sfn.JsonPath.object_at("$.training")
                )
            },
            result_path="$.result",
        )
        output = sfn.Pass(
            self,
            "Output",
            comment="The execution output: model artifact, metrics and what produced them",
            parameters={
                "training_job_name": sfn.JsonPath.string_at("$.result.job.TrainingJobName"),
                "training_job_arn": sfn.JsonPath.string_at("$.result.job.TrainingJobArn"),
                "status": sfn.JsonPath.string_at("$.result.job.TrainingJobStatus"),
                "model_artifact": sfn.JsonPath.string_at("$.result.job.ModelArtifacts.S3ModelArtifacts"),
                "final_metrics": sfn.JsonPath.list_at("$.result.job.FinalMetricDataList"),
                "training_seconds": sfn.JsonPath.number_at("$.result.job.TrainingTimeInSeconds"),
                "billable_seconds": sfn.JsonPath.number_at("$.result.job.BillableTimeInSeconds"),
                "instance_type": sfn.JsonPath.string_at("$.args.instance_type"),
                "data_version": sfn.JsonPath.string_at("$.args.data_version"),
                "hyperparameters": sfn.JsonPath.object_at("$.run.hyperparameters"),
            },
        )
        train.next(record).next(output).next(sfn.Succeed(self, "Succeeded"))

        describe = tasks.CallAwsService(
            self,
            "DescribeFailedTrainingJob",
            service="sagemaker",
            action="describeTrainingJob",
            iam_action="sagemaker:DescribeTrainingJob",
            iam_resources=[self._job_arn("training-job", prefix)],
            parameters={"TrainingJobName": sfn.JsonPath.string_at("$.args.job_name")},
            result_path="$.failure",
        )
        summarize = sfn.Pass(
            self,
            "SummarizeFailure",
            parameters={
                "job": sfn.JsonPath.json_merge(
                    sfn.JsonPath.object_at("$.static.failure_defaults"), sfn.JsonPath.object_at("$.failure")
                )
            },
            result_path="$.failure",
        )
        job_failed = sfn.Fail(
            self,
            "TrainingJobFailed",
            error="TrainingJobFailed",
            cause_path=sfn.JsonPath.format(
                "Training job {} ended {}: {}",
                sfn.JsonPath.string_at("$.failure.job.TrainingJobName"),
                sfn.JsonPath.string_at("$.failure.job.TrainingJobStatus"),
                sfn.JsonPath.string_at("$.failure.job.FailureReason"),
            ),
        )
        not_created = sfn.Fail(
            self,
            "TrainingJobNotCreated",
            error_path="$.error.Error",
            cause_path="$.error.Cause",
        )
        describe.add_catch(not_created, result_path="$.describe_error")
        describe.next(summarize).next(job_failed)
        train.add_catch(describe, result_path="$.error")

        if prepare is not None and self.sharding_spec is not None:
            prepare_state = self._prepare_state()
            describe_prepare = tasks.CallAwsService(
                self,
                "DescribeFailedPrepare",
                service="sagemaker",
                action="describeProcessingJob",
                iam_action="sagemaker:DescribeProcessingJob",
                iam_resources=[self._job_arn("processing-job", self.shard_job_name_prefix)],
                parameters={"ProcessingJobName": sfn.JsonPath.string_at("$.args.prepare_job_name")},
                result_path="$.failure",
            )
            summarize_prepare = sfn.Pass(
                self,
                "SummarizePrepareFailure",
                parameters={
                    "job": sfn.JsonPath.json_merge(
                        sfn.JsonPath.object_at("$.static.failure_defaults"), sfn.JsonPath.object_at("$.failure")
                    )
                },
                result_path="$.failure",
            )
            prepare_failed = sfn.Fail(
                self,
                "PrepareFailed",
                error="DataPreparationFailed",
                cause_path=sfn.JsonPath.format(
                    "Processing job {} (gpuctl shard) ended {}: {}",
                    sfn.JsonPath.string_at("$.failure.job.ProcessingJobName"),
                    sfn.JsonPath.string_at("$.failure.job.ProcessingJobStatus"),
                    sfn.JsonPath.string_at("$.failure.job.FailureReason"),
                ),
            )
            prepare_not_created = sfn.Fail(
                self, "PrepareNotCreated", error_path="$.error.Error", cause_path="$.error.Cause"
            )
            describe_prepare.add_catch(prepare_not_created, result_path="$.describe_error")
            describe_prepare.next(summarize_prepare).next(prepare_failed)
            prepare_state.add_catch(describe_prepare, result_path="$.error")
            prepare_state.next(train)
            choice = sfn.Choice(self, "PrepareData?")
            choice.when(sfn.Condition.boolean_equals("$.args.prepare", True), prepare_state).otherwise(train)
            merge_hp.next(check_hp.otherwise(choice))
        else:
            merge_hp.next(check_hp.otherwise(train))

        return init.next(apply_defaults).next(merge_input).next(unpack).next(check_name)

    def _train_state(self) -> sfn.CustomState:
        return sfn.CustomState(
            self,
            "Train",
            state_json={
                "Type": "Task",
                "Comment": "CreateTrainingJob with the full API (spot, checkpoints, VPC, FSx); waits for the end",
                "Resource": f"arn:{Stack.of(self).partition}:states:::sagemaker:createTrainingJob.sync",
                "Parameters": self.spec.to_sfn_parameters(_PATHS, where=path_of(self)),
                "ResultPath": "$.training",
            },
        )

    def _prepare_state(self) -> sfn.CustomState:
        assert self.sharding_spec is not None
        return sfn.CustomState(
            self,
            "ShardDataset",
            state_json={
                "Type": "Task",
                "Comment": "gpuctl shard in the training image: raw files -> tar shards for this data version",
                "Resource": f"arn:{Stack.of(self).partition}:states:::sagemaker:createProcessingJob.sync",
                "Parameters": self.sharding_spec.to_sfn_parameters(where=path_of(self)),
                "ResultPath": "$.prepare",
            },
        )

    def _grant_state_machine(self, stack: Stack) -> None:
        role = self.state_machine.role
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="TrainingJobsWithThePrefix",
                actions=[
                    "sagemaker:CreateTrainingJob",
                    "sagemaker:DescribeTrainingJob",
                    "sagemaker:StopTrainingJob",
                    "sagemaker:AddTags",
                    "sagemaker:ListTags",
                ],
                resources=[self._job_arn("training-job", self.job_name_prefix)],
            )
        )
        pass_roles = [self.role.role_arn]
        rules = [SYNC_RULES["training"]]
        if self.prepare_role is not None:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="ShardingJobsWithThePrefix",
                    actions=[
                        "sagemaker:CreateProcessingJob",
                        "sagemaker:DescribeProcessingJob",
                        "sagemaker:StopProcessingJob",
                        "sagemaker:AddTags",
                        "sagemaker:ListTags",
                    ],
                    resources=[self._job_arn("processing-job", self.shard_job_name_prefix)],
                )
            )
            pass_roles.append(self.prepare_role.role_arn)
            rules.append(SYNC_RULES["processing"])
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PassOnlyTheJobRoles",
                actions=["iam:PassRole"],
                resources=pass_roles,
                conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="SyncIntegrationManagedRules",
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[stack.format_arn(service="events", resource="rule", resource_name=r) for r in rules],
            )
        )
        policy = role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            nag.acknowledge_compliance(
                policy,
                "IAMNoInlinePolicy",
                "Safe because this inline policy is created by CDK for exactly one role (this state machine's), is "
                "deleted with it and cannot be attached elsewhere; it allows only jobs with this setup's prefix",
            )
            self.node.add_validation(_ExpectedWildcards(policy, self._expected_wildcards()))

    # -- monitoring -------------------------------------------------------------------------------------

    def _insights(self, function: str, metric: str, period: Duration, label: str) -> cloudwatch.MathExpression:
        return cloudwatch.MathExpression(
            expression=f'SELECT {function}({metric}) FROM SCHEMA("{TRAINING_NAMESPACE}", Host)',
            using_metrics={},
            period=period,
            label=label,
        )

    def _alarms(self, ref: Any, t: AlarmThresholds) -> tuple[cloudwatch.Alarm, cloudwatch.Alarm]:
        gpus = max(1, ref.nvidia_gpu_count)
        vcpus = max(1, ref.vcpus)
        gpu = self._insights("AVG", "GPUUtilization", t.period, "GPU utilization (sum over GPUs)")
        cpu = self._insights("AVG", "CPUUtilization", t.period, "CPU utilization (sum over vCPUs)")
        disk = self._insights("AVG", "DiskUtilization", t.period, "Disk utilization")
        input_bound = cloudwatch.MathExpression(
            expression=(
                f"IF(gpu / {gpus} < {t.gpu_low_pct:g} AND "
                f"(cpu / {vcpus} > {t.busy_pct:g} OR disk > {t.busy_pct:g}), 1, 0)"
            ),
            using_metrics={"gpu": gpu, "cpu": cpu, "disk": disk},
            period=t.period,
            label="input-bound (1 = GPU starved while CPU or disk is busy)",
        )
        action = alarm_action(self.topic)
        alarm = input_bound.create_alarm(
            self,
            "InputBoundAlarm",
            alarm_description=(
                f"Training looks input-bound: average GPU utilization below {t.gpu_low_pct:g}% per GPU while CPU "
                f"(per vCPU of {ref.sagemaker_name}) or disk is above {t.busy_pct:g}%. Data loading or preprocessing "
                "is the bottleneck: pre-shard the data (gpuctl shard), raise num_workers, or use FSx / FastFile. "
                "Covers every SageMaker training host in this account and region (Metrics Insights)."
            ),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=t.input_bound_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        idle_expr = cloudwatch.MathExpression(
            expression=f"gpumin / {gpus}",
            using_metrics={"gpumin": self._insights("MIN", "GPUUtilization", t.period, "least-used host")},
            period=t.period,
            label="GPU utilization per GPU of the least-used host",
        )
        idle = idle_expr.create_alarm(
            self,
            "IdleGpuAlarm",
            alarm_description=(
                f"A training host's GPUs are idle: utilization below {t.idle_gpu_pct:g}% per GPU for "
                f"{t.idle_periods} periods. The job may be stuck (data download, a hang in NCCL) or not using the "
                "GPU at all (CPU-only torch build). Covers every SageMaker training host in this account and region."
            ),
            threshold=t.idle_gpu_pct,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=t.idle_periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        for a in (alarm, idle):
            a.add_alarm_action(action)
            a.add_ok_action(action)
        return alarm, idle

    def _search(self, dimension: str, metric: str, label: str, period: Duration) -> cloudwatch.MathExpression:
        query = f'{{{TRAINING_NAMESPACE},{dimension}}} MetricName="{metric}" "{self.job_name_prefix}"'
        return cloudwatch.MathExpression(
            expression=f"SEARCH('{query}', 'Average', {int(period.to_seconds())})",
            using_metrics={},
            period=period,
            label=label,
        )

    def _dashboard(self, t: AlarmThresholds) -> cloudwatch.Dashboard:
        period = Duration.minutes(1)
        dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{self.job_name_prefix}-training",
            default_interval=Duration.hours(6),
        )
        dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown=(
                    f"## Training jobs `{self.job_name_prefix}-*`\n"
                    "GPU and CPU utilization are summed over the GPUs / vCPUs of a host (4 GPUs: 0-400 %). "
                    "**Low GPU with busy CPU or disk** means the input pipeline is the bottleneck; **low GPU with "
                    "low CPU and disk** means the loader is under-parallelized (raise `num_workers`)."
                ),
                width=24,
                height=3,
            )
        )
        host = [
            ("GPUUtilization", "GPU utilization %"),
            ("GPUMemoryUtilization", "GPU memory utilization %"),
            ("CPUUtilization", "CPU utilization %"),
            ("DiskUtilization", "Disk utilization %"),
        ]
        dashboard.add_widgets(
            *[
                cloudwatch.GraphWidget(title=title, left=[self._search("Host", metric, "", period)], width=12, height=6)
                for metric, title in host
            ]
        )
        job_metrics = [m["Name"] for m in self.spec.metric_definitions]
        wanted = [name for name in job_metrics if name.endswith(("samples_per_sec", "data_wait_pct", "loss"))]
        if wanted:
            dashboard.add_widgets(
                *[
                    cloudwatch.GraphWidget(
                        title=f"{name} (from the job's logs)",
                        left=[self._search("TrainingJobName", name, "", period)],
                        width=8,
                        height=6,
                    )
                    for name in wanted
                ]
            )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Pipeline executions",
                left=[
                    self.state_machine.metric_succeeded(statistic="Sum", period=Duration.hours(1)),
                    self.state_machine.metric_failed(statistic="Sum", period=Duration.hours(1)),
                ],
                width=12,
                height=6,
            ),
            cloudwatch.AlarmStatusWidget(
                alarms=[self.input_bound_alarm, self.idle_gpu_alarm], title="Alarms", width=12, height=6
            ),
        )
        return dashboard


def hyperparameter_expression(max_processes: Mapping[str, int]) -> str:
    """The JSONata expression of the ``MergeHyperparameters`` state (without the ``{% %}`` delimiters).

    CreateTrainingJob takes only strings in ``HyperParameters`` (botocore: map of ``HyperParameterKey`` to
    ``HyperParameterValue``, both strings), so an execution input such as ``{"hyperparameters": {"epochs": 30}}``
    would fail at SageMaker. The expression merges the derived distribution, the base hyperparameters and the
    execution's, converts numbers and booleans to strings (``30`` -> ``"30"``, ``true`` -> ``"true"``) and lists
    the problems the ``ValidateHyperparameters`` choice fails on, each naming the key, the value and what is
    allowed: a value that is an object, a list or null; more entries or longer keys and values than botocore's
    model allows; and ``processes_per_host`` outside 0 or 1..GPUs of the chosen type (``max_processes``: the
    catalog's :func:`~gpu_constructs.catalog.processes_per_host_limit` per allowed type, the pattern
    :data:`~gpu_constructs.training_spec.PROCESSES_PER_HOST_PATTERN`: the rule the spec, the config and
    ``gpuctl`` apply with :func:`~gpu_constructs.training_spec.check_processes_per_host`).

    The state's output is its input with ``run.hyperparameters`` (strings) and ``run.problems`` (a list) set.
    """
    count, key_max, value_max = hyperparameter_limits()
    pph = HP_PROCESSES_PER_HOST
    limits = json.dumps(dict(sorted(max_processes.items())), separators=(",", ":"))
    return " ".join(
        f"""(
  $in := $states.input;
  $given := $in.args.hyperparameters;
  $isObject := $type($given) = 'object';
  $input := $isObject ? $given : {{}};
  $text := function($v) {{ $type($v) = 'string' ? $v : $string($v) }};
  $merged := $merge([$in.derived, $in.static.base_hyperparameters, $input]);
  $values := $merge($append([{{}}], $each($merged, function($v, $k) {{ {{$k: $text($v)}} }})));
  $type_problems := $each($input, function($v, $k) {{
    $type($v) in ['object', 'array', 'null']
      ? 'hyperparameters.' & $k & '=' & $string($v) & ' is not allowed; allowed: a string, a number or true/false'
        & ' (SageMaker takes strings; numbers and booleans are converted)'
  }});
  $size_problems := $each($values, function($v, $k) {{
    $length($k) > {key_max} or $length($v) > {value_max}
      ? 'hyperparameters.' & $substring($k, 0, 40) & ': a ' & $length($k) & '-character name and a '
        & $length($v) & '-character value; allowed: names up to {key_max} and values up to {value_max} characters'
  }});
  $n := $count($keys($values));
  $count_problem := $n > {count} ? ($n & ' hyperparameters; allowed: at most {count}');
  $limit := $lookup({limits}, $in.args.instance_type);
  $procs := $lookup($values, '{pph}');
  $procs_ok := $contains($procs, /{PROCESSES_PER_HOST_PATTERN}/) and $number($procs) <= $limit;
  $procs_problem := $not($procs_ok) ? 'hyperparameters.{pph}=' & $procs & ' is not allowed on '
    & $in.args.instance_type & '; allowed: 0 (one process per GPU) or 1..' & $limit;
  $problems := $append($append($append($append(
    $isObject ? [] : ['hyperparameters=' & $string($given) & ' is not allowed; allowed: an object of name: value'],
    $type_problems), $size_problems), $count_problem), $procs_problem);
  $merge([$in, {{'run': {{'hyperparameters': $values, 'problems': $problems}}}}])
)""".split()
    )


def _selection_kwargs(selection: ec2.SubnetSelection | None) -> dict[str, Any]:
    if selection is None:
        return {}
    return {
        k: v
        for k, v in {
            "availability_zones": selection.availability_zones,
            "one_per_az": selection.one_per_az,
            "subnet_filters": selection.subnet_filters,
            "subnet_group_name": selection.subnet_group_name,
            "subnets": selection.subnets,
            "subnet_type": selection.subnet_type,
        }.items()
        if v is not None
    }


#: Actions AWS supports only on ``Resource: "*"`` that the job roles and the state machine need.
STAR_RESOURCE_ACTIONS = frozenset(
    {
        "ecr:GetAuthorizationToken",
        "cloudwatch:PutMetricData",
        *(a for a in SAGEMAKER_VPC_ACTIONS if ":Describe" in a),
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "logs:CreateLogDelivery",
        "logs:GetLogDelivery",
        "logs:UpdateLogDelivery",
        "logs:DeleteLogDelivery",
        "logs:ListLogDeliveries",
        "logs:PutResourcePolicy",
        "logs:DescribeResourcePolicies",
        "logs:DescribeLogGroups",
    }
)
STAR_RESOURCE_REASON = (
    "Safe because every action on Resource * supports no resource-level permissions: ECR registry login, "
    "PutMetricData (limited by a namespace condition), EC2 Describe calls for VPC jobs, and the X-Ray and "
    "log-delivery calls Step Functions makes, since AWS documents them on *"
)


def flatten(node: Any) -> str:
    """A resolved CloudFormation value as cdk-nag flattens it in finding ids (``<Logical.Arn>/prefix/*``)."""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return str(delimiter).join(flatten(item) for item in items)
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{flatten(resource)}.{flatten(attribute)}>"
        if "Fn::ImportValue" in node:
            return flatten(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{flatten(node['Ref'])}>"
        if "Fn::Sub" in node:
            return flatten(node["Fn::Sub"])
    return json.dumps(node, separators=(",", ":"))


def wildcard_findings(document: Mapping[str, Any]) -> tuple[set[str], bool]:
    """(IAM5 finding ids of a resolved policy document, whether every action on ``*`` is a star-only action)."""
    found: set[str] = set()
    star_only = True
    for statement in document.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        actions = [str(a) for a in _as_list(statement.get("Action"))]
        found.update(f"Action::{a}" for a in actions if "*" in a)
        for resource in _as_list(statement.get("Resource")):
            flat = flatten(resource)
            if "*" in flat:
                found.add(f"Resource::{flat}")
            if flat == "*":
                star_only = star_only and all(a in STAR_RESOURCE_ACTIONS for a in actions)
    return found, star_only


@jsii.implements(IValidation)
class _ExpectedWildcards:
    """Acknowledges the expected IAM5 findings of one policy in the validation phase, when cross-stack
    references are final, one exact finding id at a time (unexpected wildcards stay reported)."""

    def __init__(self, policy: IConstruct, expected: Sequence[tuple[str, str]]) -> None:
        self._policy = policy
        self._expected = [(re.compile(pattern), reason) for pattern, reason in expected]
        self._done = False

    def validate(self) -> list[str]:
        if self._done:
            return []
        self._done = True
        cfn = self._policy.node.default_child
        if not isinstance(cfn, iam.CfnPolicy):
            return []
        document = Stack.of(cfn).resolve(cfn.policy_document)
        findings, star_only = wildcard_findings(document)
        for finding in sorted(findings):
            if finding == "Resource::*":
                if star_only:
                    nag.acknowledge(cfn, nag.AWS_SOLUTIONS, f"IAM5[{finding}]", STAR_RESOURCE_REASON)
                continue
            for pattern, reason in self._expected:
                if pattern.fullmatch(finding):
                    nag.acknowledge(cfn, nag.AWS_SOLUTIONS, f"IAM5[{finding}]", reason)
                    break
        return []


JOB_GROUP_INTERNAL_REASON = (
    "Safe because the rule admits traffic only from this same security group (the hosts of one training job "
    "exchanging NCCL traffic on dynamic ports); nothing outside the group, and no CIDR, can reach these ports"
)
