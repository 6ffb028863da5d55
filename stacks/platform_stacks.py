"""The platform stacks of one environment, built in any scope: the app root (``make synth``) or a pipeline stage.

:func:`build_platform_stacks` is the one place that creates them, so a pipeline stage
(:class:`stacks.stage.PlatformStage`) deploys exactly the stacks that ``cdk deploy`` of the app manages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import aws_cdk as cdk
from constructs import Construct

from stacks.config import EnvConfig
from stacks.data_stack import DataStack
from stacks.fleet_stack import FleetStack, fleets_stack_name
from stacks.gitops_stack import GitOpsStack
from stacks.images_stack import ImagesStack
from stacks.inference_stack import InferenceStack, inference_stack_name
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack
from stacks.training_stack import TrainingStack, training_stack_name

_S = TypeVar("_S", bound=cdk.Stack)

#: What each stack of the platform holds: its description, after the environment's name.
_HOLDS: dict[type[cdk.Stack], str] = {
    NetworkStack: "private VPC, endpoints, flow logs",
    DataStack: "KMS keys and S3 buckets",
    StorageStack: "FSx for Lustre linked to the datasets bucket",
    ImagesStack: "training and inference container images",
    TrainingStack: "training pipeline, job roles, dashboard and alarms",
    InferenceStack: "SageMaker GPU endpoints, autoscaling, alarms, dashboards",
    FleetStack: "EC2 GPU fleets on Deep Learning AMIs, GPU notebooks",
    GitOpsStack: "OIDC deploy role for GitOps runners",
}


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


def build_platform_stacks(scope: Construct, config: EnvConfig) -> PlatformStacks:
    """Create the platform stacks of ``config`` in ``scope``: the app root (``make synth``) or a pipeline stage.

    Stack ids, stack names (``<resource_prefix>-<name>``) and the logical ids of stateful resources are the same
    in every scope, so a pipeline stage deploys the stacks ``cdk deploy`` manages; the config's tags go on
    everything under ``scope``.
    """
    env = cdk.Environment(account=config.account, region=config.region)
    prefix = config.resource_prefix
    common: dict[str, Any] = {"config": config, "env": env, "termination_protection": config.termination_protection}

    def stack(cls: type[_S], name: str, **props: Any) -> _S:
        """One stack of the platform: its construct id is its stack name; its description names the environment."""
        description = f"GPU platform ({config.env_name}): {_HOLDS[cls]}"
        return cls(scope, name, stack_name=name, description=description, **props, **common)

    def optional(enabled: bool, cls: type[_S], name: str, **props: Any) -> _S | None:
        """A stack the config may leave out: :func:`stack` where ``enabled``, else ``None``."""
        return stack(cls, name, **props) if enabled else None

    network = stack(NetworkStack, f"{prefix}-network")
    data = stack(DataStack, f"{prefix}-data")
    # What the stacks that run workloads take from the network and data stacks.
    shared: dict[str, Any] = {"network": network.network, "storage": data.storage}
    storage = stack(StorageStack, f"{prefix}-storage", **shared)
    images = stack(ImagesStack, f"{prefix}-images")
    lustre = storage.lustre
    training = optional(
        config.training.enabled,
        TrainingStack,
        training_stack_name(prefix),
        image=images.training_image,
        lustre=lustre,
        **shared,
    )
    inference = optional(
        config.inference.enabled, InferenceStack, inference_stack_name(prefix), image=images.inference_image, **shared
    )
    fleets = optional(config.fleets.enabled, FleetStack, fleets_stack_name(prefix), lustre=lustre, **shared)
    gitops = optional(
        config.gitops.oidc_deploy_role is not None or config.gitops.oidc_diff_role is not None,
        GitOpsStack,
        f"{prefix}-gitops",
        deploy=config.gitops.oidc_deploy_role,
        diff=config.gitops.oidc_diff_role,
    )
    for key, value in sorted(config.tags.items()):
        cdk.Tags.of(scope).add(key, value)
    return PlatformStacks(config, network, data, storage, images, training, inference, fleets, gitops)
