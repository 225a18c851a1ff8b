"""Terminal renderer: a rich summary panel, warnings, a breakdown bar chart, findings, trials and notes.

The output is a string. Without colour (files, pipes, golden tests) it is rendered at a fixed
width with no control codes, so it is byte-for-byte deterministic. Every string that came from
a trace, a script or its output is wrapped in :class:`rich.text.Text`, never parsed as rich
markup (a kernel named ``[bold]x`` prints as itself), with its control characters escaped
(:func:`advisor._terminal.printable`: an ESC in a kernel name never reaches the terminal).
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from advisor.report import style as s
from advisor.report.console import WIDTH, make_console, safe_text, unsplit
from advisor.report.gputables import gpu_sections
from advisor.report.model import Report
from advisor.report.view import Headline, ReportView, TrialRow, build_view

BAR_WIDTH = 40
TEXT_LOCATIONS = 8
"""Source locations the terminal lists (the rest are counted)."""


def _summary_panel(report: Report, view: ReportView) -> Panel:
    h = view.headline
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    # NOTE: the answer first (issue #32): what was kept and its measured speedup, or that
    # nothing was kept and why; the diagnosis that led there follows.
    outcome = _outcome(h)
    if outcome is not None:
        grid.add_row("Kept", outcome)
    if h.kept_whole_text:
        grid.add_row("Kept, whole run", safe_text(h.kept_whole_text))
    b = h.bottleneck
    if b is not None:
        grid.add_row(
            "Primary bottleneck",
            Text.assemble(safe_text(b.label, "bold red"), " — ", safe_text(b.measured_text)),
        )
        grid.add_row("Recoverable", safe_text(b.estimate_text))
    if h.most_of_step is not None:
        m = h.most_of_step
        grid.add_row("Most of the step", Text.assemble(safe_text(m.label, "bold"), " — ", safe_text(m.text)))
    if b is None:
        grid.add_row("Primary bottleneck", Text("none found", style="green"))
    if h.rate is not None:
        grid.add_row("Throughput", safe_text(f"{h.rate_text} ({h.rate_caption})"))
    grid.add_row("Step time", safe_text(f"{h.step_text} {h.step_caption} · {h.device}"))
    if report.run.step_source and report.run.step_source_reason:
        grid.add_row("Steps from", safe_text(f"{report.run.step_source}: {report.run.step_source_reason}"))
    if h.whole_run_text:
        grid.add_row("Whole run", safe_text(h.whole_run_text))
    grid.add_row("Findings", safe_text(h.findings))
    if report.run.status not in ("analyzed", "stopped", "completed"):
        grid.add_row("Run status", safe_text(report.run.status, "bold red"))
    if report.run.error:
        grid.add_row("Script error", safe_text(report.run.error, "red"))
    title = Text("advisor · ")
    title.append(safe_text(h.title, "bold"))
    return Panel(grid, title=title, title_align="left", box=box.ROUNDED, padding=(0, 1))


def _outcome(h: Headline) -> Text | None:
    """``dataloader_workers — measured 1.59× [...]: 812 → 1,291 samples/s ...``, or ``nothing — why``."""
    if h.speedup is not None:
        line = Text()
        line.append(safe_text(", ".join(h.speedup.fixes), "bold"))
        line.append(" — measured ")
        line.append(safe_text(h.speedup.ratio_text, "bold green"))
        line.append(safe_text(f": {h.speedup.basis_text}"))
        return line
    if h.kept:
        return safe_text(", ".join(h.kept), "bold")
    if h.nothing_kept:
        return Text.assemble(Text("nothing", style="bold yellow"), " — ", safe_text(h.nothing_kept))
    return None


def _breakdown(view: ReportView, color: bool) -> RenderableType | None:
    if not view.breakdown:
        return None
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column("part", no_wrap=True, min_width=20)
    table.add_column("bar", no_wrap=True, width=BAR_WIDTH)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("ms", justify="right", no_wrap=True)
    for row in view.breakdown:
        cells = round(max(0.0, min(1.0, row.share)) * BAR_WIDTH * 2)  # half-cell resolution
        bar = "█" * (cells // 2) + ("▌" if cells % 2 else "")
        table.add_row(
            safe_text(row.label),
            Text(bar.ljust(BAR_WIDTH, "·" if not color else " "), style=row.color if color else ""),
            safe_text(s.pct(row.share)),
            safe_text(s.ms(row.ms)),
        )
    return Group(Text(f"Step-time breakdown ({view.breakdown_caption})", style="bold"), table)


def _findings(report: Report) -> RenderableType:
    if not report.findings:
        from advisor.engine.suppress import SUPPRESSION_NOTE

        if any(SUPPRESSION_NOTE in n for n in report.notes):
            # NOTE: "nothing fired" would be false: rules fired and comments hid them (see notes).
            return Text("No findings left: the rest were suppressed by `# advisor: ignore` comments (see notes).")
        return Text("No findings: nothing in the rules fired for this run.", style="green")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), expand=True)
    table.add_column("Severity", no_wrap=True)
    table.add_column("Rule", no_wrap=True)
    table.add_column("Finding", ratio=1)
    for f in report.findings:
        body = Text()
        body.append(safe_text(f.name, "bold"))
        body.append(f" · {s.category_label(f.category)}")
        if s.finite(f.impact_frac):
            body.append(f" · {s.recoverable(f.impact_frac)}")
        body.append("\n")
        body.append(safe_text(f.message))
        for loc in f.locations:
            body.append("\n  at ")
            body.append(safe_text(s.location_text(loc.file, loc.line, loc.function), "underline"))
        if f.fixes:
            body.append("\n  fix: ")
            body.append(safe_text(", ".join(f"{x.id} ({x.safety})" for x in f.fixes)))
        table.add_row(
            Text(f.severity.upper(), style=s.SEVERITY_RICH.get(f.severity, "")),
            safe_text(f.code, "bold"),
            body,
        )
    return Group(Text(f"Findings ({len(report.findings)})", style="bold"), table)


def _trials(view: ReportView, width: int = WIDTH) -> RenderableType | None:
    rows = view.trials
    if not rows:
        return None
    # NOTE: seven columns of whole numbers need 85+ columns with a cell of padding each side and
    # the interval beside the ratio. Below the default width (issue #32: at 80 columns rich cropped
    # the Loss and Peak mem columns off the table) the padding goes, the header and the interval
    # are stacked on lines of their own, and only the verdict wraps: every width is then decided
    # by whole tokens, none by rich shrinking a column it cannot wrap.
    narrow = width < WIDTH
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0) if narrow else (0, 1))
    # NOTE: never narrower than the longest fix id, so ids wrap at " + ", never mid-name.
    longest = max((len(w) for r in rows for w in r.name.split()), default=18)
    table.add_column("Fix", min_width=max(12, longest), max_width=max(24, longest), overflow="fold")
    table.add_column("Before", justify="right", no_wrap=True)
    table.add_column("After", justify="right", no_wrap=True)
    table.add_column("Speedup\n[95% CI]" if narrow else "Speedup [95% CI]", justify="right", no_wrap=True)
    # NOTE: the verdict wraps at spaces ("no measurable / effect"): seven unwrappable columns
    # were 101 columns wide and rich cropped the last one (Peak mem read "275.3 Mi").
    table.add_column("Verdict", min_width=10, max_width=13 if narrow else None)
    table.add_column("Loss Δ", justify="right", no_wrap=True)
    if view.has_memory:
        table.add_column("Peak mem", justify="right", no_wrap=True)
    combined_at = len(rows) - 1 if rows[-1].combined else -1
    for i, r in enumerate(rows):
        verdict_style = {"improved": "green", "slower": "red", "failed": "bold red"}.get(r.trial.verdict, "")
        name = Text()
        name.append(safe_text(r.name, "bold" if r.combined else ""))
        name.append(safe_text(f"\n{'combined · ' if r.combined else ''}{r.safety}", "dim"))
        table.add_row(
            name,
            safe_text(r.before),
            safe_text(r.after),
            safe_text(r.speedup.replace(" ", "\n") if narrow else r.speedup),
            safe_text(r.verdict, verdict_style),
            safe_text(r.loss),
            *([safe_text(r.memory.replace(" (", "\n("))] if view.has_memory else []),
            end_section=i == combined_at - 1,
        )
    title = Text(f"Fix trials ({view.headline.rate_unit}; interleaved repeats against the baseline)", style="bold")
    if view.has_reference:
        # NOTE: an "on top of X" trial's Before and speedup are X's run, not the baseline.
        title.append("\nRows noted 'on top of X' were measured against X's run, not the baseline.", style="dim")
    parts: list[RenderableType] = [title, table]
    notes = _trial_notes(rows)
    if notes is not None:
        parts.append(notes)
    if view.kept:
        parts.append(Text.assemble("Kept: ", safe_text(", ".join(view.kept), "bold green")))
    if view.case_study:
        parts.append(Text.assemble(safe_text("Case study: ", "bold"), safe_text(view.case_study)))
    return Group(*parts)


def _trial_notes(rows: tuple[TrialRow, ...]) -> RenderableType | None:
    """Say what each trial did, below the table at full width.

    A Note column squeezed beside six others folded every reason mid-word on a 100-column
    terminal; a two-column grid under the table wraps at spaces with a hanging indent.
    """
    grid = Table.grid(padding=(0, 2), expand=True)
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(ratio=1)
    count = 0
    seen: set[str] = set()
    for r in rows:
        if not r.note or (r.combined and r.note in seen):
            continue  # a combined trial of one fix repeats that fix's note
        seen.add(r.note)
        grid.add_row(safe_text("combined" if r.combined else r.trial.fix), safe_text(r.note))
        count += 1
    return grid if count else None


def _diff(report: Report, color: bool) -> RenderableType | None:
    if not report.diff.strip():
        return None
    colors = {"add": "green", "remove": "red", "hunk": "cyan"} if color else {}
    body = Text()
    for line in report.diff.splitlines():
        body.append(safe_text(line, colors.get(s.diff_line_kind(line), "")))
        body.append("\n")
    body.rstrip()
    return Group(Text("Source diff that makes the kept fixes permanent", style="bold"), body)


def _locations(view: ReportView) -> RenderableType | None:
    if not view.locations:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    table.add_column("Kind", no_wrap=True)
    table.add_column("Where", overflow="fold")
    table.add_column("Count/step", justify="right", no_wrap=True)
    table.add_column("Time/step", justify="right", no_wrap=True)
    for loc in view.locations[:TEXT_LOCATIONS]:
        table.add_row(safe_text(loc.kind), safe_text(loc.where), safe_text(loc.count), safe_text(loc.time))
    more = view.locations_total - TEXT_LOCATIONS
    items: list[RenderableType] = [Text(view.locations_title, style="bold"), table]
    if more > 0:
        items.append(Text(f"… and {more} more (see --format json)"))
    return Group(*items)


def _gpu_tables(report: Report) -> RenderableType | None:
    """Render the GPU-time tables (idle by function, roofline, modules, collectives, shapes)."""
    items: list[RenderableType] = []
    for sec in gpu_sections(report):
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
        keep = [i for i in range(len(sec.headers)) if i not in sec.detail]
        for i in keep:
            numeric = sec.numeric[i]
            table.add_column(sec.headers[i], justify="right" if numeric else "left", overflow="fold", no_wrap=numeric)
        for row in sec.rows:
            cells = [safe_text(row[i]) for i in keep]
            detail = " · ".join(row[i] for i in sec.detail if row[i])
            if detail:
                cells[0].append("\n" + detail, style="dim")
            table.add_row(*cells)
        if items:
            items.append(Text(""))
        items += [Text(sec.title, style="bold"), table]
        if sec.note:
            items.append(safe_text(sec.note, "dim"))
    return Group(*items) if items else None


def _status(report: Report) -> RenderableType | None:
    line = s.status_line(report.status, report.trials, report.run.status)
    took = s.timing_line(report.timing)
    if line is None and took is None:
        return None
    return Group(*([Text(line, style="bold yellow")] if line else []), *([safe_text(took, "dim")] if took else []))


def _warnings(report: Report) -> RenderableType | None:
    if not report.warnings:
        return None
    body = Text()
    for i, w in enumerate(report.warnings):
        body.append("! ", style="bold yellow")
        body.append(safe_text(w))
        if i < len(report.warnings) - 1:
            body.append("\n")
    return Group(Text(f"Warnings ({len(report.warnings)})", style="bold yellow"), body)


def _notes(report: Report, width: int) -> RenderableType | None:
    notes = report.all_notes
    if not notes:
        return None
    body = Text()
    for i, n in enumerate(notes):
        body.append("• ")
        body.append(safe_text(n))
        if i < len(notes) - 1:
            body.append("\n")
    # NOTE: a path longer than the line stays whole on its own line (issue #32)
    return Text.assemble(Text("Notes\n", style="bold"), unsplit(body, width), no_wrap=True, overflow="ignore")


def render_text(report: Report, *, color: bool = False, width: int = WIDTH) -> str:
    """Render ``report`` for a terminal.

    Args:
        report: The report to render.
        color: Emit ANSI colours (only for a TTY; golden files use the default, no colour).
        width: Render width in columns.

    Returns:
        The rendered text, ending with a newline.
    """
    view = build_view(report)
    console, buf = make_console(color, width)
    console.print(_summary_panel(report, view))
    sections = [
        _status(report),
        _warnings(report),
        _breakdown(view, color),
        _findings(report),
        _trials(view, width),
        _diff(report, color),
        _locations(view),
        _gpu_tables(report),
        _notes(report, width),
    ]
    for section in sections:
        if section is None:
            continue
        console.print()
        if isinstance(section, Text) and section.no_wrap:
            console.print(section, crop=False, overflow="ignore", no_wrap=True)  # pre-wrapped by unsplit
        else:
            console.print(section)
    console.print(Rule(style="dim"))
    bits = [f"source: {report.source}"] if report.source else []
    bits += [f"advisor {report.advisor_version}", report.created]
    # NOTE: the run's path is never split (issue #32)
    footer = unsplit(safe_text("  ·  ".join(b for b in bits if b), "dim"), width)
    console.print(footer, crop=False, overflow="ignore", no_wrap=True)
    text = buf.getvalue()
    # NOTE: rich pads table rows with trailing spaces; stripping them keeps diffs and golden
    # files clean without changing what a reader sees.
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
