#!/usr/bin/env python3
"""CDK app entry point: ``cdk synth -c env=NAME`` (default: dev). See README.md."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
for path in (ROOT, ROOT / "constructs"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from stacks.app_builder import build_app  # noqa: E402
from stacks.config import ConfigError  # noqa: E402


def main() -> int:
    try:
        platform = build_app()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    platform.app.synth()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
