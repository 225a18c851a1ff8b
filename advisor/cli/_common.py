"""Glue shared by the commands that produce a report: engine config, rendering, exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from advisor.cli.options import split_codes
from advisor.report.model import Report


def engine_config(
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    preview: bool,
    start: Path | None = None,
) -> Any:
    """Layer ``[tool.advisor]`` from the closest pyproject.toml under the CLI's selection flags."""
    from advisor.config import resolve_engine_config

    return resolve_engine_config(
        select=split_codes(select) or None,
        extend_select=split_codes(extend_select),
        ignore=split_codes(ignore),
        preview=preview or None,
        start=start or Path.cwd(),
    )


def emit_report(report: Report, fmt: str | None, output: Path | None, fail_on: str) -> int:
    """Render ``report`` to stdout or ``output`` and return the exit code ``--fail-on`` implies."""
    from advisor.report.render import gate, render, resolve_format, use_color, write_output

    out = Path(output) if output is not None else None
    chosen = resolve_format(fmt, out)
    text = render(report, chosen, color=use_color(chosen, out))
    written = write_output(text, chosen, out)
    if written is not None:
        click.echo(f"advisor: wrote {written}", err=True)
    for warning in report.warnings:
        click.echo(f"advisor: warning: {warning}", err=True)
    return gate(report, fail_on)

