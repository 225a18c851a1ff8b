"""Trace repair: re-escape what torch writes into a trace without escaping it.

Two passes, both run only after the strict parse failed: raw control characters anywhere
(:func:`escape_controls`) and whole event names (:func:`_repair_names`).
"""

from __future__ import annotations

import json
import re
from typing import Any

_NAME_LINE = re.compile(rb'^(?P<lead>[ \t]*"name": ")(?P<value>.*)(?P<end>"[ \t]*,?[ \t\r]*)$')
_NAME_START = re.compile(rb'^[ \t]*"name": "')
_MAX_NAME_LINES = 20
# NOTE: JSON allows no raw byte below 0x20 anywhere but the whitespace tab, LF and CR between
# tokens, so every other one in a trace stands inside a string torch did not escape.
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def escape_controls(raw: Any) -> tuple[bytes, int]:
    r"""Escape the raw control characters in ``raw`` as JSON ``\u00XX``; return the bytes and how many.

    torch writes string fields as it finds them: a run directory named after a script whose name
    holds ESC or BEL (a terminal-title sequence) lands raw in the trace's ``traceName``, which is
    not on a ``"name":`` line of its own, and the strict parser called advisor's own trace
    truncated (issue #30). The escape keeps the characters; the renderers escape them again
    for the terminal.
    """
    count = 0

    def escape(m: re.Match[bytes]) -> bytes:
        nonlocal count
        count += 1
        return b"\\u%04x" % m.group(0)[0]

    return _CONTROL.sub(escape, bytes(raw)), count


def _repair_names(raw: Any) -> tuple[bytes, int]:
    """Re-escape event names that torch wrote unescaped; return the repaired bytes and how many.

    torch writes a ``python_function`` event's name (a file name and function) into the trace
    without escaping it: a ``"`` in a script's file name, a control character, or torch's own
    ``torch/profiler/_cupti_monitor.py(0): ""`` breaks the whole file's JSON. Kineto writes each
    ``"name": "..."`` on a line of its own, so such a line is recognised and its value (from the
    first quote to the last one on the line, joined with following lines when the name held a
    line break) is re-encoded as a JSON string. A value that already parses is left as it is.
    """
    lines = bytes(raw).split(b"\n")
    out: list[bytes] = []
    repaired = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not _NAME_START.match(line):
            out.append(line)
            continue
        joined, m = line, _NAME_LINE.match(line)
        extra = 0
        while m is None and extra < _MAX_NAME_LINES and i + extra < len(lines):
            joined += b"\n" + lines[i + extra]
            extra += 1
            m = _NAME_LINE.match(joined.replace(b"\n", b"\x00"))
        if m is None:
            out.append(line)
            continue
        value = joined[m.start("value") : m.end("value")]
        try:
            json.loads(b'"' + value + b'"')
            fixed = None
        except ValueError:
            fixed = json.dumps(value.decode("utf-8", "replace"), ensure_ascii=False).encode("utf-8")[1:-1]
        if fixed is None:
            out.append(line)
            continue
        i += extra
        repaired += 1
        out.append(joined[: m.start("value")] + fixed + joined[m.end("value") :].replace(b"\n", b""))
    return b"\n".join(out), repaired
