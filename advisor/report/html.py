r"""HTML renderer: one self-contained page (inline CSS, inline SVG plots, a few lines of script).

Nothing is fetched when the page opens: no CDN, no fonts, no images from anywhere; a
Content-Security-Policy with ``default-src 'none'`` enforces it even if a bug let markup through.
Every string from a trace, a script or its output is escaped with :func:`html.escape`; the
report's JSON is embedded as a data island with ``<``, ``>`` and ``&`` written as ``\\u003c``-style
escapes, so no name can close the ``<script>`` element.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from advisor.report import style as s
from advisor.report import svg
from advisor.report.gputables import gpu_sections
from advisor.report.model import Report
from advisor.report.svg import esc

if TYPE_CHECKING:
    from advisor.report.view import Headline, ReportView

CSS = """
:root{--bg:#f7f7f8;--card:#fff;--fg:#1d1d1f;--muted:#6b6b73;--line:#e3e3e8;--accent:#4e79a7;
--code:#f0f0f3;--add:#e6f4ea;--del:#fdecea}
@media (prefers-color-scheme:dark){:root{--bg:#141416;--card:#1e1e22;--fg:#ececf1;--muted:#a0a0aa;
--line:#33333a;--accent:#8ab4f8;--code:#2a2a30;--add:#1e3a26;--del:#3d1f1f}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1280px;margin:0 auto;padding:28px 20px 60px}
header h1{font-size:22px;margin:0 0 2px}
header .sub{color:var(--muted);font-size:13px;word-break:break-all}
h2{font-size:17px;margin:34px 0 10px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px;margin-top:18px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 14px}
.card .k{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:22px;font-weight:650;margin-top:2px}
.card .d{font-size:13px;color:var(--muted)}
.card.primary{border-left:4px solid #e15759}
.card.kept{border-left:4px solid #59a14f}.card.nothing-kept{border-left:4px solid #f28e2b}
.panel{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px}
.finding{background:var(--card);border:1px solid var(--line);border-left:4px solid var(--sev);border-radius:10px;padding:10px 14px;margin:10px 0}
.finding .head{display:flex;gap:10px;align-items:baseline;flex-wrap:wrap}
.badge{font-size:11px;font-weight:700;text-transform:uppercase;color:#fff;background:var(--sev);border-radius:4px;padding:1px 6px}
.code{font-weight:700}
.cat{color:var(--muted);font-size:13px}
.msg{margin:4px 0}
.loc,.fix{font-size:13px;color:var(--muted)}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}
code{background:var(--code);padding:1px 5px;border-radius:4px;word-break:break-all}
pre{background:var(--code);padding:10px 12px;border-radius:8px;overflow-x:auto;margin:0}
pre .a{background:var(--add);display:block}pre .r{background:var(--del);display:block}pre .h{color:var(--accent);display:block}
table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line);border-radius:10px;overflow:hidden;font-size:14px}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
td:last-child{overflow-wrap:anywhere;min-width:6em}
th{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.nw{white-space:nowrap}td.nw code{word-break:normal}
td.fixname{min-width:9em;max-width:24em}td.fixname code{word-break:normal;overflow-wrap:anywhere}
table.trials tr.noted td{border-bottom:0;padding-bottom:2px}
table.trials tr.note td{color:var(--muted);font-size:13px;padding-top:0;overflow-wrap:anywhere}
td.n.wrap,table.trials th.n{white-space:normal}td.n.wrap span{white-space:nowrap}
tr.combined td{font-weight:650}
.verdict{font-weight:600}
ul.notes{padding-left:20px}
ul.warnings{list-style:none;padding:10px 14px;margin:0;background:var(--card);border:1px solid var(--line);border-left:4px solid #e8a317;border-radius:10px}
ul.warnings li::before{content:"⚠ ";color:#e8a317}
.tw{overflow-x:auto;margin-top:10px}.tw table{margin-top:0}
svg.plot{display:block;max-width:100%;height:auto}
svg .grid{stroke:var(--line);stroke-width:1}
svg .muted{fill:var(--muted)} svg .fg{fill:var(--fg)}
svg .lane{fill:var(--code)}
svg .ci line{stroke:var(--fg);stroke-width:1.5}
svg .baseline{stroke:var(--fg);stroke-dasharray:4 3;stroke-width:1}
svg .refline{stroke:var(--fg);stroke-dasharray:1 3;stroke-width:1.5}
svg rect.ev:hover,svg rect:hover{opacity:.8}
.muted{color:var(--muted)}
.nc{border-left:4px solid #e8a317}
footer{margin-top:40px;color:var(--muted);font-size:12px}
a{color:var(--accent)}
@media print{body{background:#fff}.card,.panel,.finding,table{break-inside:avoid}}
"""

# NOTE: the only script on the page. It records any script error on <html data-js-error> (the
# browser test reads it) and offers the embedded JSON as a download; the page is complete
# without it.
SCRIPT = """
(function(){
  var root=document.documentElement;
  window.addEventListener('error',function(e){root.setAttribute('data-js-error',String(e.message||e));});
  try{
    var raw=document.getElementById('advisor-data').textContent;
    var data=JSON.parse(raw);
    var link=document.getElementById('download-json');
    if(link&&window.Blob&&window.URL){
      link.href=URL.createObjectURL(new Blob([JSON.stringify(data,null,2)],{type:'application/json'}));
      link.hidden=false;
    }
    root.setAttribute('data-ready','1');
  }catch(err){root.setAttribute('data-js-error',String(err&&err.message||err));}
})();
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def json_island(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def page(title: str, subtitle: str, body: str, data: Any, footer: str, download_name: str = "report.json") -> str:
    """Return the page shell shared by reports and comparisons.

    Args:
        title: Page heading (escaped here).
        subtitle: Line under the heading (escaped here).
        body: Already-escaped HTML of the sections.
        data: JSON-able document embedded as ``#advisor-data``.
        footer: Footer text (escaped here).
        download_name: File name offered by the download link.
    """
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width,initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        f'<header><h1>{esc(title)}</h1><div class="sub">{esc(subtitle)}</div></header>\n'
        f"{body}\n"
        f'<footer>{esc(footer)} · <a id="download-json" download="{esc(download_name)}" hidden>download the JSON</a></footer>\n'
        "</main>\n"
        f'<script type="application/json" id="advisor-data">{json_island(data)}</script>\n'
        f"<script>{SCRIPT}</script>\n"
        "</body>\n</html>\n"
    )


def card(key: str, value: str, detail: str = "", cls: str = "") -> str:
    """Return a summary card; all three strings are escaped here."""
    d = f'<div class="d">{esc(detail)}</div>' if detail else ""
    return f'<div class="card {esc(cls)}"><div class="k">{esc(key)}</div><div class="v">{esc(value)}</div>{d}</div>'


def diff_block(diff: str) -> str:
    """Return a unified diff as an escaped ``<pre>`` with added/removed lines highlighted."""
    css = {"add": "a", "remove": "r", "hunk": "h"}
    lines = []
    for line in diff.splitlines():
        cls = css.get(s.diff_line_kind(line), "")
        lines.append(f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line) + "\n")
    return "<pre>" + "".join(lines) + "</pre>"


def _outcome_card(h: Headline) -> str:
    """Return the first card: the kept fixes' measured speedup, or "nothing" kept and why ("" when no trial ran)."""
    if h.speedup is not None:
        sp = h.speedup
        detail = " · ".join(x for x in (sp.ci_text, f"{', '.join(sp.fixes)}: {sp.basis_text}") if x)
        return card("Kept · measured speedup", s.times(sp.speedup), detail, "kept")
    if h.kept:
        return card("Kept", ", ".join(h.kept), "speedup not measured", "kept")
    if h.nothing_kept:
        return card("Kept", "nothing", h.nothing_kept, "nothing-kept")
    return ""


def _cards(report: Report, view: ReportView) -> str:
    h = view.headline
    out = []
    outcome = _outcome_card(h)
    if outcome:
        out.append(outcome)  # NOTE: the answer first (issue #32)
    if h.kept_whole:
        out.append(card("Kept, whole run", *h.kept_whole))
    b = h.bottleneck
    if b is not None:
        out.append(card("Primary bottleneck", b.label, b.measured_text, "primary"))
        out.append(
            card("Recoverable (estimate)", f"up to {s.pct(b.recoverable_frac)}", f"of step time → {b.speedup_text}")
        )
    if h.most_of_step is not None:
        out.append(card("Most of the step", h.most_of_step.label, h.most_of_step.text))
    if b is None:
        out.append(card("Primary bottleneck", "none found", "no rule fired above its threshold"))
    if h.rate is not None:
        out.append(card("Throughput", s.rate(h.rate), f"{h.rate_unit} · {h.rate_caption}"))
    out.append(card("Step time", h.step_text, f"{h.step_caption} · {h.device}"))
    if h.whole_run:
        out.append(card("Whole run (projected)", *h.whole_run))
    out.append(card("Findings", str(len(report.findings)), h.findings))
    return '<div class="cards">' + "".join(out) + "</div>"


def _breakdown(report: Report, view: ReportView) -> str:
    if not view.breakdown and not report.steps:
        return ""
    shares = {r.part: r.share for r in view.breakdown}
    parts = [r.part for r in view.breakdown] or list(s.PART_LABELS)
    rows = "".join(
        f"<tr><td><svg width='11' height='11' style='vertical-align:-1px'><rect width='11' height='11' rx='2' "
        f"fill='{esc(r.color)}'/></svg> {esc(r.label)}</td>"
        f'<td class="n">{esc(s.pct(r.share))}</td><td class="n">{esc(s.ms(r.ms))}</td></tr>'
        for r in view.breakdown
    )
    per_step = svg.stacked_steps(report.steps, parts)
    return (
        "<h2>Where the step time goes</h2>"
        f'<div class="panel">{svg.share_bar(shares)}'
        + (f'<div style="margin-top:14px">{per_step}</div>' if per_step else "")
        + "</div>"
        + (f'<table style="margin-top:10px"><tr><th>Part</th><th class="n">Share</th><th class="n">Per step</th></tr>{rows}</table>'
           f'<p class="muted">{esc(s.sentence(view.breakdown_caption))}.</p>' if rows else "")
    )


def _findings(report: Report) -> str:
    if not report.findings:
        return '<h2>Findings</h2><div class="panel">No rule fired for this run.</div>'
    items = []
    for f in report.findings:
        colour = s.SEVERITY_COLORS.get(f.severity, "#888")
        locs = "".join(
            f'<div class="loc">at <code>{esc(s.location_text(loc.file, loc.line, loc.function))}</code></div>' for loc in f.locations
        )
        fixes = ", ".join(f"<code>{esc(x.id)}</code> ({esc(x.safety)})" for x in f.fixes)
        impact = f" · {esc(s.recoverable(f.impact_frac))}" if s.finite(f.impact_frac) else ""
        items.append(
            f'<div class="finding" style="--sev:{colour}"><div class="head"><span class="badge">{esc(f.severity)}</span>'
            f'<span class="code">{esc(f.code)}</span><span>{esc(f.name)}</span>'
            f'<span class="cat">{esc(s.category_label(f.category))}{impact}</span></div>'
            f'<div class="msg">{esc(f.message)}</div>{locs}'
            + (f'<div class="fix">fix: {fixes}</div>' if fixes else "")
            + "</div>"
        )
    return f"<h2>Findings ({len(report.findings)})</h2>" + "".join(items)


def _trials(report: Report, view: ReportView) -> str:
    if not view.trials:
        return ""
    rows = []
    cols = 8 if view.has_memory else 7
    for r in view.trials:
        colour = s.VERDICT_COLORS.get(r.trial.verdict, "inherit")
        speed, _, ci = r.speedup.partition(" ")
        cls = " ".join(c for c in ("combined" if r.combined else "", "noted" if r.note else "") if c)
        # NOTE: the fix name wraps at " + " (and inside an id if it must), and the note gets a
        # full-width row of its own: a no-wrap "combined: a+b" cell beside a Note column once
        # squeezed the note to one character per line and pushed columns off the page.
        rows.append(
            f'<tr class="{cls}"><td class="fixname">{"combined: " if r.combined else ""}'
            f"<code>{esc(r.name)}</code></td>"
            f"<td>{esc(r.safety)}</td>"
            f'<td class="n">{esc(r.before)}</td><td class="n">{esc(r.after)}</td>'
            f'<td class="n wrap"><span>{esc(speed)}</span> <span class="muted">{esc(ci)}</span></td>'
            f'<td class="verdict" style="color:{colour}">{esc(r.verdict)}</td>'
            f'<td class="n">{esc(r.loss)}</td>'
            + (f'<td class="n wrap">{_memory_cell(r.memory)}</td>' if view.has_memory else "")
            + "</tr>"
            + (f'<tr class="note"><td colspan="{cols}">{esc(r.note)}</td></tr>' if r.note else "")
        )
    refs = list(dict.fromkeys(r.reference for r in view.trials if r.reference is not None and not r.combined))
    on_top = (
        " Fixes measured on top of another fix were compared with that fix's run ("
        + ", ".join(f"<code>{esc(r)}</code>" for r in refs)
        + "), not the baseline: in the chart they sit under its reference bar, and their Before "
        "and speedup are relative to it."
        if refs
        else ""
    )
    kept = '<p>Kept: ' + ", ".join(f"<code>{esc(k)}</code>" for k in view.kept) + "</p>" if view.kept else ""
    if view.case_study:
        kept += f"<p><strong>Case study:</strong> {esc(view.case_study)}</p>"
    return (
        "<h2>Before and after each fix</h2>"
        '<p class="muted">Interleaved repeats against the baseline; a change within noise is <em>no measurable effect</em>, never a win.'
        " In the chart each fix is drawn against its own baseline run (the dashed mark and the thin grey bar): "
        f"repeats run at different times, so baselines differ between fixes.{on_top}</p>"
        f'<div class="panel">{svg.trials_plot(report.trials, report.combined, unit=view.headline.rate_unit)}</div>'
        '<div class="tw"><table class="trials">'
        '<tr><th>Fix</th><th>Safety</th><th class="n">Before</th><th class="n">After</th>'
        '<th class="n">Speedup [95% CI]</th><th>Verdict</th><th class="n">Loss Δ</th>'
        + ('<th class="n">Peak memory</th>' if view.has_memory else "")
        + "</tr>"
        + "".join(rows)
        + "</table></div>"
        + kept
    )


def _memory_cell(text: str) -> str:
    """``412.0 MiB (+3%)`` as two unbreakable pieces, so a narrow column wraps before the change."""
    size, sep, change = text.partition(" (")
    return f"<span>{esc(size)}</span>" + (f" <span>({esc(change)}</span>" if sep else "")


def _timeline(report: Report) -> str:
    plot = svg.timeline(report.timeline)
    if not plot:
        return ""
    return (
        "<h2>Timeline of one step</h2>"
        '<p class="muted">Hover a block for its name and duration. For every event, open the trace in '
        "ui.perfetto.dev or <code>advisor tensorboard RUN_DIR</code>.</p>"
        f'<div class="panel">{plot}</div>'
    )


def _locations(view: ReportView) -> str:
    if not view.locations:
        return ""
    rows = "".join(
        f"<tr><td>{esc(loc.kind)}</td><td><code>{esc(loc.where)}</code></td>"
        f'<td class="n">{esc(loc.count)}</td><td class="n">{esc(loc.time)}</td>'
        f"<td>{esc(loc.source)}</td></tr>"
        for loc in view.locations
    )
    return (
        f"<h2>{esc(view.locations_title)}</h2>"
        '<div class="tw"><table><tr><th>Kind</th><th>Where</th><th class="n">Count/step</th><th class="n">Time/step</th><th>From</th></tr>'
        f"{rows}</table></div>"
    )


def _gpu_tables(report: Report) -> str:
    """Render the GPU-time tables (idle by function, roofline, modules, collectives, shapes)."""
    out = []
    num = ' class="n"'
    for sec in gpu_sections(report):
        head = "".join(f"<th{num if n else ''}>{esc(h)}</th>" for h, n in zip(sec.headers, sec.numeric, strict=True))
        body = "".join(
            "<tr>" + "".join(f"<td{num if n else ''}>{esc(c)}</td>" for c, n in zip(row, sec.numeric, strict=True)) + "</tr>"
            for row in sec.rows
        )
        note = f'<p class="muted">{esc(sec.note)}</p>' if sec.note else ""
        out.append(f"<h2>{esc(sec.title)}</h2><table><tr>{head}</tr>{body}</table>{note}")
    return "".join(out)


def _run(report: Report) -> str:
    run = report.run
    rows: list[tuple[str, str]] = []
    if run.script:
        rows.append(("Script", " ".join([run.script, *run.args])))
    rows.append(("Status", s.run_status_label(run.status)
                 + (f" (exit {run.exit_code})" if run.exit_code not in (None, 0) else "")))
    if run.error:
        rows.append(("Error", run.error))
    if run.step_source:
        why = f": {run.step_source_reason}" if run.step_source_reason else ""
        rows.append(("Steps from", f"{run.step_source}{why}"))
    if run.warmup_steps or run.timed_steps or run.profiled_steps:
        rows.append(("Phases", f"{run.warmup_steps} warm-up · {run.timed_steps} timed · {run.profiled_steps} profiled steps"))
    if run.time_to_first_step_s is not None:
        rows.append(("Time to first step", f"{run.time_to_first_step_s:.2f} s"))
    if run.peak_memory_bytes is not None:
        rows.append(("Peak memory", s.nbytes(run.peak_memory_bytes)))
    for key, value in sorted((run.environment or {}).items()):
        if value not in (None, "", 0, [], {}):
            rows.append((key.replace("_", " ").capitalize(), value))
    if report.device:
        rows.append(("Devices in trace", ", ".join(report.device)))
    body = "".join(f"<tr><th>{esc(k)}</th><td>{_env_cell(v)}</td></tr>" for k, v in rows)
    return f"<h2>Run</h2><table>{body}</table>"


def _env_cell(value: object) -> str:
    """Return an environment value as escaped HTML: records (the matmul peaks) as a small table.

    ``str()`` of a list of dicts printed the matmul peaks as a raw Python literal (issue #32).
    """
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        cols = list(dict.fromkeys(k for v in value for k in v))
        head = "".join(f"<th>{esc(c.replace('_', ' '))}</th>" for c in cols)
        rows = "".join("<tr>" + "".join(f"<td>{_env_cell(v.get(c, ''))}</td>" for c in cols) + "</tr>" for v in value)
        return f"<table><tr>{head}</tr>{rows}</table>"
    if isinstance(value, dict):
        return esc(" · ".join(f"{k.replace('_', ' ')}: {v}" for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return esc(", ".join(str(v) for v in value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    return esc(str(value))


def _status(report: Report) -> str:
    line = s.status_line(report.status, report.trials, report.run.status)
    took = s.timing_line(report.timing)
    return ((f'<p class="warnings"><strong>{esc(line)}</strong></p>' if line else "")
            + (f"<p><small>{esc(took)}</small></p>" if took else ""))


def _warnings(report: Report) -> str:
    if not report.warnings:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in report.warnings)
    return f'<h2>Warnings ({len(report.warnings)})</h2><ul class="warnings">{items}</ul>'


def _notes(report: Report) -> str:
    notes = report.all_notes
    if not notes:
        return ""
    return "<h2>Notes</h2><ul class=\"notes\">" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"


def render_html(report: Report) -> str:
    """Render ``report`` as one self-contained HTML page.

    Args:
        report: The report to render.

    Returns:
        The HTML document.
    """
    from advisor.report.view import build_view

    view = build_view(report)
    body = "".join(
        [
            _cards(report, view),
            _status(report),
            _warnings(report),
            _breakdown(report, view),
            _findings(report),
            _trials(report, view),
            (
                "<h2>Source diff</h2><details open><summary>Makes the kept fixes permanent</summary>"
                f"{diff_block(report.diff)}</details>"
                if report.diff.strip()
                else ""
            ),
            _timeline(report),
            _locations(view),
            _gpu_tables(report),
            _run(report),
            _notes(report),
        ]
    )
    title = f"advisor · {view.headline.title}"
    subtitle = report.source
    footer = f"advisor {report.advisor_version} · {report.created}"
    return page(title, subtitle, body, report.to_dict(), footer)
