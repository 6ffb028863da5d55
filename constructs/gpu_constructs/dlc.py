"""PyTorch AWS Deep Learning Container (DLC) images for SageMaker, resolved offline.

Registry accounts, repositories, Python versions and per-version regions come from the SageMaker Python
SDK's ``sagemaker.core.image_uris`` configuration (``image_uri_config/pytorch.json``, sagemaker-core 2.27);
:func:`dlc_table_from_sdk` reads them from an installed SDK (imported lazily) and a test compares this table
with it whenever the SDK is installed. CUDA tags and OS come from the DLC build specs
(aws/deep-learning-containers, ``pytorch/{training,inference}/buildspec-2-*-sm.yml``: the GPU image's
``cuda_version`` and ``os_version``). Importing this module does not load the CDK.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from gpu_constructs.catalog.cuda import parse_cuda_version
from gpu_constructs.errors import ValidationError, fail

__all__ = [
    "DLC_ACCOUNTS",
    "DLC_IMAGES",
    "IMAGE_USAGES",
    "TORCHSERVE_BATCH_SIZE_ENV",
    "TORCHSERVE_MAX_BATCH_DELAY_ENV",
    "TORCHSERVE_SAFE_BATCH_SIZE",
    "DlcImage",
    "ImageUsage",
    "dlc_batching_problem",
    "dlc_image_uri",
    "dlc_table_from_sdk",
    "dlc_versions",
    "is_pytorch_inference_dlc",
    "partition_of",
    "resolve_dlc",
]

ImageUsage = Literal["training", "inference"]
IMAGE_USAGES: tuple[ImageUsage, ...] = get_args(ImageUsage)

# --------------------------------------------------------------------------------------------------
# DLC table (offline). Regenerate the account/region/Python part with dlc_table_from_sdk().
# --------------------------------------------------------------------------------------------------

#: DLC registry account per region (PyTorch 2.x, training and inference).
DLC_ACCOUNTS: dict[str, str] = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-south-2": "772153158452",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": "763104351884",
    "eu-central-2": "380420809688",
    "eu-isoe-west-1": "371248457586",
    "eu-north-1": "763104351884",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "eusc-de-east-1": "204133271717",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "me-west-1": "124382933778",
    "mx-central-1": "637423239942",
    "sa-east-1": "763104351884",
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-gov-east-1": "446045086412",
    "us-gov-west-1": "442386744353",
    "us-iso-east-1": "886529160074",
    "us-isob-east-1": "094389454867",
    "us-isof-east-1": "303241398832",
    "us-isof-south-1": "454834333376",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
}

_NOT_IN_ISO = (
    "eu-isoe-west-1",
    "eusc-de-east-1",
    "us-iso-east-1",
    "us-isob-east-1",
    "us-isof-east-1",
    "us-isof-south-1",
)


@dataclass(frozen=True)
class DlcImage:
    """One PyTorch SageMaker DLC GPU image: ``<version>-gpu-<python>-<cuda>-<os>-sagemaker``."""

    usage: ImageUsage
    version: str
    python: str
    cuda: str  # tag form, e.g. cu128
    os: str
    #: Regions of DLC_ACCOUNTS where this version is not published.
    missing_regions: tuple[str, ...] = ()

    @property
    def repository(self) -> str:
        return f"pytorch-{self.usage}"

    @property
    def tag(self) -> str:
        return f"{self.version}-gpu-{self.python}-{self.cuda}-{self.os}-sagemaker"

    @property
    def cuda_version(self) -> str:
        return str(parse_cuda_version(self.cuda))

    def regions(self) -> list[str]:
        return sorted(r for r in DLC_ACCOUNTS if r not in self.missing_regions)


def _dlc(usage: ImageUsage, version: str, python: str, cuda: str, missing: Sequence[str]) -> DlcImage:
    return DlcImage(usage, version, python, cuda, "ubuntu22.04", tuple(sorted(missing)))


#: PyTorch SageMaker DLC GPU images with a verified CUDA tag, keyed by (usage, full version).
DLC_IMAGES: dict[tuple[ImageUsage, str], DlcImage] = {
    (i.usage, i.version): i
    for i in (
        _dlc("training", "2.5.1", "py311", "cu124", (*_NOT_IN_ISO, "me-west-1")),
        _dlc("training", "2.6.0", "py312", "cu126", (*_NOT_IN_ISO, "me-west-1")),
        _dlc("training", "2.7.1", "py312", "cu128", (*_NOT_IN_ISO, "me-west-1")),
        _dlc("training", "2.8.0", "py312", "cu129", _NOT_IN_ISO),
        _dlc("training", "2.9.0", "py312", "cu130", ()),
        _dlc("training", "2.10.0", "py313", "cu130", ()),
        _dlc("inference", "2.5.1", "py311", "cu124", (*_NOT_IN_ISO, "me-west-1")),
        _dlc("inference", "2.6.0", "py312", "cu124", _NOT_IN_ISO),
    )
}


def dlc_versions(usage: ImageUsage) -> list[str]:
    return sorted((v for u, v in DLC_IMAGES if u == usage), key=lambda v: tuple(int(p) for p in v.split(".")))


def resolve_dlc(
    framework_version: str,
    usage: ImageUsage,
    *,
    python: str | None = None,
    cuda: str | None = None,
    region: str | None,
    where: str = "dlc",
) -> DlcImage:
    """The DLC image for ``framework_version`` (``2.8`` or ``2.8.0``), checked against the table.

    ``region=None`` skips the region check (the config model does not know where it deploys).
    """
    if usage not in IMAGE_USAGES:
        raise fail(where, "usage", usage, ", ".join(IMAGE_USAGES))
    known = dlc_versions(usage)
    full = next(
        (v for v in reversed(known) if v == framework_version or v.rsplit(".", 1)[0] == framework_version), None
    )
    if full is None:
        raise fail(where, "framework_version", framework_version, f"a PyTorch {usage} DLC version: {', '.join(known)}")
    image = DLC_IMAGES[(usage, full)]
    if python is not None and python != image.python:
        raise fail(where, "python", python, f"{image.python!r} for PyTorch {full} {usage}")
    if cuda is not None:
        try:
            wanted = parse_cuda_version(cuda)
        except ValueError as exc:
            raise ValidationError(where, str(exc)) from None
        if wanted != parse_cuda_version(image.cuda):
            raise fail(where, "cuda", cuda, f"{image.cuda!r} (CUDA {image.cuda_version}) for PyTorch {full} {usage}")
    if region is not None and (region not in DLC_ACCOUNTS or region in image.missing_regions):
        raise fail(
            where, "region", region, f"a region where PyTorch {full} {usage} DLCs exist: {', '.join(image.regions())}"
        )
    return image


@functools.cache
def _partitions() -> list[dict[str, Any]]:
    import botocore.loaders

    return list(botocore.loaders.create_loader().load_data("endpoints")["partitions"])


def partition_of(region: str) -> tuple[str, str]:
    """(partition name, DNS suffix) of ``region`` from botocore's bundled endpoint data (no network)."""
    for part in _partitions():
        if region in part.get("regions", {}) or re.fullmatch(part["regionRegex"], region):
            return part["partition"], part["dnsSuffix"]
    raise ValueError(f"region={region!r} is in no known AWS partition")


def dlc_image_uri(image: DlcImage, region: str) -> str:
    _, suffix = partition_of(region)
    return f"{DLC_ACCOUNTS[region]}.dkr.ecr.{region}.{suffix}/{image.repository}:{image.tag}"


def dlc_table_from_sdk() -> dict[str, Any]:
    """Accounts, Python versions and per-version regions of the PyTorch 2.x DLCs, read from the SageMaker
    SDK's bundled configuration (imported lazily: the SDK is large and optional)."""
    import json
    from importlib import resources

    config = json.loads(resources.files("sagemaker.core.image_uri_config").joinpath("pytorch.json").read_text())
    accounts: dict[str, str] = {}
    versions: dict[str, dict[str, Any]] = {}
    for usage in IMAGE_USAGES:
        for version, entry in config[usage]["versions"].items():
            if not version.startswith("2."):
                continue
            accounts.update(entry["registries"])
            versions[f"{usage}/{version}"] = {
                "py_versions": list(entry["py_versions"]),
                "regions": sorted(entry["registries"]),
                "repository": entry["repository"],
            }
    return {"accounts": dict(sorted(accounts.items())), "versions": versions}


# --------------------------------------------------------------------------------------------------
# TorchServe batching on the PyTorch inference DLC (the one home of this rule)
# --------------------------------------------------------------------------------------------------

#: The variables through which the DLC's toolkit (sagemaker-pytorch-inference 2.0.25,
#: ``sagemaker_pytorch_serving_container/ts_parameters.py``) sets TorchServe's ``batchSize`` / ``maxBatchDelay``.
TORCHSERVE_BATCH_SIZE_ENV = "SAGEMAKER_TS_BATCH_SIZE"
TORCHSERVE_MAX_BATCH_DELAY_ENV = "SAGEMAKER_TS_MAX_BATCH_DELAY"
#: The largest TorchServe batch that is safe on the DLC's handler (its own default, ``DEFAULT_TS_BATCH_SIZE``).
TORCHSERVE_SAFE_BATCH_SIZE = 1

#: The model server an inference image runs. Its batching variables, log metrics and environment checks follow
#: from it (``gpu_constructs.endpoint.GpuEndpoint``, the inference stack and the config read it).
InferenceRuntime = Literal["gpu_serve", "torchserve"]


def inference_runtime(kind: str | None) -> InferenceRuntime:
    """The model server an inference image of ``kind`` (``GpuImage.kind``, the config's ``images.inference.kind``)
    runs: the stock DLC runs TorchServe (with the SageMaker PyTorch toolkit's handler); the platform's image, built
    (``codebuild``/``asset``) or pushed (``ecr``), runs gpu_serve."""
    return "torchserve" if kind == "dlc" else "gpu_serve"


#: ``<account>.dkr.ecr.<region>.<dns suffix>/pytorch-inference:<tag>`` (the account may be a template token).
_PYTORCH_INFERENCE_DLC = re.compile(
    r"^(?P<account>\d{12}|\$\{[^}]*\})\.dkr\.ecr\.(?:[a-z0-9-]+|\$\{[^}]*\})\.(?:[a-z0-9.]+|\$\{[^}]*\})"
    r"/pytorch-inference:(?P<tag>[^\s/]+)$"
)


def is_pytorch_inference_dlc(image_uri: str) -> bool:
    """True for an AWS PyTorch inference DLC URI (registry account of :data:`DLC_ACCOUNTS`, or a token there).

    Those images serve with TorchServe through the SageMaker inference toolkits.
    """
    match = _PYTORCH_INFERENCE_DLC.match(image_uri.strip())
    if match is None:
        return False
    account = match.group("account")
    return account.startswith("${") or account in set(DLC_ACCOUNTS.values())


def dlc_batching_problem(max_batch_size: int) -> str | None:
    """Why ``max_batch_size`` is unsafe on the PyTorch inference DLC (None when it is safe).

    The DLC's handler service (sagemaker-inference 1.10.1, ``Transformer.transform``) reads request 0's content
    type for the whole batch, runs ``predict_fn`` once per request (no batched forward pass) and answers a
    one-element list for an N-request batch on any error, which TorchServe turns into a failure of every request
    of the batch ("number of batch response mismatched"): one bad request fails its neighbours.
    """
    if max_batch_size <= TORCHSERVE_SAFE_BATCH_SIZE:
        return None
    return (
        f"max_batch_size={max_batch_size} is unsafe on the AWS PyTorch inference DLC: its TorchServe handler "
        "(sagemaker-inference toolkit) decodes every request of a batch with request 0's content type, runs "
        "predict_fn once per request (no batching gain) and fails the whole batch when one request fails; "
        f"allowed: {TORCHSERVE_SAFE_BATCH_SIZE} (or no batching). To batch, serve with the platform's inference "
        "image (GpuImage.from_codebuild/from_asset of containers/inference, the gpu_serve runtime), whose "
        "batcher decodes each request with its own content type and fails a bad request alone"
    )
