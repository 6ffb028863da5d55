"""What the endpoint needs from objects of other modules: an inference image, a log metric filter."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_constructs.deprecation import warn_deprecated
from gpu_constructs.dlc import InferenceRuntime, inference_runtime
from gpu_constructs.images import ImageLike


@runtime_checkable
class InferenceImage(ImageLike, Protocol):
    """What the endpoint needs from an image (``gpu_constructs.images.GpuImage`` provides it): the library's image
    protocol plus the model server the image runs.

    ``runtime`` decides what only one server understands (TorchServe's batching rule on the PyTorch DLC, gpu_serve's
    batching variables and log metrics), so no consumer interprets how the image was made.
    """

    @property
    def runtime(self) -> InferenceRuntime | None: ...


def image_runtime(image: ImageLike) -> InferenceRuntime | None:
    """The model server ``image`` runs: its ``runtime``.

    An image written against the former protocol (no ``runtime``) still works for one release: its ``kind``, if
    any, is read as ``GpuImage.kind``, with a deprecation warning.
    """
    if hasattr(image, "runtime"):
        runtime: InferenceRuntime | None = image.runtime
        return runtime
    warn_deprecated(
        "an inference image without a 'runtime' member",
        "an image with runtime ('gpu_serve' or 'torchserve'), as GpuImage has",
    )
    kind = getattr(image, "kind", None)
    return None if kind is None else inference_runtime(kind)


class LogMetricFilterSpec(Protocol):
    """One CloudWatch Logs metric filter over the inference server's log lines.

    ``gpu_serve.metrics.LOG_METRIC_FILTERS`` entries have exactly these members.
    """

    @property
    def metric_name(self) -> str: ...

    @property
    def filter_pattern(self) -> str: ...

    @property
    def metric_value(self) -> str: ...

    @property
    def unit(self) -> str: ...
