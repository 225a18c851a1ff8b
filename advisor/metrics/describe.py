"""A plain-text table of :class:`Metrics`: the breakdown and key metrics, ranks side by side.

Used as a fallback renderer by ``advisor analyze`` and by tests; the real reports live in
``advisor.report``.
"""

from __future__ import annotations

import math

from advisor.metrics.model import Metrics
from advisor.metrics.registry import BREAKDOWN_PARTS

KEY_METRICS: tuple[str, ...] = (
    "step_count",
    "dataloader_wait_ms",
    "kernel_count",
    "small_kernel_frac",
    "gpu_busy_frac",
    "gpu_max_gap_ms",
    "sync_count",
    "item_count",
    "h2d_bytes",
    "h2d_pageable_frac",
    "cpu_op_count",
    "cpu_op_median_us",
    "peak_memory_bytes",
    "memory_used_frac",
    "achieved_tflops",
    "mfu_frac",
    "comm_overlap_frac",
    "straggler_ratio",
    "comm_imbalance_ratio",
    "samples_per_s",
)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def format_metrics(metrics: Metrics) -> str:
    """Render the step breakdown (ms and %) and key metrics as plain text.

    With several ranks, one column per rank (breakdown medians per rank) next to the summary.
    """
    s = metrics.summary
    out = [f"source: {metrics.source}"]
    if metrics.device:
        out.append(f"device: {', '.join(metrics.device)}")
    ranks = metrics.ranks
    multi = len(ranks) > 1
    header = ["step breakdown", "ms", "%"] + ([f"rank {int(r)}" for r in ranks["rank"]] if multi else [])
    rows = []
    for part in ("step_time", *BREAKDOWN_PARTS):
        ms = s.get(f"{part}_ms")
        frac = s.get(f"{part}_frac") if part != "step_time" else 1.0 if ms else None
        row = [part, _fmt(ms), "-" if frac is None else f"{100 * frac:.1f}"]
        if multi:
            col = f"{part}_ms"
            row += [_fmt(float(v)) if col in ranks else "-" for v in (ranks[col] if col in ranks else [None] * len(ranks))]
        rows.append(row)
    out += ["", _table(header, rows), ""]
    key_rows = [[name, _fmt(s.get(name))] for name in KEY_METRICS if s.get(name) is not None]
    if key_rows:
        out.append(_table(["metric", "value"], key_rows))
    if metrics.locations:
        out += ["", "locations:"]
        for loc in metrics.locations[:10]:
            out.append(f"  {loc.kind:<12} {loc.file}:{loc.line} {loc.function}  x{loc.count:.3g}/step  {loc.time_ms:.3g} ms/step ({loc.source})")
    if metrics.notes:
        out += ["", "notes:"] + [f"  - {n}" for n in metrics.notes]
    return "\n".join(out) + "\n"
