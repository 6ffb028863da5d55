"""``GpuPlatformChecks``: the rule pack as a cdk-nag 3.x ``NagPack`` (a CDK validation plugin).

The pack reads each stack's synthesized template from the cloud assembly (CDK runs validation plugins after
the templates are written), so every rule sees exactly what CloudFormation will receive, and rules that look
across stacks see every stack of the assembly, nested pipeline stages included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from cdk_nag import IApplyRule, NagMessageLevel, NagPack, NagRuleCompliance

from gpu_constructs.rules import PACK_NAME, all_rules
from gpu_constructs.rules._rule import Compliance, Resource, Result, Rule, StackView

_VERDICTS = {
    Compliance.COMPLIANT: NagRuleCompliance.COMPLIANT,
    Compliance.NON_COMPLIANT: NagRuleCompliance.NON_COMPLIANT,
    Compliance.NOT_APPLICABLE: NagRuleCompliance.NOT_APPLICABLE,
}


@jsii.implements(IApplyRule)
class _Applied:
    """One rule's verdict on one resource, handed to cdk-nag (which applies acknowledgments and reports)."""

    def __init__(self, node: cdk.CfnResource, rule: Rule, result: Result, level: NagMessageLevel) -> None:
        self._node = node
        self._rule = rule
        self._result = result
        self._level = level

    @property
    def node(self) -> cdk.CfnResource:
        return self._node

    @property
    def info(self) -> str:
        return self._rule.info

    @property
    def explanation(self) -> str:
        return self._rule.explanation

    @property
    def level(self) -> NagMessageLevel:
        return self._level

    @property
    def rule_suffix_override(self) -> str:
        return self._rule.id

    def rule(self, node: cdk.CfnResource) -> Any:
        if isinstance(self._result, list):
            return self._result or NagRuleCompliance.COMPLIANT
        return _VERDICTS[self._result]


def _assembly_stacks(outdir: Path) -> list[StackView]:
    """Every stack of the cloud assembly at ``outdir`` (nested assemblies included)."""
    manifest_path = outdir / "manifest.json"
    if not manifest_path.exists():
        return []
    views: list[StackView] = []
    for artifact_id, artifact in sorted(json.loads(manifest_path.read_text()).get("artifacts", {}).items()):
        props = artifact.get("properties", {})
        if artifact.get("type") == "aws:cloudformation:stack":
            template_path = outdir / props["templateFile"]
            if not template_path.exists():
                continue
            account, region = _environment(artifact.get("environment", ""))
            views.append(
                StackView(
                    name=props.get("stackName", artifact_id),
                    account=account,
                    region=region,
                    template=json.loads(template_path.read_text()),
                    path=str(template_path),
                )
            )
        elif artifact.get("type") == "cdk:cloud-assembly":
            views += _assembly_stacks(outdir / props["directoryName"])
    return views


def _environment(env: str) -> tuple[str | None, str | None]:
    """``aws://ACCOUNT/REGION`` -> (account, region); ``unknown-*`` parts are ``None``."""
    parts = env.removeprefix("aws://").split("/")
    account = parts[0] if parts and not parts[0].startswith("unknown-") else None
    region = parts[1] if len(parts) > 1 and not parts[1].startswith("unknown-") else None
    return account, region


class GpuPlatformChecks(NagPack):
    """The platform's rule pack (``GpuPlatform-*`` findings). Register with ``Validations.of(app).add_plugins``.

    :param level: ``"error"`` (default) fails synth on a finding; ``"warn"`` reports it.
    """

    def __init__(self, scope: Any = None, *, verbose: bool | None = None, level: str = "error") -> None:
        super().__init__(scope, verbose=verbose)
        self._pack_name = PACK_NAME
        self._level = NagMessageLevel.WARN if level == "warn" else NagMessageLevel.ERROR
        self._stacks: dict[str, StackView] = {}
        self._assembly: dict[str, tuple[StackView, ...]] = {}

    @property
    def name(self) -> str:
        return PACK_NAME

    @jsii.member(jsii_name="checkResource")
    def _check_resource(self, node: cdk.CfnResource) -> None:
        stack = cdk.Stack.of(node)
        view, assembly = self._view(stack)
        if view is None:
            return
        logical_id = stack.resolve(node.logical_id)
        definition = view.resources.get(logical_id)
        if definition is None:
            return
        resource = Resource(logical_id, definition, view, assembly)
        for r in all_rules():
            if r.applies_to(resource.type):
                self._apply_rule(_Applied(node, r, r.evaluate(resource), self._level))  # type: ignore[arg-type]

    def _view(self, stack: cdk.Stack) -> tuple[StackView | None, tuple[StackView, ...]]:
        """The stack's template (read once) and every stack of the app's cloud assembly."""
        root = stack.node.root
        root_outdir = str(Path(root.outdir)) if isinstance(root, cdk.Stage) else "."
        if root_outdir not in self._assembly:
            self._assembly[root_outdir] = tuple(_assembly_stacks(Path(root_outdir)))
        assembly = self._assembly[root_outdir]
        stage = cdk.Stage.of(stack)
        key = str(Path(stage.outdir if stage else root_outdir) / stack.template_file)
        if key not in self._stacks:
            match = next((v for v in assembly if v.path == key), None)
            if match is None and Path(key).exists():  # not in a manifest (yet): read the template alone
                account = None if cdk.Token.is_unresolved(stack.account) else stack.account
                region = None if cdk.Token.is_unresolved(stack.region) else stack.region
                match = StackView(stack.stack_name, account, region, json.loads(Path(key).read_text()), key)
            if match is None:
                return None, ()
            self._stacks[key] = match
        return self._stacks[key], assembly or (self._stacks[key],)
