"""The limits and patterns of SageMaker training and processing jobs, defined once (the config imports them)."""

from __future__ import annotations

import re

from gpu_constructs.errors import TOKEN_STRING_RE

#: SageMaker job names: ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$``, at most 63 characters.
JOB_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
JOB_NAME_RE = re.compile(JOB_NAME_PATTERN)
JOB_NAME_MAX = 63
#: A job-name prefix leaves 22 characters for the rest of the job name.
JOB_NAME_PREFIX_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,40}$")
#: Placeholder in channel URIs and FSx paths that is replaced by the data version.
DATA_VERSION_PLACEHOLDER = "{data_version}"
DATA_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,127}$"
#: Where SageMaker syncs ``CheckpointConfig.S3Uri`` inside the container (the runtime writes there).
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
#: Hyperparameter names the training runtime (``gpu_train``) reads for the distribution defaults.
HP_PROCESSES_PER_HOST = "processes_per_host"
HP_NUM_WORKERS = "num_workers"
#: Where a job that runs code through the launcher gets the same two settings: its ``Environment``
#: (``gpu_train.launcher.LAUNCHER_SETTINGS``), so your own script's hyperparameters are only yours.
LAUNCHER_ENVIRONMENT = {
    HP_PROCESSES_PER_HOST: "GPU_TRAIN_PROCESSES_PER_HOST",
    HP_NUM_WORKERS: "GPU_TRAIN_NUM_WORKERS",
}

INPUT_MODES = ("File", "FastFile", "Pipe")
DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
FSX_ACCESS_MODES = ("ro", "rw")
COMPRESSIONS = ("None", "Gzip")
#: SageMaker's limit on ``StoppingCondition.MaxRuntimeInSeconds``: 28 days = 2,419,200 s (botocore 1.44.5, sagemaker,
#: StoppingCondition.MaxRuntimeInSeconds: "The default value is 1 day. The maximum value is 28 days."; the shape
#: itself declares only ``min: 1``, so botocore's validator does not catch it). The config (hours) imports it.
MAX_RUNTIME_LIMIT_S = 28 * 24 * 3600
#: The ceiling the platform applies to ``MaxWaitTimeInSeconds`` (spot wait plus runtime): the same 28 days. botocore
#: 1.44.5 declares no maximum for it (``min: 1``); its sibling ``MaxPendingTimeInSeconds`` has ``max: 2419200``.
MAX_WAIT_LIMIT_S = MAX_RUNTIME_LIMIT_S
#: SageMaker's limit on a processing job's ``ProcessingStoppingCondition.MaxRuntimeInSeconds``: 777,600 s = 9 days
#: (botocore 1.44.8, sagemaker, shape ``ProcessingMaxRuntimeInSeconds``: ``min: 1``, ``max: 777600``; botocore's
#: validator checks only ``min``). The prepare step's spec and config check against it, so their messages quote it.
PROCESSING_MAX_RUNTIME_LIMIT_S = 777600
PROCESSING_MAX_RUNTIME_S = PROCESSING_MAX_RUNTIME_LIMIT_S
#: ``ResourceConfig.VolumeSizeInGB`` of a training job, GB.
VOLUME_SIZE_GB = (1, 16384)
#: ``RetryStrategy.MaximumRetryAttempts``.
MAX_RETRY_ATTEMPTS = (1, 30)
#: A ``processes_per_host`` hyperparameter: a plain integer without sign or leading zeros, where 0 lets the training
#: runtime start one process per GPU. The training state machine's input check uses the same pattern (JSONata).
PROCESSES_PER_HOST_PATTERN = r"^(0|[1-9][0-9]*)$"
PROCESSES_RE = re.compile(PROCESSES_PER_HOST_PATTERN)
S3_URI_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
#: SageMaker channel names (botocore 1.44.8, ``sagemaker/2017-07-24/service-2.json``, shape ``ChannelName`` of
#: ``Channel``: ``min: 1``, ``max: 64``, ``pattern: [A-Za-z0-9\\.\\-_]+``). The spec, the config, ``gpuctl`` and the
#: training state machine's input check (JSONata) apply the same pattern and maximum.
CHANNEL_NAME_PATTERN = r"^[A-Za-z0-9.\-_]+$"
CHANNEL_NAME_MAX = 64
CHANNEL_RE = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
CHANNEL_NAME_ALLOWED = "1 to 64 letters, digits and . - _ (SageMaker's ChannelName)"
#: ``CreateTrainingJob.InputDataConfig`` holds at most 20 channels (botocore 1.44.8, shape ``InputDataConfig``:
#: ``max: 20``), the runtime's ``code`` and ``sm_drivers`` channels included.
MAX_CHANNELS = 20
#: Input mode of a channel a user names (``gpuctl train --input``, an execution's ``inputs``) when none is given:
#: File, the default of SageMaker's ``TrainingInputMode`` and of the SageMaker Python SDK's estimators.
USER_INPUT_MODE = "File"
#: A string-encoded CDK token (one home: :data:`gpu_constructs.errors.TOKEN_STRING_RE`).
TOKEN_RE = TOKEN_STRING_RE
WHERE = "TrainingJobSpec"
