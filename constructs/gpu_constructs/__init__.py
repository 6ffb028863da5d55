"""gpu_constructs: AWS CDK constructs for training and serving PyTorch models on NVIDIA GPUs.

Public names are imported lazily (PEP 562, :func:`gpu_constructs.lazy.lazy_exports`, the one mechanism every
package of the library uses), so ``import gpu_constructs``, ``import gpu_constructs.catalog`` or the config model
does not start the CDK runtime. ``from gpu_constructs import GpuNetwork`` works as usual.

To export a new public name, add it to ``_EXPORTS`` (name -> module) and to the ``TYPE_CHECKING`` block, then
regenerate the API snapshot (``tests/constructs/test_api_surface.py`` says how): the public surface changes only by a
reviewed diff.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_constructs._version import __version__
from gpu_constructs.deprecation import moved_modules
from gpu_constructs.lazy import lazy_exports

#: Modules grouped into sub-packages by concept (catalog, file systems, notebook, OIDC, packaging): their former
#: paths stay importable for one release (gpu_constructs.deprecation.moved_modules).
MOVED_MODULES: dict[str, str] = {
    "gpu_constructs.catalog_data": "gpu_constructs.catalog.data",
    "gpu_constructs.catalog_types": "gpu_constructs.catalog.types",
    "gpu_constructs.cuda": "gpu_constructs.catalog.cuda",
    "gpu_constructs.fsx": "gpu_constructs.file_systems.fsx",
    "gpu_constructs.fsx_facts": "gpu_constructs.file_systems.fsx_facts",
    "gpu_constructs.efs": "gpu_constructs.file_systems.efs",
    "gpu_constructs.lustre_clients": "gpu_constructs.file_systems.lustre_clients",
    "gpu_constructs.lustre_mount": "gpu_constructs.file_systems.lustre_mount",
    "gpu_constructs.notebook_options": "gpu_constructs.notebook.options",
    "gpu_constructs.oidc_facts": "gpu_constructs.oidc.facts",
    "gpu_constructs.wheel": "gpu_constructs.packaging.wheel",
    "gpu_constructs.runtime_files": "gpu_constructs.packaging.runtime_files",
    "gpu_constructs.scripts": "gpu_constructs.packaging.scripts",
}
moved_modules(MOVED_MODULES)

_EXPORTS: dict[str, str] = {
    "ValidationError": "gpu_constructs.errors",
    "DEFAULT_INTERFACE_ENDPOINTS": "gpu_constructs.constants",
    "ENDPOINT_SUBNETS": "gpu_constructs.constants",
    "FLEET_SUBNETS": "gpu_constructs.constants",
    "TRAINING_SUBNETS": "gpu_constructs.constants",
    "GpuNetwork": "gpu_constructs.network",
    "PlatformStorage": "gpu_constructs.storage",
    "SecureBucket": "gpu_constructs.storage",
    "GpuLustreFileSystem": "gpu_constructs.file_systems.fsx",
    "LustreDataRepository": "gpu_constructs.file_systems.fsx",
    "ImportedLustreFileSystem": "gpu_constructs.file_systems.fsx",
    "LustreSizing": "gpu_constructs.file_systems.fsx_facts",
    "size_lustre": "gpu_constructs.file_systems.fsx_facts",
    "sagemaker_channel": "gpu_constructs.file_systems.fsx_facts",
    "GpuEfsFileSystem": "gpu_constructs.file_systems.efs",
    "GpuImage": "gpu_constructs.images",
    "ImageLike": "gpu_constructs.images",
    "SecureRepository": "gpu_constructs.images",
    "DlamiImage": "gpu_constructs.dlami",
    "NetworkReachability": "gpu_constructs.network",
    "FleetAlarms": "gpu_constructs.fleet",
    "FleetCapacity": "gpu_constructs.fleet",
    "FleetCapacityReservation": "gpu_constructs.fleet",
    "FleetFallback": "gpu_constructs.fleet",
    "FleetSpotOptions": "gpu_constructs.fleet",
    "FleetVolumes": "gpu_constructs.fleet",
    "GpuFleet": "gpu_constructs.fleet",
    "LustreFileSystemLike": "gpu_constructs.fleet",
    "LustreMount": "gpu_constructs.fleet",
    "GpuNotebook": "gpu_constructs.notebook.construct",
    "NotebookPackage": "gpu_constructs.notebook.construct",
    "TrainingPipeline": "gpu_constructs.training",
    "PrepareOptions": "gpu_constructs.training",
    "TrainingAlarms": "gpu_constructs.training",
    "TrainingCodeOptions": "gpu_constructs.training",
    "AlarmThresholds": "gpu_constructs.training",
    "TrainingJobSpec": "gpu_constructs.training_spec",
    "ShardingJobSpec": "gpu_constructs.training_spec",
    "S3Channel": "gpu_constructs.training_spec",
    "FsxChannel": "gpu_constructs.training_spec",
    "GitOpsDeployRole": "gpu_constructs.oidc.construct",
    "existing_oidc_provider": "gpu_constructs.oidc.construct",
    "GpuEndpoint": "gpu_constructs.endpoint",
    "ModelData": "gpu_constructs.endpoint",
    "Batching": "gpu_constructs.endpoint",
    "BatchingEnv": "gpu_constructs.endpoint",
    "DataCapture": "gpu_constructs.endpoint",
    "AsyncInference": "gpu_constructs.endpoint",
    "BlueGreenDeployment": "gpu_constructs.endpoint",
    "EndpointAlarms": "gpu_constructs.endpoint",
    "EndpointAutoscaling": "gpu_constructs.endpoint",
    "OffHoursSchedule": "gpu_constructs.endpoint",
    "InstancePool": "gpu_constructs.endpoint",
    "InferenceImage": "gpu_constructs.endpoint",
    "GPU_SERVE_BATCHING_ENV": "gpu_constructs.endpoint",
    "TORCHSERVE_BATCHING_ENV": "gpu_constructs.endpoint",
    "monitoring_key": "gpu_constructs.endpoint",
    "CostBudget": "gpu_constructs.budgets.construct",
    "IdleStop": "gpu_constructs.idle",
    "IdleTrainingJobs": "gpu_constructs.idle",
    "IdleFleetGroup": "gpu_constructs.idle",
    "NotebookSessionLimit": "gpu_constructs.idle",
    "Publisher": "gpu_constructs.topics",
    "admit_publishers": "gpu_constructs.topics",
    "alarm_action": "gpu_constructs.topics",
    "notification_topic": "gpu_constructs.topics",
    "rule_target": "gpu_constructs.topics",
}

#: Deprecated names: importable (with a warning where they are used) until they are removed, not advertised.
_DEPRECATED = frozenset({"AlarmThresholds"})

__all__ = sorted(set(_EXPORTS) - _DEPRECATED)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from gpu_constructs.budgets.construct import CostBudget
    from gpu_constructs.constants import (
        DEFAULT_INTERFACE_ENDPOINTS,
        ENDPOINT_SUBNETS,
        FLEET_SUBNETS,
        TRAINING_SUBNETS,
    )
    from gpu_constructs.dlami import DlamiImage
    from gpu_constructs.endpoint import (
        GPU_SERVE_BATCHING_ENV,
        TORCHSERVE_BATCHING_ENV,
        AsyncInference,
        Batching,
        BatchingEnv,
        BlueGreenDeployment,
        DataCapture,
        EndpointAlarms,
        EndpointAutoscaling,
        GpuEndpoint,
        InferenceImage,
        InstancePool,
        ModelData,
        OffHoursSchedule,
        monitoring_key,
    )
    from gpu_constructs.errors import ValidationError
    from gpu_constructs.file_systems.efs import GpuEfsFileSystem
    from gpu_constructs.file_systems.fsx import GpuLustreFileSystem, ImportedLustreFileSystem, LustreDataRepository
    from gpu_constructs.file_systems.fsx_facts import LustreSizing, sagemaker_channel, size_lustre
    from gpu_constructs.fleet import (
        FleetAlarms,
        FleetCapacity,
        FleetCapacityReservation,
        FleetFallback,
        FleetSpotOptions,
        FleetVolumes,
        GpuFleet,
        LustreFileSystemLike,
        LustreMount,
    )
    from gpu_constructs.idle import IdleFleetGroup, IdleStop, IdleTrainingJobs, NotebookSessionLimit
    from gpu_constructs.images import GpuImage, ImageLike, SecureRepository
    from gpu_constructs.network import GpuNetwork, NetworkReachability
    from gpu_constructs.notebook.construct import GpuNotebook, NotebookPackage
    from gpu_constructs.oidc.construct import GitOpsDeployRole, existing_oidc_provider
    from gpu_constructs.storage import PlatformStorage, SecureBucket
    from gpu_constructs.topics import Publisher, admit_publishers, alarm_action, notification_topic, rule_target
    from gpu_constructs.training import (
        AlarmThresholds,
        PrepareOptions,
        TrainingAlarms,
        TrainingCodeOptions,
        TrainingPipeline,
    )
    from gpu_constructs.training_spec import FsxChannel, S3Channel, ShardingJobSpec, TrainingJobSpec
