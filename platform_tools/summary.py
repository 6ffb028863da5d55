"""Print every stack of a cloud assembly: ``python -m platform_tools.summary cdk.out`` (``make synth`` runs it).

One line per stack: its name, its resource count and its main resources, named (the VPC and its CIDR, the
buckets, the FSx file system, the state machine, the endpoints, the auto scaling groups, the pipeline...).
A stack with none of those lists what it has instead (IAM roles, SSM parameters, KMS keys, SNS topics).

The stacks of a stage (a nested cloud assembly: the environments a CDK pipeline deploys, ``cdk:cloud-assembly``
artifacts of the manifest) are listed under their stage, and the totals count every stack of every assembly.
A stage's stacks can carry the same names as the app's own (the pipeline deploys the very stacks that
``cdk deploy`` would), so stacks are told apart by their construct path, never by name alone.

Reads only the assembly: ``manifest.json`` (stacks, nested assemblies), each template, and ``tree.json``
(the construct path of each resource, for names) when present. Then it prints what the stacks cost (always-on
$/month per stack and $/hour of each training setup, :mod:`platform_tools.cost`, 730 hours a month, on-demand list
prices of a dated table) and checks the policy validation report: any unacknowledged cdk-nag finding fails (exit 1).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "StackSummary",
    "assembly_stacks",
    "environment_text",
    "main",
    "main_resources",
    "summary_lines",
    "validation_violations",
]


@dataclass(frozen=True)
class StackSummary:
    """One CloudFormation stack of a cloud assembly (the app's own, or one of a stage)."""

    name: str  #: CloudFormation stack name (``gpu-prod-network``)
    artifact_id: str  #: its id in the manifest of its assembly
    assembly: str  #: its assembly directory relative to the root assembly ('' for the root)
    display_path: str  #: construct path (``gpu-prod-pipeline/Dev/gpu-dev-network``): unique in the app
    stage: str | None  #: construct path of the stage that holds it (``gpu-prod-pipeline/Dev``); None: the app's own
    environment: str  #: ``aws://ACCOUNT/REGION`` (``unknown-account``: account-agnostic)
    template_path: Path
    resource_count: int
    dependencies: tuple[str, ...]  #: artifact ids of the stacks of the same assembly it depends on
    main_resources: tuple[str, ...]  #: e.g. ``("VPC 10.40.0.0/16", "3 NAT gateways", "13 VPC endpoints")``

    @property
    def key(self) -> str:
        """An id unique in the whole assembly: the artifact id, after its nested assembly's directory in a stage."""
        return f"{self.assembly}/{self.artifact_id}" if self.assembly else self.artifact_id

    @property
    def stage_name(self) -> str | None:
        """The stage's own id (``Dev``); None for the app's own stacks."""
        return self.stage.rsplit("/", 1)[-1] if self.stage else None


# --------------------------------------------------------------------------------------------- main resources

_LOGICAL_HASH = re.compile(r"[0-9A-F]{8}$")  # the hash suffix of a logical id
#: Construct ids that only say what the resource is; the owner's id names it better.
_GENERIC_IDS = frozenset(
    {
        "Resource",
        "Default",
        "ASG",
        "Group",
        "Repository",
        "StateMachine",
        "Provider",
        "CdkBuildProject",
        "Bucket",
        "Function",
    }
)


def _construct_name(path: str | None, logical_id: str) -> str:
    """A reader's name for a resource: the last telling id of its construct path, else its logical id."""
    if path:
        parts = path.split("/")[1:]  # below the stack
        while len(parts) > 1 and parts[-1] in _GENERIC_IDS:
            parts.pop()
        if parts and parts[-1] not in _GENERIC_IDS:
            return parts[-1]
    return _LOGICAL_HASH.sub("", logical_id) or logical_id


@dataclass(frozen=True)
class _Kind:
    """How one CloudFormation resource type is summarized."""

    singular: str
    plural: str
    name_property: str | None = None  #: the property holding the physical name, when the platform sets one
    count_only: bool = False  #: many of them, all alike (VPC endpoints): the number says enough
    detail: Callable[[Mapping[str, Any]], str] | None = None  #: what one of them is (a VPC's CIDR)


def _vpc(props: Mapping[str, Any]) -> str:
    cidr = props.get("CidrBlock")
    return f"VPC {cidr}" if isinstance(cidr, str) else "VPC"


def _fsx(props: Mapping[str, Any]) -> str:
    kind = {"LUSTRE": "Lustre", "ONTAP": "NetApp ONTAP", "OPENZFS": "OpenZFS", "WINDOWS": "Windows File Server"}
    text = f"FSx for {kind.get(str(props.get('FileSystemType')), props.get('FileSystemType'))}"
    details = []
    deployment = props.get("LustreConfiguration", {}).get("DeploymentType")
    if isinstance(deployment, str):
        details.append(deployment)
    capacity = props.get("StorageCapacity")
    if isinstance(capacity, int):
        details.append(f"{capacity} GiB")
    return f"{text} ({', '.join(details)})" if details else text


def _pipeline(props: Mapping[str, Any]) -> str:
    name = props.get("Name")
    stages = [s.get("Name") for s in props.get("Stages", []) if isinstance(s.get("Name"), str)]
    text = f"CodePipeline {name}" if isinstance(name, str) else "CodePipeline pipeline"
    return f"{text} (stages {', '.join(stages)})" if stages else text


def _oidc(props: Mapping[str, Any]) -> str:
    url = props.get("Url")
    return f"OIDC provider {url.removeprefix('https://')}" if isinstance(url, str) else "OIDC provider"


#: What a stack is for, in the order a reader wants them. Types not listed here are not "main".
MAIN_KINDS: dict[str, _Kind] = {
    "AWS::EC2::VPC": _Kind("VPC", "VPCs", detail=_vpc),
    "AWS::EC2::NatGateway": _Kind("NAT gateway", "NAT gateways", count_only=True),
    "AWS::EC2::VPCEndpoint": _Kind("VPC endpoint", "VPC endpoints", count_only=True),
    "AWS::FSx::FileSystem": _Kind("file system", "file systems", detail=_fsx),
    "AWS::EFS::FileSystem": _Kind("EFS file system", "EFS file systems"),
    "AWS::S3::Bucket": _Kind("bucket", "buckets"),
    "AWS::ECR::Repository": _Kind("ECR repository", "ECR repositories", "RepositoryName"),
    "AWS::StepFunctions::StateMachine": _Kind("state machine", "state machines", "StateMachineName"),
    "AWS::SageMaker::Endpoint": _Kind("endpoint", "endpoints", "EndpointName"),
    "AWS::SageMaker::NotebookInstance": _Kind("notebook instance", "notebook instances", "NotebookInstanceName"),
    "AWS::AutoScaling::AutoScalingGroup": _Kind("auto scaling group", "auto scaling groups", "AutoScalingGroupName"),
    "AWS::CodePipeline::Pipeline": _Kind("pipeline", "pipelines", detail=_pipeline),
    "AWS::CodeBuild::Project": _Kind("CodeBuild project", "CodeBuild projects"),
    "Custom::CDKContainerImageBuild": _Kind("image build in CodeBuild", "image builds in CodeBuild"),
    "AWS::Lambda::Function": _Kind("Lambda function", "Lambda functions", "FunctionName"),
}

#: Listed only for a stack with no main resource (an access stack is its roles, an image stack its parameters).
FALLBACK_KINDS: dict[str, _Kind] = {
    "AWS::IAM::OIDCProvider": _Kind("OIDC provider", "OIDC providers", detail=_oidc),
    "AWS::IAM::Role": _Kind("IAM role", "IAM roles", "RoleName"),
    "AWS::SSM::Parameter": _Kind("SSM parameter", "SSM parameters", "Name"),
    "AWS::KMS::Key": _Kind("KMS key", "KMS keys"),
    "AWS::SNS::Topic": _Kind("SNS topic", "SNS topics", "TopicName"),
}

#: CDK's own helpers, not the platform's: custom resource providers (``Custom::...``, ``AWS<uuid>``) and singleton
#: constructs, whose ids end in a 32-digit hex uuid (``DeployTimeBuildCustomResourceHandler<uuid>``).
_HELPER_ID = re.compile(r"^Custom::|^Custom[A-Za-z0-9]*CustomResourceProvider|[0-9a-f]{32}")


def main_resources(template: Mapping[str, Any], paths: Mapping[str, str] | None = None) -> list[str]:
    """The main resources of ``template``, one phrase per resource type: ``"endpoints gpu-prod-classifier,
    gpu-prod-classifier-async"``, ``"VPC 10.40.0.0/16"``, ``"13 VPC endpoints"``.

    Names are the physical names the template sets (``EndpointName``...), else the construct ids of
    ``paths`` (logical id -> construct path, from ``tree.json``), else the logical ids without their hash.
    """
    resources: dict[str, Any] = template.get("Resources", {})
    paths = paths or {}
    phrases = _phrases(resources, paths, MAIN_KINDS)
    return phrases or _phrases(resources, paths, FALLBACK_KINDS)


def _phrases(resources: Mapping[str, Any], paths: Mapping[str, str], kinds: Mapping[str, _Kind]) -> list[str]:
    phrases = []
    for cfn_type, kind in kinds.items():
        found = [
            (logical_id, resource.get("Properties", {}))
            for logical_id, resource in resources.items()
            if resource.get("Type") == cfn_type and not _is_helper(paths.get(logical_id), logical_id)
        ]
        if not found:
            continue
        if kind.count_only:
            phrases.append(f"{len(found)} {kind.singular if len(found) == 1 else kind.plural}")
        elif kind.detail is not None:
            phrases.extend(kind.detail(props) for _, props in found)
        else:
            names = []
            for logical_id, props in found:
                physical = props.get(kind.name_property) if kind.name_property else None
                names.append(
                    physical if isinstance(physical, str) else _construct_name(paths.get(logical_id), logical_id)
                )
            phrases.append(f"{kind.singular if len(names) == 1 else kind.plural} {', '.join(names)}")
    return phrases


def _is_helper(path: str | None, logical_id: str) -> bool:
    """A resource of one of CDK's own helpers (custom resource providers, singleton functions), not the app's."""
    parts = path.split("/")[1:] if path else [logical_id]
    return any(_HELPER_ID.search(part) for part in parts)


# ------------------------------------------------------------------------------------------------- assembly


def _is_stack(node: Mapping[str, Any]) -> bool:
    return str(node.get("constructInfo", {}).get("fqn", "")).endswith(".Stack")


def _resource_paths(root: Path) -> dict[str, dict[str, str]]:
    """``{stack construct path: {logical id: resource construct path}}`` for every stack of the app, stages'
    stacks included (they sit below the stack that holds the stage); empty when there is no tree.json."""
    tree_file = root / "tree.json"
    if not tree_file.is_file():
        return {}
    paths: dict[str, dict[str, str]] = {}

    def walk(node: Mapping[str, Any]) -> None:
        for child in node.get("children", {}).values():
            if _is_stack(child):
                _collect(child, paths.setdefault(str(child.get("path", "")), {}))
            walk(child)

    walk(json.loads(tree_file.read_text()).get("tree", {}))
    return paths


def _collect(node: Mapping[str, Any], out: dict[str, str]) -> None:
    logical_id = node.get("attributes", {}).get("aws:cdk:cloudformation:logicalId")
    if logical_id:
        out[str(logical_id)] = str(node.get("path", ""))
    for child in node.get("children", {}).values():
        if not _is_stack(child):  # a stack inside a stack (a stage's) is its own
            _collect(child, out)


def assembly_stacks(outdir: Path) -> list[StackSummary]:
    """Every CloudFormation stack of the cloud assembly in ``outdir``, nested assemblies (stages) included:
    the app's own stacks first, then each stage's, in manifest order."""
    paths = _resource_paths(outdir)
    return _stacks_of(outdir, outdir, None, paths)


def _stacks_of(root: Path, directory: Path, stage: str | None, paths: dict[str, dict[str, str]]) -> list[StackSummary]:
    manifest = json.loads((directory / "manifest.json").read_text())
    artifacts: dict[str, Any] = manifest.get("artifacts", {})
    own: list[StackSummary] = []
    nested: list[StackSummary] = []
    assembly = "" if directory == root else directory.relative_to(root).as_posix()
    for artifact_id, artifact in artifacts.items():
        kind = artifact.get("type")
        props = artifact.get("properties", {})
        if kind == "aws:cloudformation:stack":
            template_path = directory / props["templateFile"]
            template = json.loads(template_path.read_text())
            display = str(artifact.get("displayName", artifact_id))
            own.append(
                StackSummary(
                    name=str(props.get("stackName", artifact_id)),
                    artifact_id=artifact_id,
                    assembly=assembly,
                    display_path=display,
                    stage=stage,
                    environment=str(artifact.get("environment", "")),
                    template_path=template_path,
                    resource_count=len(template.get("Resources", {})),
                    dependencies=tuple(
                        d
                        for d in artifact.get("dependencies", [])
                        if artifacts.get(d, {}).get("type") == "aws:cloudformation:stack"
                    ),
                    main_resources=tuple(main_resources(template, paths.get(display))),
                )
            )
        elif kind == "cdk:cloud-assembly":
            stage_path = str(props.get("displayName", artifact_id))
            nested.extend(_stacks_of(root, directory / props["directoryName"], stage_path, paths))
    return own + nested


# ------------------------------------------------------------------------------------------------------ text


def environment_text(environment: str) -> str:
    """``aws://unknown-account/us-east-1`` -> ``us-east-1, account-agnostic``;
    ``aws://123456789012/us-west-2`` -> ``us-west-2, account 123456789012``."""
    account, _, region = environment.removeprefix("aws://").partition("/")
    if not region:
        return environment or "environment-agnostic"
    region_text = "any region" if region.startswith("unknown") else region
    return f"{region_text}, " + ("account-agnostic" if account.startswith("unknown") else f"account {account}")


def summary_lines(stacks: list[StackSummary], outdir: Path) -> list[str]:
    """The lines :func:`main` prints: the app's stacks, each stage's under a heading, then the totals."""
    width = max(len(s.name) for s in stacks) + 2
    lines: list[str] = []
    stages: dict[str | None, list[StackSummary]] = {}
    for stack in stacks:
        stages.setdefault(stack.stage, []).append(stack)
    for stage, members in stages.items():
        indent = ""
        if stage is not None:
            parent, _, name = stage.rpartition("/")
            where = ", ".join(sorted({environment_text(s.environment) for s in members}))
            owner = f" of {parent}" if parent else ""
            lines.append(
                f"stage {name}{owner}: {len(members)} stacks, {sum(s.resource_count for s in members)} resources "
                f"({where})"
            )
            indent = "  "
        for stack in members:
            main = "; ".join(stack.main_resources) or "-"
            lines.append(f"{indent}{stack.name:<{width - len(indent)}}{stack.resource_count:>4} resources  {main}")
    total = sum(s.resource_count for s in stacks)
    parts = [f"{len(stages.get(None, []))} in the app"] if None in stages else []
    parts += [f"{len(m)} in stage {stage.rsplit('/', 1)[-1]}" for stage, m in stages.items() if stage is not None]
    breakdown = f" ({', '.join(parts)})" if len(stages) > 1 else ""
    lines.append(f"{len(stacks)} stacks{breakdown}, {total} resources in {outdir}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    outdir = Path(args[0] if args else "cdk.out")
    if not (outdir / "manifest.json").is_file():
        print(f"{outdir / 'manifest.json'} not found: synthesize first (make synth)", file=sys.stderr)
        return 1
    stacks = assembly_stacks(outdir)
    if not stacks:
        print(f"no stacks in {outdir}", file=sys.stderr)
        return 1
    for line in summary_lines(stacks, outdir):
        print(line)
    from platform_tools.cost import estimate_assembly, estimate_lines  # the cost module reads stacks through this one

    for line in estimate_lines(estimate_assembly(outdir)):
        print(line)
    violations = validation_violations(outdir)
    for line in violations:
        print(f"UNACKNOWLEDGED: {line}", file=sys.stderr)
    if violations:
        print(f"{len(violations)} unacknowledged validation finding(s)", file=sys.stderr)
        return 1
    print(
        "cdk-nag (AwsSolutions, HIPAA Security, NIST 800-53 R5, PCI DSS 3.2.1, GpuPlatform): 0 unacknowledged findings"
    )
    return 0


def validation_violations(outdir: Path) -> list[str]:
    """Every violation (errors and warnings) in the assembly's policy validation report."""
    report_path = outdir / "policy-validation-report.json"
    if not report_path.exists():
        return [f"{report_path} missing: set @aws-cdk/core:validationReportJson in cdk.json"]
    report = json.loads(report_path.read_text())
    found = []
    for plugin in report.get("pluginReports", []):
        for violation in plugin.get("violations", []):
            paths = [c.get("constructPath", "?") for c in violation.get("violatingConstructs", [])]
            found.append(f"{plugin.get('pluginName', '?')} {violation.get('ruleName', '?')}: {', '.join(paths)}")
    return found


if __name__ == "__main__":
    raise SystemExit(main())
