"""Figures read off a :class:`Report` that several outputs print: step shares, step time, rate.

No rendering here: the view model (:mod:`advisor.report.view`), the terminal renderer and
``advisor compare`` all take these numbers from one place, so they agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from advisor.engine.model import Finding, severity_rank
from advisor.metrics.headline_scale import Clocks, rows_clocks, split_shares
from advisor.metrics.registry import BREAKDOWN_PARTS
from advisor.report import style as s
from advisor.report.model import Report


def part_shares(report: Report) -> dict[str, float]:
    """Share of the headline step per breakdown part, in display order.

    The profiled steps' shares (:func:`profiled_shares`); on a GPU run with timed steps whose
    profiled steps the profiler stretched, the device's parts keep their milliseconds and the
    host's share the rest (:mod:`advisor.metrics.headline_scale`), as the rules see them.
    """
    return split_shares(profiled_shares(report), step_clocks(report))


def step_clocks(report: Report) -> Clocks | None:
    """Return the report's clocks: its profiled steps' mean, their device parts' milliseconds, the timed headline."""
    return rows_clocks(report.steps, report.run.timed_step_times_ms)


def profiled_shares(report: Report) -> dict[str, float]:
    """Share of the profiled steps' time per breakdown part, in display order.

    From the per-step ``<part>_ms`` columns when the report has them (they add up to the step),
    else the summary's ``<part>_frac`` medians, else ``Report.breakdown`` as written.
    """
    totals: dict[str, float] = {}
    step_total = 0.0
    for row in report.steps:
        st = s.finite(row.get("step_time_ms"))
        if st is None:
            continue
        step_total += st
        for part in BREAKDOWN_PARTS:
            v = s.finite(row.get(f"{part}_ms"))
            if v is not None:
                totals[part] = totals.get(part, 0.0) + v
    if totals and step_total > 0:
        return {p: totals[p] / step_total for p in BREAKDOWN_PARTS if p in totals}
    fracs = {p: s.finite(report.summary.get(f"{p}_frac")) for p in BREAKDOWN_PARTS}
    if any(v is not None for v in fracs.values()):
        return {p: v for p, v in fracs.items() if v is not None}
    return {p: v for p in s.ordered_parts(report.breakdown) if (v := s.finite(report.breakdown.get(p))) is not None}


def mean_part_ms(report: Report) -> dict[str, float | None]:
    """Mean milliseconds per breakdown part over the report's steps (None when not recorded)."""
    out: dict[str, float | None] = {}
    for part in s.ordered_parts({**report.breakdown, **dict.fromkeys(BREAKDOWN_PARTS, 0.0)}):
        vals = [s.finite(row.get(f"{part}_ms")) for row in report.steps]
        nums = [v for v in vals if v is not None]
        out[part] = sum(nums) / len(nums) if nums else None
    return out


def median_step_ms(report: Report) -> float | None:
    """Median step time: the summary's value, else the median of the step rows."""
    v = s.finite(report.summary.get("step_time_ms"))
    if v is not None:
        return v
    vals = sorted(x for x in (s.finite(r.get("step_time_ms")) for r in report.steps) if x is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2


def throughput(report: Report) -> float | None:
    """Samples/s of the run (capture first, then the metric summary)."""
    v = s.finite(report.run.samples_per_s)
    return v if v is not None else s.finite(report.summary.get("samples_per_s"))


def severity_counts(findings: Iterable[Finding]) -> str:
    """``1 error · 2 warnings`` style count, highest severity first; ``none`` when empty."""
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    if not counts:
        return "none"
    parts = []
    for sev in sorted(counts, key=lambda x: -severity_rank(x)):
        n = counts[sev]
        parts.append(f"{n} {sev}{'s' if n != 1 and not sev.endswith('s') else ''}")
    return " · ".join(parts)


def device_text(report: Report) -> str:
    """Return the device the run used, from the capture environment or the trace summary."""
    env = report.run.environment or {}
    name = env.get("device_name") or ""
    dev = env.get("device") or ""
    if name:
        return f"CPU, {name}" if dev == "cpu" else str(name)
    if dev:
        return "CPU" if dev == "cpu" else str(dev)
    if report.device:
        return ", ".join(dict.fromkeys(report.device))
    flag = report.summary.get("has_gpu_flag")
    if flag is None:
        return "unknown device"
    return "GPU" if flag else "CPU"


def title_of(report: Report) -> str:
    """Return what the report is about, short: the script, else the trace or run folder name."""
    if report.run.script:
        return s.display_path(report.run.script)
    if report.source:
        return Path(report.source).name or report.source
    return "report"

