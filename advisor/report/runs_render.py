"""The ``advisor runs`` table: saved-run summaries as a rich table plus a note per partial run.

Every string that came from a run folder (names, scripts, reasons) is a :class:`rich.text.Text`,
never parsed as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.table import Table
from rich.text import Text

from advisor._paths import display_path
from advisor.capture.model import RunStatus
from advisor.report import style as s
from advisor.report.console import make_console, safe_text
from advisor.report.model import ReportStatus
from advisor.report.runs import STATUS_KILLED, STATUS_UNREADABLE, RunSummary


def render_runs_text(rows: Sequence[RunSummary], directory: Path, color: bool = False, width: int = 160) -> str:
    """Render run summaries as a rich table plus one note line per partial or unreadable run.

    Args:
        rows: :class:`advisor.report.runs.RunSummary` rows, in display order.
        directory: The listed folder (shown in the title, so the names can be joined to it).
        color: Emit ANSI colours (terminal only).
        width: Render width in columns.

    Returns:
        The rendered text, ending in a newline.
    """
    console, buf = make_console(color, width=width)
    table = Table(
        title=safe_text(f"Runs in {directory}", "bold"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        header_style="bold",
    )
    table.add_column("name", overflow="fold")
    table.add_column("when (UTC)", no_wrap=True)
    table.add_column("script", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("primary", overflow="fold")
    table.add_column("kept fixes", overflow="fold")
    table.add_column("speedup", justify="right", no_wrap=True)
    table.add_column("steps", justify="right", no_wrap=True)
    for r in rows:
        primary = "—"
        if r.primary_category:
            primary = f"{r.primary_category} {s.pct(r.primary_share, 0)}"
            if r.primary_recoverable is not None:
                primary += f" (est. {s.pct(r.primary_recoverable, 0)} recoverable)"
        status_style = {
            STATUS_UNREADABLE: "red", RunStatus.CRASHED: "red", RunStatus.TIMEOUT: "yellow", STATUS_KILLED: "red",
            ReportStatus.INTERRUPTED: "yellow", ReportStatus.RUNNING: "cyan",
        }.get(r.status, "")
        status = r.status if r.ranks <= 1 else f"{r.status} ({r.ranks} ranks)"
        table.add_row(
            safe_text(r.name),
            Text(_short_time(r.when)),
            safe_text(display_path(r.script) if r.script else "—"),
            Text(status, style=status_style),
            Text(primary),
            Text(", ".join(r.kept_fixes) or "—"),
            Text(s.times(r.speedup) if r.kept_fixes else "—"),
            Text("—" if r.steps_measured is None else str(r.steps_measured)),
        )
    console.print(table)
    for r in rows:
        if r.reason:
            line = Text("  ")
            line.append(safe_text(r.name, "bold"))
            line.append(": ")
            line.append(safe_text(r.reason, "red" if r.status == STATUS_UNREADABLE else "dim"))
            console.print(line, overflow="fold")
    # rich pads every table line to the table's width; trailing blanks only get in the way of grep.
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


def _short_time(when: str | None) -> str:
    """``2026-11-21T21:24:40+00:00`` -> ``2026-11-21 21:24``; ``—`` when unknown."""
    if not when:
        return "—"
    return when[:16].replace("T", " ")
