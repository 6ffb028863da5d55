"""A small, faithful interpreter of the Amazon States Language parts our state machines use.

Tests feed an execution input to a *synthesized* state machine definition and read what each ``Task`` state
would send (its resource and resolved ``Parameters``/``Arguments``), where the execution fails (``Fail`` states
with their error and cause) and what it outputs. Nothing is called: ``task_results`` stands in for the services.

Behaviour follows these references (the interpreter names the rule it implements where it matters):

* the Amazon States Language specification, https://states-language.net/spec.html (states, paths, payload
  templates, choice rules, errors, retriers and catchers);
* the AWS Step Functions developer guide:
  input and output processing https://docs.aws.amazon.com/step-functions/latest/dg/concepts-input-output-filtering.html,
  paths https://docs.aws.amazon.com/step-functions/latest/dg/amazon-states-language-paths.html,
  the context object https://docs.aws.amazon.com/step-functions/latest/dg/input-output-contextobject.html,
  intrinsic functions https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html,
  Choice https://docs.aws.amazon.com/step-functions/latest/dg/state-choice.html,
  error handling https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html,
  JSONata https://docs.aws.amazon.com/step-functions/latest/dg/transforming-data.html.

Supported: Pass, Task, Choice, Wait (no time passes), Succeed and Fail states in both query languages
(``"QueryLanguage"`` on the machine or a state); JSONPath ``InputPath``, ``Parameters``, ``ResultSelector``,
``ResultPath``, ``OutputPath``, Pass ``Result``; reference paths (``$``, ``$$``, ``.name``, ``['name']``,
``[index]``); the intrinsic functions in :data:`INTRINSICS`; Choice comparison operators (string, numeric,
boolean and their ``Path`` forms, ``StringMatches``, the ``Is*`` type tests, ``And``/``Or``/``Not``); ``Retry``
and ``Catch``; JSONata ``Arguments``/``Output``/``Condition``/``Error``/``Cause`` evaluated with jsonata-python
and ``$states.input``/``$states.context``/``$states.result``/``$states.errorOutput``. Anything else in a
definition (Map, Parallel, variables, timestamps ...) raises :class:`NotImplementedError` naming the state and
the feature, so a test never silently interprets a definition differently from Step Functions.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpu_constructs.authz.assembly import ARN_FORMATS as AUTHZ_ARN_FORMATS

# --------------------------------------------------------------------------------------------------
# Sample deploy-time values (definition_from_template) and the execution's context object
# --------------------------------------------------------------------------------------------------

SAMPLE_ACCOUNT = "123456789012"
SAMPLE_REGION = "us-east-1"
SAMPLE_PARTITION = "aws"
SAMPLE_STACK_NAME = "sample-stack"
STATE_MACHINE_NAME = "sample-state-machine"
EXECUTION_NAME = "sample-execution"
START_TIME = "2025-01-01T00:00:00.000Z"

PSEUDO_PARAMETERS: dict[str, str] = {
    "AWS::AccountId": SAMPLE_ACCOUNT,
    "AWS::Region": SAMPLE_REGION,
    "AWS::Partition": SAMPLE_PARTITION,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": SAMPLE_STACK_NAME,
    "AWS::StackId": (
        f"arn:aws:cloudformation:{SAMPLE_REGION}:{SAMPLE_ACCOUNT}:stack/{SAMPLE_STACK_NAME}/"
        "00000000-0000-4000-8000-000000000000"
    ),
}

# ARN shapes of ``Fn::GetAtt <Resource>.Arn`` by resource type (the authorization model's: one table of ARN shapes).
ARN_FORMATS = AUTHZ_ARN_FORMATS

JSONPATH = "JSONPath"
JSONATA = "JSONata"

Status = Literal["SUCCEEDED", "FAILED", "PAUSED_AT_TASK"]


# --------------------------------------------------------------------------------------------------
# Results and errors
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskCall:
    """One call of a Task state: what Step Functions would send to ``resource``."""

    state: str
    resource: str
    parameters: Any  # the resolved Parameters (JSONPath) or Arguments (JSONata); the effective input without them


@dataclass
class Outcome:
    """How a run ended.

    ``output`` is the execution output when SUCCEEDED, the raw input of the Task state the run stopped at when
    PAUSED_AT_TASK, and None when FAILED (then ``error``/``cause`` hold the Fail state's or runtime error's values).
    ``visited`` lists every state entered, in order; ``tasks`` every Task call (retries included).
    """

    status: Status
    output: Any
    visited: list[str]
    tasks: list[TaskCall]
    error: str | None = None
    cause: str | None = None

    def task(self, state: str) -> TaskCall:
        """The last call of the Task state ``state``."""
        calls = [call for call in self.tasks if call.state == state]
        if not calls:
            raise KeyError(f"task state {state!r} was not called; called: {[c.state for c in self.tasks]}")
        return calls[-1]


class TaskFailed(Exception):
    """Raised by ``task_results`` to make a Task state report the error ``error`` (with ``cause``)."""

    def __init__(self, error: str, cause: str | None = None) -> None:
        super().__init__(f"{error}: {cause}" if cause is not None else error)
        self.error = error
        self.cause = cause


class DefinitionError(ValueError):
    """The definition breaks a rule of the States language (Step Functions would reject it)."""


class StepLimitExceeded(RuntimeError):
    """The execution entered more than ``max_steps`` states (a loop in the definition or the task results)."""


class _StatesError(Exception):
    """An error a state reports: a task's own (``from_task``) or a runtime error named as Step Functions names it."""

    def __init__(self, error: str, cause: str | None, from_task: bool = False) -> None:
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause
        self.from_task = from_task


class _Paused(Exception):
    def __init__(self, state_input: Any) -> None:
        super().__init__("paused")
        self.state_input = state_input


class _Failed(Exception):
    def __init__(self, error: str | None, cause: str | None) -> None:
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause


RUNTIME = "States.Runtime"
# Errors that neither a retrier nor a catcher handles, States.ALL included (developer guide, error handling).
_UNCATCHABLE = frozenset({RUNTIME, "States.DataLimitExceeded"})


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------------
# JSONPath: reference paths over the state input ($) and the context object ($$)
# --------------------------------------------------------------------------------------------------

_MISSING = object()
_PATH_SUPPORT = "supported: $ or $$ followed by .name, ['name'] and [index]"


def parse_path(path: str) -> tuple[str, list[str | int]]:
    """``$.a['b'][0]`` -> ``("$", ["a", "b", 0])``; wildcards, filters, slices and functions are not supported."""
    if not isinstance(path, str) or not path.startswith("$"):
        raise DefinitionError(f"path {path!r} is not a JSONPath; allowed: a string starting with $")
    root = "$$" if path.startswith("$$") else "$"
    i = len(root)
    steps: list[str | int] = []
    while i < len(path):
        if path.startswith("..", i):
            raise NotImplementedError(f"JSONPath {path!r}: recursive descent '..' is not supported; {_PATH_SUPPORT}")
        if path[i] == ".":
            match = re.match(r"[^.\[\]]+", path[i + 1 :])
            if not match:
                raise DefinitionError(f"JSONPath {path!r}: empty name after '.' at {i}")
            name = match.group(0)
            if name == "*" or name.endswith("()"):
                raise NotImplementedError(f"JSONPath {path!r}: {name!r} is not supported; {_PATH_SUPPORT}")
            steps.append(name)
            i += 1 + len(name)
        elif path[i] == "[":
            match = re.match(r"\[(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|(\d+))\]", path[i:])
            if not match:
                raise NotImplementedError(f"JSONPath {path!r}: selector at {i} is not supported; {_PATH_SUPPORT}")
            single, double, index = match.groups()
            steps.append(int(index) if index is not None else (single if single is not None else double))
            i += len(match.group(0))
        else:
            raise DefinitionError(f"JSONPath {path!r}: unexpected {path[i]!r} at {i}")
    return root, steps


def select(path: str, data: Any, context: Any = None) -> Any:
    """The node at ``path`` in ``data`` (``$``) or ``context`` (``$$``); :data:`_MISSING` when there is none."""
    root, steps = parse_path(path)
    node = context if root == "$$" else data
    for step in steps:
        found = (isinstance(step, int) and isinstance(node, list) and step < len(node)) or (
            isinstance(step, str) and isinstance(node, dict) and step in node
        )
        if not found:
            return _MISSING
        node = node[step]
    return node


def _set_result(path: str | None, raw_input: Any, result: Any) -> Any:
    """ResultPath: where the result goes in the state's raw input (spec, "ResultPath"); null discards it."""
    if path is None:
        return raw_input
    root, steps = parse_path(path)
    if root != "$":
        raise DefinitionError(f"ResultPath {path!r} must start with $ (the state input), not $$")
    if not steps:
        return result
    if any(isinstance(step, int) for step in steps):
        raise NotImplementedError(f"ResultPath {path!r}: array indexes are not supported; allowed: .name steps")
    output = copy.deepcopy(raw_input)
    if not isinstance(output, dict):
        raise _StatesError(
            "States.ResultPathMatchFailure", f"Unable to apply ResultPath {path!r} to input {_json(raw_input)}"
        )
    node = output
    for step in steps[:-1]:
        child = node.setdefault(step, {})
        if not isinstance(child, dict):
            raise _StatesError(
                "States.ResultPathMatchFailure", f"Unable to apply ResultPath {path!r} to input {_json(raw_input)}"
            )
        node = child
    node[steps[-1]] = result
    return output


# --------------------------------------------------------------------------------------------------
# Intrinsic functions (JSONPath payload templates, ErrorPath/CausePath)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Literal:
    value: Any
    raw: str | None = None  # a quoted string's text between the quotes, escapes kept (States.Format templates)


@dataclass(frozen=True)
class _Path:
    path: str


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[_Literal | _Path | _Call, ...]


def _unescape(raw: str, text: str) -> str:
    """Intrinsic string escapes: \\' \\{ \\} \\\\ (developer guide, "Reserved characters in intrinsic functions")."""
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "\\":
            if i + 1 >= len(raw) or raw[i + 1] not in "'{}\\":
                raise _StatesError(RUNTIME, f"open escape backslash at {i} in the intrinsic string '{raw}' of {text}")
            out.append(raw[i + 1])
            i += 2
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


class _IntrinsicParser:
    """``States.Name(arg, ...)`` where an argument is a quoted string, a number, true/false/null, a path or a call."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def parse(self) -> _Call:
        call = self._call()
        self._space()
        if self.pos != len(self.text):
            raise DefinitionError(f"intrinsic {self.text!r}: unexpected {self.text[self.pos :]!r} after the call")
        return call

    def _space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def _call(self) -> _Call:
        match = re.compile(r"States\.([A-Za-z0-9]+)\(").match(self.text, self.pos)
        if not match:
            raise DefinitionError(f"intrinsic {self.text!r}: expected States.<Name>( at {self.pos}")
        self.pos = match.end()
        args: list[_Literal | _Path | _Call] = []
        self._space()
        if self.text.startswith(")", self.pos):
            self.pos += 1
            return _Call(match.group(1), ())
        while True:
            args.append(self._argument())
            self._space()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith(")", self.pos):
                self.pos += 1
                return _Call(match.group(1), tuple(args))
            raise DefinitionError(f"intrinsic {self.text!r}: expected ',' or ')' at {self.pos}")

    def _argument(self) -> _Literal | _Path | _Call:
        self._space()
        text, start = self.text, self.pos
        if text.startswith("'", start):
            end = start + 1
            while end < len(text) and text[end] != "'":
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                raise DefinitionError(f"intrinsic {text!r}: unterminated string starting at {start}")
            self.pos = end + 1
            raw = text[start + 1 : end]
            return _Literal(_unescape(raw, text), raw)
        if text.startswith("States.", start):
            return self._call()
        if text.startswith("$", start):
            end, depth, quote = start, 0, ""
            while end < len(text):
                char = text[end]
                if quote:
                    quote = "" if char == quote else quote
                elif char in "'\"":
                    quote = char
                elif char == "[":
                    depth += 1
                elif char == "]":
                    depth -= 1
                elif depth == 0 and (char in ",)" or char.isspace()):
                    break
                end += 1
            self.pos = end
            return _Path(text[start:end])
        match = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null").match(text, start)
        if not match:
            raise DefinitionError(f"intrinsic {text!r}: unexpected argument at {start}: {text[start:]!r}")
        self.pos = match.end()
        return _Literal(json.loads(match.group(0)))


def _format_value(value: Any) -> str:
    """How States.Format prints a non-string argument: JSON for scalars, ``{k=v}``/``[a, b]`` for containers."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_format_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _states_format(template: str, escaped: bool, values: list[Any]) -> str:
    """States.Format: each ``{}`` takes the next argument; in a quoted template ``\\{`` ``\\}`` are literal braces."""
    out, i, used = [], 0, 0
    while i < len(template):
        char = template[i]
        if escaped and char == "\\":
            out.append(template[i + 1])
            i += 2
        elif template.startswith("{}", i):
            if used >= len(values):
                raise ValueError(f"the template {template!r} has more {{}} than the {len(values)} value(s) given")
            out.append(_format_value(values[used]))
            used += 1
            i += 2
        elif escaped and char in "{}":
            raise ValueError(f"unescaped {char!r} at {i} in the template {template!r}; write \\\\{char} for a literal")
        else:
            out.append(char)
            i += 1
    if used != len(values):
        raise ValueError(f"the template {template!r} has {used} {{}} but {len(values)} value(s) were given")
    return "".join(out)


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ValueError(f"{what}={_json(value)} is not allowed; allowed: an integer")
    return int(value)


def _array(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what}={_json(value)} is not allowed; allowed: an array")
    return value


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}={_json(value)} is not allowed; allowed: a string")
    return value


def _json_merge(first: Any, second: Any, deep: Any) -> dict[str, Any]:
    if deep is not False:
        raise ValueError(f"the third argument is {_json(deep)}; allowed: false (Step Functions merges shallowly only)")
    if not isinstance(first, dict) or not isinstance(second, dict):
        raise ValueError(f"arguments {_json(first)} and {_json(second)} are not allowed; allowed: two JSON objects")
    return {**first, **second}


def _string_split(text: Any, delimiters: Any) -> list[str]:
    """Every character of ``delimiters`` splits ``text``; empty pieces are dropped ("a,,b" -> ["a", "b"])."""
    text, delimiters = _string(text, "string"), _string(delimiters, "delimiter")
    if not delimiters:
        return [text] if text else []
    pattern = "|".join(re.escape(char) for char in delimiters)
    return [piece for piece in re.split(pattern, text) if piece]


def _array_get_item(array: Any, index: Any) -> Any:
    items, position = _array(array, "array"), _integer(index, "index")
    if not 0 <= position < len(items):
        raise ValueError(f"index {position} is out of range for an array of {len(items)}")
    return items[position]


def _math_add(first: Any, second: Any) -> int:
    return _integer(first, "first value") + _integer(second, "second value")


def _string_to_json(text: Any) -> Any:
    try:
        return json.loads(_string(text, "argument"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{text!r} is not JSON text: {error}") from error


# name -> (argument count, None for any; implementation, None where the interpreter evaluates it: States.Format
# needs its template as written, States.UUID the run's seeded generator).
INTRINSICS: dict[str, tuple[int | None, Callable[..., Any] | None]] = {
    "Format": (None, None),
    "UUID": (0, None),
    "StringToJson": (1, _string_to_json),
    "JsonToString": (1, _json),
    "Array": (None, lambda *args: list(args)),
    "ArrayGetItem": (2, _array_get_item),
    "ArrayLength": (1, lambda array: len(_array(array, "array"))),
    "StringSplit": (2, _string_split),
    "JsonMerge": (3, _json_merge),
    "MathAdd": (2, _math_add),
}


# --------------------------------------------------------------------------------------------------
# JSONata (jsonata-python)
# --------------------------------------------------------------------------------------------------

_JSONATA = re.compile(r"\A\{%(.*)%\}\Z", re.DOTALL)


def _import_jsonata() -> None:
    """Import jsonata-python without its side effect: on import it raises the process's recursion limit to 10,000
    and leaves it there, which other code of the same test process (a JSON parser's depth limit) must not see."""
    limit = sys.getrecursionlimit()
    try:
        import jsonata.jexception
        import jsonata.utils  # noqa: F401
    finally:
        sys.setrecursionlimit(limit)


def is_jsonata(value: Any) -> bool:
    """A JSONata expression field: a string wholly enclosed in ``{% ... %}`` (developer guide, JSONata)."""
    return isinstance(value, str) and _JSONATA.match(value) is not None


def jsonata_value(value: Any) -> Any:
    """JSON for jsonata-python, whose evaluator reads Python ``None`` as "undefined" (JSON null is a sentinel)."""
    _import_jsonata()
    from jsonata.utils import Utils

    if value is None:
        return Utils.NULL_VALUE
    if isinstance(value, dict):
        return {k: jsonata_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonata_value(v) for v in value]
    return value


def _from_jsonata(value: Any) -> Any:
    """jsonata-python's result as JSON: its null sentinel -> None, sequences -> lists, 30.0 -> 30 (JSON numbers)."""
    _import_jsonata()
    from jsonata.utils import Utils

    if isinstance(value, Utils.NullValue):
        return None
    if isinstance(value, dict):
        return {k: _from_jsonata(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_from_jsonata(v) for v in value if v is not None]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"the JSONata result {value!r} is not JSON (a function?)")


def _jsonata(expression: str, states: Mapping[str, Any]) -> Any:
    """Evaluate ``{% body %}`` with ``$states`` bound; :data:`_MISSING` when the result is undefined."""
    _import_jsonata()
    import jsonata

    match = _JSONATA.match(expression)
    if match is None:
        raise ValueError(f"{expression!r} is not a JSONata field; allowed: a string wrapped in {{% ... %}}")
    compiled = jsonata.Jsonata(match.group(1))
    compiled.set_output_convert_nulls(False)
    result = compiled.evaluate({}, {"states": {k: jsonata_value(v) for k, v in states.items()}})
    return _MISSING if result is None else _from_jsonata(result)


def evaluate_jsonata(expression: str, state_input: Any, context: Mapping[str, Any] | None = None) -> Any:
    """A JSONata field of a state (``{% ... %}``) evaluated as Step Functions does, with ``$states.input`` bound.

    ``$states.context`` is ``context`` (the context object; empty when not given). Raises ValueError when the
    expression is not wrapped in ``{% %}`` or evaluates to undefined (Step Functions reports
    States.QueryEvaluationError then).
    """
    result = _jsonata(expression, {"input": state_input, "context": dict(context or {})})
    if result is _MISSING:
        raise ValueError(f"the JSONata expression {expression!r} returned nothing (undefined)")
    return result


# --------------------------------------------------------------------------------------------------
# Choice rules (JSONPath)
# --------------------------------------------------------------------------------------------------

_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "Equals": lambda a, b: a == b,
    "LessThan": lambda a, b: a < b,
    "GreaterThan": lambda a, b: a > b,
    "LessThanEquals": lambda a, b: a <= b,
    "GreaterThanEquals": lambda a, b: a >= b,
}
_KINDS: dict[str, Callable[[Any], bool]] = {
    "String": lambda v: isinstance(v, str),
    "Numeric": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "Boolean": lambda v: isinstance(v, bool),
}
_OPERATORS = {
    f"{kind}{comparison}{suffix}"
    for kind in _KINDS
    for comparison in _COMPARISONS
    for suffix in ("", "Path")
    if kind != "Boolean" or comparison == "Equals"
}
_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "IsNull": lambda v: v is None,
    "IsString": _KINDS["String"],
    "IsNumeric": _KINDS["Numeric"],
    "IsBoolean": _KINDS["Boolean"],
}


def string_matches(value: str, pattern: str) -> bool:
    """StringMatches: ``*`` matches any run of characters, ``\\*`` a literal ``*``, ``\\\\`` a backslash (spec)."""
    regex, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1] not in "*\\":
                raise _StatesError(RUNTIME, f"open escape backslash at {i} in the StringMatches pattern {pattern!r}")
            regex.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            regex.append(".*" if char == "*" else re.escape(char))
            i += 1
    return re.fullmatch("".join(regex), value, re.DOTALL) is not None


# --------------------------------------------------------------------------------------------------
# The interpreter
# --------------------------------------------------------------------------------------------------

_COMMON = {"Type", "Comment", "QueryLanguage"}
_FIELDS: dict[tuple[str, str], set[str]] = {
    ("Pass", JSONPATH): {"Next", "End", "InputPath", "OutputPath", "Parameters", "Result", "ResultPath"},
    ("Pass", JSONATA): {"Next", "End", "Output"},
    ("Task", JSONPATH): {
        "Next",
        "End",
        "Resource",
        "InputPath",
        "OutputPath",
        "Parameters",
        "ResultSelector",
        "ResultPath",
        "Retry",
        "Catch",
        "TimeoutSeconds",
        "HeartbeatSeconds",
    },
    ("Task", JSONATA): {"Next", "End", "Resource", "Arguments", "Output", "Retry", "Catch", "TimeoutSeconds"},
    ("Choice", JSONPATH): {"Choices", "Default", "InputPath", "OutputPath"},
    ("Choice", JSONATA): {"Choices", "Default", "Output"},
    ("Wait", JSONPATH): {"Next", "End", "InputPath", "OutputPath", "Seconds", "SecondsPath"},
    ("Wait", JSONATA): {"Next", "End", "Seconds", "Output"},
    ("Succeed", JSONPATH): {"InputPath", "OutputPath"},
    ("Succeed", JSONATA): {"Output"},
    ("Fail", JSONPATH): {"Error", "ErrorPath", "Cause", "CausePath"},
    ("Fail", JSONATA): {"Error", "Cause"},
}
_TOP_LEVEL = {"StartAt", "States", "Comment", "Version", "TimeoutSeconds", "QueryLanguage"}


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class _Execution:
    def __init__(
        self,
        definition: Mapping[str, Any],
        task_results: Callable[[str, Any], Any] | None,
        context: Mapping[str, Any] | None,
        execution_input: Any,
        seed: int,
    ) -> None:
        unknown = set(definition) - _TOP_LEVEL
        if unknown:
            raise NotImplementedError(
                f"top-level field(s) {sorted(unknown)} are not supported; supported: {_TOP_LEVEL}"
            )
        if "StartAt" not in definition or not isinstance(definition.get("States"), dict):
            raise DefinitionError("a state machine needs StartAt and a States object (spec, top-level fields)")
        self.states: dict[str, Any] = definition["States"]
        self.start = definition["StartAt"]
        self.language = definition.get("QueryLanguage", JSONPATH)
        self.task_results = task_results
        self.random = random.Random(seed)
        self.visited: list[str] = []
        self.tasks: list[TaskCall] = []
        execution_arn = (
            f"arn:aws:states:{SAMPLE_REGION}:{SAMPLE_ACCOUNT}:execution:{STATE_MACHINE_NAME}:{EXECUTION_NAME}"
        )
        defaults: dict[str, Any] = {
            "Execution": {
                "Id": execution_arn,
                "Input": copy.deepcopy(execution_input),
                "Name": EXECUTION_NAME,
                "RoleArn": f"arn:aws:iam::{SAMPLE_ACCOUNT}:role/{STATE_MACHINE_NAME}-role",
                "StartTime": START_TIME,
                "RedriveCount": 0,
            },
            "StateMachine": {
                "Id": f"arn:aws:states:{SAMPLE_REGION}:{SAMPLE_ACCOUNT}:stateMachine:{STATE_MACHINE_NAME}",
                "Name": STATE_MACHINE_NAME,
            },
            "State": {"Name": "", "EnteredTime": START_TIME, "RetryCount": 0},
        }
        self.context = _deep_merge(defaults, context or {})

    # ---- the loop -------------------------------------------------------------------------------

    def run(self, execution_input: Any, max_steps: int) -> Outcome:
        name, data = self.start, copy.deepcopy(execution_input)
        try:
            while True:
                if len(self.visited) >= max_steps:
                    raise StepLimitExceeded(f"more than {max_steps} states entered; the last: {self.visited[-10:]}")
                if name not in self.states:
                    raise DefinitionError(f"state {name!r} does not exist; states: {sorted(self.states)}")
                self.visited.append(name)
                self.context["State"] = {**self.context["State"], "Name": name, "RetryCount": 0}
                try:
                    next_name, data = self._state(name, self.states[name], data)
                except _StatesError as error:
                    cause = (
                        error.cause
                        if error.from_task
                        else f"An error occurred while executing the state '{name}'. {error.cause}"
                    )
                    raise _Failed(error.error, cause) from error
                except NotImplementedError as error:
                    raise NotImplementedError(f"state {name!r}: {error}") from error
                except DefinitionError as error:
                    raise DefinitionError(f"state {name!r}: {error}") from error
                if next_name is None:
                    return Outcome("SUCCEEDED", data, self.visited, self.tasks)
                name = next_name
        except _Paused as paused:
            return Outcome("PAUSED_AT_TASK", paused.state_input, self.visited, self.tasks)
        except _Failed as failed:
            return Outcome("FAILED", None, self.visited, self.tasks, failed.error, failed.cause)

    def _state(self, name: str, state: Mapping[str, Any], raw: Any) -> tuple[str | None, Any]:
        kind = str(state.get("Type"))
        language = str(state.get("QueryLanguage", self.language))
        if language not in (JSONPATH, JSONATA):
            raise DefinitionError(f"QueryLanguage={language!r} is not allowed; allowed: JSONPath, JSONata")
        if self.language == JSONATA and language == JSONPATH:
            raise DefinitionError("a JSONPath state is not allowed in a JSONata state machine")
        if (kind, language) not in _FIELDS:
            raise NotImplementedError(
                f"{kind} states are not supported; supported: Pass, Task, Choice, Wait, Succeed, Fail"
            )
        unsupported = set(state) - _COMMON - _FIELDS[(kind, language)]
        if unsupported:
            raise NotImplementedError(
                f"field(s) {sorted(unsupported)} of a {language} {kind} state are not supported; "
                f"supported: {sorted(_FIELDS[(kind, language)])}"
            )
        jsonata = language == JSONATA
        if kind == "Fail":
            self._fail(state, raw, jsonata)
        if kind == "Choice":
            return self._choice(state, raw, jsonata)
        if kind == "Task":
            return self._task(name, state, raw, jsonata)
        if kind == "Pass":
            if jsonata:
                output = self._output(state, raw, raw)
            else:
                effective = self._parameters(state, self._path(state, "InputPath", raw))
                result = copy.deepcopy(state["Result"]) if "Result" in state else effective
                output = self._path(state, "OutputPath", _set_result(state.get("ResultPath", "$"), raw, result))
        elif kind == "Wait":
            output = self._wait(state, raw, jsonata)
        else:  # Succeed
            output = (
                self._output(state, raw, raw)
                if jsonata
                else self._path(state, "OutputPath", self._path(state, "InputPath", raw))
            )
            return None, output
        return self._transition(state), output

    @staticmethod
    def _transition(state: Mapping[str, Any]) -> str | None:
        if state.get("End") is True:
            return None
        if "Next" not in state:
            raise DefinitionError("a non-terminal state needs Next or End: true (spec, transitions)")
        return str(state["Next"])

    # ---- JSONPath processing --------------------------------------------------------------------

    def _path(self, state: Mapping[str, Any], key: str, data: Any) -> Any:
        """InputPath/OutputPath: the node at the path ($ when absent); null gives {} (spec, input and output)."""
        if key not in state:
            return data
        path = state[key]
        if path is None:
            return {}
        value = select(path, data, self.context)
        if value is _MISSING:
            raise _StatesError(RUNTIME, f"Invalid path '{path}' : No results for path: {path} in {_json(data)}")
        return value

    def _parameters(self, state: Mapping[str, Any], effective: Any, key: str = "Parameters") -> Any:
        return self.payload(state[key], effective, key) if key in state else effective

    def payload(self, template: Any, data: Any, field_name: str) -> Any:
        """A payload template: ``"name.$"`` fields take a path's node or an intrinsic's value (spec)."""
        if isinstance(template, list):
            return [self.payload(item, data, field_name) for item in template]
        if not isinstance(template, dict):
            return copy.deepcopy(template)
        out: dict[str, Any] = {}
        for key, value in template.items():
            if key.endswith(".$"):
                if not isinstance(value, str):
                    raise DefinitionError(f"field {key!r} of {field_name} must be a path or intrinsic string")
                out[key[:-2]] = self.dynamic(value, data, key)
            else:
                out[key] = self.payload(value, data, field_name)
        return out

    def dynamic(self, expression: str, data: Any, field_name: str) -> Any:
        """The value of a ``.$`` field, ErrorPath or CausePath: a path or an intrinsic function call."""
        if expression.startswith("States."):
            return self._intrinsic(_IntrinsicParser(expression).parse(), data, expression)
        value = select(expression, data, self.context)
        if value is _MISSING:
            raise _StatesError(
                RUNTIME,
                f"The JSONPath '{expression}' specified for the field '{field_name}' could not be found in the input "
                f"'{_json(data)}'",
            )
        return copy.deepcopy(value)

    def _intrinsic(self, node: _Literal | _Path | _Call, data: Any, text: str) -> Any:
        if isinstance(node, _Literal):
            return node.value
        if isinstance(node, _Path):
            value = select(node.path, data, self.context)
            if value is _MISSING:
                raise _StatesError(
                    RUNTIME,
                    f"The function '{text}' had the following error: the JSONPath '{node.path}' could not be found "
                    f"in the input '{_json(data)}'",
                )
            return copy.deepcopy(value)
        if node.name not in INTRINSICS:
            raise NotImplementedError(
                f"intrinsic function States.{node.name} in {text!r} is not supported; "
                f"supported: {', '.join('States.' + n for n in INTRINSICS)}"
            )
        arity, implementation = INTRINSICS[node.name]
        if arity is not None and len(node.args) != arity:
            raise DefinitionError(f"States.{node.name} takes {arity} argument(s), got {len(node.args)} in {text!r}")
        if node.name == "Format" and not node.args:
            raise DefinitionError(f"States.Format needs a template argument in {text!r}")
        if node.name == "UUID":
            return str(uuid.UUID(int=self.random.getrandbits(128), version=4))
        args = [self._intrinsic(arg, data, text) for arg in node.args]
        try:
            if implementation is not None:
                return implementation(*args)
            first = node.args[0]  # States.Format: a quoted template keeps its escapes until {} are found
            raw = first.raw if isinstance(first, _Literal) else None
            return _states_format(_string(args[0] if raw is None else raw, "template"), raw is not None, args[1:])
        except ValueError as error:
            raise _StatesError(
                RUNTIME, f"The function '{text}' had the following error: States.{node.name}: {error}"
            ) from error

    # ---- JSONata processing ---------------------------------------------------------------------

    def _jsonata_field(self, template: Any, raw: Any, field_name: str, **extra: Any) -> Any:
        """A JSONata-state field: ``{% %}`` strings are evaluated, inside objects and arrays too; others are literal."""
        if isinstance(template, dict):
            return {k: self._jsonata_field(v, raw, field_name, **extra) for k, v in template.items()}
        if isinstance(template, list):
            return [self._jsonata_field(v, raw, field_name, **extra) for v in template]
        if not is_jsonata(template):
            return copy.deepcopy(template)
        _import_jsonata()
        from jsonata.jexception import JException

        states = {"input": raw, "context": self.context, **extra}
        try:
            result = _jsonata(template, states)
        except (JException, TypeError) as error:
            raise _StatesError(
                "States.QueryEvaluationError",
                f"The JSONata expression '{template}' specified for the field '{field_name}' failed: {error}",
            ) from error
        if result is _MISSING:
            raise _StatesError(
                "States.QueryEvaluationError",
                f"The JSONata expression '{template}' specified for the field '{field_name}' returned nothing "
                "(undefined).",
            )
        return result

    def _output(self, fields: Mapping[str, Any], raw: Any, default: Any, key: str = "Output", **extra: Any) -> Any:
        """A JSONata state's (or catcher's) Output (or ``key``) field; ``default`` when absent."""
        if key not in fields:
            return copy.deepcopy(default)
        return self._jsonata_field(fields[key], raw, key, **extra)

    # ---- states ---------------------------------------------------------------------------------

    def _fail(self, state: Mapping[str, Any], raw: Any, jsonata: bool) -> None:
        for key in ("Error", "Cause"):
            if not jsonata and key in state and f"{key}Path" in state:
                raise DefinitionError(f"a Fail state has either {key} or {key}Path, not both (spec, Fail state)")
        values: dict[str, str | None] = {}
        for key in ("Error", "Cause"):
            if jsonata:
                value = self._jsonata_field(state[key], raw, key) if key in state else None
            elif f"{key}Path" in state:
                value = self.dynamic(state[f"{key}Path"], raw, f"{key}Path")
            else:
                value = state.get(key)
            if value is not None and not isinstance(value, str):
                raise _StatesError(RUNTIME, f"the Fail state's {key} is {_json(value)}; allowed: a string")
            values[key] = value
        raise _Failed(values["Error"], values["Cause"])

    def _choice(self, state: Mapping[str, Any], raw: Any, jsonata: bool) -> tuple[str | None, Any]:
        choices = state.get("Choices")
        if not isinstance(choices, list) or not choices:
            raise DefinitionError("Choices must be a non-empty array of Choice Rules (spec, Choice state)")
        effective = raw if jsonata else self._path(state, "InputPath", raw)
        chosen = None
        for rule in choices:
            if "Next" not in rule:
                raise DefinitionError(f"the top-level Choice Rule {rule} has no Next")
            if jsonata:
                extra = set(rule) - {"Condition", "Next", "Comment"}
                if extra:
                    raise NotImplementedError(f"field(s) {sorted(extra)} of a JSONata Choice Rule are not supported")
                matched = self._jsonata_field(rule["Condition"], raw, "Condition")
                if not isinstance(matched, bool):
                    raise _StatesError(
                        "States.QueryEvaluationError",
                        f"the Condition {rule['Condition']!r} returned {_json(matched)}; allowed: true or false",
                    )
            else:
                matched = self.rule_matches(rule, effective, top=True)
            if matched:
                chosen = rule["Next"]
                break
        if chosen is None:
            if "Default" not in state:
                raise _StatesError("States.NoChoiceMatched", "No Choice Rule matched and there is no Default.")
            chosen = state["Default"]
        output = self._output(state, raw, raw) if jsonata else self._path(state, "OutputPath", effective)
        return str(chosen), output

    def rule_matches(self, rule: Mapping[str, Any], data: Any, top: bool = False) -> bool:
        """A JSONPath Choice Rule (spec, "Choice Rules"; developer guide, Choice state)."""
        allowed_extra = {"Next", "Comment"} if top else {"Comment"}
        for combinator in ("And", "Or"):
            if combinator in rule:
                rules = rule[combinator]
                if not isinstance(rules, list) or not rules or set(rule) - {combinator} - allowed_extra:
                    raise DefinitionError(f"{combinator} must be a non-empty array of rules without Next: {rule}")
                results = (self.rule_matches(r, data) for r in rules)
                return all(results) if combinator == "And" else any(results)
        if "Not" in rule:
            if not isinstance(rule["Not"], dict) or set(rule) - {"Not"} - allowed_extra:
                raise DefinitionError(f"Not must hold a single rule without Next: {rule}")
            return not self.rule_matches(rule["Not"], data)
        operators = set(rule) - {"Variable"} - allowed_extra
        if "Variable" not in rule or len(operators) != 1:
            raise DefinitionError(f"a Choice Rule needs Variable and exactly one comparison operator: {rule}")
        (operator,) = operators
        expected, variable = rule[operator], rule["Variable"]
        actual = select(variable, data, self.context)
        if operator == "IsPresent" or operator in _TYPE_TESTS:
            if not isinstance(expected, bool):
                raise DefinitionError(f"{operator} takes true or false, got {expected!r}")
            if operator == "IsPresent":
                return (actual is not _MISSING) is expected
            # A missing field is of no type: every other type test is false (IsPresent exists for that case).
            return actual is not _MISSING and _TYPE_TESTS[operator](actual) is expected
        if operator not in _OPERATORS and operator != "StringMatches":
            raise NotImplementedError(
                f"Choice operator {operator!r} is not supported; supported: And, Or, Not, IsPresent, "
                f"{', '.join(sorted(_TYPE_TESTS))}, StringMatches, {', '.join(sorted(_OPERATORS))}"
            )
        if actual is _MISSING:
            # Developer guide (Choice state): the execution fails when the compared field is not in the input.
            raise _StatesError(
                RUNTIME, f"Invalid path '{variable}': The choice state's condition path references an invalid value."
            )
        if operator == "StringMatches":
            if not isinstance(expected, str):
                raise DefinitionError(f"StringMatches takes a string pattern, got {expected!r}")
            return isinstance(actual, str) and string_matches(actual, expected)
        kind = next(k for k in _KINDS if operator.startswith(k))
        comparison = operator[len(kind) :]
        if comparison.endswith("Path"):
            comparison = comparison[: -len("Path")]
            expected = select(_string(expected, operator), data, self.context)
            if expected is _MISSING:
                raise _StatesError(
                    RUNTIME,
                    f"Invalid path '{rule[operator]}': The choice state's condition path references an invalid value.",
                )
        elif not _KINDS[kind](expected):
            raise DefinitionError(f"{operator} takes a {kind.lower()} value, got {expected!r}")
        # Values of another type never match (developer guide: no numeric field is matched to a string value).
        return _KINDS[kind](actual) and _KINDS[kind](expected) and _COMPARISONS[comparison](actual, expected)

    def _wait(self, state: Mapping[str, Any], raw: Any, jsonata: bool) -> Any:
        """Wait: the duration is checked, no time passes."""
        if jsonata:
            seconds = self._jsonata_field(state.get("Seconds"), raw, "Seconds")
        else:
            effective = self._path(state, "InputPath", raw)
            seconds = (
                self.dynamic(state["SecondsPath"], effective, "SecondsPath")
                if "SecondsPath" in state
                else state.get("Seconds")
            )
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
            raise _StatesError(RUNTIME, f"the Wait state's Seconds is {_json(seconds)}; allowed: an integer >= 0")
        if jsonata:
            return self._output(state, raw, raw)
        return self._path(state, "OutputPath", effective)

    def _task(self, name: str, state: Mapping[str, Any], raw: Any, jsonata: bool) -> tuple[str | None, Any]:
        if not isinstance(state.get("Resource"), str):
            raise DefinitionError("a Task state needs a Resource string")
        attempts: dict[int, int] = {}
        while True:
            try:
                # Input processing runs again on a retry: $$.State.RetryCount counts the retries.
                if jsonata:
                    parameters = self._output(state, raw, raw, "Arguments")
                else:
                    parameters = self._parameters(state, self._path(state, "InputPath", raw))
                self.tasks.append(TaskCall(name, state["Resource"], copy.deepcopy(parameters)))
                if self.task_results is None:
                    raise _Paused(raw)
                return self._transition(state), self._task_output(name, state, raw, parameters, jsonata)
            except _StatesError as error:
                if error.error in _UNCATCHABLE:
                    raise
                retrier = self._matching(state.get("Retry", []), error.error, "Retry")
                if retrier is not None and attempts.get(retrier[0], 0) < retrier[1].get("MaxAttempts", 3):
                    attempts[retrier[0]] = attempts.get(retrier[0], 0) + 1
                    self.context["State"]["RetryCount"] += 1
                    continue
                catcher = self._matching(state.get("Catch", []), error.error, "Catch")
                if catcher is None:
                    raise
                return self._caught(catcher[1], raw, error, jsonata)

    def _task_output(self, name: str, state: Mapping[str, Any], raw: Any, parameters: Any, jsonata: bool) -> Any:
        """The task's result through ResultSelector, ResultPath and OutputPath (or the JSONata Output)."""
        assert self.task_results is not None
        try:
            result = self.task_results(name, copy.deepcopy(parameters))
        except TaskFailed as failed:
            raise _StatesError(failed.error, failed.cause, from_task=True) from failed
        if jsonata:
            return self._output(state, raw, result, result=result)
        selected = self._parameters(state, result, "ResultSelector")
        return self._path(state, "OutputPath", _set_result(state.get("ResultPath", "$"), raw, selected))

    @staticmethod
    def _matching(handlers: Any, error: str, field_name: str) -> tuple[int, Mapping[str, Any]] | None:
        """The first retrier/catcher whose ErrorEquals names ``error``; States.ALL matches every catchable error,
        States.TaskFailed every one but States.Timeout (developer guide, error handling)."""
        if not isinstance(handlers, list):
            raise DefinitionError(f"{field_name} must be an array")
        for index, handler in enumerate(handlers):
            names = handler.get("ErrorEquals")
            if not isinstance(names, list) or not names:
                raise DefinitionError(f"{field_name}[{index}] needs a non-empty ErrorEquals array")
            if "States.ALL" in names and (len(names) != 1 or index != len(handlers) - 1):
                raise DefinitionError(f"States.ALL must appear alone and in the last entry of {field_name}")
            extra = set(handler) - {
                "ErrorEquals",
                "Comment",
                *(
                    ("IntervalSeconds", "MaxAttempts", "BackoffRate", "MaxDelaySeconds", "JitterStrategy")
                    if field_name == "Retry"
                    else ("Next", "ResultPath", "Output")
                ),
            }
            if extra:
                raise NotImplementedError(f"field(s) {sorted(extra)} of {field_name}[{index}] are not supported")
            if error in names or "States.ALL" in names or ("States.TaskFailed" in names and error != "States.Timeout"):
                return index, handler
        return None

    def _caught(self, catcher: Mapping[str, Any], raw: Any, error: _StatesError, jsonata: bool) -> tuple[str, Any]:
        """The error output ``{"Error", "Cause"}`` goes to the catcher's ResultPath ($ when absent) of the raw input."""
        error_output: dict[str, Any] = {"Error": error.error}
        if error.cause is not None:
            error_output["Cause"] = error.cause
        if "Next" not in catcher:
            raise DefinitionError(f"catcher {catcher} has no Next")
        if jsonata:
            output = self._output(catcher, raw, error_output, errorOutput=error_output)
        else:
            output = _set_result(catcher.get("ResultPath", "$"), raw, error_output)
        return str(catcher["Next"]), output


def run(
    definition: Mapping[str, Any] | str,
    execution_input: Any,
    *,
    task_results: Callable[[str, Any], Any] | None = None,
    context: Mapping[str, Any] | None = None,
    max_steps: int = 200,
    seed: int = 0,
) -> Outcome:
    """Run ``definition`` on ``execution_input``.

    ``task_results(state_name, parameters)`` returns a Task's result (for a ``.sync`` SageMaker task, the
    Describe* response) or raises :class:`TaskFailed`; when it is None the run stops at the first Task state
    (PAUSED_AT_TASK) with that call's resolved parameters in ``outcome.tasks``. ``context`` is deep-merged over
    the sample context object (``$$``: Execution.Id/Input/Name/StartTime, StateMachine.Id/Name, State.Name ...).
    States.UUID draws from a generator seeded with ``seed``, so runs repeat. Runtime errors of the definition end
    the run FAILED with Step Functions' error name (States.Runtime, States.NoChoiceMatched ...); definitions
    this interpreter cannot run raise NotImplementedError, invalid ones DefinitionError.
    """
    parsed = json.loads(definition) if isinstance(definition, str) else definition
    return _Execution(parsed, task_results, context, execution_input, seed).run(execution_input, max_steps)


# --------------------------------------------------------------------------------------------------
# The definition in a synthesized template
# --------------------------------------------------------------------------------------------------


def sample_value(node: Mapping[str, Any], template: Mapping[str, Any]) -> Any:
    """A deterministic stand-in for a CloudFormation intrinsic (what deployment would substitute).

    * pseudo parameters: :data:`PSEUDO_PARAMETERS` (account 123456789012, region us-east-1, partition aws);
    * ``Ref X`` -> ``"X-ref"`` (the sample physical name of X);
    * ``Fn::GetAtt X.Arn`` -> an ARN of X's type from :data:`ARN_FORMATS` naming ``X-ref`` (S3 names lowercased),
      else ``arn:aws:<service of the type>:us-east-1:123456789012:X-ref``; another attribute -> ``"X-<Attribute>"``;
    * ``Fn::ImportValue N`` -> N lowercased, characters other than letters, digits, ``.`` and ``-`` as ``-``,
      plus ``-import``; longer than 63 characters (the longest S3 bucket name, so an imported bucket name stays a
      valid one): its last 54 characters after an 8-character hash of the whole; an export naming a subnet or a
      security group -> ``subnet-``/``sg-`` and 17 hex digits of its hash (the id shapes SageMaker checks);
    * ``Fn::Sub``, ``Fn::Join``, ``Fn::Select``, ``Fn::Split`` and ``Fn::FindInMap`` are evaluated over these.
    """
    resources = template.get("Resources", {})
    if not isinstance(node, Mapping) or len(node) != 1:
        raise NotImplementedError(f"{node!r} is not a single CloudFormation intrinsic function")
    ((function, argument),) = node.items()
    if function == "Ref":
        if argument in PSEUDO_PARAMETERS:
            return PSEUDO_PARAMETERS[argument]
        if argument.startswith("AWS::"):
            raise NotImplementedError(f"pseudo parameter {argument} has no sample; known: {sorted(PSEUDO_PARAMETERS)}")
        return f"{argument}-ref"
    if function == "Fn::GetAtt":
        logical, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
        if attribute != "Arn":
            return f"{logical}-{attribute}"
        kind = resources.get(logical, {}).get("Type", "")
        name = f"{logical}-ref".lower() if kind == "AWS::S3::Bucket" else f"{logical}-ref"
        service = kind.split("::")[1].lower() if kind.count("::") == 2 else "unknown"
        shape = ARN_FORMATS.get(kind, f"arn:{{partition}}:{service}:{{region}}:{{account}}:{{name}}")
        return shape.format(partition=SAMPLE_PARTITION, region=SAMPLE_REGION, account=SAMPLE_ACCOUNT, name=name)
    if function == "Fn::ImportValue":
        name = _resolve(argument, template)
        lowered, digest = str(name).lower(), hashlib.sha256(str(name).encode()).hexdigest()
        for marker, id_prefix in (("subnet", "subnet-"), ("securitygroup", "sg-")):
            if marker in lowered and "arn" not in lowered:  # ids SageMaker checks by pattern and length
                return id_prefix + digest[:17]
        sample = re.sub(r"[^a-z0-9.-]", "-", lowered) + "-import"
        if len(sample) > 63:
            sample = hashlib.sha256(sample.encode()).hexdigest()[:8] + "-" + sample[-54:].lstrip("-.")
        return sample
    if function == "Fn::Join":
        delimiter, items = argument
        return str(delimiter).join(str(_resolve(item, template)) for item in _resolve(items, template))
    if function == "Fn::Select":
        index, items = argument
        return _resolve(items, template)[int(_resolve(index, template))]
    if function == "Fn::Split":
        delimiter, text = argument
        return str(_resolve(text, template)).split(delimiter)
    if function == "Fn::FindInMap":
        name, first, second = (_resolve(part, template) for part in argument)
        return template["Mappings"][name][first][second]
    if function == "Fn::Sub":
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        values = {key: _resolve(value, template) for key, value in variables.items()}

        def substitute(match: re.Match[str]) -> str:
            body = match.group(1)
            if body.startswith("!"):
                return "${" + body[1:] + "}"
            if body in values:
                return str(values[body])
            if "." in body and not body.startswith("AWS::"):
                return str(sample_value({"Fn::GetAtt": body}, template))
            return str(sample_value({"Ref": body}, template))

        return re.sub(r"\$\{([^}]+)\}", substitute, text)
    raise NotImplementedError(
        f"CloudFormation function {function} has no sample value; supported: Ref, Fn::GetAtt, Fn::ImportValue, "
        "Fn::Join, Fn::Select, Fn::Split, Fn::FindInMap, Fn::Sub"
    )


def _resolve(value: Any, template: Mapping[str, Any]) -> Any:
    if isinstance(value, Mapping):
        return sample_value(value, template)
    if isinstance(value, list):
        return [_resolve(item, template) for item in value]
    return value


def definition_from_template(template: Mapping[str, Any], logical_id_hint: str = "StateMachine") -> dict[str, Any]:
    """The parsed ASL of the template's state machine whose logical id contains ``logical_id_hint``.

    The ``DefinitionString`` (a string, or the ``Fn::Join``/``Fn::Sub`` CDK synthesizes) is joined with every
    token replaced by :func:`sample_value` (JSON-escaped: tokens sit inside JSON strings).
    """
    machines = {
        logical: resource
        for logical, resource in template.get("Resources", {}).items()
        if resource.get("Type") == "AWS::StepFunctions::StateMachine" and logical_id_hint in logical
    }
    if len(machines) != 1:
        raise LookupError(
            f"expected one AWS::StepFunctions::StateMachine whose id contains {logical_id_hint!r}, "
            f"found {sorted(machines)}"
        )
    ((logical, machine),) = machines.items()
    body = machine.get("Properties", {}).get("DefinitionString")
    if body is None:
        raise NotImplementedError(f"{logical} has no DefinitionString (a Definition object or S3 location)")
    if isinstance(body, Mapping) and "Fn::Join" in body:
        delimiter, parts = body["Fn::Join"]
        body = delimiter.join(
            part if isinstance(part, str) else json.dumps(str(_resolve(part, template)))[1:-1] for part in parts
        )
    elif isinstance(body, Mapping):
        body = sample_value(body, template)
    parsed: dict[str, Any] = json.loads(body)
    return parsed
