"""Markdown renderer: a report to paste into a pull request or an issue (GitHub-flavoured).

Untrusted strings (trace names, script paths, messages) go through :func:`md_text` or
:func:`md_code`, which neutralise Markdown and inline HTML, so a kernel called
``<img src=x onerror=...>`` shows as text instead of becoming markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from advisor.report import style as s
from advisor.report.gputables import gpu_sections
from advisor.report.model import Report

if TYPE_CHECKING:
    from advisor.report.view import Headline, ReportView, TrialRow

# NOTE: only characters that are markup anywhere in a line; "-", "+", "#" and "1." matter only
# at the start of a line and are handled there, which keeps the Markdown source readable.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]|~])")
_MD_LINE_START = re.compile(r"^(\s*)((?:[-+=]|#{1,6}|\d{1,9}[.)])(?=\s|$))")
BAR_WIDTH = 20
SEVERITY_ICONS: dict[str, str] = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def md_text(value: Any) -> str:
    """Escape ``value`` for Markdown body text and table cells (one line, no markup, no HTML)."""
    text = "" if value is None else str(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    # "1." needs its punctuation escaped ("1\."): a backslash before a digit is literal.
    text = _MD_LINE_START.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], text)
    # NOTE: a newline would end a table row; keep every value on one line.
    return " ".join(text.splitlines())


def md_code(value: Any) -> str:
    """``value`` as an inline code span, safe in a table cell (backticks and pipes handled)."""
    text = " ".join(("" if value is None else str(value)).splitlines())
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    # NOTE: GFM splits table cells on "|" even inside code spans; "\|" is its documented escape.
    text = text.replace("|", "\\|")
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(body: str, lang: str = "") -> str:
    """Return a fenced code block whose fence is longer than any backtick run inside ``body``."""
    longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{body.rstrip(chr(10))}\n{fence}"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """Return a GitHub table; ``align`` has one letter per column (``l``, ``r``, ``c``)."""
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    sep = [marks.get(align[i] if i < len(align) else "l", "---") for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def bar(frac: Any, width: int = BAR_WIDTH) -> str:
    """Return a Unicode bar for a fraction (renders in any Markdown viewer, no images)."""
    v = max(0.0, min(1.0, s.finite(frac) or 0.0))
    cells = round(v * width * 2)
    return "█" * (cells // 2) + ("▌" if cells % 2 else "")


def _outcome(h: Headline) -> str:
    """Return the summary's first row: the kept fixes and their measured speedup, or nothing and why ("" when no trial ran)."""
    if h.speedup is not None:
        fixes = ", ".join(md_code(k) for k in h.speedup.fixes)
        return f"{fixes}: measured **{h.speedup.ratio_text}**: {md_text(h.speedup.basis_text)}"
    if h.kept:
        return ", ".join(md_code(k) for k in h.kept)
    if h.nothing_kept:
        return f"**nothing**: {md_text(h.nothing_kept)}"
    return ""


def _summary(report: Report, view: ReportView) -> list[str]:
    h = view.headline
    rows: list[list[str]] = []
    outcome = _outcome(h)
    if outcome:
        rows.append(["**Kept**", outcome])  # NOTE: the answer first (issue #32)
    if h.kept_whole_text:
        rows.append(["**Kept, whole run**", md_text(h.kept_whole_text)])
    b = h.bottleneck
    if b is not None:
        rows.append(["**Primary bottleneck**", f"**{md_text(b.label)}**: {md_text(b.measured_text)}"])
        rows.append(["**Recoverable**", md_text(b.estimate_text)])
    if h.most_of_step is not None:
        rows.append(["**Most of the step**", f"**{md_text(h.most_of_step.label)}**: {md_text(h.most_of_step.text)}"])
    if b is None:
        rows.append(["**Primary bottleneck**", "none found"])
    if h.rate is not None:
        rows.append(["**Throughput**", f"{md_text(h.rate_text)} ({md_text(h.rate_caption)})"])
    rows.append(["**Step time**", f"{md_text(h.step_text)} {md_text(h.step_caption)} · {md_text(h.device)}"])
    if h.whole_run_text:
        rows.append(["**Whole run**", md_text(h.whole_run_text)])
    rows.append(["**Findings**", md_text(h.findings)])
    if report.run.error:
        rows.append(["**Script error**", md_code(report.run.error)])
    return [md_table(["", ""], rows)]


def _breakdown(view: ReportView) -> list[str]:
    if not view.breakdown:
        return []
    rows = [[md_text(r.label), f"`{bar(r.share) or ' '}`", s.pct(r.share), s.ms(r.ms)] for r in view.breakdown]
    table = md_table(["Part", "Share", "%", "Per step"], rows, "llrr")
    return ["### Step-time breakdown", "", s.sentence(md_text(view.breakdown_caption)) + ".", "", table]


def _findings(report: Report) -> list[str]:
    out = [f"### Findings ({len(report.findings)})", ""]
    if not report.findings:
        return [*out, "No rule fired for this run."]
    rows = []
    for f in report.findings:
        where = "<br>".join(md_code(s.location_text(loc.file, loc.line, loc.function)) for loc in f.locations) or "—"
        fixes = "<br>".join(f"{md_code(x.id)} ({md_text(x.safety)})" for x in f.fixes) or "—"
        rows.append(
            [
                f"{SEVERITY_ICONS.get(f.severity, '')} {md_text(f.severity)}".strip(),
                f"**{md_text(f.code)}** {md_text(f.name)}",
                md_text(s.category_label(f.category)),
                md_text(f.message + (f" — {s.recoverable(f.impact_frac)}" if s.finite(f.impact_frac) else "")),
                where,
                fixes,
            ]
        )
    return [*out, md_table(["Severity", "Rule", "Category", "Finding", "Where", "Fix"], rows)]


def _trials(view: ReportView) -> list[str]:
    if not view.trials:
        return []
    rows = [_trial_row(r, view.has_memory) for r in view.trials]
    out = [
        "### Fix trials",
        "",
        "Each fix was measured against the baseline in interleaved repeats; a change within noise "
        "is reported as *no measurable effect*."
        + (
            " A fix noted *on top of X* was measured against X's run instead: its Before and "
            "speedup are relative to X."
            if view.has_reference
            else ""
        ),
        "",
        md_table(
            ["Fix", "Safety", f"Before ({view.headline.rate_unit})", f"After ({view.headline.rate_unit})", "Speedup [95% CI]", "Verdict", "Loss Δ",
             *(["Peak memory"] if view.has_memory else []), "Note"],
            rows,
            "llrrrlr" + ("r" if view.has_memory else "") + "l",
        ),
    ]
    if view.kept:
        out += ["", "**Kept:** " + ", ".join(md_code(k) for k in view.kept)]
    if view.case_study:
        out += ["", "**Case study:** " + md_text(view.case_study)]
    return out


def _trial_row(r: TrialRow, memory: bool) -> list[str]:
    name = f"**combined**: {md_code(r.name)}" if r.combined else md_code(r.name)
    return [
        name,
        md_text(r.safety),
        r.before,
        r.after,
        f"**{r.speedup}**" if r.combined and r.speedup != "—" else r.speedup,
        md_text(r.verdict),
        r.loss,
        *([md_text(r.memory)] if memory else []),
        md_text(r.note) or "—",
    ]


def _diff(report: Report) -> list[str]:
    if not report.diff.strip():
        return []
    return [
        "<details><summary>Source diff that makes the kept fixes permanent</summary>",
        "",
        md_fence(report.diff, "diff"),
        "",
        "</details>",
    ]


def _status(report: Report) -> list[str]:
    line = s.status_line(report.status, report.trials, report.run.status)
    took = s.timing_line(report.timing)
    return [*([f"> **{md_text(line)}**"] if line else []), *([f"<sub>{md_text(took)}</sub>"] if took else [])]


def _warnings(report: Report) -> list[str]:
    if not report.warnings:
        return []
    return [f"### Warnings ({len(report.warnings)})", "", *(f"- ⚠️ {md_text(w)}" for w in report.warnings)]


def _gpu_tables(report: Report) -> list[str]:
    """Render the GPU-time tables (idle by function, roofline, modules, collectives, shapes)."""
    out: list[str] = []
    for sec in gpu_sections(report):
        align = "".join("r" if n else "l" for n in sec.numeric)
        rows = [[md_text(c) for c in row] for row in sec.rows]
        out += [f"### {md_text(sec.title)}", "", md_table(sec.headers, rows, align), ""]
        if sec.note:
            out += [f"<sub>{md_text(sec.note)}</sub>", ""]
    return out[:-1] if out else out


def _notes(report: Report) -> list[str]:
    notes = report.all_notes
    if not notes:
        return []
    return ["### Notes", "", *(f"- {md_text(n)}" for n in notes)]


def render_markdown(report: Report) -> str:
    """Render ``report`` as GitHub-flavoured Markdown.

    Args:
        report: The report to render.

    Returns:
        The Markdown document, ending with a newline.
    """
    from advisor.report.view import build_view

    view = build_view(report)
    blocks: list[list[str]] = [
        [f"## advisor: {md_code(view.headline.title)}"],
        _summary(report, view),
        _status(report),
        _warnings(report),
        _breakdown(view),
        _findings(report),
        _trials(view),
        _diff(report),
        _gpu_tables(report),
        _notes(report),
        [
            f"<sub>advisor {md_text(report.advisor_version)} · {md_text(report.created)} · "
            f"source {md_code(report.source)}</sub>"
        ],
    ]
    return "\n\n".join("\n".join(b) for b in blocks if b) + "\n"
