"""``advisor runs [DIR]``: list the saved run directories, newest first, to pick two to compare.

The reading (:func:`advisor.api.list_runs`) and the table (:func:`advisor.api.render_runs`) are
the api's; this module only picks JSON or the table. Nothing is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from advisor import api

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
    rows = api.list_runs(directory, limit=limit)
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return 0
    if not rows:
        click.echo(f"No runs in {directory} yet; run `advisor diagnose SCRIPT` to make one.")
        return 0
    click.echo(api.render_runs(rows, directory), nl=False)
    return 0
