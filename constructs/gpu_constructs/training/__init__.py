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
:mod:`.acknowledgments` (cdk-nag). Names are re-exported lazily (PEP 562, :mod:`gpu_constructs.lazy`), so
``gpu_constructs.training.options`` can be imported on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_constructs.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "JOB_GROUP_INTERNAL_REASON": "gpu_constructs.training.acknowledgments",
    "STAR_RESOURCE_ACTIONS": "gpu_constructs.training.acknowledgments",
    "STAR_RESOURCE_REASON": "gpu_constructs.training.acknowledgments",
    "hyperparameter_expression": "gpu_constructs.training.definition",
    "AlarmThresholds": "gpu_constructs.training.options",
    "PrepareOptions": "gpu_constructs.training.options",
    "ReadableInput": "gpu_constructs.training.options",
    "TrainingAlarms": "gpu_constructs.training.options",
    "TrainingCodeOptions": "gpu_constructs.training.options",
    "TrainingImageLike": "gpu_constructs.training.options",
    "TrainingPipeline": "gpu_constructs.training.pipeline",
    "PROCESSING_NAMESPACE": "gpu_constructs.training.roles",
    "SAGEMAKER_VPC_ACTIONS": "gpu_constructs.training.roles",
    "SYNC_RULES": "gpu_constructs.training.roles",
    "TRAINING_NAMESPACE": "gpu_constructs.training.roles",
}

#: The documented API: the construct and the value types of its props. The other names of ``_EXPORTS`` (the
#: deprecated ``AlarmThresholds``, IAM
#: namespaces, cdk-nag reasons, ``hyperparameter_expression``) serve the library's modules and tests: importable,
#: not advertised.
__all__ = [
    "PrepareOptions",
    "ReadableInput",
    "TrainingAlarms",
    "TrainingCodeOptions",
    "TrainingImageLike",
    "TrainingPipeline",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # explicit re-exports (``X as X``) for type checkers
    from gpu_constructs.training.acknowledgments import JOB_GROUP_INTERNAL_REASON as JOB_GROUP_INTERNAL_REASON
    from gpu_constructs.training.acknowledgments import STAR_RESOURCE_ACTIONS as STAR_RESOURCE_ACTIONS
    from gpu_constructs.training.acknowledgments import STAR_RESOURCE_REASON as STAR_RESOURCE_REASON
    from gpu_constructs.training.definition import hyperparameter_expression as hyperparameter_expression
    from gpu_constructs.training.options import AlarmThresholds as AlarmThresholds
    from gpu_constructs.training.options import PrepareOptions as PrepareOptions
    from gpu_constructs.training.options import ReadableInput as ReadableInput
    from gpu_constructs.training.options import TrainingAlarms as TrainingAlarms
    from gpu_constructs.training.options import TrainingCodeOptions as TrainingCodeOptions
    from gpu_constructs.training.options import TrainingImageLike as TrainingImageLike
    from gpu_constructs.training.pipeline import TrainingPipeline as TrainingPipeline
    from gpu_constructs.training.roles import PROCESSING_NAMESPACE as PROCESSING_NAMESPACE
    from gpu_constructs.training.roles import SAGEMAKER_VPC_ACTIONS as SAGEMAKER_VPC_ACTIONS
    from gpu_constructs.training.roles import SYNC_RULES as SYNC_RULES
    from gpu_constructs.training.roles import TRAINING_NAMESPACE as TRAINING_NAMESPACE
