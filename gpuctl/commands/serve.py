"""``gpuctl serve MODEL``: run the inference image's server locally on a model.tar.gz or model directory.

The same code as ``docker run IMAGE serve`` (package ``gpu_serve``), on this machine's CPU or GPU:
``GET /ping``, ``POST /invocations``, dynamic batching, limits, JSON logs on stdout. The server's
environment variables (``GPU_SERVE_*``, see containers/inference/README.md) apply; options here win.
Stop it with Ctrl-C (it drains in-flight requests first).

Example::

    gpuctl serve model.tar.gz --port 8080 &
    gpuctl invoke http://127.0.0.1:8080 sample.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpuctl.commands import add_command

#: The command's line in ``gpuctl --help``.
SUMMARY = "serve a model.tar.gz or model directory locally with the inference image's server"

#: The options the server's config takes as they are: each option's name is the config field's.
_AS_GIVEN = ("host", "port", "max_batch_size", "max_batch_delay_ms", "queue_size", "num_threads")


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "serve", SUMMARY, __doc__)
    parser.add_argument("model", metavar="MODEL_TAR_OR_DIR", help="model.tar.gz (or .tgz/.tar) or its unpacked folder")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: 8080; 0 picks a free one)")
    parser.add_argument("--max-batch-size", type=int, help="GPU_SERVE_MAX_BATCH_SIZE (default 32)")
    parser.add_argument("--max-batch-delay-ms", type=float, help="GPU_SERVE_MAX_BATCH_DELAY_MS (default 5)")
    parser.add_argument("--queue-size", type=int, help="GPU_SERVE_QUEUE_SIZE (default 256)")
    parser.add_argument("--dtype", help="GPU_SERVE_DTYPE: float32 (default), float16/fp16, bfloat16/bf16")
    parser.add_argument("--device", help="GPU_SERVE_DEVICE: auto (default), cpu, cuda, cuda:N")
    parser.add_argument("--num-threads", type=int, help="GPU_SERVE_NUM_THREADS: torch intra-op threads on CPU")
    parser.add_argument(
        "--model-processes",
        help="GPU_SERVE_MODEL_PROCESSES: auto (default: one per visible GPU, one on a CPU), a count from 1 to 64, "
        "or 0 (the model on a thread of the HTTP process)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpu_serve.archive import extract_model_archive, is_archive
    from gpu_serve.config import ServeConfig, parse_dtype
    from gpu_serve.errors import ConfigError, ModelLoadError
    from gpu_serve.server import serve

    model = Path(args.model).expanduser()
    if not model.exists():
        print(f"gpuctl serve: MODEL_TAR_OR_DIR {str(model)!r} does not exist", file=sys.stderr)
        return 2
    if not model.is_dir() and not is_archive(model):
        print(
            f"gpuctl serve: MODEL_TAR_OR_DIR {str(model)!r} is neither a folder nor a .tar.gz/.tgz/.tar archive",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuctl-serve-") as tmp:
        try:
            model_dir = extract_model_archive(model, Path(tmp)) if model.is_file() else model
            environ = dict(os.environ)
            if args.model_processes is not None:  # "auto" included: the option wins over the environment
                environ["GPU_SERVE_MODEL_PROCESSES"] = args.model_processes
            config = ServeConfig.from_env(
                environ,
                model_dir=model_dir,
                dtype=parse_dtype(args.dtype) if args.dtype else None,
                device=args.device.lower() if args.device else None,
                **{name: getattr(args, name) for name in _AS_GIVEN},
            )
        except (ConfigError, ModelLoadError) as exc:
            print(f"gpuctl serve: {exc}", file=sys.stderr)
            return 2
        return serve(config)
