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
"""


@click.command(epilog=REPORT_EPILOG)
@click.argument("run_dir", type=click.Path(path_type=Path))
@output_options
def report(run_dir: Path, fmt: str | None, output: Path | None, fail_on: str) -> int:
    """Render a saved run (RUN_DIR/report.json) as text, Markdown, HTML or JSON."""
    return emit_report(api.load_report(run_dir), fmt, output, fail_on)
