"""Draw the architecture diagram from a synthesized cloud assembly.

``python -m platform_tools.diagram cdk.out OUT.png`` draws it; ``make diagram`` runs it on ``cdk.out`` (synthesizing
first when needed) and writes ``docs/architecture.png``.
It reads only the assembly: ``manifest.json`` (stacks, their dependencies, templates, nested assemblies),
``tree.json`` (the construct tree: main resources per stack, their construct types and logical ids) and each
template (``Fn::ImportValue`` of another stack's export, SSM parameters one stack writes and another reads, the
stages of a CodePipeline).

The picture: each stack of the app is a cluster with its main resources (grouped by the construct that owns
them, resources of one kind merged into one box); arrows are the cross-stack references, labelled with what
crosses (solid: CloudFormation export/import, dashed: an SSM parameter read at deploy time). Stacks are
placed in columns by dependency depth, in a fixed order, so the same assembly always gives the same picture.

A stage (a nested cloud assembly, such as each environment a CDK pipeline deploys) is drawn as a stage: one
cluster below the app's stacks, holding its stacks (name, resource count, main resources) and the references
between them, with an arrow from the stack that deploys it (the pipeline), labelled with the manual approval
when its CodePipeline stage has one. Stages are drawn in the pipeline's order.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Service family -> (colour, legend label). Colours follow the AWS architecture icon categories.
CATEGORIES: dict[str, tuple[str, str]] = {
    "network": ("#8C4FFF", "networking"),
    "compute": ("#ED7100", "compute (EC2)"),
    "ml": ("#01A88D", "machine learning (SageMaker)"),
    "storage": ("#7AA116", "storage (S3, FSx, EFS, ECR)"),
    "security": ("#DD344C", "security (IAM, KMS)"),
    "integration": ("#C925D1", "integration (Step Functions, SNS, EventBridge)"),
    "management": ("#E7157B", "management (CloudWatch, Logs, SSM)"),
    "devtools": ("#3B48CC", "developer tools (CodeBuild, CodePipeline)"),
    "other": ("#7D8998", "other"),
}

_SERVICE_CATEGORY = {
    "ec2": "network",
    "autoscaling": "compute",
    "sagemaker": "ml",
    "s3": "storage",
    "fsx": "storage",
    "efs": "storage",
    "ecr": "storage",
    "iam": "security",
    "kms": "security",
    "stepfunctions": "integration",
    "sns": "integration",
    "events": "integration",
    "sqs": "integration",
    "cloudwatch": "management",
    "logs": "management",
    "ssm": "management",
    "applicationautoscaling": "management",
    "codebuild": "devtools",
    "codepipeline": "devtools",
    "codestarconnections": "devtools",
    "codeconnections": "devtools",
    "lambda": "compute",
}
_EC2_COMPUTE = {"LaunchTemplate", "Instance", "PlacementGroup", "CfnLaunchTemplate", "CfnInstance", "CfnPlacementGroup"}
_SKIP_IDS = {"Exports", "BootstrapVersion", "CheckBootstrapVersion", "CDKMetadata", "Tree"}
_SKIP_FQN_SUFFIXES = ("CfnOutput", "CfnParameter", "CfnRule", "CfnCondition", "CfnMapping")
_NESTED_FQN_SUFFIXES = ("aws-cdk-lib.Stage", "aws-cdk-lib.Stack")
_HASH_SUFFIX = re.compile(r"[0-9a-f]{8}$|[0-9A-F]{8}$")


@dataclass
class Resource:
    """One box: a main resource of a stack, or several of one kind merged."""

    names: list[str]
    kind: str  # e.g. "ec2.Vpc", "SageMaker Endpoint"
    category: str
    paths: list[str] = field(default_factory=list)


@dataclass
class Group:
    """The resources one construct of a stack owns (``name`` empty for the stack's own top-level resources)."""

    name: str
    resources: list[Resource]


@dataclass
class StackInfo:
    name: str
    artifact_id: str  # unique in the app: the manifest id, prefixed by the stage's assembly directory in a stage
    resource_count: int
    groups: list[Group]
    dependencies: list[str]  # artifact ids of other stacks
    stage: str | None = None  # construct path of the stage holding the stack (gpu-prod-pipeline/Dev); None: the app's
    main_resources: list[str] = field(default_factory=list)  # platform_tools.summary.main_resources


@dataclass
class Stage:
    """A stage of the app (a nested cloud assembly): the stacks a pipeline deploys into one environment."""

    path: str  # construct path, e.g. gpu-prod-pipeline/Dev
    environment: str  # aws://ACCOUNT/REGION of its stacks
    stacks: list[str]  # artifact ids
    deployer: str | None = None  # artifact id of the app's stack that holds the stage (the pipeline), if any
    approval: bool = False  # its CodePipeline stage waits for a manual approval before deploying

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass
class Reference:
    producer: str  # artifact id
    consumer: str  # artifact id
    items: list[str]
    via: str  # "export" or "ssm"


@dataclass
class Architecture:
    environment: str  # the environments of the app's own stacks
    stacks: list[StackInfo]  # every stack: the app's own, then each stage's
    references: list[Reference]
    stages: list[Stage] = field(default_factory=list)  # in the order the pipeline deploys them

    @property
    def resource_count(self) -> int:
        return sum(s.resource_count for s in self.stacks)

    @property
    def app_stacks(self) -> list[StackInfo]:
        """The app's own stacks (not in a stage)."""
        return [s for s in self.stacks if s.stage is None]


# --------------------------------------------------------------------------------------------------- reading


def _fqn(node: dict[str, Any]) -> str:
    return str(node.get("constructInfo", {}).get("fqn", ""))


def _children(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list(node.get("children", {}).values())


def _cfn_type(node: dict[str, Any]) -> str | None:
    value = node.get("attributes", {}).get("aws:cdk:cloudformation:type")
    return str(value) if value else None


def _has_resources(node: dict[str, Any]) -> bool:
    return _cfn_type(node) is not None or any(_has_resources(c) for c in _children(node))


def _primary_cfn_type(node: dict[str, Any]) -> str | None:
    """The CloudFormation type that best stands for ``node``: its own, its ``Resource`` child's, else the first."""
    own = _cfn_type(node)
    if own:
        return own
    children = node.get("children", {})
    if "Resource" in children:
        found = _primary_cfn_type(children["Resource"])
        if found:
            return found
    for child in _children(node):
        found = _primary_cfn_type(child)
        if found:
            return found
    return None


def _is_l2(fqn: str) -> bool:
    """An aws-cdk-lib higher-level construct (not an L1 ``Cfn*``, not a plain ``Construct``)."""
    if not fqn.startswith("aws-cdk-lib.aws_"):
        return False
    return not fqn.rsplit(".", 1)[-1].startswith("Cfn")


def _kind_and_category(node: dict[str, Any]) -> tuple[str, str]:
    fqn = _fqn(node)
    if _is_l2(fqn):
        module, cls = fqn[len("aws-cdk-lib.") :].rsplit(".", 1)
        service = module.removeprefix("aws_").split("_")[0]
        kind = f"{service}.{cls}"
    else:
        cfn = _primary_cfn_type(node) or "AWS::Other::Resource"
        _, service_name, cls = [*cfn.split("::"), "", "", ""][:3]
        service = service_name.lower()
        kind = f"{service}.{cls}"
    category = _SERVICE_CATEGORY.get(service, "other")
    if service == "ec2" and cls in _EC2_COMPUTE:
        category = "compute"
    return kind, category


def _clean(name: str) -> str:
    name = _HASH_SUFFIX.sub("", name) if len(name) > 9 else name
    return name


def _main_nodes(stack_node: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(group name, resource nodes) for a stack: plain ``Construct`` wrappers are opened one level."""
    top: list[dict[str, Any]] = []
    groups: list[tuple[str, list[dict[str, Any]]]] = []
    for child in _children(stack_node):
        if child["id"] in _SKIP_IDS or _fqn(child).endswith(_SKIP_FQN_SUFFIXES) or _is_assembly(child):
            continue
        if child["id"].startswith(("Custom::", "SsmParameterValue:", "AWS")) or not _has_resources(child):
            continue
        inner = [c for c in _children(child) if _has_resources(c)]
        if _fqn(child) == "constructs.Construct" and len(inner) >= 2:
            groups.append((child["id"], inner))
        else:
            top.append(child)
    return ([("", top)] if top else []) + groups


def _resource_label(node: dict[str, Any], group: str) -> str:
    if node["id"] == "Resource":
        return group or node["path"].split("/")[-2]
    return _clean(node["id"])


def _merge(nodes: list[dict[str, Any]], group: str) -> list[Resource]:
    by_kind: dict[str, Resource] = {}
    for node in nodes:
        kind, category = _kind_and_category(node)
        label = _resource_label(node, group)
        if kind in by_kind:
            by_kind[kind].names.append(label)
            by_kind[kind].paths.append(node["path"])
        else:
            by_kind[kind] = Resource(names=[label], kind=kind, category=category, paths=[node["path"]])
    return list(by_kind.values())


def _logical_paths(node: dict[str, Any], out: dict[tuple[str, str], str], stack: str) -> None:
    logical = node.get("attributes", {}).get("aws:cdk:cloudformation:logicalId")
    if logical:
        out[(stack, str(logical))] = str(node["path"])
    for child in _children(node):
        if not _is_assembly(child):  # a stage's stacks have logical ids of their own
            _logical_paths(child, out, stack)


def _is_assembly(node: dict[str, Any]) -> bool:
    """A stage or a stack below a stack (a pipeline's stage): drawn on its own, not as the stack's resource."""
    return _fqn(node).endswith(_NESTED_FQN_SUFFIXES)


def _short(path: str) -> str:
    """A reader's name for a referenced resource from its construct path."""
    parts = [p for p in path.split("/")[1:] if p not in ("Resource", "Default", "Subnet", "Bucket")]
    name = _clean(parts[-1]) if parts else path
    return re.sub(r"\d+$", "", name) or name


def _refs_in(value: Any, found: list[str], ssm: list[str]) -> None:
    if isinstance(value, dict):
        if "Fn::ImportValue" in value and isinstance(value["Fn::ImportValue"], str):
            found.append(value["Fn::ImportValue"])
        for item in value.values():
            _refs_in(item, found, ssm)
    elif isinstance(value, list):
        for item in value:
            _refs_in(item, found, ssm)
    elif isinstance(value, str):
        ssm.extend(re.findall(r"\{\{resolve:ssm:([^:}]+)", value))


def load(outdir: Path) -> Architecture:
    """Read a cloud assembly directory (``cdk.out``) into an :class:`Architecture`, stages included."""
    from platform_tools.summary import assembly_stacks

    manifest_path = outdir / "manifest.json"
    tree_path = outdir / "tree.json"
    for path in (manifest_path, tree_path):
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: synthesize first (make synth)")
    tree = json.loads(tree_path.read_text())["tree"]
    summaries = assembly_stacks(outdir)
    if not summaries:
        raise ValueError(f"{manifest_path}: no CloudFormation stacks in this assembly")

    templates: dict[str, dict[str, Any]] = {}
    scope: dict[str, str | None] = {}  # artifact id -> its stage (exports and parameters resolve within one)
    stacks: list[StackInfo] = []
    logical: dict[tuple[str, str], str] = {}
    environments: set[str] = set()
    for summary in summaries:
        key = summary.key
        template = json.loads(summary.template_path.read_text())
        templates[key] = template
        scope[key] = summary.stage
        if summary.stage is None:
            environments.add(summary.environment)
        node: dict[str, Any] = tree
        for part in summary.display_path.split("/"):
            node = node.get("children", {}).get(part, {})
        _logical_paths(node, logical, key)
        groups = [Group(name=g, resources=_merge(nodes, g)) for g, nodes in _main_nodes(node)]
        prefix = f"{summary.assembly}/" if summary.assembly else ""
        stacks.append(
            StackInfo(
                name=summary.name,
                artifact_id=key,
                resource_count=summary.resource_count,
                groups=groups,
                dependencies=[prefix + d for d in summary.dependencies],
                stage=summary.stage,
                main_resources=list(summary.main_resources),
            )
        )

    exports: dict[tuple[str | None, str], tuple[str, str]] = {}  # (stage, export) -> (producer, resource name)
    ssm_writers: dict[tuple[str | None, str], str] = {}  # (stage, parameter name) -> producer
    for artifact_id, template in templates.items():
        for output in template.get("Outputs", {}).values():
            name = output.get("Export", {}).get("Name")
            if not isinstance(name, str):
                continue
            value = output.get("Value", {})
            target = value.get("Ref") if isinstance(value, dict) else None
            if isinstance(value, dict) and "Fn::GetAtt" in value:
                target = value["Fn::GetAtt"][0]
            construct_path = logical.get((artifact_id, str(target)), str(target))
            exports[(scope[artifact_id], name)] = (artifact_id, _short(construct_path))
        for resource in template.get("Resources", {}).values():
            if resource.get("Type") == "AWS::SSM::Parameter":
                pname = resource.get("Properties", {}).get("Name")
                if isinstance(pname, str):
                    ssm_writers[(scope[artifact_id], pname)] = artifact_id

    refs: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for artifact_id, template in templates.items():
        imports: list[str] = []
        ssm_reads: list[str] = []
        _refs_in(template.get("Resources", {}), imports, ssm_reads)
        for param in template.get("Parameters", {}).values():
            if "AWS::SSM::Parameter" in str(param.get("Type", "")) and isinstance(param.get("Default"), str):
                ssm_reads.append(param["Default"])
        for name in imports:
            if (scope[artifact_id], name) in exports:
                producer, item = exports[(scope[artifact_id], name)]
                if item not in refs[(producer, artifact_id, "export")]:
                    refs[(producer, artifact_id, "export")].append(item)
        for pname in ssm_reads:
            producer_id = ssm_writers.get((scope[artifact_id], pname))
            if producer_id and producer_id != artifact_id and pname not in refs[(producer_id, artifact_id, "ssm")]:
                refs[(producer_id, artifact_id, "ssm")].append(pname)
    references = [
        Reference(producer=p, consumer=c, items=items, via=via) for (p, c, via), items in sorted(refs.items())
    ]
    env = ", ".join(sorted(e for e in environments if e)) or "environment-agnostic"
    stages = _stages(summaries, templates)
    return Architecture(environment=env, stacks=stacks, references=references, stages=stages)


def _stages(summaries: list[Any], templates: dict[str, dict[str, Any]]) -> list[Stage]:
    """The stages of the assembly, each with the app's stack that holds it (its deployer) and whether that stack's
    CodePipeline waits for a manual approval (an action of category ``Approval``) in the stage; in the order of
    the pipeline's stages, else of the manifest."""
    by_path = {s.display_path: s.key for s in summaries if s.stage is None}
    stages: dict[str, Stage] = {}
    for summary in summaries:
        if summary.stage is None:
            continue
        stage = stages.get(summary.stage)
        if stage is None:
            parent = summary.stage.rpartition("/")[0]
            stage = stages[summary.stage] = Stage(
                path=summary.stage, environment=summary.environment, stacks=[], deployer=by_path.get(parent)
            )
        stage.stacks.append(summary.key)
    order: dict[str, int] = {}
    for stage in stages.values():
        if stage.deployer is None:
            continue
        for resource in templates[stage.deployer].get("Resources", {}).values():
            if resource.get("Type") != "AWS::CodePipeline::Pipeline":
                continue
            for index, pipeline_stage in enumerate(resource.get("Properties", {}).get("Stages", [])):
                if pipeline_stage.get("Name") == stage.name:
                    order[stage.path] = index
                    categories = {a.get("ActionTypeId", {}).get("Category") for a in pipeline_stage.get("Actions", [])}
                    stage.approval = "Approval" in categories
    manifest_order = list(stages)
    return sorted(stages.values(), key=lambda st: (order.get(st.path, len(order)), manifest_order.index(st.path)))


# --------------------------------------------------------------------------------------------------- layout

NODE_W, NODE_H, NODE_GAP = 2.85, 0.62, 0.14
COLS = 3
PAD, TITLE_H, GROUP_TITLE_H = 0.22, 0.62, 0.34
COLUMN_GAP, STACK_GAP = 3.6, 0.55
LABEL_H = 0.8


@dataclass
class Box:
    x: float
    y: float  # bottom
    w: float
    h: float


# A stage's stacks are drawn compact: name, resource count and main resources, one per line.
STAGE_STACK_W, STAGE_TITLE_H, LINE_H, MAX_LINES = 4.3, 0.5, 0.27, 5
STAGE_PAD, STAGE_HEAD_H, STAGE_COLUMN_GAP, STAGE_STACK_GAP = 0.35, 0.75, 1.1, 0.3
CLUSTER_GAP, BAND_GAP = 1.2, 2.0  # between two stages; between the app's stacks and the stages


@dataclass
class Layout:
    """Where everything goes, in data units (y up): a box per stack, a box per stage, the figure's size."""

    boxes: dict[str, Box]  # every stack's box (the app's and each stage's), by artifact id
    columns: dict[str, int]  # resource boxes per row of each of the app's stacks
    clusters: dict[str, Box]  # each stage's box, by stage path
    width: float
    height: float


def _layers(
    stacks: list[StackInfo], references: list[Reference], last: frozenset[str] = frozenset()
) -> list[list[StackInfo]]:
    """``stacks`` in columns by dependency depth; in each column, the stacks of ``last`` (those that deploy a
    stage) go to the bottom, where the arrows to their stages leave."""
    by_id = {s.artifact_id: s for s in stacks}
    deps: dict[str, set[str]] = {s.artifact_id: {d for d in s.dependencies if d in by_id} for s in stacks}
    for ref in references:
        if ref.producer != ref.consumer and ref.consumer in deps and ref.producer in by_id:
            deps[ref.consumer].add(ref.producer)
    depth: dict[str, int] = {}

    def level(sid: str, seen: frozenset[str] = frozenset()) -> int:
        if sid not in depth:
            parents = [d for d in sorted(deps[sid]) if d not in seen]
            depth[sid] = 1 + max((level(p, seen | {sid}) for p in parents), default=-1)
        return depth[sid]

    for sid in sorted(by_id):
        level(sid)
    layers: list[list[StackInfo]] = [[] for _ in range(max(depth.values()) + 1)]
    consumers: dict[str, int] = defaultdict(int)
    for parents in deps.values():
        for parent in parents:
            consumers[parent] += 1
    for sid in sorted(by_id):
        layers[depth[sid]].append(by_id[sid])
    layers[0].sort(key=lambda s: (s.artifact_id in last, -consumers[s.artifact_id], s.name))
    for i in range(1, len(layers)):
        index = {s.artifact_id: n for layer in layers[:i] for n, s in enumerate(layer)}
        layers[i].sort(
            key=lambda s: (
                s.artifact_id in last,
                sum(index.get(p, 0) for p in deps[s.artifact_id]) / max(len(deps[s.artifact_id]), 1),
                s.name,
            )
        )
    return layers


def _stack_size(stack: StackInfo, incoming: int) -> tuple[float, float, int]:
    cols = max(1, min(COLS, max((len(g.resources) for g in stack.groups), default=1)))
    h = TITLE_H + PAD
    for group in stack.groups:
        rows = -(-len(group.resources) // cols)
        h += (GROUP_TITLE_H if group.name else 0) + rows * (NODE_H + NODE_GAP)
    h = max(h + PAD, incoming * LABEL_H + TITLE_H + PAD, TITLE_H + 2 * PAD + NODE_H)
    w = cols * (NODE_W + NODE_GAP) - NODE_GAP + 2 * PAD
    return w, h, cols


def _stage_lines(stack: StackInfo) -> list[str]:
    """The text lines of a stage's stack: its main resources, at most :data:`MAX_LINES`."""
    lines = list(stack.main_resources) or ["-"]
    if len(lines) > MAX_LINES:
        lines = [*lines[: MAX_LINES - 1], f"+{len(lines) - MAX_LINES + 1} more"]
    return lines


def _stage_layout(arch: Architecture, stage: Stage) -> tuple[dict[str, Box], float, float]:
    """A stage's stacks in columns by dependency depth, relative to the stage's lower left corner; its size."""
    by_id = {s.artifact_id: s for s in arch.stacks}
    members = [by_id[sid] for sid in stage.stacks]
    inside = set(stage.stacks)
    layers = _layers(members, [r for r in arch.references if r.consumer in inside])
    heights = {s.artifact_id: STAGE_TITLE_H + len(_stage_lines(s)) * LINE_H + PAD for s in members}
    col_h = [sum(heights[s.artifact_id] for s in layer) + STAGE_STACK_GAP * (len(layer) - 1) for layer in layers]
    inner_h = max(col_h)
    width = len(layers) * STAGE_STACK_W + (len(layers) - 1) * STAGE_COLUMN_GAP + 2 * STAGE_PAD
    height = inner_h + STAGE_HEAD_H + 2 * STAGE_PAD
    boxes: dict[str, Box] = {}
    for i, layer in enumerate(layers):
        x = STAGE_PAD + i * (STAGE_STACK_W + STAGE_COLUMN_GAP)
        y = STAGE_PAD + inner_h - (inner_h - col_h[i]) / 2
        for stack in layer:
            y -= heights[stack.artifact_id]
            boxes[stack.artifact_id] = Box(x, y, STAGE_STACK_W, heights[stack.artifact_id])
            y -= STAGE_STACK_GAP
    return boxes, width, height


def layout(arch: Architecture) -> Layout:
    """The app's stacks in columns by dependency depth; below them, the stages side by side in pipeline order."""
    app = arch.app_stacks
    app_ids = {s.artifact_id for s in app}
    app_refs = [r for r in arch.references if r.consumer in app_ids]
    deployers = frozenset(st.deployer for st in arch.stages if st.deployer)
    layers = _layers(app, app_refs, deployers)
    incoming: dict[str, int] = defaultdict(int)
    for ref in app_refs:
        incoming[ref.consumer] += 1
    sizes = {s.artifact_id: _stack_size(s, incoming[s.artifact_id]) for layer in layers for s in layer}
    col_w = [max(sizes[s.artifact_id][0] for s in layer) for layer in layers]
    col_h = [sum(sizes[s.artifact_id][1] for s in layer) + STACK_GAP * (len(layer) - 1) for layer in layers]
    height = max(col_h)
    boxes: dict[str, Box] = {}
    x = 0.0
    for i, layer in enumerate(layers):
        y = height - (height - col_h[i]) / 2
        for stack in layer:
            h = sizes[stack.artifact_id][1]
            y -= h
            boxes[stack.artifact_id] = Box(x, y, col_w[i], h)
            y -= STACK_GAP
        x += col_w[i] + COLUMN_GAP
    width = x - COLUMN_GAP
    clusters: dict[str, Box] = {}
    if arch.stages:
        inner = [_stage_layout(arch, stage) for stage in arch.stages]
        band = max(h for _, _, h in inner)
        row_w = sum(w for _, w, _ in inner) + CLUSTER_GAP * (len(inner) - 1)
        shift = band + BAND_GAP
        boxes = {sid: Box(b.x, b.y + shift, b.w, b.h) for sid, b in boxes.items()}
        x = max(0.0, (width - row_w) / 2)
        for stage, (relative, w, h) in zip(arch.stages, inner, strict=True):
            clusters[stage.path] = Box(x, band - h, w, h)
            for sid, b in relative.items():
                boxes[sid] = Box(x + b.x, band - h + b.y, b.w, b.h)
            x += w + CLUSTER_GAP
        width, height = max(width, row_w), height + shift
    return Layout(
        boxes=boxes, columns={k: v[2] for k, v in sizes.items()}, clusters=clusters, width=width, height=height
    )


# --------------------------------------------------------------------------------------------------- drawing


def render(arch: Architecture, output: Path, *, title: str | None = None, dpi: int = 110) -> Path:
    """Draw ``arch`` into ``output`` (PNG or SVG by suffix). Deterministic for one matplotlib version."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    placed = layout(arch)
    boxes, cols, width, height = placed.boxes, placed.columns, placed.width, placed.height
    margin_top, margin_bottom, margin_side = 1.1, 1.5, 0.4
    fig_w, fig_h = width + 2 * margin_side, height + margin_top + margin_bottom
    scale = 0.62  # inches per data unit
    fig = plt.figure(figsize=(fig_w * scale, fig_h * scale))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-margin_side, width + margin_side)
    ax.set_ylim(-margin_bottom, height + margin_top)
    ax.axis("off")

    for stack in arch.app_stacks:
        sid, box = stack.artifact_id, boxes[stack.artifact_id]
        ax.add_patch(
            FancyBboxPatch(
                (box.x, box.y), box.w, box.h, boxstyle="round,pad=0,rounding_size=0.15",
                facecolor="#F7F9FB", edgecolor="#232F3E", linewidth=1.4, zorder=1,
            )
        )  # fmt: skip
        ax.text(
            box.x + PAD, box.y + box.h - TITLE_H / 2 - 0.05, stack.name,
            fontsize=10.5, fontweight="bold", va="center", ha="left", color="#232F3E", zorder=3,
        )  # fmt: skip
        ax.text(
            box.x + box.w - PAD, box.y + box.h - TITLE_H / 2 - 0.05, f"{stack.resource_count} resources",
            fontsize=7.5, va="center", ha="right", color="#545B64", zorder=3,
        )  # fmt: skip
        n_cols = cols[sid]
        inner_w = n_cols * (NODE_W + NODE_GAP) - NODE_GAP
        x0 = box.x + (box.w - inner_w) / 2
        y = box.y + box.h - TITLE_H - PAD / 2
        for group in stack.groups:
            if group.name:
                y -= GROUP_TITLE_H
                ax.text(x0, y + 0.1, group.name, fontsize=7.5, style="italic", color="#545B64", zorder=3)
            for i, res in enumerate(group.resources):
                row, col = divmod(i, n_cols)
                nx = x0 + col * (NODE_W + NODE_GAP)
                ny = y - (row + 1) * (NODE_H + NODE_GAP) + NODE_GAP
                colour = CATEGORIES[res.category][0]
                ax.add_patch(
                    FancyBboxPatch(
                        (nx, ny), NODE_W, NODE_H, boxstyle="round,pad=0,rounding_size=0.08",
                        facecolor="white", edgecolor=colour, linewidth=1.2, zorder=2,
                    )
                )  # fmt: skip
                ax.add_patch(
                    FancyBboxPatch(
                        (nx, ny), 0.09, NODE_H, boxstyle="square,pad=0", facecolor=colour, linewidth=0, zorder=2
                    )
                )
                head = res.kind if len(res.names) == 1 else f"{res.kind} \u00d7{len(res.names)}"
                names = ", ".join(_strip_common_suffix(res.names))
                ax.text(nx + 0.17, ny + NODE_H * 0.68, _fit(head, 30), fontsize=6.8, va="center", zorder=3,
                        fontweight="bold", color="#232F3E")  # fmt: skip
                ax.text(nx + 0.17, ny + NODE_H * 0.28, _fit(names, 37), fontsize=6.2, va="center", zorder=3,
                        color="#545B64")  # fmt: skip
            rows = -(-len(group.resources) // n_cols)
            y -= rows * (NODE_H + NODE_GAP)

    # Cross-stack references: producer's right edge -> consumer's left edge, one attach point per reference.
    app_ids = {s.artifact_id for s in arch.app_stacks}
    app_refs = [r for r in arch.references if r.consumer in app_ids]
    outgoing: dict[str, list[Reference]] = defaultdict(list)
    incoming: dict[str, list[Reference]] = defaultdict(list)
    for ref in app_refs:
        outgoing[ref.producer].append(ref)
        incoming[ref.consumer].append(ref)

    def order_key(other: str) -> tuple[float, str]:
        return (-(boxes[other].y + boxes[other].h / 2), other)

    for refs in outgoing.values():
        refs.sort(key=lambda r: order_key(r.consumer))
    for refs in incoming.values():
        refs.sort(key=lambda r: order_key(r.producer))

    def attach(box: Box, index: int, count: int, side: str) -> tuple[float, float]:
        usable = box.h - TITLE_H - PAD
        step = usable / (count + 1)
        return (box.x + box.w if side == "right" else box.x, box.y + usable - step * (index + 1) + PAD / 2)

    for ref in app_refs:
        src_box, dst_box = boxes[ref.producer], boxes[ref.consumer]
        start = attach(src_box, outgoing[ref.producer].index(ref), len(outgoing[ref.producer]), "right")
        end = attach(dst_box, incoming[ref.consumer].index(ref), len(incoming[ref.consumer]), "left")
        if dst_box.x <= src_box.x:  # same or earlier column: leave from the left instead
            start = (src_box.x, start[1])
        colour = "#232F3E" if ref.via == "export" else "#7D8998"
        ax.add_patch(
            FancyArrowPatch(
                start, end, arrowstyle="-|>", mutation_scale=11, linewidth=1.1, color=colour, alpha=0.85,
                linestyle="-" if ref.via == "export" else "--", connectionstyle="arc3,rad=0.0", zorder=0.5,
            )
        )  # fmt: skip
        label_x = end[0] - 1.4  # next to the consumer, where arrows into one stack are spread apart
        label_y = start[1] + (end[1] - start[1]) * (label_x - start[0]) / max(end[0] - start[0], 1e-6)
        text = "\n".join(textwrap.wrap(", ".join(ref.items), 34, break_on_hyphens=False)[:3])
        ax.text(
            label_x, label_y, text, fontsize=6.3, ha="center", va="center", color=colour, zorder=5,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": colour, "linewidth": 0.6},
        )  # fmt: skip

    _draw_stages(ax, arch, placed)
    ax.text(
        -margin_side + 0.3, height + margin_top - 0.45,
        title or _default_title(arch),
        fontsize=14, fontweight="bold", va="center", ha="left", color="#232F3E",
    )  # fmt: skip
    _legend(ax, stages=bool(arch.stages))
    output.parent.mkdir(parents=True, exist_ok=True)
    metadata: dict[str, Any] = {"Software": None} if output.suffix.lower() == ".png" else {"Date": None}
    fig.savefig(output, dpi=dpi, metadata=metadata, facecolor="white")
    plt.close(fig)
    return output


STAGE_COLOUR, STAGE_FILL = CATEGORIES["devtools"][0], "#F1F2FB"


def _draw_stages(ax: Any, arch: Architecture, placed: Layout) -> None:
    """Each stage as a cluster of compact stacks with the references between them, and an arrow from the stack
    that deploys it (leaving its bottom edge, running in the gap above the stages, entering the stage's top)."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    from platform_tools.summary import environment_text

    by_id = {s.artifact_id: s for s in arch.stacks}
    boxes = placed.boxes
    for stage in arch.stages:
        cluster = placed.clusters[stage.path]
        ax.add_patch(
            FancyBboxPatch(
                (cluster.x, cluster.y), cluster.w, cluster.h, boxstyle="round,pad=0,rounding_size=0.2",
                facecolor=STAGE_FILL, edgecolor=STAGE_COLOUR, linewidth=1.6, linestyle="--", zorder=0.2,
            )
        )  # fmt: skip
        members = [by_id[sid] for sid in stage.stacks]
        head = (
            f"pipeline stage {stage.name}  ·  {environment_text(stage.environment)}  ·  {len(members)} stacks, "
            f"{sum(s.resource_count for s in members)} resources"
        )
        ax.text(
            cluster.x + STAGE_PAD, cluster.y + cluster.h - STAGE_HEAD_H / 2 - 0.05, head,
            fontsize=10, fontweight="bold", va="center", ha="left", color=STAGE_COLOUR, zorder=3,
        )  # fmt: skip
        for stack in members:
            box = boxes[stack.artifact_id]
            ax.add_patch(
                FancyBboxPatch(
                    (box.x, box.y), box.w, box.h, boxstyle="round,pad=0,rounding_size=0.1",
                    facecolor="white", edgecolor="#232F3E", linewidth=1.0, zorder=1,
                )
            )  # fmt: skip
            top = box.y + box.h - STAGE_TITLE_H / 2 - 0.02
            ax.text(box.x + PAD, top, stack.name, fontsize=8.5, fontweight="bold", va="center", zorder=3,
                    color="#232F3E")  # fmt: skip
            ax.text(box.x + box.w - PAD, top, f"{stack.resource_count} resources", fontsize=6.5, va="center",
                    ha="right", color="#545B64", zorder=3)  # fmt: skip
            for n, line in enumerate(_stage_lines(stack)):
                y = box.y + box.h - STAGE_TITLE_H - (n + 0.5) * LINE_H
                ax.text(box.x + PAD, y, _fit(line, 62), fontsize=6.2, va="center", color="#545B64", zorder=3)
        _draw_stage_references(ax, arch, stage, boxes)

    deployed: dict[str, list[Stage]] = defaultdict(list)
    for stage in arch.stages:
        if stage.deployer is not None:
            deployed[stage.deployer].append(stage)
    band_top = max((c.y + c.h for c in placed.clusters.values()), default=0.0)
    for deployer, stages in deployed.items():
        source = boxes[deployer]
        ordered = sorted(stages, key=lambda st: placed.clusters[st.path].x)
        for i, stage in enumerate(ordered):
            cluster = placed.clusters[stage.path]
            sx = source.x + source.w * (i + 1) / (len(ordered) + 1)
            ex = cluster.x + cluster.w / 2
            mid = band_top + BAND_GAP * (i + 1) / (len(ordered) + 1)
            ax.plot([sx, sx, ex], [source.y, mid, mid], color=STAGE_COLOUR, linewidth=1.6, zorder=0.6)
            ax.add_patch(
                FancyArrowPatch(
                    (ex, mid), (ex, cluster.y + cluster.h), arrowstyle="-|>", mutation_scale=14, linewidth=1.6,
                    color=STAGE_COLOUR, zorder=0.6,
                )
            )  # fmt: skip
            label = "manual approval, then deploys" if stage.approval else "deploys"
            ax.text(
                (sx + ex) / 2 if abs(sx - ex) > 3 else ex, mid, f"{label} {stage.name}", fontsize=7.5, ha="center",
                va="center", color=STAGE_COLOUR, zorder=5,
                bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": STAGE_COLOUR, "linewidth": 0.8},
            )  # fmt: skip


def _draw_stage_references(ax: Any, arch: Architecture, stage: Stage, boxes: dict[str, Box]) -> None:
    """The references between a stage's stacks: thin arrows, unlabelled (the app's stacks above name them)."""
    from matplotlib.patches import FancyArrowPatch

    inside = set(stage.stacks)
    refs = [r for r in arch.references if r.consumer in inside and r.producer in inside]
    outgoing: dict[str, list[Reference]] = defaultdict(list)
    incoming: dict[str, list[Reference]] = defaultdict(list)
    for ref in refs:
        outgoing[ref.producer].append(ref)
        incoming[ref.consumer].append(ref)
    for group in outgoing.values():
        group.sort(key=lambda r: (-boxes[r.consumer].y, r.consumer, r.via))
    for group in incoming.values():
        group.sort(key=lambda r: (-boxes[r.producer].y, r.producer, r.via))

    def attach(box: Box, index: int, count: int, right: bool) -> tuple[float, float]:
        usable = box.h - STAGE_TITLE_H
        return (box.x + box.w if right else box.x, box.y + usable - usable * (index + 1) / (count + 1))

    for ref in refs:
        src, dst = boxes[ref.producer], boxes[ref.consumer]
        start = attach(src, outgoing[ref.producer].index(ref), len(outgoing[ref.producer]), dst.x > src.x)
        end = attach(dst, incoming[ref.consumer].index(ref), len(incoming[ref.consumer]), False)
        colour = "#232F3E" if ref.via == "export" else "#7D8998"
        ax.add_patch(
            FancyArrowPatch(
                start, end, arrowstyle="-|>", mutation_scale=8, linewidth=0.8, color=colour, alpha=0.7,
                linestyle="-" if ref.via == "export" else "--", zorder=0.5,
            )
        )  # fmt: skip


def _legend(ax: Any, *, stages: bool = False) -> None:
    """The service colours and the kinds of arrows (and of stages, when there are any), in the lower left corner."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(facecolor=c, edgecolor=c, label=label) for c, label in CATEGORIES.values()]
    handles += [
        Line2D([0], [0], color="#232F3E", label="cross-stack reference (export → import)"),
        Line2D([0], [0], color="#7D8998", linestyle="--", label="SSM parameter read at deploy time"),
    ]
    if stages:
        handles += [
            Patch(facecolor=STAGE_FILL, edgecolor=STAGE_COLOUR, linestyle="--", label="pipeline stage (its stacks)"),
            Line2D([0], [0], color=STAGE_COLOUR, linewidth=1.6, label="the pipeline deploys the stage"),
        ]
    ax.legend(
        handles=handles, loc="lower left", bbox_to_anchor=(0.005, 0.005), ncol=4, fontsize=7.5, frameon=False,
    )  # fmt: skip


def _default_title(arch: Architecture) -> str:
    from platform_tools.summary import environment_text

    app = arch.app_stacks
    names = [s.name for s in app]
    prefix = names[0].rsplit("-", 1)[0] if names else ""
    if not all(n.startswith(prefix + "-") for n in names):
        prefix = ""
    where = [environment_text(env) for env in arch.environment.split(", ")]
    head = f"{prefix}: " if prefix else ""
    count = f"{len(app)} stacks"
    if arch.stages:
        staged = len(arch.stacks) - len(app)
        count += f" and {len(arch.stages)} pipeline stages ({staged} stacks)"
    return f"GPU platform architecture — {head}{count}, {arch.resource_count} resources ({'; '.join(where)})"


def _strip_common_suffix(names: list[str]) -> list[str]:
    if len(names) < 2:
        return names
    suffix = names[0]
    for name in names[1:]:
        while suffix and not name.endswith(suffix):
            suffix = suffix[1:]
    m = re.search(r"[A-Z][a-z0-9]*([A-Z][a-z0-9]*)*$", suffix)
    suffix = m.group(0) if m else ""
    if not suffix or any(len(n) == len(suffix) for n in names):
        return names
    return [n[: -len(suffix)] for n in names]


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assembly", type=Path, nargs="?", default=Path("cdk.out"), help="cloud assembly directory")
    parser.add_argument(
        "output", type=Path, nargs="?", default=Path("docs/architecture.png"), help="image to write (.png or .svg)"
    )
    parser.add_argument("--title", help="title line (default: stacks, resources and environment)")
    args = parser.parse_args(argv)
    try:
        arch = load(args.assembly)
    except (FileNotFoundError, ValueError) as exc:
        print(f"diagram: {exc}", file=sys.stderr)
        return 2
    render(arch, args.output, title=args.title)
    stages = ""
    if arch.stages:
        staged = len(arch.stacks) - len(arch.app_stacks)
        stages = f" ({staged} in pipeline stages {', '.join(st.name for st in arch.stages)})"
    print(
        f"wrote {args.output}: {len(arch.stacks)} stacks{stages}, {arch.resource_count} resources, "
        f"{len(arch.references)} cross-stack references"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
