"""Unpack a ``model.tar.gz`` the way SageMaker does before it starts the container (for local serving)."""

from __future__ import annotations

import tarfile
from pathlib import Path

from gpu_serve.errors import ModelLoadError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def extract_model_archive(archive: Path, dest: Path) -> Path:
    """Extract ``archive`` into ``dest`` and return the model directory.

    Uses tarfile's ``data`` filter: absolute paths, ``..``, links that leave ``dest``, device files and
    setuid bits are refused. A single top-level folder holding ``model.pt`` or ``code/`` is descended into
    (archives made with ``tar czf model.tar.gz model/``), otherwise ``dest`` is the model directory.
    """
    if not archive.is_file():
        raise ModelLoadError(f"model archive {archive} does not exist")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ModelLoadError(f"cannot extract model archive {archive}: {exc}") from exc
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        inner = entries[0]
        if (inner / "code").is_dir() or any(inner.glob("*.pt*")):
            return inner
    return dest
