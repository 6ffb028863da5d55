"""The requests of the GitOps pipeline's read-only steps, derived from the synthesized CodeBuild projects.

The pipeline stack (``stacks.pipeline_stack``) runs, before a stage's deploy, ``gpuctl preflight --env <stage>``
and, before an approval, ``gpuctl deployed <stage assembly> deployed.out``. Each project's build commands (its
``Source.BuildSpec``) say which; its ``ServiceRole`` makes the requests:

* ``gpuctl preflight --env E``: the calls of the online check for ``config/E.yaml``
  (:func:`gpuctl.commands.preflight.read_permissions` of its needs: ListServiceQuotas, DescribeInstanceTypeOfferings,
  DescribeCapacityReservations on ``*``; DescribeTrainingPlan on each plan);
* ``gpuctl deployed DIR ...``: ``cloudformation:GetTemplate`` on each stack of the nested assembly ``DIR``
  (``arn:aws:cloudformation:<region>:<account>:stack/<name>/<id>``; the id is assigned at creation: a stand-in);
* a command run with ``AWS_PROFILE=stage`` (a stage in another account) makes its calls as the profile's role:
  the project's role makes ``sts:AssumeRole`` on that role, whose own policies are the target account's.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from gpu_constructs.authz import Assembly, AuthRequest

#: The id part of a stack ARN, which CloudFormation assigns when it creates the stack.
STACK_ID_STAND_IN = "00000000-0000-0000-0000-000000000000"
_PROFILE_ROLE = re.compile(r"aws configure set profile\.(?P<profile>[\w-]+)\.role_arn (?P<arn>\S+)")


def _commands(buildspec: str) -> list[str]:
    try:
        spec = json.loads(buildspec)
    except json.JSONDecodeError:
        return []
    phases = spec.get("phases") or {}
    return [
        str(c) for phase in ("install", "pre_build", "build") for c in (phases.get(phase) or {}).get("commands", [])
    ]


def _stack_arns(outdir: Path, directory: str, default_account: str) -> list[str]:
    manifest = outdir / Path(directory).relative_to("cdk.out") / "manifest.json"
    arns = []
    for artifact in json.loads(manifest.read_text()).get("artifacts", {}).values():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        _, _, env = str(artifact.get("environment", "")).partition("aws://")
        account, _, region = env.partition("/")
        account = default_account if account in ("", "unknown-account") else account
        name = artifact["properties"]["stackName"]
        arns.append(f"arn:aws:cloudformation:{region}:{account}:stack/{name}/{STACK_ID_STAND_IN}")
    return arns


def _requests(role: str, command: str, outdir: Path) -> list[AuthRequest]:
    try:
        words = shlex.split(command)
    except ValueError:  # not a plain command line
        return []
    if words[:2] == ["gpuctl", "preflight"] and "--env" in words:
        from gpuctl.commands.preflight import compute_needs, load_env_config, read_permissions

        env = words[words.index("--env") + 1]
        why = f"gpuctl preflight --env {env} reads quotas, offerings and reservations before the deploy"
        permissions = read_permissions(compute_needs(load_env_config(env)))
        return [
            AuthRequest(role, a, r, {}, why, "preflight") for a, resources in permissions.items() for r in resources
        ]
    if words[:2] == ["gpuctl", "deployed"] and len(words) > 2:
        why = "gpuctl deployed reads the deployed templates for the cost difference"
        arns = _stack_arns(outdir, words[2], role.split(":")[4])
        return [AuthRequest(role, "cloudformation:GetTemplate", arn, {}, why, "cost") for arn in arns]
    return []


def pipeline_step_journeys(assembly: Assembly, outdir: Path) -> list[tuple[str, tuple[AuthRequest, ...]]]:
    """(journey name, requests) of every preflight and cost step of the assembly's pipelines."""
    found = []
    for project in assembly.resources("AWS::CodeBuild::Project"):
        source = project.properties.get("Source") or {}
        if "BuildSpec" not in source:
            continue
        role = assembly.text(project.properties["ServiceRole"], project.stack)
        commands = _commands(assembly.text(source["BuildSpec"], project.stack))
        profiles = {m["profile"]: m["arn"] for c in commands if (m := _PROFILE_ROLE.search(c))}
        requests: list[AuthRequest] = []
        for command in commands:
            profile = re.match(r"AWS_PROFILE=([\w-]+) (.*)", command)
            if profile is not None:
                step = _requests(profiles.get(profile[1], ""), profile[2], outdir)
                if step:
                    why = f"the step runs {profile[2].split(' ', 2)[1]} as the stage account's lookup role"
                    requests.append(AuthRequest(role, "sts:AssumeRole", profiles[profile[1]], {}, why, "profile"))
                continue
            requests += _requests(role, command, outdir)
        if requests:
            found.append((f"pipeline step {project.logical_id} ({requests[0].subject})", tuple(requests)))
    return found


__all__ = ["STACK_ID_STAND_IN", "pipeline_step_journeys"]
