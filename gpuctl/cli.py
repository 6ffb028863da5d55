"""Entry point of ``gpuctl``.

Each subcommand lives in its own module under :mod:`gpuctl.commands` and exposes
``register(subparsers)``; the module list below is the one place that names them,
so adding a command never touches another command's code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules under gpuctl.commands, each with ``register(subparsers) -> None``.
# A registered parser sets ``func`` (``Callable[[argparse.Namespace], int]``) via set_defaults.
COMMAND_MODULES: tuple[str, ...] = (
    "shard",
    "doctor",
    "serve",
    "invoke",
    "train",
    "status",
    "logs",
    "stop",
    "vendor",
    "preflight",
    "cost",
    "deployed",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuctl",
        description="Operator CLI of the GPU training and inference platform.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"gpuctl.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
