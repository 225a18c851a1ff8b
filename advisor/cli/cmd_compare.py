"""``advisor compare A B``: before/after speedup, per-part deltas, findings gone and new."""

from __future__ import annotations

from pathlib import Path

import click

from advisor import api
from advisor.cli.options import format_option, output_option

COMPARE_EPILOG = """\b
BEFORE and AFTER are run directories (with report.json), report.json files, or traces.
Examples:
  advisor compare advisor-runs/before advisor-runs/after
  advisor compare runs/a runs/b --format markdown >> pr-description.md
  advisor compare old/trace.pt.trace.json new/trace.pt.trace.json -o speedup.html
"""


@click.command(epilog=COMPARE_EPILOG)
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@format_option
@output_option
def compare(before: Path, after: Path, fmt: str | None, output: Path | None) -> int:
    """Compare two runs or traces (BEFORE -> AFTER)."""
    written = api.write_comparison(api.compare_paths(before, after), fmt, output)
    if written is not None:
        click.echo(f"advisor: wrote {written}", err=True)
    return 0
