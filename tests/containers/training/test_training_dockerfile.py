"""The training image definition: lint-clean (hadolint, checkov) and the SageMaker start contract."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from container_helpers import checkov_argv

TRAINING_DIR = Path(__file__).resolve().parents[3] / "containers" / "training"
DOCKERFILE = TRAINING_DIR / "Dockerfile"
VENV_BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = VENV_BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (it is in requirements-dev.txt)")
    return found


@pytest.mark.dev_tools
def test_hadolint_finds_nothing() -> None:
    result = subprocess.run([_tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


@pytest.mark.dev_tools
def test_checkov_finds_nothing_and_every_skip_is_explained() -> None:
    result = subprocess.run(checkov_argv(DOCKERFILE, _tool("checkov")), capture_output=True, text=True, check=False)
    report = json.loads(result.stdout)
    assert report["summary"]["failed"] == 0 and report["summary"]["parsing_errors"] == 0, result.stdout
    assert result.returncode == 0
    skips = re.findall(r"# checkov:skip=(CKV_DOCKER_\d+):(.*)", DOCKERFILE.read_text())
    assert {check for check, _ in skips} == {"CKV_DOCKER_7", "CKV_DOCKER_8"}
    assert all(len(reason.strip()) > 30 for _, reason in skips)


def test_sagemaker_start_contract() -> None:
    text = DOCKERFILE.read_text()
    default = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert default is not None
    assert re.fullmatch(
        r"public\.ecr\.aws/deep-learning-containers/pytorch-training:\d+\.\d+\.\d+-gpu-py3\d+-cu\d+-ubuntu\d+\.\d+-sagemaker",
        default.group(1),
    )
    assert "FROM ${BASE_IMAGE}" in text
    # `docker run IMAGE train` must reach the runtime as PID 1 (exec form: it gets SIGTERM itself).
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", text, re.MULTILINE)
    cmd = re.search(r"^CMD (.+)$", text, re.MULTILINE)
    assert entrypoint is not None and json.loads(entrypoint.group(1)) == ["python3", "-m", "gpu_train"]
    assert cmd is not None and json.loads(cmd.group(1)) == ["train"]
    assert "HEALTHCHECK NONE" in text


def test_build_context_holds_only_the_runtime() -> None:
    ignore = (TRAINING_DIR / ".dockerignore").read_text().split()
    assert ignore[ignore.index("**")] == "**" and "!gpu_train/" in ignore and "!requirements.txt" in ignore
    for source in re.findall(r"^COPY (\S+)", DOCKERFILE.read_text(), re.MULTILINE):
        assert (TRAINING_DIR / source).exists(), source
    requirements = (TRAINING_DIR / "requirements.txt").read_text()
    pins = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    assert pins and all("==" in pin for pin in pins) and not any(p.startswith("torch") for p in pins)
