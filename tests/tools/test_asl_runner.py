"""The test interpreter of the States language (tests/asl_runner.py): each feature on a tiny definition, then
the synthesized dev training state machine run end to end (parameters sent to SageMaker, every failure path)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from asl_runner import (
    DefinitionError,
    StepLimitExceeded,
    TaskFailed,
    definition_from_template,
    evaluate_jsonata,
    run,
    string_matches,
)


def machine(*states: tuple[str, dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A definition of ``states`` in order; each state without Next/End goes to the following one (last: End)."""
    named = dict(states)
    names = list(named)
    for index, name in enumerate(names):
        state = named[name]
        if state["Type"] not in ("Choice", "Succeed", "Fail") and "Next" not in state and "End" not in state:
            state["Next" if index + 1 < len(names) else "End"] = names[index + 1] if index + 1 < len(names) else True
    return {"StartAt": names[0], "States": named, **top}


def pass_state(**fields: Any) -> dict[str, Any]:
    return {"Type": "Pass", **fields}


def value_of(expression: str, data: Any, **kwargs: Any) -> Any:
    """The value of one ``.$`` payload field."""
    outcome = run(machine(("P", pass_state(Parameters={"v.$": expression}))), data, **kwargs)
    assert outcome.status == "SUCCEEDED", (outcome.error, outcome.cause)
    return outcome.output["v"]


# --------------------------------------------------------------------------------------------------
# JSONPath input and output processing
# --------------------------------------------------------------------------------------------------


def test_input_path_parameters_result_path_and_output_path() -> None:
    state = pass_state(
        InputPath="$.order",
        Parameters={
            "id.$": "$.id",
            "first.$": "$.items[0]",
            "quoted.$": "$['odd key']",
            "fixed": {"nested": [{"n.$": "$.id"}]},
            "execution.$": "$$.Execution.Name",
            "input.$": "$$.Execution.Input.order.id",
            "state.$": "$$.State.Name",
        },
        ResultPath="$.processing.request",
        OutputPath="$.processing",
    )
    outcome = run(machine(("Prepare", state)), {"order": {"id": 7, "items": ["a", "b"], "odd key": 1}, "keep": True})
    assert outcome.status == "SUCCEEDED"
    assert outcome.output == {
        "request": {
            "id": 7,
            "first": "a",
            "quoted": 1,
            "fixed": {"nested": [{"n": 7}]},
            "execution": "sample-execution",
            "input": 7,
            "state": "Prepare",
        }
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"Result": {"r": 1}, "ResultPath": None}, {"a": {"b": 1}}),  # null: the result is discarded
        ({"Result": {"r": 1}}, {"r": 1}),  # absent: $, the result replaces the input
        ({"Result": {"r": 1}, "ResultPath": "$.a.c"}, {"a": {"b": 1, "c": {"r": 1}}}),
        ({"Result": 5, "ResultPath": "$.x.y.z"}, {"a": {"b": 1}, "x": {"y": {"z": 5}}}),
        ({"InputPath": None}, {}),
        ({"OutputPath": None}, {}),
        ({"OutputPath": "$.a.b"}, 1),
    ],
)
def test_result_path_forms(fields: dict[str, Any], expected: Any) -> None:
    outcome = run(machine(("P", pass_state(**fields))), {"a": {"b": 1}})
    assert outcome.output == expected


def test_result_path_into_a_non_object_fails_the_execution() -> None:
    outcome = run(machine(("P", pass_state(Result=1, ResultPath="$.a.b"))), {"a": "text"})
    assert (outcome.status, outcome.error) == ("FAILED", "States.ResultPathMatchFailure")
    assert "Unable to apply ResultPath '$.a.b'" in outcome.cause


def test_a_missing_path_is_a_runtime_error_naming_the_path_and_field() -> None:
    outcome = run(machine(("P", pass_state(Parameters={"name.$": "$.missing"}))), {"a": 1})
    assert (outcome.status, outcome.error) == ("FAILED", "States.Runtime")
    assert outcome.cause == (
        "An error occurred while executing the state 'P'. The JSONPath '$.missing' specified for the field "
        "'name.$' could not be found in the input '{\"a\":1}'"
    )


def test_context_object_can_be_overridden() -> None:
    context = {"Execution": {"Name": "nightly", "Id": "arn:aws:states:eu-west-1:1:execution:m:nightly"}}
    assert value_of("$$.Execution", {}, context=context)["Name"] == "nightly"
    assert value_of("$$.Execution.Id", {}, context=context).endswith(":nightly")
    assert value_of("$$.Execution.Input", {"x": 1}) == {"x": 1}
    assert value_of("$$.Execution.Id", {}) == (
        "arn:aws:states:us-east-1:123456789012:execution:sample-state-machine:sample-execution"
    )


# --------------------------------------------------------------------------------------------------
# Intrinsic functions
# --------------------------------------------------------------------------------------------------

DATA = {"name": "Arnav", "n": 3, "csv": "a,b,,c", "obj": {"k": "v", "n": 1}, "list": [1, 2, 3], "text": '{"x":[1]}'}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("States.Format('Hello, my name is {}.', $.name)", "Hello, my name is Arnav."),
        (r"States.Format('it\'s \{{}\} \\ {}', $.name, $.n)", "it's {Arnav} \\ 3"),
        ("States.Format('{}|{}|{}|{}', $.n, true, null, $.obj)", "3|true|null|{k=v, n=1}"),
        ("States.StringToJson($.text)", {"x": [1]}),
        ("States.JsonToString($.obj)", '{"k":"v","n":1}'),
        ("States.Array($.n, 'two', 3.5, false)", [3, "two", 3.5, False]),
        ("States.ArrayGetItem($.list, 1)", 2),
        ("States.ArrayLength($.list)", 3),
        ("States.StringSplit($.csv, ',')", ["a", "b", "c"]),
        ("States.StringSplit('This.is+a,test=string', '.+,=')", ["This", "is", "a", "test", "string"]),
        ('States.JsonMerge($.obj, States.StringToJson(\'{"n": {"deep": 1}}\'), false)', {"k": "v", "n": {"deep": 1}}),
        ("States.MathAdd($.n, -10)", -7),
        ("States.ArrayGetItem(States.StringSplit(States.Format('{}-{}', $.name, $.n), '-'), 1)", "3"),
    ],
)
def test_intrinsic_functions(expression: str, expected: Any) -> None:
    assert value_of(expression, DATA) == expected


def test_intrinsic_escapes_as_written_in_json() -> None:
    """The developer guide's JSON spelling: \\\\' is ', \\\\{ is {, \\\\} is }, \\\\\\\\ is \\."""
    definition = json.loads(
        r"""{"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true,
        "Parameters": {"v.$": "States.Format('\\'{}\\' \\{x\\} a\\\\b', $.name)"}}}}"""
    )
    assert definition["States"]["P"]["Parameters"]["v.$"] == r"States.Format('\'{}\' \{x\} a\\b', $.name)"
    assert run(definition, DATA).output == {"v": "'Arnav' {x} a\\b"}


def test_uuid_is_a_version_4_uuid_repeatable_from_the_seed() -> None:
    first = value_of("States.UUID()", {})
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", first)
    assert value_of("States.UUID()", {}) == first
    assert value_of("States.UUID()", {}, seed=1) != first


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("States.ArrayGetItem($.list, 5)", "index 5 is out of range for an array of 3"),
        ("States.JsonMerge($.obj, $.obj, true)", "allowed: false (Step Functions merges shallowly only)"),
        ("States.JsonMerge($.obj, $.list, false)", "allowed: two JSON objects"),
        ("States.Format('{} {}', $.name)", "has more {} than the 1 value(s) given"),
        ("States.Format('{', $.name)", "unescaped '{' at 0"),
        ("States.MathAdd($.n, 1.5)", "second value=1.5 is not allowed; allowed: an integer"),
        ("States.StringToJson($.name)", "'Arnav' is not JSON text"),
        (r"States.Format('a\b')", "open escape backslash"),
        ("States.Format('{}', $.nope)", "the JSONPath '$.nope' could not be found"),
    ],
)
def test_intrinsic_failures_are_runtime_errors(expression: str, message: str) -> None:
    outcome = run(machine(("P", pass_state(Parameters={"v.$": expression}))), DATA)
    assert (outcome.status, outcome.error) == ("FAILED", "States.Runtime")
    assert message in outcome.cause


def test_unsupported_intrinsics_and_paths_name_the_state_and_feature() -> None:
    with pytest.raises(NotImplementedError, match=r"state 'P': intrinsic function States.Hash .* not supported"):
        value_of("States.Hash($.name, 'SHA-1')", DATA)
    with pytest.raises(NotImplementedError, match=r"state 'P': JSONPath '\$.list\[\*\]'"):
        value_of("$.list[*]", DATA)
    with pytest.raises(DefinitionError, match=r"state 'P': States.ArrayLength takes 1 argument"):
        value_of("States.ArrayLength($.list, 1)", DATA)


# --------------------------------------------------------------------------------------------------
# Choice
# --------------------------------------------------------------------------------------------------


def choose(rule: dict[str, Any], data: Any) -> str:
    """Where a Choice with ``rule`` (-> Yes, default No) goes."""
    definition = machine(
        ("C", {"Type": "Choice", "Choices": [{**rule, "Next": "Yes"}], "Default": "No"}),
        ("Yes", {"Type": "Succeed"}),
        ("No", {"Type": "Succeed"}),
    )
    outcome = run(definition, data)
    assert outcome.status == "SUCCEEDED", (outcome.error, outcome.cause)
    return outcome.visited[-1]


INPUT = {"s": "gpu-dev-train-1", "n": 5, "b": True, "z": None, "other": "gpu-dev-train-1", "f": 2.5}


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"Variable": "$.s", "StringEquals": "gpu-dev-train-1"}, "Yes"),
        ({"Variable": "$.s", "StringEquals": "gpu"}, "No"),
        ({"Variable": "$.s", "StringEqualsPath": "$.other"}, "Yes"),
        ({"Variable": "$.s", "StringMatches": "gpu-dev-train-*"}, "Yes"),
        ({"Variable": "$.s", "StringMatches": "gpu-prod-*"}, "No"),
        ({"Variable": "$.s", "StringLessThan": "h"}, "Yes"),
        ({"Variable": "$.n", "StringEquals": "5"}, "No"),  # a number never matches a string comparison
        ({"Variable": "$.s", "IsString": True}, "Yes"),
        ({"Variable": "$.n", "IsString": True}, "No"),
        ({"Variable": "$.missing", "IsString": False}, "No"),  # a missing field has no type
        ({"Variable": "$.missing", "IsPresent": False}, "Yes"),
        ({"Variable": "$.z", "IsPresent": True}, "Yes"),
        ({"Variable": "$.z", "IsNull": True}, "Yes"),
        ({"Variable": "$.b", "IsBoolean": True}, "Yes"),
        ({"Variable": "$.b", "IsNumeric": True}, "No"),  # true is not a number
        ({"Variable": "$.f", "IsNumeric": True}, "Yes"),
        ({"Variable": "$.b", "BooleanEquals": True}, "Yes"),
        ({"Variable": "$.s", "BooleanEquals": True}, "No"),
        ({"Variable": "$.n", "NumericEquals": 5}, "Yes"),
        ({"Variable": "$.n", "NumericGreaterThan": 5}, "No"),
        ({"Variable": "$.n", "NumericGreaterThanEquals": 5}, "Yes"),
        ({"Variable": "$.n", "NumericLessThan": 5.5}, "Yes"),
        ({"Variable": "$.n", "NumericLessThanEqualsPath": "$.f"}, "No"),
        ({"And": [{"Variable": "$.s", "IsString": True}, {"Variable": "$.n", "NumericEquals": 5}]}, "Yes"),
        ({"And": [{"Variable": "$.s", "IsString": True}, {"Variable": "$.n", "NumericEquals": 6}]}, "No"),
        ({"Or": [{"Variable": "$.n", "NumericEquals": 6}, {"Variable": "$.b", "BooleanEquals": True}]}, "Yes"),
        ({"Not": {"Variable": "$.s", "StringEquals": "x"}}, "Yes"),
    ],
)
def test_choice_rules(rule: dict[str, Any], expected: str) -> None:
    assert choose(rule, INPUT) == expected


@pytest.mark.parametrize(
    ("value", "pattern", "expected"),
    [
        ("foo23.log", "foo*.log", True),
        ("zebra.log", "*.log", True),
        ("foobar.zebra", "foo*.*", True),
        ("gpu-dev-train", "gpu-dev-train-*", False),
        ("a*b", r"a\*b", True),  # \* is a literal asterisk
        ("axb", r"a\*b", False),
        ("a\\b", r"a\\b", True),  # \\ is a backslash
        ("a.b", "a?b", False),  # no character but * is special
        ("line\nbreak", "line*", True),
    ],
)
def test_string_matches_wildcards_and_escapes(value: str, pattern: str, expected: bool) -> None:
    assert string_matches(value, pattern) is expected


def test_choice_failures() -> None:
    outcome = run(
        machine(("C", {"Type": "Choice", "Choices": [{"Variable": "$.x", "StringEquals": "a", "Next": "C"}]})), {}
    )
    assert (outcome.error, outcome.cause) == (
        "States.Runtime",
        "An error occurred while executing the state 'C'. Invalid path '$.x': The choice state's condition path "
        "references an invalid value.",
    )
    outcome = run(
        machine(("C", {"Type": "Choice", "Choices": [{"Variable": "$.x", "StringEquals": "a", "Next": "C"}]})),
        {"x": "b"},
    )
    assert (outcome.status, outcome.error) == ("FAILED", "States.NoChoiceMatched")
    with pytest.raises(NotImplementedError, match=r"state 'C': Choice operator 'TimestampEquals' is not supported"):
        choose({"Variable": "$.s", "TimestampEquals": "2016-03-14T01:59:00Z"}, INPUT)
    with pytest.raises(DefinitionError, match=r"NumericEquals takes a numeric value, got '5'"):
        choose({"Variable": "$.n", "NumericEquals": "5"}, INPUT)


# --------------------------------------------------------------------------------------------------
# Fail, Task, Retry and Catch
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "cause"),
    [
        ({"Error": "Bad", "Cause": "because"}, "Bad", "because"),
        ({"ErrorPath": "$.e", "CausePath": "$.c"}, "E1", "C1"),
        ({"Error": "Bad", "CausePath": "States.Format('job {} failed: {}', $.job, $.c)"}, "Bad", "job j-1 failed: C1"),
        ({}, None, None),
    ],
)
def test_fail(fields: dict[str, Any], error: str | None, cause: str | None) -> None:
    outcome = run(machine(("F", {"Type": "Fail", **fields})), {"e": "E1", "c": "C1", "job": "j-1"})
    assert (outcome.status, outcome.error, outcome.cause, outcome.output) == ("FAILED", error, cause, None)


def test_fail_with_both_error_and_error_path_is_invalid() -> None:
    with pytest.raises(DefinitionError, match="either Error or ErrorPath"):
        run(machine(("F", {"Type": "Fail", "Error": "A", "ErrorPath": "$.e"})), {"e": "x"})


TASK = {
    "Type": "Task",
    "Resource": "arn:aws:states:::sagemaker:createTrainingJob.sync",
    "InputPath": "$.args",
    "Parameters": {"TrainingJobName.$": "$.name", "Fixed": 1},
    "ResultSelector": {"status.$": "$.TrainingJobStatus"},
    "ResultPath": "$.result",
}


def test_a_task_pauses_with_its_resolved_parameters_without_task_results() -> None:
    outcome = run(
        machine(("Start", pass_state()), ("Train", dict(TASK)), ("After", pass_state())), {"args": {"name": "j"}}
    )
    assert outcome.status == "PAUSED_AT_TASK"
    assert outcome.visited == ["Start", "Train"]
    assert outcome.output == {"args": {"name": "j"}}  # the Task state's raw input
    call = outcome.task("Train")
    assert (call.resource, call.parameters) == (TASK["Resource"], {"TrainingJobName": "j", "Fixed": 1})


def test_a_task_result_goes_through_result_selector_and_result_path() -> None:
    seen: list[tuple[str, Any]] = []

    def results(state: str, parameters: Any) -> Any:
        seen.append((state, parameters))
        return {"TrainingJobStatus": "Completed", "Other": 1}

    outcome = run(machine(("Train", dict(TASK))), {"args": {"name": "j"}}, task_results=results)
    assert outcome.status == "SUCCEEDED"
    assert seen == [("Train", {"TrainingJobName": "j", "Fixed": 1})]
    assert outcome.output == {"args": {"name": "j"}, "result": {"status": "Completed"}}


def test_catch_puts_the_error_output_at_its_result_path() -> None:
    task = {
        **TASK,
        "Catch": [
            {"ErrorEquals": ["SageMaker.Throttled"], "Next": "Throttled"},
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Recover"},
        ],
    }

    def failing(error: str) -> Any:
        def results(state: str, parameters: Any) -> Any:
            raise TaskFailed(error, "the job broke")

        return results

    definition = machine(("Train", task), ("Recover", pass_state(End=True)), ("Throttled", pass_state(End=True)))
    outcome = run(definition, {"args": {"name": "j"}}, task_results=failing("States.TaskFailed"))
    assert outcome.visited == ["Train", "Recover"]
    assert outcome.output == {"args": {"name": "j"}, "error": {"Error": "States.TaskFailed", "Cause": "the job broke"}}
    outcome = run(definition, {"args": {"name": "j"}}, task_results=failing("SageMaker.Throttled"))
    assert outcome.visited == ["Train", "Throttled"]
    assert outcome.output == {"Error": "SageMaker.Throttled", "Cause": "the job broke"}  # ResultPath absent: $


def test_an_uncaught_task_error_fails_the_execution_with_the_tasks_error_and_cause() -> None:
    def results(state: str, parameters: Any) -> Any:
        raise TaskFailed("SageMaker.ValidationException", "bad instance type")

    outcome = run(machine(("Train", dict(TASK))), {"args": {"name": "j"}}, task_results=results)
    assert (outcome.status, outcome.error, outcome.cause) == (
        "FAILED",
        "SageMaker.ValidationException",
        "bad instance type",
    )


def test_retry_calls_the_task_again_up_to_max_attempts_then_catch_applies() -> None:
    task = {
        **TASK,
        "Parameters": {"attempt.$": "$$.State.RetryCount"},
        "Retry": [{"ErrorEquals": ["Transient"], "MaxAttempts": 2}],
        "Catch": [{"ErrorEquals": ["States.TaskFailed"], "Next": "Recover"}],
        "End": True,
    }
    definition = machine(("Train", task), ("Recover", pass_state()))

    def flaky(failures: int) -> Any:
        def results(state: str, parameters: Any) -> Any:
            if parameters["attempt"] < failures:
                raise TaskFailed("Transient")
            return {"TrainingJobStatus": "Completed"}

        return results

    outcome = run(definition, {"args": {}}, task_results=flaky(2))
    assert outcome.status == "SUCCEEDED" and outcome.visited == ["Train"]
    assert [call.parameters for call in outcome.tasks] == [{"attempt": 0}, {"attempt": 1}, {"attempt": 2}]
    outcome = run(definition, {"args": {}}, task_results=flaky(3))
    assert outcome.visited == ["Train", "Recover"] and len(outcome.tasks) == 3
    assert outcome.output == {"Error": "Transient"}  # no Cause given


# --------------------------------------------------------------------------------------------------
# JSONata
# --------------------------------------------------------------------------------------------------


def test_jsonata_states() -> None:
    definition = machine(
        (
            "Shape",
            pass_state(
                Output={
                    "n": "{% $states.input.n * 2 %}",
                    "who": "{% $states.context.Execution.Name %}",
                    "z": "{% $states.input.z %}",
                    "lit": "x",
                }
            ),
        ),
        (
            "Big?",
            {
                "Type": "Choice",
                "Choices": [{"Condition": "{% $states.input.n > 10 %}", "Next": "TooBig"}],
                "Default": "Call",
            },
        ),
        (
            "Call",
            {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:s3:getObject",
                "Arguments": {"Key": "{% 'k-' & $states.input.n %}"},
                "Output": "{% $merge([$states.input, {'body': $states.result.Body}]) %}",
                "End": True,
            },
        ),
        ("TooBig", {"Type": "Fail", "Error": "TooBig", "Cause": "{% 'n=' & $states.input.n & ' is over 10' %}"}),
        QueryLanguage="JSONata",
    )
    outcome = run(definition, {"n": 4, "z": None}, task_results=lambda state, args: {"Body": f"body of {args['Key']}"})
    assert outcome.status == "SUCCEEDED"
    assert outcome.output == {"n": 8, "who": "sample-execution", "z": None, "lit": "x", "body": "body of k-8"}
    outcome = run(definition, {"n": 6, "z": 1})
    assert (outcome.status, outcome.error, outcome.cause) == ("FAILED", "TooBig", "n=12 is over 10")


def test_jsonata_state_in_a_jsonpath_machine_and_its_errors() -> None:
    definition = machine(
        ("Set", pass_state(Result={"a": 1}, ResultPath="$.r")),
        (
            "Check",
            {
                "Type": "Choice",
                "QueryLanguage": "JSONata",
                "Choices": [{"Condition": "{% $states.input.r.a %}", "Next": "Done"}],
                "Default": "Done",
            },
        ),
        ("Done", {"Type": "Succeed"}),
    )
    outcome = run(definition, {})
    assert (outcome.status, outcome.error) == ("FAILED", "States.QueryEvaluationError")
    assert "returned 1; allowed: true or false" in outcome.cause
    undefined = machine(("P", pass_state(QueryLanguage="JSONata", Output="{% $states.input.nope %}")))
    outcome = run(undefined, {})
    assert outcome.error == "States.QueryEvaluationError" and "returned nothing (undefined)" in outcome.cause


def test_evaluate_jsonata() -> None:
    assert evaluate_jsonata("{% $states.input.a ? 'yes' : 'no' %}", {"a": True}) == "yes"
    assert evaluate_jsonata("{% $states.input.a %}", {"a": None}) is None  # JSON null, not undefined
    with pytest.raises(ValueError, match="returned nothing"):
        evaluate_jsonata("{% $states.input.b %}", {"a": 1})
    with pytest.raises(ValueError, match="is not a JSONata field"):
        evaluate_jsonata("$states.input", {})


# --------------------------------------------------------------------------------------------------
# What the interpreter refuses
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"Type": "Map", "End": True}, r"state 'S': Map states are not supported"),
        (pass_state(Assign={"x": 1}, End=True), r"state 'S': field\(s\) \['Assign'\] of a JSONPath Pass state"),
        (pass_state(QueryLanguage="JSONata", Parameters={}, End=True), r"\['Parameters'\] of a JSONata Pass state"),
        ({"Type": "Wait", "Timestamp": "2030-01-01T00:00:00Z", "End": True}, r"\['Timestamp'\] of a JSONPath Wait"),
    ],
)
def test_unsupported_features_raise(state: dict[str, Any], message: str) -> None:
    with pytest.raises(NotImplementedError, match=message):
        run({"StartAt": "S", "States": {"S": state}}, {})


def test_wait_passes_no_time_and_a_loop_hits_the_step_limit() -> None:
    assert run(machine(("W", {"Type": "Wait", "SecondsPath": "$.s"})), {"s": 5}).output == {"s": 5}
    loop = machine(("A", pass_state(Next="B")), ("B", pass_state(Next="A")))
    with pytest.raises(StepLimitExceeded, match=r"more than 10 states entered"):
        run(loop, {}, max_steps=10)


# --------------------------------------------------------------------------------------------------
# Definitions in templates
# --------------------------------------------------------------------------------------------------


def test_definition_from_template_substitutes_sample_values() -> None:
    template = {
        "Resources": {
            "Role1": {"Type": "AWS::IAM::Role"},
            "Bucket1": {"Type": "AWS::S3::Bucket"},
            "Fn": {"Type": "AWS::Lambda::Function"},
            "MyStateMachineABC": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "DefinitionString": {
                        "Fn::Join": [
                            "",
                            [
                                '{"StartAt":"P","States":{"P":{"Type":"Pass","End":true,"Result":{"role":"',
                                {"Fn::GetAtt": ["Role1", "Arn"]},
                                '","bucket":"',
                                {"Ref": "Bucket1"},
                                '","bucketArn":"',
                                {"Fn::GetAtt": ["Bucket1", "Arn"]},
                                '","fn":"',
                                {"Fn::GetAtt": ["Fn", "Arn"]},
                                '","where":"',
                                {"Fn::Sub": "${AWS::Partition}:${AWS::Region}:${AWS::AccountId}:${Bucket1}:${!Lit}"},
                                '","imported":"',
                                {"Fn::ImportValue": 'data:Exports"Odd'},
                                '"}}}}',
                            ],
                        ]
                    }
                },
            },
        }
    }
    result = run(definition_from_template(template), {}).output
    assert result == {
        "role": "arn:aws:iam::123456789012:role/Role1-ref",
        "bucket": "Bucket1-ref",
        "bucketArn": "arn:aws:s3:::bucket1-ref",
        "fn": "arn:aws:lambda:us-east-1:123456789012:function:Fn-ref",
        "where": "aws:us-east-1:123456789012:Bucket1-ref:${Lit}",
        "imported": "data-exports-odd-import",
    }
    with pytest.raises(LookupError, match="whose id contains 'Nope'"):
        definition_from_template(template, logical_id_hint="Nope")


# --------------------------------------------------------------------------------------------------
# The synthesized dev training state machine
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev(synth: Any) -> dict[str, Any]:
    return definition_from_template(synth("dev").template("training"))


#: dev trains on a fallback list unless the execution names a type; these tests run the one-type path (the list's
#: path: tests/constructs/training/test_fallback_states.py).
ONE_TYPE = {"instance_type": "ml.g5.xlarge"}


def completed_job(state: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """What createTrainingJob.sync returns (DescribeTrainingJob) for a completed job; processing jobs complete."""
    if state == "ShardDataset":
        return {"ProcessingJobName": parameters["ProcessingJobName"], "ProcessingJobStatus": "Completed"}
    assert state == "Train", state
    name = parameters["TrainingJobName"]
    return {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}",
        "TrainingJobStatus": "Completed",
        "ModelArtifacts": {"S3ModelArtifacts": f"s3://artifacts/output/{name}/output/model.tar.gz"},
        "FinalMetricDataList": [{"MetricName": "validation:accuracy", "Value": 0.76}],
        "TrainingTimeInSeconds": 3600,
        "BillableTimeInSeconds": 3600,
    }


def test_dev_defaults_reach_train_with_sagemaker_ready_parameters(dev: dict[str, Any]) -> None:
    outcome = run(dev, ONE_TYPE)
    assert outcome.status == "PAUSED_AT_TASK"
    assert outcome.visited[-3:] == ["PrepareData?", "TrainOnList?", "Train"]
    train = outcome.task("Train")
    assert train.resource == "arn:aws:states:::sagemaker:createTrainingJob.sync"
    parameters = train.parameters
    assert re.fullmatch(r"gpu-dev-train-[0-9a-f]{8}", parameters["TrainingJobName"])
    assert parameters["RoleArn"].startswith("arn:aws:iam::123456789012:role/")
    hyperparameters = parameters["HyperParameters"]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in hyperparameters.items())
    expected = {"processes_per_host": "1", "num_workers": "2", "arch": "resnet50", "epochs": "10", "batch_size": "128"}
    assert {k: hyperparameters.get(k) for k in expected} == expected
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in parameters["InputDataConfig"]}
    assert "/imagenet/v1/train/" in channels["train"] and "/imagenet/v1/validation/" in channels["validation"]
    assert parameters["ResourceConfig"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100}
    assert '.$"' not in json.dumps(parameters)  # every path and intrinsic was resolved
    assert run(dev, ONE_TYPE).task("Train").parameters["TrainingJobName"] == parameters["TrainingJobName"]  # seeded


def test_dev_execution_input_overrides_the_defaults(dev: dict[str, Any]) -> None:
    parameters = run(dev, {**ONE_TYPE, "hyperparameters": {"epochs": 30, "amp": True}}).task("Train").parameters
    assert parameters["HyperParameters"]["epochs"] == "30" and parameters["HyperParameters"]["amp"] == "true"
    given = {"job_name": "gpu-dev-train-mine", "instance_type": "ml.g5.12xlarge", "data_version": "v7"}
    parameters = run(dev, given).task("Train").parameters
    assert parameters["TrainingJobName"] == "gpu-dev-train-mine"
    assert parameters["ResourceConfig"]["InstanceType"] == "ml.g5.12xlarge"
    assert {k: parameters["HyperParameters"][k] for k in ("processes_per_host", "num_workers")} == {
        "processes_per_host": "4",
        "num_workers": "10",
    }
    (train,) = [c for c in parameters["InputDataConfig"] if c["ChannelName"] == "train"]
    assert "/imagenet/v7/train/" in train["DataSource"]["S3DataSource"]["S3Uri"]


@pytest.mark.parametrize(
    ("execution_input", "fail_state", "cause"),
    [
        (
            {"job_name": "other-x"},
            "InvalidJobName",
            "job_name other-x is not allowed; allowed: a name that starts with gpu-dev-train- ",
        ),
        (
            {"instance_type": "ml.m5.xlarge"},
            "InstanceTypeNotAllowed",
            "instance_type ml.m5.xlarge is not allowed for this pipeline; allowed: ml.g4dn.xlarge, ",
        ),
        (
            {**ONE_TYPE, "hyperparameters": {"processes_per_host": 16}},
            "InvalidHyperparameters",
            "The execution input is not valid: hyperparameters.processes_per_host=16 is not allowed on ml.g5.xlarge",
        ),
    ],
)
def test_dev_invalid_input_fails_before_sagemaker_is_called(
    dev: dict[str, Any], execution_input: dict[str, Any], fail_state: str, cause: str
) -> None:
    outcome = run(dev, execution_input)
    assert (outcome.status, outcome.error, outcome.visited[-1], outcome.tasks) == (
        "FAILED",
        "InvalidInput",
        fail_state,
        [],
    )
    assert outcome.cause.startswith(cause)


def test_dev_prepare_shards_the_dataset_before_training(dev: dict[str, Any]) -> None:
    outcome = run(dev, {**ONE_TYPE, "prepare": True, "data_version": "v2"})
    assert (outcome.status, outcome.visited[-1]) == ("PAUSED_AT_TASK", "ShardDataset")
    shard = outcome.task("ShardDataset")
    assert shard.resource == "arn:aws:states:::sagemaker:createProcessingJob.sync"
    assert re.fullmatch(r"gpu-dev-train-shard-[0-9a-f]{8}", shard.parameters["ProcessingJobName"])
    outputs = {o["OutputName"]: o["S3Output"]["S3Uri"] for o in shard.parameters["ProcessingOutputConfig"]["Outputs"]}
    assert "/imagenet/v2/train/" in outputs["train"] and "/imagenet/v2/validation/" in outputs["validation"]
    outcome = run(dev, {**ONE_TYPE, "prepare": True, "data_version": "v2"}, task_results=completed_job)
    assert outcome.status == "SUCCEEDED"
    assert [call.state for call in outcome.tasks] == ["ShardDataset", "Train"]


def test_dev_completed_job_gives_the_model_artifact(dev: dict[str, Any]) -> None:
    outcome = run(dev, ONE_TYPE, task_results=completed_job)
    assert outcome.status == "SUCCEEDED"
    name = outcome.task("Train").parameters["TrainingJobName"]
    assert outcome.output["model_artifact"] == f"s3://artifacts/output/{name}/output/model.tar.gz"
    assert outcome.output["status"] == "Completed" and outcome.output["training_job_name"] == name
    assert outcome.output["final_metrics"] == [{"MetricName": "validation:accuracy", "Value": 0.76}]
    assert outcome.output["hyperparameters"]["num_workers"] == "2"


def test_dev_failed_job_ends_with_the_jobs_failure_reason(dev: dict[str, Any]) -> None:
    def results(state: str, parameters: dict[str, Any]) -> dict[str, Any]:
        if state == "Train":
            raise TaskFailed("States.TaskFailed", "SageMaker training job failed")
        assert state == "DescribeFailedTrainingJob"
        return {**parameters, "TrainingJobStatus": "Failed", "FailureReason": "CUDA out of memory"}

    outcome = run(dev, ONE_TYPE, task_results=results)
    name = outcome.task("Train").parameters["TrainingJobName"]
    describe = outcome.task("DescribeFailedTrainingJob")
    assert describe.resource == "arn:aws:states:::aws-sdk:sagemaker:describeTrainingJob"
    assert describe.parameters == {"TrainingJobName": name}
    assert outcome.visited[-3:] == ["DescribeFailedTrainingJob", "SummarizeFailure", "TrainingJobFailed"]
    assert (outcome.status, outcome.error) == ("FAILED", "TrainingJobFailed")
    assert outcome.cause == f"Training job {name} ended Failed: CUDA out of memory"


def test_dev_job_that_was_never_created_ends_with_the_create_error(dev: dict[str, Any]) -> None:
    def results(state: str, parameters: dict[str, Any]) -> dict[str, Any]:
        if state == "Train":
            raise TaskFailed("SageMaker.ResourceLimitExceededException", "account quota for ml.g5.xlarge is 0")
        raise TaskFailed("SageMaker.ValidationException", "Requested resource not found")

    outcome = run(dev, ONE_TYPE, task_results=results)
    assert outcome.visited[-1] == "TrainingJobNotCreated"
    assert (outcome.status, outcome.error, outcome.cause) == (
        "FAILED",
        "SageMaker.ResourceLimitExceededException",
        "account quota for ml.g5.xlarge is 0",
    )
