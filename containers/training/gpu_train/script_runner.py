"""``python -m gpu_train.script_runner SCRIPT ARGS...``: one process of a user's training script.

The launcher (:mod:`gpu_train.launcher`) starts this module once per training process, directly or through
torchrun. It runs ``SCRIPT`` as ``python SCRIPT ARGS...`` would (``sys.argv = [SCRIPT, *ARGS]``, the script's
directory first on ``sys.path``, ``runpy.run_path(SCRIPT, run_name="__main__")``) and turns the way it ends
into the SageMaker contract:

* returns, or ``sys.exit(0)``: exit 0;
* raises: the traceback goes to the log, ``<ExceptionType>: <message>`` to the failure file
  (``/opt/ml/output/failure``, SageMaker's ``FailureReason``) and the process exits 1. The first process to
  write the file wins (:func:`gpu_train.failure.write_failure`), so a secondary error on another rank never hides
  the cause;
* ``sys.exit(143)``: stopped (128 + SIGTERM, after a checkpoint): no failure file;
* ``sys.exit(N)`` with another N: ``<entry point> exited with code N`` unless a cause was already written;
* ``KeyboardInterrupt`` (SIGINT without a handler): stopped, exit 130, no failure file.

Nothing is set up before the script runs (no logging configuration, no signal handlers), so the script behaves
as it does under the SageMaker training toolkit.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Sequence

from gpu_train.failure import format_failure, write_failure
from gpu_train.process import EXIT_FAILED, EXIT_OK, EXIT_STOPPED
from gpu_train.sagemaker import Paths

EXIT_INTERRUPTED = 130  # 128 + SIGINT


def _report(text: str) -> None:
    print(f"gpu_train.script_runner: {text}", file=sys.stderr, flush=True)


def _exit_code(exc: SystemExit, entry: str, paths: Paths) -> int:
    """The process exit code for ``sys.exit(...)``; a non-zero one records its cause unless one exists."""
    value = exc.code
    if value is None:
        return EXIT_OK
    if isinstance(value, bool) or not isinstance(value, int):
        # sys.exit("message"): Python prints the message and exits 1.
        message = str(value)
        _report(f"{entry} exited: {message}")
        write_failure(paths.failure_file, f"{entry} exited with code 1: {message}")
        return EXIT_FAILED
    if value in (EXIT_OK, EXIT_STOPPED):
        return value
    if not paths.failure_file.exists():
        write_failure(paths.failure_file, f"{entry} exited with code {value}")
    return value


def run(script: str, args: Sequence[str]) -> int:
    """Run ``script`` with ``args`` in this process; returns the exit code."""
    entry = os.environ.get("SM_USER_ENTRY_POINT") or os.path.basename(script)
    paths = Paths.from_env()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc, entry, paths)
    except KeyboardInterrupt:
        _report(f"{entry} interrupted by SIGINT")
        return EXIT_INTERRUPTED
    except BaseException as exc:
        traceback.print_exc()
        sys.stderr.flush()
        text = format_failure(exc)
        _report(f"{entry} failed: {text}")
        write_failure(paths.failure_file, text)
        return EXIT_FAILED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        _report("usage: python -m gpu_train.script_runner SCRIPT [ARGS...]")
        return 2
    return run(args[0], args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
