"""Renderers for a :class:`~advisor.report.compare.Comparison`: text, Markdown, HTML and JSON.

Same rules as the report renderers: a registry of pure functions, deterministic plain text,
and every string from a trace or script escaped for its format.
"""

from __future__ import annotations

from collections.abc import Callable

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from advisor.errors import UsageError
from advisor.fixes.model import Trial
from advisor.metrics.model import StepBasis
from advisor.report import style as s
from advisor.report import svg
from advisor.report.compare import Comparison
from advisor.report.compare_stats import band_text
from advisor.report.console import WIDTH, make_console, safe_text
from advisor.report.html import card, page
from advisor.report.markdown import md_code, md_table, md_text
from advisor.report.svg import esc

_VERDICT_KEYS = {"faster": "improved", "slower": "slower", "no measurable effect": "no_effect", "not measurable": "undecided"}
METRIC_LABELS = {"samples_per_s": "samples/s", "step_time_ms": "median step time"}
OPS_TITLE = "Operators that changed most (host self time per step)"
OPS_NOTE = "— : not among that side's operators with the most self time (less than its table's last row, or not run)."


def _value(metric: str | None, v: float | None) -> str:
    return s.ms(v) if metric == "step_time_ms" else s.rate(v)


def parts_caption(cmp: Comparison) -> str:
    """Say what the per-part table's shares and milliseconds are of."""
    if cmp.parts_basis == StepBasis.TIMED:
        return ("shares and ms of each run's timed median step, the GPU's parts at their profiled ms: "
                "as each run's own breakdown shows them")
    return "mean per step"


def headline(cmp: Comparison) -> str:
    """One line: the speedup and its basis, or why there is none."""
    if cmp.speedup is None:
        if cmp.verdict == "not comparable":
            return "no speedup: the two sides are not comparable (see below)"
        return "no speedup: not enough data on both sides"
    ci = s.ci(cmp.ci_low, cmp.ci_high)
    basis = f"{_value(cmp.metric, cmp.before_value)} → {_value(cmp.metric, cmp.after_value)} {METRIC_LABELS.get(cmp.metric or '', '')}"
    return f"{s.times(cmp.speedup)} {ci} {cmp.verdict} ({basis.strip()})".replace("  ", " ")


def evidence_rows(cmp: Comparison) -> list[tuple[str, str]]:
    """Rows under the speedup: what it rests on (runs, noise band) and the diagnose's own trial."""
    rows = []
    if len(cmp.before_runs) > 1 or len(cmp.after_runs) > 1:
        rows.append(("Runs", f"{len(cmp.before_runs)} before · {len(cmp.after_runs)} after (interval over runs)"))
    elif cmp.noise_band is not None:
        rows.append(("Noise", f"one run a side, no interval: changes within {band_text(cmp.noise_band)} are noise"))
    if cmp.contended:
        rows.append(("Busy machine", f"{' and '.join(cmp.contended)} measured while other work held the cores"))
    t = cmp.trial
    if t is not None:
        verdict = s.VERDICT_LABELS.get(str(t.verdict), str(t.verdict))
        rows.append(("Trial", f"{s.times(t.speedup)} {s.ci(t.ci_low, t.ci_high)} {verdict} ({t.fix}, "
                              f"{t.repeats} interleaved pairs in the diagnose)".replace("  ", " ")))
    return rows


# --- text ---------------------------------------------------------------------------------


def render_comparison_text(cmp: Comparison, *, color: bool = False, width: int | None = None) -> str:
    """Return the comparison for a terminal (deterministic without colour) at ``width`` columns."""
    width = width or WIDTH
    console, buf = make_console(color, width)
    # NOTE: below the default width the tables drop their cell padding and their headers wrap,
    # so numbers are never cropped off an 80-column terminal (issue #32)
    wide = width >= WIDTH
    pad, num = ((0, 1), {"no_wrap": True}) if wide else ((0, 0), {"min_width": 8})
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("Before", Text.assemble(safe_text(cmp.before), safe_text(f"  ({cmp.before_device})")))
    grid.add_row("After", Text.assemble(safe_text(cmp.after), safe_text(f"  ({cmp.after_device})")))
    style = {"faster": "bold green", "slower": "bold red", "not comparable": "bold yellow"}.get(cmp.verdict, "bold")
    grid.add_row("Speedup", safe_text(headline(cmp), style))
    for label, text in evidence_rows(cmp):
        grid.add_row(label, safe_text(text))
    if cmp.step_time_before_ms is not None or cmp.step_time_after_ms is not None:
        grid.add_row("Step time", safe_text(f"{s.ms(cmp.step_time_before_ms)} → {s.ms(cmp.step_time_after_ms)} (median)"))
    grid.add_row(
        "Findings",
        safe_text(f"{len(cmp.disappeared)} gone · {len(cmp.appeared)} new · {len(cmp.persisting)} still there"),
    )
    console.print(Panel(grid, title="advisor compare", title_align="left", box=box.ROUNDED, padding=(0, 1)))
    sections: list[RenderableType] = []
    if cmp.not_comparable:
        body = Text()
        for i, item in enumerate(cmp.not_comparable):
            body.append("• ")
            body.append(safe_text(item))
            if i < len(cmp.not_comparable) - 1:
                body.append("\n")
        sections.append(Group(Text("Not comparable", style="bold yellow"), body))
    if cmp.parts:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=pad)
        table.add_column("Part", no_wrap=True)
        for h in ("Before", "After", "Δ per step", "Share before", "Share after", "Δ share"):
            table.add_column(h, justify="right", **num)
        for p in cmp.parts:
            d = p.delta_ms
            table.add_row(
                safe_text(s.part_label(p.part)),
                safe_text(s.ms(p.before_ms)),
                safe_text(s.ms(p.after_ms)),
                safe_text(s.signed_ms(d), "green" if (d or 0) < 0 else "red" if (d or 0) > 0 else ""),
                safe_text(s.pct(p.before_frac)),
                safe_text(s.pct(p.after_frac)),
                safe_text(s.signed_pts(p.delta_frac)),
            )
        sections.append(Group(Text(f"Per-part change ({parts_caption(cmp)})", style="bold"), table))
    if cmp.operators:
        otable = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=pad)
        otable.add_column("Operator", overflow="fold")
        for h in ("Before", "After", "Δ per step", "Calls before", "Calls after"):
            otable.add_column(h, justify="right", **num)
        for o in cmp.operators:
            d = o.delta_ms
            otable.add_row(
                safe_text(o.operator), safe_text(s.ms(o.before_ms)), safe_text(s.ms(o.after_ms)),
                safe_text(s.signed_ms(d), "green" if (d or 0) < 0 else "red" if (d or 0) > 0 else ""),
                safe_text(s.number(o.before_calls)), safe_text(s.number(o.after_calls)),
            )
        sections.append(Group(Text(OPS_TITLE, style="bold"), otable, Text(OPS_NOTE)))
    rows = [("gone", "green", f) for f in cmp.disappeared]
    rows += [("new", "red", f) for f in cmp.appeared]
    rows += [("still", "", f) for f in cmp.persisting]
    if rows:
        ftable = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
        ftable.add_column("tag", no_wrap=True)
        ftable.add_column("code", no_wrap=True)
        ftable.add_column("finding", ratio=1)
        for tag, st, f in rows:
            body = Text()
            body.append(safe_text(f.name, "bold"))
            body.append(safe_text(f" [{f.severity}] "))
            body.append(safe_text(f.message))
            ftable.add_row(Text(tag, style=st), safe_text(f.code, "bold"), body)
        sections.append(Group(Text("Findings", style="bold"), ftable))
    else:
        sections.append(Group(Text("Findings", style="bold"), Text("none on either side")))
    if cmp.notes:
        nb = Text()
        for i, n in enumerate(cmp.notes):
            nb.append("• ")
            nb.append(safe_text(n))
            if i < len(cmp.notes) - 1:
                nb.append("\n")
        sections.append(Group(Text("Notes", style="bold"), nb))
    for sec in sections:
        console.print()
        console.print(sec)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


# --- markdown -----------------------------------------------------------------------------


def render_comparison_markdown(cmp: Comparison, *, color: bool = False) -> str:
    """Return the comparison as GitHub-flavoured Markdown (for a pull request)."""
    out = ["## advisor compare", ""]
    rows = [
        ["**Before**", f"{md_code(cmp.before)} ({md_text(cmp.before_device)})"],
        ["**After**", f"{md_code(cmp.after)} ({md_text(cmp.after_device)})"],
        ["**Speedup**", f"**{md_text(headline(cmp))}**"],
        *([f"**{label}**", md_text(text)] for label, text in evidence_rows(cmp)),
    ]
    if cmp.step_time_before_ms is not None or cmp.step_time_after_ms is not None:
        rows.append(["**Step time**", f"{s.ms(cmp.step_time_before_ms)} → {s.ms(cmp.step_time_after_ms)} (median)"])
    rows.append(["**Findings**", f"{len(cmp.disappeared)} gone · {len(cmp.appeared)} new · {len(cmp.persisting)} still there"])
    out.append(md_table(["", ""], rows))
    if cmp.not_comparable:
        out += ["", "> [!WARNING]", "> **Not comparable**"]
        out += [f"> - {md_text(x)}" for x in cmp.not_comparable]
    if cmp.parts:
        prow = [
            [
                md_text(s.part_label(p.part)),
                s.ms(p.before_ms),
                s.ms(p.after_ms),
                s.signed_ms(p.delta_ms),
                s.pct(p.before_frac),
                s.pct(p.after_frac),
                s.signed_pts(p.delta_frac),
            ]
            for p in cmp.parts
        ]
        out += ["", f"### Per-part change ({md_text(parts_caption(cmp))})", ""]
        out.append(md_table(["Part", "Before", "After", "Δ per step", "Share before", "Share after", "Δ share"], prow, "lrrrrrr"))
    if cmp.operators:
        orow = [
            [md_code(o.operator), s.ms(o.before_ms), s.ms(o.after_ms), s.signed_ms(o.delta_ms),
             s.number(o.before_calls), s.number(o.after_calls)]
            for o in cmp.operators
        ]
        out += ["", f"### {OPS_TITLE}", ""]
        out.append(md_table(["Operator", "Before", "After", "Δ per step", "Calls before", "Calls after"], orow, "lrrrrr"))
        out += ["", f"<sub>{md_text(OPS_NOTE)}</sub>"]
    out += ["", "### Findings", ""]
    frows = [["✅ gone", f] for f in cmp.disappeared] + [["🆕 new", f] for f in cmp.appeared] + [["➖ still", f] for f in cmp.persisting]
    if frows:
        out.append(
            md_table(
                ["", "Rule", "Severity", "Finding"],
                [[tag, f"**{md_text(f.code)}** {md_text(f.name)}", md_text(f.severity), md_text(f.message)] for tag, f in frows],
            )
        )
    else:
        out.append("No findings on either side.")
    if cmp.notes:
        out += ["", "### Notes", "", *(f"- {md_text(n)}" for n in cmp.notes)]
    return "\n".join(out) + "\n"


# --- html ---------------------------------------------------------------------------------


def render_comparison_html(cmp: Comparison, *, color: bool = False) -> str:
    """Return the comparison as one self-contained HTML page with a before/after plot per part."""
    cards = [
        card(
            "Speedup",
            s.times(cmp.speedup) if cmp.speedup is not None else "n/a",
            f"{s.ci(cmp.ci_low, cmp.ci_high)} {cmp.verdict}".strip(),
            "primary" if cmp.verdict in ("slower", "not comparable") else "",
        ),
    ]
    if cmp.metric:
        cards.append(
            card(
                METRIC_LABELS.get(cmp.metric, cmp.metric),
                f"{_value(cmp.metric, cmp.after_value)}",
                f"before: {_value(cmp.metric, cmp.before_value)}",
            )
        )
    if cmp.metric != "step_time_ms":
        cards.append(card("Step time", s.ms(cmp.step_time_after_ms), f"before: {s.ms(cmp.step_time_before_ms)} (median)"))
    if cmp.trial is not None:
        t = cmp.trial
        cards.append(card("Diagnose's trial", s.times(t.speedup), f"{s.ci(t.ci_low, t.ci_high)} {t.fix}".strip()))
    cards.append(card("Findings", f"{len(cmp.disappeared)} gone", f"{len(cmp.appeared)} new · {len(cmp.persisting)} still there"))
    body = [
        '<table style="margin-top:16px"><tr><th>Before</th><td><code>'
        + esc(cmp.before)
        + f"</code> · {esc(cmp.before_device)}</td></tr><tr><th>After</th><td><code>"
        + esc(cmp.after)
        + f"</code> · {esc(cmp.after_device)}</td></tr>"
        + "".join(f"<tr><th>{esc(label)}</th><td>{esc(text)}</td></tr>" for label, text in evidence_rows(cmp))
        + "</table>",
        '<div class="cards">' + "".join(cards) + "</div>",
    ]
    if cmp.metric == "samples_per_s" and cmp.speedup is not None:
        # NOTE: the after side drawn as a "trial" against the before side, so the plot (bar,
        # 95% whisker, dashed baseline) matches the report's before/after-fix figure.
        after = Trial(
            fix="after",
            safety="",
            baseline_samples_per_s=cmp.before_value,
            samples_per_s=cmp.after_value,
            speedup=cmp.speedup,
            ci_low=cmp.ci_low,
            ci_high=cmp.ci_high,
            verdict=_VERDICT_KEYS.get(cmp.verdict, "no_effect"),
        )
        body.append(f'<h2>Throughput before and after</h2><div class="panel">{svg.trials_plot([after], None, baseline_label="before")}</div>')
    if cmp.not_comparable:
        body.append(
            '<h2>Not comparable</h2><div class="panel nc"><ul>'
            + "".join(f"<li>{esc(x)}</li>" for x in cmp.not_comparable)
            + "</ul></div>"
        )
    if cmp.parts:
        plot = svg.bars_compare([(s.part_label(p.part), p.before_ms, p.after_ms) for p in cmp.parts])
        rows = "".join(
            f"<tr><td>{esc(s.part_label(p.part))}</td><td class='n'>{esc(s.ms(p.before_ms))}</td>"
            f"<td class='n'>{esc(s.ms(p.after_ms))}</td><td class='n'>{esc(s.signed_ms(p.delta_ms))}</td>"
            f"<td class='n'>{esc(s.pct(p.before_frac))}</td><td class='n'>{esc(s.pct(p.after_frac))}</td>"
            f"<td class='n'>{esc(s.signed_pts(p.delta_frac))}</td></tr>"
            for p in cmp.parts
        )
        body.append(
            f'<h2>Per-part change ({esc(parts_caption(cmp))})</h2><div class="panel">{plot}</div>'
            '<table style="margin-top:10px"><tr><th>Part</th><th class="n">Before</th><th class="n">After</th>'
            '<th class="n">Δ per step</th><th class="n">Share before</th><th class="n">Share after</th><th class="n">Δ share</th></tr>'
            f"{rows}</table>"
        )
    if cmp.operators:
        orows = "".join(
            f"<tr><td><code>{esc(o.operator)}</code></td><td class='n'>{esc(s.ms(o.before_ms))}</td>"
            f"<td class='n'>{esc(s.ms(o.after_ms))}</td><td class='n'>{esc(s.signed_ms(o.delta_ms))}</td>"
            f"<td class='n'>{esc(s.number(o.before_calls))}</td><td class='n'>{esc(s.number(o.after_calls))}</td></tr>"
            for o in cmp.operators
        )
        body.append(
            f"<h2>{esc(OPS_TITLE)}</h2>"
            '<table><tr><th>Operator</th><th class="n">Before</th><th class="n">After</th><th class="n">Δ per step</th>'
            f'<th class="n">Calls before</th><th class="n">Calls after</th></tr>{orows}</table>'
            f"<p class='note'>{esc(OPS_NOTE)}</p>"
        )
    items = []
    for tag, colour, group in (("gone", "#59a14f", cmp.disappeared), ("new", "#e15759", cmp.appeared), ("still there", "#9d9d9d", cmp.persisting)):
        for f in group:
            items.append(
                f'<div class="finding" style="--sev:{colour}"><div class="head"><span class="badge">{esc(tag)}</span>'
                f'<span class="code">{esc(f.code)}</span><span>{esc(f.name)}</span><span class="cat">{esc(f.severity)} · '
                f'{esc(s.category_label(f.category))}</span></div><div class="msg">{esc(f.message)}</div></div>'
            )
    body.append("<h2>Findings</h2>" + ("".join(items) or '<div class="panel">No findings on either side.</div>'))
    if cmp.notes:
        body.append("<h2>Notes</h2><ul class='notes'>" + "".join(f"<li>{esc(n)}</li>" for n in cmp.notes) + "</ul>")
    return page(
        "advisor compare",
        f"{cmp.before} → {cmp.after}",
        "".join(body),
        cmp.to_dict(),
        f"comparison schema {cmp.schema_version}",
        download_name="comparison.json",
    )


def render_comparison_json(cmp: Comparison, *, color: bool = False) -> str:
    """Return the comparison as JSON."""
    return cmp.to_json()


COMPARISON_RENDERERS: dict[str, Callable[..., str]] = {
    "text": render_comparison_text,
    "markdown": render_comparison_markdown,
    "html": render_comparison_html,
    "json": render_comparison_json,
}


def render_comparison(cmp: Comparison, fmt: str, *, color: bool = False, width: int | None = None) -> str:
    """Render ``cmp`` in ``fmt`` (one of ``text``, ``markdown``, ``html``, ``json``).

    Raises:
        UsageError: Unknown format.
    """
    renderer = COMPARISON_RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(COMPARISON_RENDERERS)}")
    # NOTE: only the terminal renderer has a width
    return renderer(cmp, color=color, width=width) if fmt == "text" else renderer(cmp, color=color)
