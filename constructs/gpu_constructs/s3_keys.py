"""S3 object keys, key prefixes and ``s3://`` URIs: the one place their rules are written.

Every construct and config model that takes a key or a prefix checks and normalises it here, so a value is
accepted or refused the same way wherever it is set. No CDK runtime is loaded here: the config models, the
catalog and the CLI import this module without ``aws_cdk``.

The rules follow the Amazon S3 User Guide, "Naming Amazon S3 objects"
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html):

- a key is a UTF-8 string of at most 1,024 bytes, prefixes and delimiters included;
- S3 has no folders: the console and ``ListObjectsV2`` read ``/`` as a delimiter, so ``data/`` is a prefix and
  ``data`` is a key (a policy that grants ``data*`` would also grant ``database/``);
- the "safe characters" are letters, digits and ``! - _ . * ' ( )``; others "might require special handling"
  (``=``, ``+``, ``&``, ``@``, space, ...) or should be avoided (``\\``, ``{``, ``%``, ...);
- a key may contain ``../`` and may start with ``/``, but tools that map keys onto file paths (the console's
  download, the AWS CLI, FSx for Lustre's data repository link, SageMaker's channel download) resolve them:
  such keys are refused here, so no prefix can reach outside where it points.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpu_constructs.errors import fail

if TYPE_CHECKING:  # a construct path is read only from a construct passed in
    from constructs import Construct

__all__ = [
    "BUCKET_NAME_RE",
    "KEY_PREFIX_ALLOWED",
    "KEY_PREFIX_CHARACTERS",
    "as_key_prefix",
    "check_key_prefix",
    "has_key_characters",
    "is_key_prefix",
    "is_relative_key",
    "join_key_prefix",
    "split_s3_uri",
]

#: The punctuation a platform key prefix may use besides letters and digits: S3's safe characters
#: (``! - _ . * ' ( )``), the ``/`` delimiter, and ``=`` for Hive-style partition folders (``date=2024-01-01/``),
#: which S3 lists as needing special handling only in URLs, where the SDKs and SageMaker percent-encode it.
KEY_PREFIX_CHARACTERS = "!_.*'()/=-"

#: What :func:`check_key_prefix` and the config models say a prefix may be.
KEY_PREFIX_ALLOWED = f"a relative S3 key prefix of letters, digits and {KEY_PREFIX_CHARACTERS} without '..'"

#: General purpose bucket names (S3 User Guide, "General purpose bucket naming rules"): 3-63 lowercase letters,
#: digits, dots and hyphens, starting and ending with a letter or digit.
BUCKET_NAME_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")

_S3_URI_RE = re.compile(r"s3://(?P<bucket>[^/]*)/(?P<key>.*)")


def _character_class(characters: str) -> re.Pattern[str]:
    return re.compile(f"[A-Za-z0-9{re.escape(characters)}]*")


_CHARACTER_CLASSES: dict[str, re.Pattern[str]] = {KEY_PREFIX_CHARACTERS: _character_class(KEY_PREFIX_CHARACTERS)}


def is_relative_key(key: str) -> bool:
    """True when ``key`` neither starts with ``/`` nor contains ``..``.

    S3 itself accepts both (object-keys.html: any UTF-8 sequence), but the tools that turn keys into file paths
    resolve them, so a prefix such as ``../x/`` or ``/x/`` would name something other than it appears to.
    """
    return not key.startswith("/") and ".." not in key


def has_key_characters(key: str, characters: str = KEY_PREFIX_CHARACTERS) -> bool:
    """True when ``key`` uses only letters, digits and ``characters`` (default: :data:`KEY_PREFIX_CHARACTERS`).

    object-keys.html names letters, digits and ``! - _ . * ' ( )`` safe in every application and protocol; a
    caller passes its own ``characters`` only where a name it must accept needs more (a wheel file name's
    ``+`` of a local version, for example).
    """
    pattern = _CHARACTER_CLASSES.get(characters)
    if pattern is None:
        pattern = _CHARACTER_CLASSES.setdefault(characters, _character_class(characters))
    return pattern.fullmatch(key) is not None


def is_key_prefix(prefix: str, *, allow_empty: bool = True, require_trailing_slash: bool = False) -> bool:
    """True when ``prefix`` is a relative key prefix of :data:`KEY_PREFIX_CHARACTERS` (object-keys.html).

    ``allow_empty`` (default: True): ``''`` means the whole bucket. ``require_trailing_slash`` (default: False):
    a non-empty prefix must end in ``/``, the delimiter, so it names a folder and not every key that merely
    starts with the same letters.
    """
    if not prefix:
        return allow_empty
    if require_trailing_slash and not prefix.endswith("/"):
        return False
    return is_relative_key(prefix) and has_key_characters(prefix)


def check_key_prefix(where: Construct | str, name: str, prefix: str) -> None:
    """Raise the standard error (``<where>: <name>=<prefix!r> is not allowed; allowed:`` :data:`KEY_PREFIX_ALLOWED`)
    unless :func:`is_key_prefix` accepts ``prefix`` (``''``, the whole bucket, is accepted).

    ``where`` is a construct (its path is used) or a config location; ``name`` is the setting as the caller's
    user knows it (``prefix``, ``data_repository.prefix``, ...).
    """
    if not is_key_prefix(prefix):
        raise fail(where, name, prefix, KEY_PREFIX_ALLOWED)


def as_key_prefix(prefix: str) -> str:
    """``prefix`` ending in the ``/`` delimiter (object-keys.html, "Choosing object key names"); ``''`` (the
    whole bucket) stays ``''``.

    Without the delimiter a grant on ``data*`` would also cover ``database/``: every prefix a policy or a data
    repository link names goes through here.
    """
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def join_key_prefix(prefix: str, name: str) -> str:
    """``<prefix>/<name>/``: the folder ``name`` under ``prefix`` (a missing ``/`` after ``prefix`` added)."""
    return f"{as_key_prefix(prefix)}{name}/"


def split_s3_uri(uri: str) -> tuple[str, str] | None:
    """``(bucket, key)`` of ``s3://<bucket>/<key>`` with a valid bucket name and a non-empty key, else None.

    The key is returned as written (object-keys.html: any UTF-8 sequence but a line break here, which no
    configuration means); callers apply their own key rules.
    """
    match = _S3_URI_RE.fullmatch(uri)
    if match is None or not match["key"] or not BUCKET_NAME_RE.fullmatch(match["bucket"]):
        return None
    return match["bucket"], match["key"]
