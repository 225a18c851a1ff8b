"""``advisor report RUN_DIR``: render a saved run again, without re-running anything."""

from __future__ import annotations

from pathlib import Path

import click

from advisor.report.gate import FAIL_ON_CHOICES, FAIL_ON_DEFAULT, gate
from advisor.report.model import Report
from advisor.report.render import FORMATS, render, resolve_format, use_color, write_output

REPORT_EPILOG = """\b
Examples:
  advisor report advisor-runs/demo                      the terminal summary again
  advisor report advisor-runs/demo -o report.html       a self-contained page to share
  advisor report advisor-runs/demo --format markdown    paste into a pull request
  advisor report advisor-runs/demo --fail-on warning    exit 1 if warnings or errors remain
"""


@click.command(epilog=REPORT_EPILOG)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Output format [default: from -o's extension, else text].",
)
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    default=None,
    help="Write to this file instead of stdout (.txt, .md, .html, .json).",
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON_CHOICES),
    default=FAIL_ON_DEFAULT,
    show_default=True,
    help="Exit 1 when findings at or above this severity remain.",
)
def report(run_dir: Path, fmt: str | None, out: Path | None, fail_on: str) -> int:
    """Render a saved run (RUN_DIR/report.json) as text, Markdown, HTML or JSON."""
    doc = Report.load(run_dir)
    fmt = resolve_format(fmt, out)
    written = write_output(render(doc, fmt, color=use_color(fmt, out)), fmt, out)
    if written is not None:
        click.echo(f"advisor: wrote {written}", err=True)
    return gate(doc, fail_on)
