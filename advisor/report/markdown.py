"""Markdown renderer: a report to paste into a pull request or an issue (GitHub-flavoured).

Untrusted strings (trace names, script paths, messages) go through :func:`md_text` or
:func:`md_code`, which neutralise Markdown and inline HTML, so a kernel called
``<img src=x onerror=...>`` shows as text instead of becoming markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from advisor.report import headline
from advisor.report import style as s
from advisor.report.gputables import gpu_sections
from advisor.report.model import Report
from advisor.report.text import (
    device_text,
    part_shares,
    severity_counts,
    title_of,
)

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


def _summary(report: Report) -> list[str]:
    rows: list[list[str]] = []
    p = report.primary
    if p is not None:
        rows.append(["**Primary bottleneck**", f"**{md_text(s.category_label(p.category))}**: {s.pct(p.share)} of step time"])
        rows.append(["**Estimated speedup**", f"up to **{s.times(p.estimated_speedup)}** if that time went away (Amdahl bound)"])
    else:
        rows.append(["**Primary bottleneck**", "none found"])
    tput, unit = headline.rate(report)
    if tput is not None:
        cell = f"{s.rate(tput)} {unit}"
        c = report.kept_trial
        if c is not None and s.finite(c.speedup) is not None:
            kept = ", ".join(md_code(k) for k in report.kept_fixes) or md_code(c.fix)
            cell += f" → **{s.rate(c.samples_per_s)} {unit}** with {kept} ({s.times(c.speedup)} {s.ci(c.ci_low, c.ci_high)})".rstrip()
            cell = cell.rstrip() if cell.endswith(")") else cell
        rows.append(["**Throughput**", cell])
    step = headline.step_time(report)
    rows.append(["**Step time**", f"{s.ms(step.ms)} {step.caption()} · {md_text(device_text(report))}"])
    rows.append(["**Findings**", md_text(severity_counts(report.findings))])
    if report.run.error:
        rows.append(["**Script error**", md_code(report.run.error)])
    return [md_table(["", ""], rows)]


def _breakdown(report: Report) -> list[str]:
    shares = part_shares(report)
    parts = [p for p in s.ordered_parts(shares) if shares[p] > 0]
    if not parts:
        return []
    part_ms = headline.part_ms(report)
    rows = [
        [md_text(s.part_label(p)), f"`{bar(shares[p]) or ' '}`", s.pct(shares[p]), s.ms(part_ms.get(p))]
        for p in parts
    ]
    table = md_table(["Part", "Share", "%", "Per step"], rows, "llrr")
    return ["### Step-time breakdown", "", md_text(headline.breakdown_caption(report)).capitalize() + ".", "", table]


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
                md_text(f.message),
                where,
                fixes,
            ]
        )
    return [*out, md_table(["Severity", "Rule", "Category", "Finding", "Where", "Fix"], rows)]


def _trials(report: Report) -> list[str]:
    trials = list(report.trials)
    if not trials and report.combined is None:
        return []
    memory = s.has_memory([*trials, report.combined])
    rows = []
    for t in trials:
        rows.append(_trial_row(t, md_code(t.fix), memory=memory))
    if report.combined is not None:
        rows.append(_trial_row(report.combined, f"**combined**: {md_code(report.combined.fix)}", bold=True, memory=memory))
    out = [
        "### Fix trials",
        "",
        "Each fix was measured against the baseline in interleaved repeats; a change within noise "
        "is reported as *no measurable effect*."
        + (
            " A fix noted *on top of X* was measured against X's run instead: its Before and "
            "speedup are relative to X."
            if any(s.trial_reference(t) is not None for t in trials)
            else ""
        ),
        "",
        md_table(
            ["Fix", "Safety", "Before (samples/s)", "After (samples/s)", "Speedup [95% CI]", "Verdict", "Loss Δ",
             *(["Peak memory"] if memory else []), "Note"],
            rows,
            "llrrrlr" + ("r" if memory else "") + "l",
        ),
    ]
    if report.kept_fixes:
        out += ["", "**Kept:** " + ", ".join(md_code(k) for k in report.kept_fixes)]
    return out


def _trial_row(t: Any, name: str, bold: bool = False, memory: bool = False) -> list[str]:
    speed = f"{s.times(t.speedup)} {s.ci(t.ci_low, t.ci_high)}".strip()
    return [
        name,
        md_text(t.safety),
        s.rate(t.baseline_samples_per_s),
        s.rate(t.samples_per_s),
        f"**{speed}**" if bold and speed != "—" else speed,
        md_text(s.VERDICT_LABELS.get(t.verdict, t.verdict)),
        s.pct(t.loss_max_rel_diff, 2) if t.loss_max_rel_diff is not None else "—",
        *([md_text(s.trial_memory(t))] if memory else []),
        md_text(t.reason) or "—",
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
    line = s.status_line(report.status, report.trials)
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
    notes = list(dict.fromkeys((*report.run.notes, *report.notes)))
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
    title = title_of(report)
    blocks: list[list[str]] = [
        [f"## advisor: {md_code(title)}"],
        _summary(report),
        _status(report),
        _warnings(report),
        _breakdown(report),
        _findings(report),
        _trials(report),
        _diff(report),
        _gpu_tables(report),
        _notes(report),
        [
            f"<sub>advisor {md_text(report.advisor_version)} · {md_text(report.created)} · "
            f"source {md_code(report.source)}</sub>"
        ],
    ]
    return "\n\n".join("\n".join(b) for b in blocks if b) + "\n"
