"""gpuctl preflight: the needs of dev and prod from their configs, and the online check against recorded
Service Quotas / EC2 responses replayed by botocore's Stubber on real clients (no AWS).

The recorded responses in ``preflight_responses/`` have the shapes of the botocore service models
(``service-quotas`` ListServiceQuotas, ``ec2`` DescribeInstanceTypeOfferings); the EC2 quota codes are AWS's,
the SageMaker quota codes there are test values (quotas are matched by ``QuotaName``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from gpuctl import aws_errors, cli
from gpuctl.commands import preflight

RESPONSES = Path(__file__).parent / "preflight_responses"
REGION = "us-east-1"
EC2_URL = "https://us-east-1.console.aws.amazon.com/servicequotas/home/services/ec2/quotas"
CONTAINER = ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
DEV_TYPES = ["g5.2xlarge", "g5.xlarge", "g6.xlarge"]


def recorded(name: str) -> dict[str, Any]:
    return json.loads((RESPONSES / f"{name}.json").read_text())


@pytest.fixture()
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", *CONTAINER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-example")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class Stubs:
    """Real clients in us-east-1, each behind a Stubber, handed to the command through ``make_client``."""

    def __init__(self) -> None:
        self.clients = {
            name: boto3.session.Session(region_name=REGION).client(name) for name in ("service-quotas", "ec2")
        }
        self.stubbers = {name: Stubber(client) for name, client in self.clients.items()}
        for stubber in self.stubbers.values():
            stubber.activate()

    def make_client(self, service: str, region: str) -> Any:
        assert region == REGION
        return self.clients[service]

    def quotas(self, service: str, response: dict[str, Any], token: str | None = None) -> None:
        params: dict[str, Any] = {"ServiceCode": service, "MaxResults": 100}
        if token:
            params["NextToken"] = token
        self.stubbers["service-quotas"].add_response("list_service_quotas", response, params)

    def offerings(self, response: dict[str, Any]) -> None:
        params = {
            "LocationType": "availability-zone",
            "Filters": [
                {"Name": "instance-type", "Values": DEV_TYPES},
                {"Name": "location", "Values": ["us-east-1a"]},
            ],
        }
        self.stubbers["ec2"].add_response("describe_instance_type_offerings", response, params)

    def dev_account(self, *, ec2: dict[str, Any] | None = None, offerings: dict[str, Any] | None = None) -> None:
        """The recorded account: ec2's quotas, sagemaker's in two pages, then the offerings."""
        self.quotas("ec2", ec2 or recorded("list_service_quotas_ec2"))
        self.quotas("sagemaker", recorded("list_service_quotas_sagemaker_page1"))
        self.quotas("sagemaker", recorded("list_service_quotas_sagemaker_page2"), token="cGFnZTI=")
        self.offerings(offerings or recorded("describe_instance_type_offerings"))

    def assert_done(self) -> None:
        for stubber in self.stubbers.values():
            stubber.assert_no_pending_responses()


@pytest.fixture()
def stubs(fake_credentials: None, monkeypatch: pytest.MonkeyPatch) -> Stubs:
    stubs = Stubs()
    monkeypatch.setattr(preflight, "make_client", stubs.make_client)
    return stubs


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["quota_name"]: q for q in report["quotas"]}


# -- the needs, from the configs (no AWS) ----------------------------------------------------------


def test_dev_needs() -> None:
    needs = preflight.compute_needs(preflight.load_env_config("dev"))
    assert needs.region == "us-east-1"
    assert {(q.service, q.quota_name): (q.needed, q.unit) for q in needs.quotas} == {
        ("sagemaker", "ml.g5.xlarge for training job usage"): (1, "instances"),
        # training.instance_preferences: every type of the fallback list, at its count
        ("sagemaker", "ml.g5.2xlarge for training job usage"): (1, "instances"),
        ("sagemaker", "ml.g6.2xlarge for training job usage"): (1, "instances"),
        ("sagemaker", "ml.m5.4xlarge for processing job usage"): (1, "instances"),
        ("sagemaker", "ml.g5.xlarge for endpoint usage"): (1, "instances"),
        ("sagemaker", "ml.g6.xlarge for endpoint usage"): (1, "instances"),  # the endpoint's instance pool
        ("sagemaker", "ml.g5.xlarge for notebook instance usage"): (1, "instances"),
        # workbench: all spot (base 0, 0 % on demand), max 2, the largest type of its mix is g5.2xlarge (8 vCPUs)
        ("ec2", "All G and VT Spot Instance Requests"): (16, "vCPUs"),
    }
    # mount_lustre: the fleet launches only in the file system's AZ (the first)
    assert [(o.instance_type, o.zone) for o in needs.offerings] == [
        ("g5.xlarge", "us-east-1a"),
        ("g6.xlarge", "us-east-1a"),
        ("g5.2xlarge", "us-east-1a"),
    ]


def test_prod_needs() -> None:
    needs = preflight.compute_needs(preflight.load_env_config("prod"))
    assert needs.region == "us-west-2"
    assert {q.quota_name: q.needed for q in needs.quotas} == {
        "ml.p4d.24xlarge for training job usage": 2,  # on demand: the fallback list excludes spot
        "ml.p4de.24xlarge for training job usage": 2,
        "ml.m5.12xlarge for processing job usage": 1,
        "ml.g5.2xlarge for endpoint usage": 6,  # autoscaling max_capacity, not instance_count 2
        "ml.g6.2xlarge for endpoint usage": 6,  # the endpoint's instance pools
        "ml.g6e.2xlarge for endpoint usage": 6,
        "ml.g5.xlarge for endpoint usage": 4,
        "Running On-Demand P instances": 768,  # 4 x p5.48xlarge x 192 vCPUs
    }
    assert [(o.instance_type, o.zone) for o in needs.offerings] == [
        ("p5.48xlarge", "us-west-2a"),
        ("p5e.48xlarge", "us-west-2a"),
    ]


def test_spot_mix_split_rounds_each_way_towards_the_quota() -> None:
    group = SimpleNamespace(
        max_capacity=5, spot=SimpleNamespace(on_demand_base_capacity=1, on_demand_percentage_above_base=50)
    )
    # base 1, then 50 % of 4 = 2 on demand: 3 on demand, 2 spot
    assert preflight._split_on_demand_spot(group) == (3, 2)
    group.max_capacity = 4  # 50 % of 3 = 1.5: up to 3 on demand (1 + 2), up to 2 spot (3 - 1)
    assert preflight._split_on_demand_spot(group) == (3, 2)
    assert preflight._split_on_demand_spot(SimpleNamespace(max_capacity=2, spot=None)) == (2, 0)


def test_fallback_lists_are_read_when_the_config_has_them() -> None:
    config = preflight.load_env_config("dev")
    training = SimpleNamespace(
        **{name: getattr(config.training, name) for name in ("enabled", "spot", "instance_count", "prepare")},
        instance_type="ml.g5.xlarge",
        allowed_instance_types=None,
        instance_preferences=("ml.g6.xlarge", SimpleNamespace(instance_type="ml.g5.2xlarge", instance_count=2)),
    )
    fields = {name: getattr(config, name) for name in type(config).model_fields if name != "training"}
    fake = SimpleNamespace(**fields, training=training)
    names = {q.quota_name: q.needed for q in preflight.compute_needs(fake).quotas}
    assert names["ml.g6.xlarge for training job usage"] == 1
    assert names["ml.g5.2xlarge for training job usage"] == 2


def test_ec2_family_quotas() -> None:
    assert preflight.ec2_vcpu_quota_name("g4dn.xlarge", spot=False) == "Running On-Demand G and VT instances"
    assert preflight.ec2_vcpu_quota_name("p6-b200.48xlarge", spot=True) == "All P Spot Instance Requests"
    assert preflight.ec2_vcpu_quota_name("gr6.4xlarge", spot=False) is None  # no verified entry: unknown


def test_sagemaker_quota_names_have_one_home() -> None:
    assert aws_errors.quota_name("ml.g5.xlarge", spot=True) == "ml.g5.xlarge for spot training job usage"
    assert aws_errors.sagemaker_quota_name("ml.g5.xlarge", "endpoint usage") == "ml.g5.xlarge for endpoint usage"
    with pytest.raises(ValueError, match="allowed: training job usage"):
        aws_errors.sagemaker_quota_name("ml.g5.xlarge", "hosting")


def test_offline_prints_the_needs_without_aws(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(preflight, "make_client", lambda *a: pytest.fail("--offline called AWS"))
    assert cli.main(["preflight", "--env", "dev", "--offline"]) == 0
    out = capsys.readouterr().out
    assert "| ec2 | All G and VT Spot Instance Requests | 16 vCPUs |" in out
    assert cli.main(["preflight", "--env", "prod", "--offline", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert by_name(data)["Running On-Demand P instances"]["needed"] == 768


def test_unknown_env_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["preflight", "--env", "nosuch", "--offline"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuctl preflight:") and "allowed environments" in err and "Traceback" not in err


# -- the online check, against recorded responses --------------------------------------------------


def test_all_clear(stubs: Stubs, capsys: pytest.CaptureFixture[str]) -> None:
    stubs.dev_account()
    assert cli.main(["preflight", "--env", "dev"]) == 0
    out = capsys.readouterr().out
    assert "| sagemaker | ml.g5.xlarge for notebook instance usage | 1 instance | 1 | ok | - |" in out
    assert "| g6.xlarge | us-east-1a | yes | fleets.groups[workbench] |" in out
    assert out.rstrip().endswith("all clear")
    stubs.assert_done()


def test_short_quota_names_the_quota_and_amount_to_request(stubs: Stubs, capsys: pytest.CaptureFixture[str]) -> None:
    ec2 = copy.deepcopy(recorded("list_service_quotas_ec2"))
    ec2["Quotas"][1]["Value"] = 8.0  # All G and VT Spot Instance Requests
    stubs.dev_account(ec2=ec2)
    assert cli.main(["preflight", "--env", "dev"]) == 1
    out = capsys.readouterr().out
    assert (
        "| ec2 | All G and VT Spot Instance Requests | 16 vCPUs | 8 | SHORT by 8 | "
        f"request 'All G and VT Spot Instance Requests' = 16 at {EC2_URL} |"
    ) in out
    assert "1 quota(s) short or unknown, 0 offering(s) missing" in out
    stubs.assert_done()


def test_missing_offering(stubs: Stubs, capsys: pytest.CaptureFixture[str]) -> None:
    offerings = copy.deepcopy(recorded("describe_instance_type_offerings"))
    offerings["InstanceTypeOfferings"] = [
        o for o in offerings["InstanceTypeOfferings"] if o["InstanceType"] != "g6.xlarge"
    ]
    stubs.dev_account(offerings=offerings)
    assert cli.main(["preflight", "--env", "dev", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert {(o["instance_type"], o["offered"]) for o in data["offerings"]} == {
        ("g5.xlarge", True),
        ("g5.2xlarge", True),
        ("g6.xlarge", False),
    }
    assert all(q["status"] == "ok" for q in data["quotas"])
    stubs.assert_done()


def test_pagination_and_a_quota_missing_from_the_response(stubs: Stubs, capsys: pytest.CaptureFixture[str]) -> None:
    page2 = copy.deepcopy(recorded("list_service_quotas_sagemaker_page2"))
    page2["Quotas"] = [q for q in page2["Quotas"] if "notebook" not in q["QuotaName"]]
    stubs.quotas("ec2", recorded("list_service_quotas_ec2"))
    stubs.quotas("sagemaker", recorded("list_service_quotas_sagemaker_page1"))
    stubs.quotas("sagemaker", page2, token="cGFnZTI=")
    stubs.offerings(recorded("describe_instance_type_offerings"))
    assert cli.main(["preflight", "--env", "dev", "--json"]) == 1
    quotas = by_name(json.loads(capsys.readouterr().out))
    assert quotas["ml.m5.4xlarge for processing job usage"]["quota"] == 4.0  # from the second page
    missing = quotas["ml.g5.xlarge for notebook instance usage"]
    assert (missing["quota"], missing["status"]) == (None, "unknown")  # not 0
    stubs.assert_done()


def test_access_denied_names_the_action(stubs: Stubs, capsys: pytest.CaptureFixture[str]) -> None:
    stubs.stubbers["service-quotas"].add_client_error(
        "list_service_quotas",
        service_error_code="AccessDeniedException",
        service_message="User is not authorized to perform: servicequotas:ListServiceQuotas",
        http_status_code=400,
        expected_params={"ServiceCode": "ec2", "MaxResults": 100},
    )
    assert cli.main(["preflight", "--env", "dev"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert "AWS denied servicequotas:ListServiceQuotas in us-east-1 (AccessDeniedException)" in captured.err


def test_no_credentials(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", *CONTAINER):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert cli.main(["preflight", "--env", "dev"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuctl preflight: No AWS credentials were found") and "Traceback" not in err


def test_readme_quota_table_is_the_offline_output() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    needs = preflight.compute_needs(preflight.load_env_config("dev"))
    quota_table = preflight.needs_lines(needs)[2 : 4 + len(needs.quotas)]
    for line in quota_table:
        assert f"  {line}\n" in readme, f"README's quota table differs from gpuctl preflight --offline: {line}"
