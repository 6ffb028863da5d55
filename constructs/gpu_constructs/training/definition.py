"""The training state machine's definition::

    Init -> Defaults -> MergeInput -> Arguments -> ValidateJobName -> ValidateCode -> ValidateInstanceType
         -> Derive<procs>x<workers>
         -> MergeHyperparameters -> MergeInputs -> ValidateHyperparameters -> [PrepareData? -> ShardDataset] -> Train
         -> RecordResult -> Output -> Succeeded

A failed job is described and ends in a Fail state whose cause is the job's ``FailureReason``. Every state is a
child of the pipeline construct, with a stable id.

With a fallback list (``TrainingJobSpec.instance_preferences``) an execution that names no ``instance_type`` runs on
the list (``UsePreferences``, then ``TrainOnPreferences`` and its wait loop, :mod:`.fallback_states`); one that names
an allowed type runs on that type only (``Train``), as without a list.

The states are built from :class:`DefinitionInputs` (the job spec, the prefixes, the allowed types, the prepare
step), not from the pipeline, so that this module does not depend on the construct that composes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aws_cdk import Stack
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from gpu_constructs.catalog import processes_per_host_limit
from gpu_constructs.errors import path_of
from gpu_constructs.training.fallback_states import preference_branch, prepare_on_list, use_preferences
from gpu_constructs.training.roles import JobKind, job_arn
from gpu_constructs.training_spec import (
    CHANNEL_NAME_MAX,
    CHANNEL_NAME_PATTERN,
    CODE_CHANNEL,
    DATA_VERSION_PLACEHOLDER,
    HP_NUM_WORKERS,
    HP_PROCESSES_PER_HOST,
    INPUT_MODES,
    MAX_CHANNELS,
    PROCESSES_PER_HOST_PATTERN,
    USER_INPUT_MODE,
    SfnPaths,
    ShardingJobSpec,
    TrainingCode,
    TrainingJobSpec,
    hyperparameter_limits,
)
from gpu_constructs.training_spec.code import RESERVED_CHANNELS
from gpu_constructs.training_spec.limits import CHANNEL_NAME_ALLOWED
from gpu_constructs.training_spec.rules import READABLE_WHERE
from gpu_constructs.training_spec.sfn import DATASET_CHANNELS, RUNTIME_CHANNELS, STATIC_CHANNELS

if TYPE_CHECKING:
    from gpu_constructs.training.options import PrepareOptions

__all__ = ["DefinitionInputs", "definition", "hyperparameter_expression", "input_expression", "static_channels"]

_PATHS = SfnPaths(
    hyperparameters="$.run.hyperparameters", distribution="$.derived", input_data_config="$.run.input_data_config"
)


@dataclass(frozen=True)
class DefinitionInputs:
    """What the training state machine's definition is built from.

    :param spec: the validated job spec (the ``Train`` state's parameters, the defaults, the channels, the code).
    :param job_name_prefix: training job names an execution may choose start with ``<job_name_prefix>-``.
    :param shard_job_name_prefix: the prepare step's processing jobs are named ``<shard_job_name_prefix>-*``.
    :param allowed_instance_types: the types an execution may choose (the ``ValidateInstanceType`` choice).
    :param readable_inputs: ``s3://bucket/prefix`` URIs an execution's inputs must lie under.
    :param data_version: the default data version of an execution.
    :param prepare: the optional prepare step's options (None: no prepare step).
    :param sharding_spec: the prepare step's job spec (given exactly when ``prepare`` is).
    """

    spec: TrainingJobSpec
    job_name_prefix: str
    shard_job_name_prefix: str
    allowed_instance_types: tuple[str, ...]
    readable_inputs: tuple[str, ...]
    data_version: str
    prepare: PrepareOptions | None = None
    sharding_spec: ShardingJobSpec | None = None


def static_channels(spec: TrainingJobSpec) -> dict[str, list[dict[str, Any]]]:
    """The channels known before the run, the one home of them (the ``Defaults`` state's ``static.channels``):
    ``dataset``, the setup's dataset channels with ``{data_version}`` in their URIs (the ``MergeInputs`` state
    puts the execution's ``data_version`` there), and ``runtime``, the code's channels (none without a code
    package), whose ``code`` channel reads the setup's code package (``MergeInputs`` puts the execution's
    ``code`` there). The ``SageMakerJobRoleAuthorized`` rule judges them for the ``Train`` state."""
    code = spec.code
    return {
        DATASET_CHANNELS: [c.render(DATA_VERSION_PLACEHOLDER) for c in spec.channels],
        RUNTIME_CHANNELS: code.channels() if code is not None else [],
    }


def definition(scope: Construct, inputs: DefinitionInputs) -> sfn.IChainable:
    """The chain from ``Init``; the states are created in a fixed order under ``scope``."""
    start = _input_states(scope, inputs)
    check_name, merge_hp = _validation_states(scope, inputs)
    train = _sync_task(
        scope,
        "Train",
        "CreateTrainingJob with the full API (spot, checkpoints, VPC, FSx); waits for the end",
        "createTrainingJob",
        inputs.spec.to_sfn_parameters(_PATHS, where=path_of(scope)),
        "$.training",
    )
    result = _result_states(scope)
    train.next(result)
    failure = _failure_branch(scope, "Training", inputs.job_name_prefix)
    train.add_catch(failure, result_path="$.error")
    run: sfn.IChainable = train
    if inputs.spec.instance_preferences:
        run = preference_branch(
            scope,
            inputs.spec,
            _PATHS,
            job_name_prefix=inputs.job_name_prefix,
            failure=failure,
            train=train,
            result=result,
        )
    bad_hp = sfn.Fail.jsonata(
        scope,
        "InvalidHyperparameters",
        error="InvalidInput",
        cause="{% 'The execution input is not valid: ' & $join($states.input.run.problems, '; ') %}",
    )
    check_hp = sfn.Choice.jsonata(
        scope, "ValidateHyperparameters", comment="Fail with every problem before SageMaker is called"
    )
    check_hp.when(sfn.Condition.jsonata("{% $count($states.input.run.problems) > 0 %}"), bad_hp)
    merge_inputs = sfn.Pass.jsonata(
        scope,
        "MergeInputs",
        comment="The job's channels: the execution's inputs (each under a prefix the job role may read), the setup's "
        "dataset channels for the setup's code or with dataset: true, the code's; problems added",
        outputs="{% "
        + input_expression(
            [c.name for c in inputs.spec.channels],
            inputs.readable_inputs,
            code=_code_kind(inputs.spec.code),
        )
        + " %}",
    )
    merge_hp.next(merge_inputs)
    if inputs.prepare is not None and inputs.sharding_spec is not None:
        merge_inputs.next(check_hp.otherwise(_prepare_branch(scope, inputs, run)))
    else:
        merge_inputs.next(check_hp.otherwise(run))
    return start.next(check_name)


def _input_states(scope: Construct, inputs: DefinitionInputs) -> sfn.Chain:
    """Init -> Defaults -> MergeInput -> Arguments: the execution input merged over the defaults."""
    spec, prepare = inputs.spec, inputs.prepare
    init = sfn.Pass(
        scope,
        "Init",
        comment="A short run id for default job names, and the execution input",
        parameters={
            "run_id": sfn.JsonPath.array_get_item(sfn.JsonPath.string_split(sfn.JsonPath.uuid(), "-"), 0),
            "input": sfn.JsonPath.execution_input,
        },
    )
    defaults: dict[str, Any] = {
        "job_name": sfn.JsonPath.format(f"{inputs.job_name_prefix}-{{}}", sfn.JsonPath.string_at("$.run_id")),
        # With a fallback list, no default type: an input without instance_type runs on the list.
        **({} if spec.instance_preferences else {"instance_type": spec.instance_type}),
        "data_version": inputs.data_version,
        "hyperparameters": {},
        "inputs": {},
    }
    code = spec.code
    if code is not None:
        # The code package and its entry point: the synthesized asset unless the execution names another.
        defaults["code"] = code.source_s3_uri
        defaults["entry_point"] = code.entry_point
    if prepare is not None:
        defaults["prepare"] = prepare.run_by_default
        defaults["prepare_job_name"] = sfn.JsonPath.format(
            f"{inputs.shard_job_name_prefix}-{{}}", sfn.JsonPath.string_at("$.run_id")
        )
    apply_defaults = sfn.Pass(
        scope,
        "Defaults",
        comment="Defaults of every runtime value; the execution input overrides them",
        parameters={
            "defaults": defaults,
            "input": sfn.JsonPath.object_at("$.input"),
            "static": {
                "base_hyperparameters": dict(spec.hyperparameters),
                **({"code": code.source_s3_uri} if code is not None else {}),
                STATIC_CHANNELS: static_channels(spec),
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
        scope,
        "MergeInput",
        parameters={
            "value": sfn.JsonPath.json_merge(sfn.JsonPath.object_at("$.defaults"), sfn.JsonPath.object_at("$.input"))
        },
        result_path="$.merged",
    )
    unpack = sfn.Pass(
        scope,
        "Arguments",
        parameters={"args": sfn.JsonPath.object_at("$.merged.value"), "static": sfn.JsonPath.object_at("$.static")},
    )
    return init.next(apply_defaults).next(merge_input).next(unpack)


def _validation_states(scope: Construct, inputs: DefinitionInputs) -> tuple[sfn.Choice, sfn.Pass]:
    """ValidateJobName -> ValidateInstanceType -> Derive<procs>x<workers> -> MergeHyperparameters."""
    prefix = inputs.job_name_prefix
    allowed = inputs.allowed_instance_types
    code = inputs.spec.code
    bad_name = sfn.Fail(
        scope,
        "InvalidJobName",
        error="InvalidInput",
        cause_path=sfn.JsonPath.format(
            f"job_name {{}} is not allowed; allowed: a name that starts with {prefix}- and has at most 63 "
            "letters, digits and hyphens",
            sfn.JsonPath.string_at("$.args.job_name"),
        ),
    )
    check_name = sfn.Choice(scope, "ValidateJobName", comment="IAM lets this pipeline run only <prefix>-* jobs")
    bad_type = sfn.Fail(
        scope,
        "InstanceTypeNotAllowed",
        error="InvalidInput",
        cause_path=sfn.JsonPath.format(
            "instance_type {} is not allowed for this pipeline; allowed: " + ", ".join(allowed),
            sfn.JsonPath.string_at("$.args.instance_type"),
        ),
    )
    check_type = sfn.Choice(
        scope,
        "ValidateInstanceType",
        comment="NVIDIA GPU training types from the GPU catalog, grouped by their derived distribution",
    )
    on_list = use_preferences(scope, inputs.spec) if inputs.spec.instance_preferences else None
    if on_list is not None:
        # First rule: an input without instance_type (the defaults give none with a fallback list).
        check_type.when(sfn.Condition.not_(sfn.Condition.is_present("$.args.instance_type")), on_list)
    merge_hp = sfn.Pass.jsonata(
        scope,
        "MergeHyperparameters",
        comment=_merge_comment(code),
        outputs="{% "
        + hyperparameter_expression(
            {name: processes_per_host_limit(name) for name in allowed},
            code=_code_kind(code),
            preferences=inputs.spec.preference_types,
        )
        + " %}",
    )
    groups: dict[tuple[str, str], list[str]] = {}
    for name in allowed:
        derived = inputs.spec.distribution_for(name)
        groups.setdefault((derived[HP_PROCESSES_PER_HOST], derived[HP_NUM_WORKERS]), []).append(name)
    for (procs, workers), names in sorted(groups.items(), key=lambda kv: (int(kv[0][0]), int(kv[0][1]))):
        derive = sfn.Pass(
            scope,
            f"Derive{procs}x{workers}",
            comment=f"{procs} process(es) per host, {workers} data-loader workers each: {', '.join(names)}",
            result=sfn.Result.from_object({HP_PROCESSES_PER_HOST: procs, HP_NUM_WORKERS: workers}),
            result_path="$.derived",
        )
        conditions = [sfn.Condition.string_equals("$.args.instance_type", n) for n in names]
        rule = conditions[0] if len(conditions) == 1 else sfn.Condition.or_(*conditions)
        check_type.when(rule, derive.next(merge_hp))
    check_type.otherwise(bad_type)
    if on_list is not None:
        on_list.next(merge_hp)
    check_name.when(
        sfn.Condition.and_(
            sfn.Condition.is_string("$.args.job_name"),
            sfn.Condition.string_matches("$.args.job_name", f"{prefix}-*"),
        ),
        _code_check(scope, code, check_type),
    ).otherwise(bad_name)
    return check_name, merge_hp


def _code_check(scope: Construct, code: TrainingCode | None, then: sfn.IChainable) -> sfn.IChainable:
    """ValidateCode: the execution's code package is the synthesized one or lies under ``code/<prefix>/`` of the
    artifacts bucket (the only packages the job role may read), and its entry point is a relative ``.py`` path."""
    if code is None:
        return then
    bad_code = sfn.Fail(
        scope,
        "CodeNotAllowed",
        error="InvalidInput",
        cause_path=sfn.JsonPath.format(
            "code {} with entry_point {} is not allowed; allowed: the setup's code package or one under "
            f"{code.upload_prefix} (what gpuctl train --source-dir uploads), and a relative path to a .py file",
            sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.args.code")),
            sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.args.entry_point")),
        ),
    )
    entry = "$.args.entry_point"
    rule = sfn.Condition.and_(
        sfn.Condition.is_string("$.args.code"),
        sfn.Condition.or_(
            sfn.Condition.string_equals("$.args.code", code.source_s3_uri),
            sfn.Condition.string_matches("$.args.code", f"{code.upload_prefix}*"),
        ),
        sfn.Condition.is_string(entry),
        sfn.Condition.string_matches(entry, "*.py"),
        sfn.Condition.not_(sfn.Condition.string_matches(entry, "/*")),
        sfn.Condition.not_(sfn.Condition.string_matches(entry, "*..*")),
    )
    return (
        sfn.Choice(scope, "ValidateCode", comment="Only code packages the job role may read; a relative .py entry")
        .when(rule, then)
        .otherwise(bad_code)
    )


def _result_states(scope: Construct) -> sfn.Chain:
    """RecordResult -> Output -> Succeeded: the model artifact, metrics and what produced them."""
    record = _with_defaults(scope, "RecordResult", "$.static.result_defaults", "$.training", "$.result")
    output = sfn.Pass(
        scope,
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
    return record.next(output).next(sfn.Succeed(scope, "Succeeded"))


def _prepare_branch(scope: Construct, inputs: DefinitionInputs, train: sfn.IChainable) -> sfn.Choice:
    """PrepareData? -> ShardDataset -> Train (or straight to Train)."""
    assert inputs.sharding_spec is not None
    failure = _failure_branch(scope, "Processing", inputs.shard_job_name_prefix)
    if inputs.sharding_spec.instance_preferences:
        prepare_state = prepare_on_list(
            scope, inputs.sharding_spec, job_name_prefix=inputs.shard_job_name_prefix, failure=failure, then=train
        )
    else:
        prepare_state = _sync_task(
            scope,
            "ShardDataset",
            "gpuctl shard in the training image: raw files -> tar shards for this data version",
            "createProcessingJob",
            inputs.sharding_spec.to_sfn_parameters(where=path_of(scope)),
            "$.prepare",
        )
        prepare_state.add_catch(failure, result_path="$.error")
        prepare_state.next(train)
    choice = sfn.Choice(scope, "PrepareData?")
    choice.when(sfn.Condition.boolean_equals("$.args.prepare", True), prepare_state).otherwise(train)
    return choice


def _sync_task(
    scope: Construct, state_id: str, comment: str, action: str, parameters: dict[str, Any], result_path: str
) -> sfn.CustomState:
    """A ``sagemaker:<action>.sync`` task with the full API in ``parameters`` (the CDK task classes lack fields)."""
    return sfn.CustomState(
        scope,
        state_id,
        state_json={
            "Type": "Task",
            "Comment": comment,
            "Resource": f"arn:{Stack.of(scope).partition}:states:::sagemaker:{action}.sync",
            "Parameters": parameters,
            "ResultPath": result_path,
        },
    )


#: Per job kind: the ids of the describe, summarize, failed and not-created states, the job name's path in the
#: state, the error of the Fail state and the start of its cause.
_FAILURES: dict[str, tuple[tuple[str, str, str, str], str, str, str]] = {
    "Training": (
        ("DescribeFailedTrainingJob", "SummarizeFailure", "TrainingJobFailed", "TrainingJobNotCreated"),
        "$.args.job_name",
        "TrainingJobFailed",
        "Training job {}",
    ),
    "Processing": (
        ("DescribeFailedPrepare", "SummarizePrepareFailure", "PrepareFailed", "PrepareNotCreated"),
        "$.args.prepare_job_name",
        "DataPreparationFailed",
        "Processing job {} (gpuctl shard)",
    ),
}


def _failure_branch(scope: Construct, kind: JobKind, job_name_prefix: str) -> tasks.CallAwsService:
    """Describe the failed job (of ``kind``, named ``<job_name_prefix>-*``) -> summarize -> Fail with its
    ``FailureReason`` (a job never created fails with the task's error)."""
    ids, name_path, error, label = _FAILURES[kind]
    job = f"{kind}Job"
    arn = job_arn(scope, "training-job" if kind == "Training" else "processing-job", job_name_prefix)
    describe = tasks.CallAwsService(
        scope,
        ids[0],
        service="sagemaker",
        action=f"describe{job}",
        iam_action=f"sagemaker:Describe{job}",
        iam_resources=[arn],
        parameters={f"{job}Name": sfn.JsonPath.string_at(name_path)},
        result_path="$.failure",
    )
    summarize = _with_defaults(scope, ids[1], "$.static.failure_defaults", "$.failure", "$.failure")
    failed = sfn.Fail(
        scope,
        ids[2],
        error=error,
        cause_path=sfn.JsonPath.format(
            f"{label} ended {{}}: {{}}",
            sfn.JsonPath.string_at(f"$.failure.job.{job}Name"),
            sfn.JsonPath.string_at(f"$.failure.job.{job}Status"),
            sfn.JsonPath.string_at("$.failure.job.FailureReason"),
        ),
    )
    not_created = sfn.Fail(scope, ids[3], error_path="$.error.Error", cause_path="$.error.Cause")
    describe.add_catch(not_created, result_path="$.describe_error")
    describe.next(summarize).next(failed)
    return describe


def _with_defaults(scope: Construct, state_id: str, defaults: str, value: str, result_path: str) -> sfn.Pass:
    """A Pass state that stores ``{"job": <defaults> merged with <value>}`` at ``result_path`` (fields SageMaker may
    leave out get their defaults)."""
    return sfn.Pass(
        scope,
        state_id,
        parameters={"job": sfn.JsonPath.json_merge(sfn.JsonPath.object_at(defaults), sfn.JsonPath.object_at(value))},
        result_path=result_path,
    )


def _code_kind(code: TrainingCode | None) -> CodeKind:
    return None if code is None else "builtin" if code.builtin else "own"


def _merge_comment(code: TrainingCode | None) -> str:
    checked = (
        ", every value a string (numbers and booleans converted), checked against SageMaker's limits and the GPUs "
        "of the type"
    )
    kind = _code_kind(code)
    if kind is None:
        return "derived distribution <- base hyperparameters <- execution input" + checked
    own = "derived distribution <- base hyperparameters" if kind == "builtin" else "base hyperparameters"
    return (
        f"the setup's code package: {own} <- execution input; another code package (the input's code): the input's "
        "hyperparameters only (the launcher's settings are in Environment)" + checked
    )


#: What the setup's jobs run: ``None`` the image's own entry (the built-in trainer), ``"builtin"`` the default code
#: package (the built-in trainer through the launcher), ``"own"`` a code package of the setup's own.
CodeKind = Literal["builtin", "own"] | None


def hyperparameter_expression(
    max_processes: Mapping[str, int], *, code: CodeKind = None, preferences: Sequence[str] = ()
) -> str:
    """The JSONata expression of the ``MergeHyperparameters`` state (without the ``{% %}`` delimiters).

    Whose hyperparameters a job gets (``code``: what the setup's jobs run): the built-in trainer (no code package,
    or the setup's default code package) gets the derived distribution, the base hyperparameters and the
    execution's, as ever; the setup's own code package (``own``) the base hyperparameters and the execution's; a
    code package the execution names (``args.code`` other than the setup's, ``static.code``) only the execution's:
    a script gets exactly the hyperparameters its user gave, and the launcher reads its settings from the job's
    ``Environment`` (the ``Train`` state sets them from ``derived``).

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

    A job on the fallback list ``preferences`` (the input names no ``instance_type``) has the smallest limit of the
    list's types, so ``processes_per_host`` fits whichever type SageMaker selects.

    The state's output is its input with ``run.hyperparameters`` (strings) and ``run.problems`` (a list) set.
    """
    count, key_max, value_max = hyperparameter_limits()
    pph = HP_PROCESSES_PER_HOST
    own = "true" if code is None else "$in.args.code = $in.static.code"
    builtin = {None: "true", "builtin": "$own", "own": "false"}[code]
    limits = json.dumps(dict(sorted(max_processes.items())), separators=(",", ":"))
    limit = f"$lookup({limits}, $in.args.instance_type)"
    on_type = "$in.args.instance_type"
    if preferences:
        smallest = min(processes_per_host_limit(name) for name in preferences)
        limit = f"$exists($in.args.instance_type) ? {limit} : {smallest}"
        listed = json.dumps("the fallback list " + ", ".join(preferences))
        on_type = f"($exists($in.args.instance_type) ? $in.args.instance_type : {listed})"
    return " ".join(
        f"""(
  $in := $states.input;
  $given := $in.args.hyperparameters;
  $isObject := $type($given) = 'object';
  $input := $isObject ? $given : {{}};
  $text := function($v) {{ $type($v) = 'string' ? $v : $string($v) }};
  $own := {own};
  $builtin := {builtin};
  $merged := $merge([$builtin ? $in.derived : {{}}, $own ? $in.static.base_hyperparameters : {{}}, $input]);
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
  $limit := {limit};
  $procs := $lookup($values, '{pph}');
  $procs_ok := $exists($procs) ? ($contains($procs, /{PROCESSES_PER_HOST_PATTERN}/) and $number($procs) <= $limit)
    : true;
  $procs_problem := $not($procs_ok) ? 'hyperparameters.{pph}=' & $procs & ' is not allowed on '
    & {on_type} & '; allowed: 0 (one process per GPU) or 1..' & $limit;
  $problems := $append($append($append($append(
    $isObject ? [] : ['hyperparameters=' & $string($given) & ' is not allowed; allowed: an object of name: value'],
    $type_problems), $size_problems), $count_problem), $procs_problem);
  $merge([$in, {{'run': {{'hyperparameters': $values, 'problems': $problems}}}}])
)""".split()
    )


def input_expression(dataset_names: Sequence[str], readable: Sequence[str], *, code: CodeKind = None) -> str:
    """The JSONata expression of the ``MergeInputs`` state (without the ``{% %}`` delimiters): the job's
    ``InputDataConfig`` in ``run.input_data_config``, its problems added to ``run.problems``.

    The execution input's ``inputs`` names the job's S3 channels, as the SageMaker SDK's ``fit({"training":
    "s3://..."})`` does: ``{"inputs": {"training": "s3://bucket/prefix/"}}`` or ``{"training": {"s3_uri": ...,
    "input_mode": "File"}}`` (File unless given, SageMaker's default). ``dataset`` (true/false) keeps the setup's
    dataset channels (``static.channels.dataset`` of :func:`static_channels`, named ``dataset_names``; each
    ``{data_version}`` of their strings becomes the execution's ``data_version``); by default the setup's code
    keeps them (``code``: what the setup's jobs run; with a code package, only when the execution runs the setup's
    package, ``args.code = static.code``) and code the execution names gets only its inputs. The code's channels
    (``static.channels.runtime``, the ``code`` channel reading ``args.code``) come last.

    The problems, each naming the input and what is allowed, are the rules ``gpuctl train`` applies through
    :class:`~gpu_constructs.training_spec.TrainingJobSpec`: a channel name per botocore's ``ChannelName``
    (:data:`~gpu_constructs.training_spec.CHANNEL_NAME_PATTERN`, at most 64 characters), not the runtime's own
    channels (``code``, ``sm_drivers``) nor, with the dataset, a dataset channel; an ``s3://`` URI under one of
    ``readable`` (:func:`~gpu_constructs.training_spec.readable_problem`: what the job role may read); an input
    mode of :data:`~gpu_constructs.training_spec.INPUT_MODES`; at most
    :data:`~gpu_constructs.training_spec.MAX_CHANNELS` channels in all. The ``ValidateHyperparameters`` choice
    fails on any of them, before CreateTrainingJob.
    """
    own = "true" if code is None else "$in.args.code = $in.static.code"
    names = list(dataset_names)
    modes = ", ".join(INPUT_MODES)
    q = json.dumps
    user_mode = q(USER_INPUT_MODE)
    unreadable = q(f"' is not readable by the job role; allowed: a URI under {', '.join(readable)} ({READABLE_WHERE})")
    return " ".join(
        f"""(
  $in := $states.input;
  $given := $in.args.inputs;
  $isObject := $type($given) = 'object';
  $inputs := $isObject ? $given : {{}};
  $own := {own};
  $flag := $in.args.dataset;
  $flagOk := $not($exists($flag)) or $type($flag) = 'boolean';
  $dataset := ($exists($flag) and $flagOk) ? $flag : $own;
  $version := $in.args.data_version;
  $readable := {q(list(readable))};
  $uriOf := function($v) {{ $type($v) = 'string' ? $v : $v.s3_uri }};
  $modeOf := function($v) {{ ($type($v) = 'object' and $exists($v.input_mode)) ? $v.input_mode : {user_mode} }};
  $channel := function($k) {{(
    $v := $lookup($inputs, $k);
    {{'ChannelName': $k, 'DataSource': {{'S3DataSource': {{'S3DataType': 'S3Prefix', 'S3Uri': $uriOf($v),
      'S3DataDistributionType': 'FullyReplicated'}}}}, 'InputMode': $modeOf($v)}}
  )}};
  $problem := function($k) {{(
    $v := $lookup($inputs, $k);
    $shapeOk := $type($v) = 'string' or ($type($v) = 'object' and $type($v.s3_uri) = 'string'
      and $count($filter($keys($v), function($key) {{ $not($key in ['s3_uri', 'input_mode']) }})) = 0);
    $uri := $uriOf($v);
    $mode := $modeOf($v);
    [
      $not($contains($k, /{CHANNEL_NAME_PATTERN}/) and $length($k) <= {CHANNEL_NAME_MAX})
        ? {q("channel name='")} & $k & {q("' is not allowed; allowed: " + CHANNEL_NAME_ALLOWED)},
      $k in {q(list(RESERVED_CHANNELS))} ? 'inputs.' & $k
        & {q(" is a channel of the runtime (the code package and its launcher); allowed: another name")},
      ($dataset and $k in {q(names)}) ? 'inputs.' & $k
        & {q(f" is one of the setup's dataset channels {names}; allowed: another name, or dataset: false")},
      $not($shapeOk) ? 'inputs.' & $k & '=' & $string($v)
        & {q(f" is not allowed; allowed: an s3:// URI, or an object with s3_uri and optionally input_mode ({modes})")},
      ($shapeOk and $count($filter($readable, function($p) {{ $substring($uri, 0, $length($p)) = $p }})) = 0)
        ? {q("channel '")} & $k & {q("': s3_uri='")} & $uri
        & {unreadable},
      ($shapeOk and $not($mode in {q(list(INPUT_MODES))})) ? {q("channel '")} & $k & {q("': input_mode=")}
        & $string($mode) & {q(" is not allowed; allowed: " + modes)}
    ]
  )}};
  $names := $isObject ? $keys($inputs) : [];
  $static := $in.static.{STATIC_CHANNELS};
  $versioned := function($v) {{
    $type($v) = 'string' ? $join($split($v, {q(DATA_VERSION_PLACEHOLDER)}), '' & $version)
      : $type($v) = 'array' ? $append([], $map($v, $versioned))
      : $type($v) = 'object' ? $merge($append([{{}}], $each($v, function($x, $k) {{ {{$k: $versioned($x)}} }})))
      : $v
  }};
  $codeFrom := function($c) {{ $c.ChannelName = {q(CODE_CHANNEL)} ? $merge([$c, {{'DataSource': $merge([$c.DataSource,
    {{'S3DataSource': $merge([$c.DataSource.S3DataSource, {{'S3Uri': $in.args.code}}])}}])}}]) : $c }};
  $channels := $append($append($append([], $dataset = true ? $versioned($static.{DATASET_CHANNELS}) : []),
    $map($names, $channel)), $map($versioned($static.{RUNTIME_CHANNELS}), $codeFrom));
  $problems := $append($append($append($append(
    $in.run.problems,
    ($exists($given) and $not($isObject)) ? ['inputs=' & $string($given)
      & {q(" is not allowed; allowed: an object of channel name: s3:// URI")}] : []),
    $flagOk ? [] : ['dataset=' & $string($flag) & ' is not allowed; allowed: true or false']),
    $reduce($map($names, $problem), function($all, $each) {{ $append($all, $each) }}, [])),
    $count($channels) > {MAX_CHANNELS} ? [$count($channels)
      & {q(f" input channels; allowed: at most {MAX_CHANNELS} (CreateTrainingJob)")}] : []);
  $merge([$in, {{'run': $merge([$in.run, {{'input_data_config': $channels, 'problems': $problems}}])}}])
)""".split()
    )
