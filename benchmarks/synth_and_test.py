"""Synth and test speed, measured side by side in one run.

Measures, in this order and on the same machine state:
  * the floor: ``python -c "import aws_cdk"`` (best of 3);
  * ``make synth`` (dev, all four cdk-nag packs) wall time (best of 2; the first run warms caches);
  * the whole ``make test`` wall time (once).

Targets (DESIGN.md / issue 2): synth <= 30x the import floor; make test <= 5 minutes on 2 cores.
Writes the ``synth-and-test`` section of docs/benchmarks.md. Run: ``make bench`` or
``python -m benchmarks.synth_and_test [--skip-test] [--no-report]``; about 3 minutes on 2 cores (``make test``
is most of it). ``--quick``: one synth, no ``make test``, docs/ untouched (under a minute).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._report import write_section

ROOT = Path(__file__).resolve().parent.parent
SYNTH_RATIO_TARGET = 30.0
TEST_TARGET_S = 300.0


def say(line: str) -> None:
    print(line, flush=True)


def timed(cmd: list[str], *, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-test", action="store_true", help="do not time `make test`")
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--quick", action="store_true", help="one synth, no `make test`; implies --no-report")
    args = parser.parse_args(argv)
    if args.quick:
        args.skip_test, args.no_report = True, True
    synth_runs = 1 if args.quick else 2

    env = {
        **os.environ,
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    py = sys.executable
    say("timing `python -c 'import aws_cdk'` (the floor, best of 3) ...")
    floor = min(timed([py, "-c", "import aws_cdk"], env=env) for _ in range(3))
    synths = []
    for run in range(synth_runs):
        say(f"timing `make synth` (run {run + 1} of {synth_runs}) ...")
        synths.append(timed(["make", "--no-print-directory", "synth"], env=env))
    synth = min(synths)
    test = None
    if not args.skip_test:
        say("timing `make test` (lint, types and the whole suite: about 2 minutes on 2 cores) ...")
        test = timed(["make", "--no-print-directory", "test"], env=env)

    ratio = synth / floor
    rows = [
        "| measurement | wall time | ratio | target | met |",
        "|---|---|---|---|---|",
        f'| `python -c "import aws_cdk"` (floor, best of 3) | {floor:.2f} s | 1.0x | - | - |',
        f"| `make synth` (dev, 4 cdk-nag packs, best of {synth_runs}) | {synth:.2f} s | {ratio:.1f}x floor "
        f"| <= {SYNTH_RATIO_TARGET:.0f}x | {'yes' if ratio <= SYNTH_RATIO_TARGET else 'NO'} |",
    ]
    if test is not None:
        rows.append(
            f"| `make test` (lint, types, whole suite) | {test:.1f} s | {test / floor:.0f}x floor "
            f"| <= {TEST_TARGET_S:.0f} s | {'yes' if test <= TEST_TARGET_S else 'NO'} |"
        )
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    body = "\n".join(
        [
            "## Synth and test speed",
            "",
            f"Measured in one run on {machine} (`python -m benchmarks.synth_and_test`).",
            "",
            *rows,
        ]
    )
    if not args.no_report:
        write_section("synth-and-test", body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
