"""The training state machine's states for a job on a fallback list (``ResourceConfig.InstancePreferences``)::

    ValidateInstanceType --(no instance_type in the input)--> UsePreferences -> MergeHyperparameters ...
    ... -> TrainOnList? --(on the list)--> TrainOnPreferences -> WaitForTrainingJob -> DescribeTrainingJob
                                               -> TrainingJobStatus? --Completed--> SelectedInstanceType -> RecordResult
                                                                     --Failed/Stopped--> DescribeFailedTrainingJob
                                                                     --otherwise--> WaitForTrainingJob
                        '--(an instance_type)--> Train (createTrainingJob.sync, that type only)

Why not ``createTrainingJob.sync``: the Step Functions page of the optimized SageMaker integration ("Create and
manage Amazon SageMaker AI jobs with Step Functions",
https://docs.aws.amazon.com/step-functions/latest/dg/connect-sagemaker.html) lists ``CreateTrainingJob`` ("Supports
the ``.sync`` integration pattern") with an example ``ResourceConfig`` of ``InstanceCount``, ``InstanceType`` and
``VolumeSizeInGB``, and says nothing of ``InstancePreferences``, which SageMaker added later; nothing there establishes
that the optimized integration passes the member through. The AWS SDK integration does: "AWS SDK integrations work
exactly like an API call using the AWS SDK" ("Integrating services with Step Functions",
https://docs.aws.amazon.com/step-functions/latest/dg/integrate-services.html), and it has no ``.sync``
("Over two hundred services | Standard & Express | Not supported | Standard", "Integrating optimized services with Step
Functions"). So a job on the list is created with ``arn:<partition>:states:::aws-sdk:sagemaker:createTrainingJob`` and
watched with ``DescribeTrainingJob`` in a wait loop, whose result has the members the ``.sync`` task returns (the
``.sync`` output is the DescribeTrainingJob response), ``ResourceConfig.SelectedInstanceType`` included.

The poll interval keeps a job that runs ``MaxRuntimeInSeconds`` under Step Functions' history quota ("Maximum
execution history size: 25,000 events. If the execution history reaches this quota, the execution will fail",
"Quotas for Standard Workflows", https://docs.aws.amazon.com/step-functions/latest/dg/limits.html): at most
:data:`MAX_POLLS` polls of about ten events each, and never more often than once a minute.

Unlike ``.sync``, stopping the execution does not stop the job: ``gpuctl stop`` (``StopTrainingJob``) does.

The prepare step's processing job on a fallback list (``ProcessingClusterConfig.InstancePreferences``) runs the same
way (:func:`prepare_on_list`): ``ShardDataset`` on ``aws-sdk:sagemaker:createProcessingJob``, then
``WaitForShardDataset`` -> ``DescribeShardDataset`` -> ``ShardDatasetStatus?``.
"""

from __future__ import annotations

import json
import math

from aws_cdk import Duration, Stack
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from gpu_constructs.training.roles import JobKind, job_arn
from gpu_constructs.training_spec import SfnPaths, ShardingJobSpec, TrainingJobSpec, seconds_of

__all__ = [
    "CAPACITY_KEY",
    "MAX_POLLS",
    "poll_interval_s",
    "preference_branch",
    "prepare_on_list",
    "use_preferences",
]

#: Where the state records that the job runs on the fallback list (``{"capacity": "preferences"}``).
CAPACITY_KEY = "capacity"
#: Polls of a job that runs its whole ``MaxRuntimeInSeconds`` (plus an hour of waiting for capacity): 2,000 polls of
#: a Wait, a Task and a Choice state (about 10 history events) stay below the 25,000-event quota.
MAX_POLLS = 2000
#: The shortest poll interval, seconds.
MIN_POLL_S = 60


def poll_interval_s(spec: TrainingJobSpec | ShardingJobSpec) -> int:
    """Seconds between two ``Describe*Job`` calls: ``(MaxRuntime + 1 h) / MAX_POLLS``, at least a minute."""
    runtime = seconds_of(spec.max_runtime)
    total = (runtime if isinstance(runtime, int) else 28 * 24 * 3600) + 3600
    return max(MIN_POLL_S, math.ceil(total / MAX_POLLS))


def use_preferences(scope: Construct, spec: TrainingJobSpec) -> sfn.Pass:
    """``UsePreferences``: the execution named no instance type, so the job runs on the fallback list: the derived
    distribution every type of the list can run (:meth:`TrainingJobSpec.preference_distribution`) and the marker
    :data:`CAPACITY_KEY`."""
    derived = json.dumps(spec.preference_distribution(), separators=(",", ":"))
    return sfn.Pass.jsonata(
        scope,
        "UsePreferences",
        comment="No instance_type in the input: the first type of "
        + ", ".join(spec.preference_types)
        + " with capacity (InstancePreferences), with the distribution they share",
        outputs="{% $merge([$states.input, {'derived': " + derived + ", '" + CAPACITY_KEY + "': 'preferences'}]) %}",
    )


def preference_branch(
    scope: Construct,
    spec: TrainingJobSpec,
    paths: SfnPaths,
    *,
    job_name_prefix: str,
    failure: sfn.IChainable,
    train: sfn.IChainable,
    result: sfn.IChainable,
) -> sfn.Choice:
    """``TrainOnList?``: the job on the fallback list (the loop of this module's docstring), or ``train`` (one
    type); ``failure`` describes a failed job, ``result`` records a completed one."""
    partition = Stack.of(scope).partition
    create = sfn.CustomState(
        scope,
        "TrainOnPreferences",
        state_json={
            "Type": "Task",
            "Comment": "CreateTrainingJob on the fallback list (InstancePreferences) through the AWS SDK integration",
            "Resource": f"arn:{partition}:states:::aws-sdk:sagemaker:createTrainingJob",
            "Parameters": spec.to_sfn_parameters(paths, where=scope.node.path, preferences=True),
            "ResultPath": "$.created",
        },
    )
    selected = sfn.Pass.jsonata(
        scope,
        "SelectedInstanceType",
        comment="The type SageMaker selected from the list (ResourceConfig.SelectedInstanceType) is the run's",
        outputs="{% $merge([$states.input, {'args': $merge([$states.input.args, {'instance_type': "
        "$states.input.training.ResourceConfig.SelectedInstanceType}])}]) %}",
    )
    selected.next(result)
    _wait_loop(
        scope,
        create,
        ("WaitForTrainingJob", "DescribeTrainingJob", "TrainingJobStatus?"),
        kind="Training",
        job_name_path="$.args.job_name",
        job_name_prefix=job_name_prefix,
        result_path="$.training",
        interval_s=poll_interval_s(spec),
        failure=failure,
        done=selected,
    )
    return (
        sfn.Choice(scope, "TrainOnList?", comment="No instance_type in the input: the fallback list; else that type")
        .when(sfn.Condition.is_present(f"$.{CAPACITY_KEY}"), create)
        .otherwise(train)
    )


def prepare_on_list(
    scope: Construct, spec: ShardingJobSpec, *, job_name_prefix: str, failure: sfn.IChainable, then: sfn.IChainable
) -> sfn.CustomState:
    """``ShardDataset`` on the prepare step's fallback list (the AWS SDK integration), its wait loop, then ``then``;
    ``failure`` describes a failed processing job (named ``<job_name_prefix>-*``)."""
    create = sfn.CustomState(
        scope,
        "ShardDataset",
        state_json={
            "Type": "Task",
            "Comment": "gpuctl shard in the training image on the first processing type with capacity "
            "(InstancePreferences, through the AWS SDK integration)",
            "Resource": f"arn:{Stack.of(scope).partition}:states:::aws-sdk:sagemaker:createProcessingJob",
            "Parameters": spec.to_sfn_parameters(where=scope.node.path),
            "ResultPath": "$.prepare",
        },
    )
    create.add_catch(failure, result_path="$.error")
    _wait_loop(
        scope,
        create,
        ("WaitForShardDataset", "DescribeShardDataset", "ShardDatasetStatus?"),
        kind="Processing",
        job_name_path="$.args.prepare_job_name",
        job_name_prefix=job_name_prefix,
        result_path="$.prepare",
        interval_s=poll_interval_s(spec),
        failure=failure,
        done=then,
    )
    return create


def _wait_loop(
    scope: Construct,
    create: sfn.CustomState,
    ids: tuple[str, str, str],
    *,
    kind: JobKind,
    job_name_path: str,
    job_name_prefix: str,
    result_path: str,
    interval_s: int,
    failure: sfn.IChainable,
    done: sfn.IChainable,
) -> None:
    """``create`` -> Wait -> ``Describe<kind>Job`` -> Choice on its status: ``Completed`` to ``done``, ``Failed`` or
    ``Stopped`` to ``failure``, otherwise wait again (``ids``: the three states' ids)."""
    job = f"{kind}Job"
    wait = sfn.Wait(
        scope,
        ids[0],
        comment="Poll interval: (MaxRuntime + 1 h) / 2000, so the history stays under 25,000 events",
        time=sfn.WaitTime.duration(Duration.seconds(interval_s)),
    )
    describe = tasks.CallAwsService(
        scope,
        ids[1],
        service="sagemaker",
        action=f"describe{job}",
        iam_action=f"sagemaker:Describe{job}",
        iam_resources=[job_arn(scope, "training-job" if kind == "Training" else "processing-job", job_name_prefix)],
        parameters={f"{job}Name": sfn.JsonPath.string_at(job_name_path)},
        result_path=result_path,
    )
    describe.add_retry(errors=["States.TaskFailed"], interval=Duration.seconds(30), max_attempts=5, backoff_rate=2)
    describe.add_catch(failure, result_path="$.error")
    status_path = f"{result_path}.{job}Status"
    status = sfn.Choice(scope, ids[2], comment="Completed, Failed or Stopped end the loop")
    status.when(sfn.Condition.string_equals(status_path, "Completed"), done)
    status.when(
        sfn.Condition.or_(
            sfn.Condition.string_equals(status_path, "Failed"),
            sfn.Condition.string_equals(status_path, "Stopped"),
        ),
        failure,
    )
    status.otherwise(wait)
    create.next(wait).next(describe).next(status)
