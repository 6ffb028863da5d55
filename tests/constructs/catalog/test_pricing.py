"""The dated price table: it is fresh, cites its sources, and returns the list prices it records."""

from __future__ import annotations

import datetime

import pytest

from gpu_constructs.catalog import ALL_USAGES, instance_types, lookup
from gpu_constructs.catalog.pricing import (
    GATEWAY_ENDPOINT_HOUR,
    HOURS_PER_MONTH,
    INTERFACE_ENDPOINT_HOUR_PER_AZ,
    NAT_GATEWAY_HOUR,
    NAT_GATEWAY_PER_GB,
    PRICE_SOURCES,
    PRICE_TABLE_FILE,
    PRICES_AS_OF,
    fsx_lustre_gib_month,
    hourly_price,
    priced_instance_types,
)
from gpu_constructs.errors import ValidationError

MAX_AGE_DAYS = 365


def test_price_table_is_less_than_a_year_old() -> None:
    age = (datetime.date.today() - PRICES_AS_OF).days
    sources = "; ".join(f"{what}: {url}" for what, url in PRICE_SOURCES.items())
    assert age <= MAX_AGE_DAYS, (
        f"the price table is {age} days old (PRICES_AS_OF={PRICES_AS_OF.isoformat()}, limit {MAX_AGE_DAYS}): "
        f"refresh the prices and PRICES_AS_OF in {PRICE_TABLE_FILE} from {sources}"
    )


def test_price_date_is_not_in_the_future() -> None:
    assert datetime.date.today() >= PRICES_AS_OF


def test_sources_are_aws_pricing_pages() -> None:
    urls = set(PRICE_SOURCES.values())
    assert {
        "https://aws.amazon.com/sagemaker/pricing/",
        "https://aws.amazon.com/ec2/pricing/on-demand/",
        "https://aws.amazon.com/fsx/lustre/pricing/",
        "https://aws.amazon.com/vpc/pricing/",
        "https://aws.amazon.com/privatelink/pricing/",
    } <= urls
    assert all(url.startswith("https://") for url in urls)


@pytest.mark.parametrize(
    ("name", "usage", "price"),
    [
        ("ml.g5.xlarge", "training", 1.408),
        ("ml.g5.xlarge", "hosting", 1.408),
        ("ml.g5.2xlarge", "hosting", 1.515),
        ("ml.g5.4xlarge", "notebook", 2.03),
        ("ml.g4dn.xlarge", "training", 0.736),
        ("ml.g6.2xlarge", "hosting", 1.222),
        ("ml.g6e.xlarge", "hosting", 2.61),
        ("ml.p4d.24xlarge", "training", 37.688),
        ("ml.m5.4xlarge", "processing", 0.922),
        ("ml.m5.12xlarge", "processing", 2.765),
        ("g5.xlarge", "ec2", 1.006),
        ("g5.2xlarge", "ec2", 1.212),
        ("g6.xlarge", "ec2", 0.8048),
        ("g6e.xlarge", "ec2", 1.861),
        ("p4d.24xlarge", "ec2", 21.957642),
        ("p5.48xlarge", "ec2", 55.04),
    ],
)
def test_recorded_prices(name: str, usage: str, price: float) -> None:
    assert hourly_price(name, usage, "us-east-1") == price  # type: ignore[arg-type]
    assert hourly_price(name, usage, "us-west-2") == price  # type: ignore[arg-type]


def test_unverified_types_and_other_regions_are_unknown_not_guessed() -> None:
    assert hourly_price("ml.p5.48xlarge", "training") is None
    assert hourly_price("ml.p4de.24xlarge", "training") is None
    assert hourly_price("ml.g6e.xlarge", "training") is None
    assert hourly_price("g5.xlarge", "ec2", "eu-west-1") is None
    # the ml. name is not an EC2 name and vice versa
    assert hourly_price("g5.xlarge", "hosting") is None
    assert hourly_price("ml.g5.xlarge", "ec2") is None


def test_bad_usage_and_region_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"usage='inference' is not allowed; allowed: 'training'"):
        hourly_price("ml.g5.xlarge", "inference")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="region='' is not a region name"):
        hourly_price("ml.g5.xlarge", "hosting", "")


def test_every_priced_type_is_in_the_catalog_and_valid_for_its_use() -> None:
    for usage in ALL_USAGES:
        for name in priced_instance_types(usage):
            it = lookup(name)
            assert it.valid_for(usage), (name, usage)
            assert it.name_for(usage) == name


def test_the_config_gpu_types_are_priced_for_ec2() -> None:
    for name in ("g5.xlarge", "g5.2xlarge", "g6.xlarge", "p5.48xlarge", "p4d.24xlarge"):
        assert hourly_price(name, "ec2") is not None
    priced = set(priced_instance_types("ec2"))
    common = {
        it.name
        for it in instance_types(usage="ec2", nvidia_only=True)
        if it.family in {"g5", "g6e"} and it.size in {"xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge"}
    }
    assert common <= priced


def test_fsx_lustre_prices() -> None:
    assert fsx_lustre_gib_month("SCRATCH_2") == 0.140
    assert fsx_lustre_gib_month("SCRATCH_2", 200) == 0.140  # scratch has no throughput tier
    assert fsx_lustre_gib_month("PERSISTENT_2", 125) == 0.145
    assert fsx_lustre_gib_month("PERSISTENT_2", 1000) == 0.600
    assert fsx_lustre_gib_month("PERSISTENT_1", 200, "us-west-2") == 0.290
    assert fsx_lustre_gib_month("PERSISTENT_2", 125, "ap-south-1") is None
    assert fsx_lustre_gib_month("PERSISTENT_2", 300) is None  # no such tier priced
    # 1,200 GiB of SCRATCH_2 for a month
    assert round(1200 * fsx_lustre_gib_month("SCRATCH_2"), 2) == 168.00  # type: ignore[operator]
    with pytest.raises(ValidationError, match="deployment_type='SCRATCH_3' is not allowed; allowed: 'PERSISTENT_1'"):
        fsx_lustre_gib_month("SCRATCH_3")


def test_network_prices() -> None:
    assert NAT_GATEWAY_HOUR == 0.045
    assert NAT_GATEWAY_PER_GB == 0.045
    assert INTERFACE_ENDPOINT_HOUR_PER_AZ == 0.01
    assert GATEWAY_ENDPOINT_HOUR == 0.0
    assert HOURS_PER_MONTH == 730
    # one NAT gateway always on: $32.85 a month
    assert round(NAT_GATEWAY_HOUR * HOURS_PER_MONTH, 2) == 32.85
