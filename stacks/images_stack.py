"""The images stack: the training and inference images selected in config, published in SSM and outputs."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, StackProps
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from gpu_constructs.images import GpuImage, ImageUsage
from gpu_constructs.keys import new_key
from stacks.base import REPOSITORY_ROOT, PlatformStack
from stacks.config import ImagesConfig, ImageSpec
from stacks.context import StackContext
from stacks.image_parameter import image_uri_parameter_name


class ImagesStack(PlatformStack):
    """Two images per config: prebuilt DLCs (no resources but the SSM parameters), or images built at
    deploy time in CodeBuild into hardened ECR repositories, or local Docker assets, or existing ECR images.

    Each image URI is published as the SSM parameter ``/<prefix>/images/<use>`` and a stack output, so the
    CLI and pipelines find it without reading templates.

    :param images: the ``images`` section.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        images: ImagesConfig,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, props=props)
        self.key: kms.IKey | None = None
        if any(getattr(images, u).kind == "codebuild" for u in ("training", "inference")):
            self.key = new_key(
                self,
                "ImagesKey",
                description=f"Encrypts the GPU platform's container images and image builds ({context.env_name})",
                removal_policy=self.removal,
            )
        self.training_image = self._image("Training", "training", images.training, images)
        self.inference_image = self._image("Inference", "inference", images.inference, images)
        published: tuple[tuple[str, ImageUsage, GpuImage], ...] = (
            ("Training", "training", self.training_image),
            ("Inference", "inference", self.inference_image),
        )
        for cid, usage, image in published:
            ssm.StringParameter(
                self,
                f"{cid}ImageUri",
                parameter_name=image_uri_parameter_name(context, usage),
                string_value=image.image_uri,
                description=f"{usage} image ({image.kind}, CUDA {image.cuda_version or 'unknown'})",
            )
            CfnOutput(self, f"{cid}ImageUriOutput", value=image.image_uri)

    def _image(self, construct_id: str, usage: ImageUsage, spec: ImageSpec, images: ImagesConfig) -> GpuImage:
        if spec.kind == "dlc":
            return GpuImage.from_dlc(
                self,
                construct_id,
                framework_version=str(spec.framework_version),
                usage=usage,
                python=spec.python,
                cuda=spec.cuda,
            )
        # What a CodeBuild build and a local Docker asset both build from.
        source: dict[str, Any] = {
            "directory": REPOSITORY_ROOT / (spec.directory or f"containers/{usage}"),
            "usage": usage,
            "cuda_version": spec.cuda_version,
            "build_args": spec.build_args,
            "platform": spec.platform,
        }
        if spec.kind == "codebuild":
            return GpuImage.from_codebuild(
                self,
                construct_id,
                **source,
                encryption_key=self.key,
                removal_policy=self.removal,
                **images.codebuild_props(),
            )
        if spec.kind == "asset":
            return GpuImage.from_asset(self, construct_id, **source)
        repository = ecr.Repository.from_repository_name(self, f"{construct_id}Repository", str(spec.repository_name))
        return GpuImage.from_ecr_repository(repository, str(spec.tag), usage=usage, cuda_version=spec.cuda_version)
