"""Idle GPUs stop: a function that stops idle training jobs, stops notebooks over their session limit and scales
idle fleet groups to 0, each event published to a notification topic (:class:`IdleStop`)."""

from gpu_constructs.idle.construct import IdleStop
from gpu_constructs.idle.options import IdleFleetGroup, IdleTrainingJobs, NotebookSessionLimit

__all__ = ["IdleFleetGroup", "IdleStop", "IdleTrainingJobs", "NotebookSessionLimit"]
