"""Server configuration, read from the environment (the SageMaker way) and validated up front.

Every variable, its default and its effect is listed in :data:`ENV_VARS` (and in the README). A bad value
raises :class:`~gpu_serve.errors.ConfigError` naming the variable, the value and what is allowed, before
the server binds its port.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpu_serve.errors import ConfigError

#: SageMaker real-time endpoints accept request payloads up to 6 MB (6 * 1024 * 1024 bytes).
SAGEMAKER_MAX_PAYLOAD_BYTES = 6 * 1024 * 1024

#: The dtype option: accepted spellings -> canonical torch dtype name.
DTYPE_ALIASES: dict[str, str] = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}

#: Environment variable -> (default, description). The README table is generated from the same facts.
ENV_VARS: dict[str, tuple[str, str]] = {
    "SAGEMAKER_BIND_TO_PORT": ("8080", "TCP port of the HTTP server (0 picks a free port)."),
    "GPU_SERVE_HOST": ("0.0.0.0", "Address to bind."),
    "GPU_SERVE_MODEL_DIR": ("/opt/ml/model", "The untarred model.tar.gz."),
    "SAGEMAKER_PROGRAM": ("inference.py", "Handler module inside <model dir>/code/."),
    "SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT": (
        "application/json",
        "Response type when the request has no Accept header or accepts */*.",
    ),
    "GPU_SERVE_MAX_BATCH_SIZE": ("32", "Most rows per forward pass; 1 turns dynamic batching off."),
    "GPU_SERVE_MAX_BATCH_DELAY_MS": (
        "5",
        "Longest time the first request of a batch waits for others to join (milliseconds).",
    ),
    "GPU_SERVE_QUEUE_SIZE": (
        "256",
        "Most invocations inside the server at once (decoding, queued or running); the next gets 503.",
    ),
    "GPU_SERVE_MAX_BODY_BYTES": (
        str(SAGEMAKER_MAX_PAYLOAD_BYTES),
        "Largest request body; a larger Content-Length gets 413 before the body is read.",
    ),
    "GPU_SERVE_REQUEST_TIMEOUT_S": (
        "55",
        "A request not answered in this time gets 504 (SageMaker real-time allows 60 s).",
    ),
    "GPU_SERVE_DRAIN_TIMEOUT_S": (
        "25",
        "After SIGTERM, longest wait for in-flight requests before exiting (keep under 30).",
    ),
    "GPU_SERVE_RETRY_AFTER_S": ("1", "Retry-After header value (seconds) on 503."),
    "GPU_SERVE_DTYPE": ("float32", "Model dtype: float32, float16 (fp16) or bfloat16 (bf16)."),
    "GPU_SERVE_DEVICE": ("auto", "auto (cuda when available, else cpu), cpu, cuda or cuda:N."),
    "GPU_SERVE_NUM_THREADS": ("", "torch intra-op threads on CPU (empty: torch's default)."),
    "GPU_SERVE_INPUT_SHAPE": (
        "",
        "Per-sample input shape such as 3,224,224 (default: input_shape of model_config.json).",
    ),
    "GPU_SERVE_DECODE_THREADS": (
        "",
        "Threads for input_fn of bodies over 64 KiB and output_fn of large predictions (empty: min(4, CPU count)).",
    ),
    "GPU_SERVE_MAX_CONNECTIONS": (
        "1024",
        "Most open client connections; one more carries one request: /ping is answered, anything else gets 503.",
    ),
    "GPU_SERVE_MODEL_PROCESSES": (
        "auto",
        "Model processes beside the HTTP process: auto (one per visible GPU, one on a CPU or single-GPU host), "
        "a count, or 0 (the model runs on a thread of the HTTP process).",
    ),
    "GPU_SERVE_HEARTBEAT_TIMEOUT_S": (
        "10",
        "A model process that sends no heartbeat for this long is hung: /ping turns 503, its requests get 500 at "
        "once, and it is killed and restarted. The model thread (both layouts) must also finish each forward pass "
        "within the larger of this and GPU_SERVE_REQUEST_TIMEOUT_S.",
    ),
    "GPU_SERVE_ACCESS_LOG": ("true", "Write one JSON access-log line per request."),
    "GPU_SERVE_METRICS_INTERVAL_S": ("60", "Period of the JSON counters summary line; 0 turns it off."),
}

T = TypeVar("T")


@dataclass(frozen=True)
class ServeConfig:
    """Everything the server needs; build it with :meth:`from_env` or directly (tests, ``gpuctl serve``)."""

    model_dir: Path = Path("/opt/ml/model")
    host: str = "0.0.0.0"
    port: int = 8080
    program: str = "inference.py"
    default_accept: str = "application/json"
    max_batch_size: int = 32
    max_batch_delay_ms: float = 5.0
    queue_size: int = 256
    max_body_bytes: int = SAGEMAKER_MAX_PAYLOAD_BYTES
    request_timeout_s: float = 55.0
    drain_timeout_s: float = 25.0
    retry_after_s: int = 1
    dtype: str = "float32"
    device: str = "auto"
    num_threads: int | None = None
    input_shape: tuple[int, ...] | None = None
    decode_threads: int = 2
    max_connections: int = 1024
    model_processes: int | None = None  # None: auto (one per visible GPU, at least one)
    heartbeat_timeout_s: float = 10.0
    access_log: bool = True
    metrics_interval_s: float = 60.0

    def __post_init__(self) -> None:
        _check_range("GPU_SERVE_MAX_BATCH_SIZE", self.max_batch_size, 1, 4096)
        _check_range("GPU_SERVE_MAX_BATCH_DELAY_MS", self.max_batch_delay_ms, 0, 10_000)
        _check_range("GPU_SERVE_QUEUE_SIZE", self.queue_size, 1, 1_000_000)
        _check_range("GPU_SERVE_MAX_BODY_BYTES", self.max_body_bytes, 1, 1 << 40)
        _check_range("GPU_SERVE_REQUEST_TIMEOUT_S", self.request_timeout_s, 0.001, 3600)
        _check_range("GPU_SERVE_DRAIN_TIMEOUT_S", self.drain_timeout_s, 0, 3600)
        _check_range("GPU_SERVE_RETRY_AFTER_S", self.retry_after_s, 0, 3600)
        _check_range("GPU_SERVE_MAX_CONNECTIONS", self.max_connections, 1, 1_000_000)
        _check_range("GPU_SERVE_DECODE_THREADS", self.decode_threads, 1, 256)
        _check_range("SAGEMAKER_BIND_TO_PORT", self.port, 0, 65535)
        _check_range("GPU_SERVE_METRICS_INTERVAL_S", self.metrics_interval_s, 0, 86_400)
        _check_range("GPU_SERVE_HEARTBEAT_TIMEOUT_S", self.heartbeat_timeout_s, 0.2, 3600)
        if self.model_processes is not None and (
            isinstance(self.model_processes, bool) or not 0 <= self.model_processes <= 64
        ):
            raise ConfigError(
                f"GPU_SERVE_MODEL_PROCESSES={self.model_processes!r} is not allowed; "
                "allowed: auto or an integer from 0 to 64"
            )
        if self.num_threads is not None:
            _check_range("GPU_SERVE_NUM_THREADS", self.num_threads, 1, 1024)
        if self.dtype not in DTYPE_ALIASES.values():
            raise ConfigError(
                f"GPU_SERVE_DTYPE={self.dtype!r} is not allowed; allowed: {', '.join(sorted(DTYPE_ALIASES))}"
            )
        dev = self.device
        if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise ConfigError(f"GPU_SERVE_DEVICE={dev!r} is not allowed; allowed: auto, cpu, cuda, cuda:N")
        if self.input_shape is not None and (not self.input_shape or any(d < 1 for d in self.input_shape)):
            raise ConfigError(
                f"GPU_SERVE_INPUT_SHAPE={self.input_shape!r} is not allowed; "
                "allowed: comma-separated positive integers such as 3,224,224"
            )
        if not self.program.endswith(".py") or "/" in self.program:
            raise ConfigError(
                f"SAGEMAKER_PROGRAM={self.program!r} is not allowed; allowed: a file name such as inference.py"
            )

    @property
    def heartbeat_interval_s(self) -> float:
        """How often a model process sends its heartbeat and the model thread checks in while it waits."""
        return min(1.0, self.heartbeat_timeout_s / 4)

    @property
    def stall_timeout_s(self) -> float:
        """The longest a model thread that has work may go without a sign of life (a finished forward pass, or
        a wait for requests) before it counts as hung: a forward pass may run up to the request timeout."""
        return max(self.heartbeat_timeout_s, self.request_timeout_s)

    @property
    def module_name(self) -> str:
        """The handler module name (``SAGEMAKER_PROGRAM`` without ``.py``)."""
        return self.program[: -len(".py")]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> ServeConfig:
        """Read every variable of :data:`ENV_VARS` from ``environ`` (default: ``os.environ``).

        ``overrides`` (field name -> value) win over the environment; ``None`` values are ignored.
        """
        env = os.environ if environ is None else environ

        def get(name: str) -> str:
            value = env.get(name, "").strip()
            return value if value else ENV_VARS[name][0]

        values: dict[str, object] = {
            "model_dir": Path(get("GPU_SERVE_MODEL_DIR")),
            "host": get("GPU_SERVE_HOST"),
            "port": _parse("SAGEMAKER_BIND_TO_PORT", get("SAGEMAKER_BIND_TO_PORT"), int, "an integer port"),
            "program": get("SAGEMAKER_PROGRAM"),
            "default_accept": get("SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT"),
            "max_batch_size": _parse("GPU_SERVE_MAX_BATCH_SIZE", get("GPU_SERVE_MAX_BATCH_SIZE"), int, "an integer"),
            "max_batch_delay_ms": _parse(
                "GPU_SERVE_MAX_BATCH_DELAY_MS", get("GPU_SERVE_MAX_BATCH_DELAY_MS"), float, "a number"
            ),
            "queue_size": _parse("GPU_SERVE_QUEUE_SIZE", get("GPU_SERVE_QUEUE_SIZE"), int, "an integer"),
            "max_body_bytes": _parse("GPU_SERVE_MAX_BODY_BYTES", get("GPU_SERVE_MAX_BODY_BYTES"), int, "an integer"),
            "request_timeout_s": _parse(
                "GPU_SERVE_REQUEST_TIMEOUT_S", get("GPU_SERVE_REQUEST_TIMEOUT_S"), float, "a number"
            ),
            "drain_timeout_s": _parse("GPU_SERVE_DRAIN_TIMEOUT_S", get("GPU_SERVE_DRAIN_TIMEOUT_S"), float, "a number"),
            "retry_after_s": _parse("GPU_SERVE_RETRY_AFTER_S", get("GPU_SERVE_RETRY_AFTER_S"), int, "an integer"),
            "dtype": parse_dtype(get("GPU_SERVE_DTYPE")),
            "device": get("GPU_SERVE_DEVICE").lower(),
            "num_threads": _parse_optional_int("GPU_SERVE_NUM_THREADS", get("GPU_SERVE_NUM_THREADS")),
            "input_shape": parse_shape("GPU_SERVE_INPUT_SHAPE", get("GPU_SERVE_INPUT_SHAPE")),
            "decode_threads": _parse_optional_int("GPU_SERVE_DECODE_THREADS", get("GPU_SERVE_DECODE_THREADS"))
            or min(4, os.cpu_count() or 1),
            "max_connections": _parse("GPU_SERVE_MAX_CONNECTIONS", get("GPU_SERVE_MAX_CONNECTIONS"), int, "an integer"),
            "model_processes": parse_model_processes(get("GPU_SERVE_MODEL_PROCESSES")),
            "heartbeat_timeout_s": _parse(
                "GPU_SERVE_HEARTBEAT_TIMEOUT_S", get("GPU_SERVE_HEARTBEAT_TIMEOUT_S"), float, "a number"
            ),
            "access_log": _parse_bool("GPU_SERVE_ACCESS_LOG", get("GPU_SERVE_ACCESS_LOG")),
            "metrics_interval_s": _parse(
                "GPU_SERVE_METRICS_INTERVAL_S", get("GPU_SERVE_METRICS_INTERVAL_S"), float, "a number"
            ),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown server option(s): {', '.join(sorted(unknown))}")
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, payload: bytes | str) -> ServeConfig:
        """The config a serving process sent its model process (:func:`gpu_serve.ipc.config_payload`)."""
        raw = json.loads(payload)
        raw["model_dir"] = Path(raw["model_dir"])
        if raw.get("input_shape") is not None:
            raw["input_shape"] = tuple(raw["input_shape"])
        return cls(**raw)


def parse_model_processes(value: str) -> int | None:
    """``GPU_SERVE_MODEL_PROCESSES``: ``auto`` -> ``None``, else a count (0: the model in the HTTP process)."""
    text = value.strip().lower()
    if text == "auto":
        return None
    return _parse("GPU_SERVE_MODEL_PROCESSES", text, int, "auto or an integer from 0 to 64")


def parse_dtype(value: str) -> str:
    """Canonical dtype name for a ``GPU_SERVE_DTYPE`` spelling (``bf16`` -> ``bfloat16``)."""
    canonical = DTYPE_ALIASES.get(value.strip().lower())
    if canonical is None:
        raise ConfigError(f"GPU_SERVE_DTYPE={value!r} is not allowed; allowed: {', '.join(sorted(DTYPE_ALIASES))}")
    return canonical


def parse_shape(name: str, value: str) -> tuple[int, ...] | None:
    """``"3,224,224"`` -> ``(3, 224, 224)``; empty -> ``None``."""
    text = value.strip().strip("()[]")
    if not text:
        return None
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        raise ConfigError(
            f"{name}={value!r} is not allowed; allowed: comma-separated positive integers such as 3,224,224"
        ) from None
    if not shape or any(d < 1 for d in shape):
        raise ConfigError(
            f"{name}={value!r} is not allowed; allowed: comma-separated positive integers such as 3,224,224"
        )
    return shape


def _parse(name: str, value: str, kind: Callable[[str], T], allowed: str) -> T:
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: {allowed}") from None


def _parse_optional_int(name: str, value: str) -> int | None:
    return None if value == "" else _parse(name, value, int, "an integer")


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not allowed; allowed: true or false")


def _check_range(name: str, value: float, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not (lo <= value <= hi):
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: a number in [{lo:g}, {hi:g}]")
