"""``python -m gpu_train.script_runner SCRIPT ARGS...`` (or ``-m MODULE ARGS...``): one training process.

The launcher (:mod:`gpu_train.launcher`) starts this module once per training process of a script, directly or
through torchrun; the built-in trainer's torchrun starts it with ``-m gpu_train.worker``. It runs the process as
the SageMaker training toolkit does, ``python SCRIPT ARGS...`` (``__name__ == "__main__"``, the script's
directory first on ``sys.path``, nothing set up before the script runs), as its child, and watches it:

* its stderr passes through unchanged, and its last lines are kept: the script's own words when it fails (the
  exception line of its traceback, argparse's ``error: unrecognized arguments``, a ``sys.exit("message")``);
* SIGTERM and SIGINT reach the script directly: torchrun and the launcher signal the whole process group of
  this runner, which the script shares (so does a terminal's Ctrl-C); this runner only notes that a stop was
  asked for;
* the script's end becomes the SageMaker contract: exit 0 done; ``sys.exit(143)`` (128 + SIGTERM, after a
  checkpoint), an end by SIGINT or ``KeyboardInterrupt``, and an end by SIGTERM after a stop was asked for:
  stopped, no failure; anything else fails, and how (exit code, or the signal that killed it, e.g. the kernel's
  out-of-memory killer's SIGKILL), when and with which last words is written as this rank's record
  (:class:`gpu_train.failure.RankRecord`) into the launcher's rank directory (``GPU_TRAIN_RANK_DIR``), from which
  the launcher writes ``/opt/ml/output/failure`` for the first rank that failed; run without a launcher, the
  failure file directly (the first process to write it wins);
* this runner exits as the script did: with its exit code, or killed by the same signal.

The process may also state its own failure (:func:`gpu_train.failure.report`, as the built-in trainer does): that
text replaces its stderr's last words. The script's environment holds nothing of this runner's.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from gpu_train import sagemaker
from gpu_train.failure import (
    RANK_DIR_ENV,
    RankRecord,
    last_words,
    read_report,
    runner_files,
    write_failure,
    write_record,
)
from gpu_train.process import EXIT_OK, EXIT_STOPPED

EXIT_INTERRUPTED = 130  # 128 + SIGINT
WORKER_ENTRY = "training process"  # how a failure names a process of the built-in trainer
TAIL_LINES = 200  # stderr lines kept for the failure text
_LINE_CHARS = 8192  # longest stderr line kept (its end)
_TRACEBACK = b"Traceback (most recent call last):"


def _report(text: str) -> None:
    print(f"gpu_train.script_runner: {text}", file=sys.stderr, flush=True)


class StderrTail:
    """Copies a child's stderr to ours as it comes and keeps its last :data:`TAIL_LINES` lines, and the time the
    first Python traceback started (when a rank failed, not when it finished shutting down)."""

    def __init__(self, stream: int) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.traceback_at: float | None = None
        self._fd = stream
        self._thread = threading.Thread(target=self._pump, name="stderr-tail", daemon=True)
        self._thread.start()

    def _keep(self, raw: bytes) -> None:
        if self.traceback_at is None and raw.lstrip().startswith(_TRACEBACK):
            self.traceback_at = time.time()
        line = raw.rsplit(b"\r", 1)[-1]  # a progress bar's last state
        self.lines.append(line[-_LINE_CHARS:].decode("utf-8", errors="replace"))

    def _pump(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            view = memoryview(chunk)
            with contextlib.suppress(OSError):
                while view:
                    view = view[os.write(2, view) :]
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._keep(line)
            if len(pending) > 4 * _LINE_CHARS:
                pending = pending[-_LINE_CHARS:]
        if pending:
            self._keep(pending)
        os.close(self._fd)

    def join(self, timeout: float) -> None:
        # A grandchild that inherited stderr (a worker the script started) may hold it open after the script ended.
        self._thread.join(timeout)


def _host() -> str | None:
    if os.environ.get("SM_CURRENT_HOST"):
        return os.environ["SM_CURRENT_HOST"]
    try:
        return sagemaker.load_resource_config(sagemaker.Paths.from_env(), os.environ).current_host
    except Exception:
        return None


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _stopped_on_purpose(code: int, stop_asked: bool) -> bool:
    """An end that is a stop, not a failure (no record, no failure file)."""
    if code in (EXIT_STOPPED, EXIT_INTERRUPTED, -signal.SIGINT):
        return True
    return stop_asked and code == -signal.SIGTERM


def _exit_like(code: int) -> int:
    """End this process as the child ended: killed by the same signal, else with its exit code."""
    if code >= 0:
        return code
    sys.stderr.flush()
    sys.stdout.flush()
    with contextlib.suppress(ValueError, OSError):
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1.0)
    return 128 - code


def run(cmd: Sequence[str], entry: str) -> int:
    """Run ``cmd`` (``python SCRIPT ARGS...``) as a child, watching its end; returns this process's exit code."""
    paths = sagemaker.Paths.from_env()
    rank_dir = os.environ.get(RANK_DIR_ENV)
    marker, report_file = runner_files(os.getpid())
    with contextlib.suppress(OSError):
        report_file.unlink()
    marker.touch()
    stop: dict[str, int] = {}

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        stop.setdefault("signal", signum)  # the script got the same signal: it is in our process group

    previous = {sig: signal.signal(sig, on_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if stop:
            return EXIT_STOPPED
        env = {k: v for k, v in os.environ.items() if k != RANK_DIR_ENV}
        read_end, write_end = os.pipe()
        try:
            child = subprocess.Popen(list(cmd), env=env, stderr=write_end)
        except OSError as exc:
            os.close(read_end)
            os.close(write_end)
            write_failure(paths.failure_file, f"{entry} could not be started: {type(exc).__name__}: {exc}")
            return 1
        os.close(write_end)
        tail = StderrTail(read_end)
        code = child.wait()
        ended = time.time()
        tail.join(timeout=5.0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with contextlib.suppress(OSError):
            marker.unlink()
    if code == EXIT_OK or _stopped_on_purpose(code, "signal" in stop):
        with contextlib.suppress(OSError):
            report_file.unlink()
        return code if code >= 0 else _exit_like(code)
    own = read_report(report_file) if report_file.exists() else None
    with contextlib.suppress(OSError):
        report_file.unlink()
    record = RankRecord(
        entry=entry,
        exitcode=code,
        time=own[1] if own else min(tail.traceback_at or ended, ended),
        rank=_int_env("RANK", 0),
        world=_int_env("WORLD_SIZE", 1),
        local_rank=_int_env("LOCAL_RANK", 0),
        host=_host(),
        words=own[0] if own else last_words(list(tail.lines)),
        reported=own is not None,
        stopped="signal" in stop,
    )
    text = record.describe()
    _report(text)
    if rank_dir:
        write_record(Path(rank_dir), record)
    else:
        write_failure(paths.failure_file, text)
    return _exit_like(code)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0] == "-m" and len(args) < 2):
        _report("usage: python -m gpu_train.script_runner SCRIPT [ARGS...] | -m MODULE [ARGS...]")
        return 2
    if args[0] == "-m":
        cmd, entry = [sys.executable, "-m", *args[1:]], WORKER_ENTRY if args[1] == "gpu_train.worker" else args[1]
    else:
        cmd, entry = [sys.executable, *args], os.path.basename(args[0])
    return run(cmd, os.environ.get("SM_USER_ENTRY_POINT") or entry)


if __name__ == "__main__":
    raise SystemExit(main())
