"""``advisor runs [DIR]``: list the saved run directories, newest first, to pick two to compare.

The reading is :func:`advisor.report.runs.list_runs`; this module only renders its rows as a
rich table or JSON. Every string that came from a run folder (names, scripts, reasons) is a
:class:`rich.text.Text`, never parsed as markup. Nothing is written.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from advisor._paths import display_path

if TYPE_CHECKING:
    from advisor.report.runs import RunSummary

RUNS_EPILOG = """\b
Examples:
  advisor runs                          the runs under ./advisor-runs, newest first
  advisor runs out/ --limit 5           the five newest runs under out/
  advisor runs --format json            one object per run, for scripts
  advisor compare advisor-runs/A advisor-runs/B    then compare two of them
"""

DEFAULT_DIR = Path("advisor-runs")
"""Where ``advisor diagnose`` writes runs by default."""


@click.command(epilog=RUNS_EPILOG)
@click.argument("directory", metavar="[DIR]", required=False, type=click.Path(path_type=Path), default=DEFAULT_DIR)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: a table; json: a list of objects with stable keys.",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N", help="Show only the N newest runs.")
def runs(directory: Path, fmt: str, limit: int | None) -> int:
    """List the saved runs (newest first): status, bottleneck, kept fixes and their speedup."""
    from advisor.report.runs import list_runs

    rows = list_runs(directory, limit=limit)
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return 0
    if not rows:
        click.echo(f"No runs in {directory} yet; run `advisor diagnose SCRIPT` to make one.")
        return 0
    from advisor.report.render import use_color

    color = use_color("text", None)
    width = shutil.get_terminal_size().columns if color else 160
    click.echo(render_runs_text(rows, directory, color=color, width=width), nl=False)
    return 0


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
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from advisor.report import style as s
    from advisor.report.runs import STATUS_UNREADABLE
    from advisor.report.text import make_console

    console, buf = make_console(color, width=width)
    table = Table(
        title=Text(f"Runs in {directory}", style="bold"),
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
        status_style = {STATUS_UNREADABLE: "red", "crashed": "red", "timeout": "yellow"}.get(r.status, "")
        status = r.status if r.ranks <= 1 else f"{r.status} ({r.ranks} ranks)"
        table.add_row(
            Text(r.name),
            Text(_short_time(r.when)),
            Text(display_path(r.script) if r.script else "—"),
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
            line.append(r.name, style="bold")
            line.append(": ")
            line.append(r.reason, style="red" if r.status == STATUS_UNREADABLE else "dim")
            console.print(line, overflow="fold")
    # rich pads every table line to the table's width; trailing blanks only get in the way of grep.
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


def _short_time(when: str | None) -> str:
    """``2026-11-21T21:24:40+00:00`` -> ``2026-11-21 21:24``; ``—`` when unknown."""
    if not when:
        return "—"
    return when[:16].replace("T", " ")
