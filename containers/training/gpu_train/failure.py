"""``/opt/ml/output/failure``: the one-paragraph reason SageMaker shows as ``FailureReason``.

SageMaker returns the first 1024 characters of the file, so the message is cut to that length here,
keeping its start (the cause). With several processes (torchrun workers and the launcher) the first
writer wins: a later, secondary error ("a peer process exited") never hides the real cause.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

MAX_CHARS = 1024


def format_failure(exc: BaseException) -> str:
    """``<ExceptionType>: <message>``, one paragraph, at most :data:`MAX_CHARS` characters.

    An error re-raised by a ``DataLoader`` carries the worker's whole traceback in its message
    ("Caught X in DataLoader worker process 0. Original Traceback ..."): only its last line, the
    original error, is kept.
    """
    message = str(exc).strip() or repr(exc)
    if "Original Traceback" in message:
        last = [line for line in message.splitlines() if line.strip()][-1].strip()
        name, sep, rest = last.partition(": ")
        if sep and " " not in name:
            return truncate(f"{name.rsplit('.', 1)[-1]}: {rest}")
        return truncate(f"{type(exc).__name__}: {last}")
    return truncate(f"{type(exc).__name__}: {message}")


def truncate(text: str, limit: int = MAX_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def write_failure(path: Path, text: str, *, overwrite: bool = False) -> bool:
    """Write ``text`` to the failure file unless another process already did; True when written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            return False
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(truncate(text))
        handle.write("\n")
    return True


def startup_failed(exc: BaseException, failure_file: Path, log: logging.Logger) -> int:
    """Report a start-up error (before any training process runs): the traceback in the log unless it is one of the
    runtime's own errors (whose message says it all), the message in the failure file; returns ``EXIT_FAILED``."""
    from gpu_train.errors import TrainingError
    from gpu_train.process import EXIT_FAILED

    if not isinstance(exc, TrainingError):
        log.exception("start-up failed")
    log.error("%s", format_failure(exc))
    write_failure(failure_file, format_failure(exc))
    return EXIT_FAILED
