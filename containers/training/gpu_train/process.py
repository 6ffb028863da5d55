"""Process-level plumbing shared by the launcher and the training processes (no torch import):
exit codes, logging set-up and the stop flag set by SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_STOPPED = 143  # 128 + SIGTERM, the shell convention for "terminated"


def setup_logging(rank: int = 0) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
        force=True,
    )


class StopRequested(Exception):
    """Raised inside :meth:`StopFlag.interruptible` when a stop is requested: the wait it ends is abandoned."""


class StopFlag:
    """Set by SIGTERM (SageMaker stop, spot interruption) or SIGINT; polled by the loop at each step.

    A process that blocks waiting for data (a Pipe-mode FIFO nobody writes, a read that does not return)
    never reaches the next poll, so such waits run inside :meth:`interruptible`: there the signal handler
    raises :class:`StopRequested` in the main thread, which interrupts the blocking call.
    """

    def __init__(self) -> None:
        self.requested = False
        self.signal_name: str | None = None
        self.at: float | None = None
        self._armed = False

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)
        if self._armed:
            self._armed = False
            raise StopRequested(self.signal_name)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Run a wait that a stop signal may abandon (:class:`StopRequested`); raises at once when a stop
        was already requested."""
        self._armed = True
        try:
            if self.requested:
                raise StopRequested(self.signal_name)
            yield
        finally:
            self._armed = False

    def install(self) -> StopFlag:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)
        return self

    def request(self, reason: str = "request") -> None:
        """Ask for a stop (from a signal handler, or from code: tests and hooks)."""
        if not self.requested:
            self.requested = True
            self.signal_name = reason
            self.at = time.monotonic()
