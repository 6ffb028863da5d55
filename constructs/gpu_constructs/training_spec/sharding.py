"""The data-preparation (sharding) processing job: ``gpuctl shard`` in the training image (``CreateProcessingJob``)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from gpu_constructs.catalog import lookup
from gpu_constructs.errors import ValidationError
from gpu_constructs.training_spec.code import DRIVERS_CHANNEL
from gpu_constructs.training_spec.limits import PROCESSING_MAX_RUNTIME_S
from gpu_constructs.training_spec.preferences import InstancePreference, preference_problems
from gpu_constructs.training_spec.rules import (
    PROCESSING_TYPES_ALLOWED,
    as_timedelta,
    data_version_problem,
    job_name_problems,
    processing_type_allowed,
    raise_problems,
    runtime_limit_text,
    s3_problem,
    seconds_of,
)
from gpu_constructs.training_spec.sfn import Dynamic, finalize_request, finalize_sfn, with_version

__all__ = ["PROCESSING_INPUT_ROOT", "PROCESSING_OUTPUT_ROOT", "ShardSplit", "ShardingJobSpec"]

PROCESSING_INPUT_ROOT = "/opt/ml/processing/input"
PROCESSING_OUTPUT_ROOT = "/opt/ml/processing/output"
#: ``gpuctl shard`` of the image's own ``gpu_train`` (with a driver: the driver's).
DEFAULT_SHARD_COMMAND = ("python3", "-m", "gpu_train", "shard")


@dataclass(frozen=True)
class ShardSplit:
    """One split to shard: raw files under ``source_s3_uri`` -> shards under ``dest_s3_uri``.

    ``dest_s3_uri`` may contain ``{data_version}`` (it usually is the training channel's URI).
    """

    name: str
    source_s3_uri: str
    dest_s3_uri: str


@dataclass(frozen=True)
class ShardingJobSpec:
    """A SageMaker processing job that runs ``gpuctl shard`` in the training image, once per split.

    :param image_uri: the training image (it contains ``gpuctl``).
    :param role_arn: role of the processing job (reads the raw prefix, writes the dataset prefix).
    :param instance_type: ``ml.*`` processing type, CPU or GPU (default ``ml.m5.4xlarge``).
    :param splits: the splits to shard (at least one).
    :param instance_count: hosts (default 1).
    :param volume_size_gb: EBS volume for the raw download and the shards (default 200).
    :param volume_kms_key / output_kms_key: KMS keys (default: none).
    :param image_size / shard_size / seed: ``gpuctl shard`` options (defaults 224, ``128MB``, 0).
    :param command: the program (default ``("python3", "-m", "gpu_train", "shard")``: the image's ``gpuctl shard``).
    :param max_runtime: a ``timedelta`` (or an ``aws_cdk.Duration``), whole seconds, at most 5 days (default 1 day).
    :param subnets / security_group_ids / inter_container_encryption / network_isolation: as for training.
    :param data_version: default version for ``{data_version}`` (default ``v1``).
    :param job_name_prefix: processing job names start with it (default: none).
    :param tags: tags of every processing job (default: none).
    :param drivers_s3_uri: the platform's launcher zipapp (``s3://bucket/key``): delivered as the processing input
        ``sm_drivers`` and run as ``python3 <zipapp> shard``, so the step runs on any image with Python (the stock
        DLC included). Default: none, ``command`` runs the image's own ``gpu_train``.
    :param instance_preferences: a fallback list of processing types starting with ``instance_type`` (1-5, each
        once; default: none, ``instance_type`` only), rendered as ``ProcessingClusterConfig.InstancePreferences``
        (botocore 1.44.8: "An ordered list of ML compute instance types for the processing job, in priority order.
        Amazon SageMaker launches the job on the first instance type in the list that has available capacity [...]
        ``InstancePreferences`` is mutually exclusive with ``InstanceType``."), with the job's ``instance_count``.
        Every type has the first one's storage kind (the job has one ``VolumeKmsKeyId``).
    """

    image_uri: str
    role_arn: str
    splits: tuple[ShardSplit, ...]
    instance_type: str = "ml.m5.4xlarge"
    instance_count: int = 1
    volume_size_gb: int = 200
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    image_size: int = 224
    shard_size: str = "128MB"
    seed: int = 0
    command: tuple[str, ...] = DEFAULT_SHARD_COMMAND
    max_runtime: timedelta = timedelta(days=1)
    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    inter_container_encryption: bool = True
    network_isolation: bool = False
    data_version: str = "v1"
    job_name_prefix: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    drivers_s3_uri: str | None = None
    instance_preferences: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_runtime", as_timedelta(self.max_runtime))
        object.__setattr__(self, "instance_preferences", tuple(self.instance_preferences))

    def problems(self) -> list[str]:
        out: list[str] = []
        try:
            if not processing_type_allowed(self.instance_type, where="ShardingJobSpec"):
                out.append(
                    f"instance_type={self.instance_type!r} is not accepted by SageMaker processing; allowed: "
                    + PROCESSING_TYPES_ALLOWED
                )
        except ValidationError as exc:
            out.append(exc.detail)
        if not self.splits:
            out.append("splits=() is not allowed; allowed: at least one split to shard")
        names = [s.name for s in self.splits]
        for split in self.splits:
            if not re.match(r"^[A-Za-z0-9._-]{1,64}$", split.name) or names.count(split.name) > 1:
                out.append(f"split name={split.name!r} is not allowed; allowed: unique names of A-Z a-z 0-9 . _ -")
            for name, uri in (("source_s3_uri", split.source_s3_uri), ("dest_s3_uri", split.dest_s3_uri)):
                problem = s3_problem(f"split {split.name!r}: {name}", uri)
                if problem:
                    out.append(problem)
        if not 8 <= self.image_size <= 4096:
            out.append(f"image_size={self.image_size!r} is not allowed; allowed: 8..4096")
        if not re.match(r"^[0-9]+(\.[0-9]+)?[KMG]i?B$", self.shard_size):
            out.append(f"shard_size={self.shard_size!r} is not allowed; allowed: a size such as '128MB'")
        runtime = seconds_of(self.max_runtime)
        if not isinstance(runtime, int) or not 1 <= runtime <= PROCESSING_MAX_RUNTIME_S:
            out.append(
                f"max_runtime={runtime!r} s is not allowed; allowed: "
                + runtime_limit_text(PROCESSING_MAX_RUNTIME_S, "processing MaxRuntimeInSeconds")
            )
        if bool(self.subnets) != bool(self.security_group_ids):
            out.append("subnets and security_group_ids: allowed: both set or both empty")
        if self.drivers_s3_uri is not None:
            problem = s3_problem("drivers_s3_uri", self.drivers_s3_uri)
            if problem:
                out.append(problem)
            if DRIVERS_CHANNEL in names:
                out.append(f"split name={DRIVERS_CHANNEL!r} is the launcher's input; allowed: another name")
        return out + self._preference_problems()

    def _preference_problems(self) -> list[str]:
        """The fallback list: SageMaker's rules for it (:func:`~gpu_constructs.training_spec.preferences.
        preference_problems`) and every type a processing type."""
        if not self.instance_preferences:
            return []
        out: list[str] = []
        nvme: dict[str, bool] = {}
        for name in dict.fromkeys(self.instance_preferences):
            try:
                if not processing_type_allowed(name, where="ShardingJobSpec"):
                    out.append(f"instance_preferences: {name!r} is not accepted by SageMaker processing; allowed: "
                               + PROCESSING_TYPES_ALLOWED)  # fmt: skip
                nvme[name] = lookup(name).has_local_nvme
            except ValidationError as exc:
                out.append(f"instance_preferences: {exc.detail}")
        listed = tuple(InstancePreference(name) for name in self.instance_preferences)
        return out + preference_problems(
            listed,
            instance_type=self.instance_type,
            instance_count=self.instance_count,
            spot=False,
            training_plan_arn=None,
            local_nvme=nvme,
        )

    def _script(self) -> str:
        """One shell line (SageMaker allows 256 characters per entrypoint item): shard each split given as an
        argument, ``<input root>/<split>`` -> ``<output root>/<split>``."""
        command = " ".join(_shell_quote(a) for a in self.command)
        find_driver = ""
        if self.drivers_s3_uri is not None and self.command == DEFAULT_SHARD_COMMAND:
            # The one file of the driver input, whatever name SageMaker gives it.
            find_driver = f"d=$(ls -d {PROCESSING_INPUT_ROOT}/{DRIVERS_CHANNEL}/*); "
            command = 'python3 "$d" shard'
        options = f"--image-size {self.image_size} --shard-size {_shell_quote(self.shard_size)} --seed {self.seed}"
        return (
            f'set -eu; {find_driver}for split in "$@"; do {command} "{PROCESSING_INPUT_ROOT}/$split" '
            f'"{PROCESSING_OUTPUT_ROOT}/$split" {options} --quiet; done'
        )

    def _inputs(self) -> list[tuple[str, str]]:
        """(input name, S3 URI) of every processing input: the splits' raw files, then the driver."""
        inputs = [(split.name, split.source_s3_uri) for split in self.splits]
        if self.drivers_s3_uri is not None:
            inputs.append((DRIVERS_CHANNEL, self.drivers_s3_uri))
        return inputs

    def _render(self, *, job_name: str | Dynamic, data_version: str | Dynamic) -> dict[str, Any]:
        request: dict[str, Any] = {
            "ProcessingJobName": job_name,
            "RoleArn": self.role_arn,
            "AppSpecification": {
                "ImageUri": self.image_uri,
                # sh -c SCRIPT NAME ARGS...: the split names become "$@".
                "ContainerEntrypoint": ["/bin/sh", "-c", self._script(), "gpuctl-shard"],
                "ContainerArguments": [split.name for split in self.splits],
            },
            "ProcessingResources": {
                "ClusterConfig": {
                    "InstanceCount": self.instance_count,
                    **(
                        {"InstancePreferences": [{"InstanceType": name} for name in self.instance_preferences]}
                        if self.instance_preferences
                        else {"InstanceType": self.instance_type}
                    ),
                    "VolumeSizeInGB": self.volume_size_gb,
                    **({"VolumeKmsKeyId": self.volume_kms_key} if self.volume_kms_key else {}),
                }
            },
            "ProcessingInputs": [
                {
                    "InputName": name,
                    "S3Input": {
                        "S3Uri": uri,
                        "LocalPath": f"{PROCESSING_INPUT_ROOT}/{name}",
                        "S3DataType": "S3Prefix",
                        "S3InputMode": "File",
                        "S3DataDistributionType": "FullyReplicated",
                    },
                }
                for name, uri in self._inputs()
            ],
            "ProcessingOutputConfig": {
                "Outputs": [
                    {
                        "OutputName": split.name,
                        "S3Output": {
                            "S3Uri": with_version(split.dest_s3_uri, data_version),
                            "LocalPath": f"{PROCESSING_OUTPUT_ROOT}/{split.name}",
                            "S3UploadMode": "EndOfJob",
                        },
                    }
                    for split in self.splits
                ],
                **({"KmsKeyId": self.output_kms_key} if self.output_kms_key else {}),
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": seconds_of(self.max_runtime)},
            "NetworkConfig": {
                "EnableInterContainerTrafficEncryption": self.inter_container_encryption,
                "EnableNetworkIsolation": self.network_isolation,
                **(
                    {"VpcConfig": {"Subnets": list(self.subnets), "SecurityGroupIds": list(self.security_group_ids)}}
                    if self.subnets
                    else {}
                ),
            },
        }
        if self.tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())]
        return request

    def to_request(self, job_name: str, *, data_version: str | None = None, where: str = "ShardingJobSpec") -> dict:
        version = data_version or self.data_version
        problems = [
            *self.problems(),
            *job_name_problems(job_name, where=where, param="processing_job_name", prefix=self.job_name_prefix),
            *filter(None, [data_version_problem(version)]),
        ]
        return finalize_request(
            problems, lambda: self._render(job_name=job_name, data_version=version), "CreateProcessingJob", where
        )

    def to_sfn_parameters(
        self,
        *,
        job_name_path: str = "$.args.prepare_job_name",
        data_version_path: str = "$.args.data_version",
        where: str = "ShardingJobSpec",
    ) -> dict[str, Any]:
        """``Parameters`` of a ``sagemaker:createProcessingJob.sync`` task (``aws-sdk:sagemaker:createProcessingJob``
        with a fallback list), validated with sample values."""
        raise_problems(where, self.problems())
        tree = self._render(
            job_name=Dynamic(job_name_path, f"{self.job_name_prefix or 'shard'}-20250101-000000"),
            data_version=Dynamic(data_version_path, self.data_version),
        )
        return finalize_sfn(tree, "CreateProcessingJob", where)


def _shell_quote(arg: str) -> str:
    return shlex.quote(arg)
