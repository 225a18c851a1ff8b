r"""Text that is safe to print on a terminal: control characters made visible, never obeyed.

Names from traces (kernels, ops, Python functions), script paths, file names and the script's
own error messages reach the terminal in reports and messages. An escape sequence among them
could clear the screen, set the window title, or hide text; :func:`printable` turns every
control character into a visible ``\xNN`` (``\uNNNN`` for Unicode bidirectional controls)
instead. Line breaks and tabs are kept; :func:`printable_line` escapes them too, for what must
stay one line (an error, "run saved in PATH", a progress line).

This module is the one door for text that reaches a terminal or a CI log: the report formats
read there (text, Markdown, GitHub annotations) pass through it as a whole in
:func:`advisor.report.render.render`, and every line advisor itself says on stderr does too.
"""

from __future__ import annotations

import os
import re
from typing import Any

# C0 controls but tab and line feed, DEL, C1 controls, the Unicode bidirectional controls (which
# can make text display in another order than it is read: "Trojan Source"), and lone surrogates
# (a non-UTF-8 file name as Python decodes it: printing one raises UnicodeEncodeError).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """Return ``text`` with control characters (ESC, BEL, CR, bidi overrides...) escaped."""
    return _CONTROL.sub(_escape, text)


def printable_line(text: str) -> str:
    """Return ``text`` as one printable line: control characters escaped, line breaks and tabs too."""
    return printable(str(text)).replace("\n", "\\x0a").replace("\t", "\\x09")


# Colour and style (SGR: ESC [ params m) as rich writes it for a terminal.
_SGR = re.compile("(\x1b\\[[0-9;]*m)")


def printable_styled(text: str) -> str:
    """Return ``text`` escaped as :func:`printable` does, but keep its colour codes (SGR sequences).

    For the text report in colour: rich wrote the colours, around values already escaped
    (:func:`advisor.report.console.safe_text`); every other escape sequence is made visible.
    """
    return "".join(part if i % 2 else printable(part) for i, part in enumerate(_SGR.split(text)))


def silence_stream(stream: Any) -> None:
    """Point a closed output stream's file descriptor at /dev/null: later writes vanish instead of failing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # NOTE: no descriptor (a test's capture): nothing to point
        pass
