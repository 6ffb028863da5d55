"""Dynamic batching of the inference server (:class:`Batching`) and the container environment's rules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_constructs.dlc import TORCHSERVE_BATCH_SIZE_ENV, TORCHSERVE_MAX_BATCH_DELAY_ENV
from gpu_constructs.endpoint.base import invalid

#: SageMaker's limit of container environment variables (batching's two variables count).
MAX_ENVIRONMENT_VARIABLES = 100
_ENV_KEY_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class BatchingEnv:
    """Names of the environment variables through which an inference server reads its batching.

    :param max_batch_size: the variable holding the largest batch (requests per forward pass).
    :param max_batch_delay_ms: the variable holding how long a batch may wait to fill, in milliseconds.
    """

    max_batch_size: str
    max_batch_delay_ms: str


#: The platform's inference runtime (``containers/inference``, ``gpu_serve``).
GPU_SERVE_BATCHING_ENV = BatchingEnv("GPU_SERVE_MAX_BATCH_SIZE", "GPU_SERVE_MAX_BATCH_DELAY_MS")
#: The AWS PyTorch DLC inference image (TorchServe via sagemaker-pytorch-inference-toolkit). Batching above 1
#: there is refused (:func:`gpu_constructs.dlc.dlc_batching_problem`): it is only here to pass 1 explicitly.
TORCHSERVE_BATCHING_ENV = BatchingEnv(TORCHSERVE_BATCH_SIZE_ENV, TORCHSERVE_MAX_BATCH_DELAY_ENV)


@dataclass(frozen=True)
class Batching:
    """Dynamic batching of the inference server, passed as environment variables.

    :param max_batch_size: most rows per forward pass, 1-4096 (default: 32; 1 turns batching off).
    :param max_batch_delay_ms: longest wait for a batch to fill, in milliseconds, 0-10000 (default: 5).
    :param env: the variable names the image reads (default: :data:`GPU_SERVE_BATCHING_ENV`).
    """

    max_batch_size: int = 32
    max_batch_delay_ms: int = 5
    env: BatchingEnv = GPU_SERVE_BATCHING_ENV

    def environment(self) -> dict[str, str]:
        return {
            self.env.max_batch_size: str(self.max_batch_size),
            self.env.max_batch_delay_ms: str(self.max_batch_delay_ms),
        }

    def validate(self, where: str) -> None:
        """Raise a :class:`~gpu_constructs.endpoint.base.SettingError` naming ``where`` for a value out of range."""
        if not 1 <= self.max_batch_size <= 4096:
            raise invalid(where, "batching.max_batch_size", self.max_batch_size, "an integer in [1, 4096]")
        if not 0 <= self.max_batch_delay_ms <= 10_000:
            raise invalid(where, "batching.max_batch_delay_ms", self.max_batch_delay_ms, "milliseconds in [0, 10000]")


def check_environment(where: str, env: Mapping[str, str], batching: Batching | None) -> None:
    """The container environment: valid names, at most 100 variables with batching's, none contradicting it."""
    bad = [k for k in env if not _ENV_KEY_RE.match(k)]
    if bad:
        raise invalid(where, "environment", bad, "names matching [a-zA-Z_][a-zA-Z0-9_]*", name="environment keys")
    total = len(env) + (len(batching.environment()) if batching else 0)
    if total > MAX_ENVIRONMENT_VARIABLES:
        raise invalid(
            where,
            "environment",
            total,
            f"at most {MAX_ENVIRONMENT_VARIABLES} variables (SageMaker's limit)",
            name="environment (variables)",
        )
    if batching is not None:
        batch_env = batching.environment()
        clash = sorted(k for k in batch_env if k in env and env[k] != batch_env[k])
        if clash:
            raise invalid(
                where,
                "environment",
                {k: env[k] for k in clash},
                f"no variable that contradicts batching ({', '.join(f'{k}={batch_env[k]}' for k in clash)}); "
                "set the value through batching only",
            )
