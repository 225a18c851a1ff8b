"""The ``advisor runs`` table: saved-run summaries as a rich table plus a note per partial run.

Every string that came from a run folder (names, scripts, reasons) is a :class:`rich.text.Text`,
never parsed as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.cells import cell_len
from rich.padding import Padding
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
    cells = [_cells(r) for r in rows]
    if _table_width(cells) <= width:
        console.print(_table(cells, directory))
    else:
        # NOTE: issue #32: at 80 columns the eight-column table folded names and scripts into
        # five-letter pieces. Too narrow for the table, each run gets a block: its name and
        # script whole on their own lines, the figures wrapped at spaces below.
        console.print(safe_text(f"Runs in {directory}", "bold"), overflow="ignore", crop=False)
        for c in cells:
            console.print()
            head = Text.assemble(safe_text(c.name, "bold"), "  ", Text(c.when), "  ", Text(c.status, style=c.status_style))
            console.print(head, overflow="ignore", crop=False)
            console.print(Text.assemble("  ", safe_text(c.script)), overflow="ignore", crop=False)
            body = Text(f"primary {c.primary} · kept {c.kept}" + (f" {c.speedup}" if c.speedup != "—" else "")
                        + f" · steps {c.steps}")
            console.print(Padding(body, (0, 0, 0, 2)))
    for r in rows:
        if r.reason:
            line = Text("  ")
            line.append(safe_text(r.name, "bold"))
            line.append(": ")
            line.append(safe_text(r.reason, "red" if r.status == STATUS_UNREADABLE else "dim"))
            console.print(line, overflow="fold")
    # rich pads every table line to the table's width; trailing blanks only get in the way of grep.
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


@dataclass(frozen=True)
class _RunCells:
    """One run's cells, formatted once for the table or the narrow layout."""

    name: str
    when: str
    script: str
    status: str
    status_style: str
    primary: str
    kept: str
    speedup: str
    steps: str


def _cells(r: RunSummary) -> _RunCells:
    primary = "—"
    if r.primary_category:
        primary = f"{r.primary_category} {s.pct(r.primary_share, 0)}"
        if r.primary_recoverable is not None:
            primary += f" (est. {s.pct(r.primary_recoverable, 0)} recoverable)"
    status_style = {
        STATUS_UNREADABLE: "red", RunStatus.CRASHED: "red", RunStatus.TIMEOUT: "yellow", STATUS_KILLED: "red",
        ReportStatus.INTERRUPTED: "yellow", ReportStatus.RUNNING: "cyan",
    }.get(r.status, "")
    return _RunCells(
        name=r.name,
        when=_short_time(r.when),
        script=display_path(r.script) if r.script else "—",
        status=s.run_status_label(r.status) + ("" if r.ranks <= 1 else f" ({r.ranks} ranks)"),
        status_style=status_style,
        primary=primary,
        kept=", ".join(r.kept_fixes) or "—",
        speedup=s.times(r.speedup) if r.kept_fixes else "—",
        steps="—" if r.steps_run is None else str(r.steps_run),
    )


_HEADERS = ("name", "when (UTC)", "script", "status", "primary", "kept fixes", "speedup", "steps")


def _table_width(cells: Sequence[_RunCells]) -> int:
    """Columns the table needs with names, scripts and figures whole (primary and kept wrap at spaces)."""
    widths = []
    for i, header in enumerate(_HEADERS):
        values = [_row_cells(c)[i] for c in cells]
        if header in ("primary", "kept fixes"):
            values = [w for v in values for w in v.split()] + [header.split()[0]]
        else:
            values.append(header)
        widths.append(max(map(cell_len, values)))
    # NOTE: SIMPLE_HEAD draws a blank rule and one cell of padding each side: 3 per column, +2 edges.
    return sum(widths) + 3 * len(widths) + 2


def _row_cells(c: _RunCells) -> tuple[str, ...]:
    """Return the cells in :data:`_HEADERS` order."""
    return (c.name, c.when, c.script, c.status, c.primary, c.kept, c.speedup, c.steps)


def _table(cells: Sequence[_RunCells], directory: Path) -> Table:
    table = Table(
        title=safe_text(f"Runs in {directory}", "bold"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        header_style="bold",
    )
    # NOTE: a wrapping column is never narrower than its longest word, so words wrap, never fold.
    words = {
        "primary": max((cell_len(w) for c in cells for w in c.primary.split()), default=1),
        "kept fixes": max((cell_len(w) for c in cells for w in c.kept.split()), default=1),
    }
    for header in _HEADERS:
        right = header in ("speedup", "steps")
        table.add_column(header, no_wrap=header not in words, overflow="fold", min_width=words.get(header),
                         justify="right" if right else "left")
    for c in cells:
        table.add_row(
            safe_text(c.name), Text(c.when), safe_text(c.script), Text(c.status, style=c.status_style),
            Text(c.primary), Text(c.kept), Text(c.speedup), Text(c.steps),
        )
    return table


def _short_time(when: str | None) -> str:
    """``2026-11-21T21:24:40+00:00`` -> ``2026-11-21 21:24``; ``—`` when unknown."""
    if not when:
        return "—"
    return when[:16].replace("T", " ")
