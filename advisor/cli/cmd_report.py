"""``advisor report RUN_DIR``: render a saved run again, without re-running anything."""

from __future__ import annotations

from pathlib import Path

import click

from advisor import api
from advisor.cli._common import emit_report
from advisor.cli.options import output_options

REPORT_EPILOG = """\b
Examples:
  advisor report advisor-runs/demo                      the terminal summary again
  advisor report advisor-runs/demo -o report.html       a self-contained page to share
  advisor report advisor-runs/demo --format markdown    paste into a pull request
  advisor report advisor-runs/demo --fail-on warning    exit 1 if warnings or errors remain
  advisor report advisor-runs/demo --diff | git apply   make the kept fixes permanent
"""


@click.command(epilog=REPORT_EPILOG)
@click.argument("run_dir", type=click.Path(path_type=Path))
@output_options
@click.option("--diff", "show_diff", is_flag=True,
              help="Print only the unified diff that makes the kept fixes permanent (also in RUN_DIR/fix.diff).")
def report(run_dir: Path, fmt: str | None, output: Path | None, fail_on: str, show_diff: bool) -> int:
    """Render a saved run (RUN_DIR/report.json) as text, Markdown, HTML or JSON."""
    saved = api.load_report(run_dir)
    if show_diff:
        # NOTE: the diff alone on stdout, so it pipes into `git apply`; the note goes to stderr
        if saved.diff.strip():
            click.echo(saved.diff, nl=not saved.diff.endswith("\n"))
        else:
            click.echo("advisor: no kept fix has a mechanical source change in this run", err=True)
        return 0
    return emit_report(saved, fmt, output, fail_on)
