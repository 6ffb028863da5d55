"""A pinned, dated table of AWS on-demand list prices for the cost estimate and the fallback cost ceiling.

What it holds (USD, on-demand, no Savings Plans, no spot, no tax):

* instance-hours per use (:func:`hourly_price`): SageMaker ``training``, ``hosting`` (real-time and
  asynchronous inference), ``notebook`` and ``processing`` (``ml.*`` names), and plain ``ec2`` (no prefix);
* FSx for Lustre storage per GB-month by deployment type and throughput tier (:func:`fsx_lustre_gib_month`);
* NAT gateway hour and GB processed (:data:`NAT_GATEWAY_HOUR`, :data:`NAT_GATEWAY_PER_GB`);
* interface VPC endpoints (AWS PrivateLink) per hour per Availability Zone (:data:`INTERFACE_ENDPOINT_HOUR_PER_AZ`)
  and per GB processed; gateway endpoints (S3, DynamoDB) are free (:data:`GATEWAY_ENDPOINT_HOUR`).

Out of scope: S3 (storage, requests and transfer are usage-based, not provisioned), EBS and ML storage
volumes, CloudWatch, KMS requests, data transfer. The estimate built on this table is a floor of the bill.

Regions. Prices are recorded for ``us-east-1`` and ``us-west-2`` (the regions the configs use). For every
entry here the two regions have the same list price (AWS prices N. Virginia and Oregon alike for these
GPU families, FSx for Lustre, NAT gateways and PrivateLink); the table relies on that and stores one value
for both. Any other region returns ``None`` ("unknown"), never a guess.

Sources (:data:`PRICE_SOURCES`): the AWS pricing pages below, which render their tables from the AWS Price
List (``https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/<service>/current/<region>/index.json``).
A figure is recorded only where it could be read and cross-checked; a type whose price could not be
verified is left out, so :func:`hourly_price` returns ``None`` for it and callers say "price unknown"
instead of inventing one. In particular the SageMaker prices of ``ml.p4de.24xlarge``, ``ml.p5.48xlarge``
and ``ml.g6.xlarge`` and the SageMaker *training* prices of G6e are not recorded (the public figures
disagree); add them from the SageMaker pricing page when needed.

Refresh: re-read the pages, update the tables and :data:`PRICES_AS_OF`. A test
(``tests/constructs/catalog/test_pricing.py``) fails once the table is more than 365 days old.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from types import MappingProxyType

from gpu_constructs.catalog.data import CATALOG
from gpu_constructs.catalog.types import ALL_USAGES, Usage
from gpu_constructs.errors import ValidationError

__all__ = [
    "GATEWAY_ENDPOINT_HOUR",
    "HOURS_PER_MONTH",
    "INTERFACE_ENDPOINT_HOUR_PER_AZ",
    "INTERFACE_ENDPOINT_PER_GB",
    "NAT_GATEWAY_HOUR",
    "NAT_GATEWAY_PER_GB",
    "PRICED_REGIONS",
    "PRICES_AS_OF",
    "PRICE_SOURCES",
    "PRICE_TABLE_FILE",
    "fsx_lustre_gib_month",
    "hourly_price",
    "priced_instance_types",
]

#: The day the prices below were read from the sources.
PRICES_AS_OF: datetime.date = datetime.date(2026, 11, 28)

#: This module, named in "refresh the price table" messages.
PRICE_TABLE_FILE = "constructs/gpu_constructs/catalog/pricing.py"

#: What -> where it was read.
PRICE_SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "SageMaker AI instances (training, real-time/async hosting, notebook, processing)": (
            "https://aws.amazon.com/sagemaker/pricing/"
        ),
        "EC2 On-Demand instances": "https://aws.amazon.com/ec2/pricing/on-demand/",
        "FSx for Lustre storage": "https://aws.amazon.com/fsx/lustre/pricing/",
        "NAT gateway": "https://aws.amazon.com/vpc/pricing/",
        "Interface VPC endpoints (AWS PrivateLink)": "https://aws.amazon.com/privatelink/pricing/",
        "Gateway VPC endpoints (S3, DynamoDB): no charge": "https://aws.amazon.com/privatelink/pricing/",
        "Price List files the pages render": "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/index.json",
    }
)

#: Hours in a month for always-on estimates (8,760 hours a year / 12), as AWS's own pricing examples use.
HOURS_PER_MONTH = 730

#: Regions whose prices the table records (one value serves both; see the module docstring).
PRICED_REGIONS: tuple[str, ...] = ("us-east-1", "us-west-2")

# --------------------------------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------------------------------

_SM_ALL = ("training", "hosting", "notebook", "processing")
_SM_TRAIN_HOST = ("training", "hosting")


def _rows(uses: tuple[str, ...], prices: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """``(use, name) -> price`` for each use the API accepts the type for (per the catalog's botocore enums)."""
    return {
        (use, name): price
        for name, price in prices.items()
        for use in uses
        if use in CATALOG[name.removeprefix("ml.")].sagemaker_uses
    }


# SageMaker AI on-demand, USD per instance-hour. SageMaker bills the same hourly rate for these types in
# training, real-time/asynchronous hosting, notebooks and processing unless a row says otherwise.
_SAGEMAKER: dict[tuple[str, str], float] = {
    **_rows(
        _SM_ALL,
        {
            "ml.g4dn.xlarge": 0.736,
            "ml.g5.xlarge": 1.408,
            "ml.g5.2xlarge": 1.515,
            "ml.g5.4xlarge": 2.03,
            "ml.g5.8xlarge": 3.06,
            "ml.g5.12xlarge": 7.09,
            "ml.g5.16xlarge": 5.12,
            "ml.g5.24xlarge": 10.18,
            "ml.g5.48xlarge": 20.36,
            "ml.g6.2xlarge": 1.222,
            "ml.g6.4xlarge": 1.654,
            "ml.g6.12xlarge": 5.752,
            "ml.m5.large": 0.115,
            "ml.m5.xlarge": 0.23,
            "ml.m5.2xlarge": 0.461,
            "ml.m5.4xlarge": 0.922,
            "ml.m5.12xlarge": 2.765,
        },
    ),
    # G6e (NVIDIA L40S): real-time/asynchronous inference rates.
    **_rows(("hosting",), {"ml.g6e.xlarge": 2.61, "ml.g6e.2xlarge": 2.80, "ml.g6e.12xlarge": 13.12}),
    # P4d (8x A100 40 GB): training and hosting.
    **_rows(_SM_TRAIN_HOST, {"ml.p4d.24xlarge": 37.688}),
}

# EC2 On-Demand, Linux, shared tenancy, USD per instance-hour. The P4d/P4de/P5 rates are those after AWS's
# June 2025 reduction of up to 45% for NVIDIA GPU instances.
_EC2: dict[str, float] = {
    "g4dn.xlarge": 0.526,
    "g4dn.2xlarge": 0.752,
    "g4dn.4xlarge": 1.204,
    "g4dn.8xlarge": 2.176,
    "g4dn.12xlarge": 3.912,
    "g4dn.16xlarge": 4.352,
    "g5.xlarge": 1.006,
    "g5.2xlarge": 1.212,
    "g5.4xlarge": 1.624,
    "g5.8xlarge": 2.448,
    "g5.12xlarge": 5.672,
    "g5.16xlarge": 4.096,
    "g5.24xlarge": 8.144,
    "g5.48xlarge": 16.288,
    "g6.xlarge": 0.8048,
    "g6.2xlarge": 0.9776,
    "g6.4xlarge": 1.3232,
    "g6.8xlarge": 2.0144,
    "g6.12xlarge": 4.6016,
    "g6.16xlarge": 3.3968,
    "g6.24xlarge": 6.6752,
    "g6.48xlarge": 13.3504,
    "g6e.xlarge": 1.861,
    "g6e.2xlarge": 2.24208,
    "g6e.4xlarge": 3.00424,
    "g6e.8xlarge": 4.52856,
    "g6e.12xlarge": 10.49264,
    "p4d.24xlarge": 21.957642,
    "p4de.24xlarge": 27.44705,
    "p5.48xlarge": 55.04,
}

_INSTANCE_PRICES: Mapping[tuple[str, str], float] = MappingProxyType(
    {**_SAGEMAKER, **{("ec2", name): price for name, price in _EC2.items()}}
)


def _check_region(region: str, where: str) -> None:
    if not isinstance(region, str) or not region.strip():
        raise ValidationError(where, f"region={region!r} is not a region name; allowed: e.g. 'us-east-1'")


def hourly_price(instance_type: str, usage: Usage, region: str = "us-east-1") -> float | None:
    """On-demand USD per instance-hour of ``instance_type`` for ``usage`` in ``region``; None when unknown.

    ``usage`` is one of training, hosting, notebook, processing (``ml.*`` names) or ec2 (plain names); an
    unknown use raises :class:`ValidationError`. A type, use or region the table does not record returns
    None (see the module docstring for what is left out and why).
    """
    where = "PriceTable"
    if usage not in ALL_USAGES:
        raise ValidationError(where, f"usage={usage!r} is not allowed; allowed: {', '.join(map(repr, ALL_USAGES))}")
    _check_region(region, where)
    if region not in PRICED_REGIONS:
        return None
    return _INSTANCE_PRICES.get((usage, instance_type.strip()))


def priced_instance_types(usage: Usage) -> list[str]:
    """The instance types the table has a price for, for ``usage`` (sorted)."""
    return sorted(name for use, name in _INSTANCE_PRICES if use == usage)


# --------------------------------------------------------------------------------------------------
# FSx for Lustre
# --------------------------------------------------------------------------------------------------

# USD per GB-month of storage capacity, by (deployment type, per-unit storage throughput in MB/s/TiB).
# Scratch types have no throughput setting (None). PERSISTENT_1 12/40 are HDD storage.
_FSX_LUSTRE: Mapping[tuple[str, int | None], float] = MappingProxyType(
    {
        ("SCRATCH_1", None): 0.140,
        ("SCRATCH_2", None): 0.140,
        ("PERSISTENT_1", 50): 0.145,
        ("PERSISTENT_1", 100): 0.210,
        ("PERSISTENT_1", 200): 0.290,
        ("PERSISTENT_1", 12): 0.025,
        ("PERSISTENT_1", 40): 0.083,
        ("PERSISTENT_2", 125): 0.145,
        ("PERSISTENT_2", 250): 0.210,
        ("PERSISTENT_2", 500): 0.340,
        ("PERSISTENT_2", 1000): 0.600,
    }
)


def fsx_lustre_gib_month(
    deployment_type: str, per_unit_storage_throughput: int | None = None, region: str = "us-east-1"
) -> float | None:
    """USD per GB-month of FSx for Lustre storage capacity; None when the table has no price.

    Scratch types take no throughput (it is ignored); persistent types need ``per_unit_storage_throughput``
    (MB/s/TiB). FSx bills the provisioned ``StorageCapacity`` (GiB) at this rate; the pricing page quotes
    "GB-month" for the same capacity unit. An unknown deployment type raises :class:`ValidationError`.
    """
    where = "PriceTable"
    kinds = sorted({kind for kind, _ in _FSX_LUSTRE})
    if deployment_type not in kinds:
        raise ValidationError(
            where, f"deployment_type={deployment_type!r} is not allowed; allowed: {', '.join(map(repr, kinds))}"
        )
    _check_region(region, where)
    if region not in PRICED_REGIONS:
        return None
    throughput = None if deployment_type.startswith("SCRATCH") else per_unit_storage_throughput
    return _FSX_LUSTRE.get((deployment_type, throughput))


# --------------------------------------------------------------------------------------------------
# Network
# --------------------------------------------------------------------------------------------------

#: NAT gateway: USD per hour each gateway is provisioned (us-east-1 and us-west-2).
NAT_GATEWAY_HOUR = 0.045
#: NAT gateway: USD per GB of data processed.
NAT_GATEWAY_PER_GB = 0.045
#: Interface VPC endpoint (AWS PrivateLink): USD per endpoint per Availability Zone per hour.
INTERFACE_ENDPOINT_HOUR_PER_AZ = 0.01
#: Interface VPC endpoint: USD per GB processed (first PB a month in the region).
INTERFACE_ENDPOINT_PER_GB = 0.01
#: Gateway VPC endpoints (S3, DynamoDB) cost nothing.
GATEWAY_ENDPOINT_HOUR = 0.0
