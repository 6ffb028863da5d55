"""Input channels of a training job: S3 (File / FastFile / Pipe) and FSx for Lustre."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from gpu_constructs.errors import ValidationError, is_token
from gpu_constructs.file_systems.fsx_facts import FILE_SYSTEM_ID_ALLOWED, is_file_system_id
from gpu_constructs.training_spec.limits import (
    COMPRESSIONS,
    DISTRIBUTIONS,
    FSX_ACCESS_MODES,
    INPUT_MODES,
    USER_INPUT_MODE,
    WHERE,
)
from gpu_constructs.training_spec.rules import s3_problem
from gpu_constructs.training_spec.sfn import Dynamic, with_version

__all__ = ["Channel", "FsxChannel", "S3Channel", "channel_from_dict", "channel_template", "input_channel"]


@dataclass(frozen=True)
class S3Channel:
    """An S3 input channel.

    :param name: channel name; the container sees ``/opt/ml/input/data/<name>`` (``SM_CHANNEL_<NAME>``).
    :param s3_uri: ``s3://bucket/prefix/``; may contain ``{data_version}``, replaced per job.
    :param input_mode: File (download first), FastFile (stream S3 objects as files) or Pipe (FIFO).
        Default: FastFile.
    :param distribution: FullyReplicated (every host reads everything) or ShardedByS3Key (each host
        gets 1/N of the objects). Default: FullyReplicated.
    :param content_type: MIME type passed to the container (default: none).
    :param compression: ``None`` or ``Gzip`` (Pipe mode only; default: not set).
    :param shuffle_seed: Pipe mode: shuffle the object list with this seed on each pass (default: off).
    :param type: the channel kind, always ``s3`` (set by the class; it tells channels apart in JSON).
    """

    name: str
    s3_uri: str
    input_mode: Literal["File", "FastFile", "Pipe"] = "FastFile"
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    content_type: str | None = None
    compression: Literal["None", "Gzip"] | None = None
    shuffle_seed: int | None = None
    type: Literal["s3"] = "s3"

    def problems(self) -> list[str]:
        where = f"channel {self.name!r}"
        out: list[str] = []
        if self.input_mode not in INPUT_MODES:
            out.append(f"{where}: input_mode={self.input_mode!r} is not allowed; allowed: {', '.join(INPUT_MODES)}")
        if self.distribution not in DISTRIBUTIONS:
            out.append(
                f"{where}: distribution={self.distribution!r} is not allowed; allowed: {', '.join(DISTRIBUTIONS)}"
            )
        problem = s3_problem(f"{where}: s3_uri", self.s3_uri)
        if problem:
            out.append(problem)
        if self.compression not in (None, *COMPRESSIONS):
            out.append(f"{where}: compression={self.compression!r} is not allowed; allowed: None, Gzip")
        if self.compression == "Gzip" and self.input_mode != "Pipe":
            out.append(f"{where}: compression='Gzip' is not allowed with input_mode={self.input_mode!r}; allowed: Pipe")
        if self.shuffle_seed is not None and self.input_mode != "Pipe":
            out.append(
                f"{where}: shuffle_seed={self.shuffle_seed!r} is not allowed with input_mode={self.input_mode!r}; "
                "allowed: Pipe (File and FastFile readers shuffle themselves)"
            )
        return out

    def render(self, data_version: str | Dynamic) -> dict[str, Any]:
        source: dict[str, Any] = {
            "S3DataType": "S3Prefix",
            "S3Uri": with_version(self.s3_uri, data_version),
            "S3DataDistributionType": self.distribution,
        }
        channel: dict[str, Any] = {
            "ChannelName": self.name,
            "DataSource": {"S3DataSource": source},
            "InputMode": self.input_mode,
        }
        if self.content_type:
            channel["ContentType"] = self.content_type
        if self.compression:
            channel["CompressionType"] = self.compression
        if self.shuffle_seed is not None:
            channel["ShuffleConfig"] = {"Seed": self.shuffle_seed}
        return channel


@dataclass(frozen=True)
class FsxChannel:
    """An FSx for Lustre input channel (mounted; SageMaker reads it in File mode).

    :param name: channel name.
    :param file_system_id: ``fs-...``.
    :param directory_path: ``/<mount_name>/<path>``; may contain ``{data_version}``.
    :param access_mode: ``ro`` (default) or ``rw``.
    :param file_system_type: ``FSxLustre`` (default).
    :param type: the channel kind, always ``fsx`` (set by the class; it tells channels apart in JSON).
    """

    name: str
    file_system_id: str
    directory_path: str
    access_mode: Literal["ro", "rw"] = "ro"
    file_system_type: Literal["FSxLustre"] = "FSxLustre"
    type: Literal["fsx"] = "fsx"

    @property
    def input_mode(self) -> str:
        return "File"

    def problems(self) -> list[str]:
        where = f"channel {self.name!r}"
        out: list[str] = []
        if not is_token(self.file_system_id) and not is_file_system_id(self.file_system_id):
            out.append(
                f"{where}: file_system_id={self.file_system_id!r} is not allowed; allowed: {FILE_SYSTEM_ID_ALLOWED}"
            )
        if not is_token(self.directory_path) and not str(self.directory_path).startswith("/"):
            out.append(
                f"{where}: directory_path={self.directory_path!r} is not allowed; allowed: an absolute path "
                "starting with the file system's mount name, /<mount_name>/<path>"
            )
        if self.access_mode not in FSX_ACCESS_MODES:
            out.append(f"{where}: access_mode={self.access_mode!r} is not allowed; allowed: ro, rw")
        if self.file_system_type != "FSxLustre":
            out.append(f"{where}: file_system_type={self.file_system_type!r} is not allowed; allowed: FSxLustre")
        return out

    def render(self, data_version: str | Dynamic) -> dict[str, Any]:
        return {
            "ChannelName": self.name,
            "DataSource": {
                "FileSystemDataSource": {
                    "FileSystemId": self.file_system_id,
                    "FileSystemType": self.file_system_type,
                    "DirectoryPath": with_version(self.directory_path, data_version),
                    "FileSystemAccessMode": self.access_mode,
                }
            },
            "InputMode": "File",
        }


Channel = S3Channel | FsxChannel


def channel_from_dict(data: Mapping[str, Any]) -> Channel:
    """The channel of a ``to_dict()`` serialization (``type`` = ``s3`` or ``fsx``)."""
    kind = data.get("type", "s3")
    cls: type[S3Channel] | type[FsxChannel]
    if kind == "s3":
        cls = S3Channel
    elif kind == "fsx":
        cls = FsxChannel
    else:
        raise ValidationError(WHERE, f"channel type={kind!r} is not allowed; allowed: 's3', 'fsx'")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(WHERE, f"channel keys {unknown} are not allowed; allowed: {', '.join(sorted(known))}")
    return cls(**dict(data))


def channel_template(channel: Channel) -> str:
    return channel.s3_uri if isinstance(channel, S3Channel) else channel.directory_path


#: The keys of an input a user names as an object (an execution's ``{"inputs": {"training": {...}}}``).
INPUT_KEYS = ("s3_uri", "input_mode")


def input_channel(name: str, value: Any) -> S3Channel:
    """The S3 channel a user names: ``value`` is its ``s3://bucket/prefix/`` or ``{"s3_uri": ..., "input_mode":
    ...}`` (the SageMaker SDK's ``fit({"training": "s3://..."})``, ``gpuctl train --input``, an execution's
    ``inputs``); input mode File unless given, as in SageMaker's ``TrainingInputMode`` and its SDK. Raises
    :class:`ValidationError` for another shape; the spec checks the name, the URI and the mode."""
    if isinstance(value, str):
        return S3Channel(name=name, s3_uri=value, input_mode=USER_INPUT_MODE)  # type: ignore[arg-type]
    if isinstance(value, Mapping) and isinstance(value.get("s3_uri"), str) and not set(value) - set(INPUT_KEYS):
        mode = value.get("input_mode", USER_INPUT_MODE)
        return S3Channel(name=name, s3_uri=value["s3_uri"], input_mode=mode)
    raise ValidationError(
        WHERE,
        f"inputs.{name}={value!r} is not allowed; allowed: an s3:// URI, or an object with s3_uri and optionally "
        f"input_mode ({', '.join(INPUT_MODES)})",
    )
