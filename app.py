#!/usr/bin/env python3
"""CDK app entry point: ``cdk synth -c env=NAME`` (default: dev). See README.md."""

from __future__ import annotations

import sys

# Importable through packaging (`make setup` installs the project and ./constructs in editable mode).
from stacks.config import DEFAULT_ENV, ConfigError, load_config  # CDK-free: a bad config fails fast


def main() -> int:
    import json
    import os

    from jsii.errors import JSIIError

    from gpu_constructs.errors import ValidationError

    # Validate the config before the CDK runtime starts, so a bad file fails in well under a second.
    context = json.loads(os.environ.get("CDK_CONTEXT_JSON") or "{}")
    try:
        load_config(str(context.get("env") or DEFAULT_ENV))
        from stacks.app_builder import build_app

        platform = build_app()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a construct refused a value: one message, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        platform.app.synth()
    except (RuntimeError, JSIIError) as exc:  # a validation (cdk-nag, add_validation) failed in the CDK runtime
        print(f"synth failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
