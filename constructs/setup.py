"""The build step that ships the platform's training runtime inside the library (everything else: pyproject.toml).

``TrainingPipeline`` builds, at synth, the launcher zipapp from the ``gpu_train`` package and the vendored wheels,
and packages the built-in training code; all three live in the repository's ``containers/training`` folder, outside
this project. So that an installed library finds them, the wheel carries byte-for-byte copies as package data:

* ``containers/training/gpu_train/``  -> ``gpu_constructs/_runtime/training/gpu_train/`` (modules and package data);
* ``containers/training/default_code/`` -> ``gpu_constructs/_runtime/training/default_code/``;
* ``containers/training/vendor/``     -> ``gpu_constructs/_runtime/training/vendor/``;

without ``__pycache__`` folders, ``.pyc``/``.pyo`` files and dot files (the files the launcher zipapp leaves out,
``gpu_constructs.training_spec.code_package``). ``gpu_constructs.training_spec.code_package`` reads the copy when it
exists, else the repository's folder (a checkout or an editable install).

The copies are written into the build folder only (``build_py``'s ``build_lib``), never into this source tree; an
editable install copies nothing (it reads the checkout). An sdist carries them under the same path inside the
package, so a wheel built from the sdist has them too. Built from this folder alone (no ``../containers/training``
and no copy in an sdist), the wheel has no runtime: every construct works except the training code
(``TrainingPipeline`` then raises a ``ValidationError`` that names both places it looked).

Extending ``build_py`` this way, and its ``editable_mode`` (``True`` while an editable install runs it), are
setuptools' documented interface: https://setuptools.pypa.io/en/latest/userguide/extension.html, "Supporting
sdists and editable installs in build sub-commands" (``setuptools.command.build.SubCommand``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
#: The runtime's folder in a checkout of the repository: next to this project.
REPOSITORY_RUNTIME = HERE.parent / "containers" / "training"
#: Where the copy lives inside the package (and inside an sdist).
PACKAGED_RUNTIME = ("gpu_constructs", "_runtime", "training")
#: The parts of ``containers/training`` the library reads.
RUNTIME_PARTS = ("gpu_train", "default_code", "vendor")


def _shipped_files() -> Callable[[Path, str], list[str]]:
    """``gpu_constructs.packaging.runtime_files.shipped_files``, loaded by path (the package's dependencies are not
    there while it is built): the one rule of which runtime files ship, shared with the launcher zipapp."""
    spec = importlib.util.spec_from_file_location(
        "_runtime_files", HERE / "gpu_constructs" / "packaging" / "runtime_files.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped: Callable[[Path, str], list[str]] = module.shipped_files
    return shipped


def runtime_source() -> Path | None:
    """The folder to copy from: the repository's, else an sdist's copy (``None`` when neither exists)."""
    for candidate in (REPOSITORY_RUNTIME, HERE.joinpath(*PACKAGED_RUNTIME)):
        if all((candidate / part).is_dir() for part in RUNTIME_PARTS):
            return candidate
    return None


def runtime_files(source: Path) -> list[str]:
    """The ``/``-separated paths, relative to ``source``, of every file of the runtime parts, sorted."""
    shipped_files = _shipped_files()
    return sorted(name for part in RUNTIME_PARTS for name in shipped_files(source, part))


class BuildPyWithRuntime(build_py):
    """``build_py`` that also copies the runtime into ``<build_lib>/gpu_constructs/_runtime/training``."""

    def _runtime_copies(self) -> list[tuple[Path, Path]]:
        """(source file, file in the build folder) of every runtime file; none for an editable install."""
        source = runtime_source()
        if self.editable_mode or source is None:
            return []
        target = Path(self.build_lib).joinpath(*PACKAGED_RUNTIME)
        return [(source / name, target / name) for name in runtime_files(source)]

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        copies = self._runtime_copies()
        if not copies:
            self.warn(
                f"the training runtime is not in this wheel: neither {REPOSITORY_RUNTIME} (a checkout of the "
                f"repository) nor {HERE.joinpath(*PACKAGED_RUNTIME)} (an sdist) holds {', '.join(RUNTIME_PARTS)}; "
                "TrainingPipeline will not work where this wheel is installed"
            )
        for source, target in copies:
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *(str(target) for _, target in self._runtime_copies())]


class SdistWithRuntime(sdist):
    """``sdist`` that also puts the runtime into the release tree, at its path inside the package."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        source = runtime_source()
        if source is None:
            self.warn(f"the training runtime is not in this sdist: {REPOSITORY_RUNTIME} does not exist")
            return
        target = Path(base_dir).joinpath(*PACKAGED_RUNTIME)
        for name in runtime_files(source):
            self.mkpath(str((target / name).parent))
            self.copy_file(str(source / name), str(target / name))


setup(cmdclass={"build_py": BuildPyWithRuntime, "sdist": SdistWithRuntime})
