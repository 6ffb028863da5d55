"""gpuctl deployed ASSEMBLY_DIR OUT_DIR: what is deployed now of a synthesized assembly's stacks, as an assembly.

For each CloudFormation stack of the cloud assembly in ``ASSEMBLY_DIR`` (its own ``manifest.json``: the app, or
one pipeline stage's nested assembly such as ``cdk.out/assembly-gpu-prod-pipeline-Prod``), the template that is
deployed now is read with CloudFormation ``GetTemplate`` (``StackName``, ``TemplateStage`` ``Original``: the
template as submitted; botocore model ``cloudformation``, response ``TemplateBody``) in the stack's region, and
written to ``OUT_DIR`` under the same file name, with a ``manifest.json`` that lists the same artifacts. A stack
that does not exist yet is left out (it costs nothing before the change). So ``gpuctl cost diff OUT_DIR
ASSEMBLY_DIR`` prints what a deploy of ``ASSEMBLY_DIR`` adds to or saves on the bill, next to ``cdk diff``.

Read-only: ``cloudformation:GetTemplate`` on the stacks. Exit 0: written; 2: bad input or AWS refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpuctl.commands import add_command
from gpuctl.training_setup import ClientFactory, boto3_client

#: The command's line in ``gpuctl --help``.
SUMMARY = "write the deployed templates of a synthesized assembly's stacks as an assembly (base of gpuctl cost diff)"

#: The clients the command calls AWS with (tests replace it).
make_client: ClientFactory = boto3_client

_MISSING_STACK = "does not exist"


class DeployedError(Exception):
    """Bad input, or AWS refused (exit code 2)."""


def _region(artifact: dict[str, Any], default: str | None) -> str:
    """The region of an ``aws://account/region`` artifact environment (``default`` for ``unknown-region``)."""
    environment = str(artifact.get("environment", ""))
    region = environment.rsplit("/", 1)[-1] if environment.startswith("aws://") else ""
    if region and region != "unknown-region":
        return region
    if default:
        return default
    raise DeployedError(f"stack artifact environment {environment!r} names no region; pass --region")


def deployed_template(client: Any, stack_name: str) -> dict[str, Any] | None:
    """The deployed template of ``stack_name`` (JSON), or None when the stack does not exist."""
    try:
        response = client.get_template(StackName=stack_name, TemplateStage="Original")
    except Exception as exc:
        error = (getattr(exc, "response", None) or {}).get("Error", {})
        if error.get("Code") == "ValidationError" and _MISSING_STACK in str(error.get("Message", "")):
            return None
        if type(exc).__module__.startswith("botocore"):
            raise DeployedError(f"GetTemplate of {stack_name}: {exc}") from None
        raise
    body = response["TemplateBody"]
    if isinstance(body, str):  # botocore decodes a JSON body; a YAML one stays text
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            raise DeployedError(f"the deployed template of {stack_name} is not JSON; allowed: CDK's JSON") from None
    return dict(body)


def write_deployed(assembly: Path, out: Path, region: str | None = None) -> list[str]:
    """Write the deployed templates of ``assembly``'s stacks to ``out``; the names of the stacks found."""
    manifest_file = assembly / "manifest.json"
    if not manifest_file.is_file():
        raise DeployedError(f"{manifest_file} not found; allowed: a synthesized cloud assembly directory")
    manifest = json.loads(manifest_file.read_text())
    kept: dict[str, Any] = {}
    clients: dict[str, Any] = {}
    out.mkdir(parents=True, exist_ok=True)
    for artifact_id, artifact in (manifest.get("artifacts") or {}).items():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        props = artifact.get("properties", {})
        stack_name = str(props.get("stackName", artifact_id))
        stack_region = _region(artifact, region)
        client = clients.setdefault(stack_region, make_client("cloudformation", stack_region))
        template = deployed_template(client, stack_name)
        if template is None:
            continue
        (out / props["templateFile"]).write_text(json.dumps(template, indent=1, sort_keys=True))
        kept[artifact_id] = {**artifact, "dependencies": []}
    (out / "manifest.json").write_text(json.dumps({"version": manifest.get("version"), "artifacts": kept}, indent=1))
    return [str(a["properties"].get("stackName", i)) for i, a in kept.items()]


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "deployed", SUMMARY, __doc__)
    parser.add_argument("assembly", metavar="ASSEMBLY_DIR", help="synthesized cloud assembly (or a stage's)")
    parser.add_argument("out", metavar="OUT_DIR", help="where to write the deployed templates")
    parser.add_argument("--region", help="region of stacks whose artifact names none")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        found = write_deployed(Path(args.assembly), Path(args.out), args.region)
    except DeployedError as exc:
        print(f"gpuctl deployed: {exc}", file=sys.stderr)
        return 2
    print(f"gpuctl deployed: {len(found)} deployed stack(s) written to {args.out}: {', '.join(found) or 'none'}")
    return 0
