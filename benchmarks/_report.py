"""Write one benchmark's section of docs/benchmarks.md (between its BEGIN/END markers)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks.md"


def relative_to_repo(argument: str) -> str:
    """A command-line argument as a report shows it: a path inside the repository relative to its root."""
    path = Path(argument)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else argument


def write_section(name: str, markdown: str, report: Path = REPORT) -> None:
    """Replace the text between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` with ``markdown``.

    The section is appended when the markers are missing, so a new benchmark needs no manual edit.
    """
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    text = report.read_text() if report.exists() else "# Benchmarks\n"
    body = f"{begin}\n{markdown.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    found = pattern.search(text)
    text = pattern.sub(lambda _m: body, text) if found else text.rstrip("\n") + f"\n\n{body}\n"
    report.write_text(text)


@dataclass(frozen=True)
class LoadCurve:
    """One server's figures over the concurrency levels of a load benchmark, for :func:`plot_load_curves`."""

    label: str
    concurrency: Sequence[int]
    throughput: Sequence[float]
    p50_ms: Sequence[float]
    p99_ms: Sequence[float]
    spread: Sequence[tuple[float, float]] | None = None  # (min, max) throughput per N: drawn as error bars


def plot_load_curves(curves: Sequence[LoadCurve], path: Path, title: str, throughput_label: str) -> None:
    """Throughput (left) and p50/p99 latency (right, log scale) against concurrent clients (log 2), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for c in curves:
        if c.spread is None:
            ax1.plot(c.concurrency, c.throughput, marker="o", label=c.label)
        else:
            err = [
                [t - lo for t, (lo, _) in zip(c.throughput, c.spread, strict=True)],
                [hi - t for t, (_, hi) in zip(c.throughput, c.spread, strict=True)],
            ]
            ax1.errorbar(c.concurrency, c.throughput, yerr=err, marker="o", capsize=3, label=c.label)
        (line,) = ax2.plot(c.concurrency, c.p99_ms, marker="o", label=f"{c.label} p99")
        ax2.plot(c.concurrency, c.p50_ms, marker="x", ls="--", color=line.get_color(), label=f"{c.label} p50")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(curves[0].concurrency))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("concurrent clients (N)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_ylabel(throughput_label)
    ax2.set_ylabel("latency (ms)")
    ax2.set_yscale("log")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
