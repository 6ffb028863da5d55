"""``__main__.py`` of the training driver zipapp ``gpu_train_driver.pyz``: ``python3 gpu_train_driver.pyz ARGS``
runs ``python -m gpu_train ARGS`` (usually ``launch --entry-point ...``) in an image that does not have
``gpu_train``, such as a stock AWS PyTorch or TensorFlow training image.

The archive holds this file as ``__main__.py``, the ``gpu_train`` package and ``wheels/*.whl``: the packages
``gpu_train`` needs that such images may lack (xxhash, built per CPython version and platform, and the
pure-Python nvidia-ml-py). A zipapp is a zip file Python runs directly (https://docs.python.org/3/library/zipapp.html),
but compiled extensions cannot be imported from inside a zip and child processes (torchrun, the training
script) need real directories, so this file:

1. finds its own archive (``sys.argv[0]``) and extracts it once to
   ``<tempdir>/gpu_train_driver-<first 16 hex digits of the archive's SHA-256>``: into a temporary directory
   first, then ``os.replace`` (atomic); when another process was faster, its copy is used;
2. for each wheel whose top-level module (``*.dist-info/top_level.txt``, else its first top-level entry) this
   interpreter cannot import, unzips the wheel that fits the interpreter into ``<dir>/site``: Python tag
   ``cpXY`` for CPython X.Y (or ``abi3`` from an older ``cpXY``, or ``py3-none-any``), platform ``any`` or one
   naming ``platform.machine()`` (see "Platform compatibility tags",
   https://packaging.python.org/en/latest/specifications/platform-compatibility-tags/). No fitting wheel: exit
   1 with a message naming the module, the interpreter and the wheels there are, also written to
   ``<root>/output/failure`` (SageMaker's ``FailureReason``) when ``<root>/output`` exists;
3. puts ``<dir>`` and ``<dir>/site`` first on ``sys.path`` and ``PYTHONPATH`` (child processes import the same
   code) and runs ``gpu_train.entrypoint.main(sys.argv[1:])``.

Standard library only and Python 3.8 syntax: it runs before anything is known about the image.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import platform
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from typing import NamedTuple

PREFIX = "gpu_train_driver-"
ROOT_ENV = "GPU_TRAIN_ROOT"
DEFAULT_ROOT = "/opt/ml"
MAX_FAILURE_CHARS = 1024
# Legacy manylinux names and the glibc version each promises (PEP 513, 571, 599).
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


class DriverError(Exception):
    """The driver cannot start ``gpu_train`` here; the message says why and what would work."""


class Wheel(NamedTuple):
    """A wheel file and the tags of its name (``{dist}-{version}(-{build})?-{python}-{abi}-{platform}.whl``)."""

    path: str
    dist: str
    pythons: tuple[str, ...]
    abis: tuple[str, ...]
    platforms: tuple[str, ...]

    @property
    def filename(self) -> str:
        return os.path.basename(self.path)


def parse_wheel(path: str) -> Wheel | None:
    """The wheel's name and tags; None when the file name is not a wheel name."""
    name = os.path.basename(path)
    if not name.endswith(".whl"):
        return None
    parts = name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        return None
    python, abi, plat = parts[-3:]
    dist = re.sub(r"[-_.]+", "_", parts[0]).lower()
    return Wheel(path, dist, tuple(python.split(".")), tuple(abi.split(".")), tuple(plat.split(".")))


def interpreter() -> str:
    """This interpreter as the error messages name it, e.g. ``CPython 3.13 x86_64``."""
    major, minor = sys.version_info[:2]
    return f"{platform.python_implementation()} {major}.{minor} {platform.machine()}"


def _glibc() -> tuple[int, int] | None:
    name, version = platform.libc_ver()
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if name == "glibc" and match else None


def _libc() -> str:
    glibc = _glibc()
    return f"glibc {glibc[0]}.{glibc[1]}" if glibc else "no glibc"


def _platform_fits(tag: str, machine: str, glibc: tuple[int, int] | None) -> bool:
    if tag == "any":
        return True
    if not sys.platform.startswith("linux") or machine not in tag:
        return False
    if tag.startswith("musllinux"):
        return glibc is None
    if glibc is None:
        return False  # manylinux and linux wheels link against glibc
    match = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    if match:
        return glibc >= (int(match.group(1)), int(match.group(2)))
    legacy = LEGACY_MANYLINUX.get(tag.split("_", 1)[0])
    return legacy is None or glibc >= legacy


def fit(
    wheel: Wheel,
    *,
    implementation: str = sys.implementation.name,
    version: tuple[int, int] = (sys.version_info[0], sys.version_info[1]),
    machine: str = platform.machine(),
    glibc: tuple[int, int] | None = _glibc(),
) -> int:
    """How well ``wheel`` fits the interpreter: 3 built for this CPython version, 2 stable ABI (``abi3``) of an
    older one, 1 pure Python, 0 not at all."""
    if not any(_platform_fits(tag, machine, glibc) for tag in wheel.platforms):
        return 0
    major, minor = version
    if implementation == "cpython":
        here = f"cp{major}{minor}"
        if here in wheel.pythons and ({here, "none"} & set(wheel.abis)):
            return 3
        if "abi3" in wheel.abis:
            for tag in wheel.pythons:
                match = re.match(r"cp(\d)(\d+)$", tag)
                if match and (int(match.group(1)), int(match.group(2))) <= (major, minor):
                    return 2
    pure = {f"py{major}", f"py{major}{minor}"}
    if pure & set(wheel.pythons) and "none" in wheel.abis:
        return 1
    return 0


def top_level_modules(path: str) -> list[str]:
    """The modules a wheel installs: ``*.dist-info/top_level.txt``, else its first top-level entry."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        for name in names:
            if re.match(r"[^/]+\.dist-info/top_level\.txt$", name):
                modules = [line.strip() for line in zf.read(name).decode("utf-8").splitlines() if line.strip()]
                if modules:
                    return modules
    for name in names:
        first = name.split("/", 1)[0]
        if first.endswith((".dist-info", ".data")):
            continue
        return [first[: -len(".py")] if first.endswith(".py") and "/" not in name else first]
    return []


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _archive_digest(archive: str) -> str:
    digest = hashlib.sha256()
    with open(archive, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _ours(path: str) -> bool:
    """A directory this user made (not a link, not someone else's), so it is safe to use in a shared tempdir."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return os.path.isdir(path) and not os.path.islink(path) and info.st_uid == os.getuid()


def extract(archive: str, base: str | None = None) -> str:
    """The archive's contents as a directory, extracted once per archive content (atomic; concurrent safe)."""
    base = base or tempfile.gettempdir()
    target = os.path.join(base, PREFIX + _archive_digest(archive))
    if _ours(target):
        return target
    staging = tempfile.mkdtemp(prefix=os.path.basename(target) + ".tmp-", dir=base)
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(staging)
        os.chmod(staging, 0o755)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if os.path.lexists(target) and not _ours(target):
        return staging  # someone else's file or link holds the shared name: keep a private copy
    try:
        os.replace(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not _ours(target):
            raise
        # another process extracted the same archive first: use its copy
    return target


def _unpack_wheel(wheel: Wheel, site: str) -> bool:
    """Unzip ``wheel`` into ``site`` file by file with ``os.replace``: a concurrent process never sees a
    half-written file (the same wheel gives the same bytes). ``*.data/purelib|platlib`` go to the top.
    False when an earlier run already did (a marker file per wheel)."""
    marker = os.path.join(site, f".unpacked-{wheel.filename}")
    if os.path.exists(marker):
        return False
    os.makedirs(site, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".wheel-", dir=site)
    try:
        with zipfile.ZipFile(wheel.path) as zf:
            zf.extractall(staging)
        for current, _dirs, files in os.walk(staging):
            rel = os.path.relpath(current, staging)
            parts = [] if rel == "." else rel.split(os.sep)
            if len(parts) >= 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
                parts = parts[2:]
            elif parts and parts[0].endswith(".data"):
                continue  # scripts and headers: not needed to import the package
            destination = os.path.join(site, *parts)
            os.makedirs(destination, exist_ok=True)
            for name in files:
                os.replace(os.path.join(current, name), os.path.join(destination, name))
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(wheel.filename + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def install_wheels(directory: str) -> list[str]:
    """Unpack the fitting wheel of each distribution whose modules this interpreter cannot import; returns
    the wheel files unpacked now (not by an earlier run). Raises :class:`DriverError` when one is needed and
    none fits."""
    wheels_dir = os.path.join(directory, "wheels")
    if not os.path.isdir(wheels_dir):
        return []
    by_dist: dict[str, list[Wheel]] = {}
    for name in sorted(os.listdir(wheels_dir)):
        wheel = parse_wheel(os.path.join(wheels_dir, name))
        if wheel is not None:
            by_dist.setdefault(wheel.dist, []).append(wheel)
    unpacked = []
    for dist, wheels in sorted(by_dist.items()):
        modules = top_level_modules(wheels[0].path)
        if not modules or any(_importable(module) for module in modules):
            continue
        ranked = sorted(((fit(w), w.filename, w) for w in wheels), reverse=True)
        best_rank, _name, best = ranked[0]
        if best_rank == 0:
            module = next((m for m in modules if not m.startswith("_")), modules[0])  # xxhash, not _xxhash
            raise DriverError(
                f"module {module} (distribution {dist}) is not installed in this image and no wheel "
                f"in the driver fits {interpreter()} ({_libc()}); "
                f"wheels there: {', '.join(w.filename for w in wheels)}; allowed: an image whose Python one of "
                f"these wheels fits, or an image that already has {module}"
            )
        if _unpack_wheel(best, os.path.join(directory, "site")):
            unpacked.append(best.filename)
    return unpacked


def _write_failure(text: str) -> None:
    """``<root>/output/failure`` when ``<root>/output`` exists (a SageMaker job); the first writer wins."""
    output = os.path.join(os.environ.get(ROOT_ENV) or DEFAULT_ROOT, "output")
    if not os.path.isdir(output):
        return
    text = " ".join(text.split())
    if len(text) > MAX_FAILURE_CHARS:
        text = text[: MAX_FAILURE_CHARS - 3] + "..."
    try:
        fd = os.open(os.path.join(output, "failure"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")


def prepare(archive: str) -> str:
    """Extract the archive, unpack the wheels this interpreter needs, and make both importable here and in
    child processes; returns the extraction directory."""
    if not zipfile.is_zipfile(archive):
        raise DriverError(f"{archive} is not a zip archive; run the driver as `python3 gpu_train_driver.pyz ARGS`")
    directory = extract(archive)
    unpacked = install_wheels(directory)
    if unpacked:
        print(f"gpu_train driver: unpacked {', '.join(unpacked)} for {interpreter()}", flush=True)
    paths = [directory, os.path.join(directory, "site")]
    sys.path[:0] = paths
    previous = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([previous] if previous else []))
    importlib.invalidate_caches()
    return directory


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        prepare(os.path.abspath(sys.argv[0]))
    except (DriverError, OSError, zipfile.BadZipFile) as exc:
        text = f"{type(exc).__name__}: {exc}"
        print(f"gpu_train driver: {text}", file=sys.stderr, flush=True)
        _write_failure(text)
        return 1
    from gpu_train.entrypoint import main as entrypoint_main

    return entrypoint_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
