"""GPU notebooks: the SageMaker notebook construct and its CDK-free options.

The names of the construct module (``gpu_constructs.notebook.construct``) are importable from the
package, as they were from the module it was before; they load the CDK on first use.
"""

from __future__ import annotations

from gpu_constructs.lazy import lazy_exports

__all__ = [
    "LIFECYCLE_CONTENT_LIMIT",
    "NOTEBOOK_LOG_GROUP",
    "NOTEBOOK_PYTHON",
    "GpuNotebook",
    "NotebookPackage",
]

#: Every public name of the construct module stays importable from here; ``__all__`` is the documented API.
_EXPORTS = {
    name: "gpu_constructs.notebook.construct"
    for name in [*__all__, "DEFAULT_VOLUME_SIZE", "LOG_GROUP_REASON", "LOG_STREAM_REASON", "ROLE_POLICY_REASON"]
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
