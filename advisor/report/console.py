"""The rich console every terminal renderer draws on, and the one way untrusted text enters it.

Shared by the report (:mod:`advisor.report.text`), ``advisor compare`` and ``advisor runs``, so
their output has the same fixed width and the same escaping.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

from rich.console import Console
from rich.text import Text

from advisor._terminal import printable

WIDTH = 100
"""Fixed render width for deterministic output."""


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


def safe_text(value: Any, style: str = "") -> Text:
    """Untrusted text as a rich Text (never interpreted as markup, control characters escaped)."""
    return Text("" if value is None else printable(str(value)), style=style)

