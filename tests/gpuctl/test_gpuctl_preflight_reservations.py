"""gpuctl preflight, reservations: which reservations a config names, and their states from recorded EC2
DescribeCapacityReservations / SageMaker DescribeTrainingPlan responses replayed by botocore's Stubber.

Configs here are small fakes (``SimpleNamespace``) with only the keys the reservation check reads, so the check
does not depend on how the config model spells the rest.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpuctl import cli
from gpuctl.commands import preflight
from gpuctl.reservations import EC2_RESERVATION, TRAINING_PLAN, reservation_needs

RESPONSES = Path(__file__).parent / "preflight_responses"
REGION = "us-east-1"
CR = "cr-0123456789abcdef0"
PLAN = "arn:aws:sagemaker:us-east-1:111122223333:training-plan/p4d-december"
QUOTA = "ml.p4d.24xlarge for training job usage"


def recorded(name: str) -> dict[str, Any]:
    return json.loads((RESPONSES / f"{name}.json").read_text())


def training(**kwargs: Any) -> NS:
    base = {
        "enabled": True,
        "spot": False,
        "instance_type": "ml.p4d.24xlarge",
        "instance_count": 2,
        "training_plan_arn": None,
        "instance_preferences": None,
        "prepare": NS(enabled=False),
    }
    return NS(**{**base, **kwargs})


def config(*, training_section: NS | None = None, groups: tuple[NS, ...] = (), endpoints: dict | None = None) -> NS:
    return NS(
        env_name="test",
        region=REGION,
        availability_zones=("us-east-1a", "us-east-1b"),
        training=training_section or training(enabled=False),
        inference=NS(enabled=endpoints is not None, endpoints=endpoints or {}),
        fleets=NS(groups=groups, notebooks=()),
        file_systems=NS(lustre=NS(enabled=False, availability_zone=None)),
    )


def fleet_group(**reservation: Any) -> NS:
    fields = {"id": CR, "availability_zone": "us-east-1a", "instance_type": "p5.48xlarge", "instance_count": 2}
    return NS(name="p5", instance_type="p5.48xlarge", capacity_reservation=NS(**{**fields, **reservation}))


# -- which reservations a config names (no AWS) ------------------------------------------------------------


def test_no_reservation_keys_no_reservations() -> None:
    """A config model without the reservation keys (getattr defaults) names none."""
    bare = NS(training=NS(enabled=True, instance_type="ml.g5.xlarge", instance_count=1), fleets=NS(groups=()))
    assert reservation_needs(bare) == []


def test_training_plans_endpoint_reservations_and_fleet_reservations() -> None:
    preferences = (
        NS(instance_type="ml.p4d.24xlarge", instance_count=None, training_plan_arn=PLAN),
        NS(instance_type="ml.p5.48xlarge", instance_count=1, training_plan_arn=None),
    )
    endpoint = NS(instance_type="ml.g5.xlarge", instance_count=2, capacity_reservation_arn=PLAN + "-serve")
    cfg = config(
        training_section=training(instance_preferences=preferences),
        endpoints={"classifier": endpoint},
        groups=(fleet_group(), NS(name="plain", instance_type="g5.xlarge", capacity_reservation=None)),
    )
    needs = {(n.kind, n.reservation): n for n in reservation_needs(cfg)}
    assert set(needs) == {(TRAINING_PLAN, PLAN), (TRAINING_PLAN, PLAN + "-serve"), (EC2_RESERVATION, CR)}
    plan = needs[(TRAINING_PLAN, PLAN)]
    assert (plan.instance_type, plan.instance_count, plan.used_by) == (
        "ml.p4d.24xlarge",
        2,
        ["training.instance_preferences[0]"],
    )
    assert needs[(TRAINING_PLAN, PLAN + "-serve")].used_by == ["inference.endpoints.classifier"]
    fleet = needs[(EC2_RESERVATION, CR)]
    assert (fleet.instance_type, fleet.zone, fleet.instance_count) == ("p5.48xlarge", "us-east-1a", 2)


def test_one_plan_used_twice_is_checked_once_for_the_larger_count() -> None:
    cfg = config(
        training_section=training(
            training_plan_arn=PLAN,
            instance_count=1,
            instance_preferences=(NS(instance_type="ml.p4d.24xlarge", instance_count=2, training_plan_arn=PLAN),),
        )
    )
    (need,) = reservation_needs(cfg)
    assert need.instance_count == 2 and need.used_by == ["training", "training.instance_preferences[0]"]


def test_offline_table_lists_the_reservations(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setattr(preflight, "load_env_config", lambda env: config(groups=(fleet_group(),)))
    monkeypatch.setattr(preflight, "_fleet_needs", lambda cfg, out: None)
    monkeypatch.setattr(preflight, "make_client", lambda *a: pytest.fail("--offline called AWS"))
    assert cli.main(["preflight", "--env", "test", "--offline"]) == 0
    out = capsys.readouterr().out
    assert "| reservation | kind | instance type | instances | zone | used by |" in out
    assert f"| {CR} | {EC2_RESERVATION} | p5.48xlarge | 2 | us-east-1a | fleets.groups[p5] |" in out


# -- their states, from recorded responses -----------------------------------------------------------------


class Stubs:
    def __init__(self) -> None:
        session = boto3.session.Session(
            region_name=REGION, aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret-example"
        )
        self.clients = {name: session.client(name) for name in ("service-quotas", "ec2", "sagemaker")}
        self.stubbers = {name: Stubber(client) for name, client in self.clients.items()}
        for stubber in self.stubbers.values():
            stubber.activate()

    def make_client(self, service: str, region: str) -> Any:
        assert region == REGION
        return self.clients[service]

    def capacity_reservation(self, response: dict[str, Any]) -> None:
        self.stubbers["ec2"].add_response("describe_capacity_reservations", response, {"CapacityReservationIds": [CR]})

    def training_plan(self, response: dict[str, Any]) -> None:
        self.stubbers["sagemaker"].add_response("describe_training_plan", response, {"TrainingPlanName": PLAN})

    def training_quota(self, value: float = 2) -> None:
        quota = {"ServiceCode": "sagemaker", "QuotaName": QUOTA, "QuotaCode": "L-TEST0001", "Value": value}
        self.stubbers["service-quotas"].add_response(
            "list_service_quotas", {"Quotas": [quota]}, {"ServiceCode": "sagemaker", "MaxResults": 100}
        )


@pytest.fixture()
def stubs(monkeypatch: pytest.MonkeyPatch) -> Stubs:
    stubs = Stubs()
    monkeypatch.setattr(preflight, "make_client", stubs.make_client)
    return stubs


def fleet_needs(**reservation: Any) -> preflight.Needs:
    return preflight.Needs("test", REGION, [], [], reservation_needs(config(groups=(fleet_group(**reservation),))))


def test_active_capacity_block_matches(stubs: Stubs) -> None:
    stubs.capacity_reservation(recorded("describe_capacity_reservations_active"))
    report = preflight.check(fleet_needs(), None, stubs.clients["ec2"])
    (result,) = report.reservations
    assert report.ok and result.state == "active" and result.available == 2 and result.problems == []
    assert "| cr-0123456789abcdef0 | ec2 capacity reservation | p5.48xlarge | active | 2 |" in "\n".join(
        preflight.report_lines(report)
    )


def test_expired_capacity_block_is_a_problem(stubs: Stubs) -> None:
    stubs.capacity_reservation(recorded("describe_capacity_reservations_expired"))
    report = preflight.check(fleet_needs(), None, stubs.clients["ec2"])
    assert not report.ok
    assert report.reservations[0].problems == ["is expired: no capacity from it any more"]
    text = "\n".join(preflight.report_lines(report))
    assert "PROBLEM: is expired" in text
    assert text.endswith("0 quota(s) short or unknown, 0 offering(s) missing, 1 reservation(s) with a problem")


@pytest.mark.parametrize(
    ("reservation", "problem"),
    [
        ({"instance_type": "p4d.24xlarge"}, "reserves p5.48xlarge, not p4d.24xlarge"),
        ({"availability_zone": "us-east-1b"}, "is in us-east-1a, not us-east-1b"),
        ({"instance_count": 4}, "reserves 2 instance(s), 4 needed"),
    ],
)
def test_a_reservation_that_does_not_match_is_a_problem(stubs: Stubs, reservation: dict, problem: str) -> None:
    stubs.capacity_reservation(recorded("describe_capacity_reservations_active"))
    report = preflight.check(fleet_needs(**reservation), None, stubs.clients["ec2"])
    assert report.reservations[0].problems == [problem] and not report.ok


def test_scheduled_reservation_is_shown_not_failed(stubs: Stubs) -> None:
    response = copy.deepcopy(recorded("describe_capacity_reservations_active"))
    response["CapacityReservations"][0].update(State="scheduled", AvailableInstanceCount=0)
    stubs.capacity_reservation(response)
    report = preflight.check(fleet_needs(), None, stubs.clients["ec2"])
    assert report.ok and report.reservations[0].state == "scheduled"


def test_unknown_reservation_id_is_not_found(stubs: Stubs) -> None:
    stubs.stubbers["ec2"].add_client_error(
        "describe_capacity_reservations",
        service_error_code="InvalidCapacityReservationId.NotFound",
        service_message=f"The capacity reservation ID '{CR}' does not exist",
        expected_params={"CapacityReservationIds": [CR]},
    )
    report = preflight.check(fleet_needs(), None, stubs.clients["ec2"])
    assert report.reservations[0].state == "not found" and not report.ok


def test_access_denied_names_the_read_only_action(stubs: Stubs) -> None:
    stubs.stubbers["ec2"].add_client_error(
        "describe_capacity_reservations", service_error_code="UnauthorizedOperation", service_message="denied"
    )
    with pytest.raises(preflight.PreflightError, match="ec2:DescribeCapacityReservations"):
        preflight.check(fleet_needs(), None, stubs.clients["ec2"])


def test_a_resource_group_of_reservations_is_not_checked(stubs: Stubs) -> None:
    group_arn = "arn:aws:resource-groups:us-east-1:111122223333:group/p5-reservations"
    needs = fleet_needs(id=None, resource_group_arn=group_arn)
    report = preflight.check(needs, None, stubs.clients["ec2"])
    assert report.reservations[0].state == "not checked" and report.ok


def _run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cfg: NS) -> tuple[int, dict]:
    monkeypatch.setattr(preflight, "load_env_config", lambda env: cfg)
    code = cli.main(["preflight", "--env", "test", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_all_clear_with_an_active_training_plan(stubs: Stubs, capsys, monkeypatch) -> None:
    stubs.training_quota()
    stubs.training_plan(recorded("describe_training_plan_active"))
    code, report = _run(capsys, monkeypatch, config(training_section=training(training_plan_arn=PLAN)))
    assert code == 0 and report["ok"]
    (plan,) = report["reservations"]
    assert (plan["kind"], plan["state"], plan["available"], plan["problems"]) == (TRAINING_PLAN, "Active", 2, [])
    for stubber in stubs.stubbers.values():
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"Status": "Expired", "AvailableInstanceCount": 0}, "is Expired: no capacity from it any more"),
        ({"Status": "Failed"}, "is Failed: no capacity from it any more"),
        ({"TotalInstanceCount": 1}, "reserves 1 instance(s), 2 needed"),
    ],
)
def test_expired_or_short_training_plan_exits_1(stubs: Stubs, capsys, monkeypatch, change: dict, problem: str) -> None:
    stubs.training_quota()
    response = {**recorded("describe_training_plan_active"), **change}
    stubs.training_plan(response)
    code, report = _run(capsys, monkeypatch, config(training_section=training(training_plan_arn=PLAN)))
    assert code == 1 and not report["ok"]
    assert report["reservations"][0]["problems"] == [problem]


def test_training_plan_of_another_type_exits_1(stubs: Stubs, capsys, monkeypatch) -> None:
    stubs.training_quota()
    response = copy.deepcopy(recorded("describe_training_plan_active"))
    response["ReservedCapacitySummaries"][0]["InstanceType"] = "ml.p5.48xlarge"
    stubs.training_plan(response)
    code, report = _run(capsys, monkeypatch, config(training_section=training(training_plan_arn=PLAN)))
    assert code == 1
    assert report["reservations"][0]["problems"] == ["reserves ml.p5.48xlarge, not ml.p4d.24xlarge"]


def test_unknown_training_plan_exits_1(stubs: Stubs, capsys, monkeypatch) -> None:
    stubs.training_quota()
    stubs.stubbers["sagemaker"].add_client_error(
        "describe_training_plan", service_error_code="ResourceNotFound", service_message="no plan"
    )
    code, report = _run(capsys, monkeypatch, config(training_section=training(training_plan_arn=PLAN)))
    assert code == 1 and report["reservations"][0]["state"] == "not found"


# -- the read-only permissions a role needs to run the check --------------------------------------------------


def test_read_permissions_name_exactly_the_calls() -> None:
    plans = (NS(instance_type="ml.p4d.24xlarge", instance_count=None, training_plan_arn=PLAN),)
    cfg = config(training_section=training(instance_preferences=plans), groups=(fleet_group(),))
    needs = preflight.Needs(
        "test",
        REGION,
        [preflight.QuotaNeed("sagemaker", QUOTA, 2, "instances")],
        [preflight.OfferingNeed("p5.48xlarge", "us-east-1a")],
        reservation_needs(cfg),
    )
    assert preflight.read_permissions(needs) == {
        "servicequotas:ListServiceQuotas": ["*"],
        "ec2:DescribeInstanceTypeOfferings": ["*"],
        "ec2:DescribeCapacityReservations": ["*"],
        "sagemaker:DescribeTrainingPlan": [PLAN],
    }
    assert preflight.read_permissions(preflight.Needs("test", REGION, [], [])) == {}


def test_the_window_of_a_real_response_is_in_utc(stubs: Stubs) -> None:
    """botocore parses the timestamps into datetimes: the table shows them to the minute, in UTC."""
    from datetime import datetime, timezone

    response = copy.deepcopy(recorded("describe_capacity_reservations_active"))
    response["CapacityReservations"][0].update(
        StartDate=datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc),
        EndDate=datetime(2026, 12, 4, 11, 30, tzinfo=timezone.utc),
    )
    stubs.capacity_reservation(response)
    report = preflight.check(fleet_needs(), None, stubs.clients["ec2"])
    assert report.reservations[0].window == "2026-11-20 08:00 UTC - 2026-12-04 11:30 UTC"
