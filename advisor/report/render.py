"""Renderer registry: ``render(report, fmt)``, format guessing from ``-o``, and output writing.

Renderers are pure functions registered in :data:`RENDERERS` (pyinstrument's renderer
plug-ins, without its ``if/elif`` chain); the CLI commands only look formats up here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from advisor._files import write_text
from advisor._terminal import printable, printable_styled
from advisor.errors import UsageError
from advisor.report.console import WIDTH
from advisor.report.gate import gate
from advisor.report.model import Report
from advisor.rundir import refuse_managed_output

__all__ = ["FORMATS", "RENDERERS", "gate", "guess_format", "render", "resolve_format", "use_color", "write_output"]

FORMATS: tuple[str, ...] = ("text", "markdown", "html", "json", "sarif", "github")
"""Output formats, in ``--format`` order (``sarif`` and ``github`` hold the findings only, for CI)."""

EXTENSIONS: dict[str, str] = {
    ".txt": "text",
    ".text": "text",
    ".log": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".json": "json",
    ".sarif": "sarif",
}
"""``-o`` file extension -> format."""


def _render_text(report: Report, *, color: bool = False, width: int | None = None) -> str:
    from advisor.report.text import render_text

    return render_text(report, color=color, width=width or WIDTH)


def _render_markdown(report: Report, *, color: bool = False, width: int | None = None) -> str:
    from advisor.report.markdown import render_markdown

    return render_markdown(report)


def _render_html(report: Report, *, color: bool = False, width: int | None = None) -> str:
    from advisor.report.html import render_html

    return render_html(report)


def _render_json(report: Report, *, color: bool = False, width: int | None = None) -> str:
    return report.to_json()  # findings sorted by Report.to_dict


def _render_sarif(report: Report, *, color: bool = False, width: int | None = None) -> str:
    from advisor.report.sarif import render_sarif

    return render_sarif(report)


def _render_github(report: Report, *, color: bool = False, width: int | None = None) -> str:
    from advisor.report.github import render_github

    return render_github(report)


Renderer = Callable[..., str]
RENDERERS: dict[str, Renderer] = {
    "text": _render_text,
    "markdown": _render_markdown,
    "html": _render_html,
    "json": _render_json,
    "sarif": _render_sarif,
    "github": _render_github,
}
"""Format name -> ``renderer(report, *, color=False, width=None) -> str`` (only text uses the width)."""

READ_ON_TERMINALS: frozenset[str] = frozenset({"text", "markdown", "github"})
"""Formats read as they are on a terminal or in a CI log: every control character in them is
escaped here, once for all renderers (HTML, JSON and SARIF escape by their own syntax)."""


def render(report: Report, fmt: str, *, color: bool = False, width: int | None = None) -> str:
    """Render ``report`` in ``fmt``.

    Args:
        report: The report to render.
        fmt: One of :data:`FORMATS`.
        color: ANSI colours for ``text`` (only when writing to a terminal).
        width: Columns for ``text`` (:func:`advisor.report.console.terminal_width`); None is
            the fixed, deterministic width.

    Raises:
        UsageError: ``fmt`` is not a known format.
    """
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    out = renderer(report, color=color, width=width)
    if fmt in READ_ON_TERMINALS:
        # NOTE: the one door (advisor._terminal): a script's error message or an operator name
        # holding ESC/BEL (a terminal-title sequence) is shown, never obeyed (issue #30).
        out = printable_styled(out) if color else printable(out)
    return out


def guess_format(path: Path | str | None, default: str = "text") -> str:
    """Return the format implied by an output path's extension (``report.html`` -> ``html``).

    Args:
        path: The ``-o`` path, or None.
        default: Format when there is no path.

    Raises:
        UsageError: The extension is not one advisor knows (pass ``--format``).
    """
    if path is None or str(path) == "-":
        return default
    suffix = Path(path).suffix.lower()
    fmt = EXTENSIONS.get(suffix)
    if fmt is None:
        raise UsageError(
            f"cannot tell the format from {str(path)!r}; pass --format "
            f"({', '.join(FORMATS)}) or use .txt, .md, .html, .json or .sarif"
        )
    return fmt


def resolve_format(fmt: str | None, out: Path | None) -> str:
    """``--format`` when given, else the format of ``-o``'s extension, else ``text``."""
    return fmt if fmt else guess_format(out)


def use_color(fmt: str, out: Path | None, stream: TextIO | None = None) -> bool:
    """Colour only for text going to a terminal, never when ``NO_COLOR`` is set or ``TERM=dumb`` (no escapes at all)."""
    stream = stream if stream is not None else sys.stdout
    return (
        fmt == "text"
        and out is None
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"
        and hasattr(stream, "isatty")
        and stream.isatty()
    )


def write_output(text: str, fmt: str, out: Path | None, stream: TextIO | None = None) -> Path | None:
    """Write rendered output to ``out`` (atomically) or to stdout.

    Args:
        text: Rendered document.
        fmt: Its format (HTML is refused on a terminal).
        out: Destination file, or None / ``-`` for stdout.
        stream: Stdout replacement (tests).

    Returns:
        The path written, or None for stdout.

    Raises:
        UsageError: HTML would go to a terminal.
        InputError: The file cannot be written.
    """
    stream = stream if stream is not None else sys.stdout
    if (out is None or str(out) == "-") and stream is None:
        # NOTE: started with stdout closed (`advisor report RUN >&-`): Python sets sys.stdout to None
        raise UsageError("stdout is closed, so the report has nowhere to go; redirect it (> FILE) or pass -o FILE")
    if out is None or str(out) == "-":
        if fmt == "html" and hasattr(stream, "isatty") and stream.isatty():
            raise UsageError("HTML is not written to a terminal; pass -o report.html or pipe it")
        stream.write(text)
        stream.flush()
        return None
    out = Path(out)
    refuse_managed_output(out)
    write_text(out, text)
    return out
