"""The inference image's Dockerfile: lint clean (hadolint, checkov), exec-form entrypoint, sane context."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from gpu_serve.__main__ import main as entrypoint

ROOT = Path(__file__).resolve().parents[3]
CONTEXT = ROOT / "containers" / "inference"
DOCKERFILE = CONTEXT / "Dockerfile"


def _result(lint_results: dict[str, tuple[int, str, str]], name: str) -> tuple[int, str, str]:
    if name not in lint_results:
        pytest.fail(f"{name} is not installed next to {sys.executable} (it is in requirements-dev.txt)")
    return lint_results[name]


@pytest.mark.dev_tools
def test_hadolint_reports_nothing(lint_results: dict[str, tuple[int, str, str]]) -> None:
    code, out, err = _result(lint_results, "hadolint")
    assert code == 0 and not out.strip(), out + err


@pytest.mark.dev_tools
def test_checkov_dockerfile_checks_pass(lint_results: dict[str, tuple[int, str, str]]) -> None:
    code, out, err = _result(lint_results, "checkov")
    report = json.loads(out)
    failed = [(c["check_id"], c["check_name"]) for c in report["results"]["failed_checks"]]
    assert code == 0 and not failed, failed or err[-2000:]
    assert report["summary"]["passed"] >= 40 and report["summary"]["parsing_errors"] == 0


def test_every_skip_is_explained_inline() -> None:
    skips = re.findall(r"#\s*checkov:skip=(\w+)(:?)(.*)", DOCKERFILE.read_text())
    assert skips, "expected the documented CKV_DOCKER_7 skip"
    for check, colon, reason in skips:
        assert colon and len(reason.strip()) > 20, f"{check} is skipped without a reason"


def test_image_shape() -> None:
    text = DOCKERFILE.read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert base and base.group(1).startswith("public.ecr.aws/deep-learning-containers/pytorch-inference:")
    assert ":latest" not in base.group(1) and "-gpu-" in base.group(1)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.MULTILINE)
    assert '\nENTRYPOINT ["python", "-m", "gpu_serve"]\n' in text  # exec form: `docker run IMAGE serve`
    assert '\nCMD ["serve"]\n' in text
    assert re.search(r"^USER \d+:\d+$", text, re.MULTILINE)
    for src in re.findall(r"^COPY (\S+) ", text, re.MULTILINE):
        assert (CONTEXT / src).exists(), f"COPY {src}: not in the build context"
    ignore = (CONTEXT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") + 1 :] and "!gpu_serve/" in ignore and "!requirements.txt" in ignore


def test_entrypoint_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert entrypoint(["help"]) == 0 and "python -m gpu_serve serve" in capsys.readouterr().out
    assert entrypoint(["train"]) == 2 and "unknown command 'train'" in capsys.readouterr().err
