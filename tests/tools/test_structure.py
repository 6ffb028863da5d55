"""The code's structure: no import circle between first-party modules, no ``sys.path`` edits, helpers that do not
reach back into the construct that composes them, and no function over :data:`MAX_FUNCTION_LINES` lines.

Packaging makes the first-party packages importable (``make setup`` installs the project and ``./constructs``
in editable mode), so no module puts a folder on ``sys.path`` itself. Only the two container runtimes do, for
the user's code directory: ``gpu_train.plugins`` and ``gpu_serve.handler``.

The import graph is read from the source with :mod:`ast`: module-level imports only (an import inside a
function runs later, and one under ``if TYPE_CHECKING:`` never runs). A circle in that graph is a real one:
which module is initialized first would depend on which one a caller happens to import first.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Top-level first-party package -> its folder (as pyproject.toml's package-dir and constructs/ map them).
PACKAGES: dict[str, Path] = {
    "gpu_constructs": ROOT / "constructs" / "gpu_constructs",
    "stacks": ROOT / "stacks",
    "platform_tools": ROOT / "platform_tools",
    "gpuctl": ROOT / "gpuctl",
    "gpu_train": ROOT / "containers" / "training" / "gpu_train",
    "gpu_serve": ROOT / "containers" / "inference" / "gpu_serve",
    "benchmarks": ROOT / "benchmarks",
}

#: Top-level modules that are not in a package.
MODULES: dict[str, Path] = {"app": ROOT / "app.py"}

#: The only files that may edit ``sys.path``: the runtimes put the user's ``code/`` folder on it (the script runner
#: needs none: it starts ``python script.py`` as a child, which puts the script's folder first itself), and the
#: launcher zipapp puts its own extracted folder and vendored wheels on it before anything of ``gpu_train`` can be
#: imported.
SYS_PATH_ALLOWED = {
    ROOT / "containers" / "training" / "gpu_train" / "plugins.py",
    ROOT / "containers" / "training" / "gpu_train" / "bootstrap.py",
    ROOT / "containers" / "inference" / "gpu_serve" / "handler.py",
}

_SKIP_DIRS = {
    ".git",
    ".venv",
    "node_modules",
    "cdk.out",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".bench",
    ".gpu-check",
    ".gpu-wheels",
    "build",
    "dist",
}
_SYS_PATH_MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__delitem__"}

#: The folders whose functions are held to :data:`MAX_FUNCTION_LINES`.
FUNCTION_LENGTH_ROOTS = ("constructs", "stacks", "gpuctl", "platform_tools", "containers")
#: The most lines a function may span, from its ``def`` to its last line (docstring and signature included): longer
#: ones do several things and split at their seams.
MAX_FUNCTION_LINES = 120
#: Functions allowed to be longer, as ``<path relative to the repository>::<qualified name>``, each with why.
LONG_FUNCTION_EXCEPTIONS: dict[str, str] = {
    "platform_tools/diagram.py::render": (
        "one matplotlib drawing whose steps share the figure's coordinates, scale and margins; it is split when "
        "the diagram tool is next changed"
    ),
}

#: The package whose helper modules must not import the construct that composes them (``TrainingPipeline`` passes
#: them what they read), and the modules that may: the construct's own module and the package's public face.
HELPERS_PACKAGE = "gpu_constructs.training"
COMPOSING_MODULE = "gpu_constructs.training.pipeline"
MAY_IMPORT_COMPOSING_MODULE = {COMPOSING_MODULE, HELPERS_PACKAGE}


# --------------------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------------------


def module_files(packages: Mapping[str, Path], modules: Mapping[str, Path] | None = None) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` (and the lone ``modules``)."""
    found: dict[str, Path] = dict(modules or {})
    for name, folder in packages.items():
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            if _SKIP_DIRS.intersection(path.relative_to(folder).parts):
                continue
            parts = [name, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: Iterable[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported (not in functions or classes' methods)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_level(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _module_level(node.body)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The first-party modules ``module`` imports at module level (a submodule when one is named, else its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = _resolve(node, module, path.name == "__init__.py")
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for name in names:
            # `import a.b.c` where a.b.c is no module of ours: the deepest one that is.
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def any_imports_of(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """Every first-party module ``module`` names in an import, wherever the import is: module level, a function, or
    ``if TYPE_CHECKING:`` (a dependency in the code even where it does not run at import time)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, module, path.name == "__init__.py")
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        targets.update(name for name in names if name in known and name != module)
    return targets


def function_lengths(path: Path) -> Iterator[tuple[str, int]]:
    """``(qualified name, lines from its def to its end)`` of every function and method in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            else:
                yield from visit(child, prefix)

    yield from visit(tree, "")


def long_functions(roots: Iterable[Path], base: Path, limit: int) -> dict[str, int]:
    """``<path relative to base>::<qualified name>`` -> lines, for each function of ``roots`` over ``limit``."""
    return {
        f"{path.relative_to(base).as_posix()}::{name}": lines
        for root in roots
        for path in python_files(root)
        for name, lines in function_lengths(path)
        if lines > limit
    }


def import_graph(packages: Mapping[str, Path], modules: Mapping[str, Path] | None = None) -> dict[str, set[str]]:
    known = module_files(packages, modules)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_path(graph, set(c)) for c in components]


def _cycle_path(graph: Mapping[str, set[str]], members: set[str]) -> list[str]:
    """A closed path ``a -> b -> ... -> a`` inside one strongly connected component (for the message)."""
    start = min(members)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for succ in sorted(graph[node] & members):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if succ not in previous:
                previous[succ] = node
                frontier.append(succ)
    return sorted(members)


def sys_path_edits(path: Path) -> list[int]:
    """Lines of ``path`` that change ``sys.path`` (a mutating call, an assignment, ``site.addsitedir``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def is_sys_path(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "path" and ast.unparse(node.value) == "sys"

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            mutates = node.func.attr in _SYS_PATH_MUTATORS and is_sys_path(node.func.value)
            if mutates or node.func.attr == "addsitedir":
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            for target in targets:
                inner = target.value if isinstance(target, ast.Subscript) else target
                if is_sys_path(inner):
                    lines.append(node.lineno)
    return sorted(lines)


def python_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        if not _SKIP_DIRS.intersection(path.relative_to(root).parts):
            yield path


# --------------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------------


def test_first_party_modules_import_no_circle() -> None:
    graph = import_graph(PACKAGES, MODULES)
    assert "stacks.app_builder" in graph and "gpuctl.commands.train" in graph and "app" in graph
    cycles = find_cycles(graph)
    assert not cycles, "import circles (module-level imports): " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_sys_path_edits_outside_the_runtimes() -> None:
    edits = {
        str(path.relative_to(ROOT)): lines
        for path in python_files(ROOT)
        if path not in SYS_PATH_ALLOWED and (lines := sys_path_edits(path))
    }
    assert not edits, f"sys.path is edited (packaging makes imports work: make setup): {edits}"
    assert all(sys_path_edits(path) for path in SYS_PATH_ALLOWED), "the allow-list names a file that no longer needs it"


def test_training_helpers_take_inputs_not_the_pipeline() -> None:
    """The modules of ``gpu_constructs.training`` get what they read from ``TrainingPipeline``; none imports it, not
    even for type checking (that would be the circle pipeline -> helper -> pipeline again)."""
    known = module_files(PACKAGES)
    helpers = {name: path for name, path in known.items() if name.startswith(f"{HELPERS_PACKAGE}.")}
    assert f"{HELPERS_PACKAGE}.definition" in helpers and COMPOSING_MODULE in helpers
    importers = sorted(
        name
        for name, path in helpers.items()
        if name not in MAY_IMPORT_COMPOSING_MODULE and COMPOSING_MODULE in any_imports_of(name, path, known)
    )
    assert not importers, f"these modules import {COMPOSING_MODULE} (pass them what they read instead): {importers}"


def test_no_function_is_longer_than_the_limit() -> None:
    found = long_functions((ROOT / name for name in FUNCTION_LENGTH_ROOTS), ROOT, MAX_FUNCTION_LINES)
    offenders = {name: lines for name, lines in found.items() if name not in LONG_FUNCTION_EXCEPTIONS}
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines (split them at their seams): " + ", ".join(
        f"{name} ({lines} lines)" for name, lines in sorted(offenders.items())
    )
    stale = sorted(set(LONG_FUNCTION_EXCEPTIONS) - set(found))
    assert not stale, f"LONG_FUNCTION_EXCEPTIONS names functions that are no longer over the limit: {stale}"


def test_stacks_holds_only_stacks_and_their_helpers() -> None:
    """The tools that read the cloud assembly live in platform_tools, not among the stacks."""
    tools = {"diagram", "summary", "config_reference"}
    assert not tools & {p.stem for p in (ROOT / "stacks").glob("*.py")}
    assert tools <= {p.stem for p in (ROOT / "platform_tools").glob("*.py")}


# --------------------------------------------------------------------------------------------------
# The checker on synthetic packages
# --------------------------------------------------------------------------------------------------


CIRCLE = {
    "pkg/__init__.py": "",
    "pkg/a.py": "from pkg.b import B\nA = 1\n",
    "pkg/b.py": "from . import c\nB = 2\n",
    "pkg/c.py": "import pkg.a\n",
    "pkg/d.py": "from pkg import a\n",
}
CIRCLE_THROUGH_PACKAGE_INIT = {
    "pkg/__init__.py": "",
    "pkg/sub/__init__.py": "from .impl import X\n",
    "pkg/sub/impl.py": "from pkg.other import Y\nX = 1\n",
    "pkg/other.py": "try:\n    from pkg.sub import X\nexcept ImportError:\n    X = None\nY = 2\n",
}
NO_CIRCLE_AT_IMPORT_TIME = {
    "pkg/__init__.py": "",
    "pkg/a.py": "from pkg.b import B\n",
    "pkg/b.py": (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.a import A\n"
        "def f():\n    from pkg import a\n"
        "B = 1\n"
    ),
}


@pytest.mark.parametrize(
    ("files", "cycles"),
    [
        (CIRCLE, [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]),
        (CIRCLE_THROUGH_PACKAGE_INIT, [["pkg.other", "pkg.sub", "pkg.sub.impl", "pkg.other"]]),
        (NO_CIRCLE_AT_IMPORT_TIME, []),  # function-level and TYPE_CHECKING imports do not run at import time
    ],
    ids=["circle", "through-package-init", "function-level-and-type-checking"],
)
def test_checker_finds_circles_in_a_synthetic_package(
    tmp_path: Path, files: Mapping[str, str], cycles: list[list[str]]
) -> None:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = import_graph({"pkg": tmp_path / "pkg"})
    assert find_cycles(graph) == cycles


def test_checker_finds_every_import_of_a_module(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/main.py": "X = 1\n",
        "pkg/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.main import X\n",
        "pkg/late.py": "def f():\n    from . import main\n",
        "pkg/plain.py": "import pkg.main\n",
        "pkg/clean.py": "import json\n",
    }
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    known = module_files({"pkg": tmp_path / "pkg"})
    importers = {name for name, path in known.items() if "pkg.main" in any_imports_of(name, path, known)}
    assert importers == {"pkg.typed", "pkg.late", "pkg.plain"}


def test_checker_measures_functions_from_def_to_end(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(5))
    path.write_text(
        f"class C:\n    @staticmethod\n    def m():\n{body.replace('    ', '        ')}\n\ndef f():\n{body}"
    )
    assert dict(function_lengths(path)) == {"C.m": 6, "f": 6}
    assert long_functions([tmp_path], tmp_path, 5) == {"m.py::C.m": 6, "m.py::f": 6}
    assert long_functions([tmp_path], tmp_path, 6) == {}


@pytest.mark.parametrize(
    ("source", "edits"),
    [
        ("import sys\nsys.path.insert(0, 'x')\n", [2]),
        ("import sys\nif 'x' not in sys.path:\n    sys.path.append('x')\n", [3]),
        ("import sys\nsys.path = ['x']\n", [2]),
        ("import sys\nsys.path[:0] = ['x']\n", [2]),
        ("import site\nsite.addsitedir('x')\n", [2]),
        ("import sys\nprint(sys.path)\nfound = 'x' in sys.path\n", []),
    ],
)
def test_checker_finds_sys_path_edits(tmp_path: Path, source: str, edits: list[int]) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert sys_path_edits(path) == edits


#: Sub-packages of gpu_constructs whose tests live elsewhere than tests/constructs/<name>/, and why.
TESTS_ELSEWHERE = {
    "rules": "tests/rules/: one test file per rule of the pack, beside the pack's own tests",
    "training_spec": "tests/constructs/training/: the job spec is what the training pipeline renders",
}


def test_the_tests_mirror_the_construct_packages() -> None:
    """Each sub-package of gpu_constructs has its tests in tests/constructs/<name>/ (or a stated other home), and the
    test folders name no package that does not exist."""
    library = ROOT / "constructs" / "gpu_constructs"
    packages = {p.parent.name for p in library.glob("*/__init__.py")} - {"_runtime"}
    folders = {p.name for p in (ROOT / "tests" / "constructs").iterdir() if p.is_dir() and p.name != "__pycache__"}
    untested = sorted(packages - folders - set(TESTS_ELSEWHERE))
    assert untested == [], f"sub-packages without tests/constructs/<name>/: {untested}"
    assert folders <= packages, f"tests/constructs/ folders naming no sub-package: {sorted(folders - packages)}"
    assert not (ROOT / "tests" / "unit").exists(), "tests/unit/ is sorted into tests/constructs, config, gpuctl, ..."
    for name in folders:
        assert list((ROOT / "tests" / "constructs" / name).glob("test_*.py")), f"tests/constructs/{name}/ has no tests"


def _module_patterns(path: Path) -> list[tuple[str, str]]:
    """``(name, pattern)`` of each module-level ``NAME = re.compile("literal", ...)`` in ``path``."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args):
            continue
        call, first = node.value, node.value.args[0]
        is_compile = isinstance(call.func, ast.Attribute) and call.func.attr == "compile"
        if is_compile and isinstance(first, ast.Constant) and isinstance(first.value, str):
            found += [(t.id, first.value) for t in node.targets if isinstance(t, ast.Name)]
    return found


def test_no_rule_pattern_is_written_twice() -> None:
    """A rule encoded as a regular expression has one home: the same pattern compiled at module level in two
    modules of the library or the config model is one rule written twice (the second copy drifts). Import it."""
    homes: dict[str, list[str]] = {}
    for folder in (ROOT / "constructs" / "gpu_constructs", ROOT / "stacks"):
        for path in sorted(folder.rglob("*.py")):
            if "_runtime" in path.parts:
                continue
            for name, pattern in _module_patterns(path):
                homes.setdefault(pattern.strip("^$"), []).append(f"{path.relative_to(ROOT)}:{name}")
    twice = {pattern: where for pattern, where in homes.items() if len(where) > 1}
    assert twice == {}, f"patterns compiled in more than one module: {twice}"


def test_the_pattern_checker_finds_a_copy(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('import re\nNAME_RE = re.compile(r"^[a-z]+$")\n')
    assert _module_patterns(tmp_path / "a.py") == [("NAME_RE", "^[a-z]+$")]
