"""Inline SVG plots for the HTML report, drawn here so the page needs nothing from the network.

Each function returns one ``<svg>`` element as a string. Every label that may come from a trace
or a script is escaped with :func:`esc`; numbers are formatted here. Hover details use SVG
``<title>`` elements, which browsers show as tooltips without any script.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from advisor._num import median
from advisor.fixes.model import Trial
from advisor.report import style as s
from advisor.report.model import TIMELINE_LANES

FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"
MAX_BARS = 60
MAX_TIMELINE_EVENTS = 4000


def esc(value: Any) -> str:
    """Escape text for HTML/SVG content and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def nice_ticks(vmax: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``vmax`` (1-2-5 steps)."""
    if vmax <= 0 or not math.isfinite(vmax):
        return [0.0, 1.0]
    raw = vmax / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(vmax / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _tick_label(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 or v == int(v) else f"{v:g}"


def _svg_open(width: int, height: int, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{esc(label)}" style="{FONT}">'
    )


def _fit(text: str, px: float, char_px: float = 6.2) -> str:
    """Truncate ``text`` with an ellipsis to fit ``px`` pixels (None-safe, approximate)."""
    n = int(px // char_px)
    if n <= 1:
        return ""
    return text if len(text) <= n else text[: n - 1] + "…"


def legend(items: Sequence[tuple[str, str]], x: float, y: float, width: float) -> str:
    """Return a one- or multi-line legend of coloured squares and labels."""
    out = []
    cx, cy = x, y
    for label, colour in items:
        w = 18 + len(label) * 6.6 + 14
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 18
        out.append(
            f'<rect x="{cx:.1f}" y="{cy - 9:.1f}" width="11" height="11" rx="2" fill="{esc(colour)}"/>'
            f'<text x="{cx + 16:.1f}" y="{cy:.1f}" font-size="12" class="fg">{esc(label)}</text>'
        )
        cx += w
    return "".join(out)


def stacked_steps(steps: Sequence[dict[str, Any]], parts: Sequence[str]) -> str:
    """Stacked bars of each step's breakdown in milliseconds.

    Args:
        steps: ``Report.steps`` rows (rank, step, step_time_ms, ``<part>_ms``).
        parts: Breakdown parts to stack, bottom first.

    Returns:
        An ``<svg>`` element, or "" when there are no steps.
    """
    rows = sorted(steps, key=lambda r: (r.get("rank") or 0, r.get("step") or 0))
    if not rows:
        return ""
    multi_rank = len({r.get("rank") for r in rows}) > 1
    if len(rows) > MAX_BARS:  # evenly spaced sample keeps the shape without a wall of slivers
        idx = sorted({round(i * (len(rows) - 1) / (MAX_BARS - 1)) for i in range(MAX_BARS)})
        rows = [rows[i] for i in idx]
    used = [p for p in parts if any((s.finite(r.get(f"{p}_ms")) or 0) > 0 for r in rows)]
    totals = [sum(s.finite(r.get(f"{p}_ms")) or 0 for p in used) for r in rows]
    totals = [max(t, s.finite(r.get("step_time_ms")) or 0) for t, r in zip(totals, rows, strict=True)]
    ticks = nice_ticks(max(totals) if totals else 1)
    ymax = ticks[-1] or 1
    W, left, right, top, plot_h = 880, 56, 16, 14, 220
    n_leg_lines = 1 + int(sum(18 + len(s.part_label(p)) * 6.6 + 14 for p in used) // (W - left - right))
    H = top + plot_h + 40 + 18 * n_leg_lines + 6
    plot_w = W - left - right
    slot = plot_w / len(rows)
    bw = max(2.0, min(48.0, slot * 0.72))
    out = [_svg_open(W, H, "Step-time breakdown per step")]
    for t in ticks:
        y = top + plot_h - t / ymax * plot_h
        out.append(
            f'<line x1="{left}" x2="{W - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" class="muted">{_tick_label(t)}</text>'
        )
    out.append(
        f'<text x="14" y="{top + plot_h / 2:.1f}" font-size="11" class="muted" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.1f})" text-anchor="middle">ms per step</text>'
    )
    label_every = max(1, math.ceil(len(rows) / 20))
    for i, r in enumerate(rows):
        x = left + i * slot + (slot - bw) / 2
        y = top + plot_h
        step_label = f"r{r.get('rank')}·{r.get('step')}" if multi_rank else f"{r.get('step')}"
        for p in used:
            v = s.finite(r.get(f"{p}_ms")) or 0.0
            if v <= 0:
                continue
            h = v / ymax * plot_h
            y -= h
            tot = totals[i] or 1
            out.append(
                f'<rect x="{x:.1f}" y="{y:.2f}" width="{bw:.1f}" height="{h:.2f}" fill="{s.PART_COLORS.get(p, "#888")}">'
                f"<title>step {esc(step_label)} · {esc(s.part_label(p))}: {esc(s.ms(v))} ({esc(s.pct(v / tot))})</title></rect>"
            )
        if i % label_every == 0:
            out.append(
                f'<text x="{x + bw / 2:.1f}" y="{top + plot_h + 15}" font-size="11" text-anchor="middle" class="muted">{esc(step_label)}</text>'
            )
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 31}" font-size="11" text-anchor="middle" class="muted">'
        f"{'rank·step' if multi_rank else 'profiler step'}</text>"
    )
    out.append(legend([(s.part_label(p), s.PART_COLORS.get(p, "#888")) for p in used], left, top + plot_h + 52, plot_w))
    out.append("</svg>")
    return "".join(out)


def share_bar(breakdown: dict[str, float]) -> str:
    """One 100% bar of the mean breakdown, labelled inside where the segment is wide enough."""
    parts = [p for p in s.ordered_parts(breakdown) if (s.finite(breakdown.get(p)) or 0) > 0]
    if not parts:
        return ""
    W, H, left, right = 880, 44, 0, 0
    total = sum(s.finite(breakdown[p]) or 0 for p in parts) or 1
    out = [_svg_open(W, H, "Mean step-time breakdown")]
    x = float(left)
    plot_w = W - left - right
    for p in parts:
        frac = (s.finite(breakdown[p]) or 0) / total
        w = frac * plot_w
        out.append(
            f'<rect x="{x:.2f}" y="4" width="{w:.2f}" height="34" fill="{s.PART_COLORS.get(p, "#888")}">'
            f"<title>{esc(s.part_label(p))}: {esc(s.pct(breakdown[p]))}</title></rect>"
        )
        label = _fit(f"{s.part_label(p)} {s.pct(breakdown[p], 0)}", w - 8)
        if label:
            out.append(f'<text x="{x + 5:.1f}" y="26" font-size="12" fill="#1b1b1b">{esc(label)}</text>')
        x += w
    out.append("</svg>")
    return "".join(out)


def trials_plot(
    trials: Sequence[Trial], combined: Trial | None, baseline_label: str = "baseline", unit: str = "samples/s",
) -> str:
    """Before/after samples/s: each measured trial against its own baseline, with its confidence interval.

    Each trial is drawn against its own baseline run: a thin grey bar under its bar and a dashed
    mark (class ``baseline``) at the throughput of the runs it was paired with, so a ratio reads
    against the bar it was measured against. A ``baseline`` row (named ``baseline_label``) comes
    first only when all those runs measured the same throughput (one trial, or compare's
    before/after); otherwise there is no pooled baseline to draw. The interval is the trial's CI on the speedup applied to its own baseline, so the
    whisker is in samples/s. Trials without a measurement (skipped, failed) are listed, greyed, with no bar.

    A trial measured on top of another fix (``reason`` ``on top of X``, see
    :func:`advisor.report.style.trial_reference`) was compared with X's run, not the baseline:
    X gets its own grey reference row (its throughput in those repeats) and a dotted line, and
    the trials measured against it are drawn under it as ``+ fix``, so their speedups read
    against the bar they were measured against.
    """
    plain = [t for t in trials if s.trial_reference(t) is None]
    groups: dict[str, list[Trial]] = {}
    for t in trials:
        ref = s.trial_reference(t)
        if ref is not None:
            groups.setdefault(ref, []).append(t)
    if not trials and combined is None:
        return ""

    def baselines(ts: Sequence[Trial]) -> list[float]:
        return [b for t in ts if (b := s.finite(t.baseline_samples_per_s)) is not None]

    # NOTE: a baseline row only when every trial measured against the baseline saw the same
    # baseline throughput (one trial, or compare's before/after). Repeats run at different
    # times give different baselines; their median was one pooled bar and line that put a
    # 1.04x fix's bar left of "the" baseline (issue #20), so each trial carries its own instead.
    distinct = set(baselines([*plain, *([combined] if combined is not None else [])]))
    # (kind, label, trial, reference value); kind: baseline, reference, trial, on_top, combined
    rows: list[tuple[str, str, Trial | None, float | None]] = []
    if len(distinct) == 1:
        rows.append(("baseline", baseline_label, None, next(iter(distinct))))
    rows += [("trial", t.fix, t, None) for t in plain]
    for ref, ts in groups.items():
        rows.append(("reference", ref, None, median(baselines(ts))))
        rows += [("on_top", f"+ {t.fix}", t, None) for t in ts]
    if combined is not None:
        rows.append(("combined", f"combined: {combined.fix}", combined, None))
    values: list[float] = [v for _, _, _, v in rows if v is not None]
    for _, _, t, _ in rows:
        if t is None:
            continue
        b = s.finite(t.baseline_samples_per_s)
        for v in (t.samples_per_s, b, (b or 0) * (s.finite(t.ci_high) or 0)):
            fv = s.finite(v)
            if fv is not None:
                values.append(fv)
    if not values:
        return ""
    ticks = nice_ticks(max(values) * 1.02)
    xmax = ticks[-1] or 1
    W, left, right, top, row_h = 880, 210, 210, 26, 30
    H = top + row_h * len(rows) + 30
    plot_w = W - left - right
    label = "Samples per second before and after each fix"
    if groups:
        label += "; fixes under a reference row are compared with that reference, not the baseline"
    out = [_svg_open(W, H, label)]

    def xpos(v: float) -> float:
        return left + v / xmax * plot_w

    for t in ticks:
        x = xpos(t)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 6}" y2="{H - 26}" class="grid"/>'
            f'<text x="{x:.1f}" y="{H - 10}" font-size="11" text-anchor="middle" class="muted">{_tick_label(t)}</text>'
        )
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="14" font-size="11" text-anchor="middle" class="muted">{esc(unit)} (median; whisker = 95% CI)</text>')
    ref_lines: list[tuple[float, int, int]] = []  # (value, first row, last row) of each reference group
    for i, (kind, name, t, ref_value) in enumerate(rows):
        y = top + i * row_h
        bold = kind in ("baseline", "reference", "combined")
        weight = ' font-weight="600"' if bold else ""
        out.append(
            f'<text x="{left - 10}" y="{y + 18}" font-size="12" text-anchor="end" class="fg"{weight}>{esc(_fit(name, left - 16, 7.2 if bold else 6.2))}</text>'
        )
        if t is None:
            if ref_value is None:
                continue
            is_ref = kind == "reference"
            tip = (
                f"{name}: {s.rate(ref_value)} {unit}, measured in the same interleaved repeats as the "
                "fixes below, which are compared with it (not with the baseline)"
                if is_ref
                else f"baseline: {s.rate(ref_value)} {unit}"
            )
            # NOTE: the reference is a translucent, outlined bar so it never reads as one more
            # fix's result (a "no effect" bar is grey too).
            fill = 'fill="#8a8a8a" fill-opacity="0.25" stroke="#8a8a8a"' if is_ref else 'fill="#8a8a8a"'
            out.append(
                f'<rect x="{left}" y="{y + 6}" width="{xpos(ref_value) - left:.1f}" height="18" rx="2" {fill}>'
                f"<title>{esc(tip)}</title></rect>"
                f'<text x="{xpos(ref_value) + 6:.1f}" y="{y + 19}" font-size="12" class="fg">{esc(s.rate(ref_value))}</text>'
            )
            if is_ref:
                n = sum(1 for r in rows[i + 1 :] if r[0] == "on_top" and s.trial_reference(r[2]) == name)
                out.append(
                    f'<text x="{W - right + 8}" y="{y + 19}" font-size="12" class="muted">'
                    f"reference for the {'fix' if n == 1 else f'{n} fixes'} below</text>"
                )
                ref_lines.append((ref_value, i, i + n))
            continue
        v = s.finite(t.samples_per_s)
        colour = s.VERDICT_COLORS.get(t.verdict, "#888")
        if v is None:
            out.append(
                f'<text x="{left + 4}" y="{y + 19}" font-size="12" class="muted">'
                f"{esc(s.VERDICT_LABELS.get(t.verdict, t.verdict))}{': ' + esc(_fit(t.reason, plot_w)) if t.reason else ''}</text>"
            )
            continue
        against = s.trial_reference(t) or "baseline"
        tip = (
            f"{t.fix}: {s.rate(v)} {unit}, {s.times(t.speedup)} {s.trial_interval(t)} vs {against} "
            f"({s.VERDICT_LABELS.get(t.verdict, t.verdict)})"
        )
        out.append(
            f'<rect x="{left}" y="{y + 6}" width="{max(1.0, xpos(v) - left):.1f}" height="18" rx="2" fill="{colour}">'
            f"<title>{esc(tip)}</title></rect>"
        )
        b = s.finite(t.baseline_samples_per_s)
        if b is not None:
            # NOTE: each fix against its own baseline run (a thin grey bar and a dashed mark on
            # its row): the repeats ran at different times, and one pooled line put bars of a
            # 1.04x fix left of "the" baseline.
            bx = xpos(b)
            out.append(
                f'<rect x="{left}" y="{y + 25}" width="{max(1.0, bx - left):.1f}" height="4" rx="1" fill="#8a8a8a">'
                f"<title>{esc(against)} in the same repeats: {esc(s.rate(b))} {esc(unit)}</title></rect>"
                f'<line x1="{bx:.1f}" x2="{bx:.1f}" y1="{y + 3}" y2="{y + 29}" class="baseline"/>'
            )
        lo, hi = s.finite(t.ci_low), s.finite(t.ci_high)
        if b is not None and lo is not None and hi is not None:
            x1, x2 = xpos(b * lo), xpos(b * hi)
            out.append(
                f'<g class="ci"><line x1="{x1:.1f}" x2="{x2:.1f}" y1="{y + 15}" y2="{y + 15}"/>'
                f'<line x1="{x1:.1f}" x2="{x1:.1f}" y1="{y + 9}" y2="{y + 21}"/>'
                f'<line x1="{x2:.1f}" x2="{x2:.1f}" y1="{y + 9}" y2="{y + 21}"/></g>'
            )
        text = f"{s.times(t.speedup)} {s.trial_interval(t)} · {s.VERDICT_SHORT.get(t.verdict, t.verdict)}"
        out.append(f'<text x="{W - right + 8}" y="{y + 19}" font-size="12" class="fg">{esc(text)}</text>')
    for value, first, last in ref_lines:
        x = xpos(value)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + first * row_h + 2}" y2="{top + (last + 1) * row_h}" class="refline"/>'
        )
    out.append("</svg>")
    return "".join(out)


def timeline(events: Sequence[dict[str, Any]]) -> str:
    """Lanes of one step's events (data loading, CPU ops, GPU kernels, copies, syncs).

    Args:
        events: ``Report.timeline`` items: ``lane``, ``name``, ``start_us``, ``dur_us``.

    Returns:
        An ``<svg>`` element, or "" when there are no usable events.
    """
    evs = []
    for e in events:
        start, dur = s.finite(e.get("start_us")), s.finite(e.get("dur_us"))
        if start is None or dur is None or dur < 0:
            continue
        evs.append((str(e.get("lane") or "other"), str(e.get("name") or ""), start, dur))
    if not evs:
        return ""
    dropped = 0
    if len(evs) > MAX_TIMELINE_EVENTS:  # keep the longest: they are what a reader can see
        evs.sort(key=lambda e: -e[3])
        dropped = len(evs) - MAX_TIMELINE_EVENTS
        evs = evs[:MAX_TIMELINE_EVENTS]
    present = {e[0] for e in evs}
    lanes = [ln for ln in TIMELINE_LANES if ln in present] + sorted(present - set(TIMELINE_LANES))
    t0 = min(e[2] for e in evs)
    t1 = max(e[2] + e[3] for e in evs)
    span = (t1 - t0) or 1.0
    W, left, right, top, lane_h = 880, 110, 16, 8, 34
    H = top + lane_h * len(lanes) + 42
    plot_w = W - left - right
    out = [_svg_open(W, H, "Timeline of one step")]
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        out.append(
            f'<rect x="{left}" y="{y}" width="{plot_w}" height="{lane_h - 4}" class="lane"/>'
            f'<text x="{left - 8}" y="{y + lane_h / 2 + 2}" font-size="12" text-anchor="end" class="fg">{esc(s.lane_label(lane))}</text>'
        )
    lane_index = {ln: i for i, ln in enumerate(lanes)}
    for lane, name, start, dur in sorted(evs, key=lambda e: e[2]):
        i = lane_index[lane]
        x = left + (start - t0) / span * plot_w
        w = max(0.6, dur / span * plot_w)
        y = top + i * lane_h + 3
        colour = s.LANE_COLORS.get(lane, "#888")
        out.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{lane_h - 10}" rx="1.5" fill="{colour}" class="ev">'
            f"<title>{esc(name)} · {esc(s.ms(dur / 1000))} at +{esc(s.ms((start - t0) / 1000))}</title></rect>"
        )
        label = _fit(name, w - 6, 6.0)
        if label:
            out.append(f'<text x="{x + 3:.1f}" y="{y + lane_h / 2}" font-size="11" fill="#111">{esc(label)}</text>')
    ticks = nice_ticks(span / 1000)
    for t in ticks:
        if t * 1000 > span * 1.001:
            continue
        x = left + t * 1000 / span * plot_w
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{H - 30}" class="grid"/>'
            f'<text x="{x:.1f}" y="{H - 16}" font-size="11" text-anchor="middle" class="muted">{_tick_label(t)}</text>'
        )
    note = f" ({dropped} shortest events not drawn)" if dropped else ""
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{H - 2}" font-size="11" text-anchor="middle" class="muted">ms from the step start{esc(note)}</text>')
    out.append("</svg>")
    return "".join(out)


def bars_compare(rows: Sequence[tuple[str, float | None, float | None]], unit: str = "ms") -> str:
    """Paired horizontal bars (before grey, after blue) for compare reports, one row per label."""
    rows = [r for r in rows if (s.finite(r[1]) or 0) > 0 or (s.finite(r[2]) or 0) > 0]
    if not rows:
        return ""
    vmax = max(max(s.finite(a) or 0, s.finite(b) or 0) for _, a, b in rows)
    ticks = nice_ticks(vmax)
    xmax = ticks[-1] or 1
    W, left, right, top, row_h = 880, 170, 150, 24, 34
    H = top + row_h * len(rows) + 26
    plot_w = W - left - right
    out = [_svg_open(W, H, "Before and after per part")]
    out.append(
        f'<rect x="{left}" y="4" width="11" height="11" fill="#9a9a9a"/><text x="{left + 16}" y="14" font-size="12" class="fg">before</text>'
        f'<rect x="{left + 80}" y="4" width="11" height="11" fill="#4e79a7"/><text x="{left + 96}" y="14" font-size="12" class="fg">after</text>'
    )
    for t in ticks:
        x = left + t / xmax * plot_w
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{H - 22}" class="grid"/>'
            f'<text x="{x:.1f}" y="{H - 8}" font-size="11" text-anchor="middle" class="muted">{_tick_label(t)}</text>'
        )
    for i, (label, a, b) in enumerate(rows):
        y = top + i * row_h
        out.append(f'<text x="{left - 10}" y="{y + 19}" font-size="12" text-anchor="end" class="fg">{esc(_fit(label, left - 14))}</text>')
        for j, (v, colour) in enumerate(((a, "#9a9a9a"), (b, "#4e79a7"))):
            fv = s.finite(v)
            if fv is None:
                continue
            out.append(
                f'<rect x="{left}" y="{y + 4 + j * 13}" width="{max(0.5, fv / xmax * plot_w):.1f}" height="12" rx="1.5" fill="{colour}">'
                f"<title>{esc(label)} {'after' if j else 'before'}: {fv:.3g} {esc(unit)}</title></rect>"
            )
        fa, fb = s.finite(a), s.finite(b)
        if fa is not None and fb is not None:
            delta = fb - fa
            text = (s.signed_ms(delta) if unit == "ms" else f"{delta:+.3g} {unit}")
            out.append(f'<text x="{W - right + 8}" y="{y + 19}" font-size="12" class="fg">{esc(text)}</text>')
    out.append("</svg>")
    return "".join(out)
