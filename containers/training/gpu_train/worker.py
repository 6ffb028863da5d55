"""One training process: ``python -m gpu_train.worker`` (started by torchrun, watched by
:mod:`gpu_train.script_runner`), or called in-process.

Exit codes: 0 done (model written), 1 failed, 143 stopped by SIGTERM after writing a checkpoint. A failure's
reason goes to the script runner (:func:`gpu_train.failure.report`), which records it with its rank and time for
the launcher to name the first rank that failed; in-process, straight to ``/opt/ml/output/failure``.
"""

from __future__ import annotations

import logging
import os
import traceback

import torch

from gpu_train import distributed, hyperparameters, sagemaker
from gpu_train.failure import format_failure, report
from gpu_train.process import EXIT_FAILED, EXIT_OK, EXIT_STOPPED, StopFlag, setup_logging
from gpu_train.train_loop import STOPPED, Trainer

log = logging.getLogger("gpu_train")


def run(env: sagemaker.SageMakerEnv, hp: hyperparameters.Hyperparameters, stop: StopFlag) -> int:
    """Train in this process; returns the exit code. Writes the failure file on error."""
    ctx = None
    try:
        use_cuda = torch.cuda.is_available()
        ctx = distributed.init(use_cuda)
        if ctx.rank != 0:
            logging.getLogger().setLevel(logging.WARNING)
        outcome = Trainer(env, hp, ctx, stop).run()
        return EXIT_STOPPED if outcome == STOPPED else EXIT_OK
    except Exception as exc:
        log.error("training failed:\n%s", traceback.format_exc())
        report(env.paths.failure_file, format_failure(exc))
        return EXIT_FAILED
    finally:
        distributed.shutdown()


def main() -> int:
    """Entry point of a torchrun-launched process."""
    setup_logging(int(os.environ.get("RANK", "0")))
    stop = StopFlag().install()
    try:
        env = sagemaker.load()
        hp = hyperparameters.parse(env.hyperparameters)
    except Exception as exc:
        paths = sagemaker.Paths.from_env()
        report(paths.failure_file, format_failure(exc))
        log.error("%s", exc)
        return EXIT_FAILED
    return run(env, hp, stop)


if __name__ == "__main__":
    raise SystemExit(main())
