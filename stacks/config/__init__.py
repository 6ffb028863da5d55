"""Typed, validated environment configuration (``config/<env>.yaml``).

``load_config(name)`` reads ``config/<name>.yaml`` and returns a frozen :class:`EnvConfig`.
Every problem — an unknown environment, an unknown key (typos are errors), a region that does not exist,
an AZ outside the region, duplicate AZs, an overlapping or too-small CIDR, a negative or unsupported
retention — raises :class:`ConfigError` naming the file, the key, the bad value and what is allowed,
before any construct is built. Nothing here calls AWS: region names come from botocore's bundled
endpoint data, so ``cdk synth`` stays offline and deterministic.

One module per section of the file: ``network``, ``data``, ``storage`` (``file_systems``), ``images``,
``training``, ``fleets``, ``inference``, ``gitops``, ``pipeline``; ``env`` holds :class:`EnvConfig` and the
rules across sections, ``loader`` reads and reports, ``_base`` holds the error type, the strict base model and
the shared field types.
"""

from __future__ import annotations

from stacks.config._base import (
    CONFIG_DIR,
    DEFAULT_ENV,
    ConfigError,
    Retention,
    StrictModel,
    available_envs,
    known_regions,
)
from stacks.config.budget import BudgetConfig
from stacks.config.data import DataConfig
from stacks.config.env import EnvConfig, check_training_image_cuda
from stacks.config.fleets import DlamiConfig, FleetGroupConfig, FleetsConfig, FleetSpotConfig, NotebookConfig
from stacks.config.gitops import GitOpsConfig, OidcDeployConfig
from stacks.config.images import IMAGE_KINDS, ImagesConfig, ImageSpec, image_cuda_version
from stacks.config.inference import (
    EndpointAlarmsConfig,
    EndpointAsyncConfig,
    EndpointAutoscalingConfig,
    EndpointBatchingConfig,
    EndpointConfig,
    EndpointDataCaptureConfig,
    EndpointDeploymentConfig,
    EndpointOffHoursConfig,
    InferenceConfig,
)
from stacks.config.loader import load_config, parse_config
from stacks.config.network import INTERFACE_ENDPOINTS, NetworkConfig
from stacks.config.pipeline import PipelineConfig
from stacks.config.storage import LUSTRE_DEPLOYMENT_TYPES, EfsConfig, FileSystemsConfig, LustreConfig
from stacks.config.training import TrainingAlarmsConfig, TrainingConfig, TrainingPrepareConfig

__all__ = [
    "CONFIG_DIR",
    "DEFAULT_ENV",
    "IMAGE_KINDS",
    "INTERFACE_ENDPOINTS",
    "LUSTRE_DEPLOYMENT_TYPES",
    "BudgetConfig",
    "ConfigError",
    "DataConfig",
    "DlamiConfig",
    "EfsConfig",
    "EndpointAlarmsConfig",
    "EndpointAsyncConfig",
    "EndpointAutoscalingConfig",
    "EndpointBatchingConfig",
    "EndpointConfig",
    "EndpointDataCaptureConfig",
    "EndpointDeploymentConfig",
    "EndpointOffHoursConfig",
    "EnvConfig",
    "FileSystemsConfig",
    "FleetGroupConfig",
    "FleetSpotConfig",
    "FleetsConfig",
    "GitOpsConfig",
    "ImageSpec",
    "ImagesConfig",
    "InferenceConfig",
    "LustreConfig",
    "NetworkConfig",
    "NotebookConfig",
    "OidcDeployConfig",
    "PipelineConfig",
    "Retention",
    "StrictModel",
    "TrainingAlarmsConfig",
    "TrainingConfig",
    "TrainingPrepareConfig",
    "available_envs",
    "check_training_image_cuda",
    "image_cuda_version",
    "known_regions",
    "load_config",
    "parse_config",
]
