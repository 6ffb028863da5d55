"""``shard SRC DEST``: pack many small files into tar shards for training.

Images are decoded and resized once, here, and stored as ``uint8`` arrays, so the training data loader
only copies bytes; ``--format jpeg`` stores them as JPEGs of the training size instead (5-10x fewer bytes for
photos; the trainer decodes them on the GPU with nvJPEG when torchvision is installed, else in its loader
workers). The sample order is shuffled with ``--seed`` (same input and seed give identical
shards). ``DEST`` is a directory or ``s3://bucket/prefix`` (parallel multipart uploads); an existing
dataset is only replaced with ``--overwrite``. See ``containers/training/README.md`` for the format.

A source file that cannot be read or decoded stops the run, naming it. ``--skip-bad`` reports each such
file and leaves it out instead; the run then fails only when more than ``--max-bad-fraction`` of the files
(default 0.01: 1%) are bad. A failed run leaves no partial dataset: a directory is filled from a staging
directory once every shard is written, and on S3 the objects and open multipart uploads of the failed run
are removed. ``index.json`` is written last: a destination without it is incomplete.

The same command runs as ``gpuctl shard`` on a workstation and as ``python3 -m gpu_train shard`` inside
the training image (the prepare step of the training pipeline runs it in a SageMaker processing job).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

# numpy, Pillow and boto3 are imported when the command runs, so registering it costs nothing.
MODES = ("image", "raw")
FORMATS = ("raw", "jpeg")  # gpu_train.pack.ENCODINGS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", type=Path, help="SRC/<class>/<files> directory, or a .csv/.jsonl manifest (path,label)")
    parser.add_argument("dest", help="output directory or s3://bucket/prefix")
    parser.add_argument(
        "--image-size", type=int, default=224, help="training resolution: images are resized to N x N (default 224)"
    )
    parser.add_argument(
        "--shard-size",
        default="128MB",
        help="target shard size, 16MB to 1GB (binary units; default 128MB)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample shuffle (default 0)")
    parser.add_argument("--no-shuffle", action="store_true", help="keep the source order")
    parser.add_argument(
        "--mode", choices=MODES, default="image", help="image: decode+resize to uint8 arrays; raw: store files as-is"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="raw",
        help="image mode: how images are stored: raw uint8 arrays (default) or JPEG (see --quality)",
    )
    parser.add_argument("--quality", type=int, default=90, help="--format jpeg: JPEG quality, 1 to 95 (default 90)")
    parser.add_argument("--workers", type=int, default=0, help="preprocessing processes (default: one per CPU)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dataset at DEST")
    parser.add_argument("--kms-key-id", help="S3 destination: encrypt uploads with this KMS key (SSE-KMS)")
    parser.add_argument(
        "--max-concurrency", type=int, default=16, help="S3 destination: parallel upload threads (default 16)"
    )
    parser.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip source files that cannot be read or decoded (each is reported); fail only above --max-bad-fraction",
    )
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=None,
        metavar="F",
        help="with --skip-bad: the share of bad files tolerated, 0 to 1 (default 0.01: 1%%)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _say(line: str) -> None:
    """One line on stderr, above the progress bar when there is one (tqdm is optional in the training image)."""
    try:
        from tqdm import tqdm
    except ImportError:
        print(line, file=sys.stderr, flush=True)
        return
    tqdm.write(line, file=sys.stderr)


def run(args: argparse.Namespace, prog: str = "gpuctl shard") -> int:
    """Pack ``args.src`` into shards at ``args.dest``; ``prog`` prefixes the error messages."""
    from gpu_train.errors import DataError
    from gpu_train.pack import DEFAULT_MAX_BAD_FRACTION, PackError, Skipped, pack
    from gpu_train.shards import MiB, check_shard_size, parse_size

    try:
        target = check_shard_size(parse_size(args.shard_size))
    except ValueError as exc:
        print(f"{prog}: --shard-size: {exc}", file=sys.stderr)
        return 2
    if args.workers < 0 or args.max_concurrency < 1:
        print(f"{prog}: --workers must be >= 0 and --max-concurrency >= 1", file=sys.stderr)
        return 2
    max_bad, skip_bad = args.max_bad_fraction, args.skip_bad
    if max_bad is not None and not skip_bad:
        message = f"--max-bad-fraction {max_bad:g} needs --skip-bad (without it the first bad file fails)"
        print(f"{prog}: {message}", file=sys.stderr)
        return 2
    max_bad = DEFAULT_MAX_BAD_FRACTION if max_bad is None else max_bad
    if not 0.0 <= max_bad <= 1.0:
        message = f"--max-bad-fraction {max_bad:g} is not allowed; allowed: 0 to 1 (e.g. 0.01 for 1%)"
        print(f"{prog}: {message}", file=sys.stderr)
        return 2
    skipped: list[Skipped] = []

    def report_skip(entry: Skipped) -> None:
        skipped.append(entry)
        _say(f"{prog}: skipped {entry.path}: {entry.reason}")

    try:
        index = pack(
            args.src,
            args.dest,
            image_size=args.image_size,
            target_bytes=target,
            seed=args.seed,
            shuffle=not args.no_shuffle,
            mode=args.mode,
            workers=args.workers,
            overwrite=args.overwrite,
            progress=not args.quiet,
            max_concurrency=args.max_concurrency,
            kms_key_id=args.kms_key_id,
            skip_bad=skip_bad,
            max_bad_fraction=max_bad,
            on_skip=report_skip,
            encoding=getattr(args, "format", "raw"),
            quality=getattr(args, "quality", 90),
        )
    except (PackError, DataError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # botocore errors and the like: say what failed, no traceback
        if type(exc).__module__.startswith(("botocore", "boto3", "s3transfer")):
            print(f"{prog}: upload to {args.dest} failed: {exc}", file=sys.stderr)
            return 1
        raise
    shards = len(index.shards)
    average = index.total_bytes / max(1, shards) / MiB
    print(
        f"{index.num_samples} samples, {index.num_classes} classes, {shards} shards "
        f"(average {average:.1f} MB, {index.total_bytes / MiB:.1f} MB in all) -> {args.dest}"
    )
    if skip_bad:
        total = index.num_samples + len(skipped)
        print(
            f"skipped {len(skipped)} of {total} source files that cannot be read "
            f"({100 * len(skipped) / total:.2f}%; --max-bad-fraction {max_bad:g} allows {100 * max_bad:g}%)"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python3 -m gpu_train shard SRC DEST [options]`` (inside the training image)."""
    parser = argparse.ArgumentParser(
        prog="gpu_train shard", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv), prog="gpu_train shard")
