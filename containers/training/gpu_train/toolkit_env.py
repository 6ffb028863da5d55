"""The SageMaker training toolkit's ``SM_*`` variables for a script, computed without the toolkit.

What ``sagemaker_training.environment.Environment().to_env_vars()`` (pip package sagemaker-training 5.1.4) gives a
script for the same ``/opt/ml`` tree: ``SM_TRAINING_ENV`` (every property of the toolkit's ``Environment`` as one
JSON object), ``SM_RESOURCE_CONFIG``, ``SM_INPUT_DATA_CONFIG``, ``SM_FRAMEWORK_PARAMS``, ``SM_CHANNELS``,
``SM_CHANNEL_<NAME>``, ``SM_HOSTS``, ``SM_CURRENT_HOST``, ``SM_NUM_CPUS``, ``SM_NUM_GPUS``, ``SM_MODULE_NAME``,
``SM_MODULE_DIR``, ``SM_OUTPUT_*``, ``SM_INSTANCE_GROUPS``... with the toolkit's formats: strings as they are,
anything else compact JSON with sorted keys (``mapping.to_env_vars``). The hyperparameter variables (``SM_HPS``,
``SM_HP_<NAME>``, ``SM_USER_ARGS``) are the launcher's (:func:`gpu_train.launcher.script_environment`).

Where the launcher knows better it says so (tests/containers/training/test_toolkit_env_parity.py lists each such
value with its reason): ``SM_NUM_GPUS`` is what torch can use (``CUDA_VISIBLE_DEVICES`` applies), where the
toolkit counts ``nvidia-smi --list-gpus``; ``SM_USER_ENTRY_POINT`` is the script the launcher runs
(``--entry-point``); the job's own ``SM_MODEL_DIR``/``SM_OUTPUT_DATA_DIR`` are kept. Imports no torch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpu_train import sagemaker

# sagemaker_training/params.py: SAGEMAKER_HYPERPARAMETERS (the SDK's own names, left out of the script's
# hyperparameters and of SM_FRAMEWORK_PARAMS) and the prefix of the framework parameters.
SAGEMAKER_HYPERPARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "default_user_module_name",
    "_tuning_objective_metric",
    "sagemaker_s3_output",
)
SAGEMAKER_PREFIX = "sagemaker_"
# Environment.get_distribution_instance_groups_from_resource_config: the framework parameters that put the
# current instance group into the distribution.
_DISTRIBUTED_FLAGS = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)


def value(item: Any) -> str:
    """The toolkit's ``mapping.to_env_vars`` format: a string as it is, None empty, anything else compact JSON."""
    if isinstance(item, str):
        return item
    if item is None:
        return ""
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _decode(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, TypeError):
        return raw


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def training_env(
    env: sagemaker.SageMakerEnv, environ: Mapping[str, str], *, entry: str, num_gpus: int
) -> dict[str, Any]:
    """The toolkit's ``dict(Environment())``: every property, as ``SM_TRAINING_ENV`` holds them."""
    paths = env.paths
    decoded = {name: _decode(raw) for name, raw in env.hyperparameters.items()}
    sdk = {k: v for k, v in decoded.items() if k in SAGEMAKER_HYPERPARAMETERS or k.startswith(SAGEMAKER_PREFIX)}
    user = {k: v for k, v in decoded.items() if k not in sdk}
    framework = {k: v for k, v in sdk.items() if k not in SAGEMAKER_HYPERPARAMETERS}
    resource = _read(paths.resource_config_file)
    if not isinstance(resource, dict):
        resource = {"current_host": env.resource.current_host, "hosts": list(env.resource.hosts)}
    input_data = _read(paths.input_data_config_file)
    if not isinstance(input_data, dict):
        input_data = {}
    hosts = list(env.resource.hosts)
    group = resource.get("current_group_name", "homogeneousCluster")  # the toolkit's key, as it reads it
    groups = list(resource.get("instance_groups", []))
    distribution_groups = framework.get(
        "sagemaker_distribution_instance_groups",
        [group] if any(framework.get(flag, False) for flag in _DISTRIBUTED_FLAGS) else [],
    )
    if groups:
        distribution_hosts = [h for g in groups if g["instance_group_name"] in distribution_groups for h in g["hosts"]]
    else:
        distribution_hosts = list(hosts)
    master = (distribution_hosts or hosts)[0]
    program = environ.get("SAGEMAKER_PROGRAM") or str(sdk.get("sagemaker_program"))
    mp_parameters = environ.get("SM_HP_MP_PARAMETERS")
    return {
        "additional_framework_parameters": framework,
        "channel_input_dirs": {name: str(paths.data_dir / name) for name in input_data},
        "current_host": env.resource.current_host,
        "current_instance_group": group,
        "current_instance_group_hosts": next((g["hosts"] for g in groups if g["instance_group_name"] == group), []),
        "current_instance_type": resource.get("current_instance_type", "local"),
        "distribution_hosts": distribution_hosts,
        "distribution_instance_groups": distribution_groups,
        "framework_module": environ.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": hosts,
        "hyperparameters": user,
        "input_config_dir": str(paths.config_dir),
        "input_data_config": input_data,
        "input_dir": str(paths.root / "input"),
        "instance_groups": [g["instance_group_name"] for g in groups],
        "instance_groups_dict": {g["instance_group_name"]: g for g in groups},
        "is_hetero": len(groups) > 1,
        "is_master": env.resource.current_host == master,
        "is_modelparallel_enabled": mp_parameters and mp_parameters != "{}",
        "is_smddpmprun_installed": shutil.which("smddpmprun") is not None,
        "is_smddprun_installed": shutil.which("smddprun") is not None,
        "job_name": environ.get("TRAINING_JOB_NAME"),
        "log_level": sdk.get("sagemaker_container_log_level", logging.INFO),
        "master_hostname": master,
        "model_dir": str(env.model_dir),
        "module_dir": str(sdk.get("sagemaker_submit_directory", paths.code_dir)),
        "module_name": program[:-3] if program.endswith(".py") else program,
        "network_interface_name": resource.get("network_interface_name", "eth0"),
        "num_cpus": os.cpu_count() or 1,
        "num_gpus": num_gpus,
        # sagemaker_training.environment.num_neurons: 64 on trn2.48xlarge, else what `neuron-ls` counts.
        "num_neurons": 64 if "trn2.48xlarge" in str(resource.get("current_instance_type", "")) else 0,
        "output_data_dir": str(env.output_data_dir),
        "output_dir": str(paths.output_dir),
        "output_intermediate_dir": str(paths.output_dir / "intermediate"),
        "resource_config": resource,
        "topology": resource.get("topology", []),
        "user_entry_point": entry,
    }


# Environment.to_env_vars: (variable name after SM_, property of training_env).
_VARIABLES = (
    ("HOSTS", "hosts"),
    ("NETWORK_INTERFACE_NAME", "network_interface_name"),
    ("USER_ENTRY_POINT", "user_entry_point"),
    ("FRAMEWORK_PARAMS", "additional_framework_parameters"),
    ("RESOURCE_CONFIG", "resource_config"),
    ("INPUT_DATA_CONFIG", "input_data_config"),
    ("OUTPUT_DATA_DIR", "output_data_dir"),
    ("CURRENT_HOST", "current_host"),
    ("CURRENT_INSTANCE_TYPE", "current_instance_type"),
    ("CURRENT_INSTANCE_GROUP", "current_instance_group"),
    ("CURRENT_INSTANCE_GROUP_HOSTS", "current_instance_group_hosts"),
    ("INSTANCE_GROUPS", "instance_groups"),
    ("INSTANCE_GROUPS_DICT", "instance_groups_dict"),
    ("DISTRIBUTION_INSTANCE_GROUPS", "distribution_instance_groups"),
    ("IS_HETERO", "is_hetero"),
    ("MODULE_NAME", "module_name"),
    ("LOG_LEVEL", "log_level"),
    ("FRAMEWORK_MODULE", "framework_module"),
    ("INPUT_DIR", "input_dir"),
    ("INPUT_CONFIG_DIR", "input_config_dir"),
    ("OUTPUT_DIR", "output_dir"),
    ("NUM_CPUS", "num_cpus"),
    ("NUM_GPUS", "num_gpus"),
    ("NUM_NEURONS", "num_neurons"),
    ("MODEL_DIR", "model_dir"),
    ("MODULE_DIR", "module_dir"),
    ("OUTPUT_INTERMEDIATE_DIR", "output_intermediate_dir"),
)


def variables(env: sagemaker.SageMakerEnv, environ: Mapping[str, str], *, entry: str, num_gpus: int) -> dict[str, str]:
    """The toolkit's variables for this tree, less the launcher's hyperparameter ones (``SM_HPS``,
    ``SM_HP_<NAME>``, ``SM_USER_ARGS``); ``SM_CHANNEL_<NAME>`` and, where the launcher's differs,
    ``SM_HP_<NAME>`` with the toolkit's name (the name upper-cased as it is, ``-`` and ``.`` kept)."""
    props = training_env(env, environ, entry=entry, num_gpus=num_gpus)
    out = {f"SM_{name}": value(props[prop]) for name, prop in _VARIABLES}
    out["SM_CHANNELS"] = value(sorted(props["channel_input_dirs"]))
    out["SM_TRAINING_ENV"] = value(props)
    if props["topology"]:
        out["SM_TOPOLOGY"] = value(props["topology"])
    for name, path in props["channel_input_dirs"].items():
        channel = env.channels.get(name)
        out[f"SM_CHANNEL_{name.upper()}"] = str(channel.path) if channel is not None else path
    for name, item in props["hyperparameters"].items():
        if name.upper() != name.upper().replace("-", "_").replace(".", "_"):  # the launcher's SM_HP_ name differs
            out[f"SM_HP_{name.upper()}"] = value(item)
    return out
