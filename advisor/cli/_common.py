"""Glue shared by the commands that produce a report: rendering and the exit code it implies.

The engine config is :func:`advisor.cli.cmd_diagnose.engine_config`: its keys are ``diagnose``'s options.
"""

from __future__ import annotations

from pathlib import Path

import click

from advisor import api
from advisor._terminal import printable_line
from advisor.api import Report
from advisor.errors import EXIT_FINDINGS


def emit_report(report: Report, fmt: str | None, output: Path | None, fail_on: str) -> int:
    """Render ``report`` to stdout or ``output`` and return the exit code ``--fail-on`` implies."""
    written = api.write_report(report, fmt, Path(output) if output is not None else None)
    if written is not None:
        click.echo(f"advisor: wrote {printable_line(str(written))}", err=True)
    for warning in report.warnings:
        click.echo(f"advisor: warning: {printable_line(warning)}", err=True)
    code = api.exit_code_for(report, fail_on)
    failing = api.failing_lines(report, fail_on) if code == EXIT_FINDINGS else ()
    if failing:
        # NOTE: a bare exit 1 leaves a CI user guessing; say which findings failed the gate.
        click.echo(f"advisor: --fail-on {fail_on}: {len(failing)} finding(s) at or above {fail_on}:", err=True)
        for line in failing:
            click.echo(f"  {line}", err=True)
    return code

