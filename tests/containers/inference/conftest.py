"""Fixtures of the inference server tests: model directories built once per session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from container_helpers import checkov_argv
from serve_models import build_mlp_dir, build_torchscript_dir


@pytest.fixture(scope="session")
def mlp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mlp_dir(tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="session")
def torchscript_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_torchscript_dir(tmp_path_factory.mktemp("torchscript") / "model")


@pytest.fixture(autouse=True)
def _forget_handler_modules() -> None:
    """Each test imports its own code/inference.py (module names are shared across model dirs)."""
    for name in ("inference", "net"):
        sys.modules.pop(name, None)


# -- Dockerfile linters --------------------------------------------------------------------------------------
# checkov takes seconds to start, so when the Dockerfile tests are selected its run starts right after
# collection and overlaps the other tests (in a single process; under xdist each test starts its own run).
DOCKERFILE = Path(__file__).resolve().parents[3] / "containers" / "inference" / "Dockerfile"
LINTERS: dict[str, list[str]] = {
    "hadolint": ["hadolint", str(DOCKERFILE)],
    "checkov": checkov_argv(DOCKERFILE),
}
_lint_runs: dict[str, subprocess.Popen[str]] = {}


def _start_linters() -> dict[str, subprocess.Popen[str]]:
    bindir = Path(sys.executable).parent
    for name, argv in LINTERS.items():
        if name not in _lint_runs and (bindir / argv[0]).exists():
            _lint_runs[name] = subprocess.Popen(
                [str(bindir / argv[0]), *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
    return _lint_runs


def _is_lint_test(item: pytest.Item) -> bool:
    return "test_serve_dockerfile.py" in item.nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Run them last, so that the linters have the whole session to finish in the background.
    items[:] = [item for item in items if not _is_lint_test(item)] + [item for item in items if _is_lint_test(item)]


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or hasattr(config, "workerinput"):
        return
    if any(_is_lint_test(item) for item in session.items):  # still selected after -k / -m
        _start_linters()


@pytest.fixture(scope="session")
def lint_results() -> dict[str, tuple[int, str, str]]:
    """``{linter: (exit code, stdout, stderr)}`` of the linters that are installed."""
    results = {}
    for name, proc in _start_linters().items():
        out, err = proc.communicate(timeout=300)
        results[name] = (proc.returncode, out, err)
    return results
