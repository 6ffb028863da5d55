"""The construct library installs as its README says, and every example of the README runs.

The README's convention (its Install section, "The examples"): the ``python`` blocks before the ``## Constructs``
heading are complete programs, each run on its own; the blocks from that heading on are one app, run in order in
one namespace (the first creates ``app``, ``stack`` and ``role``; the last synthesizes). A block whose first line
is ``# needs an AWS account`` is not run.

The slow test installs the library the README's way (``pip install "./constructs[nag,codebuild]"``, from a copy of
the folder with ``containers/training`` beside it as in a checkout, so the checkout gets no ``build/`` and the wheel
carries the training runtime, ``constructs/setup.py``) into a new virtual environment, once per test session, and runs
the blocks there, from the repository root (their Docker build contexts are its ``containers/`` folders); the
runner's ``sys.path`` holds the environment only, so nothing of the repository but the installed library can be
imported. Each block reports alone (its README line), and a failing block of the app does not hide the later ones.

The fast tests check the declared dependencies against what the package imports, and the Install section
against the declared dependencies (``botocore`` was imported but not declared: ``ModuleNotFoundError`` on
first use outside this repository's virtual environment).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "constructs"
README = LIBRARY / "README.md"
PYPROJECT = tomllib.loads((LIBRARY / "pyproject.toml").read_text())
#: What the README's Install section tells users to install (the examples need both extras).
INSTALL_TARGET = "./constructs[nag,codebuild]"
#: The first line of a block that is shown but not run.
NEEDS_ACCOUNT = "# needs an AWS account"
#: Blocks from this heading on build one app together.
APP_HEADING = "## Constructs"


@dataclass(frozen=True)
class Block:
    """One ``python`` block of the README: its first code line (1-based), code and group."""

    line: int
    code: str
    #: ``"program"`` (runs alone) or ``"app"`` (runs after the app's earlier blocks, in their namespace).
    group: str

    @property
    def needs_account(self) -> bool:
        return self.code.lstrip().startswith(NEEDS_ACCOUNT)


def readme_blocks(text: str) -> list[Block]:
    """Every fenced ``python`` block of ``text``, in order, grouped by the README's convention."""
    blocks: list[Block] = []
    lines = text.splitlines()
    group = "program"
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.strip() == APP_HEADING:
            group = "app"
        fence = re.match(r"^(`{3,})\s*([\w+-]*)\s*$", line)
        if fence is None:
            index += 1
            continue
        end = next((j for j in range(index + 1, len(lines)) if lines[j].strip() == fence.group(1)), None)
        if end is None:
            raise ValueError(f"{README}:{index + 1}: the code block opened here is never closed")
        if fence.group(2) == "python":
            blocks.append(Block(index + 2, "\n".join(lines[index + 1 : end]) + "\n", group))
        index = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text())

#: Runs the blocks of a JSON file; writes {line: {"status", "error", "seconds"}} as JSON. Each block is compiled
#: under the README's path with its own line numbers, so a traceback names the README line that failed.
RUNNER = r"""
import json, sys, time, traceback

blocks = json.loads(open(sys.argv[1]).read())
results = {}
app_namespace = {"__name__": "__main__"}
for block in blocks:
    started = time.monotonic()
    status, error = "skipped", ""
    if not block["skip"]:
        namespace = app_namespace if block["group"] == "app" else {"__name__": "__main__"}
        source = "\n" * (block["line"] - 1) + block["code"]
        try:
            exec(compile(source, block["path"], "exec"), namespace)
            status = "ok"
        except BaseException:
            status, error = "error", traceback.format_exc(limit=-8)
    results[block["line"]] = {"status": status, "error": error, "seconds": round(time.monotonic() - started, 1)}
    with open(sys.argv[2], "w") as handle:
        json.dump(results, handle)
"""


# --------------------------------------------------------------------------------------------------
# Fast: what the package imports, what pyproject.toml declares, what the README says
# --------------------------------------------------------------------------------------------------


def _requirement_name(requirement: str) -> str:
    name = re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _declared() -> dict[str, str]:
    """Normalized distribution name -> ``""`` (a dependency) or the extra that declares it."""
    declared = {_requirement_name(r): "" for r in PYPROJECT["project"]["dependencies"]}
    for extra, requirements in PYPROJECT["project"].get("optional-dependencies", {}).items():
        declared.update({_requirement_name(r): extra for r in requirements})
    return declared


def _third_party_imports() -> dict[str, str]:
    """Top-level name of every import in the package that is neither stdlib nor the package -> one module using it."""
    found: dict[str, str] = {}
    package = LIBRARY / "gpu_constructs"
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in {"gpu_constructs", "__future__"}:
                    found.setdefault(top, path.relative_to(LIBRARY).as_posix())
    return found


def test_every_imported_distribution_is_declared() -> None:
    """Each third-party import (lazy ones included) belongs to a distribution that pyproject.toml declares, as a
    dependency or in an extra; the distribution is looked up in this environment's installed metadata."""
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    imports = _third_party_imports()
    assert {"aws_cdk", "constructs", "botocore", "cdk_nag"} <= set(imports), sorted(imports)
    undeclared = {}
    for top, module in sorted(imports.items()):
        owners = {_requirement_name(d) for d in distributions.get(top, [])}
        assert owners, f"{module} imports {top!r}, which no installed distribution provides"
        if not owners & set(declared):
            undeclared[top] = (module, sorted(owners))
    assert undeclared == {}, f"imported but not declared in constructs/pyproject.toml: {undeclared}"


def test_install_section_names_every_requirement_and_extra() -> None:
    text = README.read_text()
    install = text[text.index("## Install") : text.index("## Public API")]
    for name, extra in _declared().items():
        assert f"`{name}`" in install, f"the Install section does not name {name!r} (constructs/pyproject.toml)"
        if extra:
            assert f"extra `{extra}`" in install, f"the Install section does not name the extra {extra!r}"
    assert f'pip install "{INSTALL_TARGET}"' in install
    assert NEEDS_ACCOUNT in install and "tests/packaging/test_constructs_readme.py" in install


def test_readme_blocks_follow_the_convention() -> None:
    """Programs first, then the app: it starts with the app and the stack and ends with a synth."""
    programs = [b for b in BLOCKS if b.group == "program"]
    app = [b for b in BLOCKS if b.group == "app"]
    assert len(programs) >= 1 and len(app) >= 10, [(b.line, b.group) for b in BLOCKS]
    assert all(p.line < a.line for p in programs for a in app)
    assert "app = cdk.App()" in app[0].code and "stack = cdk.Stack(app" in app[0].code
    assert app[-1].code.rstrip().splitlines()[-1].startswith("app.synth()")
    for program in programs:
        assert "app.synth()" in program.code, f"README line {program.line}: a program ends with its synth"
    assert not app[0].needs_account, "the block that starts the app must run"


def test_block_parser_groups_and_skips(tmp_path: Path) -> None:
    text = (
        "# t\n```python\nprint(1)\n```\n````text\n```python\nnot code\n```\n````\n"
        f"{APP_HEADING}\n```python\n{NEEDS_ACCOUNT}\nx = 1\n```\n```bash\nls\n```\n```python\ny = 2\n```\n"
    )
    blocks = readme_blocks(text)
    assert [(b.line, b.group, b.needs_account) for b in blocks] == [
        (3, "program", False),
        (12, "app", True),
        (19, "app", False),
    ]
    assert blocks[2].code == "y = 2\n"
    with pytest.raises(ValueError, match=r"README.md:2: the code block opened here is never closed"):
        readme_blocks("x\n```python\nprint(1)\n")


# --------------------------------------------------------------------------------------------------
# Slow: a new virtual environment with only the library, and the README's blocks run in it
# --------------------------------------------------------------------------------------------------


def _clean_env(tmp: Path) -> dict[str, str]:
    """This process's environment without anything that would add the repository to ``sys.path``."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.update(
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        TMPDIR=str(tmp),  # the CDK's default cloud-assembly folders land here
        JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION="1",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        CDK_DISABLE_VERSION_CHECK="1",
    )
    return env


@pytest.fixture(scope="session")
def library_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """(python of a new venv with ``./constructs[nag,codebuild]`` installed, seconds the install took)."""
    base = tmp_path_factory.mktemp("constructs-venv")
    source = base / "checkout" / "constructs"
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    shutil.copytree(LIBRARY, source, ignore=ignore)
    # What the build copies into the package (gpu_train, default_code, vendor): TrainingPipeline needs it.
    shutil.copytree(ROOT / "containers" / "training", source.parent / "containers" / "training", ignore=ignore)
    venv = base / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    target = INSTALL_TARGET.replace("./constructs", str(source))
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", target],
        capture_output=True, text=True, timeout=900, env=_clean_env(base),
    )  # fmt: skip
    assert proc.returncode == 0, f"pip install {target} failed:\n{proc.stdout}\n{proc.stderr}"
    return python, time.monotonic() - started


@pytest.fixture(scope="module")
def block_results(library_venv: tuple[Path, float], tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    python, _ = library_venv
    work = tmp_path_factory.mktemp("readme-blocks")
    blocks = [
        {"line": b.line, "code": b.code, "group": b.group, "skip": b.needs_account, "path": str(README)} for b in BLOCKS
    ]
    (work / "blocks.json").write_text(json.dumps(blocks))
    (work / "runner.py").write_text(RUNNER)
    results = work / "results.json"
    proc = subprocess.run(
        [str(python), "-I", str(work / "runner.py"), str(work / "blocks.json"), str(results)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=_clean_env(work),
    )  # fmt: skip
    assert results.is_file(), f"the runner wrote no results (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return {int(line): result for line, result in json.loads(results.read_text()).items()}


@pytest.mark.slow
def test_library_venv_holds_the_library_and_its_dependencies_only(library_venv: tuple[Path, float]) -> None:
    python, seconds = library_venv
    print(f"venv + pip install {INSTALL_TARGET}: {seconds:.0f} s")
    proc = subprocess.run(
        [str(python), "-I", "-c", "import importlib.metadata as m, json; "
         "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    installed = set(json.loads(proc.stdout))
    assert {"gpu-constructs", "aws-cdk-lib", "botocore", "cdk-nag", "deploy-time-build"} <= installed
    assert not installed & {"gpu-platform", "boto3", "pydantic", "torch", "numpy"}, sorted(installed)
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    # The installed library reads its own copy of the training runtime, not the checkout's containers/training.
    probe = subprocess.run(
        [str(python), "-I", "-c", "from gpu_constructs.training_spec import code_package as c; "
         "print(c.DEFAULT_RUNTIME_DIR); print(c.PACKAGED_RUNTIME_DIR)"],
        capture_output=True, text=True, timeout=60, cwd=python.parent,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    runtime, packaged = probe.stdout.split()
    assert runtime == packaged and Path(runtime).is_relative_to(python.parent.parent.resolve()), probe.stdout
    assert (Path(runtime) / "gpu_train" / "bootstrap.py").read_bytes() == (
        ROOT / "containers" / "training" / "gpu_train" / "bootstrap.py"
    ).read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[f"README-line-{b.line}-{b.group}" for b in BLOCKS])
def test_readme_block_runs(block: Block, block_results: dict[int, Any]) -> None:
    result = block_results.get(block.line)
    assert result is not None, f"README line {block.line}: not run (the runner stopped before it)"
    if block.needs_account:
        assert result["status"] == "skipped"
        pytest.skip(f"README line {block.line}: {NEEDS_ACCOUNT}")
    assert result["status"] == "ok", f"README line {block.line} ({block.group} block) failed:\n{result['error']}"
