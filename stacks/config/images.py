"""The ``images`` section: how the training and inference images reach ECR."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

# The model server of an inference image of a configured kind is the library's rule (``GpuImage.runtime`` follows
# it too), re-exported for the config's checks, which run before any image exists.
from gpu_constructs.dlc import InferenceRuntime as InferenceRuntime
from gpu_constructs.dlc import inference_runtime as inference_runtime
from stacks.config._base import Allowed, StrictModel

ImageKindName = Literal["dlc", "codebuild", "asset", "ecr"]
IMAGE_KINDS: tuple[str, ...] = get_args(ImageKindName)
_IMAGE_FIELDS: dict[str, tuple[str, ...]] = {
    "dlc": ("framework_version", "python", "cuda"),
    "codebuild": ("directory", "cuda_version", "build_args", "platform"),
    "asset": ("directory", "cuda_version", "build_args", "platform"),
    "ecr": ("repository_name", "tag", "cuda_version"),
}


class ImageSpec(StrictModel):
    """How one image reaches ECR: dlc | codebuild | asset | ecr, with that kind's options."""

    kind: ImageKindName = Field(
        "dlc", description="dlc (prebuilt AWS DLC), codebuild (built at deploy time), asset (local Docker), ecr"
    )
    framework_version: str | None = Field(None, description="dlc: PyTorch version, e.g. '2.8'")
    python: str | None = Field(None, description="dlc: Python tag, e.g. 'py312' (default: the version's)")
    cuda: str | None = Field(None, description="dlc: CUDA tag, e.g. 'cu129' (default: the version's)")
    directory: str | None = Field(
        None, description="codebuild/asset: build context relative to the repository root (default containers/<use>)"
    )
    cuda_version: str | None = Field(
        None, description="codebuild/asset/ecr: CUDA version of the image, e.g. '12.8' (required for builds)"
    )
    build_args: dict[str, str] = Field(default_factory=dict, description="codebuild/asset: Docker build args")
    platform: Literal["linux/amd64", "linux/arm64"] = Field("linux/amd64", description="codebuild/asset: platform")
    repository_name: str | None = Field(None, description="ecr: name of an existing repository in this account")
    tag: str | None = Field(None, description="ecr: image tag or digest (sha256:...)")

    @model_validator(mode="after")
    def _per_kind(self) -> ImageSpec:
        allowed = set(_IMAGE_FIELDS[self.kind]) | {"kind"}
        defaults = ImageSpec.model_construct()
        for name in type(self).model_fields:
            if name not in allowed and getattr(self, name) != getattr(defaults, name, None):
                users = [k for k, fields in _IMAGE_FIELDS.items() if name in fields]
                raise ValueError(f"{name} is not used by kind={self.kind!r}; it belongs to kind {', '.join(users)}")
        if self.kind == "dlc" and not self.framework_version:
            raise ValueError("kind='dlc' needs framework_version, e.g. '2.8'")
        if self.kind in ("codebuild", "asset") and not self.cuda_version:
            raise ValueError(
                f"kind={self.kind!r} needs cuda_version: the CUDA version of the Dockerfile's base image, e.g. '12.8'"
            )
        if self.kind == "ecr" and not (self.repository_name and self.tag):
            raise ValueError("kind='ecr' needs repository_name and tag")
        for name in ("cuda", "cuda_version"):
            value = getattr(self, name)
            if value is not None:
                from gpu_constructs.catalog.cuda import parse_cuda_version

                parse_cuda_version(value)
        if self.directory is not None and (self.directory.startswith("/") or ".." in self.directory):
            raise ValueError(f"directory: {self.directory!r} must be relative to the repository root, without '..'")
        return self


class ImagesConfig(StrictModel):
    """The training and inference images (images stack)."""

    training: ImageSpec = Field(default_factory=lambda: ImageSpec(kind="dlc", framework_version="2.8"))
    inference: ImageSpec = Field(default_factory=lambda: ImageSpec(kind="dlc", framework_version="2.6"))
    max_image_count: Annotated[int, Field(ge=1, le=1000), Allowed()] = Field(
        10, description="codebuild: images kept per repository (1-1000)"
    )
    untagged_image_expiry_days: Annotated[int, Field(ge=1, le=3650), Allowed("days")] = Field(
        7, description="codebuild: days before untagged images expire"
    )
    zstd_compression: bool = Field(False, description="codebuild: compress image layers with zstd")

    @model_validator(mode="after")
    def _dlc_versions(self) -> ImagesConfig:
        from gpu_constructs.dlc import resolve_dlc

        for usage in ("training", "inference"):
            spec: ImageSpec = getattr(self, usage)
            if spec.kind == "dlc":
                try:
                    resolve_dlc(
                        str(spec.framework_version), usage, python=spec.python, cuda=spec.cuda, region=None, where=usage
                    )
                except ValueError as exc:
                    raise ValueError(str(exc)) from None
        return self

    def codebuild_props(self) -> dict[str, Any]:
        """The keyword arguments of :meth:`~gpu_constructs.images.GpuImage.from_codebuild` this section sets for
        both images (the stack adds each image's source, the encryption key and the removal policy)."""
        from aws_cdk import Duration

        return {
            "zstd_compression": self.zstd_compression,
            "max_image_count": self.max_image_count,
            "untagged_image_expiry": Duration.days(self.untagged_image_expiry_days),
        }


def image_cuda_version(spec: ImageSpec, usage: Literal["training", "inference"]) -> str | None:
    """The CUDA version of a configured image: the DLC table's for ``dlc``, ``cuda_version`` otherwise (may be None)."""
    if spec.kind != "dlc":
        return spec.cuda_version
    from gpu_constructs.dlc import resolve_dlc

    image = resolve_dlc(str(spec.framework_version), usage, python=spec.python, cuda=spec.cuda, region=None)
    return image.cuda_version
