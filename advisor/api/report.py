"""The backend of ``advisor report``: load a saved report, render it, and the ``--fail-on`` gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.report.model import Report


def load_report(run_dir: str | Path) -> Report:
    """Return the report saved in a run directory (or a ``report.json`` file)."""
    return Report.load(Path(run_dir))


def write_report(report: Report, fmt: str | None, output: Path | None) -> Path | None:
    """Render ``report`` and write it to ``output``, or to stdout when ``output`` is None or ``-``.

    Args:
        report: The report to render.
        fmt: ``--format``; None takes the format from ``output``'s extension, else text.
        output: ``-o``.

    Returns:
        The file written, or None for stdout.
    """
    import sys

    from advisor.report.console import terminal_width
    from advisor.report.render import render, resolve_format, use_color, write_output

    chosen = resolve_format(fmt, output)
    # NOTE: a file gets the fixed width; stdout gets the terminal's (or COLUMNS) so it never wraps.
    width = terminal_width(sys.stdout) if output is None or str(output) == "-" else None
    return write_output(render(report, chosen, color=use_color(chosen, output), width=width), chosen, output)


def exit_code_for(report: Report, fail_on: str) -> int:
    """Return the exit code ``--fail-on`` gives ``report`` (1 when findings at or above it remain)."""
    from advisor.report.gate import gate

    return gate(report, fail_on)


def failing_lines(report: Report, fail_on: str) -> tuple[str, ...]:
    """Return one line per finding that makes ``--fail-on`` fail (code, severity, message, where)."""
    from advisor.report.gate import failing_lines as _failing_lines

    return _failing_lines(report, fail_on)


def report_schema() -> dict[str, Any]:
    """Return the JSON Schema of ``report.json``, generated from the report model (draft 2020-12)."""
    from advisor.report.schema import report_schema as schema

    return schema()
