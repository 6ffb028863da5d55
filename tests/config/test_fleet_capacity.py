"""Config: fleets.groups[].instance_types (an ordered on-demand fallback list), max_cost_ratio and
capacity_reservation; one failing example per refusal, each naming the group, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.config import ConfigError, load_config, parse_config

CR = "cr-0123456789abcdef0"
G5 = {"name": "w", "instance_type": "g5.xlarge", "mount_lustre": False}
P5 = {"name": "p", "instance_type": "p5.48xlarge", "efa": True, "mount_lustre": False}


def _config(groups: list[dict[str, Any]], **top: Any) -> Any:
    doc = {
        "env_name": "dev", "region": "us-east-1", "availability_zones": ["us-east-1a", "us-east-1b"],
        "fleets": {"groups": groups}, **top,
    }  # fmt: skip
    return parse_config(yaml.safe_dump(doc), Path("config/dev.yaml"))


def _reservation(**overrides: Any) -> dict[str, Any]:
    return {"id": CR, "availability_zone": "us-east-1b", "instance_type": "g5.xlarge", **overrides}


def test_dev_and_prod_declare_fallback_lists() -> None:
    (workbench,) = load_config("dev").fleets.groups
    assert workbench.instance_types == ("g5.xlarge", "g6.xlarge", "g5.2xlarge") and workbench.max_cost_ratio == 1.25
    assert workbench.spot is not None and workbench.spot.instance_types == ()
    props = workbench.fleet_props()
    assert list(props["fallback"].instance_types) == ["g5.xlarge", "g6.xlarge", "g5.2xlarge"]
    (p5,) = load_config("prod").fleets.groups
    assert p5.instance_types == ("p5.48xlarge", "p5e.48xlarge") and p5.capacity_reservation is None


def test_the_first_entry_is_the_instance_type_when_it_is_left_out() -> None:
    (group,) = _config([{"name": "w", "instance_types": ["g6.xlarge", "g5.xlarge"]}]).fleets.groups
    assert group.instance_type == "g6.xlarge"


def test_a_reservation_becomes_the_library_value_type() -> None:
    group = {**P5, "capacity_reservation": _reservation(instance_type="p5.48xlarge", capacity_block=True)}
    (parsed,) = _config([group]).fleets.groups
    reservation = parsed.fleet_props()["capacity_reservation"]
    assert (reservation.reservation_id, reservation.capacity_block, reservation.availability_zone) == (
        CR,
        True,
        "us-east-1b",
    )


def test_preflight_counts_every_type_of_a_fallback_list() -> None:
    from gpuctl.commands.preflight import compute_needs

    needs = compute_needs(_config([{**G5, "instance_types": ["g5.xlarge", "g6.xlarge"]}]))
    offered = {(o.instance_type, o.zone) for o in needs.offerings}
    assert {("g5.xlarge", "us-east-1a"), ("g6.xlarge", "us-east-1a")} <= offered


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (  # not an NVIDIA GPU
            {**G5, "instance_types": ["g5.xlarge", "m5.xlarge"]},
            r"fleets.groups\[w\]: instance_types\[1\]='m5.xlarge' has no NVIDIA GPU",
        ),
        (  # CUDA of the image
            {
                **P5,
                "efa": False,
                "image": {"cuda_version": "12.4"},
                "instance_types": ["p5.48xlarge", "p6-b200.48xlarge"],
            },
            r"instance_types\[1\]='p6-b200.48xlarge' with cuda_version='12.4': CUDA 12.4 cannot drive",
        ),
        (  # smaller GPU memory
            {**G5, "instance_type": "g6e.xlarge", "instance_types": ["g6e.xlarge", "g5.xlarge"]},
            r"instance_types\[1\]='g5.xlarge' has 22.4 GiB per GPU, less than the 44.7 GiB",
        ),
        (  # world size (GPUs per host)
            {**G5, "instance_types": ["g5.xlarge", "g5.12xlarge"]},
            r"instance_types\[1\]='g5.12xlarge' x 1 gives 4 GPUs but the first choice 'g5.xlarge' gives 1",
        ),
        (  # another CPU architecture than the image's
            {**G5, "instance_type": "g5g.xlarge", "instance_types": ["g5g.xlarge", "g5.xlarge"]},
            r"instance_types\[1\]='g5.xlarge' cannot run .* built for arm64",
        ),
        (  # the first entry is not instance_type
            {**G5, "instance_types": ["g6.xlarge", "g5.xlarge"]},
            r"instance_types\[0\]='g6.xlarge' is not allowed; allowed: the fleet's instance_type 'g5.xlarge'",
        ),
        (  # two lists
            {**G5, "instance_types": ["g5.xlarge", "g6.xlarge"], "spot": {"instance_types": ["g6.xlarge"]}},
            r"are both set; allowed: one list of types, instance_types",
        ),
        (  # EFA cards
            {**P5, "instance_types": ["p5.48xlarge", "p5en.48xlarge"]},
            r"instance_types\[\]='p5en.48xlarge' is not allowed; allowed: types with 32 EFA interface\(s\)",
        ),
        (  # a ceiling without a list
            {**G5, "max_cost_ratio": 1.5},
            r"max_cost_ratio=1.5 is not allowed; allowed: null without instance_types",
        ),
    ],
)
def test_fallback_refusals(group: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config([group])


def test_the_cost_ceiling_is_priced_in_the_environment_region() -> None:
    group = {**G5, "instance_types": ["g5.xlarge", "g5.2xlarge"], "max_cost_ratio": 1.1}
    with pytest.raises(ConfigError, match=r"'g5.2xlarge' x 1 costs \$1.21/hour, 1.20 x the first choice"):
        _config([group])
    _config([{**group, "max_cost_ratio": 1.25}])


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({**G5, "capacity_reservation": _reservation(id="cr-1")}, r"capacity_reservation.id='cr-1' is not allowed"),
        (
            {**G5, "capacity_reservation": _reservation(instance_type="g6.xlarge")},
            r"capacity_reservation.instance_type='g6.xlarge' is not allowed; allowed: the fleet's instance_type",
        ),
        (
            {**G5, "capacity_reservation": {"id": CR, "instance_type": "g5.xlarge"}},
            r"capacity_reservation.availability_zone: Field required",
        ),
        (
            {**G5, "instance_types": ["g5.xlarge", "g6.xlarge"], "capacity_reservation": _reservation()},
            r"capacity_reservation \(targeted\) with a fallback list",
        ),
        (
            {**G5, "spot": {}, "capacity_reservation": _reservation()},
            r"capacity_reservation \(targeted\) with a spot mix",
        ),
        (
            {**G5, "min_capacity": 1, "max_capacity": 2, "capacity_reservation": _reservation(instance_count=0)},
            r"capacity_reservation.instance_count=0 is not allowed; allowed: a whole number >= 1",
        ),
        (
            {**G5, "capacity_reservation": _reservation(capacity_block=True)},
            r"allowed: a type Capacity Blocks sell: p4d.24xlarge, p5.48xlarge",
        ),
        (
            {
                **P5,
                "min_capacity": 1,
                "capacity_reservation": _reservation(instance_type="p5.48xlarge", capacity_block=True),
            },
            r"min_capacity/desired_capacity=\(1, None\) is not allowed; allowed: 0 with a Capacity Block",
        ),
        (
            {
                **P5,
                "placement_group": True,
                "availability_zone": "us-east-1a",
                "capacity_reservation": _reservation(instance_type="p5.48xlarge"),
            },
            r"availability_zone='us-east-1a' is not allowed; allowed: the reservation's zone 'us-east-1b'",
        ),
        (
            {**G5, "capacity_reservation": _reservation(availability_zone="us-east-1c")},
            r"capacity_reservation.availability_zone='us-east-1c' is not allowed; allowed: a configured AZ",
        ),
    ],
)
def test_reservation_refusals(group: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config([group])


def test_a_reservation_in_another_zone_than_the_lustre_file_system_is_refused() -> None:
    group = {**G5, "mount_lustre": True, "capacity_reservation": _reservation()}
    lustre = {"lustre": {"enabled": True}}  # in the first zone, us-east-1a
    with pytest.raises(ConfigError, match=r"allowed: the FSx for Lustre file system's zone us-east-1a"):
        _config([group], file_systems=lustre)
    _config([{**group, "mount_lustre": False}], file_systems=lustre)


def test_preflight_checks_the_offering_in_the_reservation_zone() -> None:
    from gpuctl.commands.preflight import compute_needs

    needs = compute_needs(_config([{**G5, "capacity_reservation": _reservation()}]))
    assert {(o.instance_type, o.zone) for o in needs.offerings} == {("g5.xlarge", "us-east-1b")}
