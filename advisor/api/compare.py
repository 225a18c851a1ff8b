"""The backend of ``advisor compare``: two runs, reports or traces side by side, and the regression gate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from advisor.api.analysis import analyze_report
from advisor.errors import InputError, UsageError
from advisor.report.model import Report

if TYPE_CHECKING:
    from advisor.report.compare import Comparison


def load_side(path: str | Path) -> Report:
    """Return a Report for one side of ``advisor compare``.

    Args:
        path: A run directory holding ``report.json``, a ``report.json`` file, or a trace file
            or directory of traces (analysed with :func:`analyze_report`).

    Raises:
        InputError: The path does not exist or cannot be read as either.
    """
    from advisor.report.compare import looks_like_report

    p = Path(path)
    if not p.exists():
        raise InputError(f"{p} does not exist; pass a run directory, a report.json or a trace")
    if looks_like_report(p):
        return Report.load(p)
    return analyze_report(p)


def compare_paths(before: str | Path, after: str | Path, *, allow_mismatch: bool = False) -> Comparison:
    """Compare two runs, reports or traces (``before`` -> ``after``).

    Args:
        before: The run, report or trace before the change.
        after: The one after it.
        allow_mismatch: Compare runs of different scripts anyway (the comparison then gives no
            speedup and says why).

    Raises:
        UsageError: The two sides ran different scripts and ``allow_mismatch`` is not set.
    """
    from advisor.report.compare import compare_reports, script_mismatch

    a, b = load_side(before), load_side(after)
    mismatch = script_mismatch(a, b)
    if mismatch is not None and not allow_mismatch:
        raise UsageError(
            f"not comparing {before} with {after}: {mismatch}; compare two runs of the same script, "
            "or pass --allow-mismatch to see the comparison without a speedup"
        )
    return compare_reports(a, b)


def regression(comparison: Comparison, max_pct: float) -> str | None:
    """Return why ``comparison`` fails ``--fail-on-regression max_pct`` (None when it passes).

    Raises:
        UsageError: The comparison has no speedup to check.
    """
    from advisor.report.gate import regression as _regression

    return _regression(comparison, max_pct)


def write_comparison(comparison: Comparison, fmt: str | None, output: Path | None) -> Path | None:
    """Render a comparison and write it to ``output`` or stdout; return the file written, if any."""
    from advisor.report.compare_render import render_comparison
    from advisor.report.render import resolve_format, use_color, write_output

    chosen = resolve_format(fmt, output)
    return write_output(render_comparison(comparison, chosen, color=use_color(chosen, output)), chosen, output)
