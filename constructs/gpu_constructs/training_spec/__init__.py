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
(:class:`ShardingJobSpec`), :mod:`.preferences` (fallback lists: ``InstancePreferences`` and training plans),
:mod:`.sfn` (the Step Functions rendering) and :mod:`.service_model` (botocore).
Names are re-exported lazily (PEP 562, :mod:`gpu_constructs.lazy`), like every package of the library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_constructs.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Channel": "gpu_constructs.training_spec.channels",
    "FsxChannel": "gpu_constructs.training_spec.channels",
    "S3Channel": "gpu_constructs.training_spec.channels",
    "channel_from_dict": "gpu_constructs.training_spec.channels",
    "input_channel": "gpu_constructs.training_spec.channels",
    "CODE_CHANNEL": "gpu_constructs.training_spec.code",
    "DEFAULT_ENTRY_POINT": "gpu_constructs.training_spec.code",
    "DRIVERS_CHANNEL": "gpu_constructs.training_spec.code",
    "LAUNCH_DISTRIBUTIONS": "gpu_constructs.training_spec.code",
    "LAUNCH_ENTRYPOINT": "gpu_constructs.training_spec.code",
    "TrainingCode": "gpu_constructs.training_spec.code",
    "entry_point_problem": "gpu_constructs.training_spec.code",
    "TrainingJobSpec": "gpu_constructs.training_spec.job",
    "CHANNEL_NAME_MAX": "gpu_constructs.training_spec.limits",
    "CHANNEL_NAME_PATTERN": "gpu_constructs.training_spec.limits",
    "CHECKPOINT_LOCAL_PATH": "gpu_constructs.training_spec.limits",
    "COMPRESSIONS": "gpu_constructs.training_spec.limits",
    "DATA_VERSION_PATTERN": "gpu_constructs.training_spec.limits",
    "DATA_VERSION_PLACEHOLDER": "gpu_constructs.training_spec.limits",
    "DISTRIBUTIONS": "gpu_constructs.training_spec.limits",
    "FSX_ACCESS_MODES": "gpu_constructs.training_spec.limits",
    "HP_NUM_WORKERS": "gpu_constructs.training_spec.limits",
    "HP_PROCESSES_PER_HOST": "gpu_constructs.training_spec.limits",
    "INPUT_MODES": "gpu_constructs.training_spec.limits",
    "JOB_NAME_MAX": "gpu_constructs.training_spec.limits",
    "JOB_NAME_PATTERN": "gpu_constructs.training_spec.limits",
    "LAUNCHER_ENVIRONMENT": "gpu_constructs.training_spec.limits",
    "MAX_CHANNELS": "gpu_constructs.training_spec.limits",
    "MAX_RETRY_ATTEMPTS": "gpu_constructs.training_spec.limits",
    "MAX_RUNTIME_LIMIT_S": "gpu_constructs.training_spec.limits",
    "MAX_WAIT_LIMIT_S": "gpu_constructs.training_spec.limits",
    "PROCESSES_PER_HOST_PATTERN": "gpu_constructs.training_spec.limits",
    "PROCESSING_MAX_RUNTIME_S": "gpu_constructs.training_spec.limits",
    "USER_INPUT_MODE": "gpu_constructs.training_spec.limits",
    "VOLUME_SIZE_GB": "gpu_constructs.training_spec.limits",
    "PROCESSING_TYPES_ALLOWED": "gpu_constructs.training_spec.rules",
    "RUNTIME_RANGE": "gpu_constructs.training_spec.rules",
    "WAIT_BELOW_RUNTIME": "gpu_constructs.training_spec.rules",
    "WAIT_RANGE": "gpu_constructs.training_spec.rules",
    "WAIT_WITHOUT_SPOT": "gpu_constructs.training_spec.rules",
    "alarm_threshold_problems": "gpu_constructs.training_spec.rules",
    "channel_name_problem": "gpu_constructs.training_spec.rules",
    "check_processes_per_host": "gpu_constructs.training_spec.rules",
    "processing_type_allowed": "gpu_constructs.training_spec.rules",
    "readable_problem": "gpu_constructs.training_spec.rules",
    "runtime_limit_text": "gpu_constructs.training_spec.rules",
    "seconds_of": "gpu_constructs.training_spec.rules",
    "stopping_problems": "gpu_constructs.training_spec.rules",
    "stopping_violations": "gpu_constructs.training_spec.rules",
    "validate_job_name": "gpu_constructs.training_spec.rules",
    "hyperparameter_limits": "gpu_constructs.training_spec.service_model",
    "service_model_problems": "gpu_constructs.training_spec.service_model",
    "MAX_PREFERENCES": "gpu_constructs.training_spec.preferences",
    "InstancePreference": "gpu_constructs.training_spec.preferences",
    "Dynamic": "gpu_constructs.training_spec.sfn",
    "SfnPaths": "gpu_constructs.training_spec.sfn",
    "iter_dynamic_paths": "gpu_constructs.training_spec.sfn",
    "states_format": "gpu_constructs.training_spec.sfn",
    "substitute_sfn_samples": "gpu_constructs.training_spec.sfn",
    "PROCESSING_INPUT_ROOT": "gpu_constructs.training_spec.sharding",
    "PROCESSING_OUTPUT_ROOT": "gpu_constructs.training_spec.sharding",
    "ShardingJobSpec": "gpu_constructs.training_spec.sharding",
    "ShardSplit": "gpu_constructs.training_spec.sharding",
}

#: The documented API: the two specs and the value types of their fields, the checks that the config model, the
#: CLI and the stacks apply with the same rules, and the limits they quote. The other names of ``_EXPORTS``
#: (SageMaker patterns, Step Functions helpers, single rules) are importable, not advertised.
__all__ = [
    "CODE_CHANNEL",
    "DATA_VERSION_PATTERN",
    "DATA_VERSION_PLACEHOLDER",
    "DRIVERS_CHANNEL",
    "HP_PROCESSES_PER_HOST",
    "MAX_RETRY_ATTEMPTS",
    "MAX_RUNTIME_LIMIT_S",
    "MAX_WAIT_LIMIT_S",
    "PROCESSING_MAX_RUNTIME_S",
    "PROCESSING_TYPES_ALLOWED",
    "VOLUME_SIZE_GB",
    "WAIT_BELOW_RUNTIME",
    "WAIT_WITHOUT_SPOT",
    "Channel",
    "FsxChannel",
    "InstancePreference",
    "S3Channel",
    "ShardSplit",
    "ShardingJobSpec",
    "TrainingCode",
    "TrainingJobSpec",
    "alarm_threshold_problems",
    "check_processes_per_host",
    "entry_point_problem",
    "input_channel",
    "processing_type_allowed",
    "runtime_limit_text",
    "service_model_problems",
    "stopping_violations",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # explicit re-exports (``X as X``) for type checkers
    from gpu_constructs.training_spec.channels import Channel as Channel
    from gpu_constructs.training_spec.channels import FsxChannel as FsxChannel
    from gpu_constructs.training_spec.channels import S3Channel as S3Channel
    from gpu_constructs.training_spec.channels import channel_from_dict as channel_from_dict
    from gpu_constructs.training_spec.channels import input_channel as input_channel
    from gpu_constructs.training_spec.code import CODE_CHANNEL as CODE_CHANNEL
    from gpu_constructs.training_spec.code import DEFAULT_ENTRY_POINT as DEFAULT_ENTRY_POINT
    from gpu_constructs.training_spec.code import DRIVERS_CHANNEL as DRIVERS_CHANNEL
    from gpu_constructs.training_spec.code import LAUNCH_DISTRIBUTIONS as LAUNCH_DISTRIBUTIONS
    from gpu_constructs.training_spec.code import LAUNCH_ENTRYPOINT as LAUNCH_ENTRYPOINT
    from gpu_constructs.training_spec.code import TrainingCode as TrainingCode
    from gpu_constructs.training_spec.code import entry_point_problem as entry_point_problem
    from gpu_constructs.training_spec.job import TrainingJobSpec as TrainingJobSpec
    from gpu_constructs.training_spec.limits import CHANNEL_NAME_MAX as CHANNEL_NAME_MAX
    from gpu_constructs.training_spec.limits import CHANNEL_NAME_PATTERN as CHANNEL_NAME_PATTERN
    from gpu_constructs.training_spec.limits import CHECKPOINT_LOCAL_PATH as CHECKPOINT_LOCAL_PATH
    from gpu_constructs.training_spec.limits import COMPRESSIONS as COMPRESSIONS
    from gpu_constructs.training_spec.limits import DATA_VERSION_PATTERN as DATA_VERSION_PATTERN
    from gpu_constructs.training_spec.limits import DATA_VERSION_PLACEHOLDER as DATA_VERSION_PLACEHOLDER
    from gpu_constructs.training_spec.limits import DISTRIBUTIONS as DISTRIBUTIONS
    from gpu_constructs.training_spec.limits import FSX_ACCESS_MODES as FSX_ACCESS_MODES
    from gpu_constructs.training_spec.limits import HP_NUM_WORKERS as HP_NUM_WORKERS
    from gpu_constructs.training_spec.limits import HP_PROCESSES_PER_HOST as HP_PROCESSES_PER_HOST
    from gpu_constructs.training_spec.limits import INPUT_MODES as INPUT_MODES
    from gpu_constructs.training_spec.limits import JOB_NAME_MAX as JOB_NAME_MAX
    from gpu_constructs.training_spec.limits import JOB_NAME_PATTERN as JOB_NAME_PATTERN
    from gpu_constructs.training_spec.limits import LAUNCHER_ENVIRONMENT as LAUNCHER_ENVIRONMENT
    from gpu_constructs.training_spec.limits import MAX_CHANNELS as MAX_CHANNELS
    from gpu_constructs.training_spec.limits import MAX_RETRY_ATTEMPTS as MAX_RETRY_ATTEMPTS
    from gpu_constructs.training_spec.limits import MAX_RUNTIME_LIMIT_S as MAX_RUNTIME_LIMIT_S
    from gpu_constructs.training_spec.limits import MAX_WAIT_LIMIT_S as MAX_WAIT_LIMIT_S
    from gpu_constructs.training_spec.limits import PROCESSES_PER_HOST_PATTERN as PROCESSES_PER_HOST_PATTERN
    from gpu_constructs.training_spec.limits import PROCESSING_MAX_RUNTIME_S as PROCESSING_MAX_RUNTIME_S
    from gpu_constructs.training_spec.limits import USER_INPUT_MODE as USER_INPUT_MODE
    from gpu_constructs.training_spec.limits import VOLUME_SIZE_GB as VOLUME_SIZE_GB
    from gpu_constructs.training_spec.preferences import MAX_PREFERENCES as MAX_PREFERENCES
    from gpu_constructs.training_spec.preferences import InstancePreference as InstancePreference
    from gpu_constructs.training_spec.rules import PROCESSING_TYPES_ALLOWED as PROCESSING_TYPES_ALLOWED
    from gpu_constructs.training_spec.rules import RUNTIME_RANGE as RUNTIME_RANGE
    from gpu_constructs.training_spec.rules import WAIT_BELOW_RUNTIME as WAIT_BELOW_RUNTIME
    from gpu_constructs.training_spec.rules import WAIT_RANGE as WAIT_RANGE
    from gpu_constructs.training_spec.rules import WAIT_WITHOUT_SPOT as WAIT_WITHOUT_SPOT
    from gpu_constructs.training_spec.rules import alarm_threshold_problems as alarm_threshold_problems
    from gpu_constructs.training_spec.rules import channel_name_problem as channel_name_problem
    from gpu_constructs.training_spec.rules import check_processes_per_host as check_processes_per_host
    from gpu_constructs.training_spec.rules import processing_type_allowed as processing_type_allowed
    from gpu_constructs.training_spec.rules import readable_problem as readable_problem
    from gpu_constructs.training_spec.rules import runtime_limit_text as runtime_limit_text
    from gpu_constructs.training_spec.rules import seconds_of as seconds_of
    from gpu_constructs.training_spec.rules import stopping_problems as stopping_problems
    from gpu_constructs.training_spec.rules import stopping_violations as stopping_violations
    from gpu_constructs.training_spec.rules import validate_job_name as validate_job_name
    from gpu_constructs.training_spec.service_model import hyperparameter_limits as hyperparameter_limits
    from gpu_constructs.training_spec.service_model import service_model_problems as service_model_problems
    from gpu_constructs.training_spec.sfn import Dynamic as Dynamic
    from gpu_constructs.training_spec.sfn import SfnPaths as SfnPaths
    from gpu_constructs.training_spec.sfn import iter_dynamic_paths as iter_dynamic_paths
    from gpu_constructs.training_spec.sfn import states_format as states_format
    from gpu_constructs.training_spec.sfn import substitute_sfn_samples as substitute_sfn_samples
    from gpu_constructs.training_spec.sharding import PROCESSING_INPUT_ROOT as PROCESSING_INPUT_ROOT
    from gpu_constructs.training_spec.sharding import PROCESSING_OUTPUT_ROOT as PROCESSING_OUTPUT_ROOT
    from gpu_constructs.training_spec.sharding import ShardingJobSpec as ShardingJobSpec
    from gpu_constructs.training_spec.sharding import ShardSplit as ShardSplit
