"""``make wheel`` gives a working gpuctl: the wheel carries every package gpuctl imports and declares what they need.

The wheel (``python -m gpu_constructs.packaging.wheel . dist``, what ``make wheel`` runs and the notebooks install)
holds gpuctl, the runtimes and ``gpu_constructs`` (job specs, GPU catalog, code packaging), and lists the repository's
``[project] dependencies`` as ``Requires-Dist``. Neither the CDK nor torch is among them: gpuctl's commands load
neither on the paths tested here.

The slow test installs the wheel into a new virtual environment (``pip install dist/<wheel>``, dependencies from
the package index; once per test session) and runs, from a folder outside the repository, ``gpuctl --help``,
``gpuctl shard`` on a few generated images and ``gpuctl train --spec <spec.json> --dry-run`` (also with
``--env``, which reads ``config/<env>.yaml`` with the app's typed loader).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from container_helpers import make_images

from gpu_constructs import __version__
from gpu_constructs.packaging.wheel import build_wheel, load_spec, main
from gpu_constructs.training_spec import S3Channel, TrainingJobSpec

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
INFO = f"gpu_platform-{__version__}.dist-info"
#: The repository's own top-level packages: an import of one of them must be satisfied by the wheel itself.
FIRST_PARTY = {"gpuctl", "gpu_train", "gpu_serve", "gpu_constructs", "stacks", "platform_tools", "benchmarks"}
#: Distributions gpuctl must not need (the CDK, the rule packs, torch).
NOT_NEEDED = {"aws-cdk-lib", "constructs", "jsii", "cdk-nag", "deploy-time-build", "torch"}
REGION = "us-east-1"
SPEC = TrainingJobSpec(
    image_uri="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker",
    role_arn="arn:aws:iam::123456789012:role/acme-training",
    instance_type="ml.g5.xlarge",
    output_s3_uri="s3://acme-ml-artifacts/output/acme-train/",
    channels=(S3Channel("train", "s3://acme-ml-datasets/imagenet/{data_version}/train/"),),
    hyperparameters={"epochs": "2"},
    job_name_prefix="acme-train",
)


@pytest.fixture(scope="module")
def wheel_files() -> dict[str, bytes]:
    _, data = build_wheel(load_spec(ROOT))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


# --------------------------------------------------------------------------------------------------
# Fast: what the wheel holds and declares
# --------------------------------------------------------------------------------------------------


def test_requires_dist_is_the_pyproject_dependencies(wheel_files: dict[str, bytes]) -> None:
    metadata = wheel_files[f"{INFO}/METADATA"].decode().splitlines()
    requires = [line.removeprefix("Requires-Dist: ") for line in metadata if line.startswith("Requires-Dist: ")]
    assert requires == PROJECT["dependencies"]
    names = {r.split(">")[0].split("<")[0].split("=")[0].strip().lower() for r in requires}
    assert {"boto3", "botocore", "numpy", "pillow", "xxhash", "tqdm", "pydantic", "pyyaml"} == names
    assert not names & NOT_NEEDED
    assert not any(line.startswith("Provides-Extra: ") for line in metadata)


def _imports(source: str, name: str) -> list[str]:
    """Absolute module names imported by ``source`` (``from x import y``: ``x``)."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def test_every_first_party_import_of_the_wheel_resolves_inside_it(wheel_files: dict[str, bytes]) -> None:
    """Lazy imports included: gpuctl importing gpu_constructs, stacks.config importing gpu_constructs.catalog, ..."""
    missing: dict[str, str] = {}
    for name, data in sorted(wheel_files.items()):
        if not name.endswith(".py"):
            continue
        for module in _imports(data.decode(), name):
            if module.split(".")[0] not in FIRST_PARTY:
                continue
            path = module.replace(".", "/")
            if f"{path}.py" not in wheel_files and f"{path}/__init__.py" not in wheel_files:
                missing.setdefault(module, name)
    assert missing == {}, f"imported by the wheel's modules but not in the wheel: {missing}"
    assert "gpu_constructs/training_spec/job.py" in wheel_files and "gpu_constructs/catalog/data.py" in wheel_files


def test_gpuctl_train_dry_run_loads_neither_the_cdk_nor_torch(tmp_path: Path) -> None:
    """In this repository's environment, with the CDK and torch made unimportable: the same as a bare install."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC.to_dict()))
    code = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('aws_cdk', 'constructs', 'jsii', 'cdk_nag', 'torch'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (refused)')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "from gpuctl.cli import main\n"
        f"sys.exit(main(['train', '--spec', {str(spec_file)!r}, '--region', {REGION!r}, '--job-name', 'acme-train-1', "
        "'--dry-run']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == SPEC.to_request("acme-train-1")


# The builder's dependency metadata (core metadata 2.1: Requires-Dist, Provides-Extra).

BASE = (
    '[project]\nname = "demo"\nversion = "1.0"\nrequires-python = ">=3.10"\n'
    '{extra}[tool.setuptools]\npackages = ["demo"]\n'
)


def _demo(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(BASE.format(extra=extra))
    (tmp_path / "demo").mkdir(exist_ok=True)
    (tmp_path / "demo" / "__init__.py").write_text("")
    return tmp_path


def _metadata(root: Path) -> list[str]:
    _, data = build_wheel(load_spec(root))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.read("demo-1.0.dist-info/METADATA").decode().splitlines()


def test_dependencies_and_extras_become_requires_dist(tmp_path: Path) -> None:
    root = _demo(
        tmp_path,
        'dependencies = ["numpy>=2,<3", "  tomli>=2; python_version < \\"3.11\\"  "]\n'
        '[project.optional-dependencies]\nzeta = ["torch==2.13.0"]\n'
        'alpha = ["cdk-nag>=3; sys_platform == \\"linux\\""]\n',
    )
    assert _metadata(root)[6:] == [
        "Requires-Dist: numpy>=2,<3",
        'Requires-Dist: tomli>=2; python_version < "3.11"',
        "Provides-Extra: alpha",
        'Requires-Dist: cdk-nag>=3; (sys_platform == "linux") and extra == "alpha"',
        "Provides-Extra: zeta",
        'Requires-Dist: torch==2.13.0; extra == "zeta"',
    ]
    assert build_wheel(load_spec(root)) == build_wheel(load_spec(root))


def test_no_dependencies_writes_no_requires_dist(tmp_path: Path) -> None:
    metadata = _metadata(_demo(tmp_path, ""))
    assert metadata[-1] == "Requires-Python: >=3.10"
    assert not [line for line in metadata if line.startswith(("Requires-Dist", "Provides-Extra"))]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('dependencies = "numpy"\n', r"project.dependencies='numpy'; allowed: a list of a PEP 508 requirement"),
        ('dependencies = ["-numpy"]\n', r"project.dependencies: '-numpy' is not a PEP 508 requirement"),
        ("dependencies = [3]\n", r"project.dependencies: 3 is not a PEP 508 requirement"),
        ('dynamic = ["dependencies"]\n', r"project.dynamic lists \['dependencies'\]; allowed: static dependencies"),
        ('[project.optional-dependencies]\n"Bad_Extra" = ["x"]\n', r"extra 'Bad_Extra'; allowed: a normalized name"),
        ('[project.optional-dependencies]\nok = ["x y z"]\n', None),
    ],
)
def test_malformed_dependencies_are_named(tmp_path: Path, extra: str, message: str | None) -> None:
    root = _demo(tmp_path, extra)
    if message is None:  # pip reads the rest of the string; the builder only checks it starts with a name
        assert 'Requires-Dist: x y z; extra == "ok"' in _metadata(root)
        return
    with pytest.raises(ValueError, match=message):
        load_spec(root)
    assert main([str(root), str(tmp_path / "dist")]) == 1


# --------------------------------------------------------------------------------------------------
# Slow: the wheel installed into a new virtual environment
# --------------------------------------------------------------------------------------------------


def _bare_env(home: Path) -> dict[str, str]:
    """No repository on sys.path, no AWS credentials or profile: a fresh workstation."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AWS_")) and k != "VIRTUAL_ENV"}
    env.update(
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(home / "aws-config"),  # missing files: no profile, no credentials
        AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
    )
    return env


@pytest.fixture(scope="session")
def gpuctl_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """(bin folder of a new venv with the wheel that ``make wheel`` writes installed, seconds the install took)."""
    base = tmp_path_factory.mktemp("gpuctl-venv")
    assert main([str(ROOT), str(base / "dist")]) == 0  # make wheel: python -m gpu_constructs.packaging.wheel . dist
    (wheel,) = (base / "dist").glob("gpu_platform-*-py3-none-any.whl")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True, timeout=120)
    proc = subprocess.run(
        [str(base / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-input", str(wheel)],
        capture_output=True, text=True, timeout=900, env=_bare_env(base),
    )  # fmt: skip
    assert proc.returncode == 0, f"pip install {wheel.name} failed:\n{proc.stdout}\n{proc.stderr}"
    return base / "venv" / "bin", time.monotonic() - started


def _gpuctl(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "gpuctl"), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=_bare_env(cwd)
    )


@pytest.mark.slow
def test_installed_wheel_has_its_dependencies_and_no_cdk(gpuctl_venv: tuple[Path, float]) -> None:
    bin_dir, seconds = gpuctl_venv
    print(f"venv + pip install gpu_platform wheel: {seconds:.0f} s")
    proc = subprocess.run(
        [str(bin_dir / "python"), "-I", "-c", "import importlib.metadata as m, json; "
         "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    installed = set(json.loads(proc.stdout))
    assert {"gpu-platform", "boto3", "numpy", "pillow", "xxhash", "tqdm", "pydantic", "pyyaml"} <= installed
    assert not installed & NOT_NEEDED, sorted(installed & NOT_NEEDED)
    check = subprocess.run([str(bin_dir / "python"), "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
def test_gpuctl_help_lists_every_command(gpuctl_venv: tuple[Path, float], tmp_path: Path) -> None:
    proc = _gpuctl(gpuctl_venv[0], tmp_path, "--help")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    commands = {p.stem for p in (ROOT / "gpuctl" / "commands").glob("*.py") if p.stem != "__init__"}
    assert len(commands) >= 9
    for command in commands:
        # argparse puts a long command's help on the next line: the name ends with a space or the line
        listed = re.search(rf"^    {re.escape(command)}( |$)", proc.stdout, flags=re.MULTILINE)
        assert listed, f"gpuctl --help does not list {command}:\n{proc.stdout}"


@pytest.mark.slow
def test_gpuctl_shard_packs_generated_images(gpuctl_venv: tuple[Path, float], tmp_path: Path) -> None:
    make_images(tmp_path / "images", classes=2, per_class=5)
    proc = _gpuctl(gpuctl_venv[0], tmp_path, "shard", "images", "shards", "--image-size", "32", "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    index: dict[str, Any] = json.loads((tmp_path / "shards" / "index.json").read_text())
    assert (index["num_samples"], index["classes"], index["image_size"]) == (10, ["class_0", "class_1"], 32)
    assert index["sample"]["image"]["shape"] == [32, 32, 3]
    for shard in index["shards"]:
        assert (tmp_path / "shards" / shard["name"]).stat().st_size == shard["bytes"]
    assert sum(s["samples"] for s in index["shards"]) == 10


@pytest.mark.slow
def test_gpuctl_train_dry_run_prints_the_request_of_a_saved_spec(
    gpuctl_venv: tuple[Path, float], tmp_path: Path
) -> None:
    (tmp_path / "spec.json").write_text(json.dumps(SPEC.to_dict(), indent=2))
    argv = ["train", "--spec", "spec.json", "--job-name", "acme-train-7", "-p", "epochs=3", "--dry-run"]
    proc = _gpuctl(gpuctl_venv[0], tmp_path, *argv, "--region", REGION)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = SPEC.with_changes(hyperparameters={"epochs": "3"}).to_request("acme-train-7")
    assert json.loads(proc.stdout) == expected


@pytest.mark.slow
def test_gpuctl_reads_the_env_config_with_the_apps_loader(gpuctl_venv: tuple[Path, float], tmp_path: Path) -> None:
    """--env: region and prefix from ./config/<env>.yaml through stacks.config (pydantic, PyYAML, the catalog)."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    code = "import json, gpuctl.training_setup as s; print(json.dumps(s.read_env_config('dev'), default=str))"
    proc = subprocess.run(
        [str(gpuctl_venv[0] / "python"), "-I", "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = json.loads(proc.stdout)
    assert config["path"] == str(tmp_path / "config" / "dev.yaml")
    assert (config["resource_prefix"], config["region"]) == ("gpu-dev", REGION)
    (tmp_path / "spec.json").write_text(json.dumps(SPEC.to_dict()))
    proc = _gpuctl(gpuctl_venv[0], tmp_path, "train", "--env", "dev", "--spec", "spec.json", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["TrainingJobName"].startswith("acme-train-")
