"""Managed spot training without checkpoints restarts from scratch after every interruption.

With ``EnableManagedSpotTraining: true`` SageMaker may interrupt the job when EC2 reclaims spot capacity and
restarts it when capacity returns. Only what the job wrote to its checkpoint directory survives: SageMaker
copies ``CheckpointConfig.LocalPath`` to ``CheckpointConfig.S3Uri`` and back on restart. Without a
``CheckpointConfig`` every interruption starts training over, and a long job may never finish inside
``MaxWaitTimeInSeconds``. AWS: "Managed Spot Training in Amazon SageMaker"
(https://docs.aws.amazon.com/sagemaker/latest/dg/model-managed-spot-training.html): "SageMaker copies checkpoint
data from a local path to Amazon S3. When the job is restarted, SageMaker copies the data from Amazon S3 back into
the local path. The training can then resume from the last checkpoint instead of restarting." and "Unless your
training job will complete quickly, we recommend you use checkpointing with managed spot training. SageMaker
built-in algorithms and marketplace algorithms that do not checkpoint are currently limited to a
MaxWaitTimeInSeconds of 3600 seconds (60 minutes)."

Reads ``AWS::SageMaker::TrainingJob`` and the ``sagemaker:createTrainingJob[.sync]`` and
``aws-sdk:sagemaker:createTrainingJob`` tasks of state machines
(one finding per state). Non-compliant: ``EnableManagedSpotTraining`` is literally true and no
``CheckpointConfig.S3Uri`` is given. A spot flag or checkpoint set at run time is not judged.
"""

from __future__ import annotations

from gpu_constructs.rules._training import TrainingRequest, training_rule


@training_rule(
    id="TrainingSpotWithoutCheckpoint",
    info="A managed spot training job has no CheckpointConfig.S3Uri: every spot interruption restarts training "
    "from the beginning. Set CheckpointConfig (S3Uri, LocalPath) and write checkpoints there.",
    doc=__doc__,
)
def check(request: TrainingRequest) -> list[str]:
    spot = request.get("EnableManagedSpotTraining") is True
    return [request.where] if spot and request.get("CheckpointConfig", "S3Uri") is None else []
