"""What a cloud assembly costs: always-on $/month per stack and $/hour of each training setup, and the difference
between two assemblies (``gpuctl cost``, ``gpuctl cost diff``, the last lines of ``make synth``).

Computed from the synthesized templates (``cdk.out``), not from config, with the dated price table
:mod:`gpu_constructs.catalog.pricing` (on-demand list prices; see :data:`PRICES_AS_OF` there). A month is
:data:`HOURS_PER_MONTH` = 730 hours (8,760 hours a year / 12). What is counted, per stack:

* SageMaker endpoints (``AWS::SageMaker::EndpointConfig``, each ``ProductionVariants`` entry): the instance type
  (or, with ``InstancePools``, the priority-1 pool's type) x the instances that are always on: the autoscaling
  ``MinCapacity`` of the variant's ``AWS::ApplicationAutoScaling::ScalableTarget`` when it has one (autoscaling
  scales the variant to its minimum when idle, up from a lower ``InitialInstanceCount`` too), else
  ``InitialInstanceCount``. Scheduled scaling actions are not modelled. Serverless variants are usage-based and
  not counted. An endpoint config no endpoint uses is not counted;
* notebook instances (``AWS::SageMaker::NotebookInstance``): ``InstanceType`` *while running*, counted as running
  all month (stop them: the platform's idle stop does);
* FSx for Lustre (``AWS::FSx::FileSystem``): ``StorageCapacity`` GiB x the GB-month price of its deployment type
  and throughput;
* NAT gateways (``AWS::EC2::NatGateway``): the hourly charge of each (data processed is usage-based: not counted);
* interface VPC endpoints (``AWS::EC2::VPCEndpoint`` of type ``Interface``): one hourly charge per subnet (one
  subnet per Availability Zone); gateway endpoints are free;
* EC2 auto scaling groups: ``MinSize`` x the on-demand price of the first type (the mixed instances policy's first
  override, else the launch template's or launch configuration's ``InstanceType``); spot capacity costs less.

Training setups: every ``createTrainingJob`` task of every state machine (the optimized ``.sync`` integration or
the AWS SDK one): ``ResourceConfig.InstancePreferences[0]`` (else ``InstanceType``) x ``InstanceCount`` is the
first choice; the most expensive other entry is the worst fallback. A ``.$`` JSONPath value is read from the
literal default of the same key in the state machine's Pass states (the platform's ``Defaults`` state).

Not counted: S3, EBS and ML storage volumes, data transfer, CloudWatch, KMS, Lambda, CodeBuild, training jobs
(they cost while they run: see the $/hour). The estimate is a floor of the bill, not the bill.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpu_constructs.catalog.pricing import (
    HOURS_PER_MONTH,
    INTERFACE_ENDPOINT_HOUR_PER_AZ,
    NAT_GATEWAY_HOUR,
    PRICES_AS_OF,
    fsx_lustre_gib_month,
    hourly_price,
)
from gpu_constructs.templates import ref_id
from platform_tools.summary import StackSummary, _construct_name, _resource_paths, assembly_stacks

__all__ = [
    "CostChange",
    "CostError",
    "CostEstimate",
    "CostItem",
    "TrainingSetup",
    "diff",
    "diff_json",
    "diff_lines",
    "estimate_assembly",
    "estimate_lines",
]


class CostError(Exception):
    """The directory holds no cloud assembly (or no stack) to estimate."""


@dataclass(frozen=True)
class CostItem:
    """One always-on cost of a stack."""

    stack: str  #: the stack's label (``gpu-prod-inference``; a stage's stack: ``Prod/gpu-prod-inference``)
    kind: str  #: endpoint, notebook, file system, NAT gateways, interface endpoints, auto scaling group
    name: str  #: what it is called (``gpu-prod-classifier``)
    instance_type: str | None  #: the priced type (None for storage and network)
    quantity: float  #: instances, GiB, gateways or endpoint-AZs
    unit: str  #: what ``quantity`` counts
    monthly_usd: float | None  #: None: the price table has no price for it
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.stack, self.kind, self.name)

    def describe(self) -> str:
        what = (
            f"{self.instance_type} x{_num(self.quantity)}"
            if self.instance_type
            else f"{_num(self.quantity)} {self.unit}"
        )
        return f"{self.kind} {self.name} {what}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class TrainingSetup:
    """The $/hour of one training state machine: its first choice and its most expensive fallback."""

    stack: str
    name: str
    choices: tuple[tuple[str, int], ...]  #: (instance type, count), first choice first
    hourly_usd: tuple[float | None, ...]  #: per choice, None when unpriced
    spot: bool = False  #: a task sets ``EnableManagedSpotTraining``: the on-demand price is an upper bound

    @property
    def key(self) -> tuple[str, str]:
        return (self.stack, self.name)

    @property
    def first_hourly(self) -> float | None:
        return self.hourly_usd[0] if self.hourly_usd else None

    def worst_fallback(self) -> tuple[str, int, float | None] | None:
        """The fallback with the highest $/hour (an unpriced one first: its cost is unknown), or None."""
        rest = list(zip(self.choices[1:], self.hourly_usd[1:], strict=True))
        if not rest:
            return None
        (name, count), price = max(rest, key=lambda r: float("inf") if r[1] is None else r[1])
        return name, count, price


@dataclass(frozen=True)
class CostEstimate:
    """The always-on costs and training setups of one cloud assembly."""

    cdk_out: str
    prices_as_of: str
    hours_per_month: int
    stacks: tuple[str, ...]  #: every stack's label, in assembly order
    regions: Mapping[str, str]  #: stack label -> the region it is priced in
    items: tuple[CostItem, ...]
    training: tuple[TrainingSetup, ...]
    notes: tuple[str, ...] = ()
    #: a stage's stack -> the app's stack with the same CloudFormation name and environment: one stack, counted once
    same_as: Mapping[str, str] = field(default_factory=dict)

    def stack_total(self, stack: str) -> float:
        return sum(i.monthly_usd for i in self.items if i.stack == stack and i.monthly_usd is not None)

    @property
    def total(self) -> float:
        """Always-on $/month of every stack, a stack deployed both by the app and a stage counted once."""
        return sum(i.monthly_usd for i in self.items if i.monthly_usd is not None and i.stack not in self.same_as)

    @property
    def unpriced(self) -> list[CostItem]:
        return [i for i in self.items if i.monthly_usd is None and i.stack not in self.same_as]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["regions"] = dict(self.regions)
        data["same_as"] = dict(self.same_as)
        data["stack_totals"] = {s: round(self.stack_total(s), 2) for s in self.stacks}
        data["total_monthly_usd"] = round(self.total, 2)
        return data


# --------------------------------------------------------------------------------------------------------- reading


def _num(value: float) -> str:
    return f"{value:g}" if value != int(value) else f"{int(value)}"


def _int(value: Any) -> int | None:
    """A template number (CloudFormation writes some as strings: ``"MinSize": "0"``); None when not literal."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _label(stack: StackSummary) -> str:
    return f"{stack.stage_name}/{stack.name}" if stack.stage_name else stack.name


def _region(stack: StackSummary, default_region: str) -> tuple[str, str | None]:
    region = stack.environment.removeprefix("aws://").partition("/")[2]
    if region and not region.startswith("unknown"):
        return region, None
    return default_region, f"{_label(stack)}: region-agnostic stack priced as {default_region}"


def _of_type(resources: Mapping[str, Any], cfn_type: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for logical_id, resource in resources.items():
        if isinstance(resource, Mapping) and resource.get("Type") == cfn_type:
            yield logical_id, resource.get("Properties", {}) or {}


def _monthly(hourly: float | None, quantity: float) -> float | None:
    return None if hourly is None else round(hourly * quantity * HOURS_PER_MONTH, 2)


@dataclass(frozen=True)
class _Stack:
    """What the readers of one template need: the stack's label, the region it is priced in, its resources and
    the construct path of each (``tree.json``, for names)."""

    label: str
    region: str
    resources: Mapping[str, Any]
    paths: Mapping[str, str]

    def name(self, logical_id: str, props: Mapping[str, Any], name_property: str | None = None) -> str:
        """The physical name the template sets, else the resource's construct id, else its logical id."""
        physical = props.get(name_property) if name_property else None
        return physical if isinstance(physical, str) else _construct_name(self.paths.get(logical_id), logical_id)


# --------------------------------------------------------------------------------------------------- resources


def _scalable_minimums(resources: Mapping[str, Any]) -> dict[str, int]:
    """``endpoint/<name>/variant/<variant>`` -> the target's ``MinCapacity`` (SageMaker variant targets only)."""
    out: dict[str, int] = {}
    for _, props in _of_type(resources, "AWS::ApplicationAutoScaling::ScalableTarget"):
        resource_id, minimum = props.get("ResourceId"), _int(props.get("MinCapacity"))
        if props.get("ServiceNamespace") == "sagemaker" and isinstance(resource_id, str) and minimum is not None:
            out[resource_id] = minimum
    return out


def _variant_type(variant: Mapping[str, Any]) -> tuple[str | None, str]:
    """The priced instance type of a production variant and a note (instance pools: the priority-1 pool)."""
    pools = variant.get("InstancePools")
    if isinstance(pools, list) and pools:
        ranked = sorted((p for p in pools if isinstance(p, Mapping)), key=lambda p: _int(p.get("Priority")) or 0)
        types = [str(p.get("InstanceType")) for p in ranked]
        return (types[0] if types else None), f"instance pools {', '.join(types)}"
    instance_type = variant.get("InstanceType")
    return (instance_type if isinstance(instance_type, str) else None), ""


def _endpoint_items(ctx: _Stack) -> list[CostItem]:
    stack, region, resources = ctx.label, ctx.region, ctx.resources
    minimums = _scalable_minimums(resources)
    configs = dict(_of_type(resources, "AWS::SageMaker::EndpointConfig"))
    items = []
    for logical_id, props in _of_type(resources, "AWS::SageMaker::Endpoint"):
        config = configs.get(ref_id(props.get("EndpointConfigName")) or "")
        if config is None:
            continue
        name = ctx.name(logical_id, props, "EndpointName")
        for variant in config.get("ProductionVariants", []) or []:
            if not isinstance(variant, Mapping) or variant.get("ServerlessConfig"):
                continue
            instance_type, note = _variant_type(variant)
            initial = _int(variant.get("InitialInstanceCount"))
            minimum = minimums.get(f"endpoint/{name}/variant/{variant.get('VariantName')}")
            count = minimum if minimum is not None else (initial if initial is not None else 1)
            why = f"autoscaling min {minimum}, initial {initial}" if minimum is not None else "no autoscaling"
            if config.get("AsyncInferenceConfig"):
                why = f"async, {why}"
            label = name if len(config.get("ProductionVariants", [])) == 1 else f"{name}/{variant.get('VariantName')}"
            price = hourly_price(instance_type, "hosting", region) if instance_type else None
            items.append(
                CostItem(
                    stack,
                    "endpoint",
                    label,
                    instance_type,
                    count,
                    "instances",
                    _monthly(price, count),
                    "; ".join(n for n in (why, note) if n),
                )
            )
    return items


def _notebook_items(ctx: _Stack) -> list[CostItem]:
    stack, region = ctx.label, ctx.region
    items = []
    for logical_id, props in _of_type(ctx.resources, "AWS::SageMaker::NotebookInstance"):
        name = ctx.name(logical_id, props, "NotebookInstanceName")
        instance_type = props.get("InstanceType")
        price = hourly_price(instance_type, "notebook", region) if isinstance(instance_type, str) else None
        items.append(
            CostItem(
                stack,
                "notebook",
                name,
                instance_type if isinstance(instance_type, str) else None,
                1,
                "instances",
                _monthly(price, 1),
                "while running",
            )
        )
    return items


def _fsx_items(ctx: _Stack) -> list[CostItem]:
    stack, region = ctx.label, ctx.region
    items = []
    for logical_id, props in _of_type(ctx.resources, "AWS::FSx::FileSystem"):
        if props.get("FileSystemType") != "LUSTRE":
            continue
        lustre = props.get("LustreConfiguration", {}) or {}
        deployment = lustre.get("DeploymentType", "SCRATCH_1")  # CloudFormation's default
        throughput = _int(lustre.get("PerUnitStorageThroughput"))
        capacity = _int(props.get("StorageCapacity"))
        try:
            rate = fsx_lustre_gib_month(str(deployment), throughput, region)
        except ValueError:
            rate = None
        tier = f"{deployment}" + (f", {throughput} MB/s/TiB" if throughput else "")
        monthly = None if rate is None or capacity is None else round(rate * capacity, 2)
        items.append(
            CostItem(
                stack,
                "file system",
                ctx.name(logical_id, props),
                None,
                capacity or 0,
                "GiB FSx for Lustre",
                monthly,
                tier,
            )
        )
    return items


def _network_items(ctx: _Stack) -> list[CostItem]:
    stack, region, resources = ctx.label, ctx.region, ctx.resources
    priced = region in {"us-east-1", "us-west-2"}
    items = []
    nat = sum(1 for _ in _of_type(resources, "AWS::EC2::NatGateway"))
    if nat:
        hourly = NAT_GATEWAY_HOUR if priced else None
        items.append(
            CostItem(stack, "NAT gateways", "NAT", None, nat, "NAT gateways", _monthly(hourly, nat), "hours only")
        )
    interface = [p for _, p in _of_type(resources, "AWS::EC2::VPCEndpoint") if p.get("VpcEndpointType") == "Interface"]
    if interface:
        zones = sum(len(p.get("SubnetIds") or []) or 1 for p in interface)
        hourly = INTERFACE_ENDPOINT_HOUR_PER_AZ if priced else None
        items.append(
            CostItem(
                stack,
                "interface endpoints",
                "VPC endpoints",
                None,
                zones,
                "endpoint-AZs",
                _monthly(hourly, zones),
                f"{len(interface)} endpoints",
            )
        )
    return items


def _asg_type(props: Mapping[str, Any], resources: Mapping[str, Any]) -> str | None:
    mixed = props.get("MixedInstancesPolicy", {}) or {}
    template = mixed.get("LaunchTemplate", {}) or {}
    for override in template.get("Overrides", []) or []:
        if isinstance(override, Mapping) and isinstance(override.get("InstanceType"), str):
            return str(override["InstanceType"])
    spec = template.get("LaunchTemplateSpecification") or props.get("LaunchTemplate") or {}
    source = resources.get(ref_id(spec.get("LaunchTemplateId")) or ref_id(props.get("LaunchConfigurationName")) or "")
    if isinstance(source, Mapping):
        data = source.get("Properties", {}) or {}
        instance_type = (data.get("LaunchTemplateData") or data).get("InstanceType")
        return instance_type if isinstance(instance_type, str) else None
    return None


def _uses_spot(props: Mapping[str, Any]) -> bool:
    """A mixed instances policy that puts part of the group on spot (the on-demand share above base under 100 %;
    CloudFormation's default is 100, all on demand)."""
    distribution = (props.get("MixedInstancesPolicy", {}) or {}).get("InstancesDistribution", {}) or {}
    share = _int(distribution.get("OnDemandPercentageAboveBaseCapacity"))
    return share is not None and share < 100


def _asg_items(ctx: _Stack) -> list[CostItem]:
    stack, region, resources = ctx.label, ctx.region, ctx.resources
    items = []
    for logical_id, props in _of_type(resources, "AWS::AutoScaling::AutoScalingGroup"):
        name = ctx.name(logical_id, props, "AutoScalingGroupName")
        minimum = _int(props.get("MinSize")) or 0
        instance_type = _asg_type(props, resources)
        price = hourly_price(instance_type, "ec2", region) if instance_type else None
        note = "MinSize, on-demand price" + (", spot above the on-demand part" if _uses_spot(props) else "")
        items.append(
            CostItem(
                stack, "auto scaling group", name, instance_type, minimum, "instances", _monthly(price, minimum), note
            )
        )
    return items


# ---------------------------------------------------------------------------------------------------- training


def _definition(props: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state machine's definition as JSON, CloudFormation intrinsics replaced by a marker string."""
    if isinstance(props.get("Definition"), Mapping):
        return dict(props["Definition"])
    value = props.get("DefinitionString")
    if isinstance(value, Mapping) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        value = str(separator).join(p if isinstance(p, str) else "TOKEN" for p in parts)
    elif isinstance(value, Mapping) and "Fn::Sub" in value:
        sub = value["Fn::Sub"]
        value = sub[0] if isinstance(sub, list) else sub
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _states(states: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for state in states.values():
        if not isinstance(state, Mapping):
            continue
        yield state
        for branch in state.get("Branches", []) or []:
            yield from _states(branch.get("States", {}))
        for key in ("Iterator", "ItemProcessor"):
            if isinstance(state.get(key), Mapping):
                yield from _states(state[key].get("States", {}))


def _defaults(value: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every literal (string or number) under a key of the Pass states' parameters, first one wins."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, str | int) and not isinstance(item, bool) and not str(key).endswith(".$"):
                out.setdefault(str(key), item)
            else:
                _defaults(item, out)
    elif isinstance(value, list):
        for item in value:
            _defaults(item, out)
    return out


def _member(config: Mapping[str, Any], name: str, defaults: Mapping[str, Any]) -> Any:
    """``config[name]``, or the default of the last key of ``config[name + '.$']`` (a JSONPath)."""
    if name in config:
        return config[name]
    path = config.get(f"{name}.$")
    if isinstance(path, str) and path.startswith("$"):
        return defaults.get(path.rsplit(".", 1)[-1])
    return None


def _training_tasks(definition: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The parameters of every ``createTrainingJob`` task (JSONPath ``Parameters`` or JSONata ``Arguments``)."""
    for state in _states(definition.get("States", {})):
        if "sagemaker:createTrainingJob" in str(state.get("Resource", "")):
            args = state.get("Parameters") or state.get("Arguments") or {}
            if isinstance(args, Mapping):
                yield args


def _training_choices(definition: Mapping[str, Any]) -> list[tuple[str, int]]:
    states = list(_states(definition.get("States", {})))
    defaults: dict[str, Any] = {}
    for state in states:
        if state.get("Type") == "Pass":
            _defaults(state.get("Parameters", {}), defaults)
    preferred: list[tuple[str, int]] = []
    single: list[tuple[str, int]] = []
    for args in _training_tasks(definition):
        config = args.get("ResourceConfig")
        if not isinstance(config, Mapping):
            continue
        count = _int(_member(config, "InstanceCount", defaults)) or 1
        preferences = config.get("InstancePreferences")
        if isinstance(preferences, list):
            for p in preferences:
                if isinstance(p, Mapping) and isinstance(p.get("InstanceType"), str):
                    preferred.append((str(p["InstanceType"]), _int(p.get("InstanceCount")) or count))
        instance_type = _member(config, "InstanceType", defaults)
        if isinstance(instance_type, str):
            single.append((instance_type, count))
    return list(dict.fromkeys([*preferred, *single]))


def _training_setups(ctx: _Stack) -> list[TrainingSetup]:
    stack, region = ctx.label, ctx.region
    setups = []
    for logical_id, props in _of_type(ctx.resources, "AWS::StepFunctions::StateMachine"):
        definition = _definition(props)
        choices = _training_choices(definition) if definition else []
        if not choices:
            continue
        name = ctx.name(logical_id, props, "StateMachineName")
        prices = tuple(
            None if (p := hourly_price(t, "training", region)) is None else round(p * n, 4) for t, n in choices
        )
        spot = any(args.get("EnableManagedSpotTraining") is True for args in _training_tasks(definition or {}))
        setups.append(TrainingSetup(stack, name, tuple(choices), prices, spot))
    return setups


# ------------------------------------------------------------------------------------------------------ public


def estimate_assembly(cdk_out_dir: str | Path, *, default_region: str = "us-east-1") -> CostEstimate:
    """The always-on costs and training setups of every stack of the cloud assembly in ``cdk_out_dir`` (stages'
    stacks included). A stack with no region (environment-agnostic) is priced as ``default_region``.

    Raises :class:`CostError` when the directory has no ``manifest.json`` or no stack.
    """
    outdir = Path(cdk_out_dir)
    if not (outdir / "manifest.json").is_file():
        raise CostError(f"{outdir} has no cloud assembly ({outdir / 'manifest.json'} not found): run cdk synth first")
    stacks = assembly_stacks(outdir)
    paths = _resource_paths(outdir)
    if not stacks:
        raise CostError(f"{outdir} has no stack templates")
    items: list[CostItem] = []
    training: list[TrainingSetup] = []
    notes: list[str] = []
    regions: dict[str, str] = {}
    same_as: dict[str, str] = {}
    app_stacks = {(s.name, s.environment): _label(s) for s in stacks if s.stage is None}
    for stack in stacks:
        label = _label(stack)
        if stack.stage is not None and (stack.name, stack.environment) in app_stacks:
            same_as[label] = app_stacks[(stack.name, stack.environment)]
        region, note = _region(stack, default_region)
        regions[label] = region
        notes.extend([note] if note else [])
        resources = json.loads(stack.template_path.read_text()).get("Resources", {}) or {}
        ctx = _Stack(label, region, resources, paths.get(stack.display_path, {}))
        for collect in (_endpoint_items, _notebook_items, _fsx_items, _network_items, _asg_items):
            items.extend(collect(ctx))
        training.extend(_training_setups(ctx))
    return CostEstimate(
        cdk_out=str(outdir),
        prices_as_of=PRICES_AS_OF.isoformat(),
        hours_per_month=HOURS_PER_MONTH,
        stacks=tuple(_label(s) for s in stacks),
        regions=regions,
        items=tuple(items),
        training=tuple(training),
        notes=tuple(notes),
        same_as=same_as,
    )


def _usd(value: float | None, *, sign: bool = False) -> str:
    if value is None:
        return "price unknown"
    text = f"${abs(value):,.2f}"
    if sign:
        return ("+" if value >= 0 else "-") + text
    return ("-" if value < 0 else "") + text


def _per(value: float | None, unit: str) -> str:
    """``$1.41/hour``, or ``price unknown``."""
    return f"{_usd(value)}/{unit}" if value is not None else _usd(value)


def _choice(name: str, count: int, hourly: float | None) -> str:
    return f"{name} x{count} {_per(hourly, 'hour')}"


def estimate_lines(estimate: CostEstimate) -> list[str]:
    """The human-readable cost summary: one line per stack with a cost, its items, the total, the training setups."""
    lines = [
        f"cost (on-demand list prices as of {estimate.prices_as_of}, {estimate.hours_per_month} hours/month; "
        "storage, transfer and usage-based charges not included):"
    ]
    for stack in estimate.stacks:
        items = [i for i in estimate.items if i.stack == stack]
        if not items:
            continue
        if stack in estimate.same_as:
            lines.append(f"  {stack}: the same stack as {estimate.same_as[stack]} (counted once)")
            continue
        lines.append(f"  {stack}: {_usd(estimate.stack_total(stack))}/month always on ({estimate.regions[stack]})")
        lines.extend(f"    {_per(i.monthly_usd, 'month')}  {i.describe()}" for i in items)
    unpriced = estimate.unpriced
    extra = f" (+ {len(unpriced)} item(s) without a price)" if unpriced else ""
    lines.append(f"  total: {_usd(estimate.total)}/month always on{extra}")
    for setup in estimate.training:
        if setup.stack in estimate.same_as:
            continue
        first = _choice(*setup.choices[0], setup.first_hourly)
        worst = setup.worst_fallback()
        fallback = f"; most expensive fallback {_choice(*worst)}" if worst else ""
        spot = " (managed spot: on-demand price shown, spot costs less)" if setup.spot else ""
        lines.append(f"  training {setup.stack} {setup.name}: {first}{fallback}{spot}")
    lines.extend(f"  note: {n}" for n in estimate.notes)
    return lines


# --------------------------------------------------------------------------------------------------------- diff


@dataclass(frozen=True)
class CostChange:
    """One difference between two estimates: an always-on item added, removed or changed, or a training setup."""

    stack: str
    what: str  #: ``endpoint classifier`` / ``training Pipeline``
    before: str | None  #: ``ml.g5.2xlarge x2`` (None: added)
    after: str | None  #: (None: removed)
    monthly_delta_usd: float | None  #: None when a side has no price (and for training setups)
    hourly_delta_usd: float | None = None  #: training setups: first choice $/hour after - before

    def describe(self) -> str:
        if self.monthly_delta_usd is not None:
            amount = f"{_usd(self.monthly_delta_usd, sign=True)}/month"
        elif self.hourly_delta_usd is not None:
            amount = f"{_usd(self.hourly_delta_usd, sign=True)}/hour"
        else:
            amount = "price unknown"
        change = f"{self.before or '(none)'} -> {self.after or '(removed)'}"
        return f"{amount}: {self.stack}: {self.what} {change}"


def _item_text(item: CostItem) -> str:
    if item.instance_type:
        return f"{item.instance_type} x{_num(item.quantity)}"
    return f"{_num(item.quantity)} {item.unit}" + (f" ({item.note})" if item.kind == "file system" else "")


def _same_type_text(before: CostItem, after: CostItem) -> tuple[str, str]:
    """``ml.g5.2xlarge x2 -> x3`` when only the count changed."""
    if before.instance_type and before.instance_type == after.instance_type:
        return _item_text(before), f"x{_num(after.quantity)}"
    return _item_text(before), _item_text(after)


def _delta(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    return round(after - before, 2)


def diff(base: CostEstimate, head: CostEstimate) -> list[CostChange]:
    """What changes from ``base`` to ``head``: always-on items (matched by stack, kind and name) and training setups,
    each with its $/month (or, for training, first-choice $/hour) difference; unchanged ones are left out."""
    changes: list[CostChange] = []
    old = {i.key: i for i in base.items}
    new = {i.key: i for i in head.items}
    for key in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(key), new.get(key)
        what = f"{key[1]} {key[2]}"
        if a is not None and b is not None:
            if (a.instance_type, a.quantity, a.monthly_usd, a.note) == (
                b.instance_type,
                b.quantity,
                b.monthly_usd,
                b.note,
            ):
                continue
            before, after = _same_type_text(a, b)
            changes.append(CostChange(key[0], what, before, after, _delta(a.monthly_usd, b.monthly_usd)))
        elif a is not None:
            delta = None if a.monthly_usd is None else -a.monthly_usd
            changes.append(CostChange(key[0], what, _item_text(a), None, delta))
        elif b is not None:
            changes.append(CostChange(key[0], what, None, _item_text(b), b.monthly_usd))
    changes.extend(_training_changes(base.training, head.training))
    return changes


def _setup_text(setup: TrainingSetup) -> str:
    return ", ".join(f"{t} x{n}" for t, n in setup.choices)


def _training_changes(base: Iterable[TrainingSetup], head: Iterable[TrainingSetup]) -> list[CostChange]:
    old = {s.key: s for s in base}
    new = {s.key: s for s in head}
    changes = []
    for key in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None and a.choices == b.choices and a.hourly_usd == b.hourly_usd:
            continue
        before = _setup_text(a) if a else None
        after = _setup_text(b) if b else None
        hourly = _delta(a.first_hourly if a else 0.0, b.first_hourly if b else 0.0)
        changes.append(CostChange(key[0], f"training {key[1]}", before, after, None, hourly))
    return changes


def diff_lines(base: CostEstimate, head: CostEstimate) -> list[str]:
    """The human-readable cost difference: one line per change, then the always-on total before and after."""
    changes = diff(base, head)
    lines = [c.describe() for c in changes] or ["no cost change"]
    delta = round(head.total - base.total, 2)
    lines.append(
        f"always on: {_usd(base.total)}/month -> {_usd(head.total)}/month ({_usd(delta, sign=True)}/month; "
        f"on-demand list prices as of {head.prices_as_of}, {head.hours_per_month} hours/month)"
    )
    return lines


def diff_json(base: CostEstimate, head: CostEstimate) -> dict[str, Any]:
    """The cost difference as JSON: the changes and both totals."""
    return {
        "changes": [asdict(c) | {"text": c.describe()} for c in diff(base, head)],
        "base_total_monthly_usd": round(base.total, 2),
        "head_total_monthly_usd": round(head.total, 2),
        "delta_monthly_usd": round(head.total - base.total, 2),
        "prices_as_of": head.prices_as_of,
        "hours_per_month": head.hours_per_month,
    }
