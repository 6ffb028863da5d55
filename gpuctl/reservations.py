"""Reservation states for ``gpuctl preflight``: is each reservation the config names usable, and does it match?

What the environment reserves comes from its config (:func:`reservation_needs`, read defensively with
``getattr`` so an older config model without these keys has none):

* ``training.training_plan_arn`` and ``training.instance_preferences[].training_plan_arn``: SageMaker training
  plans, for the training type and host count;
* ``inference.endpoints.<k>.capacity_reservation_arn``: an ML capacity reservation (a training plan for
  endpoints), for the endpoint's type and instance count;
* ``fleets.groups[].capacity_reservation`` with an ``id``: an EC2 On-Demand Capacity Reservation or Capacity
  Block, for its declared type, zone and count (a ``resource_group_arn`` is a group of reservations that the
  API cannot describe by id: reported as not checked).

Online (read-only), :func:`check_reservations` asks:

* EC2 ``DescribeCapacityReservations`` (``CapacityReservationIds``; response ``CapacityReservations[]``:
  ``State``, ``InstanceType``, ``AvailabilityZone``, ``TotalInstanceCount``, ``AvailableInstanceCount``,
  ``StartDate``, ``EndDate``; botocore model ``ec2``). ``State`` values (the model's documentation): ``active``
  "The capacity is available for use"; ``expired``, ``cancelled``: "The reserved capacity is no longer available
  for your use"; ``failed``; ``payment-failed`` "Your Capacity Block was released"; ``scheduled``, ``pending``,
  ``payment-pending``, ``assessing``, ``delayed``: not usable yet; ``unsupported``, ``cancelling``,
  ``unavailable``. An unknown id is the error ``InvalidCapacityReservationId.NotFound`` (or ``.Malformed``).
* SageMaker ``DescribeTrainingPlan`` (``TrainingPlanName``: a name or the plan's ARN, botocore shape
  ``TrainingPlanNameOrArn``; response ``Status`` ``Pending | Active | Scheduled | Expired | Failed``,
  ``TotalInstanceCount``, ``AvailableInstanceCount``, ``ReservedCapacitySummaries[].InstanceType`` /
  ``AvailabilityZone``, ``StartTime``, ``EndTime``). An unknown plan is ``ResourceNotFound``.

A reservation that is gone (expired, cancelled, failed, not found) or does not match (another instance type,
another zone, fewer instances than the workload needs) is a problem (exit 1); one that is not active yet is
shown with its start and is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

EC2_RESERVATION = "ec2 capacity reservation"
TRAINING_PLAN = "sagemaker training plan"

#: States in which a reservation will never give capacity again (EC2 and SageMaker spellings).
GONE = frozenset(
    {
        "expired",
        "cancelled",
        "failed",
        "payment-failed",
        "unsupported",
        "cancelling",
        "unavailable",
        "Expired",
        "Failed",
    }
)
#: States that give capacity now.
USABLE = frozenset({"active", "Active"})

#: Error codes of an id or plan the account does not have.
NOT_FOUND = frozenset(
    {"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed", "ResourceNotFound"}
)

#: The read-only IAM action of each API call (preflight lists them when AWS denies one).
IAM_ACTIONS: dict[str, str] = {
    "DescribeCapacityReservations": "ec2:DescribeCapacityReservations",
    "DescribeTrainingPlan": "sagemaker:DescribeTrainingPlan",
}

#: How preflight runs one AWS call: operation, region, a thunk returning pages -> pages (errors translated).
Caller = Callable[[str, str, Callable[[], Iterable[dict[str, Any]]]], list[dict[str, Any]]]


@dataclass
class ReservationNeed:
    """A reservation the config names and what it must provide."""

    kind: str
    reservation: str
    instance_type: str
    instance_count: int | None
    zone: str | None
    used_by: list[str] = field(default_factory=list)


@dataclass
class ReservationResult:
    kind: str
    reservation: str
    instance_type: str
    used_by: list[str]
    #: The reservation's state as AWS reports it ("not found", "not checked" when it cannot be described).
    state: str
    #: Instances free in it now (EC2 AvailableInstanceCount / plan AvailableInstanceCount), when known.
    available: int | None
    #: Start - end of the reservation, when known.
    window: str
    #: What is wrong, empty when it is usable or will be.
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _add(out: dict[tuple[str, str], ReservationNeed], need: ReservationNeed, used_by: str) -> None:
    known = out.setdefault((need.kind, need.reservation), need)
    known.used_by.append(used_by)
    if known is not need and need.instance_count is not None:
        known.instance_count = max(known.instance_count or 0, need.instance_count)


def _training_needs(config: Any, out: dict[tuple[str, str], ReservationNeed]) -> None:
    training = getattr(config, "training", None)
    if training is None or not getattr(training, "enabled", False):
        return
    count = int(getattr(training, "instance_count", 1) or 1)
    plan = getattr(training, "training_plan_arn", None)
    if plan:
        _add(out, ReservationNeed(TRAINING_PLAN, plan, training.instance_type, count, None), "training")
    for i, item in enumerate(getattr(training, "instance_preferences", None) or ()):
        plan = getattr(item, "training_plan_arn", None)
        if plan:
            item_count = getattr(item, "instance_count", None) or count
            need = ReservationNeed(TRAINING_PLAN, plan, item.instance_type, int(item_count), None)
            _add(out, need, f"training.instance_preferences[{i}]")


def _endpoint_needs(config: Any, out: dict[tuple[str, str], ReservationNeed]) -> None:
    inference = getattr(config, "inference", None)
    if inference is None or not getattr(inference, "enabled", False):
        return
    for key, endpoint in (getattr(inference, "endpoints", None) or {}).items():
        arn = getattr(endpoint, "capacity_reservation_arn", None)
        if arn:
            need = ReservationNeed(TRAINING_PLAN, arn, endpoint.instance_type, int(endpoint.instance_count), None)
            _add(out, need, f"inference.endpoints.{key}")


def _fleet_needs(config: Any, out: dict[tuple[str, str], ReservationNeed]) -> None:
    fleets = getattr(config, "fleets", None)
    for group in getattr(fleets, "groups", None) or ():
        reservation = getattr(group, "capacity_reservation", None)
        if reservation is None:
            continue
        rid = getattr(reservation, "id", None) or getattr(reservation, "resource_group_arn", None)
        if not rid:
            continue
        count = getattr(reservation, "instance_count", None)
        need = ReservationNeed(
            EC2_RESERVATION,
            str(rid),
            str(getattr(reservation, "instance_type", None) or group.instance_type),
            int(count) if count is not None else None,
            getattr(reservation, "availability_zone", None),
        )
        _add(out, need, f"fleets.groups[{group.name}]")


def reservation_needs(config: Any) -> list[ReservationNeed]:
    """Every reservation ``config`` names, once each (the largest count any user of it needs)."""
    out: dict[tuple[str, str], ReservationNeed] = {}
    _training_needs(config, out)
    _endpoint_needs(config, out)
    _fleet_needs(config, out)
    return list(out.values())


def _error_code(exc: Exception) -> str:
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _date(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if hasattr(value, "strftime") else str(value or "?")


def _mismatches(need: ReservationNeed, types: set[str], zones: set[str], total: int | None) -> list[str]:
    problems = []
    if types and need.instance_type not in types:
        problems.append(f"reserves {', '.join(sorted(types))}, not {need.instance_type}")
    if need.zone and zones and need.zone not in zones:
        problems.append(f"is in {', '.join(sorted(zones))}, not {need.zone}")
    if need.instance_count is not None and total is not None and total < need.instance_count:
        problems.append(f"reserves {total} instance(s), {need.instance_count} needed")
    return problems


def _result(need: ReservationNeed, found: dict[str, Any] | None, state_key: str, start: str, end: str) -> Any:
    if found is None:
        return ReservationResult(
            need.kind, need.reservation, need.instance_type, need.used_by, "not found", None, "-",
            ["the account has no such reservation in this region"],
        )  # fmt: skip
    state = str(found.get(state_key, "unknown"))
    if need.kind == EC2_RESERVATION:
        types = {str(found.get("InstanceType", ""))} - {""}
        zones = {str(found.get("AvailabilityZone", ""))} - {""}
    else:
        summaries = found.get("ReservedCapacitySummaries") or []
        types = {str(s["InstanceType"]) for s in summaries if s.get("InstanceType")}
        zones = set()
    total = found.get("TotalInstanceCount")
    problems = [f"is {state}: no capacity from it any more"] if state in GONE else []
    problems += _mismatches(need, types, zones, int(total) if total is not None else None)
    available = found.get("AvailableInstanceCount")
    window = f"{_date(found.get(start))} - {_date(found.get(end))}"
    return ReservationResult(
        need.kind, need.reservation, need.instance_type, need.used_by, state,
        int(available) if available is not None else None, window, problems,
    )  # fmt: skip


def _describe(call: Caller, region: str, operation: str, fetch: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """``fetch()`` through ``call`` (which translates access errors); a not-found error is None."""
    found: list[dict[str, Any] | None] = []

    def pages() -> Iterable[dict[str, Any]]:
        try:
            found.append(fetch())
        except Exception as exc:
            if _error_code(exc) not in NOT_FOUND:
                raise
            found.append(None)
        return []

    call(operation, region, pages)
    return found[0]


def check_reservations(
    needs: list[ReservationNeed], ec2_client: Any, sagemaker_client: Any, region: str, call: Caller
) -> list[ReservationResult]:
    """The state of every reservation of ``needs``, one read-only call each."""
    results = []
    for need in needs:
        if need.kind == EC2_RESERVATION and not need.reservation.startswith("cr-"):
            results.append(
                ReservationResult(
                    need.kind, need.reservation, need.instance_type, need.used_by, "not checked", None, "-", []
                )
            )
            continue
        if need.kind == EC2_RESERVATION:

            def ec2_fetch(rid: str = need.reservation) -> dict[str, Any]:
                response = ec2_client.describe_capacity_reservations(CapacityReservationIds=[rid])
                return dict(response["CapacityReservations"][0])

            found = _describe(call, region, "DescribeCapacityReservations", ec2_fetch)
            results.append(_result(need, found, "State", "StartDate", "EndDate"))
        else:

            def plan_fetch(arn: str = need.reservation) -> dict[str, Any]:
                return dict(sagemaker_client.describe_training_plan(TrainingPlanName=arn))

            found = _describe(call, region, "DescribeTrainingPlan", plan_fetch)
            results.append(_result(need, found, "Status", "StartTime", "EndTime"))
    return results


def reservation_rows(results: list[ReservationResult]) -> list[tuple[str, ...]]:
    """Rows of the online table: reservation, kind, type, state, free, window, status, used by."""
    return [
        (
            r.reservation,
            r.kind,
            r.instance_type,
            r.state,
            "-" if r.available is None else str(r.available),
            r.window,
            "ok" if r.ok else "PROBLEM: " + "; ".join(r.problems),
            ", ".join(r.used_by),
        )
        for r in results
    ]


__all__ = [
    "EC2_RESERVATION",
    "IAM_ACTIONS",
    "TRAINING_PLAN",
    "ReservationNeed",
    "ReservationResult",
    "check_reservations",
    "reservation_needs",
    "reservation_rows",
]
