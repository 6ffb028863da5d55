"""How a client (a fleet instance, a notebook) mounts FSx for Lustre at boot: the one home of these rules.

:class:`LustreFileSystemLike` is what a client needs of a file system; :class:`LustreMount` holds the mount
settings (the file system, path, ports, zone, attempts, pause between attempts), validates them and renders them
as the environment of the boot scripts (``assets/gpu_lib.sh`` reads ``LUSTRE_*``). No CDK runtime is loaded here:
a ``Duration`` comes from the caller, which has loaded it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpu_constructs.deprecation import deprecated_attributes, warn_deprecated
from gpu_constructs.errors import fail, require_range

if TYPE_CHECKING:
    from aws_cdk import Duration
    from aws_cdk import aws_ec2 as ec2

__all__ = ["MOUNT_PATH_ALLOWED", "LustreFileSystemLike", "LustreMount", "is_mount_path"]

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


def is_mount_path(path: object) -> bool:
    """True for an absolute path of letters, digits and ``._-/`` that is not ``/`` and has no ``..``: a directory
    the boot script can create and mount on without escaping it."""
    return isinstance(path, str) and bool(_MOUNT_PATH_RE.match(path)) and ".." not in path and path.rstrip("/") != ""


def _check_mount_path(where: str, name: str, path: object) -> None:
    """The rule of :func:`is_mount_path`, raising; served as the deprecated ``check_mount_path``."""
    if not is_mount_path(path):
        raise fail(where, name, path, MOUNT_PATH_ALLOWED)


def _check_file_system(where: str, file_system: object) -> None:
    """Raise unless ``file_system`` provides :class:`LustreFileSystemLike` (served as ``check_file_system``)."""
    if not isinstance(file_system, LustreFileSystemLike):
        raise fail(where, "file_system", file_system, "an object with dns_name, mount_name and connections")


@dataclass(frozen=True)
class LustreMount:
    """An FSx for Lustre file system that a client mounts at boot, and how long its boot waits for it.

    The settings left ``None`` take the client construct's default (a fleet and a notebook differ: a notebook's
    start script must finish within SageMaker's 5-minute limit), so each default is written once, there.

    :param file_system: the file system (``aws_fsx.LustreFileSystem`` or the platform's Lustre construct).
    :param mount_path: an absolute directory, e.g. ``/fsx`` (default: the client's).
    :param open_ports: open Lustre traffic between the file system and the client's security group (default:
        True); False when the file system's owner already admits the group (duplicate rules fail to deploy).
    :param same_zone: a fleet launches only in the file system's Availability Zone when the file system reports
        one (default: True), avoiding inter-AZ transfer charges and latency on every Lustre RPC. A notebook
        has one subnet, which decides its zone.
    :param mount_attempts: mount attempts at boot, 1..360 (default: the client's).
    :param retry_interval: pause between attempts, 0..300 seconds (default: the client's).
    """

    file_system: LustreFileSystemLike
    mount_path: str | None = None
    open_ports: bool = True
    same_zone: bool = True
    mount_attempts: int | None = None
    retry_interval: Duration | None = None

    def with_defaults(self, *, mount_path: str, mount_attempts: int, retry_interval: Duration) -> LustreMount:
        """This mount with the settings it leaves ``None`` set to a client construct's defaults."""
        return dataclasses.replace(
            self,
            mount_path=mount_path if self.mount_path is None else self.mount_path,
            mount_attempts=mount_attempts if self.mount_attempts is None else self.mount_attempts,
            retry_interval=retry_interval if self.retry_interval is None else self.retry_interval,
        )

    def validate(
        self,
        where: str,
        *,
        prefix: str = "lustre_",
        max_wait: Duration | None = None,
        max_wait_reason: str = "",
    ) -> None:
        """Raise a ``ValidationError`` at ``where`` naming ``<prefix>mount_path`` (etc.) and what is allowed.

        Settings left ``None`` are not checked (the client's defaults are valid). ``max_wait`` bounds attempts x
        interval, for a client with a time limit on its start script; ``max_wait_reason`` says whose limit.
        """
        _check_file_system(where, self.file_system)
        if self.mount_path is not None:
            _check_mount_path(where, f"{prefix}mount_path", self.mount_path)
        attempts, interval = f"{prefix}mount_attempts", f"{prefix}retry_interval (seconds)"
        require_range(where, attempts, self.mount_attempts, minimum=1, maximum=MAX_MOUNT_ATTEMPTS)
        seconds = None if self.retry_interval is None else self.retry_interval.to_seconds()
        require_range(where, interval, seconds, minimum=0, maximum=MAX_RETRY_SECONDS)
        if max_wait is None or seconds is None or self.mount_attempts is None:
            return
        wait, limit = self.mount_attempts * seconds, max_wait.to_seconds()
        if wait > limit:
            raise fail(where, f"{attempts} x {interval}", wait, f"at most {limit:g}{max_wait_reason}")

    def check(
        self, where: str, *, prefix: str = "lustre_", max_wait_seconds: float | None = None, max_wait_reason: str = ""
    ) -> None:
        """Deprecated: use :meth:`validate` (``max_wait_seconds`` is now ``max_wait``, a ``Duration``)."""
        warn_deprecated("gpu_constructs.file_systems.lustre_mount.LustreMount.check", "LustreMount.validate")
        max_wait = None
        if max_wait_seconds is not None:
            from aws_cdk import Duration

            max_wait = Duration.seconds(max_wait_seconds)
        self.validate(where, prefix=prefix, max_wait=max_wait, max_wait_reason=max_wait_reason)

    def script_settings(self) -> dict[str, str]:
        """The boot scripts' ``LUSTRE_*`` environment (values may be CDK tokens); call on :meth:`with_defaults`."""
        assert self.mount_path is not None and self.mount_attempts is not None and self.retry_interval is not None
        return {
            "LUSTRE_DNS_NAME": self.file_system.dns_name,
            "LUSTRE_MOUNT_NAME": self.file_system.mount_name,
            "LUSTRE_MOUNT_PATH": self.mount_path,
            "LUSTRE_MOUNT_ATTEMPTS": str(self.mount_attempts),
            "LUSTRE_RETRY_SECONDS": str(int(self.retry_interval.to_seconds())),
        }


#: ``check_mount_path`` and ``check_file_system`` (deprecated): :func:`is_mount_path` and
#: :meth:`LustreMount.validate`.
__getattr__ = deprecated_attributes(
    __name__,
    {
        "check_mount_path": ("gpu_constructs.file_systems.lustre_mount.is_mount_path", lambda: _check_mount_path),
        "check_file_system": (
            "gpu_constructs.file_systems.lustre_mount.LustreMount.validate",
            lambda: _check_file_system,
        ),
    },
)
