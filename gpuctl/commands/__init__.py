"""The subcommands of ``gpuctl``: one module each, with ``register(subparsers)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
from typing import Any


def add_command(subparsers: Any, name: str, summary: str, description: str | None) -> argparse.ArgumentParser:
    """The parser of ``gpuctl <name>``: ``summary`` in the list of commands, ``description`` shown as written."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return parser
