"""Builds the CDK app for one environment: config -> stacks -> cdk-nag packs.

``app.py`` and the tests both call :func:`build_app`, so what is tested is what is deployed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks
from constructs import Construct

from gpu_constructs.rules import GpuPlatformChecks
from stacks.config import DEFAULT_ENV, EnvConfig, load_config
from stacks.data_stack import DataStack
from stacks.fleet_stack import FleetStack, fleets_stack_name
from stacks.gitops_stack import GitOpsStack, check_one_oidc_provider_per_account
from stacks.images_stack import ImagesStack
from stacks.inference_stack import InferenceStack, inference_stack_name
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack
from stacks.training_stack import TrainingStack, training_stack_name

if TYPE_CHECKING:
    from stacks.pipeline_stack import PipelineStack

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"

#: The four standard cdk-nag packs and the platform's own pack (AWS behaviour the standard packs do not model).
NAG_PACKS = (AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks, GpuPlatformChecks)


@dataclass
class PlatformStacks:
    """The platform stacks of one environment, built by :func:`build_platform_stacks` in any scope."""

    config: EnvConfig
    network: NetworkStack
    data: DataStack
    storage: StorageStack
    images: ImagesStack
    training: TrainingStack | None = None
    inference: InferenceStack | None = None
    fleets: FleetStack | None = None
    gitops: GitOpsStack | None = None

    @property
    def stacks(self) -> list[cdk.Stack]:
        optional = [s for s in (self.training, self.inference, self.fleets, self.gitops) if s is not None]
        return [self.network, self.data, self.storage, self.images, *optional]


@dataclass(kw_only=True)
class PlatformApp(PlatformStacks):
    """The app of one environment: its platform stacks and, when configured, the GitOps pipeline."""

    app: cdk.App
    pipeline: PipelineStack | None = None

    @property
    def stacks(self) -> list[cdk.Stack]:
        return [*super().stacks, *([self.pipeline] if self.pipeline is not None else [])]


def cdk_json_context() -> dict[str, Any]:
    """The ``context`` block of cdk.json (feature flags)."""
    return dict(json.loads(CDK_JSON.read_text()).get("context", {}))


def add_nag_packs(app: cdk.App) -> None:
    """Register the four cdk-nag packs and the platform's pack (cdk-nag 3.x validation plugins) on ``app``."""
    cdk.Validations.of(app).add_plugins(*(pack(app) for pack in NAG_PACKS))


def build_platform_stacks(scope: Construct, config: EnvConfig) -> PlatformStacks:
    """Create the platform stacks of ``config`` in ``scope``: the app root (``make synth``) or a pipeline stage.

    Stack ids, stack names (``<resource_prefix>-<name>``) and the logical ids of stateful resources are the same
    in every scope, so a pipeline stage deploys the stacks ``cdk deploy`` manages; the config's tags go on
    everything under ``scope``.
    """
    env = cdk.Environment(account=config.account, region=config.region)
    prefix = config.resource_prefix
    common: dict[str, Any] = {
        "config": config,
        "env": env,
        "termination_protection": config.termination_protection,
    }
    network = NetworkStack(
        scope,
        f"{prefix}-network",
        stack_name=f"{prefix}-network",
        description=f"GPU platform ({config.env_name}): private VPC, endpoints, flow logs",
        **common,
    )
    data = DataStack(
        scope,
        f"{prefix}-data",
        stack_name=f"{prefix}-data",
        description=f"GPU platform ({config.env_name}): KMS keys and S3 buckets",
        **common,
    )
    storage = StorageStack(
        scope,
        f"{prefix}-storage",
        stack_name=f"{prefix}-storage",
        description=f"GPU platform ({config.env_name}): FSx for Lustre linked to the datasets bucket",
        network=network.network,
        storage=data.storage,
        **common,
    )
    images = ImagesStack(
        scope,
        f"{prefix}-images",
        stack_name=f"{prefix}-images",
        description=f"GPU platform ({config.env_name}): training and inference container images",
        **common,
    )
    training = None
    if config.training.enabled:
        training = TrainingStack(
            scope,
            training_stack_name(prefix),
            stack_name=training_stack_name(prefix),
            description=f"GPU platform ({config.env_name}): training pipeline, job roles, dashboard and alarms",
            network=network.network,
            storage=data.storage,
            image=images.training_image,
            lustre=storage.lustre,
            **common,
        )
    inference = None
    if config.inference.enabled:
        inference = InferenceStack(
            scope,
            inference_stack_name(prefix),
            stack_name=inference_stack_name(prefix),
            description=f"GPU platform ({config.env_name}): SageMaker GPU endpoints, autoscaling, alarms, dashboards",
            network=network.network,
            storage=data.storage,
            image=images.inference_image,
            **common,
        )
    fleets = None
    if config.fleets.enabled:
        fleets = FleetStack(
            scope,
            fleets_stack_name(prefix),
            stack_name=fleets_stack_name(prefix),
            description=f"GPU platform ({config.env_name}): EC2 GPU fleets on Deep Learning AMIs, GPU notebooks",
            network=network.network,
            storage=data.storage,
            lustre=storage.lustre,
            **common,
        )
    gitops = None
    if config.gitops.oidc_deploy_role is not None or config.gitops.oidc_diff_role is not None:
        gitops = GitOpsStack(
            scope,
            f"{prefix}-gitops",
            stack_name=f"{prefix}-gitops",
            description=f"GPU platform ({config.env_name}): OIDC deploy role for GitOps runners",
            deploy=config.gitops.oidc_deploy_role,
            diff=config.gitops.oidc_diff_role,
            **common,
        )
    for key, value in sorted(config.tags.items()):
        cdk.Tags.of(scope).add(key, value)
    return PlatformStacks(
        config=config,
        network=network,
        data=data,
        storage=storage,
        images=images,
        training=training,
        inference=inference,
        fleets=fleets,
        gitops=gitops,
    )


def build_app(
    env_name: str | None = None,
    *,
    nag: bool = True,
    outdir: str | None = None,
    context: dict[str, Any] | None = None,
) -> PlatformApp:
    """Build the app for ``env_name`` (default: the ``env`` context, else ``dev``).

    The config is loaded and validated first, so a bad file fails before any construct exists.
    """
    # Feature flags live in cdk.json. The CLI passes them to the app; a direct build (tests, other tools)
    # reads them here, so every way of building the app gives the same template.
    ctx: dict[str, Any] = {**cdk_json_context(), **(context or {})}
    app_kwargs: dict[str, Any] = {"context": ctx, "analytics_reporting": False}
    if outdir:
        app_kwargs["outdir"] = outdir
    app = cdk.App(**app_kwargs)
    name = env_name or app.node.try_get_context("env") or DEFAULT_ENV
    config = load_config(str(name))

    platform = build_platform_stacks(app, config)
    pipeline = None
    if config.pipeline is not None:
        from stacks.pipeline_stack import PipelineStack, pipeline_stack_name

        pipeline = PipelineStack(
            app,
            pipeline_stack_name(config.resource_prefix),
            description=f"GPU platform ({config.env_name}): self-mutating CDK pipeline from git",
            config=config,
            pipeline=config.pipeline,
            termination_protection=config.termination_protection,
        )
    check_one_oidc_provider_per_account(app)  # IAM: one OIDC provider per URL per account
    if nag:
        add_nag_packs(app)
    return PlatformApp(app=app, pipeline=pipeline, **{f.name: getattr(platform, f.name) for f in fields(platform)})
