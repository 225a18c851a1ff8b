"""Render a :class:`~advisor.sweep.model.SweepTable` as text, Markdown, JSON or HTML (pure functions).

Every format carries the same rows (built once by :func:`rows`), the summary lines and the diff
that sets the recommended cell. The HTML page uses the diagnose report's page shell and draws its
plot here as inline SVG: throughput against batch size (or input size), one line per precision (and
accumulation), peak memory dashed on a second axis; every text from the script is escaped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from advisor._serde import to_jsonable
from advisor._terminal import printable
from advisor.report.html import card, diff_block, page
from advisor.report.svg import FONT, esc, nice_ticks
from advisor.sweep.model import Cell, CellResult, CellStatus, SweepStatus, SweepTable

HEADER = ("batch", "accum", "precision", "samples/s", "95% interval", "peak memory", "loss Δ", "TFLOP/s", "MFU", "status")
"""The columns of a sweep without an input-size axis; :func:`header` adds the size and elements/s with one."""
NUMERIC = frozenset({"samples/s", "95% interval", "peak memory", "loss Δ", "TFLOP/s", "MFU"})
NOT_MEASURED = "not measured"
NO_PEAK = "no peak known"
SERIES_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")


def _mib(n: int | None, kind: str | None) -> str:
    return "—" if not n else f"{n / 2**20:,.0f} MiB {kind or ''}".rstrip()


def _unit(t: SweepTable) -> str:
    units = {x.element_unit for x in t.results if x.element_unit}
    return units.pop() if len(units) == 1 else "element"


def header(t: SweepTable) -> tuple[str, ...]:
    """Return the table's columns: :data:`HEADER`, led by ``size`` and with voxels/s (pixels/s, tokens/s) with a size axis."""
    if t.size_option is None:
        return HEADER
    i = HEADER.index("samples/s") + 1
    return ("size", *HEADER[:i], f"{_unit(t)}s/s", *HEADER[i:])


def _elements(x: CellResult) -> str:
    if x.status != CellStatus.OK:
        return "—"
    return NOT_MEASURED if x.elements_per_s is None else _si(x.elements_per_s)


def _si(v: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:,.3g} {suffix}"
    return f"{v:,.3g}"


def _row(x: CellResult, recommended: Cell | None) -> list[str]:
    mark = " ★" if recommended is not None and x.cell == recommended else ""
    batch = str(x.cell.batch_size) if x.batch_size in (None, x.cell.batch_size) else f"{x.cell.batch_size} (ran {x.batch_size})"
    ok = x.status == CellStatus.OK
    rate = "—" if x.samples_per_s is None else f"{x.samples_per_s:,.1f}"
    ci = "—" if x.ci_low is None or x.ci_high is None else f"[{x.ci_low:,.1f}, {x.ci_high:,.1f}]"
    if ok and x.repeats < 2 and x.ci_low is None:
        ci = "1 run: none"
    loss = "—" if x.loss_delta is None else f"{x.loss_delta:.1%}"
    memory = _mib(x.peak_memory_bytes, x.memory_kind)
    if ok:  # NOTE: a cell that ran marks what it could not measure; "—" is for cells that did not run
        loss = "not recorded" if x.loss_delta is None else loss
        memory = NOT_MEASURED if not x.peak_memory_bytes else memory
    if not ok:
        tflops = mfu = "—"
    else:
        tflops = NOT_MEASURED if x.tflops is None else _tflops(x.tflops)
        mfu = (NOT_MEASURED if x.tflops is None else NO_PEAK) if x.mfu is None else _pct(x.mfu)
    status = str(x.status) if ok else f"{x.status}: {x.reason}"
    if ok and x.unfinished:
        status += f" (unfinished: {x.repeats} run{'s' if x.repeats != 1 else ''})"
    elif ok and x.reason:
        status += f" ({x.reason})"
    return [batch + mark, str(x.cell.accumulation), str(x.cell.precision), rate, ci, memory, loss, tflops, mfu,
            printable(status)]


def _tflops(v: float) -> str:
    # NOTE: three significant figures, never an exponent: a busy CPU cell does a tenth of a
    # GFLOP/s (0.0000937 TFLOP/s), a GPU hundreds of TFLOP/s.
    if v >= 100 or v <= 0 or not math.isfinite(v):
        return f"{v:,.0f}" if math.isfinite(v) else str(v)
    return f"{v:.{max(0, 2 - math.floor(math.log10(v)))}f}"


def _pct(frac: float) -> str:
    return f"{frac:.1%}" if frac >= 0.1 or frac <= 0 else f"{_tflops(100 * frac)}%"


def rows(t: SweepTable) -> list[list[str]]:
    """Return the table's rows, as every format shows them (the columns are :func:`header`'s)."""
    out = [_row(x, t.recommended) for x in t.results]
    if t.size_option is None:
        return out
    i = HEADER.index("samples/s") + 1
    return [[str(x.cell.size if x.cell.size is not None else t.script_size), *r[:i], _elements(x), *r[i:]]
            for x, r in zip(t.results, out, strict=True)]


def _cell_text(c: Cell) -> str:
    acc = f", accumulation {c.accumulation}" if c.accumulation != 1 else ""
    size = f"size {c.size}, " if c.size is not None else ""
    return f"{size}batch {c.batch_size}{acc}, {c.precision}"


def summary(t: SweepTable) -> list[str]:
    """Return the lines under the table: recommendation, reference, what TFLOP/s and MFU are, run count."""
    lines = []
    if t.status == SweepStatus.INTERRUPTED:
        done = sum(1 for x in t.results if x.status != CellStatus.NOT_RUN and not x.unfinished)
        lines.append(f"INTERRUPTED: {done} of {len(t.results)} cells finished; the rest are marked not_run or unfinished")
    if t.recommended is not None:
        lines.append(
            f"recommended: {_cell_text(t.recommended)} (★: the fastest finished cell that fits and keeps its "
            f"loss within its changes' tolerance, up to {t.loss_tolerance:.0%})"
        )
    elif t.size_option is not None and t.script_size is None:
        lines.append("recommended: none (the script's own input size is not known, and sizes are the task's, "
                     "not a speed setting to pick)")
    else:
        lines.append("recommended: none (no finished cell ran within memory with its loss in tolerance)")
    if t.reference is not None:
        lines.append(f"loss Δ is against {_cell_text(t.reference)} (the first steps, same seed)")
    lines.extend(_flops_lines(t))
    if t.size_option is not None:
        unit = _unit(t)
        what = (f"the script's {t.size_option} (its own: {t.script_size})" if t.script_size is not None
                else f"the {t.size_option}, every positive side")
        lines.append(
            f"size: {what}; {unit}s/s: {unit}s of a sample of the model's input (read from a counted step) times "
            "samples/s; loss Δ is against the first cell of the same size, and only cells of the script's own "
            "size are recommended"
        )
    if t.memory_budget_bytes:
        lines.append(f"memory budget: {t.memory_budget_bytes / 2**20:,.0f} MiB")
    lines.extend(printable(n) for n in t.notes)
    load = " → ".join(f"{v:.2f}" for v in t.load_avg)
    where = f" on {printable(t.device)}" if t.device else ""
    lines.append(f"{t.runs} runs in {_wall(t.wall_s)}{where}" + (f", load average {load}" if load else ""))
    return lines


def _wall(seconds: float | None) -> str:
    s = round(seconds or 0)
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def _flops_lines(t: SweepTable) -> list[str]:
    """Say what TFLOP/s and MFU are measured against, and why a cell has none."""
    ok = [x for x in t.results if x.status == CellStatus.OK]
    out = []
    if any(x.tflops is not None for x in ok):
        out.append("TFLOP/s: FLOPs of one optimizer step (torch FlopCounterMode over a warm-up step: matmuls "
                   "and convolutions) per sample, times samples/s")
    peaks = sorted({(str(x.cell.precision), x.peak_tflops, x.peak_source) for x in ok if x.peak_tflops})
    for precision, peak, source in peaks:
        what = {
            "measured": "the matmul rate advisor measured on this CPU (torch.mm; not a datasheet figure)",
            "measured_fp32": f"the fp32 matmul rate advisor measured on this CPU, faster than its {precision} "
                             "rate (torch.mm; not a datasheet figure)",
        }.get(str(source), "the device's datasheet peak")
        out.append(f"MFU in {precision}: against {_tflops(peak or 0.0)} TFLOP/s, {what}")
    whys: dict[str, list[str]] = {}
    for x in ok:
        if x.tflops is None or x.mfu is None:
            whys.setdefault(x.not_measured or "unknown", []).append(x.cell.label)
    for why, cells in whys.items():
        out.append(f"not measured / no peak for {', '.join(cells)}: {printable(why)}")
    return out


def _diff_lines(t: SweepTable) -> tuple[str, str]:
    """(heading, diff text) for the recommended cell."""
    if t.recommended is None:
        return "", ""
    if not t.diff:
        return f"the recommended cell ({_cell_text(t.recommended)}) is the script as it is: nothing to change", ""
    return f"the change that sets the recommended cell ({_cell_text(t.recommended)}):", t.diff


def render_text(t: SweepTable) -> str:
    """Render an aligned plain-text table, the summary lines and the recommended cell's diff."""
    cols = header(t)
    table = [list(cols)] + rows(t)
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
    out = [f"advisor sweep: {printable(t.script)} (script batch size {t.script_batch_size})"]
    for r in table:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    out.extend(summary(t))
    head, diff = _diff_lines(t)
    if head:
        out.append(head)
    text = "\n".join(out) + "\n"
    return text + printable(diff) if diff else text


def _md(s: str) -> str:
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(t: SweepTable) -> str:
    """Render a Markdown table (cells escaped), the summary as a list and the diff as a fenced block."""
    cols = header(t)
    out = [f"## advisor sweep: `{_md(t.script)}`", "", "| " + " | ".join(cols) + " |",
           "|" + "---|" * len(cols)]
    out.extend("| " + " | ".join(_md(c) for c in r) + " |" for r in rows(t))
    out.append("")
    out.extend(f"- {_md(line)}" for line in summary(t))
    head, diff = _diff_lines(t)
    if head:
        out.extend(["", _md(head)])
    if diff:
        fence = "~~~~" if "```" in diff else "```"
        out.extend(["", f"{fence}diff", diff.rstrip("\n"), fence])
    return "\n".join(out) + "\n"


def render_json(t: SweepTable) -> str:
    """Render the table as JSON."""
    return json.dumps(to_jsonable(t), indent=2, sort_keys=False) + "\n"


def render_html(t: SweepTable) -> str:
    """Render a self-contained page: cards, the throughput/memory plot, the table, notes and the diff."""
    best = next((x for x in t.results if x.cell == t.recommended), None)
    cards = [
        card("recommended", _cell_text(t.recommended) if t.recommended else "none",
             f"{best.samples_per_s:,.1f} samples/s" if best and best.samples_per_s else "", "primary"),
        card("cells", str(len(t.results)), f"{sum(1 for x in t.results if x.status == CellStatus.OK)} ran ok"),
        card("runs", str(t.runs), _wall(t.wall_s)),
        card("status", str(t.status), f"on {t.device}" if t.device else ""),
    ]
    cols = header(t)
    numeric = [h in NUMERIC or h.endswith("s/s") for h in cols]
    head = "".join(f'<th class="n">{esc(h)}</th>' if n else f"<th>{esc(h)}</th>" for h, n in zip(cols, numeric, strict=True))
    body_rows = []
    for r in rows(t):
        tds = "".join(f'<td class="n">{esc(c)}</td>' if n else f"<td>{esc(c)}</td>" for c, n in zip(r, numeric, strict=True))
        body_rows.append(f"<tr>{tds}</tr>")
    notes = "".join(f"<li>{esc(line)}</li>" for line in summary(t))
    dhead, diff = _diff_lines(t)
    parts = [
        f'<div class="cards">{"".join(cards)}</div>',
        f"<h2>Throughput and memory against {'input size' if _by_size(t) else 'batch size'}</h2>",
        f'<div class="panel">{plot(t)}</div>',
        "<h2>Cells</h2>",
        f'<div class="tw"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body_rows)}</tbody></table></div>',
        f'<ul class="notes">{notes}</ul>',
    ]
    if dhead:
        parts.append(f"<h2>Recommended change</h2><p>{esc(dhead)}</p>")
    if diff:
        parts.append(diff_block(diff))
    subtitle = " ".join([t.script, *t.args])
    return page("advisor sweep", subtitle, "\n".join(parts), to_jsonable(t),
                f"advisor sweep · schema {t.schema_version}", download_name="sweep.json")


def _by_size(t: SweepTable) -> bool:
    """Plot against the input size: a size axis over a single batch size."""
    return t.size_option is not None and len({x.cell.batch_size for x in t.results}) == 1


def _x(t: SweepTable, c: Cell) -> int:
    return (c.size if c.size is not None else t.script_size or 0) if _by_size(t) else c.batch_size


def _series(t: SweepTable) -> dict[str, list[CellResult]]:
    out: dict[str, list[CellResult]] = {}
    for x in t.results:
        name = str(x.cell.precision) + (f" ×{x.cell.accumulation} accumulation" if x.cell.accumulation != 1 else "")
        if x.cell.size is not None and not _by_size(t):
            name = f"size {x.cell.size}, {name}"
        out.setdefault(name, []).append(x)
    return out


def plot(t: SweepTable) -> str:
    """Inline SVG: samples/s per batch size (solid, left axis), peak memory (dashed, right axis).

    Batch sizes are evenly spaced (they usually double); cells that did not run ok are marked
    with a cross on the batch axis, their status in the tooltip.
    """
    series = _series(t)
    batches = sorted({_x(t, x.cell) for x in t.results})
    axis = "input size" if _by_size(t) else "batch size"
    if not batches:
        return ""
    rates = [x.samples_per_s for x in t.results if x.status == CellStatus.OK and x.samples_per_s]
    mems = [x.peak_memory_bytes / 2**20 for x in t.results if x.status == CellStatus.OK and x.peak_memory_bytes]
    W, H, left, right, top, bottom = 880, 340, 70, 80, 40, 50
    pw, ph = W - left - right, H - top - bottom
    rticks = nice_ticks(max(rates, default=1.0))
    mticks = nice_ticks(max(mems, default=1.0))
    rmax, mmax = rticks[-1] or 1.0, mticks[-1] or 1.0

    def x_of(b: int) -> float:
        return left + (pw / 2 if len(batches) == 1 else batches.index(b) / (len(batches) - 1) * pw)

    def y_of(v: float, vmax: float) -> float:
        return top + ph - v / vmax * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {W} {H}" width="100%" role="img" '
        f'aria-label="samples per second and peak memory against {axis}" style="{FONT}">'
    ]
    for v in rticks:
        y = y_of(v, rmax)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="11" text-anchor="end" class="muted">{_tick(v)}</text>')
    for v in mticks:
        y = y_of(v, mmax)
        out.append(f'<text x="{left + pw + 8}" y="{y + 4:.1f}" font-size="11" class="muted">{_tick(v)}</text>')
    for b in batches:
        out.append(f'<text x="{x_of(b):.1f}" y="{top + ph + 18}" font-size="11" text-anchor="middle" class="muted">{b}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{H - 8}" font-size="12" text-anchor="middle" class="fg">{axis}</text>'
               f'<text x="14" y="{top + ph / 2:.1f}" font-size="12" text-anchor="middle" class="fg" '
               f'transform="rotate(-90 14 {top + ph / 2:.1f})">samples/s (solid)</text>'
               f'<text x="{W - 12}" y="{top + ph / 2:.1f}" font-size="12" text-anchor="middle" class="fg" '
               f'transform="rotate(90 {W - 12} {top + ph / 2:.1f})">peak memory, MiB (dashed)</text>')
    lx = left
    for i, (name, cells) in enumerate(series.items()):
        colour = SERIES_COLORS[i % len(SERIES_COLORS)]
        ok = [x for x in cells if x.status == CellStatus.OK and x.samples_per_s]
        pts = [(x_of(_x(t, x.cell)), y_of(x.samples_per_s or 0.0, rmax), x) for x in ok]
        if len(pts) > 1:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                       + " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in pts) + '"/>')
        for px, py, x in pts:
            star = " (recommended)" if x.cell == t.recommended else ""
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{6 if star else 4}" fill="{colour}">'
                       f"<title>{esc(x.cell.label)}: {x.samples_per_s:,.1f} samples/s{esc(star)}</title></circle>")
        mpts = [(x_of(_x(t, x.cell)), y_of(x.peak_memory_bytes / 2**20, mmax), x) for x in ok if x.peak_memory_bytes]
        if len(mpts) > 1:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" stroke-dasharray="5 4" points="'
                       + " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in mpts) + '"/>')
        for px, py, x in mpts:
            out.append(f'<rect x="{px - 3:.1f}" y="{py - 3:.1f}" width="6" height="6" fill="none" stroke="{colour}">'
                       f"<title>{esc(x.cell.label)}: {_mib(x.peak_memory_bytes, x.memory_kind)}</title></rect>")
        for x in cells:
            if x.status != CellStatus.OK:
                px, py = x_of(_x(t, x.cell)), top + ph - 4 - 10 * (i % 3)
                out.append(f'<text x="{px:.1f}" y="{py:.1f}" font-size="13" text-anchor="middle" fill="{colour}">×'
                           f"<title>{esc(x.cell.label)}: {esc(x.status)} {esc(x.reason)}</title></text>")
        w = 26 + len(name) * 6.6
        out.append(f'<rect x="{lx:.1f}" y="12" width="11" height="11" rx="2" fill="{colour}"/>'
                   f'<text x="{lx + 16:.1f}" y="22" font-size="12" class="fg">{esc(name)}</text>')
        lx += w
    if any(x.status != CellStatus.OK for x in t.results):
        out.append(f'<text x="{lx:.1f}" y="22" font-size="12" class="muted">× did not run ok (hover)</text>')
    out.append("</svg>")
    return "".join(out)


def _tick(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 or v == int(v) else f"{v:g}"


RENDERERS: dict[str, Callable[[SweepTable], str]] = {
    "text": render_text, "markdown": render_markdown, "json": render_json, "html": render_html,
}
"""Format -> renderer."""
