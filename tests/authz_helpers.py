"""Helpers of the authorization tests: a synthesized app as one account, its training state machine, and the
check that makes a local run download "as the role"."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpu_constructs.authz import Assembly, AuthRequest, check_requests, job_requests
from gpu_constructs.authz.assembly import Located, state_machine_definition
from gpu_constructs.rules.pack import _assembly_stacks
from gpu_constructs.templates import StackView


def top_level(outdir: Path) -> list[StackView]:
    """The stacks of the cloud assembly at ``outdir`` itself (not those of a pipeline's stage assemblies)."""
    return [s for s in _assembly_stacks(outdir) if Path(s.path).parent == outdir]


def pipeline_machine(assembly: Assembly) -> Located:
    [found] = [m for m in assembly.resources("AWS::StepFunctions::StateMachine") if "Pipeline" in m.logical_id]
    return found


def pipeline_definition(assembly: Assembly) -> dict[str, Any]:
    """The training state machine's ASL with the assembly's names (so requests name the assembly's resources)."""
    return state_machine_definition(assembly, pipeline_machine(assembly))


def as_role(assembly: Assembly) -> Callable[[Mapping[str, Any]], list[str]]:
    """``run_local_job(authorize=...)``: the requests of a CreateTrainingJob that the execution role is denied."""

    def authorize(request: Mapping[str, Any]) -> list[str]:
        return [str(d) for d in check_requests(assembly, job_requests(assembly, "training", request))]

    return authorize


def without(stacks: list[StackView], action: str, where: str) -> Assembly:
    """The assembly with ``action`` removed from every identity-policy statement whose JSON contains ``where``."""
    out = []
    removed = 0
    for stack in stacks:
        tpl = copy.deepcopy(dict(stack.template))
        for resource in tpl["Resources"].values():
            if resource["Type"] != "AWS::IAM::Policy":
                continue
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                if action in actions and where in json.dumps(statement):
                    statement["Action"] = [a for a in actions if a != action] or ["none:None"]
                    removed += 1
        out.append(StackView(stack.name, stack.account, stack.region, tpl, stack.path))
    assert removed, f"no statement with {action} and {where!r}"
    return Assembly(out)


def denied(assembly: Assembly, requests: list[AuthRequest]) -> list[str]:
    """``subject:action`` of every denied request, sorted."""
    return sorted(
        {f"{d.decision.request.subject}:{d.decision.request.action}" for d in check_requests(assembly, requests)}
    )
