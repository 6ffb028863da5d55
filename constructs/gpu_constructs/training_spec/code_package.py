"""The two code packages of a training job, built without the CDK: the user's source folder and the launcher.

A training job gets its code as two File-mode input channels (see :mod:`.code`): ``code`` holds
:data:`CODE_ARCHIVE_NAME` (``sourcedir.tar.gz``), a ``.tar.gz`` of the user's source folder built by
:func:`package_source_dir`, and ``sm_drivers`` holds :data:`DRIVER_NAME` (``gpu_train_driver.pyz``), the
platform's launcher as a zipapp built by :func:`build_driver`. The CDK constructs ship both as S3 assets at
synth (:func:`ensure_source_package` and :func:`ensure_driver` write each once per content to a stable
path); ``gpuctl train`` uploads the source package at launch under :func:`code_s3_key`.

**Byte-for-byte deterministic.** The same folder gives the same bytes on every checkout, so the asset hash
and the S3 key change only when the code does: entries sorted by path, modification time 0, uid/gid 0, no
user or group names, mode 0644 (0755 for a file with an execute bit), no directory entries, POSIX.1-2001
(PAX) format; the gzip header has modification time 0 and no file name (RFC 1952 ``MTIME``/``FNAME``). The
compressed bytes come from the machine's zlib at level 9, so two zlib builds that compress differently give
two keys for the same content: one more upload, never a wrong package.

**What goes in.** Every regular file under the folder except those the ignore rules exclude. Symbolic links
are refused (the package never follows one: what it points to may lie outside the folder or differ between
machines); sockets, pipes and devices are refused too. The built-in rules (:data:`DEFAULT_IGNORE`) exclude
version control, caches and virtual environments; a ``wheels/`` folder is *not* excluded (``gpuctl vendor``
puts the wheels of ``requirements.txt`` there for jobs without a package index).

**``.gpuignore``** (optional, at the folder's top) adds rules after the built-in ones, in a subset of the
gitignore syntax (https://git-scm.com/docs/gitignore, "PATTERN FORMAT"); exactly this is supported:

* one pattern per line; blank lines and lines starting with ``#`` are skipped; trailing spaces are dropped;
* ``!pattern`` re-includes what an earlier rule excluded; the last matching rule decides. As in git, a file
  inside an excluded folder cannot be re-included (the folder is never read): exclude ``data/**`` rather
  than ``data/`` to re-include ``!data/labels.json``;
* ``pattern/`` (trailing slash) matches folders only;
* a pattern with a ``/`` at its start or in its middle is anchored at the folder's top (``/build`` and
  ``src/gen`` match only there); one without (``*.ckpt``, ``logs/``) matches at any depth;
* ``*`` matches any run of characters except ``/``; ``?`` one character except ``/``;
* ``**``: a leading ``**/`` matches in every folder, a trailing ``/**`` everything inside, ``/**/`` zero or
  more folders; any other ``**`` is a ``*``;
* ``\\`` takes the next character literally (``\\#notes``, ``\\!important``, ``\\[x].txt``).

Character classes (``[abc]``, ``[a-z]``) are not supported and refused with an error naming the line, so a
pattern never means something else than it seems to.

**Size.** The code channel is downloaded to every host at every job start, so the package holds at most
:data:`MAX_SOURCE_BYTES` (100 MiB) of uncompressed files; data belongs in an input channel.

All errors are :class:`~gpu_constructs.errors.ValidationError` with ``where`` = ``"code package"``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gpu_constructs.errors import ValidationError, is_token
from gpu_constructs.packaging.runtime_files import shipped_files
from gpu_constructs.packaging.wheel import WHEEL_NAME_ALLOWED, WHEEL_NAME_RE, _entry, write_once
from gpu_constructs.training_spec.code import entry_point_problem

__all__ = [
    "CODE_ARCHIVE_NAME",
    "DEFAULT_CODE_DIR",
    "DEFAULT_IGNORE",
    "DEFAULT_RUNTIME_DIR",
    "DEFAULT_WHEELS_DIR",
    "DRIVER_NAME",
    "IGNORE_FILE",
    "MAX_SOURCE_BYTES",
    "PACKAGED_RUNTIME_DIR",
    "REPOSITORY_RUNTIME_DIR",
    "WHERE",
    "CodePackage",
    "IgnoreRule",
    "build_driver",
    "code_s3_key",
    "ensure_driver",
    "ensure_source_package",
    "package_source_dir",
    "parse_ignore_rules",
    "resolve_runtime_dir",
]

WHERE = "code package"
#: The name of the source package in the ``code`` channel (the SageMaker Python SDK's name for it).
CODE_ARCHIVE_NAME = "sourcedir.tar.gz"
#: The launcher zipapp in the ``sm_drivers`` channel.
DRIVER_NAME = "gpu_train_driver.pyz"
#: The most uncompressed bytes a source package may hold (100 MiB).
MAX_SOURCE_BYTES = 100 * 1024 * 1024
#: The optional rules file at the source folder's top.
IGNORE_FILE = ".gpuignore"
#: The built-in rules, applied before ``.gpuignore`` (which may re-include with ``!``).
DEFAULT_IGNORE: tuple[str, ...] = (
    ".git/",
    "__pycache__/",
    "*.pyc",
    ".venv/",
    "venv/",
    ".ipynb_checkpoints/",
    ".DS_Store",
    "*.egg-info/",
    ".mypy_cache/",
    ".pytest_cache/",
)

#: The library's copy of the runtime (``gpu_train/``, ``default_code/``, ``vendor/``): package data that
#: ``constructs/setup.py`` copies from the repository's ``containers/training`` into every wheel built in a checkout.
PACKAGED_RUNTIME_DIR = Path(__file__).resolve().parents[1] / "_runtime" / "training"
#: The runtime in a checkout of the repository (this file is ``constructs/gpu_constructs/training_spec/...``):
#: what the repository and an editable install read.
REPOSITORY_RUNTIME_DIR = Path(__file__).resolve().parents[3] / "containers" / "training"


def resolve_runtime_dir(packaged: Path = PACKAGED_RUNTIME_DIR, repository: Path = REPOSITORY_RUNTIME_DIR) -> Path:
    """The folder of the training runtime: ``packaged`` (an installed library) when it is a folder, else
    ``repository`` (a checkout), else ``packaged`` (missing: :func:`build_driver` and :func:`package_source_dir`
    then name both places)."""
    if packaged.is_dir():
        return packaged
    return repository if repository.is_dir() else packaged


#: The folder that holds the ``gpu_train`` runtime package (:func:`resolve_runtime_dir`, at import).
DEFAULT_RUNTIME_DIR = resolve_runtime_dir()
#: The vendored runtime wheels (``make vendor-runtime``).
DEFAULT_WHEELS_DIR = DEFAULT_RUNTIME_DIR / "vendor"
#: The code folder of the built-in trainer: what a job runs when no source folder is given.
DEFAULT_CODE_DIR = DEFAULT_RUNTIME_DIR / "default_code"

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*$")
_TOP_FILES_SHOWN = 20
_LARGEST_SHOWN = 5


def _fail(detail: str) -> ValidationError:
    return ValidationError(WHERE, detail)


def _missing_runtime(what: str, path: Path) -> ValidationError | None:
    """The error for a missing default ``path`` (the runtime or one of its folders), naming both places looked in;
    ``None`` when ``path`` exists or is not one of the defaults."""
    defaults = {DEFAULT_RUNTIME_DIR, DEFAULT_WHEELS_DIR, DEFAULT_CODE_DIR}
    if path not in defaults or path.is_dir():
        return None
    return _fail(
        f"{what} {path} does not exist: the platform's training runtime (gpu_train/, default_code/, vendor/) is "
        f"in neither place the library looks: {PACKAGED_RUNTIME_DIR} (the installed library's copy) and "
        f"{REPOSITORY_RUNTIME_DIR} (a checkout of the repository); allowed: gpu-constructs installed from a "
        'checkout (pip install "./constructs" copies containers/training into the package, pip install -e reads '
        "it in place), or runtime_dir/wheels_dir/source_dir arguments naming folders that exist"
    )


def _size(n: int) -> str:
    """``n`` bytes for people: ``512 B``, ``12.0 KiB``, ``101.3 MiB``, ``2.50 GiB``."""
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KiB"
    if n < 1024**3:
        return f"{n / 1024**2:.1f} MiB"
    return f"{n / 1024**3:.2f} GiB"


# --------------------------------------------------------------------------------------------------
# Ignore rules
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IgnoreRule:
    """One line of the ignore rules, compiled.

    :param pattern: the line as written (``!`` and trailing ``/`` included).
    :param source: where it comes from: ``built-in`` or ``.gpuignore:<line>``.
    """

    pattern: str
    source: str
    regex: re.Pattern[str] = field(repr=False)
    negate: bool
    dir_only: bool

    def matches(self, path: str, is_dir: bool) -> bool:
        """Whether the rule matches ``path`` (relative, ``/``-separated) of a folder (``is_dir``) or file."""
        return (is_dir or not self.dir_only) and self.regex.fullmatch(path) is not None


def _segment_regex(segment: str, where: str) -> str:
    out: list[str] = []
    chars = iter(segment)
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None:
                raise _fail(f"{where}: a pattern may not end with a lone backslash; write \\\\ for a backslash")
            out.append(re.escape(escaped))
        elif char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            raise _fail(
                f"{where}: character classes ([...]) are not supported in {IGNORE_FILE}; "
                "allowed: *, ?, ** and \\ to take the next character literally (\\[ for a '[' in a name)"
            )
        else:
            out.append(re.escape(char))
    return "".join(out)


def _compile(line: str, source: str) -> IgnoreRule | None:
    """The rule of one line (``None`` for a blank line or a comment)."""
    text = line.rstrip("\r\n")
    while text.endswith(" ") and not text.endswith("\\ "):
        text = text[:-1]
    if not text or text.startswith("#"):
        return None
    where = f"{source}: {line.strip()!r}"
    body, negate = (text[1:], True) if text.startswith("!") else (text, False)
    dir_only = body.endswith("/")
    body = body.rstrip("/") if dir_only else body
    anchored = "/" in body
    body = body.lstrip("/")
    if not body:
        raise _fail(f"{where} matches nothing; allowed: a pattern such as *.ckpt, data/, /build or logs/**/*.txt")
    segments = body.split("/")
    parts: list[str] = [] if anchored else ["(?:.*/)?"]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".+" if last else "(?:.*/)?")
        else:
            parts.append(_segment_regex(segment, where) + ("" if last else "/"))
    return IgnoreRule(
        pattern=text, source=source, regex=re.compile("".join(parts), re.DOTALL), negate=negate, dir_only=dir_only
    )


def parse_ignore_rules(text: str, source: str = IGNORE_FILE) -> tuple[IgnoreRule, ...]:
    """The rules of a ``.gpuignore`` text (see the module's documentation for the syntax)."""
    rules = (_compile(line, f"{source}:{number}") for number, line in enumerate(text.splitlines(), start=1))
    return tuple(rule for rule in rules if rule is not None)


_BUILT_IN_RULES = tuple(rule for rule in (_compile(p, "built-in") for p in DEFAULT_IGNORE) if rule is not None)


def _deciding_rule(rules: tuple[IgnoreRule, ...], path: str, is_dir: bool) -> IgnoreRule | None:
    """The last rule that matches ``path`` (``None`` when none does)."""
    for rule in reversed(rules):
        if rule.matches(path, is_dir):
            return rule
    return None


def _excluded_by(rules: tuple[IgnoreRule, ...], path: str) -> IgnoreRule | None:
    """The rule that leaves the file ``path`` out of the package, through the file or one of its folders."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        rule = _deciding_rule(rules, "/".join(parts[:depth]), depth < len(parts))
        if rule is not None and not rule.negate:
            return rule
    return None


def _rules_of(root: Path) -> tuple[IgnoreRule, ...]:
    ignore_file = root / IGNORE_FILE
    if ignore_file.is_symlink() or not ignore_file.exists():
        return _BUILT_IN_RULES
    try:
        text = ignore_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"cannot read {ignore_file}: {exc}; allowed: a UTF-8 text file of patterns") from None
    return _BUILT_IN_RULES + parse_ignore_rules(text)


# --------------------------------------------------------------------------------------------------
# The source package
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodePackage:
    """A packaged source folder.

    :param data: the ``.tar.gz`` bytes.
    :param sha256: the SHA-256 of ``data`` (hex): the content address of the package.
    :param files: the packaged paths, relative and ``/``-separated, in archive order.
    :param size_bytes: the total size of the packaged files, uncompressed.
    :param entry_point: the script the job runs, relative to the folder (normalized: ``src/./train.py`` ->
        ``src/train.py``).
    """

    data: bytes = field(repr=False)
    sha256: str
    files: tuple[str, ...]
    size_bytes: int
    entry_point: str


@dataclass(frozen=True)
class _File:
    path: str
    source: Path
    size: int
    executable: bool


def _walk(root: Path, rules: tuple[IgnoreRule, ...]) -> list[_File]:
    """Every file of ``root`` the rules keep, sorted by path; refuses links and special files."""
    found: list[_File] = []
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise _fail(f"cannot read the folder {folder}: {exc}") from None
        for entry in entries:
            path = prefix + entry.name
            try:
                path.encode("utf-8")
            except UnicodeEncodeError:
                raise _fail(
                    f"{Path(entry.path)!s} has a name that is not valid UTF-8; rename it or add it to {IGNORE_FILE}"
                ) from None
            is_dir = entry.is_dir()  # follows a link, so a linked folder matches a folder rule such as .venv/
            rule = _deciding_rule(rules, path, is_dir)
            if rule is not None and not rule.negate:
                continue
            if entry.is_symlink():
                raise _fail(
                    f"{path} is a symbolic link (-> {os.readlink(entry.path)}); the code package does not follow "
                    f"links: replace it with the file or folder it points to, or exclude it in {IGNORE_FILE}"
                )
            if is_dir:
                pending.append((Path(entry.path), path + "/"))
                continue
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise _fail(
                    f"{path} is neither a regular file nor a folder (a socket, pipe or device); "
                    f"remove it or exclude it in {IGNORE_FILE}"
                )
            found.append(_File(path, Path(entry.path), info.st_size, bool(info.st_mode & 0o111)))
    return sorted(found, key=lambda f: f.path)


def _normalized_entry_point(entry_point: str) -> str:
    problem = entry_point_problem(entry_point)
    if problem is not None:
        raise _fail(problem)
    return PurePosixPath(*[part for part in entry_point.split("/") if part not in ("", ".")]).as_posix()


def _check_entry_point(root: Path, entry_point: str, files: list[_File], rules: tuple[IgnoreRule, ...]) -> str:
    normalized = _normalized_entry_point(entry_point)
    if any(f.path == normalized for f in files):
        return normalized
    top_level = [f.path for f in files if "/" not in f.path and f.path.endswith(".py")]
    shown = ", ".join(top_level[:_TOP_FILES_SHOWN]) + (" ..." if len(top_level) > _TOP_FILES_SHOWN else "")
    listing = f"top-level .py files: {shown}" if top_level else "the folder has no top-level .py file"
    if (root / normalized).is_file():
        rule = _excluded_by(rules, normalized)
        why = f"{rule.source} {rule.pattern!r}" if rule else "an ignore rule"
        raise _fail(f"entry_point={entry_point!r} is excluded from the package by {why}; {listing}")
    raise _fail(f"entry_point={entry_point!r} is not a file in {root}; allowed: a .py file inside it; {listing}")


def _check_size(root: Path, files: list[_File], max_bytes: int) -> int:
    total = sum(f.size for f in files)
    if total > max_bytes:
        largest = sorted(files, key=lambda f: (-f.size, f.path))[:_LARGEST_SHOWN]
        listing = ", ".join(f"{f.path} ({_size(f.size)})" for f in largest)
        raise _fail(
            f"{root} holds {_size(total)} ({total} bytes) of files, more than the limit of {_size(max_bytes)} "
            f"({max_bytes} bytes); largest: {listing}. The code channel is downloaded to every host at every "
            f"job start: exclude what the job does not need in {root / IGNORE_FILE} (e.g. data/, *.ckpt), and "
            "give data to the job as an input channel"
        )
    return total


def _tar_gz(members: list[tuple[str, bytes, int]]) -> bytes:
    """A ``.tar.gz`` of (path, bytes, mode) with every varying header field fixed."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="", compresslevel=9) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as archive,
    ):
        for path, data, mode in members:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mtime = 0
            info.mode = mode
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def package_source_dir(source_dir: Path | str, entry_point: str, *, max_bytes: int = MAX_SOURCE_BYTES) -> CodePackage:
    """The deterministic ``.tar.gz`` of ``source_dir`` (see the module's documentation for what goes in).

    Raises :class:`~gpu_constructs.errors.ValidationError` when the folder is missing, holds a symbolic link,
    ``.gpuignore`` has a pattern it does not support, ``entry_point`` is not a kept ``.py`` file of the folder,
    or the files add up to more than ``max_bytes``.
    """
    root = Path(source_dir)
    missing = _missing_runtime("the built-in training code folder", root)
    if missing is not None:
        raise missing
    if not root.is_dir():
        raise _fail(f"source_dir={str(source_dir)!r} is not a folder; allowed: the folder of the training code")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise _fail(f"max_bytes={max_bytes!r} is not allowed; allowed: a positive number of bytes")
    rules = _rules_of(root)
    files = _walk(root, rules)
    normalized = _check_entry_point(root, entry_point, files, rules)
    _check_size(root, files, max_bytes)
    members: list[tuple[str, bytes, int]] = []
    try:
        for f in files:
            members.append((f.path, f.source.read_bytes(), 0o755 if f.executable else 0o644))
    except OSError as exc:
        raise _fail(f"cannot read {exc.filename}: {exc.strerror}") from None
    data = _tar_gz(members)
    return CodePackage(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        files=tuple(path for path, _, _ in members),
        size_bytes=sum(len(content) for _, content, _ in members),
        entry_point=normalized,
    )


def code_key_prefix(prefix: str) -> str:
    """``code/<prefix>/``: where the code packages of the setup whose job-name prefix is ``prefix`` live (its job
    role reads them; ``gpuctl train --source-dir`` writes them)."""
    return f"code/{prefix}/"


def code_s3_key(prefix: str, package: CodePackage) -> str:
    """``code/<prefix>/<sha256>/sourcedir.tar.gz``: one object per content.

    The ``code`` channel's S3 prefix is exactly this key, so SageMaker downloads only this object ("S3Prefix:
    SageMaker uses all objects that match the specified key name prefix", API reference ``S3DataSource``) into
    ``/opt/ml/input/data/code/``. A CDK token as ``prefix`` is passed through unchecked.
    """
    if not is_token(prefix):
        segments = prefix.split("/") if isinstance(prefix, str) else []
        if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix) or {".", ".."} & set(segments):
            raise _fail(
                f"prefix={prefix!r} is not allowed; allowed: letters, digits, '.', '_' and '-', in '/'-separated "
                "parts without empty, '.' or '..' parts, e.g. the setup's job-name prefix"
            )
    return f"{code_key_prefix(prefix)}{package.sha256}/{CODE_ARCHIVE_NAME}"


def ensure_source_package(
    source_dir: Path | str,
    entry_point: str,
    *,
    max_bytes: int = MAX_SOURCE_BYTES,
    cache_dir: Path | None = None,
) -> tuple[Path, CodePackage]:
    """:func:`package_source_dir`, written once per content as ``<cache>/<hash>/sourcedir.tar.gz`` (see
    :func:`gpu_constructs.packaging.wheel.write_once`): a stable path for a CDK S3 asset."""
    package = package_source_dir(source_dir, entry_point, max_bytes=max_bytes)
    return write_once(CODE_ARCHIVE_NAME, package.data, cache_dir, kind="code"), package


# --------------------------------------------------------------------------------------------------
# The launcher zipapp
# --------------------------------------------------------------------------------------------------


def _runtime_files(package_dir: Path) -> list[tuple[str, Path]]:
    """(path in the zip, file) of every module and data file of ``gpu_train``, without caches and dot files."""
    return [(name, package_dir.parent / name) for name in shipped_files(package_dir.parent, "gpu_train")]


def build_driver(runtime_dir: Path = DEFAULT_RUNTIME_DIR, wheels_dir: Path = DEFAULT_WHEELS_DIR) -> tuple[str, bytes]:
    """The launcher zipapp: its file name (:data:`DRIVER_NAME`) and bytes, the same for the same sources.

    ``python3 gpu_train_driver.pyz ARGS`` runs ``__main__.py`` from the archive with the archive first on
    ``sys.path`` (Python docs, ``zipapp``: "The Python Zip Application Archive Format"), so ``gpu_train`` imports
    from it. The archive holds:

    * ``__main__.py``: the bytes of ``<runtime_dir>/gpu_train/bootstrap.py``;
    * ``gpu_train/...``: every file of ``<runtime_dir>/gpu_train`` (modules and package data), without
      ``__pycache__``, ``.pyc`` and dot files;
    * ``wheels/<name>.whl``: every wheel in ``wheels_dir`` (the launcher installs those the image lacks).

    Entries are sorted in that order, stored uncompressed with the zip epoch as timestamp (as
    :mod:`gpu_constructs.packaging.wheel` writes them).
    """
    for what, folder in (("the runtime folder", Path(runtime_dir)), ("the vendored wheels folder", Path(wheels_dir))):
        missing = _missing_runtime(what, folder)
        if missing is not None:
            raise missing
    package_dir = Path(runtime_dir) / "gpu_train"
    bootstrap = package_dir / "bootstrap.py"
    if not bootstrap.is_file():
        raise _fail(
            f"the launcher's entry {bootstrap} does not exist; allowed: a runtime folder whose gpu_train/ "
            "package holds bootstrap.py"
        )
    wheels_dir = Path(wheels_dir)
    if not wheels_dir.is_dir():
        raise _fail(f"wheels_dir={str(wheels_dir)!r} is not a folder; allowed: the folder of vendored wheels")
    wheels = sorted(p for p in wheels_dir.iterdir() if p.suffix == ".whl")
    for wheel in wheels:
        if not WHEEL_NAME_RE.match(wheel.name):
            raise _fail(f"{wheel} is not a wheel file name; allowed: {WHEEL_NAME_ALLOWED}")
    entries = [("__main__.py", bootstrap)]
    entries += _runtime_files(package_dir)
    entries += [(f"wheels/{wheel.name}", wheel) for wheel in wheels]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, path in entries:
            archive.writestr(_entry(name), path.read_bytes())
    return DRIVER_NAME, buffer.getvalue()


def ensure_driver(
    runtime_dir: Path = DEFAULT_RUNTIME_DIR, wheels_dir: Path = DEFAULT_WHEELS_DIR, cache_dir: Path | None = None
) -> Path:
    """:func:`build_driver`, written once per content as ``<cache>/<hash>/gpu_train_driver.pyz`` (see
    :func:`gpu_constructs.packaging.wheel.write_once`): a stable path for a CDK S3 asset."""
    name, data = build_driver(runtime_dir, wheels_dir)
    return write_once(name, data, cache_dir, kind="driver")
