"""The :class:`TrainingPipeline` construct: job roles, the job spec, the training state machine, monitoring."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jsii
from aws_cdk import Duration, RemovalPolicy, Size, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_ssm as ssm
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from gpu_constructs.catalog import (
    FallbackChoice,
    InstanceType,
    check_fallback_chain,
    instance_types,
    lookup,
    require_nvidia_gpu,
)
from gpu_constructs.deprecation import renamed_keywords, warn_deprecated
from gpu_constructs.errors import ValidationError, fail, is_token, path_of
from gpu_constructs.keys import allow_cloudwatch_logs, new_key
from gpu_constructs.network import select_subnets
from gpu_constructs.principals import RoleConnectable
from gpu_constructs.removal import named_log_group
from gpu_constructs.s3_keys import as_key_prefix, is_relative_key
from gpu_constructs.security_groups import cluster_security_group
from gpu_constructs.storage import PlatformStorage, grant_objects
from gpu_constructs.topics import notification_topic
from gpu_constructs.training.acknowledgments import JOB_GROUP_INTERNAL_REASON, GrantedPrefixes, acknowledge_policy
from gpu_constructs.training.definition import DefinitionInputs, definition
from gpu_constructs.training.monitoring import add_alarms, add_dashboard, add_failure_rules
from gpu_constructs.training.options import (
    PREPARE_MAX_RUNTIME,
    PrepareOptions,
    ReadableInput,
    TrainingAlarms,
    TrainingCodeOptions,
    TrainingImageLike,
)
from gpu_constructs.training.roles import (
    TrainingJobs,
    grant_read_inputs,
    grant_run_jobs,
    grant_state_machine,
    job_policy,
    job_role,
)
from gpu_constructs.training_spec import (
    DATA_VERSION_PLACEHOLDER,
    Channel,
    FsxChannel,
    S3Channel,
    ShardingJobSpec,
    ShardSplit,
    TrainingCode,
    TrainingJobSpec,
    seconds_of,
)
from gpu_constructs.training_spec.code import Distribution, Framework
from gpu_constructs.training_spec.code_package import (
    DEFAULT_CODE_DIR,
    code_key_prefix,
    ensure_driver,
    ensure_source_package,
)
from gpu_constructs.training_spec.preferences import (
    MAX_PREFERENCES,
    PREFERENCES_WITH_SPOT,
    InstancePreference,
    as_preference,
)
from gpu_constructs.training_spec.rules import as_timedelta

__all__ = ["TrainingPipeline"]

#: The deprecated flat keywords of :class:`TrainingPipeline` that :class:`TrainingCodeOptions` replaces.
_FLAT_CODE = ("source_dir", "entry_point", "distribution", "framework", "package_index")


@jsii.implements(ec2.IConnectable, iam.IGrantable)
class TrainingPipeline(RoleConnectable, Construct):
    """A deployed GPU training setup: job roles, the training state machine, dashboard and alarms.

    ``connections`` are the jobs' security groups (open an FSx file system or other targets to the jobs with
    it); ``grant_principal`` is the SageMaker execution role (grant it access to further data the jobs read).

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
    :param spot: managed spot training with checkpoints (default False). Exclusive with ``instance_preferences``.
    :param max_wait: spot: runtime plus waiting for capacity (default 2 x max_runtime).
    :param checkpoints: give every job a ``CheckpointConfig`` (SageMaker syncs ``/opt/ml/checkpoints`` with
        ``s3://<artifacts>/checkpoints/<job_name_prefix>/<job name>/``) and the role its read/write grants on that
        prefix. Default ``None``: on with ``spot``, off without. ``True`` keeps checkpoints of on-demand jobs
        (fallback lists, training plans): a stopped or failed job's last checkpoint stays in S3 and a job restarted
        under the same name resumes from it. ``False`` with ``spot`` is refused: an interrupted spot job resumes
        from its checkpoints. "SageMaker AI provides the functionality to copy the checkpoints from the local path
        to Amazon S3 and automatically syncs the checkpoints in that directory with S3. Existing checkpoints in S3
        are written to the SageMaker AI container at the start of the job"
        (https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html); managed spot training is one use
        of checkpoints, not a requirement ("Use checkpoints with SageMaker AI managed spot training to save on
        training costs", same page).
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
    :param alarms: thresholds and periods of the alarms (default: :class:`TrainingAlarms` defaults).
    :param tags: tags of every job (default none).
    :param spec_parameter_name: SSM parameter holding the job spec JSON for ``gpuctl``
        (default ``/<job_name_prefix>/job-spec``).
    :param code: the training code, shipped as a CDK S3 asset (the ``code`` channel) and run by the platform's
        launcher on any image (:class:`TrainingCodeOptions`; default: the built-in trainer).
    :param readable_inputs: the S3 prefixes the jobs may read (:class:`ReadableInput`): the channels a user names
        (``gpuctl train --input``, an execution's ``inputs``) must lie under one, checked before any job is created;
        the job role reads exactly these and the dataset prefix (default: the whole datasets bucket).
    :param role: an existing execution role of the training jobs, trusted by ``sagemaker.amazonaws.com``
        (default: a new role). The setup adds its grants (datasets prefix, artifacts prefixes, image pull,
        logs, metrics, keys) to the role's policy; give a role this setup alone uses, imported mutable
        (``iam.Role.from_role_arn(...)``). The prepare step always has a role of its own.
    :param instance_preferences: the fallback list: 1-5 types in priority order, starting with ``instance_type``
        (names, :class:`~gpu_constructs.catalog.FallbackChoice` or
        :class:`~gpu_constructs.training_spec.preferences.InstancePreference` with its own ``instance_count`` and
        ``training_plan_arn``; default: none, one type). An execution that names no ``instance_type`` runs on the
        first type with capacity (``ResourceConfig.InstancePreferences``, through the AWS SDK integration and a
        describe loop, see :mod:`gpu_constructs.training.fallback_states`); one that names a type runs on that type
        only. Checked by the catalog (:func:`~gpu_constructs.catalog.check_fallback_chain`): NVIDIA GPU types the
        image's CUDA supports, at least the first choice's GPU memory, the same world size (``keep_world_size``),
        at most ``max_cost_ratio`` x the first choice's price; exclusive with ``spot``.
    :param training_plan_arn: a SageMaker training plan whose reserved capacity the jobs use
        (``ResourceConfig.TrainingPlanArn``; default: none, on-demand). Exclusive with per-preference plans.
    :param keep_world_size: every fallback keeps GPUs x hosts of the first choice (default True: the global batch
        stays the same); False when the job adapts its batch to the world size.
    :param max_cost_ratio: refuse a fallback whose hourly price x count exceeds this multiple of the first choice's
        (default: none, no ceiling; prices: :mod:`gpu_constructs.catalog.pricing`, the stack's region or us-east-1).
    :param alarm_thresholds: deprecated: ``alarms``.
    :param source_dir: deprecated: ``code=TrainingCodeOptions(source_dir=...)``.
    :param entry_point: deprecated: ``code=TrainingCodeOptions(entry_point=...)``.
    :param distribution: deprecated: ``code=TrainingCodeOptions(distribution=...)``.
    :param framework: deprecated: ``code=TrainingCodeOptions(framework=...)``.
    :param package_index: deprecated: ``code=TrainingCodeOptions(package_index=...)``.
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
        checkpoints: bool | None = None,
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
        alarms: TrainingAlarms | None = None,
        tags: Mapping[str, str] | None = None,
        spec_parameter_name: str | None = None,
        role: iam.IRole | None = None,
        code: TrainingCodeOptions | None = None,
        readable_inputs: Sequence[ReadableInput] | None = None,
        instance_preferences: Sequence[str | FallbackChoice | InstancePreference] | None = None,
        training_plan_arn: str | None = None,
        keep_world_size: bool = True,
        max_cost_ratio: float | None = None,
        alarm_thresholds: TrainingAlarms | None = None,
        source_dir: str | Path | None = None,
        entry_point: str | None = None,
        distribution: Distribution | None = None,
        framework: Framework | None = None,
        package_index: bool | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        alarms, code = self._current_props(
            alarms, code, alarm_thresholds, source_dir, entry_point, distribution, framework, package_index
        )
        self._validate_image(image, instance_type)
        fallback = _Fallback(instance_preferences, training_plan_arn, keep_world_size, max_cost_ratio)
        preferences = self._validate_preferences(image, instance_type, instance_count, spot, fallback)
        self._validate_prefix(job_name_prefix)
        self._validate_channels_in_dataset(channels, storage, dataset_prefix)
        self._validate_vpc(vpc, channels, security_groups)
        self._validate_emails(notification_emails)
        self.job_name_prefix = job_name_prefix
        self.dataset_prefix = _as_prefix(dataset_prefix)
        self.source_prefix: str | None = None
        self.shard_job_name_prefix = f"{job_name_prefix}-shard"
        #: Where ``gpuctl train --source-dir`` uploads code packages (the job role reads them).
        self.code_prefix = code_key_prefix(job_name_prefix)
        self.image = image
        self.storage = storage
        self.vpc = vpc
        self.security_groups = self._job_security_groups(vpc, security_groups)
        self._connections = ec2.Connections(security_groups=self.security_groups)
        #: What the jobs may read besides the dataset prefix (default: the whole datasets bucket).
        self.readable_options = (ReadableInput(),) if readable_inputs is None else tuple(readable_inputs)
        #: The catalog entry of ``instance_type`` (the volume key, the allowed types and the alarms follow from it).
        instance = lookup(instance_type, where=path_of(self))

        # -- the execution role and the job spec --------------------------------------------------------
        self.spec = self._training_jobs(
            instance_type,
            instance,
            role=role,
            vpc_subnets=vpc_subnets,
            channels=channels,
            instance_count=instance_count,
            volume_size=volume_size,
            hyperparameters=hyperparameters,
            environment=environment,
            metric_definitions=metric_definitions,
            max_runtime=max_runtime,
            spot=spot,
            max_wait=max_wait,
            checkpoints=self._checkpoints(spot, checkpoints),
            max_retry_attempts=max_retry_attempts,
            inter_container_encryption=inter_container_encryption,
            network_isolation=network_isolation,
            processes_per_host=processes_per_host,
            dataloader_workers=dataloader_workers,
            data_version=data_version,
            production=production,
            tags=tags,
            code=code,
        )
        self.spec = self._on_fallback(self.spec, preferences, training_plan_arn)
        self.allowed_instance_types = self._allowed_types(allowed_instance_types, instance)

        # -- optional prepare step ----------------------------------------------------------------------
        self.prepare_role: iam.IRole | None = None
        self.sharding_spec: ShardingJobSpec | None = None
        if prepare is not None:
            self.sharding_spec = self._sharding_spec(prepare, channels, dataset_prefix, vpc, tags)

        # -- the state machine, its notifications and monitoring ----------------------------------------
        self.encryption_key = self._encryption_key(encryption_key, removal_policy)
        self._state_machine(data_version, prepare, log_retention, removal_policy)
        self._monitoring(instance, alarms, notification_emails)
        self.spec_parameter = self._publish_spec(spec_parameter_name)

    # -- grants -----------------------------------------------------------------------------------------

    def grant_start_execution(self, grantee: iam.IGrantable) -> iam.Grant:
        """Start executions of the state machine and read their status and history."""
        grant = self.state_machine.grant_start_execution(grantee)
        self.state_machine.grant_read(grantee)
        return grant

    def grant_run_jobs(self, grantee: iam.IGrantable) -> iam.Grant:
        """What ``gpuctl train/status/logs/stop`` need: jobs with the prefix, pass the role, read the logs,
        the job spec parameter and the stack's outputs."""
        return grant_run_jobs(
            self,
            grantee,
            self._jobs(),
            spec_parameter=self.spec_parameter,
            artifacts_bucket=self.storage.artifacts_bucket,
            code_prefix=self.code_prefix,
        )

    # -- validation -------------------------------------------------------------------------------------

    def _current_props(
        self,
        alarms: TrainingAlarms | None,
        code: TrainingCodeOptions | None,
        alarm_thresholds: TrainingAlarms | None,
        *flat_code: Any,
    ) -> tuple[TrainingAlarms, TrainingCodeOptions]:
        """``alarms`` and ``code`` (checked), or what the deprecated keywords (``alarm_thresholds``; ``flat_code`` in
        ``_FLAT_CODE`` order) give. Each deprecated keyword warns once, at the user's line: the stack levels count
        this method, ``__init__`` and jsii's constructor call. A setting given both ways is refused, so none is
        silently dropped."""
        renamed = {"alarm_thresholds": alarm_thresholds} if alarm_thresholds is not None else {}
        alarms = renamed_keywords(
            "TrainingPipeline", {"alarms": alarms, **renamed}, {"alarm_thresholds": "alarms"}, stacklevel=6
        )["alarms"]
        given = {name: value for name, value in zip(_FLAT_CODE, flat_code, strict=True) if value is not None}
        if given and code is not None:
            raise ValidationError(
                path_of(self), f"{', '.join(map(repr, given))} and 'code' are the same settings; give only 'code'"
            )
        for name in given:
            warn_deprecated(f"TrainingPipeline({name}=...)", f"code=TrainingCodeOptions({name}=...)", stacklevel=5)
        code = code if code is not None else TrainingCodeOptions(**given)
        code.validate(path_of(self))
        return alarms or TrainingAlarms(), code

    def _checkpoints(self, spot: bool, checkpoints: bool | None) -> bool:
        """Whether the jobs checkpoint to S3: ``checkpoints``, or (``None``) with spot only. ``False`` with spot is
        refused (the job spec's spot rule: an interrupted spot job resumes from its checkpoints)."""
        if checkpoints is None:
            return spot
        if not isinstance(checkpoints, bool):
            raise fail(self, "checkpoints", checkpoints, "True, False or None (on with spot, off without)")
        if spot and not checkpoints:
            raise fail(
                self,
                "checkpoints",
                checkpoints,
                "True or None with spot=True: an interrupted spot job resumes from its checkpoints "
                "(CheckpointConfig); turn spot off to run without checkpoints",
            )
        return checkpoints

    def _validate_image(self, image: TrainingImageLike, instance_type: str) -> None:
        where = path_of(self)
        if not isinstance(image, TrainingImageLike):
            raise fail(self, "image", image, "a GpuImage (image_uri, usage, cuda_version, grant_pull ...)")
        image.require_usage("training", where)
        if not is_token(instance_type):
            require_nvidia_gpu(instance_type, where=where, usage="training")
            image.check_instance(instance_type, where)

    def _validate_preferences(
        self, image: TrainingImageLike, instance_type: str, instance_count: int, spot: bool, fallback: _Fallback
    ) -> tuple[InstancePreference, ...]:
        """The fallback list, checked: not with spot (SageMaker's exclusivity, :data:`PREFERENCES_WITH_SPOT`), then the
        catalog's chain check (usage training, the image's CUDA version, world size, cost ceiling, at most
        :data:`MAX_PREFERENCES` entries) and the image against every type. SageMaker's other rules for the list
        (first entry, counts, plans, storage kind) are the job spec's."""
        if fallback.preferences is None:
            return ()
        where = path_of(self)
        preferences = tuple(as_preference(item, where) for item in fallback.preferences)
        if spot and preferences:
            raise ValidationError(where, PREFERENCES_WITH_SPOT)
        if any(is_token(p.instance_type) for p in preferences):
            return preferences
        stack_region = Stack.of(self).region
        check_fallback_chain(
            [FallbackChoice(p.instance_type, p.instance_count) for p in preferences],
            usage="training",
            where=where,
            param="instance_preferences",
            default_count=instance_count,
            cuda_version=image.cuda_version,
            keep_world_size=fallback.keep_world_size,
            max_cost_ratio=fallback.max_cost_ratio,
            region="us-east-1" if is_token(stack_region) else stack_region,
            max_entries=MAX_PREFERENCES,
        )
        for preference in preferences:
            image.check_instance(preference.instance_type, where)
        if preferences[0].instance_type != instance_type:
            raise fail(
                self,
                "instance_preferences[0]",
                preferences[0].instance_type,
                f"the job's instance_type {instance_type!r} (the list is the first choice, then its fallbacks)",
            )
        return preferences

    def _on_fallback(
        self, spec: TrainingJobSpec, preferences: tuple[InstancePreference, ...], training_plan_arn: str | None
    ) -> TrainingJobSpec:
        """``spec`` with the fallback list and the training plan, validated (``spec`` itself without either)."""
        if not preferences and training_plan_arn is None:
            return spec
        changed = spec.with_changes(instance_preferences=preferences, training_plan_arn=training_plan_arn)
        return changed.validate(path_of(self))

    def _validate_prefix(self, prefix: str) -> None:
        if not isinstance(prefix, str) or not re.fullmatch(r"[a-z0-9](-?[a-z0-9]){0,39}", prefix):
            raise fail(
                self,
                "job_name_prefix",
                prefix,
                "1-40 lowercase letters, digits and single hyphens, starting and ending with a letter or digit "
                "(IAM matches SageMaker's lowercase job ARNs; 22 characters stay for the job's own suffix)",
            )

    def _validate_dataset_prefix(self, prefix: str) -> None:
        if not isinstance(prefix, str) or not prefix or not is_relative_key(prefix):
            raise fail(self, "dataset_prefix", prefix, "a non-empty relative S3 prefix such as 'imagenet/'")

    def _validate_channels_in_dataset(
        self, channels: Sequence[Channel], storage: PlatformStorage, dataset_prefix: str
    ) -> None:
        """The dataset prefix, then every S3 channel under it."""
        self._validate_dataset_prefix(dataset_prefix)
        if not channels:
            raise fail(self, "channels", list(channels), "at least one S3Channel or FsxChannel")
        root = f"s3://{storage.datasets_bucket.bucket_name}/{_as_prefix(dataset_prefix)}"
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
        for address in emails:
            if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", address):
                raise fail(self, "notification_emails", address, "e-mail addresses such as ml-team@example.com")

    # -- parts ------------------------------------------------------------------------------------------

    def _training_jobs(
        self,
        instance_type: str,
        instance: InstanceType,
        *,
        role: iam.IRole | None,
        vpc_subnets: ec2.SubnetSelection | None,
        channels: Sequence[Channel],
        instance_count: int,
        volume_size: Size,
        hyperparameters: Mapping[str, str] | None,
        environment: Mapping[str, str] | None,
        metric_definitions: Sequence[Mapping[str, str]] | None,
        max_runtime: Duration,
        spot: bool,
        max_wait: Duration | None,
        checkpoints: bool,
        max_retry_attempts: int | None,
        inter_container_encryption: bool,
        network_isolation: bool,
        processes_per_host: int | None,
        dataloader_workers: int | None,
        data_version: str,
        production: bool,
        tags: Mapping[str, str] | None,
        code: TrainingCodeOptions,
    ) -> TrainingJobSpec:
        """The training jobs: their execution role (``self.role``) with what it reads (``self.readable_inputs``)
        and writes, their code package, and the validated job spec on ``instance_type`` (``instance``: its catalog
        entry) that the state machine and ``gpuctl`` run."""
        vpc = self.vpc
        subnet_ids = select_subnets(vpc, vpc_subnets).subnet_ids if vpc is not None else []
        output_prefix = f"output/{self.job_name_prefix}/"
        checkpoint_prefix = f"checkpoints/{self.job_name_prefix}/"
        self.role = self._execution_role(role, vpc, output_prefix, checkpoint_prefix if checkpoints else None)
        #: ``s3://bucket/prefix`` of everything the job role may read as input (user-named channels included).
        self.readable_inputs = grant_read_inputs(
            self, self.role, self.readable_options, self.dataset_prefix, storage=self.storage
        )
        artifacts = self.storage.artifacts_bucket.bucket_name
        package_index = (vpc is None and not network_isolation) if code.package_index is None else code.package_index
        return TrainingJobSpec(
            image_uri=self.image.image_uri,
            role_arn=self.role.role_arn,
            instance_type=instance_type,
            output_s3_uri=f"s3://{artifacts}/{output_prefix}",
            channels=tuple(channels),
            instance_count=instance_count,
            volume_size_gb=int(volume_size.to_gibibytes()),
            volume_kms_key=self.storage.key.key_arn if not instance.has_local_nvme else None,
            output_kms_key=self.storage.key.key_arn,
            hyperparameters=dict(hyperparameters or {}),
            environment=dict(environment or {}),
            metric_definitions=tuple(dict(m) for m in metric_definitions or ()),
            max_runtime=as_timedelta(max_runtime),
            spot=spot,
            max_wait=as_timedelta(max_wait),
            checkpoint_s3_uri=f"s3://{artifacts}/{checkpoint_prefix}" if checkpoints else None,
            subnets=tuple(subnet_ids),
            security_group_ids=tuple(sg.security_group_id for sg in self.security_groups),
            inter_container_encryption=inter_container_encryption,
            network_isolation=network_isolation,
            processes_per_host=processes_per_host,
            dataloader_workers=dataloader_workers,
            data_version=data_version,
            cuda_version=self.image.cuda_version,
            production=production,
            max_retry_attempts=max_retry_attempts,
            job_name_prefix=self.job_name_prefix,
            tags=dict(tags or {}),
            code=self._code(code, package_index),
            readable_inputs=self.readable_inputs,
        ).validate(path_of(self))

    def _code(self, options: TrainingCodeOptions, package_index: bool) -> TrainingCode:
        """The code package and the launcher as S3 assets the execution role may read; executions may also run
        packages under ``code/<job_name_prefix>/`` of the artifacts bucket (what ``gpuctl train`` uploads).
        ``package_index`` is ``options.package_index`` resolved for the jobs' network."""
        source_dir, entry_point = options.source_dir, options.entry_point
        builtin = source_dir is None
        try:
            package_file, _package = ensure_source_package(
                Path(source_dir) if source_dir is not None else DEFAULT_CODE_DIR, entry_point
            )
        except ValidationError as exc:
            raise ValidationError(path_of(self), f"source_dir {source_dir}: {exc.detail}") from None
        self.code_asset = s3_assets.Asset(self, "Code", path=str(package_file))
        self.driver_asset = s3_assets.Asset(self, "Driver", path=str(ensure_driver()))
        # SageMaker lists every S3Prefix channel with the execution role before it downloads it, even when the
        # prefix is one object's key (gpu_constructs.authz.journeys): each read grant comes with its listing.
        for asset in (self.code_asset, self.driver_asset):
            grant_objects(self.role, asset.bucket, asset.s3_object_key, read=True, list_prefix=asset.s3_object_key)
        grant_objects(
            self.role, self.storage.artifacts_bucket, f"{self.code_prefix}*", read=True, list_prefix=self.code_prefix
        )
        return TrainingCode(
            source_s3_uri=self.code_asset.s3_object_url,
            drivers_s3_uri=self.driver_asset.s3_object_url,
            entry_point=entry_point,
            distribution=options.distribution,
            framework=options.framework,
            package_index=package_index,
            upload_prefix=f"s3://{self.storage.artifacts_bucket.bucket_name}/{self.code_prefix}",
            builtin=builtin,
        )

    def _job_security_groups(
        self, vpc: ec2.IVpc | None, given: Sequence[ec2.ISecurityGroup] | None
    ) -> list[ec2.ISecurityGroup]:
        """The given groups, or (in a VPC) a new one: HTTPS egress and all traffic between the hosts of a job."""
        if vpc is None or given:
            return list(given or [])
        group = cluster_security_group(
            self,
            "JobSecurityGroup",
            vpc=vpc,
            description=f"SageMaker jobs of {self.job_name_prefix}: HTTPS egress, all traffic between hosts",
            https_egress="HTTPS to AWS APIs",
            internal="NCCL between the hosts of one job",
            internal_reason=JOB_GROUP_INTERNAL_REASON,
        )
        return [group]

    def _job_role(
        self,
        construct_id: str,
        kind: Literal["training", "processing"],
        vpc: ec2.IVpc | None,
        existing: iam.IRole | None = None,
    ) -> iam.IRole:
        role = job_role(
            self, construct_id, kind, vpc, job_name_prefix=self.job_name_prefix, key=self.storage.key, existing=existing
        )
        acknowledge_policy(
            self,
            job_policy(role),
            f"Safe because this inline policy is created by CDK for exactly one role (the SageMaker {kind} job "
            "role), is deleted with it and cannot be attached elsewhere; every statement is scoped to this setup",
            self._granted_prefixes(),
        )
        return role

    def _execution_role(
        self,
        existing: iam.IRole | None,
        vpc: ec2.IVpc | None,
        output_prefix: str,
        checkpoint_prefix: str | None,
    ) -> iam.IRole:
        """The training jobs' role: writes the output (and checkpoint) prefix, pulls the image (what it reads:
        :func:`~gpu_constructs.training.roles.grant_read_inputs`)."""
        role = self._job_role("ExecutionRole", "training", vpc, existing)
        self.storage.grant_write_artifacts(role, output_prefix)
        if checkpoint_prefix is not None:
            self.storage.grant_read_write_checkpoints(role, checkpoint_prefix)
        self.image.grant_pull(role)
        return role

    def _allowed_types(self, requested: Sequence[str] | None, ref: InstanceType) -> tuple[str, ...]:
        """Types an execution may pick: same local-storage kind (VolumeKmsKeyId) as ``ref`` (the catalog entry of the
        spec's instance type), CUDA support, GPU count."""
        where = path_of(self)
        listed = self.spec.preference_types
        if self.spec.training_plan_arn is not None:
            # A plan holds one type: "The InstanceType field [...] must match the InstanceType of your training plan".
            other = sorted(set(requested or ()) - {self.spec.instance_type})
            if other:
                raise fail(self, "allowed_instance_types", other, "none but instance_type with a training_plan_arn")
            return (self.spec.instance_type,)
        if requested is not None:
            names = list(dict.fromkeys(requested))
            for position, name in enumerate(listed or (self.spec.instance_type,)):
                if name not in names:
                    names.insert(position, name)
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
        for position, name in enumerate(listed or (self.spec.instance_type,)):
            if name not in names:
                names.insert(position, name)
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
        prefix = _as_prefix(dataset_prefix)
        source = _as_prefix(prepare.source_prefix)
        self.source_prefix = source
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
        driver_key = self.driver_asset.s3_object_key
        grant_objects(role, self.driver_asset.bucket, driver_key, read=True, list_prefix=driver_key)
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
            max_runtime=as_timedelta(prepare.max_runtime or PREPARE_MAX_RUNTIME),
            subnets=self.spec.subnets,
            security_group_ids=self.spec.security_group_ids,
            inter_container_encryption=self.spec.inter_container_encryption,
            data_version=self.spec.data_version,
            job_name_prefix=self.shard_job_name_prefix,
            tags=dict(tags or {}),
            drivers_s3_uri=self.driver_asset.s3_object_url,
            instance_preferences=tuple(prepare.instance_preferences),
        )
        problems = spec.problems()
        if problems:
            raise ValidationError(path_of(self), "prepare: " + "; ".join(problems))
        return spec

    def _encryption_key(self, given: kms.IKey | None, removal_policy: RemovalPolicy) -> kms.IKey:
        """``given`` or a new key (rotation on) for the state machine's log group and the notification topic; its
        policy admits CloudWatch Logs of this account. The publishers of the encrypted topic (CloudWatch alarms,
        EventBridge rules) are admitted on the key by :mod:`gpu_constructs.topics` where the topic is bound
        (``alarm_action``, ``rule_target``)."""
        key = given or new_key(
            self,
            "Key",
            description=f"Encrypts the training state machine logs and notifications of {self.job_name_prefix}",
            removal_policy=removal_policy,
        )
        allow_cloudwatch_logs(key, Stack.of(self), sid="AllowCloudWatchLogsForThisAccount")
        return key

    def _jobs(self) -> TrainingJobs:
        """The setup's jobs as the IAM helpers see them (prefixes and job roles, as far as they exist yet)."""
        return TrainingJobs(
            job_name_prefix=self.job_name_prefix,
            shard_job_name_prefix=self.shard_job_name_prefix,
            execution_role=self.role,
            prepare_role=self.prepare_role,
        )

    def _granted_prefixes(self) -> GrantedPrefixes:
        """What the setup's IAM5 wildcards may cover now (the raw-file prefix once the prepare step has set it)."""
        return GrantedPrefixes(
            job_name_prefix=self.job_name_prefix,
            shard_job_name_prefix=self.shard_job_name_prefix,
            dataset_prefix=self.dataset_prefix,
            code_prefix=self.code_prefix,
            readable_prefixes=tuple(r.prefix for r in self.readable_options),
            source_prefix=self.source_prefix,
        )

    def _state_machine(
        self,
        data_version: str,
        prepare: PrepareOptions | None,
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
    ) -> None:
        log_group_name = f"/aws/vendedlogs/states/{self.job_name_prefix}"
        self.log_group = named_log_group(
            self, "StateMachineLogs", log_group_name, self.encryption_key, log_retention, removal_policy
        )
        timeout_s = seconds_of(self.spec.effective_max_wait or self.spec.max_runtime) + 3600
        if self.sharding_spec is not None:
            timeout_s += seconds_of(self.sharding_spec.max_runtime)
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(
                definition(
                    self,
                    DefinitionInputs(
                        spec=self.spec,
                        job_name_prefix=self.job_name_prefix,
                        shard_job_name_prefix=self.shard_job_name_prefix,
                        allowed_instance_types=self.allowed_instance_types,
                        readable_inputs=self.readable_inputs,
                        data_version=data_version,
                        prepare=prepare,
                        sharding_spec=self.sharding_spec,
                    ),
                )
            ),
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True,
            timeout=Duration.seconds(timeout_s),
            comment=f"Train on SageMaker: jobs {self.job_name_prefix}-*",
        )
        grant_state_machine(self, self.state_machine.role, self._jobs())
        acknowledge_policy(
            self,
            self.state_machine.role.node.try_find_child("DefaultPolicy"),
            "Safe because this inline policy is created by CDK for exactly one role (this state machine's), is "
            "deleted with it and cannot be attached elsewhere; it allows only jobs with this setup's prefix",
            self._granted_prefixes(),
        )

    def _monitoring(self, ref: InstanceType, alarms: TrainingAlarms, emails: Sequence[str]) -> None:
        """The notification topic, failure rules, alarms (scaled to ``ref``, the instance type's catalog entry) and
        the dashboard."""
        alarms.validate(path_of(self))
        # Alarm actions and the rule targets admit CloudWatch and EventBridge on the topic and key.
        self.topic = notification_topic(
            self,
            "Notifications",
            display_name=f"GPU training {self.job_name_prefix}",
            master_key=self.encryption_key,
            emails=emails,
        )
        self.failure_rule, self.execution_failed_rule = add_failure_rules(
            self, self.job_name_prefix, self.state_machine, self.topic
        )
        self.input_bound_alarm, self.idle_gpu_alarm = add_alarms(self, ref, alarms, self.topic)
        self.dashboard = add_dashboard(
            self,
            self.job_name_prefix,
            metric_definitions=self.spec.metric_definitions,
            state_machine=self.state_machine,
            alarms=(self.input_bound_alarm, self.idle_gpu_alarm),
        )

    def _publish_spec(self, parameter_name: str | None) -> ssm.StringParameter:
        """The job spec for ``gpuctl``, as JSON in an SSM parameter (advanced tier when it may pass 4 KB)."""
        stack = Stack.of(self)
        spec_json = stack.to_json_string(self.spec.to_dict())
        estimate = len(json.dumps(self.spec.to_dict())) + 100 * spec_json.count("${Token[")
        return ssm.StringParameter(
            self,
            "JobSpec",
            parameter_name=parameter_name or f"/{self.job_name_prefix}/job-spec",
            string_value=spec_json,
            description=f"Training job spec of {self.job_name_prefix}, read by gpuctl train",
            tier=ssm.ParameterTier.STANDARD if estimate < 3800 else ssm.ParameterTier.ADVANCED,
        )


@dataclass(frozen=True)
class _Fallback:
    """The fallback props of :class:`TrainingPipeline`, as given."""

    preferences: Sequence[str | FallbackChoice | InstancePreference] | None
    training_plan_arn: str | None
    keep_world_size: bool
    max_cost_ratio: float | None


def _as_prefix(prefix: str) -> str:
    """``prefix`` ending in '/' (``s3_keys.as_key_prefix``); an unchecked '' (``prepare.source_prefix``) gives '/'."""
    return as_key_prefix(prefix) or "/"
