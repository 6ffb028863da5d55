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
busy: a composite alarm over three CloudWatch Metrics Insights alarms, one query each), an idle-GPU alarm,
and job failure notifications (EventBridge -> KMS-encrypted SNS topic).

One concept per module: :mod:`.options` (the value types), :mod:`.pipeline` (the construct), :mod:`.definition`
(the state machine), :mod:`.roles` (IAM), :mod:`.monitoring` (notifications, alarms, dashboard) and
:mod:`.acknowledgments` (cdk-nag).
"""

from __future__ import annotations

from gpu_constructs.training.acknowledgments import (
    JOB_GROUP_INTERNAL_REASON,
    STAR_RESOURCE_ACTIONS,
    STAR_RESOURCE_REASON,
)
from gpu_constructs.training.definition import hyperparameter_expression
from gpu_constructs.training.options import AlarmThresholds, PrepareOptions, ReadableInput, TrainingImageLike
from gpu_constructs.training.pipeline import TrainingPipeline
from gpu_constructs.training.roles import (
    PROCESSING_NAMESPACE,
    SAGEMAKER_VPC_ACTIONS,
    SYNC_RULES,
    TRAINING_NAMESPACE,
)

__all__ = [
    "JOB_GROUP_INTERNAL_REASON",
    "PROCESSING_NAMESPACE",
    "SAGEMAKER_VPC_ACTIONS",
    "STAR_RESOURCE_ACTIONS",
    "STAR_RESOURCE_REASON",
    "SYNC_RULES",
    "TRAINING_NAMESPACE",
    "AlarmThresholds",
    "PrepareOptions",
    "ReadableInput",
    "TrainingImageLike",
    "TrainingPipeline",
    "hyperparameter_expression",
]
