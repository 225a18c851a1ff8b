"""``advisor compare A B``: before/after speedup, per-part deltas, findings gone and new; CI gates.

Groups of runs (``--before``/``--after``, repeatable) give an interval over runs; a single run a
side gives none, and the script's run-to-run noise decides what counts as a change.
"""

from __future__ import annotations

from pathlib import Path

import click

from advisor import api
from advisor._terminal import printable, printable_line
from advisor.cli.options import compare_format_option, compare_output_option
from advisor.errors import EXIT_FINDINGS, EXIT_OK, UsageError

COMPARE_EPILOG = """\b
BEFORE and AFTER are run directories (with report.json), report.json files, or traces.
Repeat runs with --before/--after for an interval over runs (2+ on a side); one run a
side gets no interval, and a change within the script's run-to-run noise (measured by a
diagnose's baseline runs, else a factor of 2) is "no measurable effect".
Runs of different scripts are refused (exit 2) unless --allow-mismatch; runs on different
kinds of device are compared without a speedup.
Examples:
  advisor compare advisor-runs/before advisor-runs/after
  advisor compare --before runs/a1 --before runs/a2 --after runs/b1 --after runs/b2
  advisor compare RUN RUN/kept            beside the diagnose's own interleaved trial
  advisor compare runs/a runs/b --format markdown >> pr-description.md
  advisor compare old/trace.pt.trace.json new/trace.pt.trace.json -o speedup.html
  advisor compare runs/main runs/pr --fail-on-regression 5     CI: exit 1 if 5% slower
"""


@click.command(epilog=COMPARE_EPILOG)
@click.argument("sides", nargs=-1, type=click.Path(path_type=Path), metavar="[BEFORE AFTER]")
@click.option(
    "--before", "more_before", multiple=True, type=click.Path(path_type=Path), metavar="RUN",
    help="A run before the change (repeatable; with BEFORE AFTER, added to BEFORE's group).",
)
@click.option(
    "--after", "more_after", multiple=True, type=click.Path(path_type=Path), metavar="RUN",
    help="A run after the change (repeatable; with BEFORE AFTER, added to AFTER's group).",
)
@compare_format_option
@compare_output_option
@click.option(
    "--fail-on-regression",
    "fail_on_regression",
    type=click.FloatRange(min=0, max=100),
    default=None,
    metavar="PCT",
    help="Exit 1 when AFTER is slower than BEFORE by more than PCT percent and beyond the run-to-run "
    "noise (for CI gates).",
)
@click.option(
    "--allow-mismatch",
    is_flag=True,
    default=False,
    help="Compare runs of different scripts anyway (no speedup is given for them).",
)
def compare(
    sides: tuple[Path, ...], more_before: tuple[Path, ...], more_after: tuple[Path, ...], fmt: str | None,
    output: Path | None, fail_on_regression: float | None, allow_mismatch: bool,
) -> int:
    """Compare runs or traces (BEFORE -> AFTER), one or a group a side."""
    if len(sides) not in (0, 2):
        raise UsageError(
            f"compare takes BEFORE and AFTER, or --before/--after runs; got {len(sides)} path(s) "
            "(repeat runs with --before RUN --after RUN)"
        )
    before, after = [*sides[:1], *more_before], [*sides[1:], *more_after]
    if not before or not after:
        raise UsageError("compare needs a run on each side: BEFORE AFTER, or --before RUN and --after RUN")
    comparison = api.compare_paths(before, after, allow_mismatch=allow_mismatch)
    written = api.write_comparison(comparison, fmt, output)
    if written is not None:
        click.echo(f"advisor: wrote {printable_line(str(written))}", err=True)
    for reason in comparison.not_comparable:
        click.echo(f"advisor: warning: not comparable: {printable(reason)}", err=True)
    if fail_on_regression is None:
        return EXIT_OK
    why = api.regression(comparison, fail_on_regression)
    if why is None:
        return EXIT_OK
    click.echo(f"advisor: regression: {printable(why)}", err=True)
    return EXIT_FINDINGS
