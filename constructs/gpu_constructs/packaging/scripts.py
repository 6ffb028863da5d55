"""The boot and start scripts of ``assets/`` as self-contained user data (fleets) or lifecycle content (notebooks).

No CDK runtime is loaded at import; token checks load it when a value is checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources

from gpu_constructs.errors import is_token

__all__ = ["render_script", "strip_comments"]

_INLINE_RE = re.compile(r'^\. "\$\{GPU_LIB:-[^\n]*gpu_lib\.sh\}"\n', re.MULTILINE)
#: The start of a shell here-document (``<<WORD``, ``<<-WORD``, ``<<'WORD'``): its delimiter is group 2.
HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


@cache
def _asset(name: str) -> str:
    return (resources.files("gpu_constructs") / "assets" / name).read_text()


def render_script(name: str, settings: Mapping[str, str]) -> str:
    """``assets/<name>`` as one self-contained script: settings exported first, ``gpu_lib.sh`` inlined.

    Values may be CDK tokens (they resolve at deploy); literal values must not contain a single quote.
    """
    text = _asset(name)
    library = _asset("gpu_lib.sh")
    if not _INLINE_RE.search(text):
        raise ValueError(f"assets/{name} does not source gpu_lib.sh the way render_script expects")
    text = _INLINE_RE.sub(lambda _m: library.replace("# shellcheck shell=bash\n", "", 1), text, count=1)
    shebang, _, body = text.partition("\n")
    body = strip_comments(body)
    lines = [shebang, f"# {name} from gpu_constructs (comments stripped: see the file). Settings:"]
    for key, value in settings.items():
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise ValueError(f"setting name {key!r} is not an upper-case shell variable name")
        if not is_token(value) and "'" in value:
            raise ValueError(f"setting {key}={value!r} contains a single quote")
        lines.append(f"export {key}='{value}'")
    return "\n".join(lines) + "\n" + body


def strip_comments(text: str) -> str:
    """Drop full-line comments and blank lines outside here-documents (user data is limited to 16 KB).

    Lines inside a here-document are kept verbatim; trailing comments after code are kept (a ``#`` may be
    part of a word there, so removing them needs a shell parser).
    """
    out: list[str] = []
    terminator: str | None = None
    for line in text.splitlines():
        if terminator is not None:
            out.append(line)
            if line.strip() == terminator:
                terminator = None
            continue
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#!")):
            continue
        out.append(line)
        match = HEREDOC_RE.search(line)
        if match:
            terminator = match.group(2)
    return "\n".join(out) + "\n"
