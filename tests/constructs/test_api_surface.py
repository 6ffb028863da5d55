"""The library's public surface is a contract: a change to it is a reviewed diff, not a side effect.

``api_surface.txt`` (next to this file) lists, for ``gpu_constructs`` and each sub-package, every name of its
``__all__`` with its kind and signature: functions with ``inspect.signature``, classes with the signature of
``__init__`` and their public methods, properties and attributes (those the library defines, not the CDK's base
classes), enum members, constants with their type. One line per item, sorted; memory addresses are removed from
default values, so the file is the same on every run and every Python patch version.

When a change to the surface is intended, rewrite the file and commit it with the change::

    .venv/bin/python tests/constructs/test_api_surface.py --update

The same file checks the rest of the contract: the packages are imported lazily (``import gpu_constructs`` and
its sub-packages load no ``aws_cdk``; a name loads its module on first use), and the version is written once, in
``constructs/gpu_constructs/_version.py``.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import inspect
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The packages whose ``__all__`` is the library's public API.
PACKAGES = (
    "gpu_constructs",
    "gpu_constructs.authz",
    "gpu_constructs.endpoint",
    "gpu_constructs.fleet",
    "gpu_constructs.idle",
    "gpu_constructs.notebook",
    "gpu_constructs.oidc",
    "gpu_constructs.rules",
    "gpu_constructs.training",
    "gpu_constructs.training_spec",
)
SNAPSHOT = Path(__file__).with_name("api_surface.txt")
UPDATE_COMMAND = ".venv/bin/python tests/constructs/test_api_surface.py --update"
ROOT = Path(__file__).resolve().parents[2]

#: ``<aws_cdk.Duration object at 0x7f...>`` -> ``<aws_cdk.Duration object>``: an address changes on every run.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _text(value: object) -> str:
    return _ADDRESS.sub("", str(value))


class _Default:
    """A default value shown by what it means: a CDK ``Duration`` or ``Size`` prints as its object's address."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _default(value: Any) -> Any:
    kind = type(value).__name__
    if type(value).__module__.startswith("aws_cdk") and kind == "Duration":
        return _Default(f"Duration.seconds({value.to_seconds()})")
    if type(value).__module__.startswith("aws_cdk") and kind == "Size":
        return _Default(f"Size.mebibytes({value.to_mebibytes()})")
    return value


def _signature(value: Any) -> str:
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # builtins and some C types have no signature
        return "(...)"
    parameters = [p.replace(default=_default(p.default)) for p in signature.parameters.values()]
    return _text(signature.replace(parameters=parameters))


def _own_classes(cls: type) -> list[type]:
    """The classes of ``cls``'s MRO that the library defines: their members are its surface; the members of
    ``Construct``, ``object`` or a jsii base class are the CDK's and change with the CDK."""
    return [c for c in cls.__mro__ if c.__module__.split(".")[0] == "gpu_constructs"]


def _members(qualified: str, cls: type) -> Iterator[str]:
    seen: set[str] = set()
    annotations: dict[str, Any] = {}
    for owner in reversed(_own_classes(cls)):
        annotations.update(inspect.get_annotations(owner))
    for owner in _own_classes(cls):
        for name, raw in owner.__dict__.items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            where = f"{qualified}.{name}"
            if isinstance(raw, property):
                returns = inspect.signature(raw.fget).return_annotation if raw.fget else "?"
                yield f"{where}: property -> {_text(returns)}"
            elif isinstance(raw, staticmethod):
                yield f"{where}: staticmethod{_signature(raw.__func__)}"
            elif isinstance(raw, classmethod):
                yield f"{where}: classmethod{_signature(raw.__func__)}"
            elif inspect.isfunction(raw):
                yield f"{where}: method{_signature(raw)}"
            elif isinstance(cls, enum.EnumMeta) and name in cls.__members__:
                yield f"{where}: member = {getattr(cls, name).value!r}"
            elif name in annotations:
                yield f"{where}: attribute: {_text(annotations[name])}"
            else:
                yield f"{where}: attribute: {type(raw).__name__}"
    for name, annotation in sorted(annotations.items()):  # dataclass fields without a default, declared fields
        if not name.startswith("_") and name not in seen and not isinstance(cls, enum.EnumMeta):
            yield f"{qualified}.{name}: attribute: {_text(annotation)}"


def describe(qualified: str, value: Any) -> Iterator[str]:
    """The lines of one exported name: its kind and signature, then (classes) one line per public member."""
    if inspect.isclass(value):
        bases = ", ".join(b.__qualname__ for b in value.__bases__ if b is not object)
        kind = "enum" if isinstance(value, enum.EnumMeta) else "class"
        init = "" if kind == "enum" else f" __init__{_signature(value.__init__)}"
        yield f"{qualified}: {kind}" + (f"({bases})" if bases else "") + init
        yield from _members(qualified, value)
    elif inspect.isfunction(value) or inspect.isbuiltin(value):
        yield f"{qualified}: function{_signature(value)}"
    elif isinstance(value, types.ModuleType):
        yield f"{qualified}: module"
    elif typing.get_origin(value) is not None or isinstance(value, (types.UnionType, typing.TypeVar)):
        yield f"{qualified}: alias = {_text(value)}"
    else:
        yield f"{qualified}: constant: {type(value).__name__}"


def surface() -> str:
    """The text of ``api_surface.txt`` for the code as it is now."""
    lines: list[str] = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        names = list(module.__all__)
        assert len(names) == len(set(names)), f"{package}.__all__ lists a name twice"
        for name in names:
            lines += describe(f"{package}.{name}", getattr(module, name))
    # By name: a class's line, then its members' (``a.B`` sorts before ``a.B.c``).
    return "".join(f"{line}\n" for line in sorted(lines, key=lambda line: (line.split(": ", 1)[0], line)))


def test_public_surface_matches_the_snapshot() -> None:
    expected = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    actual = surface()
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True), actual.splitlines(keepends=True), str(SNAPSHOT), "the code now"
            )
        )
        pytest.fail(
            f"The public API changed (- snapshot, + code):\n{diff}\n"
            f"If the change is intended, rewrite the snapshot and commit it with the change: {UPDATE_COMMAND}",
            pytrace=False,
        )


def test_surface_text_has_no_memory_addresses() -> None:
    assert not _ADDRESS.search(surface())


@pytest.mark.parametrize("package", PACKAGES)
def test_every_advertised_name_is_exported(package: str) -> None:
    """``__all__`` names only what the package can give, and ``dir()`` shows it (the lazy exports' ``__dir__``)."""
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
        assert name in dir(module), f"{package}.{name}"
    with pytest.raises(AttributeError, match=f"module '{re.escape(package)}' has no attribute 'Nope'"):
        _ = module.Nope


def test_packages_load_no_cdk_until_a_construct_is_used() -> None:
    """Importing the library and its sub-packages is cheap: the config model and ``gpuctl`` import them without
    the CDK runtime. The first use of a construct name loads it. A fresh interpreter, so nothing is loaded yet."""
    code = (
        "import sys\n"
        f"for name in {PACKAGES!r}: __import__(name)\n"
        "from gpu_constructs.training_spec import TrainingJobSpec\n"
        "from gpu_constructs.endpoint import Batching\n"
        "print(sorted(m for m in ('aws_cdk', 'cdk_nag') if m in sys.modules))\n"
        "from gpu_constructs import GpuNetwork\n"
        "print('aws_cdk' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"], done.stdout


# -- one version source -------------------------------------------------------------------------------------------

VERSION_FILE = ROOT / "constructs" / "gpu_constructs" / "_version.py"
#: Files that may carry the version's text: the source itself, the release notes, and synthesized templates
#: (the fleet's boot script names the platform wheel, whose file name carries the version).
VERSION_ALLOWED = ("constructs/gpu_constructs/_version.py", "CHANGELOG.md", "tests/snapshots/__snapshots__/")


def _version() -> str:
    match = re.search(r'^__version__ = "([^"]+)"$', VERSION_FILE.read_text(), re.M)
    assert match, f"{VERSION_FILE}: no __version__ string literal"
    return match.group(1)


def test_version_is_derived_from_one_source() -> None:
    from setuptools.config.pyprojecttoml import read_configuration

    import gpu_constructs
    import gpuctl
    from gpu_constructs.packaging.wheel import load_spec

    version = _version()
    assert gpu_constructs.__version__ == gpuctl.__version__ == version
    for project in (ROOT, ROOT / "constructs"):
        assert read_configuration(project / "pyproject.toml", expand=True)["project"]["version"] == version
    assert load_spec(ROOT).version == version


def test_runtimes_read_the_version_from_the_installed_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu_train`` and ``gpu_serve`` run in images that copy the package alone: no metadata, no source."""
    import importlib.metadata

    import gpu_serve
    import gpu_train

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    for runtime in (gpu_train, gpu_serve):
        monkeypatch.delitem(vars(runtime), "__version__", raising=False)
        monkeypatch.setattr(importlib.metadata, "version", lambda name: f"{name} 9.9.9")
        assert runtime.__version__ == "gpu-platform 9.9.9"
        monkeypatch.delitem(vars(runtime), "__version__")
        monkeypatch.setattr(importlib.metadata, "version", missing)
        assert runtime.__version__ == "0+unknown"
        monkeypatch.delitem(vars(runtime), "__version__")
        with pytest.raises(AttributeError):
            _ = runtime.nope


def test_no_other_file_writes_the_version() -> None:
    """A release edits ``_version.py`` (and the changelog) only; everything else derives the version."""
    version = _version()
    pattern = re.compile(rf"(?<![\w.]){re.escape(version)}(?![\w]|\.\d)")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    found = []
    for relative in sorted(set(filter(None, listed.split("\0")))):
        path = ROOT / relative
        if relative.startswith(VERSION_ALLOWED) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        text = data.decode("utf-8", errors="replace")
        found += [f"{relative}:{text.count(chr(10), 0, m.start()) + 1}" for m in pattern.finditer(text)]
    assert found == [], (
        f"the version {version} is written outside {VERSION_ALLOWED[0]}: {found}; derive it from there "
        "(import gpu_constructs.__version__, or setuptools' dynamic version), or, for another project's version "
        "that happens to be equal, add the file to VERSION_ALLOWED with the reason"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(f"usage: {UPDATE_COMMAND}")
    SNAPSHOT.write_text(surface())
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}")
