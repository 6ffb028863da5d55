"""Images built at deploy time reach the training and inference stacks through an SSM parameter.

An image built at deploy time gets a new tag with every change of its build context. Imported from the
images stack as a stack export, that tag could never change while another stack uses it (CloudFormation
refuses to update an export that another stack imports). Read from the parameter the images stack
publishes (``/<prefix>/images/<usage>``), a new image reaches its consumers on their next deployment.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

Usage = Literal["training", "inference"]


class Prefixed(Protocol):
    """Whatever names the environment's resources: a :class:`~stacks.context.StackContext` or an
    :class:`~stacks.config.EnvConfig` (tools that read the config without building stacks)."""

    @property
    def resource_prefix(self) -> str: ...


def image_uri_parameter_name(environment: Prefixed, usage: Usage = "inference") -> str:
    """The SSM parameter in which the images stack publishes the image URI of ``usage``."""
    return f"/{environment.resource_prefix}/images/{usage}"


class ImageFromParameter:
    """An image whose URI CloudFormation reads from an SSM parameter at each deployment.

    Everything else (usage, CUDA checks, pull grants) comes from the wrapped image.
    """

    def __init__(self, scope: Construct, image: Any, parameter_name: str) -> None:
        self._image = image
        self.image_uri: str = ssm.StringParameter.value_for_string_parameter(scope, parameter_name)
        self.usage = image.usage
        self.cuda_version = image.cuda_version
        self.kind = getattr(image, "kind", None)
        if hasattr(image, "runtime"):  # an image of the former protocol has none (endpoint.protocols.image_runtime)
            self.runtime = image.runtime
        self.parameter_name = parameter_name

    def require_usage(self, expected: Usage, where: str) -> Any:
        return self._image.require_usage(expected, where)

    def check_instance(self, instance_type: str, where: str) -> Any:
        return self._image.check_instance(instance_type, where)

    def grant_pull(self, grantee: iam.IGrantable) -> Any:
        return self._image.grant_pull(grantee)


def image_from_parameter(stack: Stack, image: Any, environment: Prefixed, usage: Usage) -> Any:
    """``image`` itself, or — for an image built at deploy time — the same image read from its parameter.

    The consuming ``stack`` then depends on the images stack (``Stack.add_stack_dependency``; ``add_dependency`` is its
    deprecated name), so the parameter exists before it deploys.
    """
    if getattr(image, "kind", None) != "codebuild":
        return image
    wrapped = ImageFromParameter(stack, image, image_uri_parameter_name(environment, usage))
    producer = getattr(image, "construct", None)
    if producer is not None and Stack.of(producer) is not stack:
        stack.add_stack_dependency(Stack.of(producer))
    return wrapped
