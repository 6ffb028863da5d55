"""``gpuctl shard SRC DEST``: pack many small files into tar shards for training (see gpu_train.shard_cli)."""

from __future__ import annotations

import argparse
from typing import Any

from gpu_train import shard_cli
from gpuctl.commands import add_command

#: The command's line in ``gpuctl --help``.
SUMMARY = "pack a directory or manifest of small files into tar shards (WebDataset layout)"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "shard", SUMMARY, shard_cli.__doc__)
    shard_cli.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return shard_cli.run(args, prog="gpuctl shard")
