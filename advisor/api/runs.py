"""The backend of ``advisor runs``: the saved runs under a folder, as a table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.report.runs import RunSummary


def list_runs(directory: Path, limit: int | None = None) -> list[RunSummary]:
    """Return the saved runs under ``directory``, newest first (at most ``limit``)."""
    from advisor.report.runs import list_runs as _list_runs

    return _list_runs(directory, limit=limit)


def render_runs(rows: Sequence[RunSummary], directory: Path) -> str:
    """Render the runs table as text, coloured and as wide as the terminal when stdout is one."""
    import sys

    from advisor.report.console import terminal_width
    from advisor.report.render import use_color
    from advisor.report.runs_render import render_runs_text

    # NOTE: COLUMNS and the terminal's width are honoured whether or not colour is on (issue #32:
    # the table was drawn 158 columns wide under COLUMNS=80).
    return render_runs_text(rows, directory, color=use_color("text", None), width=terminal_width(sys.stdout))
