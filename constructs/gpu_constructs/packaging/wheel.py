"""A pure-Python wheel built in process from a ``pyproject.toml``, byte-for-byte deterministic.

``GpuNotebook`` ships such a wheel to the notebook as a CDK S3 asset (``NotebookPackage``); the
platform's app builds its own (``gpuctl``, ``gpu_train``, ``gpu_serve``, ... from the repository's
``pyproject.toml``) with :func:`ensure_wheel`, and ``make wheel`` writes the same bytes to ``dist/``
(``python -m gpu_constructs.packaging.wheel PROJECT_DIR OUTDIR``).

What goes in comes from ``pyproject.toml`` alone: ``[project]`` (name, version, description, license,
``requires-python``, ``dependencies`` and ``optional-dependencies`` as ``Requires-Dist`` / ``Provides-Extra``,
``[project.scripts]``) and ``[tool.setuptools]`` (the explicit ``packages`` list, ``package-dir`` and
``package-data``): the ``.py`` files of each listed package plus its package data. A ``dynamic`` version is
read as setuptools reads it, statically: the string literal that ``[tool.setuptools.dynamic] version = {attr}``
names (the repository's is ``gpu_constructs._version.__version__``, the one place the version is written).
A sub-folder with an ``__init__.py`` that the list misses is an error (setuptools would leave it out
silently). Only that explicit setuptools form is read; nothing is compiled, so the wheel is
``py3-none-any``.

Why not ``pip wheel`` at every synth: it runs a setuptools build (seconds), and zip entries carry the
files' modification times, so every checkout would give another asset hash. Here every entry has the
same timestamp (1980-01-01, the zip epoch), mode and order, and is stored uncompressed (deflate output
can differ between zlib builds), so the same sources give the same bytes, hence the same asset hash, on
every machine. The layout is the wheel binary distribution format (PEP 427, "Binary distribution
format" in the Python Packaging User Guide): ``<name>-<version>.dist-info/{METADATA,WHEEL,RECORD}``,
RECORD hashes urlsafe-base64 SHA-256 without padding; METADATA follows the core metadata specification
("Core metadata specifications", version 2.1: ``Requires-Dist`` with PEP 508 requirements, ``Provides-Extra``).

Reading ``pyproject.toml`` needs Python 3.11 (``tomllib``); the rest of the module (:func:`write_once`,
the zip entry recipe) also runs on the notebooks' Python 3.10, which imports it through the code packaging
of ``gpuctl train --source-dir``.
"""

from __future__ import annotations

import ast
import base64
import functools
import getpass
import hashlib
import io
import os
import re
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "WHEEL_NAME_ALLOWED",
    "WHEEL_NAME_RE",
    "WheelSpec",
    "build_wheel",
    "ensure_wheel",
    "load_spec",
    "main",
    "write_once",
]

#: A wheel file name (PEP 427): pip installs a local file only under such a name.
WHEEL_NAME_RE = re.compile(
    r"^[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(-\d[A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl$"
)
WHEEL_NAME_ALLOWED = "a wheel file name <name>-<version>-<python tag>-<abi tag>-<platform tag>.whl"

#: The zip epoch: every entry gets this timestamp, so the bytes do not depend on checkout times.
_EPOCH = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o100644
_GENERATOR = "gpu_constructs.packaging.wheel"
#: A PEP 508 requirement: a distribution name first (the rest, versions and markers, is pip's to read).
_REQUIREMENT_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:[\[(<>=!~;@ ].*)?$")
_REQUIREMENT_ALLOWED = 'a PEP 508 requirement string such as "boto3>=1.44,<2"'
#: An extra's name (core metadata ``Provides-Extra``, PEP 685: normalized names).
_EXTRA_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


@dataclass(frozen=True)
class WheelSpec:
    """What the wheel holds, as a ``pyproject.toml`` declares it."""

    name: str
    version: str
    summary: str
    license: str
    requires_python: str
    scripts: tuple[tuple[str, str], ...]
    #: (package, source folder, package-data patterns), in the order of ``[tool.setuptools] packages``.
    packages: tuple[tuple[str, Path, tuple[str, ...]], ...]
    #: ``[project] dependencies``, in their order: one ``Requires-Dist`` each.
    requires_dist: tuple[str, ...] = ()
    #: ``[project.optional-dependencies]``: (extra, its requirements), sorted by extra.
    extras: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def dist_name(self) -> str:
        """The distribution name as wheel file names spell it (runs of ``-_.`` become ``_``)."""
        return re.sub(r"[-_.]+", "_", self.name).lower()

    @property
    def filename(self) -> str:
        return f"{self.dist_name}-{self.version}-py3-none-any.whl"


def _required(table: dict[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise ValueError(f"{where}.{key} is missing; the wheel needs it")
    return table[key]


def _version(project: dict[str, Any], setuptools: dict[str, Any], root: Path, package_dir: dict[str, str]) -> str:
    """``project.version``, or the literal that ``tool.setuptools.dynamic.version.attr`` names when the version is
    dynamic (one version source for several distributions), found through ``package-dir`` without importing."""
    if "version" in project or "version" not in project.get("dynamic", ()):
        return str(_required(project, "version", "project"))
    attr = setuptools.get("dynamic", {}).get("version", {}).get("attr")
    if not isinstance(attr, str) or "." not in attr:
        raise ValueError(f"tool.setuptools.dynamic.version={attr!r}; allowed: {{attr = 'module.NAME'}}")
    module, name = attr.rsplit(".", 1)
    parts = module.split(".")
    # The longest package prefix with a package-dir entry decides the folder, as in setuptools.
    depth = next((n for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in package_dir), 0)
    base = root / package_dir[".".join(parts[:depth])] if depth else root
    path = base.joinpath(*parts[depth:]).with_suffix(".py") if parts[depth:] else base / "__init__.py"
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign) or not any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            continue
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    raise ValueError(f"{path}: no string literal assigned to {name!r} (tool.setuptools.dynamic.version.attr)")


def _requirements(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where}={value!r}; allowed: a list of {_REQUIREMENT_ALLOWED}")
    for requirement in value:
        if not isinstance(requirement, str) or "\n" in requirement or not _REQUIREMENT_RE.match(requirement.strip()):
            raise ValueError(f"{where}: {requirement!r} is not {_REQUIREMENT_ALLOWED}")
    return tuple(r.strip() for r in value)


def _dependencies(
    project: dict[str, Any], pyproject: Path
) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """``[project] dependencies`` and ``optional-dependencies``, checked (static values only: nothing here runs
    a build backend that could fill in ``dynamic`` ones)."""
    dynamic = {"dependencies", "optional-dependencies"} & set(project.get("dynamic", ()))
    if dynamic:
        raise ValueError(
            f"{pyproject}: project.dynamic lists {sorted(dynamic)}; allowed: static dependencies in [project] "
            "(this builder runs no build backend)"
        )
    requires = _requirements(project.get("dependencies", []), f"{pyproject}: project.dependencies")
    optional = project.get("optional-dependencies", {})
    if not isinstance(optional, dict):
        raise ValueError(f"{pyproject}: project.optional-dependencies={optional!r}; allowed: a table extra = [...]")
    extras: list[tuple[str, tuple[str, ...]]] = []
    for extra, value in sorted(optional.items()):
        if not _EXTRA_RE.match(extra):
            raise ValueError(
                f"{pyproject}: optional-dependencies extra {extra!r}; allowed: a normalized name "
                "(lower-case letters, digits, single hyphens)"
            )
        extras.append((extra, _requirements(value, f"{pyproject}: project.optional-dependencies.{extra}")))
    return requires, tuple(extras)


def load_spec(root: Path) -> WheelSpec:
    """Read ``root/pyproject.toml``. A missing key, a listed package without an ``__init__.py``, a package
    folder that the list misses, or a malformed dependency is a ValueError naming it. Needs Python 3.11+."""
    import tomllib  # novermin: building runs on 3.11+ (the library's requires-python); 3.10 only installs

    pyproject = root / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())
    project = _required(data, "project", str(pyproject))
    setuptools = _required(data.get("tool", {}), "setuptools", f"{pyproject}: tool")
    package_dir: dict[str, str] = setuptools.get("package-dir", {})
    package_data: dict[str, list[str]] = setuptools.get("package-data", {})
    listed = _required(setuptools, "packages", f"{pyproject}: tool.setuptools")
    if not isinstance(listed, list) or not listed:
        raise ValueError(f"{pyproject}: tool.setuptools.packages={listed!r}; allowed: a non-empty list of packages")
    packages = []
    for package in listed:
        folder = root / package_dir.get(package, package.replace(".", "/"))
        if not (folder / "__init__.py").is_file():
            raise ValueError(f"{pyproject}: package {package!r} has no {folder}/__init__.py")
        packages.append((package, folder, tuple(package_data.get(package, ()))))
    folders = {folder.resolve() for _, folder, _ in packages}
    for _, folder, _ in packages:
        for child in sorted(folder.iterdir()):
            if (child / "__init__.py").is_file() and child.resolve() not in folders:
                raise ValueError(
                    f"{pyproject}: {child} is a Python package but is not in tool.setuptools.packages; "
                    "add it (and its package-dir) so the wheel carries it"
                )
    license_value = project.get("license", "")
    requires, extras = _dependencies(project, pyproject)
    return WheelSpec(
        name=_required(project, "name", "project"),
        version=_version(project, setuptools, root, package_dir),
        summary=project.get("description", ""),
        license=license_value.get("text", "") if isinstance(license_value, dict) else str(license_value),
        requires_python=_required(project, "requires-python", "project"),
        scripts=tuple(sorted(project.get("scripts", {}).items())),
        packages=tuple(packages),
        requires_dist=requires,
        extras=extras,
    )


def _files(spec: WheelSpec) -> list[tuple[str, Path]]:
    """(path in the wheel, source file) of every module and data file, sorted by wheel path."""
    found: dict[str, Path] = {}
    for package, folder, patterns in spec.packages:
        prefix = package.replace(".", "/")
        chosen = {p for p in folder.iterdir() if p.is_file() and p.suffix == ".py"}
        for pattern in patterns:
            chosen.update(p for p in folder.glob(pattern) if p.is_file())
        for path in chosen:
            found[f"{prefix}/{path.relative_to(folder).as_posix()}"] = path
    return sorted(found.items())


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _metadata_files(spec: WheelSpec) -> list[tuple[str, bytes]]:
    info = f"{spec.dist_name}-{spec.version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {spec.name}",
        f"Version: {spec.version}",
        f"Summary: {spec.summary}",
        f"License: {spec.license}",
        f"Requires-Python: {spec.requires_python}",
        *(f"Requires-Dist: {requirement}" for requirement in spec.requires_dist),
    ]
    for extra, requirements in spec.extras:
        metadata.append(f"Provides-Extra: {extra}")
        metadata += [f"Requires-Dist: {_with_extra(requirement, extra)}" for requirement in requirements]
    wheel = ["Wheel-Version: 1.0", f"Generator: {_GENERATOR}", "Root-Is-Purelib: true", "Tag: py3-none-any"]
    files = [(f"{info}/METADATA", metadata), (f"{info}/WHEEL", wheel)]
    if spec.scripts:
        files.append((f"{info}/entry_points.txt", ["[console_scripts]", *(f"{n} = {t}" for n, t in spec.scripts)]))
    top_level = sorted({package.split(".")[0] for package, _, _ in spec.packages})
    files.append((f"{info}/top_level.txt", top_level))
    return [(name, ("\n".join(lines) + "\n").encode()) for name, lines in files]


def _with_extra(requirement: str, extra: str) -> str:
    """``requirement`` limited to ``extra`` (PEP 508 environment marker ``extra == "..."``), keeping its own
    marker: ``pkg>=1; python_version < "3.11"`` -> ``pkg>=1; (python_version < "3.11") and extra == "x"``."""
    spec, _, marker = requirement.partition(";")
    condition = f'extra == "{extra}"'
    if marker.strip():
        condition = f"({marker.strip()}) and {condition}"
    return f"{spec.strip()}; {condition}"


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_STORED
    info.create_system = 3  # Unix, whatever the build machine (zipfile says 0 on Windows)
    info.external_attr = _FILE_MODE << 16
    return info


def build_wheel(spec: WheelSpec) -> tuple[str, bytes]:
    """The wheel's file name and bytes; the same sources always give the same bytes."""
    entries = [(name, path.read_bytes()) for name, path in _files(spec)]
    entries += _metadata_files(spec)
    record_name = f"{spec.dist_name}-{spec.version}.dist-info/RECORD"
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries) + f"{record_name},,\n"
    entries.append((record_name, record.encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            archive.writestr(_entry(name), data)
    return spec.filename, buffer.getvalue()


def write_once(name: str, data: bytes, cache_dir: Path | None = None, *, kind: str = "wheel") -> Path:
    """``data`` as the file ``<cache>/<first 32 hex digits of its SHA-256>/<name>``, written only when that
    file is missing or holds other bytes (then atomically: a temporary file in the same folder, renamed).

    The cache folder is ``cache_dir``, else ``gpu-platform-<kind>-<user>`` in the system temp folder. The path
    depends only on the content and the name, so a CDK asset that points at it sees the same path (and the
    same hash) on every synth of the same content, and no half-written file."""
    base = cache_dir or Path(tempfile.gettempdir()) / f"gpu-platform-{kind}-{getpass.getuser()}"
    target = base / hashlib.sha256(data).hexdigest()[:32] / name
    if not target.is_file() or target.read_bytes() != data:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".partial-", delete=False) as handle:
            handle.write(data)
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, target)
    return target


@functools.lru_cache(maxsize=4)
def ensure_wheel(root: Path, cache_dir: Path | None = None) -> Path:
    """The wheel of ``root`` as a file, written once per content into a cache folder (default: the
    system temp folder, see :func:`write_once`). The path is stable for the same content, so synth reads
    no changed file."""
    name, data = build_wheel(load_spec(root))
    return write_once(name, data, cache_dir, kind="wheel")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpu_constructs.packaging.wheel PROJECT_DIR [OUTDIR]``: write PROJECT_DIR's wheel into OUTDIR
    (default: dist)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not 1 <= len(args) <= 2 or any(a.startswith("-") for a in args):
        print("usage: python -m gpu_constructs.packaging.wheel PROJECT_DIR [OUTDIR]", file=sys.stderr)
        return 2
    outdir = Path(args[1] if len(args) > 1 else "dist")
    try:
        name, data = build_wheel(load_spec(Path(args[0])))
    except (OSError, ValueError) as exc:
        print(f"cannot build the wheel of {args[0]}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / name).write_bytes(data)
    print(outdir / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
