"""Apply a unified diff that advisor wrote to the source it was made from, in memory.

``fix.diff`` is made by :func:`difflib.unified_diff` from the script as it was diagnosed; each
hunk's context and removed lines must match the script as it is now, or the diff does not
describe it any more (the user edited it since). No fuzz, no offsets: a verification of another
source would not be one. ``# advisor:`` lines before the first ``---`` are remarks, not edits.
"""

from __future__ import annotations

import re

from advisor.errors import InputError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def diff_targets(diff: str) -> list[str]:
    """Return the files a unified diff changes (its ``+++ b/...`` paths), in order."""
    return list(dict.fromkeys(
        line[4:].split("\t")[0].removeprefix("b/") for line in diff.splitlines() if line.startswith("+++ ")
    ))


def apply_diff(source: str, diff: str) -> str:
    """Return ``source`` with the diff's hunks applied.

    Raises:
        InputError: the diff has no hunk, or a hunk does not match ``source``.
    """
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    at = 0  # next line of ``lines`` to copy
    hunks = 0
    body = diff.splitlines(keepends=True)
    i = 0
    while i < len(body):
        m = _HUNK.match(body[i])
        i += 1
        if m is None:
            continue
        hunks += 1
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        if start < at or start > len(lines):
            raise InputError(f"fix.diff's hunk at line {m.group(1)} does not fit the script as it is now; "
                             "run advisor diagnose again")
        out.extend(lines[at:start])
        at = start
        while i < len(body) and not body[i].startswith(("@@", "--- ", "+++ ")):
            tag, text = body[i][:1], body[i][1:]
            i += 1
            if tag == "\\":  # "\ No newline at end of file"
                continue
            if tag == "+":
                out.append(text)
                continue
            if tag not in (" ", "-") or at >= len(lines) or lines[at].rstrip("\r\n") != text.rstrip("\r\n"):
                raise InputError(f"the script changed since its diagnose (line {at + 1} is not what fix.diff "
                                 "expects); run advisor diagnose again")
            if tag == " ":
                out.append(lines[at])
            at += 1
    if not hunks:
        raise InputError("fix.diff holds no change to apply")
    out.extend(lines[at:])
    return "".join(out)
