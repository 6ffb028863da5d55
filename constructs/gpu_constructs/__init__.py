"""gpu_constructs: AWS CDK constructs for training and serving PyTorch models on NVIDIA GPUs."""

from gpu_constructs.errors import ValidationError
from gpu_constructs.network import (
    DEFAULT_INTERFACE_ENDPOINTS,
    ENDPOINT_SUBNETS,
    FLEET_SUBNETS,
    TRAINING_SUBNETS,
    GpuNetwork,
)
from gpu_constructs.storage import PlatformStorage, SecureBucket

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_INTERFACE_ENDPOINTS",
    "ENDPOINT_SUBNETS",
    "FLEET_SUBNETS",
    "TRAINING_SUBNETS",
    "GpuNetwork",
    "PlatformStorage",
    "SecureBucket",
    "ValidationError",
]
