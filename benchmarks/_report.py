"""Write one benchmark's section of docs/benchmarks.md (between its BEGIN/END markers)."""

from __future__ import annotations

import re
from pathlib import Path

REPORT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


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
