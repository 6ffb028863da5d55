"""Error types of the training runtime.

Every error that reaches the entry point is written to ``/opt/ml/output/failure`` (SageMaker
shows its first 1024 characters as the job's ``FailureReason``), so each message names the
thing that is wrong, the bad value and what is allowed.
"""

from __future__ import annotations


class TrainingError(Exception):
    """Base class: a failure with a message meant for the person who started the job."""


class ConfigError(TrainingError, ValueError):
    """A bad SageMaker configuration file, environment variable or channel layout."""


class HyperparameterError(ConfigError):
    """An unknown, ill-typed or out-of-range hyperparameter."""


class ChannelError(ConfigError):
    """A missing or unusable input channel."""


class DataError(TrainingError, ValueError):
    """Corrupt or inconsistent training data (a shard, a sample, an index)."""


class GpuCheckError(TrainingError, RuntimeError):
    """The instance should have usable NVIDIA GPUs but torch cannot use them."""
