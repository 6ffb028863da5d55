"""Every shell command of the READMEs is run by CI, so the READMEs cannot drift.

``python -m platform_tools.readme_commands --check`` (fast, runs nothing; ``tests/tools/test_readme_commands.py``
calls it) parses every git-tracked ``README.md`` and classifies each shell command it shows:

* ``run``: executed by ``--run`` (``make readme-commands``, which ``make test`` runs after the test suite);
* ``ci``: run by CI itself (``.ci/run`` runs ``make test``), with the reason;
* ``test``: run by the named test (``tests/...py::name``; the check finds that name in that file);
* ``not-run``: shown but run by nothing, with the reason (a placeholder host, minutes of benchmark).

A command with no rule, and a rule that matches no README command any more, fail the check with the README
file and line (or the rule) and what to do. The rules are :data:`RULES`, matched on the README file and the
command's text with runs of whitespace collapsed: changing a command in a README means changing its rule.

``python -m platform_tools.readme_commands --run`` executes the ``run`` commands literally, README by README and
block by block, each README in its own scratch copy of the working tree (:func:`copy_worktree`: its files as they
are now, so uncommitted edits are tested too; the repository itself is never written). The copies share
the repository's ``.venv`` and ``node_modules`` (symlinks) and a fresh ``cdk.out``: the repository's when it is
newer than the app's code and config, else one that ``make synth`` writes in a copy of its own. Commands run
with ``bash`` from the copy's root, the way a reader runs them: ``.venv/bin`` first on ``PATH`` (as after
``source .venv/bin/activate``), no AWS credentials or profile (``AWS_*`` removed, the shared config and
credentials files pointed at nothing, the EC2 metadata service off), ``TMPDIR`` inside the copy. Each command
has a time limit; a failure ends its block, and the run goes on with the next block and reports every failure
(README file:line, the command, the tail of its output) and exits 1.

Input data a README tells the reader to bring (their own images, a model archive, a request body) is made by
:data:`FIXTURES` in the copy before the README's first block: ImageFolder PNGs written with the standard
library, shards packed by ``gpuctl shard``, the training runtime's example model.

The README conventions this reads (line-based fences: an opening line of three or more backticks or tildes
with an optional language, closed by a line of at least as many of the same character):

* shell blocks are ```` ```bash ````, ```` ```sh ```` and ```` ```shell ````, and unlabelled blocks with a line that
  starts with a command word (:data:`COMMAND_WORDS`); ```` ```text ```` marks a usage synopsis or output;
* a block whose first line starts with ``# needs an AWS account`` or ``# needs Docker`` is not run (CI machines
  have neither; the Dockerfiles are linted instead, ``make lint-dockerfiles``);
* ``\\`` continues a command on the next line; a ``#`` that starts a word outside quotes starts a comment;
* a plain ``cd DIR``, ``export NAME=...`` or ``source FILE`` line is state for the later lines of its block, and
  each command of the block runs after them (in one ``bash -c``), so a block must not rely on another one.

Stdlib only (no CDK, no torch): the check runs in any Python 3.10+, and the fixtures that need the platform's
code run it through the virtual environment's own commands.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "COMMAND_PREFIXES",
    "COMMAND_WORDS",
    "FIXTURES",
    "RULES",
    "SKIP_MARKERS",
    "Block",
    "Command",
    "Fixture",
    "ReadmeError",
    "Rule",
    "check",
    "classify",
    "main",
    "parse_blocks",
    "readme_commands",
    "run",
    "shell_commands",
    "strip_comment",
    "write_png",
]

Kind = Literal["run", "ci", "test", "not-run"]
KINDS: tuple[Kind, ...] = ("run", "ci", "test", "not-run")

#: Fence languages of shell blocks.
SHELL_LANGUAGES = frozenset({"bash", "sh", "shell"})
#: An unlabelled block with a line that starts with one of these words (``python3``, ``pip3.11``: with a version)
#: or prefixes is a shell block.
COMMAND_WORDS = (
    "make", "gpuctl", "python", "pip", "npx", "npm", "export", "cd", "source", "docker", "aws", "torchrun",
    "sha256sum", "git", "bash",
)  # fmt: skip
COMMAND_PREFIXES = (".venv/bin/", "./")
#: First lines of blocks that are shown but not run, and why.
SKIP_MARKERS = {
    "# needs an AWS account": "needs an AWS account",
    "# needs Docker": "needs Docker (CI machines have no Docker engine; make lint-dockerfiles lints the Dockerfiles)",
}
#: Lines that are state for the later lines of their block, not commands.
_STATE_LINE = re.compile(r"^(cd|export|source)\s+[^;&|<>`]*$")
_COMMAND_WORD = re.compile(rf"^({'|'.join(map(re.escape, COMMAND_WORDS))})[\d.]*(\s|$)")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")

DEFAULT_TIMEOUT_S = 180
#: How long a ``server`` command may take to answer its readiness URL, and to exit after SIGTERM.
SERVER_START_S = 90
SERVER_STOP_S = 40
TAIL_LINES = 40


class ReadmeError(Exception):
    """A README cannot be parsed (a fence that is never closed): the message names the file and line."""


# ---------------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A fenced code block: its README, the 1-based line of its opening fence, its language and its lines."""

    path: str
    line: int
    language: str
    #: (1-based line number, text with the fence's indentation removed)
    lines: tuple[tuple[int, str], ...]

    @property
    def skip_reason(self) -> str:
        """Why the block is not run ('' when it is): its first non-blank line is one of :data:`SKIP_MARKERS`."""
        first = next((text.strip() for _, text in self.lines if text.strip()), "")
        return next((why for marker, why in SKIP_MARKERS.items() if first.startswith(marker)), "")

    @property
    def is_shell(self) -> bool:
        if self.language in SHELL_LANGUAGES:
            return True
        return self.language == "" and any(_starts_with_command_word(text) for _, text in self.lines)


def _starts_with_command_word(text: str) -> bool:
    stripped = text.strip()
    return stripped.startswith(COMMAND_PREFIXES) or _COMMAND_WORD.match(stripped) is not None


def parse_blocks(path: str, text: str) -> list[Block]:
    """Every fenced code block of ``text`` (the README ``path``), in order.

    Line-based, as CommonMark fences are: an opening line of three or more backticks (or tildes), optionally
    indented (a block inside a list item), with an info string whose first word is the language; the block ends
    at the first line that holds only the same character, at least as many times. Contents lose up to the
    opening fence's indentation. A fence that is never closed raises :class:`ReadmeError` naming its line.
    """
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent").expandtabs(4))
        language = opening.group("info").split()[0].lower() if opening.group("info").split() else ""
        body: list[tuple[int, str]] = []
        end = index + 1
        while end < len(lines):
            candidate = lines[end].strip()
            if candidate and set(candidate) == {fence[0]} and len(candidate) >= len(fence):
                break
            body.append((end + 1, _dedent(lines[end], indent)))
            end += 1
        else:
            raise ReadmeError(f"{path}:{index + 1}: the code block opened here ({fence}{language}) is never closed")
        blocks.append(Block(path, index + 1, language, tuple(body)))
        index = end + 1
    return blocks


def _dedent(line: str, indent: int) -> str:
    removed = 0
    while removed < indent and line[:1] in (" ", "\t"):
        removed += 4 if line[0] == "\t" else 1
        line = line[1:]
    return line


def strip_comment(line: str) -> str:
    """``line`` without its trailing shell comment: a ``#`` that starts a word, outside quotes and escapes."""
    quote = ""
    index = 0
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 1
            elif char == quote:
                quote = ""
        elif char == "\\":
            index += 1
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
        index += 1
    return line.rstrip()


@dataclass(frozen=True)
class Command:
    """One command of a shell block, with the state lines (``cd``/``export``/``source``) before it in the block."""

    path: str
    line: int  #: 1-based line of the command's first line
    text: str  #: continuations joined, comment stripped
    state: tuple[str, ...] = ()
    block_line: int = 0

    @property
    def key(self) -> str:
        """The text with runs of whitespace collapsed: what a :class:`Rule` matches."""
        return " ".join(self.text.split())

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def shell_commands(block: Block) -> list[Command]:
    """The commands of a shell block (none for a block with a :data:`SKIP_MARKERS` first line)."""
    if not block.is_shell or block.skip_reason:
        return []
    commands: list[Command] = []
    state: list[str] = []
    pending: list[str] = []
    first_line = 0
    for number, raw in block.lines:
        if not pending:
            first_line = number
        stripped = raw.strip()
        if stripped.endswith("\\") and not stripped.startswith("#"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        text = strip_comment(" ".join(part for part in pending if part))
        pending = []
        if not text:
            continue
        if _STATE_LINE.match(text):
            state.append(text)
            continue
        commands.append(Command(block.path, first_line, text, tuple(state), block.line))
    if pending:
        raise ReadmeError(f"{block.path}:{first_line}: the last command of the block ends with a '\\' continuation")
    return commands


def tracked_readmes(root: Path) -> list[str]:
    """Every git-tracked ``README.md`` of the checkout at ``root`` (``git ls-files '*README.md'``), sorted."""
    try:
        proc = subprocess.run(
            ["git", "ls-files", "-z", "--", "*README.md"], cwd=root, capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError:
        raise ReadmeError("git not found: the READMEs are the files git tracks; install git") from None
    if proc.returncode != 0:
        raise ReadmeError(f"{root}: not a git checkout ({proc.stderr.strip()}); run this from the repository")
    return sorted(name for name in proc.stdout.split("\0") if name.endswith("README.md") and (root / name).is_file())


def readme_commands(root: Path, paths: Iterable[str] | None = None) -> dict[str, list[tuple[Block, list[Command]]]]:
    """README path -> its shell blocks with their commands (skipped blocks included, with no commands)."""
    found: dict[str, list[tuple[Block, list[Command]]]] = {}
    for path in tracked_readmes(root) if paths is None else paths:
        blocks = parse_blocks(path, (root / path).read_text(encoding="utf-8"))
        found[path] = [(block, shell_commands(block)) for block in blocks if block.is_shell]
    return found


# ---------------------------------------------------------------------------------------------------------------
# Rules and fixtures
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """How one README command is covered. ``command`` is matched with runs of whitespace collapsed."""

    readme: str
    command: str
    kind: Kind
    #: ci: what runs it; test: ``tests/<file>.py::<name>`` (the check finds the name in the file)
    by: str = ""
    reason: str = ""
    # -- run only
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: exit statuses that pass (with ``reason`` saying why there is more than 0)
    exit_codes: tuple[int, ...] = (0,)
    #: strings the command's output (stdout and stderr) must contain
    output: tuple[str, ...] = ()
    #: a command that serves until stopped: it runs in the background until ``server`` (a URL) answers 200;
    #: the block's later commands run against it, then it gets SIGTERM and must exit 0
    server: str = ""
    #: files the command must leave as committed (compared with the repository's copy)
    unchanged: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.readme, " ".join(self.command.split())


def _run(
    readme: str,
    command: str,
    *,
    reason: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    exit_codes: tuple[int, ...] = (0,),
    output: tuple[str, ...] = (),
    server: str = "",
    unchanged: tuple[str, ...] = (),
) -> Rule:
    return Rule(readme, command, "run", "", reason, timeout_s, exit_codes, output, server, unchanged)


def _ci(readme: str, command: str, by: str, reason: str) -> Rule:
    return Rule(readme, command, "ci", by=by, reason=reason)


def _test(readme: str, command: str, by: str, reason: str) -> Rule:
    return Rule(readme, command, "test", by=by, reason=reason)


def _not_run(readme: str, command: str, reason: str) -> Rule:
    return Rule(readme, command, "not-run", reason=reason)


_MAIN = "README.md"
_TRAINING = "containers/training/README.md"
_INFERENCE = "containers/inference/README.md"
_VENDOR = "containers/training/vendor/README.md"
_LIBRARY = "constructs/README.md"
_EXAMPLES = "examples/README.md"
_CAUSAL_LM = "examples/causal_lm/README.md"
_DDP = "examples/ddp_shards/README.md"
_SYNTH_REASON = (
    "make readme-commands runs it before the blocks (in a scratch copy) when the repository has no cdk.out as new "
    "as the app's code and config, as on CI's fresh clone; the test suite synthesizes every environment too"
)

#: Every shell command of every README, and how it is covered.
RULES: tuple[Rule, ...] = (
    # -- README.md
    _ci(_MAIN, "make synth", "make readme-commands (make test)", _SYNTH_REASON),
    _ci(_MAIN, "make test", ".ci/run", "CI's entry point runs exactly this command"),
    _run(_MAIN, ".venv/bin/gpuctl shard ./raw/train ./shards/train --image-size 224"),
    _run(_MAIN, ".venv/bin/gpuctl train --synth --dry-run", output=('"TrainingJobName"',)),
    _run(_MAIN, ".venv/bin/gpuctl train --synth --dry-run --source-dir examples/causal_lm", output=('"code"',)),
    _run(
        _MAIN,
        ".venv/bin/gpuctl train --synth --local --source-dir examples/causal_lm "
        "--channel train=examples/causal_lm/data --channel validation=examples/causal_lm/data "
        "-p block_size=64 -p batch_size=16 -p max_steps=20 -p n_layer=2 --output local-output/lm",
        output=("model: local-output/lm/model.tar.gz",),
    ),
    _run(
        _MAIN,
        ".venv/bin/gpuctl train --synth --local --channel train=./shards/train --channel validation=./shards/train "
        "-p arch=resnet_tiny -p epochs=1 -p batch_size=16 --output local-output/default",
        output=("model: local-output/default/model.tar.gz",),
    ),
    _run(_MAIN, "make gpu-wheels", output=("28 files",), timeout_s=300),
    _run(
        _MAIN,
        "make gpu-check",
        exit_codes=(2,),
        output=("sees no NVIDIA GPU",),
        reason="CI has no GPU: the command must stop at once with exit 2 and say so (on a GPU host it runs the check)",
    ),
    _run(
        _MAIN,
        ".venv/bin/gpuctl preflight --env dev --offline",
        output=("ml.g5.xlarge for training job usage", "All G and VT Spot Instance Requests"),
    ),
    _run(_MAIN, ".venv/bin/gpuctl cost", output=("/month always on", "total: $")),
    _run(_MAIN, ".venv/bin/gpuctl cost diff cdk.out cdk.out", output=("no cost change",)),
    _run(_MAIN, ".venv/bin/gpuctl doctor", output=("GPU check:",)),
    _run(
        _MAIN,
        ".venv/bin/gpuctl doctor --instance-type ml.g5.xlarge",
        exit_codes=(0, 1),
        output=("GPU check:", "expected: at least one GPU"),
        reason="exit 0 on a host whose GPUs torch can use, 1 elsewhere (CI has no GPU): the README says both",
    ),
    # -- constructs/README.md
    _test(
        _LIBRARY,
        'pip install "./constructs[nag,codebuild]"',
        "tests/packaging/test_constructs_readme.py::library_venv",
        "installs the library this way into a new virtual environment, then runs every python block of the README",
    ),
    _not_run(
        _LIBRARY,
        'pip install "gpu-constructs[nag,codebuild] @ git+https://<host>/<org>/<repo>.git#subdirectory=constructs"',
        "placeholders for the reader's git host and repository; the same package as the line above, which "
        "tests/packaging/test_constructs_readme.py installs",
    ),
    # -- containers/inference/README.md
    _run(_INFERENCE, "gpuctl serve path/to/model.tar.gz --port 8080", server="http://127.0.0.1:8080/ping"),
    _run(_INFERENCE, "gpuctl invoke http://127.0.0.1:8080 sample.json", output=('"predictions"', "200")),
    _ci(
        _INFERENCE,
        ".venv/bin/python -m pytest tests/containers/inference tests/e2e -q",
        "make test",
        "part of the whole suite that make test runs",
    ),
    _not_run(
        _INFERENCE,
        ".venv/bin/python -m benchmarks.inference_batching",
        "a benchmark: several minutes on 2 cores, and it rewrites docs/benchmarks.md (make bench runs it)",
    ),
    # -- containers/training/README.md
    _run(
        _TRAINING,
        ".venv/bin/gpuctl train --synth --local --source-dir examples/causal_lm "
        "--channel train=examples/causal_lm/data --channel validation=examples/causal_lm/data "
        "-p block_size=64 -p batch_size=16 -p max_steps=20 -p n_layer=2 --output local-output/lm",
        output=("model: local-output/lm/model.tar.gz",),
    ),
    # -- containers/training/vendor/README.md
    _run(
        _VENDOR,
        "make vendor-runtime",
        reason="downloads the pinned wheels from the package index (CI reaches package registries) into the "
        "scratch copy and checks them against the committed SHA256SUMS",
        output=(": OK",),
    ),
    _run(
        _VENDOR,
        "cd containers/training/vendor && sha256sum *.whl > SHA256SUMS",
        reason="after make vendor-runtime: the sums of the downloaded wheels are the committed file, line for line",
        unchanged=("containers/training/vendor/SHA256SUMS",),
    ),
    # -- examples/README.md
    _run(
        _EXAMPLES,
        "gpuctl train --local --source-dir examples/ddp_shards --entry-point train.py --channel train=./shards "
        "--channel validation=./shards -p epochs=1 -p batch_size=32",
        output=("algo-1: exit 0",),
    ),
    # -- examples/causal_lm/README.md
    _run(
        _CAUSAL_LM,
        "gpuctl train --local --source-dir examples/causal_lm --entry-point train.py "
        "--channel train=examples/causal_lm/data --channel validation=examples/causal_lm/data "
        "-p block_size=64 -p batch_size=16 -p max_steps=20 -p n_layer=2",
        output=("algo-1: exit 0",),
    ),
    _run(
        _CAUSAL_LM,
        "python -m torch.distributed.run --standalone --nproc_per_node=2 train.py --max_steps 20 --n_layer 2 "
        "--block_size 64 --batch_size 8",
        output=("model written to",),
    ),
    _run(
        _CAUSAL_LM,
        'cd examples/causal_lm && python -c "from train import generate; '
        "print(generate('../../local-output/lm-model', 'The river ', 300))\"",
    ),
    # -- examples/ddp_shards/README.md
    _run(_DDP, "gpuctl shard ./images ./shards --image-size 64", output=("192 samples, 3 classes",)),
    _run(
        _DDP,
        "gpuctl train --local --source-dir examples/ddp_shards --entry-point train.py --channel train=./shards "
        "--channel validation=./shards -p epochs=1 -p batch_size=32",
        output=("algo-1: exit 0",),
    ),
    _run(_DDP, "python train.py --epochs 2 --batch_size 32", output=("model written to",)),
    _run(
        _DDP,
        "python -m torch.distributed.run --standalone --nproc_per_node=2 train.py --epochs 3",
        output=("resumed from step", "model written to"),
    ),
)


#: ``make(scratch, env)``: creates the fixture in the scratch copy ``scratch``; ``env`` is the commands' environment.
FixtureMaker = Callable[[Path, Mapping[str, str]], None]


@dataclass(frozen=True)
class Fixture:
    """Input data a README tells its reader to bring, made in the scratch copy before the README's first block."""

    readme: str
    path: str  #: relative to the copy's root
    what: str
    make: FixtureMaker
    #: text of a command of ``readme`` that reads it (the check fails when no command contains it any more)
    needed_by: str


def write_png(path: Path, pixels: Sequence[bytes], width: int) -> None:
    """An 8-bit RGB PNG of ``pixels`` (one ``bytes`` of ``3 * width`` per row), with the standard library only
    (PNG specification, third edition: signature, IHDR, zlib-compressed IDAT of filter-0 rows, IEND)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    if any(len(row) != 3 * width for row in pixels):
        raise ValueError(f"{path}: every row must hold 3 x {width} bytes")
    header = struct.pack(">IIBBBBB", width, len(pixels), 8, 2, 0, 0, 0)  # 8 bits, truecolour, no interlace
    data = zlib.compress(b"".join(b"\x00" + row for row in pixels))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def image_folder(root: Path, *, classes: int = 3, per_class: int = 16, seed: int = 0) -> Path:
    """An ImageFolder tree ``root/class_<c>/img_<i>.png`` of 48x40 PNGs whose mean colour depends on the class
    (so a model can learn it), as the test suite's images; any ImageFolder of real images works the same."""
    rng = random.Random(seed)
    width, height = 48, 40
    for c in range(classes):
        directory = root / f"class_{c}"
        directory.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            rows = [bytes(int(rng.random() * 80) + c * 60 for _ in range(3 * width)) for _ in range(height)]
            write_png(directory / f"img_{i:03d}.png", rows, width)
    return root


def _venv_command(scratch: Path, env: Mapping[str, str], argv: Sequence[str], what: str) -> None:
    proc = subprocess.run(
        list(argv), cwd=scratch, env=dict(env), capture_output=True, text=True, timeout=DEFAULT_TIMEOUT_S
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-TAIL_LINES:])
        raise RuntimeError(f"fixture {what}: {' '.join(argv)} exited {proc.returncode}:\n{tail}")


def _images(relative: str, per_class: int) -> FixtureMaker:
    def make(scratch: Path, env: Mapping[str, str]) -> None:
        image_folder(scratch / relative, per_class=per_class)

    return make


def _shards(scratch: Path, env: Mapping[str, str]) -> None:
    images = image_folder(scratch / ".readme-fixtures" / "images", per_class=64)
    _venv_command(scratch, env, ["gpuctl", "shard", str(images), "shards", "--image-size", "64"], "shards")


def _example_model(scratch: Path, env: Mapping[str, str]) -> None:
    code = "import sys; from gpu_train.export import export_example_model; export_example_model(sys.argv[1])"
    _venv_command(scratch, env, ["python", "-c", code, "path/to"], "path/to/model.tar.gz")


def _request(scratch: Path, env: Mapping[str, str]) -> None:
    """One (3, 32, 32) sample of :func:`_example_model`'s input, model-ready floats."""
    sample = [[[round((x * 7 + y * 3 + c) % 17 / 17 - 0.5, 3) for x in range(32)] for y in range(32)] for c in range(3)]
    (scratch / "sample.json").write_text(json.dumps({"instances": [sample]}), encoding="utf-8")


FIXTURES: tuple[Fixture, ...] = (
    Fixture(_MAIN, "raw/train", "48 generated PNGs in 3 classes (any ImageFolder works)", _images("raw/train", 16),
            "gpuctl shard ./raw/train"),
    Fixture(_EXAMPLES, "shards", "192 generated PNGs in 3 classes packed by gpuctl shard at 64 px", _shards,
            "--channel train=./shards"),
    Fixture(_DDP, "images", "192 generated PNGs in 3 classes (any ImageFolder works)", _images("images", 64),
            "gpuctl shard ./images"),
    Fixture(_INFERENCE, "path/to/model.tar.gz", "the training runtime's example model (resnet_tiny, 32 px)",
            _example_model, "gpuctl serve path/to/model.tar.gz"),
    Fixture(_INFERENCE, "sample.json", "a JSON request of one 3x32x32 sample", _request, "sample.json"),
)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# Check
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Classified:
    command: Command
    rule: Rule | None


def classify(found: Mapping[str, list[tuple[Block, list[Command]]]], rules: Sequence[Rule] = RULES) -> list[Classified]:
    """Each command of ``found`` with the rule that matches it (None: unclassified), in README order."""
    by_key = {rule.key: rule for rule in rules}
    return [
        Classified(command, by_key.get((path, command.key)))
        for path, blocks in found.items()
        for _, commands in blocks
        for command in commands
    ]


def check(
    root: Path,
    found: Mapping[str, list[tuple[Block, list[Command]]]],
    rules: Sequence[Rule] = RULES,
    fixtures: Sequence[Fixture] = FIXTURES,
) -> list[str]:
    """Every problem of the classification: unclassified commands, rules and fixtures that match nothing, named
    tests that do not exist, duplicate rules, rules without the reason their kind needs. Empty: all covered."""
    problems: list[str] = []
    classified = classify(found, rules)
    for item in classified:
        if item.rule is None:
            problems.append(
                f"{item.command.where}: `{item.command.text}` is not classified; add a rule to RULES in "
                "platform_tools/readme_commands.py (run by make readme-commands, run by CI, run by a named test, "
                "or not run with the reason), or start its block with `# needs an AWS account` or `# needs Docker`, "
                "or make a usage synopsis a ```text block"
            )
    used = {item.rule.key for item in classified if item.rule is not None}
    seen: set[tuple[str, str]] = set()
    for rule in rules:
        where = f"platform_tools/readme_commands.py: rule for {rule.readme} `{rule.key[1]}`"
        if rule.key in seen:
            problems.append(f"{where}: declared twice")
        seen.add(rule.key)
        if rule.readme in found and rule.key not in used:
            problems.append(f"{where}: matches no command of {rule.readme} any more; update or remove the rule")
        elif rule.readme not in found:
            problems.append(f"{where}: {rule.readme} is not a git-tracked README.md")
        if rule.kind not in KINDS:
            problems.append(f"{where}: kind {rule.kind!r} is not one of {', '.join(KINDS)}")
        if rule.kind in ("ci", "test", "not-run") and not rule.reason:
            problems.append(f"{where}: a {rule.kind} rule needs the reason")
        if rule.kind == "run" and rule.exit_codes != (0,) and not rule.reason:
            problems.append(f"{where}: exit codes {rule.exit_codes} need the reason")
        if rule.kind in ("ci", "test") and not rule.by:
            problems.append(f"{where}: a {rule.kind} rule names what runs it (by=)")
        if rule.kind == "test":
            problems.extend(_test_problems(root, rule, where))
    commands_of: dict[str, list[str]] = {}
    for item in classified:
        commands_of.setdefault(item.command.path, []).append(item.command.key)
    for fixture in fixtures:
        if not any(fixture.needed_by in text for text in commands_of.get(fixture.readme, [])):
            problems.append(
                f"platform_tools/readme_commands.py: fixture {fixture.path} of {fixture.readme}: no command there "
                f"contains `{fixture.needed_by}` any more; update or remove the fixture"
            )
    return problems


def _test_problems(root: Path, rule: Rule, where: str) -> list[str]:
    file, _, name = rule.by.partition("::")
    if not file.startswith("tests/") or not name:
        return [f"{where}: by={rule.by!r}; allowed: tests/<file>.py::<test or fixture name>"]
    path = root / file
    if not path.is_file():
        return [f"{where}: {file} does not exist"]
    if not re.search(rf"^\s*def {re.escape(name)}\(", path.read_text(encoding="utf-8"), flags=re.M):
        return [f"{where}: {file} defines no {name}"]
    return []


def _print_check(root: Path, found: Mapping[str, list[tuple[Block, list[Command]]]], verbose: bool) -> list[str]:
    problems = check(root, found)
    classified = classify(found)
    skipped = sum(1 for blocks in found.values() for block, _ in blocks if block.skip_reason)
    counts = {kind: sum(1 for c in classified if c.rule is not None and c.rule.kind == kind) for kind in KINDS}
    if verbose:
        for item in classified:
            kind = item.rule.kind if item.rule else "UNCLASSIFIED"
            print(f"{item.command.where:40} {kind:8} {item.command.key}")
    print(
        f"readme-commands: {len(classified)} commands in the shell blocks of {len(found)} READMEs: "
        + ", ".join(f"{counts[kind]} {kind}" for kind in KINDS)
        + f"; {skipped} blocks marked as needing an AWS account or Docker"
    )
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return problems


# ---------------------------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Failure:
    where: str
    command: str
    message: str
    tail: str = ""


@dataclass
class ReadmeResult:
    readme: str
    ran: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)


class _Printer:
    """Progress lines from several threads, one whole line at a time, flushed (make shows them as they come)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            print(line, flush=True)


def copy_worktree(root: Path, destination: Path) -> None:
    """The checkout ``root``'s files as the working tree has them (uncommitted edits included) into ``destination``,
    with their modification times (``make`` compares them): every git-tracked file that still exists, and the
    untracked, not ignored files of folders below the top that hold tracked files (a new module of a package).
    Other untracked files stay out: what a reader made by following a README at the root (``./shards``,
    ``./images``, ``sample.json``) must not be in the way of the README's commands."""

    def listed(*options: str) -> list[str]:
        proc = subprocess.run(
            ["git", "ls-files", "-z", *options], cwd=root, capture_output=True, text=True, timeout=60, check=True
        )
        return sorted(set(filter(None, proc.stdout.split("\0"))))

    tracked = listed("--cached")
    folders = {str(Path(name).parent) for name in tracked} - {"."}
    untracked = [name for name in listed("--others", "--exclude-standard") if str(Path(name).parent) in folders]
    for name in [*tracked, *untracked]:
        source = root / name
        if not source.is_file() and not source.is_symlink():
            continue  # deleted in the working tree, or a submodule
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def command_env(scratch: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the README commands in ``scratch``: the reader's after ``source .venv/bin/activate``,
    with no AWS credentials, profile or config, and no make or Python state of the caller."""
    inherited = dict(os.environ if base is None else base)
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}
    env = {k: v for k, v in inherited.items() if not k.startswith("AWS_") and k not in dropped}
    nowhere = scratch / ".readme-no-aws"
    tmp = scratch / ".readme-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env.update(
        PATH=f"{scratch / '.venv' / 'bin'}{os.pathsep}{inherited.get('PATH', os.defpath)}",
        VIRTUAL_ENV=str(scratch / ".venv"),
        AWS_CONFIG_FILE=str(nowhere / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(nowhere / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        TMPDIR=str(tmp),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION="1",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
    )
    return env


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class _Stopped(Exception):
    """The run was interrupted: no new command starts."""


class _Children:
    """The process groups the runners started (each command in a session of its own, so that a time limit ends
    everything it started), so that an interrupted run (Ctrl-C, SIGTERM) ends them too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._stopping = False

    def start(self, argv: Sequence[str], **options: object) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._stopping:
                raise _Stopped()
            proc: subprocess.Popen[bytes] = subprocess.Popen(list(argv), start_new_session=True, **options)  # type: ignore[call-overload]
            self._procs.add(proc)
            return proc

    @property
    def stopping(self) -> bool:
        return self._stopping

    def check(self) -> None:
        """Raise :class:`_Stopped` once the run is being interrupted."""
        if self._stopping:
            raise _Stopped()

    def done(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop_all(self) -> None:
        with self._lock:
            self._stopping = True
            procs = list(self._procs)
        for proc in procs:
            _kill_group(proc)


def _port_in_use(url: str) -> bool:
    match = re.match(r"^https?://([^/:]+):(\d+)", url)
    if match is None:
        return False
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((match.group(1), int(match.group(2)))) == 0


class _Server:
    """A ``server`` command running in the background of its block."""

    def __init__(self, command: Command, rule: Rule, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.command, self.rule, self.proc, self.log = command, rule, proc, log

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


class ReadmeRunner:
    """Runs the ``run`` commands of one README in its scratch copy (see the module docstring)."""

    def __init__(
        self,
        readme: str,
        scratch: Path,
        blocks: Sequence[tuple[Block, list[Command]]],
        rules: Mapping[tuple[str, str], Rule],
        fixtures: Sequence[Fixture],
        root: Path,
        say: Callable[[str], None],
        timeout_s: float | None = None,
        children: _Children | None = None,
    ) -> None:
        self.readme, self.scratch, self.blocks, self.rules = readme, scratch, blocks, rules
        self.fixtures, self.root, self.say, self.timeout_s = fixtures, root, say, timeout_s
        self.children = children or _Children()
        self.env = command_env(scratch)
        self.logs = scratch / ".readme-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.result = ReadmeResult(readme)
        self._count = 0

    def run(self) -> ReadmeResult:
        started = time.monotonic()
        try:
            for fixture in self.fixtures:
                self._fixture(fixture)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # nothing of this README can run
            self.result.failures.append(Failure(self.readme, "(fixtures)", f"a fixture failed: {exc}"))
            self.say(f"[{self.readme}] FAILED: a fixture failed: {exc}")
            self.result.seconds = time.monotonic() - started
            return self.result
        for block, commands in self.blocks:
            self._block(block, commands)
        self.result.seconds = time.monotonic() - started
        return self.result

    def _fixture(self, fixture: Fixture) -> None:
        if (self.scratch / fixture.path).exists():
            return
        began = time.monotonic()
        fixture.make(self.scratch, self.env)
        self.say(f"[{self.readme}] fixture {fixture.path}: {fixture.what} ({time.monotonic() - began:.1f} s)")

    def _block(self, block: Block, commands: Sequence[Command]) -> None:
        servers: list[_Server] = []
        failed = False
        try:
            for command in commands:
                rule = self.rules.get((command.path, command.key))
                if rule is None or rule.kind != "run":
                    continue
                if failed:
                    self.say(f"[{command.where}] not run: an earlier command of its block failed")
                    continue
                if rule.server:
                    server = self._start_server(command, rule)
                    if server is None:
                        failed = True
                    else:
                        servers.append(server)
                    continue
                failed = not self._command(command, rule)
        finally:
            for server in servers:
                self._stop_server(server)

    def _script(self, command: Command) -> str:
        return "\n".join(["set -eo pipefail", *command.state, command.text])

    def _log(self, command: Command) -> Path:
        self._count += 1
        return self.logs / f"{self._count:03d}-line{command.line}.log"

    def _fail(self, command: Command, message: str, output: str) -> None:
        self.result.failures.append(Failure(command.where, command.text, message, _tail(output)))
        self.say(f"[{command.where}] FAILED: {message}")

    def _command(self, command: Command, rule: Rule) -> bool:
        limit = self.timeout_s or rule.timeout_s
        before = {name: self._committed(name) for name in rule.unchanged}
        self.children.check()
        self.say(f"[{command.where}] $ {command.text}")
        log = self._log(command)
        began = time.monotonic()
        with log.open("wb") as sink:
            proc = self.children.start(
                ["bash", "-c", self._script(command)], cwd=self.scratch, env=self.env,
                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                status: int | None = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()
                status = None
            finally:
                _kill_group(proc)  # what it left running in the background
                self.children.done(proc)
        self.children.check()  # killed by the interruption, not failed
        seconds = time.monotonic() - began
        self.result.ran += 1
        output = log.read_text(encoding="utf-8", errors="replace")
        if status is None:
            self._fail(command, f"still running after the time limit of {limit:g} s (killed)", output)
            return False
        if status not in rule.exit_codes:
            allowed = " or ".join(str(code) for code in rule.exit_codes)
            self._fail(command, f"exit status {status} after {seconds:.1f} s; allowed: {allowed}", output)
            return False
        missing = [text for text in rule.output if text not in output]
        if missing:
            self._fail(command, f"exit status {status}, but the output lacks {missing}", output)
            return False
        for name, committed in before.items():
            now = (self.scratch / name).read_bytes() if (self.scratch / name).is_file() else None
            if now != committed:
                self._fail(command, f"{name} differs from the committed file after the command", output)
                return False
        self.say(f"[{command.where}] ok (exit {status}, {seconds:.1f} s)")
        return True

    def _committed(self, name: str) -> bytes | None:
        path = self.root / name
        return path.read_bytes() if path.is_file() else None

    def _start_server(self, command: Command, rule: Rule) -> _Server | None:
        self.children.check()
        self.say(f"[{command.where}] $ {command.text}   (in the background, until {rule.server} answers)")
        if _port_in_use(rule.server):
            self._fail(command, f"{rule.server}: something on this machine already listens there", "")
            return None
        log = self._log(command)
        sink = log.open("wb")
        try:
            proc = self.children.start(
                ["bash", "-c", "\n".join(["set -eo pipefail", *command.state, "exec " + command.text])],
                cwd=self.scratch, env=self.env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            sink.close()
        server = _Server(command, rule, proc, log)
        self.result.ran += 1
        began = time.monotonic()
        while time.monotonic() - began < SERVER_START_S:
            if proc.poll() is not None:
                self.children.done(proc)
                self._fail(command, f"exited {proc.returncode} before {rule.server} answered", server.output())
                return None
            try:
                with urllib.request.urlopen(rule.server, timeout=2) as answer:
                    if answer.status == 200:
                        self.say(f"[{command.where}] serving ({time.monotonic() - began:.1f} s)")
                        return server
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        _kill_group(proc)
        proc.wait()
        self.children.done(proc)
        self._fail(command, f"{rule.server} did not answer 200 within {SERVER_START_S} s", server.output())
        return None

    def _stop_server(self, server: _Server) -> None:
        try:
            if not self.children.stopping:  # else the interruption killed it
                self._stop(server)
        finally:
            _kill_group(server.proc)  # what the server left behind
            self.children.done(server.proc)

    def _stop(self, server: _Server) -> None:
        proc, command = server.proc, server.command
        if proc.poll() is not None:
            self._fail(command, f"the server exited {proc.returncode} while the block's commands ran", server.output())
            return
        _kill_group(proc, signal.SIGTERM)
        try:
            status = proc.wait(timeout=SERVER_STOP_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            self._fail(command, f"still running {SERVER_STOP_S} s after SIGTERM (killed)", server.output())
            return
        if status != 0:
            self._fail(command, f"exit status {status} after SIGTERM; allowed: 0", server.output())
            return
        self.say(f"[{command.where}] stopped by SIGTERM: exit 0")


# -- the shared environment and cdk.out -------------------------------------------------------------------------

#: What ``make synth`` reads (the Makefile's SYNTH_INPUTS, and the training runtime the training stack packages).
_SYNTH_INPUT_DIRS = ("config", "stacks", "constructs/gpu_constructs", "containers/training")
_SYNTH_INPUT_FILES = ("app.py", "cdk.json")


def _newest_synth_input(root: Path) -> float:
    newest = max(((root / name).stat().st_mtime for name in _SYNTH_INPUT_FILES if (root / name).is_file()), default=0.0)
    for directory in _SYNTH_INPUT_DIRS:
        for dirpath, dirnames, filenames in os.walk(root / directory):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info")]
            for name in filenames:
                newest = max(newest, (Path(dirpath) / name).stat().st_mtime)
    return newest


def _dev_training_stack(root: Path) -> str:
    """``<resource_prefix>-training`` of config/dev.yaml (the stack ``gpuctl train --synth`` reads by default)."""
    match = re.search(r"^resource_prefix:\s*[\"']?([\w-]+)", (root / "config" / "dev.yaml").read_text(), flags=re.M)
    if match is None:
        raise ReadmeError("config/dev.yaml: no resource_prefix; the training stack's name comes from it")
    return f"{match.group(1)}-training"


def fresh_cdk_out(root: Path) -> Path | None:
    """The repository's ``cdk.out`` when it holds the dev training stack and is newer than everything synth reads."""
    cdk_out = root / "cdk.out"
    manifest = cdk_out / "manifest.json"
    if not manifest.is_file() or not (cdk_out / f"{_dev_training_stack(root)}.template.json").is_file():
        return None
    return cdk_out if manifest.stat().st_mtime >= _newest_synth_input(root) else None


def _stale_setup(scratch: Path) -> str:
    """Why ``make`` in ``scratch`` would reinstall the shared ``.venv`` or ``node_modules`` ('' when it would not):
    the copy's stamps are the repository's (symlinks), its requirement files keep their modification times."""
    proc = subprocess.run(
        ["make", "--no-print-directory", "-q", ".venv/.installed", "node_modules/.installed"],
        cwd=scratch, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if proc.returncode == 0:
        return ""
    return (
        "the repository's .venv or node_modules is older than its requirements (make -q .venv/.installed "
        "node_modules/.installed says so): run `make setup` first; make in a scratch copy would reinstall the "
        "shared environment from the copy"
    )


def _link_shared(root: Path, scratch: Path, cdk_out: Path | None) -> None:
    for name in (".venv", "node_modules"):
        if (root / name).exists():
            (scratch / name).symlink_to(root / name, target_is_directory=True)
    if cdk_out is not None:
        (scratch / "cdk.out").symlink_to(cdk_out, target_is_directory=True)


def _synth(root: Path, base: Path, say: Callable[[str], None], timeout_s: float) -> Path:
    scratch = base / "synth"
    copy_worktree(root, scratch)
    _link_shared(root, scratch, None)
    problem = _stale_setup(scratch)
    if problem:
        raise ReadmeError(problem)
    say("[synth] the repository has no cdk.out as new as the app's code and config: make synth (in a copy)")
    began = time.monotonic()
    proc = subprocess.run(
        ["make", "--no-print-directory", "synth"], cwd=scratch, env=command_env(scratch),
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    if proc.returncode != 0:
        raise ReadmeError(f"make synth exited {proc.returncode}:\n{_tail(proc.stdout + proc.stderr)}")
    say(f"[synth] ok ({time.monotonic() - began:.1f} s)")
    return scratch / "cdk.out"


def _runs(rules: Mapping[tuple[str, str], Rule], blocks: Sequence[tuple[Block, list[Command]]]) -> int:
    """How many commands of ``blocks`` have a ``run`` rule."""
    return sum(
        1 for _, commands in blocks for c in commands if (rule := rules.get((c.path, c.key))) and rule.kind == "run"
    )


def _slug(readme: str) -> str:
    parent = str(Path(readme).parent)
    return "root" if parent == "." else parent.replace("/", "-")


def run(
    root: Path,
    *,
    jobs: int = 1,
    timeout_s: float | None = None,
    keep: bool = False,
    readmes: Sequence[str] = (),
    rules: Sequence[Rule] = RULES,
    fixtures: Sequence[Fixture] = FIXTURES,
    say: Callable[[str], None] | None = None,
) -> list[ReadmeResult]:
    """Run every ``run`` command (of ``readmes``, default all) as the module docstring says; one result per README."""
    say = say or _Printer()
    found = readme_commands(root)
    if readmes:
        unknown = sorted(set(readmes) - set(found))
        if unknown:
            raise ReadmeError(f"{', '.join(unknown)}: not git-tracked READMEs; allowed: {', '.join(found)}")
        found = {path: blocks for path, blocks in found.items() if path in readmes}
    by_key = {rule.key: rule for rule in rules}
    plan = {path: blocks for path, blocks in found.items() if _runs(by_key, blocks)}
    total = sum(_runs(by_key, blocks) for blocks in plan.values())
    base = Path(tempfile.mkdtemp(prefix="readme-commands-"))
    try:
        cdk_out = fresh_cdk_out(root)
        source = "the repository's (fresh)" if cdk_out else "make synth first"
        say(
            f"readme-commands: {total} commands of {len(plan)} READMEs, each README in a scratch copy under {base}; "
            f"cdk.out: {source}"
        )
        if plan and cdk_out is None:
            cdk_out = _synth(root, base, say, timeout_s or DEFAULT_TIMEOUT_S)
        children = _Children()
        runners = []
        for path, blocks in plan.items():
            scratch = base / _slug(path)
            copy_worktree(root, scratch)
            _link_shared(root, scratch, cdk_out)
            problem = _stale_setup(scratch)
            if problem:
                raise ReadmeError(problem)
            own = [fixture for fixture in fixtures if fixture.readme == path]
            runners.append(ReadmeRunner(path, scratch, blocks, by_key, own, root, say, timeout_s, children))
        pool = ThreadPoolExecutor(max_workers=max(1, jobs))
        try:
            futures = [pool.submit(runner.run) for runner in runners]
            return [future.result() for future in futures]
        finally:
            children.stop_all()  # an interrupted run (Ctrl-C, SIGTERM) ends what still runs; else there is nothing
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        if keep:
            say(f"readme-commands: scratch copies kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def _print_summary(results: Sequence[ReadmeResult], seconds: float) -> int:
    failures = [failure for result in results for failure in result.failures]
    print("readme-commands summary:")
    for result in results:
        state = f"{len(result.failures)} FAILED" if result.failures else "ok"
        print(f"  {result.readme:40} {result.ran:3} commands  {result.seconds:6.1f} s  {state}")
    ran = sum(result.ran for result in results)
    print(f"  {ran} commands in {seconds:.1f} s: {'all passed' if not failures else f'{len(failures)} failed'}")
    for failure in failures:
        print(f"\n{failure.where}: `{failure.command}`: {failure.message}", file=sys.stderr)
        if failure.tail:
            print("  " + failure.tail.replace("\n", "\n  "), file=sys.stderr)
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m platform_tools.readme_commands",
        description="Classify (--check) or run (--run) every shell command of the git-tracked READMEs.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="classify every README command; run nothing (fast)")
    mode.add_argument("--run", action="store_true", help="check, then run the 'run' commands in scratch copies")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository (default: this directory)")
    parser.add_argument("-v", "--verbose", action="store_true", help="--check: list every command and its kind")
    parser.add_argument("--jobs", type=int, default=2, help="--run: READMEs run at the same time (default 2)")
    parser.add_argument("--timeout", type=float, help=f"--run: seconds per command (default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--keep", action="store_true", help="--run: keep the scratch copies and their logs")
    parser.add_argument("--readme", action="append", default=[], help="--run: only this README (repeatable)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: allowed: 1 or more")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout {args.timeout}: allowed: more than 0 seconds")
    root = args.root.resolve()
    try:
        found = readme_commands(root)
        problems = _print_check(root, found, args.verbose)
        if problems:
            print(f"readme-commands: {len(problems)} problems (above)", file=sys.stderr)
            return 1
        if args.check:
            return 0
        started = time.monotonic()
        previous = signal.signal(signal.SIGTERM, _terminate)  # so that run() ends its commands on the way out
        try:
            results = run(root, jobs=args.jobs, timeout_s=args.timeout, keep=args.keep, readmes=args.readme)
        finally:
            signal.signal(signal.SIGTERM, previous)
        return _print_summary(results, time.monotonic() - started)
    except ReadmeError as exc:
        print(f"readme-commands: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
