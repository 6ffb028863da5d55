"""One environment (:class:`EnvConfig`): the top level of ``config/<env>.yaml`` and the rules across sections."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from stacks.config._base import AccountId, Allowed, StrictModel, duplicates, known_regions
from stacks.config.budget import BudgetConfig
from stacks.config.data import DataConfig
from stacks.config.fleets import FleetsConfig
from stacks.config.gitops import GitOpsConfig
from stacks.config.images import ImagesConfig, ImageSpec, image_cuda_version, inference_runtime
from stacks.config.inference import InferenceConfig
from stacks.config.network import NetworkConfig
from stacks.config.pipeline import PipelineConfig
from stacks.config.storage import FileSystemsConfig
from stacks.config.training import TrainingConfig


def check_training_image_cuda(image: ImageSpec, training: TrainingConfig) -> None:
    """The training image's CUDA must drive the GPU of ``training.instance_type`` and of every allowed type, checked
    here so that a mismatch is a config error before any construct is built (the catalog's CUDA support windows)."""
    from gpu_constructs.catalog import cuda_support_problem

    version = image_cuda_version(image, "training")
    if version is None:
        return
    source = f"images.training (kind {image.kind}, CUDA {version})"
    for key, instance_type in (
        ("training.instance_type", training.instance_type),
        *(("training.allowed_instance_types", t) for t in training.allowed_instance_types or ()),
    ):
        problem = cuda_support_problem(instance_type, version)
        if problem is not None:
            raise ValueError(
                f"{key}: {instance_type!r} cannot run {source}: {problem}; change the instance type or the image"
            )


class EnvConfig(StrictModel):
    """One deployment environment."""

    env_name: str = Field(description="Environment name; must equal the file name (dev for dev.yaml)")
    account: AccountId | None = Field(
        None, description="12-digit AWS account id; null keeps templates account-agnostic (dev)"
    )
    region: str = Field(description="AWS region, e.g. us-east-1; must be a region AWS publishes")
    availability_zones: tuple[str, ...] = Field(
        description="AZs to use (1-6), each in the region (e.g. us-east-1a); nothing is looked up at synth"
    )
    removal_policy: Literal["destroy", "retain"] = Field(
        "retain",
        description="What happens to stateful resources when removed from the stack (retain in prod)",
    )
    termination_protection: bool = Field(False, description="CloudFormation termination protection")
    resource_prefix: Annotated[
        str,
        Field(pattern=r"^[a-z][a-z0-9-]{0,11}$"),
        Allowed(message="must match [a-z][a-z0-9-]{0,11} (used in job and endpoint names)"),
    ] = Field(
        "gpu", description="Prefix of named resources and stacks; lowercase, 1-12 chars; unique among config/*.yaml"
    )
    tags: dict[str, str] = Field(default_factory=dict, description="Tags applied to every resource")
    network: NetworkConfig = Field(default_factory=lambda: NetworkConfig())
    data: DataConfig = Field(default_factory=lambda: DataConfig())
    file_systems: FileSystemsConfig = Field(default_factory=lambda: FileSystemsConfig())
    images: ImagesConfig = Field(default_factory=lambda: ImagesConfig())
    training: TrainingConfig = Field(default_factory=lambda: TrainingConfig())
    fleets: FleetsConfig = Field(default_factory=lambda: FleetsConfig())
    inference: InferenceConfig = Field(default_factory=lambda: InferenceConfig())
    gitops: GitOpsConfig = Field(default_factory=lambda: GitOpsConfig())
    pipeline: PipelineConfig | None = Field(
        None, description="Self-mutating CodePipeline that tests and deploys the stages from git; null: none"
    )
    budget: BudgetConfig | None = Field(
        None, description="Monthly AWS Budgets cost budget on the environment's tags, with alerts; null: none"
    )

    @model_validator(mode="after")
    def _budget_tags(self) -> EnvConfig:
        """The budget counts the costs of resources that carry the environment's ``tags``: it needs some."""
        if self.budget is not None and not self.tags:
            raise ValueError(
                "budget: needs the environment's `tags` (the budget filters costs on them); allowed: a budget with "
                "at least one tag, e.g. tags: {project: gpu-platform, environment: dev}"
            )
        from gpu_constructs.budgets.limits import check_budget

        if self.budget is not None:
            problems = check_budget(**self.budget.budget_props(self.tags))
            if problems:
                raise ValueError(f"budget: {'; '.join(problems)}")
        return self

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        regions = known_regions()
        if value not in regions:
            import difflib

            close = difflib.get_close_matches(value, sorted(regions), n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ValueError(f"unknown AWS region; {hint}allowed: {', '.join(sorted(regions))}")
        return value

    @model_validator(mode="after")
    def _azs(self) -> EnvConfig:
        azs = self.availability_zones
        if not 1 <= len(azs) <= 6:
            raise ValueError(f"availability_zones: {list(azs)} must list 1 to 6 zones")
        dupes = duplicates(azs)
        if dupes:
            raise ValueError(f"availability_zones: duplicate zone(s) {dupes}; list each zone once")
        pattern = re.compile(re.escape(self.region) + r"[a-z]")
        outside = [az for az in azs if not pattern.fullmatch(az)]
        if outside:
            raise ValueError(
                f"availability_zones: {outside} not in region {self.region}; "
                f"allowed: zones named {self.region}a, {self.region}b, ..."
            )
        net = self.network
        if net.nat_gateways > len(azs):
            raise ValueError(
                f"network.nat_gateways: {net.nat_gateways} exceeds the {len(azs)} configured AZs; "
                f"allowed: 0..{len(azs)}"
            )
        groups = 3 + (1 if net.nat_gateways else 0)  # training, endpoints, fleets (+ public for NAT)
        needed = groups * len(azs)
        vpc = ipaddress.IPv4Network(net.vpc_cidr)
        capacity = 2 ** (net.subnet_cidr_mask - vpc.prefixlen)
        if needed > capacity:
            raise ValueError(
                f"network.vpc_cidr: {net.vpc_cidr} is too small for {needed} subnets of "
                f"/{net.subnet_cidr_mask} ({groups} groups x {len(azs)} AZs) — it holds {capacity}; "
                "use a larger VPC or a longer subnet_cidr_mask"
            )
        return self

    @model_validator(mode="after")
    def _dlc_batching(self) -> EnvConfig:
        if inference_runtime(self.images.inference.kind) != "torchserve":
            return self
        from gpu_constructs.dlc import dlc_batching_problem

        for key, endpoint in sorted(self.inference.endpoints.items()):
            problem = dlc_batching_problem(endpoint.batching.max_batch_size) if endpoint.batching else None
            if problem is not None:
                raise ValueError(f"inference.endpoints.{key}.batching.{problem} (images.inference.kind is 'dlc')")
        return self

    @model_validator(mode="after")
    def _gpu_serve_environment(self) -> EnvConfig:
        """Endpoints of an image that runs gpu_serve: its variables in ``environment`` (and those batching sets)
        are read here by the server's own parser, so a value it would refuse at start fails the synth instead
        of the endpoint's health check, minutes into a deploy."""
        if inference_runtime(self.images.inference.kind) != "gpu_serve":
            return self
        from gpu_constructs.endpoint.batching import GPU_SERVE_BATCHING_ENV
        from gpu_serve.config import ENV_VARS, ServeConfig
        from gpu_serve.errors import ConfigError as ServeConfigError

        for key, endpoint in sorted(self.inference.endpoints.items()):
            where = f"inference.endpoints.{key}.environment"
            env = dict(endpoint.environment)
            if endpoint.batching is not None:
                env.update(endpoint.batching.batching(GPU_SERVE_BATCHING_ENV).environment())
            unknown = sorted(k for k in env if k.startswith("GPU_SERVE_") and k not in ENV_VARS)
            if unknown:
                known = ", ".join(sorted(k for k in ENV_VARS if k.startswith("GPU_SERVE_")))
                raise ValueError(f"{where}: {unknown} are not gpu_serve variables; allowed: {known}")
            try:
                ServeConfig.from_env(env)
            except ServeConfigError as exc:
                raise ValueError(
                    f"{where}: {exc} (images.inference.kind is {self.images.inference.kind!r}: the image runs "
                    "gpu_serve, which would refuse to start)"
                ) from None
        return self

    @model_validator(mode="after")
    def _pipeline_account(self) -> EnvConfig:
        if self.pipeline is not None and self.pipeline.account is None and self.account is None:
            raise ValueError(
                "pipeline.account: null needs account to be set; allowed: the 12-digit account id of the pipeline "
                "(CodePipeline deploys across regions and accounts only from a known account)"
            )
        return self

    @model_validator(mode="after")
    def _fleet_capacity(self) -> EnvConfig:
        lustre = self.file_systems.lustre
        lustre_zone = (lustre.availability_zone or self.availability_zones[0]) if lustre.enabled else None
        self.fleets.check_environment(self.region, self.availability_zones, lustre_zone)
        return self

    @model_validator(mode="after")
    def _training_image_drives_the_gpu(self) -> EnvConfig:
        if self.training.enabled:
            check_training_image_cuda(self.images.training, self.training)
            self.training.check_fallback(
                cuda_version=image_cuda_version(self.images.training, "training"), region=self.region
            )
        return self

    @model_validator(mode="after")
    def _endpoint_pools_drive_the_gpu(self) -> EnvConfig:
        """Every endpoint's instance pools with the inference image's CUDA and the region's prices."""
        if self.inference.enabled:
            image = self.images.inference
            version = image_cuda_version(image, "inference")
            source = f"images.inference: kind {image.kind}, CUDA {version or 'unknown'}"
            self.inference.check_pools(cuda_version=version, image=source, region=self.region)
        return self

    @property
    def is_production(self) -> bool:
        return self.removal_policy == "retain" and self.termination_protection
