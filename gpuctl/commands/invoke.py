"""``gpuctl invoke URL FILE``: send FILE to a model server's ``/invocations`` and print the answer.

URL is the server (``http://127.0.0.1:8080``; ``/invocations`` is added when the path is empty). The
Content-Type comes from FILE's extension (.json, .npy, .jpg/.jpeg, .png) unless ``--content-type`` says
otherwise. The response body goes to stdout (or ``--output``); the status and the server's latency headers
go to stderr. Exit code 0 on a 2xx answer, 1 on an HTTP error, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gpuctl.commands import add_command

CONTENT_TYPES = {
    ".json": "application/json",
    ".npy": "application/x-npy",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".csv": "text/csv",
}


#: The command's line in ``gpuctl --help``.
SUMMARY = "send a file to a model server's /invocations (e.g. one started by gpuctl serve)"


def register(subparsers: Any) -> None:
    parser = add_command(subparsers, "invoke", SUMMARY, __doc__)
    parser.add_argument("url", metavar="URL", help="server URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("file", metavar="FILE", help="request body file ('-' reads stdin)")
    parser.add_argument("--content-type", help="request Content-Type (default: from FILE's extension)")
    parser.add_argument("--accept", default="application/json", help="Accept (default: application/json)")
    parser.add_argument("-o", "--output", help="write the response body here instead of stdout")
    parser.add_argument("--timeout", type=float, default=65.0, help="seconds to wait (default: 65)")
    parser.set_defaults(func=run)


def invocations_url(url: str) -> str:
    """``http://host:8080`` -> ``http://host:8080/invocations``; other paths are kept."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"URL {url!r} is not allowed; allowed: http(s)://HOST[:PORT][/invocations]")
    path = parts.path if parts.path not in ("", "/") else "/invocations"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def run(args: argparse.Namespace) -> int:
    try:
        url = invocations_url(args.url)
    except ValueError as exc:
        print(f"gpuctl invoke: {exc}", file=sys.stderr)
        return 2
    if args.file == "-":
        body = sys.stdin.buffer.read()
        content_type = args.content_type
    else:
        path = Path(args.file)
        if not path.is_file():
            print(f"gpuctl invoke: FILE {args.file!r} does not exist", file=sys.stderr)
            return 2
        body = path.read_bytes()
        content_type = args.content_type or CONTENT_TYPES.get(path.suffix.lower())
    if not content_type:
        known = ", ".join(sorted(CONTENT_TYPES))
        print(
            f"gpuctl invoke: cannot tell the Content-Type of {args.file!r}; pass --content-type "
            f"(known extensions: {known})",
            file=sys.stderr,
        )
        return 2
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": content_type, "Accept": args.accept}
    )
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as resp:
            status, reason, headers, payload = resp.status, resp.reason, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        status, reason, headers, payload = err.code, err.reason, err.headers, err.read()
    except (urllib.error.URLError, OSError) as exc:
        print(f"gpuctl invoke: cannot reach {url}: {exc}", file=sys.stderr)
        return 1
    elapsed_ms = (time.perf_counter() - t0) * 1000.0
    summary = [f"{status} {reason}", f"{elapsed_ms:.1f} ms"]
    for header, label in (("X-Model-Latency-Ms", "model ms"), ("X-Batch-Size", "batch"), ("X-Queue-Ms", "queue ms")):
        if headers.get(header):
            summary.append(f"{label} {headers[header]}")
    print("  ".join(summary), file=sys.stderr)
    ok = 200 <= status < 300
    if args.output and ok:
        Path(args.output).write_bytes(payload)
    else:
        out = sys.stdout.buffer if ok else sys.stderr.buffer
        out.write(payload)
        if not payload.endswith(b"\n"):
            out.write(b"\n")
        out.flush()
    return 0 if ok else 1
