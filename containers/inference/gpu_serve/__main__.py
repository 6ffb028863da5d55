"""Container entrypoint: ``python -m gpu_serve serve``.

SageMaker starts the image as ``docker run IMAGE serve``; the image's ENTRYPOINT is ``python -m gpu_serve``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpu_serve.config import ServeConfig
from gpu_serve.errors import ConfigError

USAGE = "usage: python -m gpu_serve serve   (configured by environment variables; see the image README)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in ([], ["serve"]):
        try:
            config = ServeConfig.from_env()
        except ConfigError as exc:
            print(f"gpu_serve: {exc}", file=sys.stderr)
            return 2
        from gpu_serve.server import serve

        return serve(config)
    if args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    print(f"gpu_serve: unknown command {' '.join(args)!r}; {USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
