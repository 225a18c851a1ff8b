"""Render a :class:`~advisor.sweep.model.SweepTable` as text, Markdown or JSON (pure functions)."""

from __future__ import annotations

import json
from collections.abc import Callable

from advisor._serde import to_jsonable
from advisor._terminal import printable
from advisor.sweep.model import Cell, CellResult, CellStatus, SweepTable

HEADER = ("batch", "precision", "samples/s", "95% interval", "peak memory", "loss Δ", "TFLOP/s", "status")


def _mib(n: int | None, kind: str | None) -> str:
    return "—" if not n else f"{n / 2**20:,.0f} MiB {kind or ''}".rstrip()


def _row(x: CellResult, recommended: Cell | None) -> list[str]:
    mark = " ★" if recommended is not None and x.cell == recommended else ""
    batch = str(x.cell.batch_size) if x.batch_size in (None, x.cell.batch_size) else f"{x.cell.batch_size} (ran {x.batch_size})"
    rate = "—" if x.samples_per_s is None else f"{x.samples_per_s:,.1f}"
    ci = "—" if x.ci_low is None or x.ci_high is None else f"[{x.ci_low:,.1f}, {x.ci_high:,.1f}]"
    loss = "—" if x.loss_delta is None else f"{x.loss_delta:.1%}"
    tflops = "not measured" if x.tflops is None else f"{x.tflops:.2f}"
    status = str(x.status) if x.status == CellStatus.OK else f"{x.status}: {x.reason}"
    return [batch + mark, str(x.cell.precision), rate, ci, _mib(x.peak_memory_bytes, x.memory_kind), loss, tflops,
            printable(status)]


def _summary(t: SweepTable) -> list[str]:
    lines = []
    if t.recommended is not None:
        lines.append(
            f"recommended: batch {t.recommended.batch_size}, {t.recommended.precision} (★: the fastest cell that "
            f"fits and keeps its loss within its fixes' tolerance, up to {t.loss_tolerance:.0%})"
        )
    else:
        lines.append("recommended: none (no cell ran within memory with its loss in tolerance)")
    if t.reference is not None:
        lines.append(f"loss Δ is against batch {t.reference.batch_size}, {t.reference.precision} (the first steps, same seed)")
    if t.memory_budget_bytes:
        lines.append(f"memory budget: {t.memory_budget_bytes / 2**20:,.0f} MiB")
    lines.extend(printable(n) for n in t.notes)
    lines.append(f"{t.runs} runs in {t.wall_s or 0:.0f} s")
    return lines


def render_text(t: SweepTable) -> str:
    """Render an aligned plain-text table and the summary lines."""
    rows = [list(HEADER)] + [_row(x, t.recommended) for x in t.results]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    out = [f"advisor sweep: {printable(t.script)} (script batch size {t.script_batch_size})"]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out + _summary(t)) + "\n"


def render_markdown(t: SweepTable) -> str:
    """Render a Markdown table (cells escaped) and the summary as a list."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")

    out = [f"## advisor sweep: `{esc(t.script)}`", "", "| " + " | ".join(HEADER) + " |",
           "|" + "---|" * len(HEADER)]
    out.extend("| " + " | ".join(esc(c) for c in _row(x, t.recommended)) + " |" for x in t.results)
    out.append("")
    out.extend(f"- {esc(line)}" for line in _summary(t))
    return "\n".join(out) + "\n"


def render_json(t: SweepTable) -> str:
    """Render the table as JSON."""
    return json.dumps(to_jsonable(t), indent=2, sort_keys=False) + "\n"


RENDERERS: dict[str, Callable[[SweepTable], str]] = {
    "text": render_text, "markdown": render_markdown, "json": render_json,
}
"""Format -> renderer."""
