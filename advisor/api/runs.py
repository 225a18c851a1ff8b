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
    import shutil

    from advisor.report.render import use_color
    from advisor.report.runs_render import render_runs_text

    color = use_color("text", None)
    width = shutil.get_terminal_size().columns if color else 160
    return render_runs_text(rows, directory, color=color, width=width)
