"""A report's tables as pandas DataFrames, for notebooks and scripts (``advisor.frames``).

Each function takes a :class:`~advisor.report.model.Report` (from ``advisor.diagnose``,
``advisor.analyze`` or ``advisor.load``) and returns a new frame; nothing is computed again,
the frames hold what the report saved. Column names are the report's JSON keys, with their unit
suffixes (``_ms``, ``_frac``, ``_bytes``), and vocabulary values are their words (``"safe"``,
``"improved"``), so a frame reads like ``report.json`` and compares across runs::

    import advisor
    report = advisor.load("advisor-runs/train-20260101-120000")
    advisor.frames.trials(report).sort_values("speedup", ascending=False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from advisor._serde import to_jsonable

if TYPE_CHECKING:
    from advisor.report.model import Report

__all__ = ["breakdown", "findings", "locations", "ranks", "recoverable", "steps", "summary", "tables", "trials"]


def findings(report: Report) -> pd.DataFrame:
    """One row per finding, most severe first.

    Columns: ``code``, ``name``, ``category``, ``severity``, ``message``, ``impact_frac`` (the
    modelled share of step time a fix could recover), ``fixes`` (fix ids, comma-separated),
    ``locations`` (``file:line``, semicolon-separated) and ``evidence`` (metric name -> value).
    """
    rows = []
    for f in report.to_dict()["findings"]:
        rows.append({
            "code": f["code"], "name": f["name"], "category": f["category"], "severity": f["severity"],
            "message": f["message"], "impact_frac": f["impact_frac"],
            "fixes": ", ".join(ref["id"] for ref in f["fixes"]),
            "locations": "; ".join(f"{loc['file']}:{loc['line']}" if loc["line"] else loc["file"] for loc in f["locations"]),
            "evidence": f["evidence"],
        })
    columns = ["code", "name", "category", "severity", "message", "impact_frac", "fixes", "locations", "evidence"]
    return pd.DataFrame(rows, columns=columns)


def trials(report: Report) -> pd.DataFrame:
    """One row per fix trial, then the combined trial (``combined`` True), as measured.

    Columns are the trial's fields (``fix``, ``safety``, ``speedup``, ``ci_low``, ``ci_high``,
    ``verdict``, ``samples_per_s``, ``baseline_samples_per_s``, ``loss_max_rel_diff``, ...)
    plus ``combined`` and ``kept`` (the fix is among those advisor kept). Each speedup is
    against the trial's own baseline (``reference`` names another run where it was measured on
    top of one).
    """
    kept = set(report.kept_fixes)
    rows = []
    everything = [*((t, False) for t in report.trials), *([(report.combined, True)] if report.combined else [])]
    for trial, combined in everything:
        row = to_jsonable(trial)
        ids = set(trial.fixes or (trial.fix,))
        row.update(combined=combined, kept=bool(kept) and (ids == kept if combined else ids <= kept))
        rows.append(row)
    return pd.DataFrame(rows)


def steps(report: Report) -> pd.DataFrame:
    """One row per measured step: ``rank``, ``step``, ``step_time_ms`` and each ``<part>_ms``."""
    return pd.DataFrame(list(report.steps))


def ranks(report: Report) -> pd.DataFrame:
    """One row per rank of a distributed run (empty for one process)."""
    return pd.DataFrame(list(report.ranks))


def breakdown(report: Report) -> pd.DataFrame:
    """Where the step time went (measured), largest first.

    Columns: ``category`` (a bottleneck category, or ``idle``/``other``; reports from before the
    categories name breakdown parts such as ``cpu_ops``) and ``step_frac`` (its mean share of the
    step).
    """
    frame = pd.DataFrame(list(report.breakdown.items()), columns=["category", "step_frac"]).astype({"step_frac": float})
    return frame.sort_values("step_frac", ascending=False, ignore_index=True)


def recoverable(report: Report) -> pd.DataFrame:
    """Return what the fixes could recover (modelled, an estimate), by bottleneck category, largest first.

    Columns: ``category`` and ``recoverable_frac`` (share of step time the findings of that
    category estimate a fix could recover; the primary bottleneck is the largest).
    """
    frame = pd.DataFrame(list(report.categories.items()), columns=["category", "recoverable_frac"])
    return frame.astype({"recoverable_frac": float}).sort_values(
        "recoverable_frac", ascending=False, ignore_index=True
    )


def locations(report: Report) -> pd.DataFrame:
    """Return the source locations the analysis found (``kind``, ``file``, ``line``, ``function``, ``count``, ``time_ms``, ``source``)."""
    columns = ["kind", "file", "line", "function", "count", "time_ms", "source"]
    return pd.DataFrame([to_jsonable(loc) for loc in report.locations], columns=columns)


def summary(report: Report) -> pd.Series:
    """Return the flat metric summary: metric name -> value (declared names, units in the name)."""
    return pd.Series(dict(report.summary), name="value", dtype=float)


def tables(report: Report) -> dict[str, pd.DataFrame]:
    """Return the GPU-time tables the trace allowed (``roofline``, ``modules``, ...), by name."""
    return {name: pd.DataFrame(list(rows)) for name, rows in report.tables.items()}
