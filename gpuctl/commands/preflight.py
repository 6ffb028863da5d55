"""gpuctl preflight --env ENV: does the account have the quotas and offerings the environment needs?

What the environment needs comes from ``config/<env>.yaml`` alone (:func:`compute_needs`, no AWS):

* SageMaker instances per type and use (Service Quotas names ``<ml type> for <use>``): training
  (``instance_count``; spot training when ``training.spot``), the prepare processing job, each endpoint up to
  its autoscaling maximum, one per notebook;
* EC2 vCPUs per instance family quota (``Running On-Demand G and VT instances``, ``All P Spot Instance
  Requests``, ...) for the fleets: the largest type of the group in that family x the instances that may run
  on demand or on spot, at ``max_capacity``;
* each fleet type offered in each Availability Zone the fleet may launch in;
* the reservations it names (training plans, endpoint ML reservations, fleet EC2 Capacity Reservations and
  Capacity Blocks): :mod:`gpuctl.reservations`.

Online, the command compares them with the account's quotas (Service Quotas ListServiceQuotas: the quota
*value*; current usage is not known from it), with EC2 DescribeInstanceTypeOfferings and with the reservations'
states (EC2 DescribeCapacityReservations, SageMaker DescribeTrainingPlan), all read-only.
Exit 0: all clear; 1: a quota is short or unknown, a type is not offered, or a reservation is gone or does not
match; 2: bad input or AWS refused (no credentials, access denied). ``--offline`` prints the needs without
calling AWS; ``--json`` prints the same data as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.aws_errors import explain, sagemaker_quota_name, service_quotas_url
from gpuctl.commands import add_command
from gpuctl.reservations import (
    EC2_RESERVATION,
    TRAINING_PLAN,
    ReservationNeed,
    ReservationResult,
    check_reservations,
    reservation_needs,
    reservation_rows,
)
from gpuctl.reservations import IAM_ACTIONS as RESERVATION_IAM_ACTIONS
from gpuctl.training_setup import ClientFactory, boto3_client

#: The command's line in ``gpuctl --help``.
SUMMARY = "check quotas and instance offerings an environment needs (Service Quotas, EC2), or print them offline"

SAGEMAKER = "sagemaker"
EC2 = "ec2"

#: EC2 vCPU quotas by instance family (Service Quotas, service code ``ec2``), matched by ``QuotaName``:
#: family prefix -> (on-demand quota, spot quota). Codes for reference: Running On-Demand G and VT instances
#: L-DB2E81BA, Running On-Demand P instances L-417A185B, All G and VT Spot Instance Requests L-3819A6DF, All P
#: Spot Instance Requests L-7212CCBC. Families: https://docs.aws.amazon.com/ec2/latest/instancetypes/
#: ec2-instance-quotas.html ("On-Demand Instance quotas", "Spot Instance quotas"). The platform's fleets run
#: NVIDIA GPU types only (the G and P families); another family has no entry here and is reported as unknown.
EC2_VCPU_QUOTAS: dict[str, tuple[str, str]] = {
    "g": ("Running On-Demand G and VT instances", "All G and VT Spot Instance Requests"),
    "vt": ("Running On-Demand G and VT instances", "All G and VT Spot Instance Requests"),
    "p": ("Running On-Demand P instances", "All P Spot Instance Requests"),
}

#: The read-only IAM actions the online check calls.
IAM_ACTIONS: dict[str, str] = {
    "ListServiceQuotas": "servicequotas:ListServiceQuotas",
    "DescribeInstanceTypeOfferings": "ec2:DescribeInstanceTypeOfferings",
    **RESERVATION_IAM_ACTIONS,
}

_ACCESS_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"})


class PreflightError(Exception):
    """Bad input, or AWS could not be asked (exit code 2)."""


# --------------------------------------------------------------------------------------------------
# What the environment needs (no AWS)
# --------------------------------------------------------------------------------------------------


@dataclass
class QuotaNeed:
    """One quota and how much of it the environment needs (instances for SageMaker, vCPUs for EC2)."""

    service: str
    quota_name: str
    needed: int
    unit: str
    used_by: list[str] = field(default_factory=list)


@dataclass
class OfferingNeed:
    """An EC2 instance type that must be offered in an Availability Zone."""

    instance_type: str
    zone: str
    used_by: list[str] = field(default_factory=list)


@dataclass
class Needs:
    env: str
    region: str
    quotas: list[QuotaNeed]
    offerings: list[OfferingNeed]
    reservations: list[ReservationNeed] = field(default_factory=list)


class _Collector:
    def __init__(self) -> None:
        self.quotas: dict[tuple[str, str], QuotaNeed] = {}
        self.offerings: dict[tuple[str, str], OfferingNeed] = {}

    def quota(self, service: str, name: str, amount: int, unit: str, used_by: str) -> None:
        need = self.quotas.setdefault((service, name), QuotaNeed(service, name, 0, unit))
        need.needed += amount
        need.used_by.append(used_by)

    def offering(self, instance_type: str, zone: str, used_by: str) -> None:
        need = self.offerings.setdefault((instance_type, zone), OfferingNeed(instance_type, zone))
        if used_by not in need.used_by:
            need.used_by.append(used_by)


def _type_and_count(item: Any, default_count: int) -> tuple[str, int]:
    """A fallback-list entry: a type name, or an object with ``instance_type`` (and maybe ``instance_count``)."""
    if isinstance(item, str):
        return item, default_count
    count = getattr(item, "instance_count", None)
    return str(item.instance_type), int(count) if count is not None else default_count


def _training_needs(config: Any, out: _Collector) -> None:
    training = config.training
    if not training.enabled:
        return
    use = "spot training job usage" if training.spot else "training job usage"
    count = int(training.instance_count)
    types: dict[str, tuple[int, str]] = {training.instance_type: (count, "training.instance_type")}
    for key in ("instance_preferences", "allowed_instance_types"):
        for item in getattr(training, key, None) or ():
            name, item_count = _type_and_count(item, count)
            types.setdefault(name, (item_count, f"training.{key}"))
    for name, (item_count, where) in types.items():
        out.quota(SAGEMAKER, sagemaker_quota_name(name, use), item_count, "instances", f"{where} x {item_count}")
    prepare = training.prepare
    if prepare.enabled:
        # The prepare step is one processing job (gpu_constructs.training_spec.sharding: InstanceCount 1).
        prepare_count = int(getattr(prepare, "instance_count", 1) or 1)
        out.quota(
            SAGEMAKER,
            sagemaker_quota_name(prepare.instance_type, "processing job usage"),
            prepare_count,
            "instances",
            f"training.prepare x {prepare_count}",
        )


def _endpoint_needs(config: Any, out: _Collector) -> None:
    inference = config.inference
    if not inference.enabled:
        return
    for key, endpoint in inference.endpoints.items():
        scaling = endpoint.autoscaling
        count = max(int(endpoint.instance_count), int(scaling.max_capacity) if scaling is not None else 0)
        what = "autoscaling max" if scaling is not None and scaling.max_capacity >= endpoint.instance_count else "count"
        types: dict[str, int] = {endpoint.instance_type: count}
        for item in getattr(endpoint, "instance_pools", None) or ():
            name, pool_count = _type_and_count(item, count)
            types.setdefault(name, pool_count)
        for name, type_count in types.items():
            out.quota(
                SAGEMAKER,
                sagemaker_quota_name(name, "endpoint usage"),
                type_count,
                "instances",
                f"inference.endpoints.{key} ({what} {type_count})",
            )


def _notebook_needs(config: Any, out: _Collector) -> None:
    for notebook in config.fleets.notebooks:
        out.quota(
            SAGEMAKER,
            sagemaker_quota_name(notebook.instance_type, "notebook instance usage"),
            1,
            "instances",
            f"fleets.notebooks[{notebook.name}]",
        )


def ec2_vcpu_quota_name(instance_type: str, *, spot: bool) -> str | None:
    """The EC2 vCPU quota that counts ``instance_type`` (``g5.xlarge``), or None for a family without an entry."""
    family = instance_type.removeprefix("ml.").split(".", 1)[0]
    for key, names in EC2_VCPU_QUOTAS.items():
        # the family letters, then the generation digit: g5, g4dn, p4d, p6-b200, vt1 (not gr6)
        if family.startswith(key) and family[len(key) : len(key) + 1].isdigit():
            return names[1 if spot else 0]
    return None


def _split_on_demand_spot(group: Any) -> tuple[int, int]:
    """Instances of a fleet at ``max_capacity`` that may run on demand and on spot.

    A spot mix (EC2 Auto Scaling InstancesDistribution) runs ``OnDemandBaseCapacity`` on demand, then
    ``OnDemandPercentageAboveBaseCapacity`` percent of the rest on demand
    (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_InstancesDistribution.html). The fractional
    share is rounded up for on demand and down for spot's complement, so each quota gets the larger amount.
    """
    total = int(group.max_capacity)
    spot = group.spot
    if spot is None:
        return total, 0
    base = min(total, int(spot.on_demand_base_capacity))
    above = total - base
    on_demand = base + math.ceil(above * spot.on_demand_percentage_above_base / 100)
    spot_count = above - math.floor(above * spot.on_demand_percentage_above_base / 100)
    return on_demand, spot_count


def _fleet_zones(config: Any, group: Any) -> tuple[str, ...]:
    """The Availability Zones a fleet may launch in, as the fleets stack places it.

    A placement-group fleet uses ``availability_zone`` (default: the first AZ); a fleet that mounts the FSx for
    Lustre file system launches only in the file system's AZ (``LustreMount.same_zone``, default True; the
    storage stack puts the file system in ``file_systems.lustre.availability_zone``, default the first AZ);
    any other fleet uses every configured AZ. A fleet with a ``capacity_reservation`` launches only in the
    reservation's zone (which the config model checks against the others).
    """
    zones = tuple(config.availability_zones)
    reservation = getattr(group, "capacity_reservation", None)
    if reservation is not None:
        return (reservation.availability_zone,)
    if group.placement_group:
        return (group.availability_zone or zones[0],)
    lustre = config.file_systems.lustre
    if group.mount_lustre and lustre.enabled:
        return (lustre.availability_zone or zones[0],)
    return zones


def _fleet_needs(config: Any, out: _Collector) -> None:
    from gpu_constructs.catalog import lookup

    for group in config.fleets.groups:
        where = f"fleets.groups[{group.name}]"
        types = [group.instance_type]
        for name in (
            *(group.spot.instance_types if group.spot is not None else ()),
            *(getattr(group, "instance_types", None) or ()),
        ):
            if name not in types:
                types.append(name)
        for purchase, count in zip(("on demand", "spot"), _split_on_demand_spot(group), strict=True):
            if count == 0:
                continue
            # Per quota, the largest type of the group that quota counts: any instance may be that type.
            largest: dict[str, tuple[int, str]] = {}
            for name in types:
                quota = ec2_vcpu_quota_name(name, spot=purchase == "spot")
                key = quota or f"(no vCPU quota known for {name.split('.', 1)[0]})"
                vcpus = lookup(name).vcpus
                if key not in largest or vcpus > largest[key][0]:
                    largest[key] = (vcpus, name)
            for quota, (vcpus, name) in largest.items():
                out.quota(EC2, quota, vcpus * count, "vCPUs", f"{where} {purchase}: {count} x {name} ({vcpus} vCPUs)")
        for name in types:
            for zone in _fleet_zones(config, group):
                out.offering(name, zone, where)


def compute_needs(config: Any) -> Needs:
    """What ``config`` (a :class:`stacks.config.EnvConfig`) needs from the account: quotas and offerings."""
    out = _Collector()
    _training_needs(config, out)
    _endpoint_needs(config, out)
    _notebook_needs(config, out)
    _fleet_needs(config, out)
    return Needs(
        env=config.env_name,
        region=config.region,
        quotas=list(out.quotas.values()),
        offerings=list(out.offerings.values()),
        reservations=reservation_needs(config),
    )


def read_permissions(needs: Needs) -> dict[str, list[str]]:
    """IAM action -> resources of every call the online check makes for ``needs``: the least privilege of a role
    that runs it (the GitOps pipeline's preflight step).

    Resources: ``*`` where the action has no resource type (Service Authorization Reference: "If there is no value
    for this column, you must specify all resources ("*")"; ``servicequotas:ListServiceQuotas``,
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_servicequotas.html; EC2's
    ``DescribeInstanceTypeOfferings`` and ``DescribeCapacityReservations``,
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html); the training plans
    by ARN for ``sagemaker:DescribeTrainingPlan`` (resource type ``training-plan``,
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonsagemaker.html; AWS's own
    AmazonSageMakerTrainingPlanCreateAccess policy grants it on ``arn:aws:sagemaker:*:*:training-plan/*``,
    https://docs.aws.amazon.com/sagemaker/latest/dg/security-iam-awsmanpol-training-plan.html).
    """
    permissions: dict[str, list[str]] = {}
    if needs.quotas:
        permissions[IAM_ACTIONS["ListServiceQuotas"]] = ["*"]
    if needs.offerings:
        permissions[IAM_ACTIONS["DescribeInstanceTypeOfferings"]] = ["*"]
    if any(r.kind == EC2_RESERVATION and r.reservation.startswith("cr-") for r in needs.reservations):
        permissions[IAM_ACTIONS["DescribeCapacityReservations"]] = ["*"]
    plans = sorted({r.reservation for r in needs.reservations if r.kind == TRAINING_PLAN})
    if plans:
        permissions[IAM_ACTIONS["DescribeTrainingPlan"]] = plans
    return permissions


def load_env_config(env: str) -> Any:
    """``config/<env>.yaml`` through the app's typed loader (the working directory's ``config/`` first)."""
    try:
        from stacks.config import ConfigError, available_envs, load_config
    except ModuleNotFoundError as exc:
        raise PreflightError(
            f"--env needs the platform's config loader ({exc.name}), which is not installed here; run gpuctl from "
            "the repository's virtual environment (make setup)"
        ) from None
    from gpuctl.training_setup import config_dirs

    directories = [d for d in dict.fromkeys(config_dirs()) if d.is_dir()]
    for directory in directories:
        if (directory / f"{env}.yaml").is_file():
            try:
                return load_config(env, Path(directory))
            except ConfigError as exc:
                raise PreflightError(f"configuration error: {exc}") from None
    allowed = sorted({name for d in directories for name in available_envs(d)})
    raise PreflightError(
        f"--env {env!r}: no {env}.yaml in {', '.join(str(d) for d in directories) or 'config/'}; "
        f"allowed environments: {', '.join(allowed) or 'none found'}"
    )


# --------------------------------------------------------------------------------------------------
# What the account has (read-only AWS calls)
# --------------------------------------------------------------------------------------------------


@dataclass
class QuotaResult:
    service: str
    quota_name: str
    needed: int
    unit: str
    used_by: list[str]
    #: The applied quota value (ListServiceQuotas ``Value``); None when the response has no such quota.
    quota: float | None
    status: str
    request: str


@dataclass
class OfferingResult:
    instance_type: str
    zone: str
    used_by: list[str]
    offered: bool


@dataclass
class Report:
    env: str
    region: str
    quotas: list[QuotaResult]
    offerings: list[OfferingResult]
    reservations: list[ReservationResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            all(q.status == "ok" for q in self.quotas)
            and all(o.offered for o in self.offerings)
            and all(r.ok for r in self.reservations)
        )


#: The clients preflight calls AWS with (its own hook: the --offline tests replace it to prove no call is made).
make_client: ClientFactory = boto3_client


def _call(operation: str, region: str, pages: Callable[[], Iterable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every page of ``operation``; AWS errors become a one-line :class:`PreflightError`."""
    try:
        return list(pages())
    except Exception as exc:  # botocore's errors share no base class with the credential errors
        if not type(exc).__module__.startswith("botocore"):
            raise
        if type(exc).__name__ == "CredentialRetrievalError":
            raise PreflightError(
                f"AWS credentials could not be loaded ({exc}); sign in again or set AWS_PROFILE"
            ) from None
        response: dict[str, Any] = getattr(exc, "response", None) or {}
        code = str(response.get("Error", {}).get("Code", ""))
        if code in _ACCESS_DENIED:
            raise PreflightError(
                f"AWS denied {IAM_ACTIONS[operation]} in {region} ({code}); the check needs only read access: "
                f"allow {' and '.join(IAM_ACTIONS.values())} to your identity (aws sts get-caller-identity)"
            ) from None
        problem = explain(exc, operation=operation, region=region)
        raise PreflightError(f"{problem.what} Next step: {problem.next_step}") from None


def applied_quotas(client: Any, service_code: str, region: str) -> dict[str, float]:
    """QuotaName -> Value of every quota ListServiceQuotas returns for ``service_code`` (all pages).

    Service Quotas API: ListServiceQuotas (``ServiceCode``, ``NextToken``, ``MaxResults`` 1-100; response
    ``Quotas[].QuotaName`` / ``Value``, ``NextToken``), botocore model ``service-quotas`` 2019-06-24 and its
    paginator. A quota whose applied value is not available is not returned (the API's documentation).
    """
    paginator = client.get_paginator("list_service_quotas")
    pages = _call(
        "ListServiceQuotas",
        region,
        lambda: paginator.paginate(ServiceCode=service_code, PaginationConfig={"PageSize": 100}),
    )
    return {q["QuotaName"]: float(q["Value"]) for page in pages for q in page.get("Quotas", []) if "Value" in q}


def offered_pairs(
    client: Any, instance_types: Sequence[str], zones: Sequence[str], region: str
) -> set[tuple[str, str]]:
    """(type, zone) pairs EC2 DescribeInstanceTypeOfferings lists (LocationType availability-zone; filters
    ``instance-type`` and ``location``; all pages; botocore model ``ec2``, response
    ``InstanceTypeOfferings[].InstanceType`` / ``Location``)."""
    paginator = client.get_paginator("describe_instance_type_offerings")
    pages = _call(
        "DescribeInstanceTypeOfferings",
        region,
        lambda: paginator.paginate(
            LocationType="availability-zone",
            Filters=[
                {"Name": "instance-type", "Values": list(instance_types)},
                {"Name": "location", "Values": list(zones)},
            ],
        ),
    )
    return {(o["InstanceType"], o["Location"]) for page in pages for o in page.get("InstanceTypeOfferings", [])}


def _amount(value: float) -> str:
    return f"{value:g}"


def _needed(need: QuotaNeed | QuotaResult) -> str:
    unit = need.unit[:-1] if need.needed == 1 and need.unit.endswith("s") else need.unit
    return f"{need.needed} {unit}"


def _quota_result(need: QuotaNeed, value: float | None, region: str) -> QuotaResult:
    url = service_quotas_url(region, need.service)
    if need.quota_name.startswith("("):
        status, request = "unknown", "no Service Quotas entry is known for this family: check the EC2 quotas"
    elif value is None:
        status = "unknown"
        request = f"not listed for this account: check '{need.quota_name}' (>= {need.needed}) at {url}"
    elif value >= need.needed:
        status, request = "ok", ""
    else:
        status = f"SHORT by {_amount(need.needed - value)}"
        request = f"request '{need.quota_name}' = {need.needed} at {url}"
    return QuotaResult(need.service, need.quota_name, need.needed, need.unit, need.used_by, value, status, request)


def check(needs: Needs, quotas_client: Any, ec2_client: Any | None, sagemaker_client: Any | None = None) -> Report:
    """Compare ``needs`` with the account's applied quotas, the offerings of its zones and its reservations."""
    values: dict[str, dict[str, float]] = {}
    for service in sorted({q.service for q in needs.quotas}):
        values[service] = applied_quotas(quotas_client, service, needs.region)
    quotas = [_quota_result(q, values[q.service].get(q.quota_name), needs.region) for q in needs.quotas]
    offerings: list[OfferingResult] = []
    if needs.offerings and ec2_client is not None:
        types = sorted({o.instance_type for o in needs.offerings})
        zones = sorted({o.zone for o in needs.offerings})
        offered = offered_pairs(ec2_client, types, zones, needs.region)
        offerings = [
            OfferingResult(o.instance_type, o.zone, o.used_by, (o.instance_type, o.zone) in offered)
            for o in needs.offerings
        ]
    reservations = check_reservations(needs.reservations, ec2_client, sagemaker_client, needs.region, _call)
    return Report(needs.env, needs.region, quotas, offerings, reservations)


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return lines


def needs_lines(needs: Needs) -> list[str]:
    """The offline table: what ``needs`` asks of the account's quotas and zones."""
    lines = [f"Quotas that env {needs.env} needs in {needs.region} (config/{needs.env}.yaml):", ""]
    lines += _table(
        ("service", "quota name", "needed", "used by"),
        [(q.service, q.quota_name, _needed(q), "; ".join(q.used_by)) for q in needs.quotas],
    )
    if needs.offerings:
        lines += ["", "EC2 instance types that must be offered (DescribeInstanceTypeOfferings):", ""]
        lines += _table(
            ("instance type", "zone", "used by"),
            [(o.instance_type, o.zone, ", ".join(o.used_by)) for o in needs.offerings],
        )
    if needs.reservations:
        lines += ["", "Reservations whose state is checked (DescribeCapacityReservations, DescribeTrainingPlan):", ""]
        lines += _table(
            ("reservation", "kind", "instance type", "instances", "zone", "used by"),
            [
                (
                    r.reservation,
                    r.kind,
                    r.instance_type,
                    "-" if r.instance_count is None else str(r.instance_count),
                    r.zone or "-",
                    ", ".join(r.used_by),
                )
                for r in needs.reservations
            ],
        )
    return lines


def report_lines(report: Report) -> list[str]:
    """The online table: each need next to the account's quota value and what to request."""
    lines = [f"Preflight of env {report.env} in {report.region} (quota values, not free capacity):", ""]
    lines += _table(
        ("service", "quota name", "needed", "quota", "status", "to request"),
        [
            (
                q.service,
                q.quota_name,
                _needed(q),
                "unknown" if q.quota is None else _amount(q.quota),
                q.status,
                q.request or "-",
            )
            for q in report.quotas
        ],
    )
    if report.offerings:
        lines += [""]
        lines += _table(
            ("instance type", "zone", "offered", "used by"),
            [(o.instance_type, o.zone, "yes" if o.offered else "NO", ", ".join(o.used_by)) for o in report.offerings],
        )
    if report.reservations:
        lines += [""]
        lines += _table(
            ("reservation", "kind", "instance type", "state", "free", "window", "status", "used by"),
            reservation_rows(report.reservations),
        )
    short = sum(q.status != "ok" for q in report.quotas)
    missing = sum(not o.offered for o in report.offerings)
    bad = sum(not r.ok for r in report.reservations)
    summary = f"{short} quota(s) short or unknown, {missing} offering(s) missing"
    summary += f", {bad} reservation(s) with a problem" if report.reservations else ""
    lines += ["", "all clear" if report.ok else summary]
    return lines


# --------------------------------------------------------------------------------------------------
# Command
# --------------------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "preflight", SUMMARY, __doc__)
    parser.add_argument("--env", default="dev", help="environment: config/<env>.yaml (default: dev)")
    parser.add_argument("--region", help="region to check (default: the config's region)")
    parser.add_argument("--offline", action="store_true", help="print what the environment needs; call no AWS API")
    parser.add_argument("--json", action="store_true", help="print the same data as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        needs = compute_needs(load_env_config(args.env))
        if args.region:
            needs.region = args.region
        if args.offline:
            print(json.dumps(asdict(needs), indent=2) if args.json else "\n".join(needs_lines(needs)))
            return 0
        quotas_client = make_client("service-quotas", needs.region)
        kinds = {r.kind for r in needs.reservations}
        ec2_client = make_client("ec2", needs.region) if needs.offerings or EC2_RESERVATION in kinds else None
        sagemaker_client = make_client("sagemaker", needs.region) if TRAINING_PLAN in kinds else None
        report = check(needs, quotas_client, ec2_client, sagemaker_client)
    except PreflightError as exc:
        print(f"gpuctl preflight: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**asdict(report), "ok": report.ok}, indent=2))
    else:
        print("\n".join(report_lines(report)))
    return 0 if report.ok else 1
