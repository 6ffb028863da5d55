"""One typed SageMaker training job spec, rendered two ways from the same code.

:class:`TrainingJobSpec` holds everything a training job needs: image, role, instance type and count,
volume size and KMS key, input channels (S3 in File / FastFile / Pipe mode, FullyReplicated or
ShardedByS3Key, or FSx for Lustre), output path and key, hyperparameters, environment, metric
definitions, max runtime, managed spot with max wait and checkpoints, VPC, inter-container traffic
encryption, network isolation and distribution (processes per host, data-loader workers, hosts).

It renders one request tree, finalized two ways:

* :meth:`TrainingJobSpec.to_request` — the ``CreateTrainingJob`` request for boto3 (``gpuctl train``);
* :meth:`TrainingJobSpec.to_sfn_parameters` — the ``Parameters`` of a Step Functions task on
  ``arn:aws:states:::sagemaker:createTrainingJob.sync``, where the runtime values (job name,
  hyperparameters after overrides, instance type, data version) are JSONPath references to the
  execution state (``"TrainingJobName.$": "$.args.job_name"``).

Both are validated before they leave this package: against botocore's SageMaker service model
(:func:`service_model_problems`: required members, types and ranges via botocore's ``ParamValidator``,
plus enums, maximum lengths and patterns, which ``ParamValidator`` does not check) and against the
project's stricter rules (:meth:`TrainingJobSpec.problems`): MaxWait >= MaxRuntime, spot needs
checkpoints, ``s3://`` URIs, the job-name pattern and length, FSx needs a VPC, multi-host needs
inter-container traffic encryption in production, and the GPU catalog's guards. The Step Functions
rendering is validated after substituting sample values for every ``.$`` reference.

:class:`ShardingJobSpec` does the same for the optional data-preparation step: a SageMaker processing
job that runs ``gpuctl shard`` in the training image (``CreateProcessingJob``).

This package imports no ``aws_cdk``: the CLI uses it as is. Values that are unresolved CDK tokens
(``${Token[...]}``) are not validated; they are checked again by ``gpuctl`` with the deployed values.

One concept per module: :mod:`.limits` (SageMaker's limits and patterns), :mod:`.rules` (the project's rules,
each written once), :mod:`.channels`, :mod:`.job` (:class:`TrainingJobSpec`), :mod:`.sharding`
(:class:`ShardingJobSpec`), :mod:`.sfn` (the Step Functions rendering) and :mod:`.service_model` (botocore).
"""

from __future__ import annotations

from gpu_constructs.training_spec.channels import Channel, FsxChannel, S3Channel, channel_from_dict, input_channel
from gpu_constructs.training_spec.code import (
    CODE_CHANNEL,
    DEFAULT_ENTRY_POINT,
    DRIVERS_CHANNEL,
    LAUNCH_DISTRIBUTIONS,
    LAUNCH_ENTRYPOINT,
    TrainingCode,
    entry_point_problem,
)
from gpu_constructs.training_spec.job import TrainingJobSpec
from gpu_constructs.training_spec.limits import (
    CHANNEL_NAME_MAX,
    CHANNEL_NAME_PATTERN,
    CHECKPOINT_LOCAL_PATH,
    COMPRESSIONS,
    DATA_VERSION_PATTERN,
    DATA_VERSION_PLACEHOLDER,
    DISTRIBUTIONS,
    FSX_ACCESS_MODES,
    HP_NUM_WORKERS,
    HP_PROCESSES_PER_HOST,
    INPUT_MODES,
    JOB_NAME_MAX,
    JOB_NAME_PATTERN,
    LAUNCHER_ENVIRONMENT,
    MAX_CHANNELS,
    MAX_RETRY_ATTEMPTS,
    MAX_RUNTIME_LIMIT_S,
    MAX_WAIT_LIMIT_S,
    PROCESSES_PER_HOST_PATTERN,
    PROCESSING_MAX_RUNTIME_S,
    USER_INPUT_MODE,
    VOLUME_SIZE_GB,
)
from gpu_constructs.training_spec.rules import (
    PROCESSING_TYPES_ALLOWED,
    RUNTIME_RANGE,
    WAIT_BELOW_RUNTIME,
    WAIT_RANGE,
    WAIT_WITHOUT_SPOT,
    alarm_threshold_problems,
    channel_name_problem,
    check_processes_per_host,
    processing_type_allowed,
    readable_problem,
    runtime_limit_text,
    seconds_of,
    stopping_problems,
    stopping_violations,
    validate_job_name,
)
from gpu_constructs.training_spec.service_model import hyperparameter_limits, service_model_problems
from gpu_constructs.training_spec.sfn import (
    Dynamic,
    SfnPaths,
    iter_dynamic_paths,
    states_format,
    substitute_sfn_samples,
)
from gpu_constructs.training_spec.sharding import (
    PROCESSING_INPUT_ROOT,
    PROCESSING_OUTPUT_ROOT,
    ShardingJobSpec,
    ShardSplit,
)

__all__ = [
    "CHANNEL_NAME_MAX",
    "CHANNEL_NAME_PATTERN",
    "CHECKPOINT_LOCAL_PATH",
    "CODE_CHANNEL",
    "COMPRESSIONS",
    "DATA_VERSION_PATTERN",
    "DATA_VERSION_PLACEHOLDER",
    "DEFAULT_ENTRY_POINT",
    "DISTRIBUTIONS",
    "DRIVERS_CHANNEL",
    "FSX_ACCESS_MODES",
    "HP_NUM_WORKERS",
    "HP_PROCESSES_PER_HOST",
    "INPUT_MODES",
    "JOB_NAME_MAX",
    "JOB_NAME_PATTERN",
    "LAUNCHER_ENVIRONMENT",
    "LAUNCH_DISTRIBUTIONS",
    "LAUNCH_ENTRYPOINT",
    "MAX_CHANNELS",
    "MAX_RETRY_ATTEMPTS",
    "MAX_RUNTIME_LIMIT_S",
    "MAX_WAIT_LIMIT_S",
    "PROCESSES_PER_HOST_PATTERN",
    "PROCESSING_INPUT_ROOT",
    "PROCESSING_MAX_RUNTIME_S",
    "PROCESSING_OUTPUT_ROOT",
    "PROCESSING_TYPES_ALLOWED",
    "RUNTIME_RANGE",
    "USER_INPUT_MODE",
    "VOLUME_SIZE_GB",
    "WAIT_BELOW_RUNTIME",
    "WAIT_RANGE",
    "WAIT_WITHOUT_SPOT",
    "Channel",
    "Dynamic",
    "FsxChannel",
    "S3Channel",
    "SfnPaths",
    "ShardSplit",
    "ShardingJobSpec",
    "TrainingCode",
    "TrainingJobSpec",
    "alarm_threshold_problems",
    "channel_from_dict",
    "channel_name_problem",
    "check_processes_per_host",
    "entry_point_problem",
    "hyperparameter_limits",
    "input_channel",
    "iter_dynamic_paths",
    "processing_type_allowed",
    "readable_problem",
    "runtime_limit_text",
    "seconds_of",
    "service_model_problems",
    "states_format",
    "stopping_problems",
    "stopping_violations",
    "substitute_sfn_samples",
    "validate_job_name",
]
