"""``advisor compare A B``: before/after speedup, per-part deltas, findings gone and new; CI gates."""

from __future__ import annotations

from pathlib import Path

import click

from advisor import api
from advisor._terminal import printable
from advisor.cli.options import compare_format_option, output_option
from advisor.errors import EXIT_FINDINGS, EXIT_OK

COMPARE_EPILOG = """\b
BEFORE and AFTER are run directories (with report.json), report.json files, or traces.
Runs of different scripts are refused (exit 2) unless --allow-mismatch; runs on different
kinds of device are compared without a speedup.
Examples:
  advisor compare advisor-runs/before advisor-runs/after
  advisor compare runs/a runs/b --format markdown >> pr-description.md
  advisor compare old/trace.pt.trace.json new/trace.pt.trace.json -o speedup.html
  advisor compare runs/main runs/pr --fail-on-regression 5     CI: exit 1 if 5% slower
"""


@click.command(epilog=COMPARE_EPILOG)
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@compare_format_option
@output_option
@click.option(
    "--fail-on-regression",
    "fail_on_regression",
    type=click.FloatRange(min=0, max=100),
    default=None,
    metavar="PCT",
    help="Exit 1 when AFTER is measurably slower than BEFORE by more than PCT percent (for CI gates).",
)
@click.option(
    "--allow-mismatch",
    is_flag=True,
    default=False,
    help="Compare runs of different scripts anyway (no speedup is given for them).",
)
def compare(
    before: Path, after: Path, fmt: str | None, output: Path | None, fail_on_regression: float | None, allow_mismatch: bool,
) -> int:
    """Compare two runs or traces (BEFORE -> AFTER)."""
    comparison = api.compare_paths(before, after, allow_mismatch=allow_mismatch)
    written = api.write_comparison(comparison, fmt, output)
    if written is not None:
        click.echo(f"advisor: wrote {written}", err=True)
    for reason in comparison.not_comparable:
        click.echo(f"advisor: warning: not comparable: {printable(reason)}", err=True)
    if fail_on_regression is None:
        return EXIT_OK
    why = api.regression(comparison, fail_on_regression)
    if why is None:
        return EXIT_OK
    click.echo(f"advisor: regression: {printable(why)}", err=True)
    return EXIT_FINDINGS
