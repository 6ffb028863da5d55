"""The wheel the notebooks install (gpu_constructs.packaging.wheel): deterministic, complete, and fit for the notebook's
Python (NOTEBOOK_PYTHON, 3.10, the conda_pytorch environments of every notebook platform).

No Python 3.10 interpreter is needed for the two checks that matter: vermin finds every use of a newer stdlib
member or syntax in the shipped sources, and pip, told the target Python version, accepts or refuses the wheel
exactly as the notebook's pip would (Requires-Python). When a 3.10 interpreter is on this machine, a third test
runs gpuctl from the wheel on it.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from gpu_constructs import __version__
from gpu_constructs.notebook.construct import NOTEBOOK_PYTHON
from gpu_constructs.packaging.wheel import build_wheel, ensure_wheel, load_spec, main

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_wheel(ROOT, tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def sources(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's contents, unpacked: exactly what the notebook gets."""
    target = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


# --------------------------------------------------------------------------------------------------
# Python 3.10 (the notebook's)
# --------------------------------------------------------------------------------------------------


def _vermin() -> str:
    found = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    if found is None:
        pytest.fail("vermin is not installed: pip install vermin (requirements-dev.txt)")
    return found


def test_shipped_sources_need_nothing_newer_than_the_notebook_python(sources: Path) -> None:
    """No 3.11-only stdlib (tomllib, datetime.UTC, asyncio.timeout, typing.Self, enum.StrEnum, ...) or syntax
    (except*) in what the notebook imports; a guarded use carries ``# novermin``."""
    packages = sorted(str(p) for p in sources.iterdir() if (p / "__init__.py").is_file())
    assert len(packages) >= 3, packages
    proc = subprocess.run(
        [_vermin(), f"--target={NOTEBOOK_PYTHON}-", "--violations", "--no-tips", "--eval-annotations",
         "--no-config-file", "--quiet", *packages],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"needs a Python newer than {NOTEBOOK_PYTHON}:\n{proc.stdout}{proc.stderr}"


def test_vermin_catches_a_311_only_member(tmp_path: Path) -> None:
    (tmp_path / "late.py").write_text("import datetime\n\nNOW = datetime.datetime.now(datetime.UTC)\n")
    proc = subprocess.run(
        [_vermin(), f"--target={NOTEBOOK_PYTHON}-", "--violations", "--no-tips", "--no-config-file", "--quiet",
         str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and "'datetime.UTC' member requires !2, 3.11" in proc.stdout


def _pip_dry_run(wheel: Path, python_version: str, target: Path) -> subprocess.CompletedProcess[str]:
    """What the notebook's pip does with the wheel (no index, no dependencies), for ``python_version``."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "--no-cache-dir",
         "--disable-pip-version-check", "--python-version", python_version, "--only-binary=:all:",
         "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PIP_FIND_LINKS": ""},
    )  # fmt: skip


def test_pip_installs_the_wheel_on_the_notebook_python(wheel: Path, tmp_path: Path) -> None:
    proc = _pip_dry_run(wheel, NOTEBOOK_PYTHON, tmp_path / "target")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Would install {PYPROJECT['project']['name']}-{__version__}" in proc.stdout


def test_pip_refuses_it_below_requires_python(wheel: Path, tmp_path: Path) -> None:
    """The check is real: pip reads Requires-Python from the wheel and refuses an older interpreter."""
    proc = _pip_dry_run(wheel, "3.9", tmp_path / "target")
    assert proc.returncode != 0
    assert "requires a different Python: 3.9.0 not in '>=3.10'" in proc.stdout + proc.stderr


def _python_310() -> str | None:
    candidates = [os.environ.get("PYTHON310", ""), shutil.which("python3.10") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    for candidate in filter(None, candidates):
        try:
            proc = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
        except OSError:
            continue
        if proc.returncode == 0 and proc.stdout.strip() == NOTEBOOK_PYTHON:
            return candidate
    return None


def test_gpuctl_from_the_wheel_runs_on_python_310(wheel: Path) -> None:
    """Bare 3.10 (no site-packages, no torch): gpuctl builds every command and its doctor reports."""
    python = _python_310()
    if python is None:
        pytest.skip(f"no Python {NOTEBOOK_PYTHON} interpreter here (set PYTHON310); vermin and pip cover it")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(wheel), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [python, "-S", "-m", "gpuctl", "doctor", "--no-probe", "--expect-gpus", "0"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch not installed" in proc.stdout and proc.stdout.rstrip().endswith("OK")


# --------------------------------------------------------------------------------------------------
# The wheel itself
# --------------------------------------------------------------------------------------------------


def test_wheel_metadata_comes_from_pyproject(wheel: Path) -> None:
    project = PYPROJECT["project"]
    assert wheel.name == f"gpu_platform-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"gpu_platform-{__version__}.dist-info/METADATA").decode()
        entry_points = archive.read(f"gpu_platform-{__version__}.dist-info/entry_points.txt").decode()
        tags = archive.read(f"gpu_platform-{__version__}.dist-info/WHEEL").decode()
    assert f"Requires-Python: {project['requires-python']}\n" in metadata
    assert f"Name: {project['name']}\nVersion: {__version__}\n" in metadata
    assert entry_points == "[console_scripts]\ngpuctl = gpuctl.cli:main\n"
    assert "Root-Is-Purelib: true\nTag: py3-none-any\n" in tags


def test_wheel_holds_every_module_of_the_listed_packages_and_nothing_else(wheel: Path) -> None:
    setuptools = PYPROJECT["tool"]["setuptools"]
    expected = set()
    for package in setuptools["packages"]:
        folder = ROOT / setuptools["package-dir"].get(package, package.replace(".", "/"))
        expected |= {f"{package.replace('.', '/')}/{p.name}" for p in folder.glob("*.py")}
    expected.add("gpuctl/py.typed")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        infos = archive.infolist()
        record = archive.read(f"gpu_platform-{__version__}.dist-info/RECORD").decode().splitlines()
        contents = {name: archive.read(name) for name in names}
    assert {n for n in names if ".dist-info/" not in n} == expected
    assert "gpuctl/cli.py" in names and "gpu_serve/httpio.py" in names and "gpu_train/models/__init__.py" in names
    assert names == sorted(n for n in names if ".dist-info/" not in n) + [n for n in names if ".dist-info/" in n]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
    # RECORD: every other file with its urlsafe-base64 SHA-256 and size (what pip verifies on install)
    rows = dict(line.split(",", 1) for line in record)
    assert rows.pop(f"gpu_platform-{__version__}.dist-info/RECORD") == ","
    assert set(rows) == set(names) - {f"gpu_platform-{__version__}.dist-info/RECORD"}
    for name, row in rows.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(contents[name]).digest()).rstrip(b"=").decode()
        assert row == f"sha256={digest},{len(contents[name])}", name


def test_wheel_is_byte_identical_across_builds_and_checkouts(wheel: Path, tmp_path: Path) -> None:
    """Same sources, same bytes, hence the same asset hash: file times and build folder do not matter."""
    copy = tmp_path / "checkout"
    setuptools = PYPROJECT["tool"]["setuptools"]
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    for folder in sorted({setuptools["package-dir"].get(p, p.replace(".", "/")) for p in setuptools["packages"]}):
        if not (copy / folder).exists():  # a sub-package's folder came with its parent's
            shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for path in copy.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    assert ensure_wheel(copy, tmp_path / "cache").read_bytes() == wheel.read_bytes()
    assert build_wheel(load_spec(ROOT))[1] == wheel.read_bytes()


def test_make_wheel_writes_the_same_bytes(wheel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(ROOT), str(tmp_path / "dist")]) == 0
    written = tmp_path / "dist" / wheel.name
    assert capsys.readouterr().out.strip() == str(written)
    assert written.read_bytes() == wheel.read_bytes()
    assert main(["--help"]) == 2


def _project(tmp_path: Path, pyproject: str, *packages: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    for package in packages:
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    return tmp_path


GOOD = '[project]\nname = "demo"\nversion = "1.0"\nrequires-python = ">=3.10"\n[tool.setuptools]\npackages = ["demo"]\n'


def test_a_package_folder_missing_from_the_list_is_an_error(tmp_path: Path) -> None:
    root = _project(tmp_path, GOOD, "demo", "demo/extra")
    with pytest.raises(ValueError, match=r"demo/extra is a Python package but is not in tool.setuptools.packages"):
        load_spec(root)


@pytest.mark.parametrize(
    ("pyproject", "message"),
    [
        (GOOD.replace('requires-python = ">=3.10"\n', ""), r"project.requires-python is missing"),
        (GOOD.replace('packages = ["demo"]', 'packages = ["nothere"]'), r"package 'nothere' has no .*/nothere/"),
        (GOOD.replace('packages = ["demo"]', "packages = []"), r"packages=\[\]; allowed: a non-empty list"),
        (GOOD.replace("[tool.setuptools]", "[tool.other]"), r"tool.setuptools is missing"),
    ],
)
def test_bad_pyproject_is_a_clear_error(tmp_path: Path, pyproject: str, message: str) -> None:
    root = _project(tmp_path, pyproject, "demo")
    with pytest.raises(ValueError, match=message):
        load_spec(root)
    assert main([str(root), str(tmp_path / "dist")]) == 1
