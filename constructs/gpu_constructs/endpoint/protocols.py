"""What the endpoint needs from objects of other modules: an inference image, a log metric filter."""

from __future__ import annotations

from typing import Protocol

from gpu_constructs.images import ImageLike

#: What the endpoint needs from an image (``gpu_constructs.images.GpuImage`` provides it): the library's one
#: image protocol, under the name the endpoint has always exported.
InferenceImage = ImageLike


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
