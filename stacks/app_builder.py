"""Builds the CDK app for one environment: config -> stacks -> cdk-nag packs.

``app.py`` and the tests both call :func:`build_app`, so what is tested is what is deployed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks

from gpu_constructs.rules import GpuPlatformChecks
from stacks.config import DEFAULT_ENV, load_config
from stacks.context import StackContext
from stacks.gitops_stack import check_one_oidc_provider_per_account
from stacks.pipeline_stack import PipelineStack, pipeline_stack_name
from stacks.platform_stacks import PlatformStacks, build_platform_stacks

__all__ = [
    "NAG_PACKS",
    "PlatformApp",
    "PlatformStacks",
    "add_nag_packs",
    "build_app",
    "build_platform_stacks",
    "cdk_json_context",
]

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"

#: The four standard cdk-nag packs and the platform's own pack (AWS behaviour the standard packs do not model).
NAG_PACKS = (AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks, GpuPlatformChecks)


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
        pipeline = PipelineStack(
            app,
            pipeline_stack_name(config.resource_prefix),
            context=StackContext.from_config(config),
            pipeline=config.pipeline,
            props=cdk.StackProps(
                description=f"GPU platform ({config.env_name}): self-mutating CDK pipeline from git",
                termination_protection=config.termination_protection,
            ),
        )
        if platform.gitops is not None:  # the runner's `cdk diff --all` reads the support stacks itself
            platform.gitops.allow_template_reads(pipeline.support_stacks)
    check_one_oidc_provider_per_account(app)  # IAM: one OIDC provider per URL per account
    if nag:
        add_nag_packs(app)
    return PlatformApp(app=app, pipeline=pipeline, **{f.name: getattr(platform, f.name) for f in fields(platform)})
