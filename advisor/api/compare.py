"""The backend of ``advisor compare``: two runs, reports or traces side by side, and the regression gate."""

from __future__ import annotations

from collections.abc import Sequence
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


def compare_paths(
    before: str | Path | Sequence[str | Path], after: str | Path | Sequence[str | Path], *, allow_mismatch: bool = False,
) -> Comparison:
    """Compare runs, reports or traces (``before`` -> ``after``), one or a group of them a side.

    Args:
        before: The run, report or trace before the change, or several runs of it (the
            interval is then over runs).
        after: The one(s) after it.
        allow_mismatch: Compare runs of different scripts anyway (the comparison then gives no
            speedup and says why).

    Raises:
        UsageError: The sides ran different scripts and ``allow_mismatch`` is not set.
    """
    from advisor.report.compare import compare_groups, script_mismatch
    from advisor.report.compare_stats import kept_trial, run_dir_noise

    paths_a = [before] if isinstance(before, (str, Path)) else list(before)
    paths_b = [after] if isinstance(after, (str, Path)) else list(after)
    a, b = [load_side(p) for p in paths_a], [load_side(p) for p in paths_b]
    for path, side in zip((*paths_a[1:], *paths_b), (*a[1:], *b), strict=True):
        mismatch = script_mismatch(a[0], side)
        if mismatch is not None and not allow_mismatch:
            raise UsageError(
                f"not comparing {paths_a[0]} with {path}: {mismatch}; compare runs of the same script, "
                "or pass --allow-mismatch to see the comparison without a speedup"
            )
    # NOTE: a diagnose's baseline trial runs are that script's run-to-run noise, whichever side
    # holds them (RUN/kept reads its parent's); the trial figure only for a single RUN/kept.
    noise = next((n for n in (run_dir_noise(p) for p in (*paths_a, *paths_b)) if n is not None), None)
    trial = kept_trial(paths_b[0]) if len(paths_b) == 1 else None
    return compare_groups(a, b, noise=noise, trial=trial)


def regression(comparison: Comparison, max_pct: float) -> str | None:
    """Return why ``comparison`` fails ``--fail-on-regression max_pct`` (None when it passes).

    Raises:
        UsageError: The comparison has no speedup to check.
    """
    from advisor.report.gate import regression as _regression

    return _regression(comparison, max_pct)


def write_comparison(comparison: Comparison, fmt: str | None, output: Path | None) -> Path | None:
    """Render a comparison and write it to ``output`` or stdout; return the file written, if any."""
    import sys

    from advisor.report.compare_render import render_comparison
    from advisor.report.console import terminal_width
    from advisor.report.render import resolve_format, use_color, write_output

    chosen = resolve_format(fmt, output)
    width = terminal_width(sys.stdout) if output is None or str(output) == "-" else None
    text = render_comparison(comparison, chosen, color=use_color(chosen, output), width=width)
    return write_output(text, chosen, output)
