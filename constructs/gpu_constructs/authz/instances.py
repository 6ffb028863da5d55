"""The AWS requests an instance's own script makes with its role, read from the synthesized templates.

Two journeys, each derived from what the cloud assembly holds rather than from the constructs:

* **a fleet instance's boot** (:func:`fleet_boot_journeys`): for each ``AWS::AutoScaling::AutoScalingGroup``, its
  launch template's ``UserData`` (the rendered boot script), the role of its instance profile (the principal:
  processes on the instance sign with that role's temporary credentials, which the instance metadata service
  serves; EC2 User Guide, "IAM roles for Amazon EC2"), the group's name and its launch lifecycle hooks;
* **a notebook instance's start** (:func:`notebook_start_journeys`): for each ``AWS::SageMaker::NotebookInstance``,
  its lifecycle configuration's ``OnStart`` script, run with the notebook's execution role (``RoleArn``), plus the
  log stream SageMaker writes the script's output to with that role: "View CloudWatch Logs for notebook instance
  lifecycle configurations in log group ``/aws/sagemaker/NotebookInstances`` in log stream
  ``[notebook-instance-name]/[LifecycleConfigHook]``" (SageMaker API Reference,
  CreateNotebookInstanceLifecycleConfig).

The requests come from the script text (:func:`cli_calls`): every ``aws <service> <command>`` the script runs
(outside quotes, comments and here-documents) is looked up in :data:`CLI_COMMANDS`, the table of the AWS CLI
commands this module knows, each mapped to the IAM actions and resources the Service Authorization Reference
gives for its API operation. A command that is not in the table raises :class:`UnmappedCommand`: a script that
gains an AWS call gains its authorization check, or fails. Arguments are the script's settings (the ``export
NAME='value'`` lines the constructs render above the script, resolved by
:class:`~gpu_constructs.authz.assembly.Assembly`, then the script's own ``NAME=${NAME:-default}`` defaults);
values known only at run time (the instance id, a local path) are stand-ins. An argument that names the resource
and resolves to the empty string means the call is not made (each script guards its optional calls by that
setting: no hook, no package).

Besides the CLI, the boot script starts the CloudWatch agent (``amazon-cloudwatch-agent-ctl -a fetch-config``),
which then calls AWS with the instance's role (amazon-cloudwatch-agent source, ``plugins/outputs/cloudwatchlogs/
internal/pusher/target.go``: ``CreateLogStream``, and ``CreateLogGroup`` only when the group does not exist;
``DescribeLogGroups``/``PutRetentionPolicy`` only with ``retention_in_days``; ``plugins/processors/ec2tagger``:
``ec2:DescribeTags`` only for ``${aws:AutoScalingGroupName}`` or tag dimensions, instance id, image id and type
come from the instance metadata service). Its requests are read from the agent configuration the script writes
(``"namespace"``, ``"log_group_name"``, ``"log_stream_name"``, ``${aws:...}`` dimensions), or from the SSM
parameter it is fetched from (``-c ssm:<name>``: ``ssm:GetParameter``).

Not requests of the role: the instance metadata service (IMDSv2, link-local, no IAM), anonymous HTTPS downloads
(``curl`` of the CloudWatch agent package, ``dnf``/``apt`` repositories; a VPC endpoint policy, not the role,
governs those), Lustre mounts (the FSx for Lustre protocol has no IAM), ``pip install --no-index`` and
``gpuctl doctor`` (local only).
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gpu_constructs.authz.api_calls import api_call_requests
from gpu_constructs.authz.assembly import PARTITION, Assembly, Located, UnresolvableValue
from gpu_constructs.authz.journeys import s3_read_requests, s3_write_requests, split_s3
from gpu_constructs.authz.policy import AuthRequest
from gpu_constructs.packaging.scripts import HEREDOC_RE
from gpu_constructs.templates import StackView

__all__ = [
    "CLI_COMMANDS",
    "STAND_IN_INSTANCE_ID",
    "CliCall",
    "CliCommand",
    "ScriptJourney",
    "UnmappedCommand",
    "autoscaling_group_arn",
    "cli_calls",
    "fleet_boot_journeys",
    "notebook_start_journeys",
    "script_requests",
    "script_settings",
]

#: The instance id the scripts read from the instance metadata service at run time.
STAND_IN_INSTANCE_ID = "i-0123456789abcdef0"
#: Where SageMaker writes a notebook's lifecycle script output (stream ``<notebook>/LifecycleConfigOnStart``).
NOTEBOOK_LOG_GROUP = "/aws/sagemaker/NotebookInstances"
#: The CloudWatch agent's metric namespace when its configuration names none ("CWAgent").
CW_AGENT_DEFAULT_NAMESPACE = "CWAgent"

SAR = "https://docs.aws.amazon.com/service-authorization/latest/reference"


class UnmappedCommand(ValueError):
    """A script runs an AWS CLI command that :data:`CLI_COMMANDS` does not map to IAM actions."""


@dataclass(frozen=True)
class CliCall:
    """One ``aws <service> <command>`` of a script, its arguments with the script's settings substituted.

    ``options`` maps ``--name`` to its value (``None`` for a flag); ``positionals`` are the other arguments."""

    service: str
    command: str
    options: Mapping[str, str | None]
    positionals: tuple[str, ...]
    line: str

    def option(self, name: str) -> str | None:
        value = self.options.get(name)
        return None if value is None else str(value)


@dataclass(frozen=True)
class ScriptContext:
    """What a command's requests depend on besides its own arguments."""

    assembly: Assembly
    principal: str
    region: str
    #: The auto scaling group the instance belongs to (fleet boot scripts), else ``None``.
    group_name: str | None = None

    @property
    def account(self) -> str:
        return self.principal.split(":")[4]


Builder = Callable[[ScriptContext, CliCall, str], list[AuthRequest]]


@dataclass(frozen=True)
class CliCommand:
    """One row of :data:`CLI_COMMANDS`: the IAM actions of an AWS CLI command, on what, and where AWS says so."""

    actions: tuple[str, ...]
    resource: str
    citation: str
    build: Builder = field(repr=False, compare=False)


def autoscaling_group_arn(region: str, account: str, name: str) -> str:
    """The ARN of the group ``name``: ``arn:${Partition}:autoscaling:${Region}:${Account}:autoScalingGroup:
    ${GroupId}:autoScalingGroupName/${GroupFriendlyName}`` (Service Authorization Reference, Amazon EC2 Auto
    Scaling, resource type ``autoScalingGroup``). AWS assigns the group id at creation; the stand-in is a UUID
    derived from the name."""
    group_id = uuid.uuid5(uuid.NAMESPACE_URL, f"autoscaling:{region}:{account}:{name}")
    return f"arn:{PARTITION}:autoscaling:{region}:{account}:autoScalingGroup:{group_id}:autoScalingGroupName/{name}"


def _named(value: str | None) -> bool:
    return bool(value) and not _runtime(value or "")


def _runtime(value: str) -> bool:
    return "<run-time:" in value


def _group_request(action: str, why: str, option: str | None) -> Builder:
    def build(ctx: ScriptContext, call: CliCall, region: str) -> list[AuthRequest]:
        name = call.option(option) if option else ctx.group_name
        if option == "--auto-scaling-group-name" and not call.option("--lifecycle-hook-name"):
            return []  # no hook configured: the script does not call it
        if not _named(name):
            raise UnresolvableValue(f"`{call.line}`: the auto scaling group is not known before run time")
        assert name is not None
        arn = autoscaling_group_arn(region, ctx.account, name)
        return [AuthRequest(ctx.principal, action, arn, {}, why)]

    return build


def _s3_cp(ctx: ScriptContext, call: CliCall, region: str) -> list[AuthRequest]:
    if len(call.positionals) != 2:
        raise UnresolvableValue(f"`{call.line}`: aws s3 cp takes a source and a destination")
    source, destination = call.positionals
    if source == "" or destination == "":
        return []  # an optional object that is not configured: the script does not copy
    recursive = "--recursive" in call.options
    out: list[AuthRequest] = []
    for uri, reading in ((source, True), (destination, False)):
        if not uri.startswith("s3://"):
            continue
        if _runtime(split_s3(uri)[0]):
            raise UnresolvableValue(f"`{call.line}`: the bucket is not known before run time")
        if reading:
            why = f"aws s3 cp downloads {uri}"
            out += s3_read_requests(ctx.assembly, ctx.principal, uri, region, list_first=recursive, why=why)
        else:
            target = uri.rstrip("/") + "/part-00000" if recursive or uri.endswith("/") else uri
            out += s3_write_requests(ctx.assembly, ctx.principal, target, region, why=f"aws s3 cp uploads {uri}")
    return out


def _s3api_get_object(ctx: ScriptContext, call: CliCall, region: str) -> list[AuthRequest]:
    bucket, key = call.option("--bucket"), call.option("--key")
    if not _named(bucket) or key is None:
        raise UnresolvableValue(f"`{call.line}`: the object is not known before run time")
    uri = f"s3://{bucket}/{key}"
    return s3_read_requests(ctx.assembly, ctx.principal, uri, region, list_first=False, why=f"reads {uri}")


def _get_parameter(ctx: ScriptContext, name: str, region: str, why: str) -> list[AuthRequest]:
    """``ssm:GetParameter`` of ``name`` (a name or an ARN), mapped by :mod:`~gpu_constructs.authz.api_calls`."""
    if name.startswith("arn:"):
        return [AuthRequest(ctx.principal, "ssm:GetParameter", name, {}, why)]
    found = api_call_requests(ctx.assembly, ctx.principal, "ssm", "GetParameter", {"Name": name}, region)
    return [replace(r, why=why) for r in found]


def _ssm_get_parameter(ctx: ScriptContext, call: CliCall, region: str) -> list[AuthRequest]:
    name = call.option("--name")
    if not _named(name):
        raise UnresolvableValue(f"`{call.line}`: the parameter is not known before run time")
    assert name is not None
    return _get_parameter(ctx, name, region, f"reads the SSM parameter {name}")


def _put_metric_data(ctx: ScriptContext, call: CliCall, region: str) -> list[AuthRequest]:
    namespace = call.option("--namespace")
    if not _named(namespace):
        raise UnresolvableValue(f"`{call.line}`: the metric namespace is not known before run time")
    assert namespace is not None
    why = f"publishes metrics to {namespace}"
    return [AuthRequest(ctx.principal, "cloudwatch:PutMetricData", "*", {"cloudwatch:namespace": namespace}, why)]


def _describe_tags(ctx: ScriptContext, call: CliCall, region: str) -> list[AuthRequest]:
    return [AuthRequest(ctx.principal, "ec2:DescribeTags", "*", {}, "reads the instance's tags")]


def _no_permission(ctx: ScriptContext, call: CliCall, region: str) -> list[AuthRequest]:
    return []


_ASG = "arn:${Partition}:autoscaling:${Region}:${Account}:autoScalingGroup:${GroupId}:autoScalingGroupName/${Name}"

#: The AWS CLI commands the scripts may run, with the IAM actions of their API operations. Each citation is the
#: Service Authorization Reference page of the service (the action, its resource types and their ARN format).
CLI_COMMANDS: dict[tuple[str, str], CliCommand] = {
    ("autoscaling", "complete-lifecycle-action"): CliCommand(
        ("autoscaling:CompleteLifecycleAction",),
        f"the group named by --auto-scaling-group-name ({_ASG})",
        f"{SAR}/list_amazonec2autoscaling.html (CompleteLifecycleAction: resource type autoScalingGroup*)",
        _group_request(
            "autoscaling:CompleteLifecycleAction",
            "completes the launch lifecycle hook (the boot's readiness signal)",
            "--auto-scaling-group-name",
        ),
    ),
    ("autoscaling", "record-lifecycle-action-heartbeat"): CliCommand(
        ("autoscaling:RecordLifecycleActionHeartbeat",),
        f"the group named by --auto-scaling-group-name ({_ASG})",
        f"{SAR}/list_amazonec2autoscaling.html (RecordLifecycleActionHeartbeat: resource type autoScalingGroup*)",
        _group_request(
            "autoscaling:RecordLifecycleActionHeartbeat",
            "extends the launch hook's timeout",
            "--auto-scaling-group-name",
        ),
    ),
    ("autoscaling", "set-instance-health"): CliCommand(
        ("autoscaling:SetInstanceHealth",),
        f"the instance's own group ({_ASG})",
        f"{SAR}/list_amazonec2autoscaling.html (SetInstanceHealth: resource type autoScalingGroup*)",
        _group_request("autoscaling:SetInstanceHealth", "marks the instance Unhealthy after a failed boot", None),
    ),
    ("s3", "cp"): CliCommand(
        ("s3:GetObject", "s3:PutObject", "s3:ListBucket", "kms:Decrypt", "kms:GenerateDataKey"),
        "arn:${Partition}:s3:::${BucketName}/${ObjectName} (GetObject from S3, PutObject to S3); the bucket "
        "arn:${Partition}:s3:::${BucketName} (ListBucket, --recursive); the bucket's KMS key through S3 (SSE-KMS)",
        f"{SAR}/list_amazons3.html (GetObject, PutObject: object*; ListBucket: bucket*); Amazon S3 User Guide, "
        "'Using server-side encryption with AWS KMS keys' (kms:Decrypt to read, kms:GenerateDataKey to write)",
        _s3_cp,
    ),
    ("s3api", "get-object"): CliCommand(
        ("s3:GetObject", "kms:Decrypt"),
        "arn:${Partition}:s3:::${BucketName}/${ObjectName}; the bucket's KMS key through S3 (SSE-KMS)",
        f"{SAR}/list_amazons3.html (GetObject: object*)",
        _s3api_get_object,
    ),
    ("ssm", "get-parameter"): CliCommand(
        ("ssm:GetParameter",),
        "arn:${Partition}:ssm:${Region}:${Account}:parameter/${ParameterNameWithoutLeadingSlash}",
        f"{SAR}/list_awssystemsmanager.html (GetParameter: resource type parameter*)",
        _ssm_get_parameter,
    ),
    ("cloudwatch", "put-metric-data"): CliCommand(
        ("cloudwatch:PutMetricData",),
        "* (no resource types), condition key cloudwatch:namespace",
        f"{SAR}/list_amazoncloudwatch.html (PutMetricData: no resource types; cloudwatch:namespace)",
        _put_metric_data,
    ),
    ("ec2", "describe-tags"): CliCommand(
        ("ec2:DescribeTags",),
        "* (no resource types)",
        f"{SAR}/list_amazonec2.html (DescribeTags: no resource types)",
        _describe_tags,
    ),
    ("sts", "get-caller-identity"): CliCommand(
        (),
        "none",
        "AWS STS API Reference, GetCallerIdentity: 'No permissions are required to perform this operation'",
        _no_permission,
    ),
}

# -- reading a script --------------------------------------------------------------------------------------------

_EXPORT_RE = re.compile(r"^export ([A-Z][A-Z0-9_]*)='([^']*)'$", re.MULTILINE)
_DEFAULT_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=\$\{\1:?-([^${}]*)\}$", re.MULTILINE)
_VARIABLE_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_CONTROL = {";", "&&", "||", "|", "&", ")", "(", ";;", "|&"}
#: Options of the AWS CLI (global and of the commands above) that take no value.
_FLAGS = {
    "--debug",
    "--dryrun",
    "--follow-symlinks",
    "--no-cli-pager",
    "--no-paginate",
    "--no-progress",
    "--no-sign-request",
    "--no-verify-ssl",
    "--only-show-errors",
    "--quiet",
    "--recursive",
    "--should-respect-grace-period",
    "--with-decryption",
}


def script_settings(script: str) -> dict[str, str]:
    """The script's settings: its ``export NAME='value'`` lines, then its ``NAME=${NAME:-default}`` defaults."""
    settings = dict(_EXPORT_RE.findall(script))
    for name, default in _DEFAULT_RE.findall(script):
        settings.setdefault(name, default)
    return settings


def _code_and_heredocs(script: str) -> tuple[list[str], list[str]]:
    """The script's command lines (continuations joined) and the bodies of its here-documents."""
    code: list[str] = []
    bodies: list[str] = []
    terminator: str | None = None
    body: list[str] = []
    pending = ""
    for line in script.splitlines():
        if terminator is not None:
            if line.strip() == terminator:
                bodies.append("\n".join(body))
                terminator, body = None, []
            else:
                body.append(line)
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        code.append(full)
        match = HEREDOC_RE.search(full)
        if match and "<<<" not in full[max(0, match.start() - 1) : match.start() + 3]:
            terminator = match.group(2)
    return code, bodies


def _unquoted_words(line: str) -> Iterator[int]:
    """Offsets in ``line`` where an unquoted shell word starts (inside ``$( )`` too; a comment ends the line)."""
    stack = ["code"]
    i = 0
    word_start = True
    while i < len(line):
        c = line[i]
        top = stack[-1]
        if top == "sq":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if c == "\\":
            i += 2
            word_start = False
            continue
        if top == "dq":
            if line.startswith("$(", i):
                stack.append("code")
                i += 2
                word_start = True
                continue
            if c == '"':
                stack.pop()
            i += 1
            continue
        # code
        if c == "#" and word_start:
            return
        if line.startswith("$(", i):
            stack.append("code")
            i += 2
            word_start = True
            continue
        if c == "'":
            stack.append("sq")
        elif c == '"':
            stack.append("dq")
        elif c == ")" and len(stack) > 1:
            stack.pop()
        elif word_start and not c.isspace() and c not in ";&|(!{":
            yield i
        word_start = c.isspace() or c in ";&|(!{"
        i += 1


def _substitute(token: str, settings: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return settings.get(name, f"<run-time:{name}>")

    return _VARIABLE_RE.sub(value, token)


def _tokens(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    out = []
    try:
        for token in lexer:
            if token in _CONTROL:
                break
            out.append(token)
    except ValueError as exc:  # an unbalanced quote: the command continues past what was read
        raise UnresolvableValue(f"cannot split the shell words of {text!r}: {exc}") from exc
    return out


def cli_calls(script: str, settings: Mapping[str, str] | None = None) -> list[CliCall]:
    """Every ``aws <service> <command>`` the script runs, with ``settings`` (default: the script's own) substituted.

    An argument that is an array expansion (``${args[@]...}``, the scripts' optional ``--region``) is left out."""
    settings = script_settings(script) if settings is None else settings
    code, _ = _code_and_heredocs(script)
    calls = []
    for line in code:
        for start in _unquoted_words(line):
            if not re.match(r"aws\s", line[start:]):
                continue
            words = [w for w in _tokens(line[start + 3 :]) if not re.match(r"\$\{?\w+\[@\]", w)]
            calls.append(_parse_call(words, settings, line.strip()))
    return calls


def _parse_call(words: Sequence[str], settings: Mapping[str, str], line: str) -> CliCall:
    options: dict[str, str | None] = {}
    positionals: list[str] = []
    head: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            flag = word in _FLAGS or word.startswith("--no-")
            if flag or i + 1 >= len(words) or words[i + 1].startswith("--"):
                options[word] = None
                i += 1
            else:
                options[word] = _substitute(words[i + 1], settings)
                i += 2
            continue
        (head if len(head) < 2 else positionals).append(_substitute(word, settings))
        i += 1
    if len(head) < 2:
        raise UnmappedCommand(f"`{line}`: no AWS CLI service and command")
    return CliCall(head[0], head[1], options, tuple(positionals), line)


def script_requests(
    assembly: Assembly,
    script: str,
    principal: str,
    *,
    region: str | None = None,
    group_name: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> list[AuthRequest]:
    """Every request ``script`` makes with ``principal``: its AWS CLI calls (:data:`CLI_COMMANDS`) and the
    CloudWatch agent it starts. ``region``: where the script runs (default: its ``AWS_REGION`` setting, else the
    region of the role's stack); ``group_name``: the instance's auto scaling group (fleet boot scripts)."""
    settings = script_settings(script) if settings is None else settings
    region = region or settings.get("AWS_REGION") or assembly.region_of(principal)
    context = ScriptContext(assembly, principal, region, group_name)
    out: list[AuthRequest] = []
    for call in cli_calls(script, settings):
        command = CLI_COMMANDS.get((call.service, call.command))
        if command is None:
            raise UnmappedCommand(
                f"`{call.line}`: aws {call.service} {call.command} is not in CLI_COMMANDS; add it with its IAM "
                "actions from the Service Authorization Reference"
            )
        if "--no-sign-request" in call.options:
            continue  # anonymous: not a request of the role
        where = call.option("--region")
        where = where if _named(where) else region
        subject = f"{call.service}:{call.command}"
        out += [replace(r, subject=subject) for r in command.build(context, call, where or region)]
    out += [replace(r, subject="cloudwatch-agent") for r in _cloudwatch_agent(context, script, settings)]
    return out


# -- the CloudWatch agent ----------------------------------------------------------------------------------------

#: ``<ctl> -a fetch-config ... -c <source>``, the agent's control script being named elsewhere in the script.
_AGENT_FETCH_RE = re.compile(r"\s-a\s+fetch-config\s[^\n]*?-c\s+(\S+)")
_AGENT_CTL = "amazon-cloudwatch-agent-ctl"
_AGENT_PLACEHOLDERS = {"instance_id": STAND_IN_INSTANCE_ID, "hostname": "ip-10-0-0-1", "ip_address": "10-0-0-1"}
#: ``${aws:...}`` dimensions of the agent: those read from the instance metadata service need no permission.
_AGENT_METADATA_DIMENSIONS = {"InstanceId", "ImageId", "InstanceType"}


def _cloudwatch_agent(ctx: ScriptContext, script: str, settings: Mapping[str, str]) -> list[AuthRequest]:
    """The requests of the CloudWatch agent the script starts (none when it starts none)."""
    code, bodies = _code_and_heredocs(script)
    started = [m.group(1) for line in code if (m := _AGENT_FETCH_RE.search(line))]
    if not started or not any(_AGENT_CTL in line for line in code):
        return []
    out: list[AuthRequest] = []
    config = ""
    for source in started:
        source = _substitute(source.strip("'\""), settings)
        if source.startswith("ssm:"):
            name = source.removeprefix("ssm:")
            out += _get_parameter(ctx, name, ctx.region, "the CloudWatch agent reads its configuration")
        elif source.startswith("file:"):
            config = "\n".join(_substitute(b, settings) for b in bodies if '"metrics"' in b or '"logs"' in b)
        else:
            raise UnresolvableValue(f"CloudWatch agent configuration {source!r}: neither file: nor ssm:")
    if not config:
        return out
    namespaces = re.findall(r'"namespace"\s*:\s*"([^"]*)"', config) or [CW_AGENT_DEFAULT_NAMESPACE]
    if '"metrics"' in config:
        for namespace in dict.fromkeys(namespaces):
            context = {"cloudwatch:namespace": namespace}
            why = f"the CloudWatch agent publishes metrics to {namespace}"
            out.append(AuthRequest(ctx.principal, "cloudwatch:PutMetricData", "*", context, why))
    for dimension in dict.fromkeys(re.findall(r"\$\{aws:(\w+)\}", config)):
        if dimension == "AutoScalingGroupName":
            why = "the CloudWatch agent reads the group name from the instance's tags"
            out.append(AuthRequest(ctx.principal, "ec2:DescribeTags", "*", {}, why))
        elif dimension not in _AGENT_METADATA_DIMENSIONS:
            raise UnmappedCommand(f"CloudWatch agent dimension ${{aws:{dimension}}}: its requests are not mapped")
    groups = re.findall(r'"log_group_name"\s*:\s*"([^"]*)"', config)
    streams = re.findall(r'"log_stream_name"\s*:\s*"([^"]*)"', config)
    for group, stream in zip(groups, streams, strict=False):
        if not group:
            continue
        stream = re.sub(r"\{(\w+)\}", lambda m: _AGENT_PLACEHOLDERS.get(m.group(1), m.group(1)), stream)
        arn = f"arn:{PARTITION}:logs:{ctx.region}:{ctx.account}:log-group:{group}:log-stream:{stream}"
        why = f"the CloudWatch agent ships {stream} to {group}"
        out += [AuthRequest(ctx.principal, a, arn, {}, why) for a in ("logs:CreateLogStream", "logs:PutLogEvents")]
    return out


# -- the journeys of the assembly --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScriptJourney:
    """One instance script of the assembly, the requests it makes and what does not fit together."""

    kind: Literal["fleet-boot", "notebook-start"]
    #: The auto scaling group's or the notebook instance's name.
    name: str
    stack: StackView
    logical_id: str
    principal: str
    script: str
    requests: tuple[AuthRequest, ...]
    #: Inconsistencies of the templates (a hook the group does not have, a role the service may not assume).
    problems: tuple[str, ...] = ()


def _logical_id(value: Any) -> str | None:
    """The logical id a ``Ref`` or ``Fn::GetAtt`` points to."""
    if isinstance(value, Mapping) and len(value) == 1:
        ((key, argument),) = value.items()
        if key == "Ref":
            return str(argument)
        if key == "Fn::GetAtt":
            return str(argument[0] if isinstance(argument, list) else str(argument).split(".", 1)[0])
    return None


def _role_arn(assembly: Assembly, stack: StackView, value: Any) -> str:
    """The ARN of a role given by reference (its logical id in ``stack``), by name or by ARN."""
    logical = _logical_id(value)
    if logical is not None and logical in stack.resources:
        return assembly.arn(stack, logical)
    text = assembly.text(value, stack)
    return text if text.startswith("arn:") else f"arn:{PARTITION}:iam::{assembly.account(stack)}:role/{text}"


def _trust_problem(assembly: Assembly, role_arn: str, service: str) -> list[str]:
    role = assembly.role(role_arn)
    if role is None:
        return []  # a role of another app: its trust policy is not here to read
    document = assembly.resolve(role.properties.get("AssumeRolePolicyDocument") or {}, role.stack)
    statements = document.get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        actions = statement.get("Action", [])
        services = (statement.get("Principal") or {}).get("Service", [])
        if (
            statement.get("Effect") == "Allow"
            and "sts:AssumeRole" in (actions if isinstance(actions, list) else [actions])
            and service in (services if isinstance(services, list) else [services])
        ):
            return []
    return [f"{role_arn} does not trust {service} (sts:AssumeRole): the instance gets no credentials"]


def _launch_template_id(group: Located) -> str | None:
    props = group.properties
    spec = props.get("LaunchTemplate") or (
        ((props.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get("LaunchTemplateSpecification")
    )
    if not spec:
        return None
    return _logical_id(spec.get("LaunchTemplateId")) or _logical_id(spec.get("LaunchTemplateName"))


def _launch_hooks(assembly: Assembly, group: Located, name: str) -> set[str]:
    hooks = {
        str(assembly.resolve(h.get("LifecycleHookName"), group.stack))
        for h in group.properties.get("LifecycleHookSpecificationList") or []
        if h.get("LifecycleTransition") == "autoscaling:EC2_INSTANCE_LAUNCHING"
    }
    for hook in assembly.resources("AWS::AutoScaling::LifecycleHook"):
        props = hook.properties
        owner = str(assembly.resolve(props.get("AutoScalingGroupName"), hook.stack))
        if owner == name and props.get("LifecycleTransition") == "autoscaling:EC2_INSTANCE_LAUNCHING":
            hooks.add(str(assembly.resolve(props.get("LifecycleHookName") or f"{hook.logical_id}-ref", hook.stack)))
    return hooks


def _script_text(assembly: Assembly, stack: StackView, value: Any) -> str:
    """A template's script: ``Fn::Base64`` of the text (resolved), or a literal base64 string (decoded)."""
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return value
    return assembly.text(value, stack)


def fleet_boot_journeys(assembly: Assembly) -> list[ScriptJourney]:
    """The boot of each auto scaling group whose launch template (of the same stack) has user data."""
    journeys = []
    for group in assembly.resources("AWS::AutoScaling::AutoScalingGroup"):
        template_id = _launch_template_id(group)
        template = group.stack.resources.get(template_id or "")
        if template is None:
            continue
        data = (template.get("Properties") or {}).get("LaunchTemplateData") or {}
        if data.get("UserData") is None:
            continue
        stack = group.stack
        name = assembly.physical_name(stack, group.logical_id)
        props = group.properties
        if props.get("AutoScalingGroupName") is not None:
            name = assembly.text(props["AutoScalingGroupName"], stack)
        principal, problems = _instance_profile_role(assembly, stack, data.get("IamInstanceProfile"))
        script = _script_text(assembly, stack, data["UserData"])
        requests: list[AuthRequest] = []
        if principal:
            problems += _trust_problem(assembly, principal, "ec2.amazonaws.com")
            requests = script_requests(assembly, script, principal, group_name=name)
        problems += _hook_problems(assembly, group, name, script)
        journeys.append(
            ScriptJourney(
                "fleet-boot", name, stack, group.logical_id, principal, script, tuple(requests), tuple(problems)
            )
        )
    return journeys


def _instance_profile_role(assembly: Assembly, stack: StackView, profile: Any) -> tuple[str, list[str]]:
    if not profile:
        return "", ["the launch template has no instance profile: the boot script's AWS calls have no credentials"]
    logical = _logical_id(profile.get("Arn")) or _logical_id(profile.get("Name"))
    definition = stack.resources.get(logical or "")
    if definition is None:
        return "", [f"instance profile {profile!r} is not a resource of {stack.name}: its role cannot be read"]
    roles = (definition.get("Properties") or {}).get("Roles") or []
    if len(roles) != 1:
        return "", [f"instance profile {logical} has {len(roles)} roles (EC2 allows one)"]
    return _role_arn(assembly, stack, roles[0]), []


def _hook_problems(assembly: Assembly, group: Located, name: str, script: str) -> list[str]:
    """The hooks the script completes must be launch hooks of this group, named by this group's name."""
    problems = []
    hooks = _launch_hooks(assembly, group, name)
    for call in cli_calls(script):
        if (call.service, call.command) not in {
            ("autoscaling", "complete-lifecycle-action"),
            ("autoscaling", "record-lifecycle-action-heartbeat"),
        }:
            continue
        hook, target = call.option("--lifecycle-hook-name"), call.option("--auto-scaling-group-name")
        if not hook:
            if hooks:
                problems.append(f"the group has launch hooks {sorted(hooks)} but the script completes none")
            continue
        if target != name:
            problems.append(f"`{call.line}` names group {target!r}, but the instance belongs to {name!r}")
        if hook not in hooks:
            problems.append(f"`{call.line}` names hook {hook!r}; the group's launch hooks are {sorted(hooks)}")
    return problems


def _lifecycle_config(assembly: Assembly, notebook: Located) -> Located | None:
    value = notebook.properties.get("LifecycleConfigName")
    if value is None:
        return None
    logical = _logical_id(value)
    if logical is not None and logical in notebook.stack.resources:
        return Located(notebook.stack, logical, notebook.stack.resources[logical])
    name = assembly.text(value, notebook.stack)
    for config in assembly.resources("AWS::SageMaker::NotebookInstanceLifecycleConfig"):
        given = config.properties.get("NotebookInstanceLifecycleConfigName")
        if given is not None and assembly.text(given, config.stack) == name:
            return config
    return None


def notebook_start_journeys(assembly: Assembly) -> list[ScriptJourney]:
    """The start of each notebook instance: its OnStart script's requests and the script's log stream."""
    journeys = []
    for notebook in assembly.resources("AWS::SageMaker::NotebookInstance"):
        stack = notebook.stack
        props = notebook.properties
        name = (
            assembly.text(props["NotebookInstanceName"], stack)
            if props.get("NotebookInstanceName") is not None
            else assembly.physical_name(stack, notebook.logical_id)
        )
        principal = _role_arn(assembly, stack, props.get("RoleArn"))
        problems = _trust_problem(assembly, principal, "sagemaker.amazonaws.com")
        config = _lifecycle_config(assembly, notebook)
        hooks = (config.properties.get("OnStart") or []) if config is not None else []
        script = _script_text(assembly, config.stack, hooks[0].get("Content")) if config and hooks else ""
        requests: list[AuthRequest] = []
        if script:
            region = assembly.region(stack)
            requests = script_requests(assembly, script, principal, region=region)
            requests += _lifecycle_logs(principal, region, name, "LifecycleConfigOnStart")
        journeys.append(
            ScriptJourney(
                "notebook-start", name, stack, notebook.logical_id, principal, script, tuple(requests), tuple(problems)
            )
        )
    return journeys


def _lifecycle_logs(principal: str, region: str, notebook: str, hook: str) -> list[AuthRequest]:
    account = principal.split(":")[4]
    stream = f"{notebook}/{hook}"
    arn = f"arn:{PARTITION}:logs:{region}:{account}:log-group:{NOTEBOOK_LOG_GROUP}:log-stream:{stream}"
    why = f"SageMaker writes the lifecycle script's output to {NOTEBOOK_LOG_GROUP} {stream}"
    return [
        AuthRequest(principal, action, arn, {}, why, "lifecycle-logs")
        for action in ("logs:CreateLogStream", "logs:PutLogEvents")
    ]
