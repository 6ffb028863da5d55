"""The platform stacks of one environment, built in any scope: the app root (``make synth``) or a pipeline stage.

:func:`build_platform_stacks` is the one place that creates them, so a pipeline stage
(:class:`stacks.stage.PlatformStage`) deploys exactly the stacks that ``cdk deploy`` of the app manages.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from constructs import Construct

from stacks.config import EnvConfig
from stacks.context import StackContext
from stacks.data_stack import DataStack
from stacks.fleet_stack import FleetStack, fleets_stack_name
from stacks.gitops_stack import GitOpsStack
from stacks.images_stack import ImagesStack
from stacks.inference_stack import InferenceStack, inference_stack_name
from stacks.network_stack import NetworkStack, interface_endpoints
from stacks.storage_stack import StorageStack
from stacks.training_stack import TrainingStack, training_stack_name

#: What each stack of the platform holds: its description, after the environment's name.
_HOLDS: dict[type[cdk.Stack], str] = {
    NetworkStack: "private VPC, endpoints, flow logs",
    DataStack: "KMS keys, S3 buckets and the cost budget",
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
    everything under ``scope``. Each stack gets the :class:`~stacks.context.StackContext` built here once, its
    own config section(s) and the shared resources of the stacks it builds on.
    """
    context = StackContext.from_config(config)
    env = cdk.Environment(account=config.account, region=config.region)
    prefix = config.resource_prefix

    def props(cls: type[cdk.Stack], name: str) -> cdk.StackProps:
        """The props of one stack: its stack name is its construct id; its description names the environment."""
        return cdk.StackProps(
            env=env,
            stack_name=name,
            description=f"GPU platform ({config.env_name}): {_HOLDS[cls]}",
            termination_protection=config.termination_protection,
        )

    name = f"{prefix}-network"
    network = NetworkStack(
        scope,
        name,
        props=props(NetworkStack, name),
        context=context,
        network=config.network,
        interface_endpoints=interface_endpoints(config),
    )
    name = f"{prefix}-data"
    data = DataStack(scope, name, props=props(DataStack, name), context=context, data=config.data, budget=config.budget)
    # What the stacks that run workloads take from the network and data stacks.
    vpc, buckets = network.network, data.storage
    name = f"{prefix}-storage"
    storage = StorageStack(
        scope,
        name,
        props=props(StorageStack, name),
        context=context,
        file_systems=config.file_systems,
        network=vpc,
        storage=buckets,
    )
    name = f"{prefix}-images"
    images = ImagesStack(scope, name, props=props(ImagesStack, name), context=context, images=config.images)
    lustre = storage.lustre
    training = inference = fleets = gitops = None
    if config.training.enabled:
        name = training_stack_name(prefix)
        training = TrainingStack(
            scope,
            name,
            props=props(TrainingStack, name),
            context=context,
            training=config.training,
            image=images.training_image,
            lustre=lustre,
            network=vpc,
            storage=buckets,
        )
    if config.inference.enabled:
        name = inference_stack_name(prefix)
        inference = InferenceStack(
            scope,
            name,
            props=props(InferenceStack, name),
            context=context,
            inference=config.inference,
            image=images.inference_image,
            network=vpc,
            storage=buckets,
        )
    if config.fleets.enabled:
        name = fleets_stack_name(prefix)
        fleets = FleetStack(
            scope,
            name,
            props=props(FleetStack, name),
            context=context,
            fleets=config.fleets,
            lustre_mount_path=config.file_systems.lustre.mount_path,
            lustre=lustre,
            network=vpc,
            storage=buckets,
        )
    if config.gitops.oidc_deploy_role is not None or config.gitops.oidc_diff_role is not None:
        name = f"{prefix}-gitops"
        gitops = GitOpsStack(scope, name, props=props(GitOpsStack, name), context=context, gitops=config.gitops)
    for key, value in context.tags.items():
        cdk.Tags.of(scope).add(key, value)
    return PlatformStacks(config, network, data, storage, images, training, inference, fleets, gitops)
