"""One training process: ``python -m gpu_train.worker`` (started by torchrun), or called in-process.

Exit codes: 0 done (model written), 1 failed (reason in ``/opt/ml/output/failure``), 143 stopped by
SIGTERM after writing a checkpoint.
"""

from __future__ import annotations

import logging
import os
import traceback

import torch

from gpu_train import distributed, hyperparameters, sagemaker
from gpu_train.failure import format_failure, write_failure
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
        write_failure(env.paths.failure_file, format_failure(exc))
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
        write_failure(paths.failure_file, format_failure(exc))
        log.error("%s", exc)
        return EXIT_FAILED
    return run(env, hp, stop)


if __name__ == "__main__":
    raise SystemExit(main())
