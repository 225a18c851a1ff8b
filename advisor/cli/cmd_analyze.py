"""``advisor analyze PATH``: diagnose torch.profiler traces a user already has."""

from __future__ import annotations

from pathlib import Path

import click

from advisor.cli.options import output_options, rule_selection_options

EPILOG = """\b
Examples:
  advisor analyze worker0.pt.trace.json.gz
  advisor analyze runs/dlrm/                 # one trace per rank, side by side
  advisor analyze runs/job/ --jobs 8         # 8 rank files at a time, one process each
  advisor analyze node0/ node1/              # a multi-node job, each node's run directory
  advisor analyze trace.json --format json -o report.json
"""


@click.command(epilog=EPILOG)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Rank files analysed at a time, each in its own process  [default: the cores].",
)
@output_options
@rule_selection_options
def analyze(
    paths: tuple[Path, ...],
    jobs: int | None,
    fmt: str | None,
    output: Path | None,
    fail_on: str,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    preview: bool,
    no_inline_ignores: bool,
) -> int:
    """Diagnose a trace file (.json/.json.gz), a folder of per-rank traces, or a run directory.

    Several PATHS are the nodes of one multi-node job (each node's run directory), merged.
    """
    from advisor.api.early import head_start

    # NOTE: a large trace starts decoding on every core before the rest of advisor is imported
    # (about half a second: pandas, the metrics, the report); the analysis then reads it.
    head_start(paths)
    from advisor.api import analyze_report
    from advisor.cli._common import emit_report
    from advisor.cli.cmd_diagnose import engine_config

    # NOTE: the selection is read (config files, every rule parsed to check the codes) while the
    # rank workers run: before them it was a tenth of a second in series with --jobs N.
    report = analyze_report(
        paths, lambda: engine_config(select, extend_select, ignore, preview),
        inline_ignores=not no_inline_ignores, jobs=jobs,
    )
    return emit_report(report, fmt, output, fail_on)
