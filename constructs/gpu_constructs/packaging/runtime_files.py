"""Which files of the training runtime ship: one rule for the launcher zipapp and for the library's wheel.

Standard library only and importable on its own (``constructs/setup.py`` loads this file by path at build time,
before the package's dependencies exist).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SKIPPED_DIRS", "SKIPPED_SUFFIXES", "shipped_files"]

#: Never shipped: byte-code caches and dot files (editor and tool state).
SKIPPED_DIRS = frozenset({"__pycache__"})
SKIPPED_SUFFIXES = frozenset({".pyc", ".pyo"})


def shipped_files(root: Path, folder: str) -> list[str]:
    """The ``/``-separated paths, relative to ``root``, of every file under ``root/folder`` that ships, sorted."""
    found = []
    for path in (root / folder).rglob("*"):
        relative = path.relative_to(root)
        if (
            not path.is_file()
            or SKIPPED_DIRS.intersection(relative.parts)
            or any(part.startswith(".") for part in relative.parts)
            or path.suffix in SKIPPED_SUFFIXES
        ):
            continue
        found.append(relative.as_posix())
    return sorted(found)
