"""Idle GPUs stop: a function that stops idle training jobs, stops notebooks over their session limit and scales
idle fleet groups to 0, each event published to a notification topic (:class:`IdleStop`).

The names load the CDK on first use; :mod:`gpu_constructs.idle.limits` and :mod:`gpu_constructs.idle.handler`
(the function's code) never do.
"""

from __future__ import annotations

from gpu_constructs.lazy import lazy_exports

__all__ = ["IdleFleetGroup", "IdleStop", "IdleTrainingJobs", "NotebookSessionLimit"]

_EXPORTS = {
    "IdleStop": "gpu_constructs.idle.construct",
    "IdleFleetGroup": "gpu_constructs.idle.options",
    "IdleTrainingJobs": "gpu_constructs.idle.options",
    "NotebookSessionLimit": "gpu_constructs.idle.options",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
