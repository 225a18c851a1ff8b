"""The view model: every figure a report shows, computed once from a :class:`Report`.

The text, Markdown and HTML renderers only format a :class:`ReportView`; none of them derives a
number itself, so the same figure reads the same in every format (issue #20: text and Markdown
once printed the capture's rate next to a trial's speedup while HTML printed the trial's own
baseline).

Two rules shape the headline:

* **One measurement per line.** The throughput line is the capture's rate (timed steps, no
  profiler). The measured speedup is a separate line whose before, after and ratio all come from
  the kept trial's interleaved repeats: a trial's ratio is never printed next to the capture's
  rate, which was measured at another time (and often under another load).
* **Measured apart from modelled.** The primary bottleneck says how much of the step its
  category takes (measured: the breakdown's shares) and, separately, how much a fix could
  recover (modelled: the rules' ``impact`` estimate and its Amdahl bound, labelled an estimate).
  A compute-bound CPU run spends ~98% of its step in CPU ops, of which a precision or compile
  fix might recover ~30%: printing the 30% as "of step time" read as the measured share.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.engine.evaluate import BREAKDOWN_TO_CATEGORY
from advisor.fixes.model import Trial
from advisor.metrics.model import SourceLocation, StepBasis
from advisor.report import headline as _headline
from advisor.report import style as s
from advisor.report.figures import device_text, part_shares, severity_counts, title_of
from advisor.report.model import Report
from advisor.report.outcome import nothing_kept_reason

MAX_LOCATIONS = 30
"""Source locations the view keeps (the terminal shows fewer; JSON has them all)."""

HOST_SIDE_PARTS = ("cpu_ops", "optimizer", "other", "gpu_idle")
"""Breakdown parts the time of a category with no part of its own shows up in.

Per-op overhead (``small_kernels``) and host-bound steps (``host``) are not a slice of the step
the breakdown can cut out: the time is spent dispatching and launching inside operators
(``cpu_ops``, and ``optimizer`` for those of torch.optim's step: SK009's for-loop update), in
Python between them (``other``) and, on a GPU, as the device waiting for the launches
(``gpu_idle``). The headline names those measured parts instead of saying nothing.
"""

CATEGORY_HOST_PARTS: dict[str, tuple[str, ...]] = {
    "small_kernels": HOST_SIDE_PARTS,
    "host": HOST_SIDE_PARTS,
}
"""Category -> the measured parts its time lies in, for categories without a breakdown part."""

MIN_PART_SHARE = 0.01
"""Parts below this share of the step are left out of the headline's list."""

MOST_OF_STEP = 0.5
"""A category holding at least this share of the step, more than the primary, is named beside it."""


@dataclass(frozen=True)
class Bottleneck:
    """The primary bottleneck, measured share and modelled recovery kept apart.

    Attributes:
        category: Category word (``compute``, ``data_loading``, ...).
        label: Its display name.
        step_frac: Measured share of the step the category's breakdown parts take (None when
            the category has no breakdown part, e.g. ``small_kernels``).
        host_parts: For a category with no breakdown part, the measured parts its time lies
            in (label, share), largest first; empty otherwise.
        recoverable_frac: Modelled share of the step a fix could recover (the rules' estimate).
        estimated_speedup: Amdahl bound if ``recoverable_frac`` of the step went away.
    """

    category: str
    label: str
    step_frac: float | None
    recoverable_frac: float
    estimated_speedup: float
    host_parts: tuple[tuple[str, float], ...] = ()

    @property
    def measured_text(self) -> str:
        """``97.7% of step time (measured)``, or the measured parts a part-less category lies in."""
        if self.step_frac is not None:
            return f"{s.pct(self.step_frac)} of step time (measured)"
        if self.host_parts:
            parts = " + ".join(f"{label} {s.pct(share)}" for label, share in self.host_parts)
            return f"no breakdown part of its own; its time lies in {parts} of step time (measured)"
        return "share of step time not measured for this category"

    @property
    def speedup_text(self) -> str:
        """``up to 1.41× (estimate, Amdahl bound)``."""
        return f"up to {s.times(self.estimated_speedup)} (estimate, Amdahl bound)"

    @property
    def estimate_text(self) -> str:
        """``up to 29.3% of step time → up to 1.41× (estimate, Amdahl bound)``."""
        return f"up to {s.pct(self.recoverable_frac)} of step time → {self.speedup_text}"


@dataclass(frozen=True)
class MostOfStep:
    """The category that takes most of the step when the primary is another (measured).

    The primary is the category with the most *recoverable* time, the rules' estimates; a
    category whose findings carry no estimate (CO004's autograd bookkeeping: the trials measure
    it) or that no rule explains can hold most of the step and still not be primary. An
    inference loop spending 77.5% of its step in CPU ops had "Data loading — 8.6%" as its only
    verdict line, which read as where the step's time goes.

    Attributes:
        category: Category word.
        label: Its display name.
        step_frac: Measured share of the step its breakdown parts take.
        codes: Codes of the findings in it (empty: no rule fired on it).
        estimated: Whether any of those findings estimates a recoverable share.
    """

    category: str
    label: str
    step_frac: float
    codes: tuple[str, ...]
    estimated: bool

    @property
    def text(self) -> str:
        """``77.5% of step time (measured); finding CO004: recoverable share not estimated, ...``."""
        measured = f"{s.pct(self.step_frac)} of step time (measured)"
        if not self.codes:
            return f"{measured}; no rule found a cause to fix in it"
        found = f"finding{'s' if len(self.codes) > 1 else ''} {', '.join(self.codes)}"
        if self.estimated:
            return f"{measured}; {found}, with less to recover than the primary"
        return f"{measured}; {found}: recoverable share not estimated, the fix trials measure it"


@dataclass(frozen=True)
class MeasuredSpeedup:
    """The kept fixes' trial: before, after and ratio from the same interleaved repeats."""

    fixes: tuple[str, ...]
    before: float | None
    after: float | None
    unit: str
    speedup: float
    ci_low: float | None
    ci_high: float | None
    interval: str = "ci95"

    @property
    def ci_text(self) -> str:
        """``[1.51–1.66] 95% CI`` (``... range over runs`` when runs disagreed), or "" without an interval."""
        ci = s.ci(self.ci_low, self.ci_high)
        if not ci:
            return ""
        return f"{ci} range over runs" if self.interval == "run_range" else f"{ci} 95% CI"

    @property
    def ratio_text(self) -> str:
        """``1.59× [1.51–1.66] 95% CI``."""
        return f"{s.times(self.speedup)} {self.ci_text}".strip()

    @property
    def basis_text(self) -> str:
        """``812 → 1,291 samples/s in the trial's interleaved repeats``."""
        return f"{s.rate(self.before)} → {s.rate(self.after)} {self.unit} in the trial's interleaved repeats"


@dataclass(frozen=True)
class Headline:
    """The summary block every format opens with."""

    title: str
    bottleneck: Bottleneck | None
    most_of_step: MostOfStep | None
    rate: float | None
    rate_unit: str
    rate_caption: str
    speedup: MeasuredSpeedup | None
    step_ms: float | None
    step_caption: str
    device: str
    findings: str
    nothing_kept: str | None = None
    """Why no fix was kept, when trials ran and none was (:mod:`advisor.report.outcome`)."""
    kept: tuple[str, ...] = ()
    whole_run: tuple[str, str] | None = None
    """The projected full run and what it holds (:func:`advisor.report.headline.whole_run`)."""
    kept_whole: tuple[str, str] | None = None
    """The kept fixes over the whole run (:func:`advisor.report.headline.kept_whole`)."""

    @property
    def rate_text(self) -> str:
        """``812 samples/s``, or ``—`` when the run has no rate."""
        return f"{s.rate(self.rate)} {self.rate_unit}" if self.rate is not None else "—"

    @property
    def step_text(self) -> str:
        """``39.4 ms``."""
        return s.ms(self.step_ms)

    @property
    def whole_run_text(self) -> str | None:
        """``9.4 s projected (480 steps, 2.7 s start-up, 6.8% between steps)``."""
        return f"{self.whole_run[0]} projected ({self.whole_run[1]})" if self.whole_run else None

    @property
    def kept_whole_text(self) -> str | None:
        """``12.7 s → 8.7 s projected, 1.46× [1.31–1.58]: start-up 3.3 s → 3.6 s``."""
        if not self.kept_whole:
            return None
        head, detail = self.kept_whole
        return f"{head}: {detail}" if detail else head


@dataclass(frozen=True)
class BreakdownRow:
    """One breakdown part: its share of the step and its milliseconds of the headline step."""

    part: str
    label: str
    share: float
    ms: float | None
    color: str


@dataclass(frozen=True)
class TrialRow:
    """One fix trial, formatted once.

    ``name`` joins a combined trial's fixes with `` + `` (spaces, so every format can wrap it).
    """

    trial: Trial
    name: str
    combined: bool
    safety: str
    before: str
    after: str
    speedup: str
    verdict: str
    loss: str
    memory: str
    note: str
    reference: str | None


@dataclass(frozen=True)
class LocationRow:
    """One source location of the analysis."""

    kind: str
    where: str
    count: str
    time: str
    source: str


@dataclass(frozen=True)
class ReportView:
    """Everything the text, Markdown and HTML renderers show, computed once (module doc)."""

    headline: Headline
    breakdown: tuple[BreakdownRow, ...]
    breakdown_caption: str
    trials: tuple[TrialRow, ...]
    has_memory: bool
    has_reference: bool
    kept: tuple[str, ...]
    locations: tuple[LocationRow, ...]
    locations_total: int
    case_study: str = ""
    locations_title: str = "Where in the code"


def _category_shares(report: Report) -> dict[str, float]:
    """Measured share of the step per category that has breakdown parts: their shares, summed."""
    out: dict[str, float] = {}
    for part, share in part_shares(report).items():
        category = BREAKDOWN_TO_CATEGORY.get(part, "other")
        out[category] = out.get(category, 0.0) + share
    return out


def category_step_frac(report: Report, category: str) -> float | None:
    """Measured share of the step in ``category``: its breakdown parts' shares, summed."""
    shares = _category_shares(report)
    if category in shares:
        return shares[category]
    return s.finite(report.breakdown.get(category))


def category_host_parts(report: Report, category: str) -> tuple[tuple[str, float], ...]:
    """Return the measured parts (label, share) a category without a breakdown part lies in."""
    shares = part_shares(report)
    found = [(p, shares[p]) for p in CATEGORY_HOST_PARTS.get(category, ()) if shares.get(p, 0.0) >= MIN_PART_SHARE]
    return tuple((s.part_label(p), v) for p, v in sorted(found, key=lambda pv: -pv[1]))


def _bottleneck(report: Report) -> Bottleneck | None:
    p = report.primary
    if p is None:
        return None
    step_frac = category_step_frac(report, p.category)
    return Bottleneck(
        category=p.category,
        label=s.category_label(p.category),
        step_frac=step_frac,
        recoverable_frac=p.share,
        estimated_speedup=p.estimated_speedup,
        host_parts=category_host_parts(report, p.category) if step_frac is None else (),
    )


def _most_of_step(report: Report, bottleneck: Bottleneck | None) -> MostOfStep | None:
    """Return the category holding most of the step when it is not the primary (see :class:`MostOfStep`)."""
    # NOTE: only beside a primary with a part of its own: per-op overhead (small_kernels) lies in
    # the CPU ops, so the compute share around it is its own time, not another category's.
    if bottleneck is None or bottleneck.step_frac is None:
        return None
    shares = _category_shares(report)
    if not shares:
        return None
    top, frac = max(shares.items(), key=lambda kv: kv[1])
    if top == bottleneck.category or frac < MOST_OF_STEP or frac <= bottleneck.step_frac:
        return None
    found = [f for f in report.findings if f.category == top]
    # NOTE: idle and other are no bottleneck category: they read as their breakdown part does
    label = {"idle": s.part_label("gpu_idle"), "other": s.part_label("other")}.get(top) or s.category_label(top)
    return MostOfStep(
        category=top,
        label=label,
        step_frac=frac,
        codes=tuple(dict.fromkeys(f.code for f in found)),
        estimated=any((s.finite(f.impact_frac) or 0.0) > 0.0 for f in found),
    )


def _speedup(report: Report, unit: str) -> MeasuredSpeedup | None:
    kept = report.kept_trial
    if kept is None or s.finite(kept.speedup) is None:
        return None
    return MeasuredSpeedup(
        fixes=tuple(report.kept_fixes) or tuple(kept.fixes) or (kept.fix,),
        before=s.finite(kept.baseline_samples_per_s),
        after=s.finite(kept.samples_per_s),
        # NOTE: trials always measure samples/s (or steps/s when no samples are counted), the
        # same unit as the capture's rate.
        unit=unit,
        speedup=float(kept.speedup),
        ci_low=s.finite(kept.ci_low),
        ci_high=s.finite(kept.ci_high),
        interval=str(kept.interval),
    )


def build_headline(report: Report) -> Headline:
    """Return the report's headline (see the module doc for what it quotes)."""
    rate, unit = _headline.rate(report)
    step = _headline.step_time(report)
    timed = step.basis == StepBasis.TIMED
    bottleneck = _bottleneck(report)
    return Headline(
        title=title_of(report),
        bottleneck=bottleneck,
        most_of_step=_most_of_step(report, bottleneck),
        rate=rate,
        rate_unit=unit,
        rate_caption=(f"capture: {step.steps} timed step{'s' if step.steps != 1 else ''}, no profiler"
                      if timed else "from the trace"),
        speedup=_speedup(report, unit),
        step_ms=step.ms,
        step_caption=step.caption(),
        device=device_text(report),
        findings=severity_counts(report.findings),
        nothing_kept=nothing_kept_reason(report),
        kept=tuple(report.kept_fixes),
        whole_run=_headline.whole_run(report),
        kept_whole=_headline.kept_whole(report),
    )


def _verdict_label(t: Trial) -> str:
    """Return the verdict in words: ``faster`` for a speed win, ``saves memory`` for a memory fix's win."""
    from advisor.fixes import catalog

    fix = catalog.get_fixes().get(t.fix)
    if t.verdict == "improved" and len(t.fixes) == 1 and fix is not None and fix.objective == "memory":
        return "saves memory"
    return s.VERDICT_LABELS.get(t.verdict, t.verdict)


def _trial_row(t: Trial, combined: bool) -> TrialRow:
    return TrialRow(
        trial=t,
        name=" + ".join(t.fixes) if t.fixes else t.fix,
        combined=combined,
        safety=t.safety,
        before=s.rate(t.baseline_samples_per_s),
        after=s.rate(t.samples_per_s),
        speedup=f"{s.times(t.speedup)} {s.trial_interval(t)}".strip(),
        verdict=_verdict_label(t),
        loss=s.pct(t.loss_max_rel_diff, 2) if t.loss_max_rel_diff is not None else "—",
        memory=s.trial_memory(t),
        note="; ".join(x for x in (s.trial_score(t), t.reason, s.safe_loss_note(t)) if x),
        reference=s.trial_reference(t),
    )


def _step_figures(t: Trial) -> str:
    """``memory −25%, loss Δ 0.12%`` for one measured step of the case study ("" when neither is known)."""
    parts = []
    if t.memory_ratio is not None:
        change = t.memory_ratio - 1.0
        parts.append(f"memory {'+' if change > 0 else '−' if change < 0 else '±'}{abs(change) * 100:.0f}%")
    if t.loss_max_rel_diff is not None:
        parts.append(f"loss Δ {s.pct(t.loss_max_rel_diff, 2)}")
    return ", ".join(parts)


def case_study(report: Report) -> str:
    """Read the kept fixes as a case study: each kept fix in order and what its own trial measured.

    ``baseline 120 samples/s → +dataloader_workers 1.80× (alone) → +persistent_workers 1.05× more
    (on top of dataloader_workers@2) → together 1.92× [1.80–2.01] (measured)``. Every figure is a
    measured trial: a fix alone against the baseline, a fix on top of the one it needs against
    that fix's run, and the kept set together against the baseline. The steps are *not* each
    measured on top of all the fixes before them (that would take a run per prefix), so they are
    labelled by what they were measured against and never multiplied into a cumulative figure.
    A kept fix outside the combined measurement (a memory fix, kept for the memory it saves)
    comes last, apart. "" when fewer than two fixes were kept (the trials table says it all).
    """
    kept = [t for t in report.trials if t.fix in report.kept_fixes]
    if len(kept) < 2:
        return ""
    together = report.kept_trial if report.kept_trial is not None and len(report.kept_trial.fixes) > 1 else None
    if together is None and report.combined is not None and len(report.combined.fixes) > 1:
        together = report.combined if set(report.combined.fixes) <= set(report.kept_fixes) else None
    inside = set(together.fixes) if together is not None else {t.fix for t in kept}
    base = next((t.baseline_samples_per_s for t in kept if t.reference is None and t.baseline_samples_per_s), None)
    steps = [f"baseline {s.rate(base)} samples/s" if base else "baseline"]
    apart = []
    for t in kept:
        against = f"on top of {t.reference}" if t.reference else "alone"
        speed = s.times(t.speedup) + (" more" if t.reference and t.speedup is not None else "")
        figures = ", ".join(x for x in (against, _step_figures(t)) if x)
        (steps if t.fix in inside else apart).append(f"+{t.fix} {speed} ({figures})")
    if together is not None:
        figures = ", ".join(x for x in ("measured together against the baseline", _step_figures(together)) if x)
        steps.append(f"together {s.times(together.speedup)} {s.trial_interval(together)} ({figures})".replace("  ", " "))
    text = " → ".join(steps)
    if apart:
        text += "; kept apart (not in the combined run): " + "; ".join(apart)
    return text


def build_view(report: Report) -> ReportView:
    """Build the view model of ``report``; the renderers format nothing but this."""
    shares = part_shares(report)
    part_ms = _headline.part_ms(report)
    breakdown = tuple(
        BreakdownRow(p, s.part_label(p), shares[p], part_ms.get(p), s.PART_COLORS.get(p, "#888888"))
        for p in s.ordered_parts(shares)
        if shares[p] > 0  # NOTE: a CPU run has no GPU parts; rows of 0% are noise
    )
    trials = tuple(_trial_row(t, False) for t in report.trials)
    if report.combined is not None:
        trials += (_trial_row(report.combined, True),)
    locs: tuple[SourceLocation, ...] = report.locations[:MAX_LOCATIONS]
    scale = _headline.timed_scale(report)  # a trace's ms per step as shares of the headline step
    return ReportView(
        headline=build_headline(report),
        breakdown=breakdown,
        breakdown_caption=_headline.breakdown_caption(report),
        trials=trials,
        has_memory=s.has_memory([r.trial for r in trials]),
        has_reference=any(r.reference is not None for r in trials),
        kept=tuple(report.kept_fixes),
        locations=tuple(
            LocationRow(
                kind=loc.kind,
                where=s.location_text(loc.file, loc.line, loc.function),
                count=s.number(round(loc.count, 2)),
                time=s.ms(loc.time_ms * scale) if loc.time_ms else "—",
                source=loc.source,
            )
            for loc in locs
        ),
        locations_total=len(report.locations),
        case_study=case_study(report),
        locations_title="Where in the code" + s.rank_suffix(report.focus_rank),
    )
