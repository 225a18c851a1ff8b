"""The rich console every terminal renderer draws on, and the one way untrusted text enters it.

Shared by the report (:mod:`advisor.report.text`), ``advisor compare`` and ``advisor runs``, so
their output has the same fixed width and the same escaping.
"""

from __future__ import annotations

import os
from io import StringIO
from typing import Any, TextIO

from rich._wrap import divide_line
from rich.console import Console
from rich.text import Text

from advisor._terminal import printable

WIDTH = 100
"""Render width for files, pipes and golden output (deterministic: no terminal to measure)."""
MIN_WIDTH = 60
"""Narrowest width rendered: below it the tables' numbers no longer fit whole beside their names."""
MAX_WIDTH = 160
"""Widest width rendered: wider lines are harder to read, not more informative."""


def terminal_width(stream: TextIO | None = None) -> int:
    """Return the width to render at: ``COLUMNS`` when set, else the terminal's, else :data:`WIDTH`.

    Issue #32: a fixed 100 columns wrapped every table into garbage in an 80-column terminal.
    ``COLUMNS`` wins as it does for ``ls`` and rich (a pipe into ``less`` can set it); a stream
    that is no terminal (a file, a pipe, a test) gets the deterministic :data:`WIDTH`. The result
    is clamped to [:data:`MIN_WIDTH`, :data:`MAX_WIDTH`].
    """
    width = WIDTH
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        width = int(env)
    elif stream is not None and hasattr(stream, "isatty") and stream.isatty():
        try:
            width = os.get_terminal_size(stream.fileno()).columns or WIDTH
        except (OSError, ValueError, AttributeError):  # NOTE: a pseudo-terminal without a size
            width = WIDTH
    return max(MIN_WIDTH, min(MAX_WIDTH, width))


def make_console(color: bool, width: int = WIDTH) -> tuple[Console, StringIO]:
    """Return a console that renders into a string buffer (with ANSI colours only when ``color``)."""
    buf = StringIO()
    console = Console(
        file=buf,
        width=width,
        color_system="truecolor" if color else None,
        force_terminal=color,
        force_jupyter=False,
        force_interactive=False,
        highlight=False,
        emoji=False,
        markup=False,
        legacy_windows=False,
        soft_wrap=False,
        # NOTE: rich reads COLUMNS/NO_COLOR from the environment; pinning everything here keeps
        # golden output identical on every machine.
        _environ={},
    )
    return console, buf


def unsplit(text: Text, width: int) -> Text:
    """Wrap ``text`` at spaces to ``width``; a word longer than the width stays whole on its own line.

    rich folds such a word (a path) across lines, where it can no longer be copied (issue #32);
    print the result with ``crop=False`` so the long line reaches the terminal whole.
    """
    out = Text(overflow="ignore", no_wrap=True, style=text.style)
    for i, line in enumerate(text.split("\n", allow_blank=True)):
        for j, part in enumerate(line.divide(divide_line(str(line), width, fold=False))):
            part.rstrip()
            if i or j:
                out.append("\n")
            out.append_text(part)
    return out


def safe_text(value: Any, style: str = "") -> Text:
    """Untrusted text as a rich Text (never interpreted as markup, control characters escaped)."""
    return Text("" if value is None else printable(str(value)), style=style)

