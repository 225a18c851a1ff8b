"""The script's own last words: the last line it wrote to its stderr log, for a one-line error."""

from __future__ import annotations

import os
from pathlib import Path

_TAIL_BYTES = 64 * 1024
# Lines torch and its profiler write on their own (not the script's words).
_NOT_SCRIPT = ("[W", "[I", "USDT:", "STAGE:", "WARNING:")


def last_stderr_line(path: Path) -> str | None:
    """Return the last line the script wrote to its stderr log (torch's own warnings skipped)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL_BYTES))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        text = " ".join(line.split())
        if text and not text.startswith(_NOT_SCRIPT):
            return text if len(text) <= 300 else text[:299] + "…"
    return None
