"""The limits of a GPU notebook that the config model checks too: its ML storage volume and the S3 key of a
``gpuctl`` wheel. No CDK runtime is loaded here."""

from __future__ import annotations

from gpu_constructs.errors import fail, require_range
from gpu_constructs.packaging.wheel import WHEEL_NAME_ALLOWED, WHEEL_NAME_RE
from gpu_constructs.s3_keys import has_key_characters, is_relative_key

__all__ = ["MAX_VOLUME_GIB", "MIN_VOLUME_GIB", "check_package_key", "check_volume_size"]

#: SageMaker notebook ML storage volume (CreateNotebookInstance VolumeSizeInGB): 5 to 16384 GiB.
MIN_VOLUME_GIB = 5
MAX_VOLUME_GIB = 16384
#: The punctuation of a package key: the platform's key characters without ``'`` (no wheel name has it) and with
#: ``+``, which a wheel's local version has (``1.2.0+cu124``).
_PACKAGE_KEY_CHARACTERS = "!_.*()/=+-"


def check_volume_size(where: str, size: object, name: str = "volume_size_gib") -> None:
    if isinstance(size, bool) or not isinstance(size, int):
        raise fail(where, name, size, f"a whole number of GiB from {MIN_VOLUME_GIB} to {MAX_VOLUME_GIB}")
    require_range(where, name, size, minimum=MIN_VOLUME_GIB, maximum=MAX_VOLUME_GIB)


def check_package_key(where: str, key: str, name: str = "package (bucket key)") -> None:
    """A relative S3 key whose last part is a wheel file name (e.g. ``tools/<wheel file>``)."""
    if not key or not is_relative_key(key) or not has_key_characters(key, _PACKAGE_KEY_CHARACTERS):
        raise fail(where, name, key, "a relative S3 key such as 'tools/<wheel file>'")
    if not WHEEL_NAME_RE.match(key.rsplit("/", 1)[-1]):
        raise fail(where, name, key, f"a key whose last part is {WHEEL_NAME_ALLOWED}")
