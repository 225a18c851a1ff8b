"""The fix loop's output: one :class:`Trial` per intervention tried, plus the combined set."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from advisor._vocab import Vocab
from advisor.capture.vocab import MemoryKind
from advisor.engine.model import Safety

SET_SEPARATOR = "+"
"""Joins the ids of fixes measured together into their trial's name (:func:`set_name`)."""


def set_name(fix_ids: Iterable[str]) -> str:
    """Name a trial (or a run) of fixes measured together by their ids: ``pin_memory+tf32``; one id names itself."""
    return SET_SEPARATOR.join(fix_ids)


class Verdict(Vocab):
    """What measuring a fix found."""

    IMPROVED = "improved"  # faster beyond noise
    NO_EFFECT = "no_effect"  # within noise: never reported as a win
    UNDECIDED = "undecided"  # measured, but the interval is too wide to tell: never a win, never "no effect"
    UNMEASURABLE = "unmeasurable"  # runs of one setting disagreed, and every run against every other could not tell
    SLOWER = "slower"
    FAILED = "failed"  # the run crashed, or the loss drifted from the baseline's
    SKIPPED = "skipped"  # not run (not applicable, unsafe without the flag, baseline failed)
    ADVICE = "advice"  # a fix with no safe run-time change: its diff is offered, never measured


class Interval(Vocab):
    """What a trial's interval on its speedup is."""

    CI95 = "ci95"  # a 95% confidence interval over paired runs
    RUN_RANGE = "run_range"  # runs disagreed: every run against every other, slowest to fastest


@dataclass(frozen=True)
class Trial:
    """One fix (or a set of fixes, for the combined run) measured against the baseline.

    Attributes:
        fix: The trial's name: its fix id, or ``+``-joined ids for the combined trial (a label
            for display; ``fixes`` holds the ids).
        safety: Whether the fix keeps numerics (:class:`~advisor.engine.model.Safety`).
        baseline_samples_per_s: Median baseline throughput over the interleaved repeats.
        samples_per_s: Median throughput with the fix.
        speedup: Median of paired ratios variant/baseline.
        ci_low / ci_high: Interval on the speedup, of the kind ``interval`` names.
        interval: ``ci95``: a 95% confidence interval over paired runs; ``run_range``: runs of
            one setting disagreed, and the interval is the range of every run against every
            other (:func:`advisor.fixes.stats.range_estimate`).
        verdict: What the measurement found (:class:`Verdict`).
        loss_max_rel_diff: Largest relative loss deviation from the baseline over the first steps.
        reason: Why it was skipped/failed, or what it changed.
        repeats: Paired repeats measured.
        time_to_first_step_s: Median time to first step with the fix (compile cost shows here).
        baseline_time_to_first_step_s: The same for the baseline.
        params: Parameters the fix ran with (e.g. ``{"num_workers": 2}``); for a combined
            trial, fix id -> that fix's parameters.
        fixes: The fix ids measured together (one for a single fix's trial).
        reference: The run the trial was measured against when it is not the plain baseline
            (``dataloader_workers@2`` for a fix measured on top of the best workers rung);
            None for the baseline.
        peak_memory_bytes: Median peak memory of the runs with the fix (CUDA max allocated on a
            GPU, peak RSS of the script's process on CPU).
        baseline_peak_memory_bytes: The same for the runs it was measured against.
        memory_kind: ``cuda`` or ``rss``: what the peak memory counts.
        unfinished: Still being measured when the report was written (the loop was running or
            was interrupted): its figures are from the pairs measured so far.
        estimate: The largest speedup the diagnosis predicted for this fix before it ran
            (:class:`~advisor.fixes.bounds.GainBound`), beside which the measurement is shown;
            None when nothing predicted one (or the trial is relative to another fix's run).
        estimate_basis: Where ``estimate`` comes from: ``amdahl`` (the share of the measured
            step in the categories the fix shortens: a true upper bound) or ``finding`` (the
            recoverable share the findings that suggested it estimated).
        step_ms: The median timed step of the runs with the fix (the median over runs of each
            run's median); None in an older report.
        baseline_step_ms: The same for the runs it was measured against.
        epoch_change_s: The median change of the training loader's epoch the runs with the fix
            saw, one step included (:class:`~advisor.capture.between.EpochGap`); None when none
            saw one.
        baseline_epoch_change_s: The same for the runs it was measured against.
    """

    fix: str
    safety: Safety
    baseline_samples_per_s: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    interval: Interval = Interval.CI95
    verdict: Verdict = Verdict.SKIPPED
    loss_max_rel_diff: float | None = None
    reason: str = ""
    repeats: int = 0
    time_to_first_step_s: float | None = None
    baseline_time_to_first_step_s: float | None = None
    params: dict[str, object] = field(default_factory=dict)
    fixes: tuple[str, ...] = ()
    reference: str | None = None
    peak_memory_bytes: int | None = None
    baseline_peak_memory_bytes: int | None = None
    memory_kind: MemoryKind | None = None
    unfinished: bool = False
    estimate: float | None = None
    estimate_basis: str = ""
    step_ms: float | None = None
    baseline_step_ms: float | None = None
    epoch_change_s: float | None = None
    baseline_epoch_change_s: float | None = None

    def __post_init__(self) -> None:
        # NOTE: producers may pass the plain words ("improved", "safe"); hold the members.
        object.__setattr__(self, "verdict", Verdict.parse(self.verdict))
        object.__setattr__(self, "interval", Interval.parse(self.interval))
        object.__setattr__(self, "safety", Safety.parse(self.safety))
        if not self.fixes and self.fix:
            object.__setattr__(self, "fixes", (self.fix,))
        elif not isinstance(self.fixes, tuple):
            object.__setattr__(self, "fixes", tuple(self.fixes))

    @property
    def beat_estimate(self) -> bool:
        """Whether the measurement beat its prediction beyond doubt: the interval's low end is above it.

        An Amdahl bound that is beaten is a wrong bound (the breakdown misplaced time, or the fix
        shortens more than it declares); a finding's estimate that is beaten was too modest.
        """
        return self.estimate is not None and self.ci_low is not None and self.ci_low > self.estimate

    @property
    def memory_ratio(self) -> float | None:
        """Peak memory with the fix over the reference's (below 1: the fix saves memory)."""
        if not self.peak_memory_bytes or not self.baseline_peak_memory_bytes:
            return None
        return self.peak_memory_bytes / self.baseline_peak_memory_bytes


@dataclass(frozen=True)
class FixOutcome:
    """Every trial, the combined trial of the kept fixes, and the source diff that makes them permanent.

    Attributes:
        trials: One trial per fix tried (or skipped), in the order they were considered.
        combined: The kept fixes measured together (the single trial when one fix is kept). When
            the combination lost to the best single fix, this is still the combination's run and
            only that fix is kept; ``Report.kept_trial`` gives the kept set's measurement.
        kept: Ids of the fixes that helped and are kept.
        diff: Unified diff of the user's script making the kept fixes permanent.
        notes: Remarks about the loop (hidden fixes, fallbacks, failures of the baseline).
        hidden_unsafe: Unsafe fix ids that were suggested but not tried (no ``--unsafe-fixes``).
        kept_trials: The trials behind ``kept`` (their params feed the diff).
        wall_s: Wall time of the whole loop.
        runs: Trial runs made (baselines included).
        phases_s: Those runs' ``RunCapture.phases_s`` summed: where the loop's time went.
        kept_run: The run directory, relative to the diagnosed run's, where the kept fixes ran
            once under the profiler (its trace is the "after" of the baseline's); "" when none.
        starts: Trial runs per start kind (``cold``, ``warm``: :class:`~advisor.capture.model.StartKind`).
    """

    trials: tuple[Trial, ...] = ()
    combined: Trial | None = None
    kept: tuple[str, ...] = ()
    diff: str = ""
    notes: tuple[str, ...] = ()
    hidden_unsafe: tuple[str, ...] = ()
    kept_trials: tuple[Trial, ...] = ()
    wall_s: float | None = None
    runs: int = 0
    phases_s: dict[str, float] = field(default_factory=dict)
    kept_run: str = ""
    starts: dict[str, int] = field(default_factory=dict)
