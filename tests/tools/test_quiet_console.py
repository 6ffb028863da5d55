"""A quiet, informative console: no deprecation warnings from our code, no Node.js banner from `npx cdk`,
offline linters without network tracebacks, progress from `make setup` / `make bench`, and `make bench-gpu`
stopping at once on a machine without an NVIDIA GPU."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where the app's own code lives (everything that runs in `cdk synth` or ships to users).
CODE_DIRS = ("stacks", "constructs/gpu_constructs", "platform_tools", "gpuctl", "examples", "containers")
#: Deprecated in aws-cdk-lib 2.x: ``Stack#addDependency`` (use ``add_stack_dependency``), ``CfnResource#addDependency``
#: and ``#addDependsOn`` (use ``add_resource_dependency``). ``construct.node.add_dependency`` is not deprecated.
DEPRECATED_DEPENDENCY_CALLS = {"add_dependency", "add_depends_on"}


def _make(*args: str, env: dict[str, str] | None = None, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in (env or os.environ).items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=timeout
    )


def _exports(text: str, pattern: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(pattern, text, flags=re.M)}


# -- deprecated CDK APIs -----------------------------------------------------------------------------------------


def test_no_deprecated_dependency_api_in_our_code() -> None:
    offenders = []
    for directory in CODE_DIRS:
        for path in sorted((ROOT / directory).rglob("*.py")):
            if "build" in path.relative_to(ROOT).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                if not isinstance(func, ast.Attribute) or func.attr not in DEPRECATED_DEPENDENCY_CALLS:
                    continue
                if isinstance(func.value, ast.Attribute) and func.value.attr == "node":
                    continue  # constructs' Node.add_dependency: not deprecated
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{func.attr}(...)")
    assert offenders == [], "deprecated aws-cdk-lib dependency APIs:\n" + "\n".join(offenders)


def test_an_image_built_at_deploy_time_makes_its_consumer_depend_on_the_images_stack() -> None:
    import aws_cdk as cdk
    from constructs import Construct

    from stacks.config import load_config
    from stacks.image_parameter import ImageFromParameter, image_from_parameter

    app = cdk.App()
    images, training = cdk.Stack(app, "Images"), cdk.Stack(app, "Training")

    class BuiltImage:
        kind, usage, cuda_version = "codebuild", "training", "12.4"
        construct = Construct(images, "Build")

    wrapped = image_from_parameter(training, BuiltImage(), load_config("dev"), "training")
    assert isinstance(wrapped, ImageFromParameter) and wrapped.parameter_name == "/gpu-dev/images/training"
    assert [s.node.id for s in training.dependencies] == ["Images"]
    assert images.dependencies == []


# -- Node.js version banner ------------------------------------------------------------------------------------------


def test_every_cdk_entry_point_silences_the_node_version_banner() -> None:
    app = shlex.split(json.loads((ROOT / "cdk.json").read_text())["app"])
    assignments = dict(token.split("=", 1) for token in app if "=" in token and not token.startswith("-"))
    assert app[len(assignments) :] == ["python3", "app.py"]
    makefile = _exports((ROOT / "Makefile").read_text(), r"^export (JSII_SILENCE_WARNING_\w+) := (.+)$")
    ci = _exports((ROOT / ".ci" / "run").read_text(), r"^export (JSII_SILENCE_WARNING_\w+)=(.+)$")
    expected = {
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    assert assignments == makefile == ci == expected


def test_readme_recommends_a_supported_node_lts() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "Node.js 24 LTS" in quick_start and "Node.js 20+" not in quick_start


# -- linters offline -------------------------------------------------------------------------------------------------


def test_dockerfile_lint_target_runs_checkov_offline() -> None:
    dry = _make("-n", "-o", ".venv/.installed", "-o", "node_modules/.installed", "lint-dockerfiles")
    assert dry.returncode == 0, dry.stderr
    assert "--skip-download" in dry.stdout and "--framework dockerfile" in dry.stdout
    for dockerfile in ("containers/training/Dockerfile", "containers/inference/Dockerfile"):
        assert dockerfile in dry.stdout


def _no_network_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot block the network here (unshare -rn is not permitted)")
    return [unshare, "-rn"]


@pytest.mark.slow
def test_checkov_and_hadolint_run_with_the_network_blocked() -> None:
    bindir = Path(sys.executable).parent
    dockerfile = "containers/training/Dockerfile"
    offline = _no_network_prefix()
    hadolint = subprocess.run(
        [*offline, str(bindir / "hadolint"), dockerfile], cwd=ROOT, capture_output=True, text=True
    )
    assert hadolint.returncode == 0 and hadolint.stdout == hadolint.stderr == "", hadolint.stdout + hadolint.stderr
    checkov_argv = [str(bindir / "checkov"), "-f", dockerfile, "--framework", "dockerfile", "--quiet", "--compact"]
    checkov = subprocess.run([*offline, *checkov_argv, "--skip-download"], cwd=ROOT, capture_output=True, text=True)
    assert checkov.returncode == 0, checkov.stdout + checkov.stderr
    assert "Failed checks: 0" in checkov.stdout
    assert checkov.stderr == ""  # without --skip-download: a NameResolutionError traceback for bridgecrew.cloud


# -- progress: make setup, make bench --------------------------------------------------------------------------------


def test_first_setup_prints_what_it_installs() -> None:
    dry = _make("-n", "-W", "requirements.txt", "-W", "package.json", ".venv/.installed", "node_modules/.installed")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    requirements = next(line for line in lines if "-r requirements-dev.txt" in line)
    assert "--quiet" not in requirements  # pip lists every package it collects and installs
    npm = next(line for line in lines if line.startswith("npm ci"))
    assert "--loglevel" not in npm
    steps = [line for line in lines if line.startswith('echo "==> [setup')]
    assert [re.search(r"\[setup (\d)/3\]", line).group(1) for line in steps] == ["1", "2", "2", "3"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("args", "quick"),
    [(["bench"], False), (["bench", "QUICK=1"], True), (["bench-quick"], True)],
)
def test_bench_states_its_duration_and_has_a_quick_mode(args: list[str], quick: bool) -> None:
    dry = _make("-n", "-o", ".venv/.installed", "-o", "node_modules/.installed", *args)
    assert dry.returncode == 0, dry.stderr
    runs = re.findall(r"-m (benchmarks\.\w+)(.*)", dry.stdout)
    assert [name for name, _ in runs] == [
        "benchmarks.training_data",
        "benchmarks.inference_batching",
        "benchmarks.inference_batching",  # the MLP, then the convnet
        "benchmarks.synth_and_test",
    ]
    assert "--model convnet" in runs[2][1] and "--model" not in runs[1][1]
    assert all(("--quick" in flags) == quick for _, flags in runs)
    plan = dry.stdout.split("-m benchmarks.training_data", 1)[0]  # printed before the first benchmark
    assert re.search(r"about \d+ minutes on 2 cores", plan)
    assert ("leaves docs/ untouched" in plan) == quick


def test_bench_gpu_without_a_gpu_stops_at_once(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"  # what the NVIDIA driver's nvidia-smi does when no GPU/driver is there
    fake.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    result = _make("bench-gpu", env=env, timeout=30)
    assert result.returncode == 2
    assert "make bench-gpu: needs an NVIDIA GPU, and this machine has none" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "setup" not in result.stdout and "pip install" not in result.stdout  # nothing was installed first


def test_gpu_benchmark_on_cuda_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    import torch

    from benchmarks import training_gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert training_gpu.main(["--device", "cuda"]) == 2
    assert "training_gpu needs an NVIDIA GPU: torch" in capsys.readouterr().err
    assert "is a CPU-only build" in (training_gpu.cuda_problem() or "")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert "(CUDA 12.8) sees no NVIDIA GPU" in (training_gpu.cuda_problem() or "")
