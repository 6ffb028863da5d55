"""How a client (a fleet instance, a notebook) mounts FSx for Lustre at boot: the one home of these rules.

:class:`LustreFileSystemLike` is what a client needs of a file system; :class:`LustreMount` holds the mount
settings (path, attempts, pause between attempts), checks them and renders them as the environment of the
boot scripts (``assets/gpu_lib.sh`` reads ``LUSTRE_*``). No CDK runtime is loaded here, so the config model
builds the same value type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpu_constructs.errors import fail, require_range

if TYPE_CHECKING:
    from aws_cdk import aws_ec2 as ec2

__all__ = ["MOUNT_PATH_ALLOWED", "LustreFileSystemLike", "LustreMount", "check_file_system", "check_mount_path"]

_MOUNT_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
#: The "allowed" text of a mount path.
MOUNT_PATH_ALLOWED = "an absolute path of letters, digits and ._-/ other than / (e.g. /fsx)"
#: Bounds of the mount retries (a boot waits at most attempts x interval for the file system).
MAX_MOUNT_ATTEMPTS = 360
MAX_RETRY_SECONDS = 300


@runtime_checkable
class LustreFileSystemLike(Protocol):
    """What a fleet or notebook needs of an FSx for Lustre file system.

    ``aws_fsx.LustreFileSystem`` and the platform's Lustre construct both provide it: the DNS name and
    mount name to mount ``<dns_name>@tcp:/<mount_name>``, and ``connections`` whose default port is the
    Lustre range (TCP 988-1023).
    """

    @property
    def dns_name(self) -> str: ...

    @property
    def mount_name(self) -> str: ...

    @property
    def connections(self) -> ec2.Connections: ...


def check_mount_path(where: str, name: str, path: object) -> None:
    """Raise unless ``path`` is an absolute path of letters, digits and ``._-/``, not ``/`` and without ``..``."""
    if not isinstance(path, str) or not _MOUNT_PATH_RE.match(path) or ".." in path or path.rstrip("/") == "":
        raise fail(where, name, path, MOUNT_PATH_ALLOWED)


def check_file_system(where: str, file_system: object) -> None:
    """Raise unless ``file_system`` provides :class:`LustreFileSystemLike`."""
    if not isinstance(file_system, LustreFileSystemLike):
        raise fail(where, "file_system", file_system, "an object with dns_name, mount_name and connections")


@dataclass(frozen=True)
class LustreMount:
    """Where a client mounts FSx for Lustre and how long its boot waits for the file system.

    :param mount_path: an absolute directory (e.g. ``/fsx``).
    :param mount_attempts: mount attempts at boot (1..360).
    :param retry_seconds: pause between attempts, seconds (0..300).
    """

    mount_path: str = "/fsx"
    mount_attempts: int = 30
    retry_seconds: float = 10

    def check(
        self, where: str, *, prefix: str = "lustre_", max_wait_seconds: float | None = None, max_wait_reason: str = ""
    ) -> None:
        """Raise a ``ValidationError`` at ``where`` naming ``<prefix>mount_path`` (etc.) and what is allowed.

        ``max_wait_seconds`` bounds attempts x interval (a client with a time limit on its start script).
        """
        check_mount_path(where, f"{prefix}mount_path", self.mount_path)
        attempts, interval = f"{prefix}mount_attempts", f"{prefix}retry_interval (seconds)"
        require_range(where, attempts, self.mount_attempts, minimum=1, maximum=MAX_MOUNT_ATTEMPTS)
        require_range(where, interval, self.retry_seconds, minimum=0, maximum=MAX_RETRY_SECONDS)
        wait = self.mount_attempts * self.retry_seconds
        if max_wait_seconds is not None and wait > max_wait_seconds:
            raise fail(where, f"{attempts} x {interval}", wait, f"at most {max_wait_seconds:g}{max_wait_reason}")

    def script_settings(self, file_system: LustreFileSystemLike) -> dict[str, str]:
        """The boot scripts' ``LUSTRE_*`` environment (values may be CDK tokens)."""
        return {
            "LUSTRE_DNS_NAME": file_system.dns_name,
            "LUSTRE_MOUNT_NAME": file_system.mount_name,
            "LUSTRE_MOUNT_PATH": self.mount_path,
            "LUSTRE_MOUNT_ATTEMPTS": str(self.mount_attempts),
            "LUSTRE_RETRY_SECONDS": str(int(self.retry_seconds)),
        }
