"""The typed training job: :class:`TrainingJobSpec`, its rules, and its two renderings (boto3, Step Functions)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import timedelta
from typing import Any

from gpu_constructs.catalog import (
    check_cuda_supports,
    default_dataloader_workers,
    default_processes_per_host,
    lookup,
    require_nvidia_gpu,
)
from gpu_constructs.errors import ValidationError, is_token
from gpu_constructs.training_spec.channels import (
    Channel,
    FsxChannel,
    S3Channel,
    channel_from_dict,
    channel_template,
)
from gpu_constructs.training_spec.code import LAUNCH_ENTRYPOINT, RESERVED_CHANNELS, TrainingCode
from gpu_constructs.training_spec.limits import (
    CHECKPOINT_LOCAL_PATH,
    DATA_VERSION_PLACEHOLDER,
    HP_NUM_WORKERS,
    HP_PROCESSES_PER_HOST,
    JOB_NAME_PREFIX_RE,
    LAUNCHER_ENVIRONMENT,
    MAX_CHANNELS,
    MAX_WAIT_LIMIT_S,
    VOLUME_SIZE_GB,
    WHERE,
)
from gpu_constructs.training_spec.preferences import (
    InstancePreference,
    as_preference,
    preference_problems,
    render_preferences,
)
from gpu_constructs.training_spec.rules import (
    as_timedelta,
    channel_name_problem,
    check_processes_per_host,
    data_version_problem,
    hp_string,
    job_name_problems,
    raise_problems,
    readable_problem,
    s3_problem,
    seconds_of,
    stopping_problems,
    valid_processes,
)
from gpu_constructs.training_spec.service_model import hyperparameter_limits
from gpu_constructs.training_spec.sfn import (
    DEFAULT_PATHS,
    Concat,
    Dynamic,
    SfnPaths,
    collect_samples,
    finalize_request,
    finalize_sfn,
    states_array,
)

__all__ = ["TrainingJobSpec"]

#: Field name -> key of the JSON form (``to_dict``), which gives durations in seconds (gpuctl reads it).
_WIRE = {"max_runtime": "max_runtime_s", "max_wait": "max_wait_s"}


@dataclass(frozen=True)
class TrainingJobSpec:
    """A SageMaker training job, typed and validated. Defaults are documented per field.

    :param image_uri: training image (``<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>``).
    :param role_arn: SageMaker execution role.
    :param instance_type: ``ml.*`` training type from the GPU catalog.
    :param output_s3_uri: where SageMaker writes ``<job>/output/model.tar.gz``.
    :param channels: input channels: the setup's dataset channels (at least one, unless the job runs ``code``,
        whose own channels carry the code). :meth:`with_inputs` gives a job the channels its user names.
    :param instance_count: hosts (default 1); more than one is multi-host training.
    :param volume_size_gb: EBS volume per host, GB (default 100; ignored by SageMaker on types with
        local NVMe, which it uses instead).
    :param volume_kms_key: KMS key of the volume (default: none — SageMaker's default encryption).
    :param output_kms_key: KMS key of the output artifacts (default: the bucket's default encryption).
    :param hyperparameters: every value a string (SageMaker's contract): the defaults of the spec's code. For
        the built-in trainer (no ``code``, or ``code.builtin``) the derived distribution defaults
        (:data:`HP_PROCESSES_PER_HOST`, :data:`HP_NUM_WORKERS`) are added unless set here; your own code
        (``code`` with ``builtin=False``) gets these and the job's overrides only, and other code run with this spec
        (:meth:`with_other_code`) only the overrides its user gives.
    :param environment: container environment variables (default: none). A job that runs ``code`` also gets the
        launcher's settings, the derived distribution of its instance type, as :data:`LAUNCHER_ENVIRONMENT`
        (``GPU_TRAIN_PROCESSES_PER_HOST``, ``GPU_TRAIN_NUM_WORKERS``; a value set here wins).
    :param metric_definitions: ``[{"Name", "Regex"}]`` SageMaker parses from the logs (default: none;
        the platform passes the training runtime's ``METRIC_DEFINITIONS``).
    :param max_runtime: a ``timedelta`` (or an ``aws_cdk.Duration``), whole seconds; rendered as
        MaxRuntimeInSeconds (default 1 day).
    :param spot: managed spot training (default False).
    :param max_wait: spot only, >= max_runtime; rendered as MaxWaitTimeInSeconds (default: 2 x max_runtime
        with spot, at most 28 days).
    :param checkpoint_s3_uri: checkpoint prefix; each job uses ``<prefix><job name>/`` (required with spot).
    :param subnets / security_group_ids: VPC of the job (default: none — SageMaker's network; FSx
        needs a VPC).
    :param inter_container_encryption: encrypt traffic between hosts (default True).
    :param network_isolation: no outbound network from the container (default False).
    :param processes_per_host: training processes per host (default: one per GPU, from the catalog).
    :param dataloader_workers: data-loader workers per process (default: from vCPUs per GPU).
    :param data_version: default version substituted for ``{data_version}`` (default ``v1``).
    :param cuda_version: the image's CUDA version, checked against the GPU architecture (default: unchecked).
    :param require_gpu: the workload needs an NVIDIA GPU (default True).
    :param production: apply the production rules, e.g. multi-host needs inter-container encryption
        (default False).
    :param max_retry_attempts: RetryStrategy (default: none; 1-30).
    :param job_name_prefix: names of jobs made from this spec start with it (default: none).
    :param tags: tags of the job (default: none).
    :param code: the code package, entry point and launcher options (:class:`TrainingCode`): the job gets the
        ``code`` and ``sm_drivers`` channels and its container entry is the platform's launcher, so it runs on
        any image with Python and the framework (the stock DLC included). Default: none, the image's own entry
        (``docker run IMAGE train``).
    :param readable_inputs: the ``s3://bucket/prefix`` prefixes the job role may read (default: none, unchecked);
        when given, every S3 channel lies under one of them, so an input the role cannot read is refused before a
        job exists.
    :param instance_preferences: the fallback list (:class:`~gpu_constructs.training_spec.preferences.
        InstancePreference`, 1-5 types in priority order, starting with ``instance_type``; default: none, the job
        runs on ``instance_type`` only). A job rendered without an explicit instance type asks SageMaker for the
        first type of the list with capacity (``ResourceConfig.InstancePreferences``); one rendered for an explicit
        type runs on that type only. Exclusive with ``spot``. The derived distribution is the one every type of the
        list shares, else the runtime's per-host defaults (``processes_per_host`` 0: one per GPU; ``num_workers``
        -1: from the host's vCPUs).
    :param training_plan_arn: a training plan whose reserved capacity the job uses (``ResourceConfig.
        TrainingPlanArn``; default: none). Exclusive with per-preference plans.
    """

    image_uri: str
    role_arn: str
    instance_type: str
    output_s3_uri: str
    channels: tuple[Channel, ...]
    instance_count: int = 1
    volume_size_gb: int = 100
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    hyperparameters: Mapping[str, str] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    metric_definitions: tuple[Mapping[str, str], ...] = ()
    max_runtime: timedelta = timedelta(days=1)
    spot: bool = False
    max_wait: timedelta | None = None
    checkpoint_s3_uri: str | None = None
    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    inter_container_encryption: bool = True
    network_isolation: bool = False
    processes_per_host: int | None = None
    dataloader_workers: int | None = None
    data_version: str = "v1"
    cuda_version: str | None = None
    require_gpu: bool = True
    production: bool = False
    max_retry_attempts: int | None = None
    job_name_prefix: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    code: TrainingCode | None = None
    readable_inputs: tuple[str, ...] = ()
    instance_preferences: tuple[InstancePreference, ...] = ()
    training_plan_arn: str | None = None

    def __post_init__(self) -> None:
        # One spelling, two duration types: an aws_cdk Duration is stored as the standard timedelta.
        object.__setattr__(self, "max_runtime", as_timedelta(self.max_runtime))
        object.__setattr__(self, "max_wait", as_timedelta(self.max_wait))
        # Type names, mappings (the JSON form) and the catalog's FallbackChoice are stored as InstancePreference.
        object.__setattr__(
            self, "instance_preferences", tuple(as_preference(p, WHERE) for p in self.instance_preferences)
        )

    # -- derived values -------------------------------------------------------------------------------

    def _stopping_s(self) -> tuple[Any, Any]:
        """(MaxRuntimeInSeconds, MaxWaitTimeInSeconds or ``None``) as rendered: with spot and no max_wait, twice the
        runtime, at most 28 days."""
        runtime, wait = seconds_of(self.max_runtime), seconds_of(self.max_wait)
        if self.spot and wait is None:
            wait = min(2 * runtime, MAX_WAIT_LIMIT_S) if isinstance(runtime, int) else runtime
        return runtime, wait

    @property
    def effective_max_wait(self) -> timedelta | None:
        """The MaxWait the job gets (``None`` without spot)."""
        wait = self._stopping_s()[1]
        return timedelta(seconds=wait) if isinstance(wait, int | float) else wait

    @property
    def is_multi_host(self) -> bool:
        return not is_token(self.instance_count) and self.instance_count > 1

    @property
    def uses_fsx(self) -> bool:
        return any(isinstance(c, FsxChannel) for c in self.channels)

    def distribution_for(self, instance_type: str) -> dict[str, str]:
        """The derived hyperparameters for ``instance_type``: processes per host and loader workers.

        Explicit ``processes_per_host`` / ``dataloader_workers`` win; otherwise one process per GPU and
        ``floor(vCPUs / processes) - reserve`` workers (see the catalog).
        """
        it = lookup(instance_type, where=WHERE, param="instance_type")
        procs = self.processes_per_host
        if procs is None:
            procs = valid_processes(it.sagemaker_name, self.hyperparameters.get(HP_PROCESSES_PER_HOST))
        if procs is None:
            procs = default_processes_per_host(it)
        workers = (
            self.dataloader_workers
            if self.dataloader_workers is not None
            else default_dataloader_workers(it, min(procs, it.vcpus), where=WHERE)
        )
        return {HP_PROCESSES_PER_HOST: str(procs), HP_NUM_WORKERS: str(workers)}

    @property
    def preference_types(self) -> tuple[str, ...]:
        """The types of the fallback list, in order (empty without one)."""
        return tuple(p.instance_type for p in self.instance_preferences)

    def preference_distribution(self) -> dict[str, str]:
        """The derived hyperparameters of a job on the fallback list, whose type SageMaker picks: the distribution
        every type of the list shares, per setting; where they differ, the runtime's own per-host default
        (``processes_per_host`` ``0``: one process per GPU; ``num_workers`` ``-1``: from the host's vCPUs per
        process), so the setting fits whichever type is selected."""
        names = self.preference_types or (self.instance_type,)
        each = [self.distribution_for(name) for name in names]
        fallback = {HP_PROCESSES_PER_HOST: "0", HP_NUM_WORKERS: "-1"}
        return {key: each[0][key] if all(d[key] == each[0][key] for d in each) else fallback[key] for key in fallback}

    def _derived(self, instance_type: str | None) -> dict[str, str]:
        """The derived distribution of a job on ``instance_type``, or (``None``) of the spec's default placement:
        the fallback list when there is one, else ``instance_type``."""
        if instance_type is not None:
            return self.distribution_for(instance_type)
        return (
            self.preference_distribution() if self.instance_preferences else self.distribution_for(self.instance_type)
        )

    @property
    def runs_builtin_trainer(self) -> bool:
        """The job runs the platform's built-in trainer (the image's own entry, or the default code package)."""
        return self.code is None or self.code.builtin

    def hyperparameters_for(
        self, instance_type: str | None = None, overrides: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The job's hyperparameters (strings): for the built-in trainer the derived distribution defaults, then
        the base hyperparameters, then ``overrides``; for your own code the base hyperparameters (its own) and
        ``overrides`` only: the launcher reads its settings from :meth:`environment_for`."""
        merged = dict(self._derived(instance_type)) if self.runs_builtin_trainer else {}
        merged.update(self.hyperparameters)
        for key, value in (overrides or {}).items():
            merged[str(key)] = hp_string(value)
        return merged

    def launcher_environment(self, instance_type: str | None = None) -> dict[str, str]:
        """The launcher's settings for ``instance_type`` as :data:`LAUNCHER_ENVIRONMENT` variables (none when the
        job runs the image's own entry)."""
        if self.code is None:
            return {}
        derived = self._derived(instance_type)
        return {variable: derived[name] for name, variable in LAUNCHER_ENVIRONMENT.items()}

    def environment_for(self, instance_type: str | None = None) -> dict[str, str]:
        """The job's ``Environment``: the launcher's settings, then ``environment`` (which wins)."""
        return {**self.launcher_environment(instance_type), **dict(self.environment)}

    def with_other_code(self, code: TrainingCode) -> TrainingJobSpec:
        """This spec running ``code``, not its own (``gpuctl train --source-dir``): the base hyperparameters are
        the defaults of the spec's own code and stay behind, so the job gets only the hyperparameters its user
        gives; the processes per host the setup chose (typed, or its ``processes_per_host`` hyperparameter) stay."""
        procs = self.processes_per_host
        given = self.hyperparameters.get(HP_PROCESSES_PER_HOST)
        if procs is None and isinstance(given, str) and given.strip().isdigit() and int(given) > 0:
            procs = int(given)
        return replace(self, code=code, hyperparameters={}, processes_per_host=procs)

    def with_inputs(self, inputs: Sequence[S3Channel] = (), *, dataset: bool = True) -> TrainingJobSpec:
        """This spec with the input channels a user names (``gpuctl train --input``, an execution's ``inputs``)
        after the setup's dataset channels (:attr:`channels`), or instead of them (``dataset=False``: what a job
        that runs code given at run time gets by default, exactly the channels its user names)."""
        return replace(self, channels=(*(self.channels if dataset else ()), *inputs))

    # -- validation -----------------------------------------------------------------------------------

    def problems(self, *, instance_type: str | None = None, data_version: str | None = None) -> list[str]:
        """Every violation of the project's rules (empty when the spec is valid)."""
        it_name = instance_type or self.instance_type
        checks = (
            self._check_instance(it_name),
            self._check_counts(),
            self._check_channels(),
            self._check_uris(),
            self._check_runtime_and_spot(),
            self._check_vpc(),
            self._check_multi_host(),
            self._check_strings(),
            self._check_data_version(data_version or self.data_version),
            self._check_code(),
            self._check_preferences(),
        )
        return [problem for check in checks for problem in check]

    def validate(self, where: str = WHERE, **kwargs: Any) -> TrainingJobSpec:
        """Raise :class:`ValidationError` listing every problem; return ``self`` when there is none."""
        raise_problems(where, self.problems(**kwargs))
        return self

    def _check_instance(self, instance_type: str) -> list[str]:
        if is_token(instance_type):
            return []
        try:
            if self.require_gpu:
                require_nvidia_gpu(instance_type, where=WHERE, usage="training")
            else:
                it = lookup(instance_type, where=WHERE)
                if not it.valid_for("training") or not instance_type.startswith("ml."):
                    return [f"instance_type={instance_type!r} is not a SageMaker training type"]
            check_processes_per_host(instance_type, self.processes_per_host)
            check_processes_per_host(
                instance_type,
                self.hyperparameters.get(HP_PROCESSES_PER_HOST),
                param=f"hyperparameters[{HP_PROCESSES_PER_HOST!r}]",
            )
            if self.cuda_version:
                check_cuda_supports(instance_type, self.cuda_version, where=WHERE)
            self.distribution_for(instance_type)
            it = lookup(instance_type, where=WHERE)
        except ValidationError as exc:
            return [exc.detail]
        if self.volume_kms_key and it.has_local_nvme:
            return [
                f"volume_kms_key is set, but {instance_type!r} has local NVMe storage ({it.local_nvme_gb} GB) that "
                "SageMaker uses instead of an EBS volume and encrypts with a hardware module; CreateTrainingJob "
                "rejects a VolumeKmsKeyId there. Allowed: no volume_kms_key on NVMe types, or an EBS-only type"
            ]
        return []

    def _check_preferences(self) -> list[str]:
        """The fallback list: SageMaker's rules for it (:func:`~gpu_constructs.training_spec.preferences.
        preference_problems`), and every type of it a valid type for this job (GPU, CUDA, processes per host)."""
        names = [n for n in self.preference_types if not is_token(n)]
        if not names:
            return []
        out: list[str] = []
        nvme: dict[str, bool] = {}
        for name in dict.fromkeys(names):
            if name == self.instance_type:
                continue
            out.extend(f"instance_preferences: {p}" for p in self._check_instance(name))
        for name in dict.fromkeys(names):
            try:
                nvme[name] = lookup(name, where=WHERE).has_local_nvme
            except ValidationError:
                continue
        return out + preference_problems(
            self.instance_preferences,
            instance_type=self.instance_type,
            instance_count=self.instance_count,
            spot=self.spot,
            training_plan_arn=self.training_plan_arn,
            local_nvme=nvme,
        )

    def _check_counts(self) -> list[str]:
        out = []
        given = self.hyperparameters.get(HP_PROCESSES_PER_HOST)
        if self.processes_per_host is not None and given is not None and given != str(self.processes_per_host):
            out.append(
                f"processes_per_host={self.processes_per_host!r} and hyperparameters[{HP_PROCESSES_PER_HOST!r}]="
                f"{given!r} disagree; allowed: one of them, or the same value in both"
            )
        if not is_token(self.instance_count) and (
            isinstance(self.instance_count, bool) or not isinstance(self.instance_count, int) or self.instance_count < 1
        ):
            out.append(f"instance_count={self.instance_count!r} is not allowed; allowed: an integer >= 1")
        if not is_token(self.volume_size_gb) and not (
            isinstance(self.volume_size_gb, int) and VOLUME_SIZE_GB[0] <= self.volume_size_gb <= VOLUME_SIZE_GB[1]
        ):
            out.append(f"volume_size_gb={self.volume_size_gb!r} is not allowed; allowed: 1..16384")
        if self.dataloader_workers is not None and (
            not isinstance(self.dataloader_workers, int) or self.dataloader_workers < 0
        ):
            out.append(f"dataloader_workers={self.dataloader_workers!r} is not allowed; allowed: an integer >= 0")
        if self.max_retry_attempts is not None and not 1 <= self.max_retry_attempts <= 30:
            out.append(f"max_retry_attempts={self.max_retry_attempts!r} is not allowed; allowed: 1..30")
        return out

    def _check_channels(self) -> list[str]:
        out: list[str] = []
        if not self.channels and self.code is None:
            out.append("channels=() is not allowed; allowed: at least one input channel (or code, which has its own)")
        names = [c.name for c in self.channels]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            out.append(f"channel names {dupes} are repeated; allowed: each name once")
        for channel in self.channels:
            problem = channel_name_problem(channel.name)
            if problem:
                out.append(problem)
            out.extend(channel.problems())
            if isinstance(channel, S3Channel):
                problem = readable_problem(f"channel {channel.name!r}: s3_uri", channel.s3_uri, self.readable_inputs)
                if problem:
                    out.append(problem)
        count = len(self.channels) + (2 if self.code is not None else 0)
        if count > MAX_CHANNELS:
            out.append(
                f"{count} input channels (the code's 2 included); allowed: at most {MAX_CHANNELS} (CreateTrainingJob)"
            )
        return out

    def _check_uris(self) -> list[str]:
        out = []
        for name, uri in (("output_s3_uri", self.output_s3_uri), ("checkpoint_s3_uri", self.checkpoint_s3_uri)):
            if uri is not None:
                problem = s3_problem(name, uri)
                if problem:
                    out.append(problem)
        return out

    def _check_runtime_and_spot(self) -> list[str]:
        out = stopping_problems(*self._stopping_s(), self.spot)
        if self.spot and not self.checkpoint_s3_uri:
            out.append(
                "spot=True requires checkpoint_s3_uri: an interrupted spot job resumes from its checkpoints; "
                "allowed: an s3:// prefix such as s3://<artifacts bucket>/checkpoints/"
            )
        return out

    def _check_vpc(self) -> list[str]:
        out = []
        if bool(self.subnets) != bool(self.security_group_ids):
            out.append(
                f"subnets={list(self.subnets)} and security_group_ids={list(self.security_group_ids)}: "
                "allowed: both set (a VPC job) or both empty"
            )
        if self.uses_fsx and not (self.subnets and self.security_group_ids):
            fsx = [c.name for c in self.channels if isinstance(c, FsxChannel)]
            out.append(
                f"FSx channel(s) {fsx} require a VPC: SageMaker mounts FSx for Lustre over the VPC; "
                "allowed: set subnets and security_group_ids (the file system's VPC and a group it admits)"
            )
        return out

    def _check_multi_host(self) -> list[str]:
        if self.production and self.is_multi_host and not self.inter_container_encryption:
            return [
                f"instance_count={self.instance_count} with inter_container_encryption=False is not allowed in "
                "production; allowed: inter_container_encryption=True (traffic between hosts is encrypted)"
            ]
        return []

    def _check_strings(self) -> list[str]:
        out = []
        for key, value in self.hyperparameters.items():
            if not isinstance(value, str):
                out.append(
                    f"hyperparameters[{key!r}]={value!r} is not allowed; allowed: a string (SageMaker's contract)"
                )
        for key, value in self.environment.items():
            if not isinstance(value, str):
                out.append(f"environment[{key!r}]={value!r} is not allowed; allowed: a string")
        prefix = self.job_name_prefix
        if prefix is not None and not is_token(prefix) and not JOB_NAME_PREFIX_RE.match(prefix):
            out.append(
                f"job_name_prefix={prefix!r} is not allowed; allowed: up to 41 letters, digits and hyphens "
                "(22 characters are left for the rest of the job name)"
            )
        return out

    def _check_code(self) -> list[str]:
        if self.code is None:
            return []
        out = list(self.code.problems())
        taken = sorted({c.name for c in self.channels} & set(RESERVED_CHANNELS))
        if taken:
            out.append(f"channel names {taken} are the launcher's (code package and driver); allowed: other names")
        return out

    def _check_data_version(self, version: str) -> list[str]:
        if not any(DATA_VERSION_PLACEHOLDER in channel_template(c) for c in self.channels):
            return []
        problem = data_version_problem(version)
        return [problem] if problem else []

    # -- rendering ------------------------------------------------------------------------------------

    def _render(
        self,
        *,
        job_name: str | Dynamic,
        instance_type: str | Dynamic,
        hyperparameters: Mapping[str, str] | Dynamic,
        environment: Mapping[str, str | Dynamic],
        data_version: str | Dynamic,
        code_s3_uri: str | Dynamic | None = None,
        entry_point: str | Dynamic | None = None,
        preferences: bool = False,
    ) -> dict[str, Any]:
        input_modes = {c.input_mode for c in self.channels}
        runtime_s, wait_s = self._stopping_s()
        request: dict[str, Any] = {
            "TrainingJobName": job_name,
            "RoleArn": self.role_arn,
            "AlgorithmSpecification": {
                "TrainingImage": self.image_uri,
                # The job-level default; every channel sets its own InputMode explicitly.
                "TrainingInputMode": input_modes.pop() if len(input_modes) == 1 else "File",
                **(
                    {"MetricDefinitions": [dict(m) for m in self.metric_definitions]} if self.metric_definitions else {}
                ),
            },
            "HyperParameters": hyperparameters if isinstance(hyperparameters, Dynamic) else dict(hyperparameters),
            "InputDataConfig": [
                *(c.render(data_version) for c in self.channels),
                *(self.code.channels(code_s3_uri) if self.code is not None else ()),
            ],
            "OutputDataConfig": {
                "S3OutputPath": self.output_s3_uri,
                **({"KmsKeyId": self.output_kms_key} if self.output_kms_key else {}),
            },
            "ResourceConfig": {
                **(
                    render_preferences(self.instance_preferences, self.instance_count, self.training_plan_arn)
                    if preferences
                    else {
                        "InstanceType": instance_type,
                        "InstanceCount": self.instance_count,
                        **({"TrainingPlanArn": self.training_plan_arn} if self.training_plan_arn else {}),
                    }
                ),
                "VolumeSizeInGB": self.volume_size_gb,
                **({"VolumeKmsKeyId": self.volume_kms_key} if self.volume_kms_key else {}),
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": runtime_s},
            "EnableNetworkIsolation": self.network_isolation,
            "EnableInterContainerTrafficEncryption": self.inter_container_encryption,
        }
        if not preferences:
            # Exclusive with InstancePreferences, which only run on on-demand capacity and training plans.
            request["EnableManagedSpotTraining"] = self.spot
        if self.code is not None:
            arguments = self.code.arguments(entry_point)
            request["AlgorithmSpecification"]["ContainerEntrypoint"] = list(LAUNCH_ENTRYPOINT)
            request["AlgorithmSpecification"]["ContainerArguments"] = (
                states_array(arguments) if isinstance(entry_point, Dynamic) else arguments
            )
        if wait_s is not None:
            request["StoppingCondition"]["MaxWaitTimeInSeconds"] = wait_s
        if self.checkpoint_s3_uri:
            prefix = self.checkpoint_s3_uri if self.checkpoint_s3_uri.endswith("/") else self.checkpoint_s3_uri + "/"
            request["CheckpointConfig"] = {
                "S3Uri": Concat((prefix, job_name, "/")) if isinstance(job_name, Dynamic) else f"{prefix}{job_name}/",
                "LocalPath": CHECKPOINT_LOCAL_PATH,
            }
        if self.subnets:
            request["VpcConfig"] = {"Subnets": list(self.subnets), "SecurityGroupIds": list(self.security_group_ids)}
        if environment:
            request["Environment"] = dict(environment)
        if self.max_retry_attempts is not None:
            request["RetryStrategy"] = {"MaximumRetryAttempts": self.max_retry_attempts}
        if self.tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())]
        return request

    def to_request(
        self,
        job_name: str,
        *,
        hyperparameter_overrides: Mapping[str, Any] | None = None,
        instance_type: str | None = None,
        data_version: str | None = None,
        where: str = WHERE,
    ) -> dict[str, Any]:
        """The boto3 ``CreateTrainingJob`` request, validated (raises :class:`ValidationError`).

        With a fallback list and no ``instance_type``, the job asks for the list (``InstancePreferences``); an
        explicit ``instance_type`` runs on that type only, with the job's ``instance_count``."""
        it = instance_type or self.instance_type
        on_list = instance_type is None and bool(self.instance_preferences)
        chosen = None if on_list else it
        version = data_version or self.data_version
        problems = [
            *self.problems(instance_type=it, data_version=version),
            *job_name_problems(job_name, where=where, param="job_name", prefix=self.job_name_prefix),
            *self.override_problems(it, hyperparameter_overrides),
            *(
                p
                for name in self.preference_types[1:]
                if on_list
                for p in self.override_problems(name, hyperparameter_overrides)
            ),
        ]
        return finalize_request(
            problems,
            lambda: self._render(
                job_name=job_name,
                instance_type=it,
                hyperparameters=self.hyperparameters_for(chosen, hyperparameter_overrides),
                environment=self.environment_for(chosen),
                data_version=version,
                preferences=on_list,
            ),
            "CreateTrainingJob",
            where,
        )

    def override_problems(self, instance_type: str, overrides: Mapping[str, Any] | None) -> list[str]:
        """Problems of hyperparameter overrides (``gpuctl train -p``) on ``instance_type``: the same
        processes-per-host rule as the spec's own hyperparameters, and SageMaker's limits on keys and values."""
        out: list[str] = []
        if not overrides or is_token(instance_type):
            return out
        count, key_max, value_max = hyperparameter_limits()
        for key, value in overrides.items():
            text = hp_string(value)
            if len(str(key)) > key_max or len(text) > value_max:
                out.append(
                    f"hyperparameter {str(key)[:40]!r}: {len(str(key))}-character name, {len(text)}-character value; "
                    f"allowed: names up to {key_max} and values up to {value_max} characters (CreateTrainingJob)"
                )
            if key == HP_PROCESSES_PER_HOST:
                try:
                    check_processes_per_host(instance_type, text, param=f"hyperparameter {HP_PROCESSES_PER_HOST}")
                except ValidationError as exc:
                    out.append(exc.detail)
        merged = self.hyperparameters_for(instance_type, overrides) if not out else {}
        if len(merged) > count:
            out.append(f"{len(merged)} hyperparameters; allowed: at most {count} (CreateTrainingJob)")
        return out

    def sample_job_name(self) -> str:
        return f"{self.job_name_prefix or 'train'}-20250101-000000"

    def sfn_tree(self, paths: SfnPaths = DEFAULT_PATHS, *, preferences: bool = False) -> dict[str, Any]:
        """The request with :class:`Dynamic` runtime values (before finalization); ``preferences``: on the fallback
        list (``InstancePreferences``) instead of the execution's instance type."""
        chosen = None if preferences else self.instance_type
        environment: dict[str, str | Dynamic] = dict(self.environment_for(chosen))
        if paths.distribution is not None:
            derived = self._derived(chosen)
            for name, variable in LAUNCHER_ENVIRONMENT.items():
                if variable in environment and variable not in self.environment:
                    environment[variable] = Dynamic(f"{paths.distribution}.{name}", derived[name])
        tree = self._render(
            job_name=Dynamic(paths.job_name, self.sample_job_name()),
            instance_type=Dynamic(paths.instance_type, self.instance_type),
            hyperparameters=Dynamic(paths.hyperparameters, self.hyperparameters_for(chosen)),
            environment=environment,
            data_version=Dynamic(paths.data_version, self.data_version),
            code_s3_uri=Dynamic(paths.code, self.code.source_s3_uri) if self.code is not None else None,
            entry_point=Dynamic(paths.entry_point, self.code.entry_point) if self.code is not None else None,
            preferences=preferences,
        )
        if paths.input_data_config is not None:
            sample = self._render(
                job_name=self.sample_job_name(),
                instance_type=self.instance_type,
                hyperparameters={},
                environment={},
                data_version=self.data_version,
            )["InputDataConfig"]
            tree["InputDataConfig"] = Dynamic(paths.input_data_config, sample)
        return tree

    def to_sfn_parameters(
        self, paths: SfnPaths = DEFAULT_PATHS, *, where: str = WHERE, preferences: bool = False
    ) -> dict[str, Any]:
        """``Parameters`` of a ``sagemaker:createTrainingJob.sync`` (or ``aws-sdk:sagemaker:createTrainingJob``)
        task, validated with sample values; ``preferences``: the job asks for the fallback list."""
        raise_problems(where, self.problems())
        return finalize_sfn(self.sfn_tree(paths, preferences=preferences), "CreateTrainingJob", where)

    def sfn_samples(self, paths: SfnPaths = DEFAULT_PATHS) -> dict[str, Any]:
        """``{path or intrinsic: sample value}`` of every runtime value of :meth:`to_sfn_parameters`."""
        return collect_samples(self.sfn_tree(paths), {})

    # -- serialization --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what the training stack publishes for ``gpuctl``): durations in whole seconds, under
        ``max_runtime_s`` / ``max_wait_s``."""
        data = {_WIRE.get(key, key): value for key, value in asdict(self).items()}
        for key in _WIRE.values():
            data[key] = seconds_of(data[key])
        data["channels"] = [asdict(c) for c in self.channels]
        data["metric_definitions"] = [dict(m) for m in self.metric_definitions]
        for key in ("subnets", "security_group_ids", "readable_inputs"):
            data[key] = list(data[key])
        data["code"] = self.code.to_dict() if self.code is not None else None
        data["instance_preferences"] = [p.to_dict() for p in self.instance_preferences]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingJobSpec:
        known = {_WIRE.get(f.name, f.name) for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValidationError(WHERE, f"unknown keys {unknown}; allowed: {', '.join(sorted(known))}")
        values = {key: value for key, value in data.items() if key not in _WIRE.values()}
        for name, key in _WIRE.items():
            if data.get(key) is not None:
                values[name] = timedelta(seconds=data[key])
        values["channels"] = tuple(channel_from_dict(c) for c in values.get("channels", ()))
        values["metric_definitions"] = tuple(dict(m) for m in values.get("metric_definitions", ()))
        for key in ("subnets", "security_group_ids", "readable_inputs", "instance_preferences"):
            values[key] = tuple(values.get(key, ()))
        if values.get("code") is not None:
            values["code"] = _code_from_dict(values["code"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> TrainingJobSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(WHERE, f"the job spec is not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValidationError(WHERE, "the job spec must be a JSON object")
        return cls.from_dict(data)

    def with_changes(self, **changes: Any) -> TrainingJobSpec:
        return replace(self, **changes)


def _code_from_dict(data: Any) -> TrainingCode:
    known = {f.name for f in fields(TrainingCode)}
    if not isinstance(data, Mapping) or set(data) - known:
        unknown = sorted(set(data) - known) if isinstance(data, Mapping) else data
        raise ValidationError(WHERE, f"code: unknown keys {unknown}; allowed: {', '.join(sorted(known))}")
    return TrainingCode.from_dict(data)
