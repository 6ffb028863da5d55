"""The base of the file systems that training jobs mount as input channels (Lustre and EFS, new or imported).

Kept apart from the Lustre and EFS modules, as aws-cdk keeps ``FileSystemBase`` apart in aws-fsx: each file
system module builds on it, and neither defines what the other shares.
"""

from __future__ import annotations

from typing import Any, ClassVar

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from gpu_constructs.errors import path_of
from gpu_constructs.file_systems.fsx_facts import AccessMode, FileSystemType, sagemaker_channel


class FileSystemChannelSource(Construct):
    """A file system construct (Lustre or EFS, new or imported) that training jobs mount as an input channel.

    A subclass sets :attr:`channel_file_system_type` and :meth:`_channel_target`; ``connections`` returns the
    ``ec2.Connections`` it keeps in ``_connections``.
    """

    #: ``FileSystemType`` of the channel's ``FileSystemDataSource``.
    channel_file_system_type: ClassVar[FileSystemType]
    _connections: ec2.Connections

    @property
    def connections(self) -> ec2.Connections:
        """The file system's security groups; open them to clients with ``allow_clients``."""
        return self._connections

    def _channel_target(self, path: str | None) -> tuple[str, str]:
        """``(file system id, DirectoryPath)`` of the channel that mounts ``path`` (None: the default).

        Each file system class defines it (Lustre: ``/<mount name>/<path>``; EFS: an absolute path).
        """
        raise TypeError(f"{type(self).__name__} does not define the SageMaker channel target of its file system")

    def sagemaker_channel(
        self,
        channel_name: str = "training",
        *,
        path: str | None = None,
        access_mode: AccessMode = "ro",
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """The ``CreateTrainingJob`` channel that mounts ``path`` of this file system (:func:`sagemaker_channel`);
        ``path`` is as the file system type reads it (default: its default directory)."""
        file_system_id, directory_path = self._channel_target(path)
        return sagemaker_channel(
            file_system_id=file_system_id,
            file_system_type=self.channel_file_system_type,
            directory_path=directory_path,
            channel_name=channel_name,
            access_mode=access_mode,
            content_type=content_type,
            where=path_of(self),
        )
