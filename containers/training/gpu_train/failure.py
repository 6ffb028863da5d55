"""``/opt/ml/output/failure``: the one-paragraph reason SageMaker shows as ``FailureReason``.

SageMaker reads at most 1024 characters of the file ("Write a description of the failure to
``/opt/ml/output/failure``; SageMaker returns the first 1024 characters of it as ``FailureReason``":
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-output.html; botocore's
``DescribeTrainingJobResponse.FailureReason`` has ``max`` 1024). The runtime's own messages name the cause
first, so :func:`truncate` keeps their start; a script's own words (the last lines of its stderr) end with the
cause, so :func:`compose` keeps their end.

With several processes the first writer of the file wins. Processes started by the launcher or the built-in
trainer's torchrun (:mod:`gpu_train.script_runner`) do not write the file themselves: each writes a *rank
record* (:class:`RankRecord`: rank, how it ended, when, its last words) into :data:`RANK_DIR_ENV`, and the
launcher writes the cause once every process has ended (:func:`cause`): the first rank that failed, where a
rank killed by a signal it did not get from the launcher or torchrun (``kill -9``, the kernel's out-of-memory
killer) counts before the ranks that failed within :data:`SILENT_DEATH_WINDOW_S` after it (their "Connection
reset by peer" is its consequence).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import signal
import tempfile
import time
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

MAX_CHARS = 1024
#: The directory of rank records of this launch (set by the launcher for its processes).
RANK_DIR_ENV = "GPU_TRAIN_RANK_DIR"
#: A rank killed by a signal counts as the cause when the first other failure came at most this many seconds
#: before it: a peer's error caused by its death ("Connection reset by peer") can reach the peer's exception
#: handler before the dead rank's supervisor sees the death, but not seconds before.
SILENT_DEATH_WINDOW_S = 5.0
#: How many of the last stderr lines a failure without a traceback quotes (argparse: usage and error line).
LAST_LINES = 5
_TRACEBACK = "Traceback (most recent call last):"
# c10/glog lines that torch's C++ code writes while a failing process shuts down ("[W1010 12:00:00.123 ...]").
_NATIVE_LOG = re.compile(r"^\[?[WIEF]\d{4} \d\d:\d\d:\d\d")


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
    """One paragraph of at most ``limit`` characters, keeping the start (the runtime's messages start with the
    cause)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def compose(head: str, words: str = "", limit: int = MAX_CHARS) -> str:
    """``head`` then ``words`` as one paragraph of at most ``limit`` characters: ``words`` (a process's last
    lines, which end with the cause) lose their start, ``...`` marking the cut; ``head`` is kept."""
    head, words = " ".join(head.split()), " ".join(words.split())
    gap = " " if head and words else ""
    text = f"{head}{gap}{words}"
    if len(text) <= limit:
        return text
    room = limit - len(head) - len(gap) - 3
    if room <= 0:
        return "..." + text[-(limit - 3) :]
    return f"{head}{gap}...{words[-room:]}"


def write_failure(path: Path, text: str, *, overwrite: bool = False) -> bool:
    """Write ``text`` to the failure file unless another process already did; True when written. ``text`` is
    expected to fit :data:`MAX_CHARS` (:func:`truncate`, :func:`compose`); longer text keeps its start."""
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


def runner_files(pid: int) -> tuple[Path, Path]:
    """The files of the script runner with process id ``pid``: its marker (present while it watches its child)
    and where the child may state its own failure (:func:`report`). Found through the child's parent process id,
    so the script's environment holds nothing of the runner's."""
    base = Path(tempfile.gettempdir()) / f"gpu_train_runner-{pid}"
    return base.with_suffix(".watching"), base.with_suffix(".report.json")


def report(failure_file: Path, text: str) -> bool:
    """A training process's failure: to the script runner that watches it (:mod:`gpu_train.script_runner` reads
    it, with the time it was written, when the process ends) when it has one, else to the failure file."""
    marker, path = runner_files(os.getppid())
    if not marker.exists():
        return write_failure(failure_file, text)
    if path.exists():
        return False
    _write_json(path, {"text": text, "time": time.time()})
    return True


def read_report(path: Path) -> tuple[str, float] | None:
    """What :func:`report` wrote to ``path``: (text, time), or None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return str(data["text"]), float(data["time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ------------------------------------------------------------------------------------ a process's last words


def last_words(lines: Sequence[str]) -> str:
    """What a process's last stderr lines say about its end: the exception line(s) of its last Python traceback
    (``ValueError: bad lr``), else its last :data:`LAST_LINES` non-blank lines (argparse: ``usage: ...`` and
    ``train.py: error: unrecognized arguments: --x``); empty when it wrote nothing."""
    text = [line.rstrip() for line in lines if line.strip()]
    starts = [i for i, line in enumerate(text) if line.startswith(_TRACEBACK)]
    if starts:
        block = [line for line in text[starts[-1] + 1 :] if not _NATIVE_LOG.match(line)]
        indented = [i for i, line in enumerate(block) if line[:1].isspace()]
        tail = block[indented[-1] + 1 :] if indented else block
        if tail:
            return " ".join(line.strip() for line in tail)
    return " ".join(line.strip() for line in text[-LAST_LINES:])


# ------------------------------------------------------------------------------------------- rank records


def rank_dir(failure_file: Path) -> Path:
    """The rank-record directory of the job whose failure file is ``failure_file`` (one per ``/opt/ml`` tree, so
    two emulated hosts on one machine keep theirs apart; in the temporary directory, not under ``/opt/ml``)."""
    key = hashlib.sha256(str(failure_file.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"gpu_train_ranks_{key}"


def prepare_rank_dir(failure_file: Path, child_env: MutableMapping[str, str]) -> Path:
    """An empty rank-record directory for a launch, named in ``child_env`` (:data:`RANK_DIR_ENV`)."""
    directory = rank_dir(failure_file)
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        with contextlib.suppress(OSError):
            old.unlink()
    child_env[RANK_DIR_ENV] = str(directory)
    return directory


@dataclass
class RankRecord:
    """How one training process (a rank) ended, as its supervisor saw it."""

    entry: str  # the script (or module) it ran
    exitcode: int  # the process's exit status (negative: killed by that signal)
    time: float  # when it failed: its own report, the first traceback line on stderr, or its end
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    host: str | None = None
    words: str = ""  # its own failure text, or what its stderr said last (:func:`last_words`)
    reported: bool = False  # ``words`` is the process's own report (:func:`report`)
    stopped: bool = False  # it had been asked to stop (SIGTERM/SIGINT) before it ended
    pid: int = field(default_factory=os.getpid)

    @property
    def signal_name(self) -> str | None:
        if self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    @property
    def silent_death(self) -> bool:
        """Killed by a signal it was not asked to stop by (``kill -9``, the out-of-memory killer, a crash)."""
        return self.exitcode < 0 and not self.stopped

    def who(self) -> str:
        if self.world <= 1:
            return self.entry
        where = f" on {self.host}" if self.host else ""
        return f"{self.entry} rank {self.rank} (of {self.world}; local rank {self.local_rank}{where})"

    def describe(self, limit: int = MAX_CHARS) -> str:
        """The failure text of this rank, at most ``limit`` characters (its own words keep their end)."""
        who = self.who()
        name = self.signal_name
        if name is not None:
            head = f"{who} was killed by {name} (exit code {self.exitcode})"
            if name == "SIGKILL":
                head += ", often the kernel's out-of-memory killer; see the job log"
            return compose(f"{head}; its last words:" if self.words else head, self.words, limit)
        if self.reported or (self.words and self.exitcode == 1 and _is_exception(self.words)):
            return compose("", self.words, limit)  # an exception's own line says it all (the log names the rank)
        head = f"{who} exited with code {self.exitcode}"
        return compose(f"{head}:" if self.words else head, self.words, limit)


def _is_exception(words: str) -> bool:
    """``Name: message`` as the last line of a traceback reads (``ValueError: x``, ``torch.OutOfMemoryError: x``)."""
    name, sep, _ = words.partition(": ")
    return bool(sep) and re.fullmatch(r"[A-Za-z_][\w.]*", name) is not None


def _write_json(path: Path, data: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def write_record(directory: Path, record: RankRecord) -> Path:
    path = directory / f"rank-{record.rank}-{record.pid}.json"
    _write_json(path, asdict(record))
    return path


def read_records(directory: Path) -> list[RankRecord]:
    records = []
    for path in sorted(directory.glob("rank-*.json")) if directory.is_dir() else []:
        try:
            records.append(RankRecord(**json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue
    return records


def first_failure(records: Iterable[RankRecord]) -> RankRecord | None:
    """The rank that failed first: the earliest failure, unless a rank that died silently (a signal it was not
    asked to stop by) ended at most :data:`SILENT_DEATH_WINDOW_S` after it; ranks that failed after being asked
    to stop count only when no other rank failed."""
    failed = [r for r in records if r.exitcode != 0]
    if not failed:
        return None
    unprompted = [r for r in failed if not r.stopped] or failed
    earliest = min(unprompted, key=lambda r: r.time)
    silent = [r for r in unprompted if r.silent_death and r.time <= earliest.time + SILENT_DEATH_WINDOW_S]
    return min(silent, key=lambda r: r.time) if silent else earliest


def cause(records: Sequence[RankRecord]) -> str | None:
    """The failure text for a job whose processes ended as ``records``: that of the first failure
    (:func:`first_failure`)."""
    first = first_failure(records)
    return None if first is None else first.describe()


def take_records(failure_file: Path) -> list[RankRecord]:
    """The rank records of the launch whose failure file is ``failure_file``; their directory is removed."""
    directory = rank_dir(failure_file)
    records = read_records(directory)
    if directory.is_dir():
        for path in directory.iterdir():
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            directory.rmdir()
    return records
