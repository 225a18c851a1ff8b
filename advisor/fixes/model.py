"""The fix loop's output: one :class:`Trial` per intervention tried, plus the combined set."""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor._vocab import Vocab
from advisor.engine.model import Safety


class Verdict(Vocab):
    """What measuring a fix found."""

    IMPROVED = "improved"  # faster beyond noise
    NO_EFFECT = "no_effect"  # within noise: never reported as a win
    UNDECIDED = "undecided"  # measured, but the interval is too wide to tell: never a win, never "no effect"
    SLOWER = "slower"
    FAILED = "failed"  # the run crashed, or the loss drifted from the baseline's
    SKIPPED = "skipped"  # not run (not applicable, unsafe without the flag, baseline failed)


@dataclass(frozen=True)
class Trial:
    """One fix (or a set of fixes, for the combined run) measured against the baseline.

    Attributes:
        fix: Fix id, or ``+``-joined ids for the combined trial.
        safety: Whether the fix keeps numerics (:class:`~advisor.engine.model.Safety`).
        baseline_samples_per_s: Median baseline throughput over the interleaved repeats.
        samples_per_s: Median throughput with the fix.
        speedup: Median of paired ratios variant/baseline.
        ci_low / ci_high: Confidence interval on the speedup.
        verdict: What the measurement found (:class:`Verdict`).
        loss_max_rel_diff: Largest relative loss deviation from the baseline over the first steps.
        reason: Why it was skipped/failed, or what it changed.
        repeats: Paired repeats measured.
        time_to_first_step_s: Median time to first step with the fix (compile cost shows here).
        baseline_time_to_first_step_s: The same for the baseline.
        params: Parameters the fix ran with (e.g. ``{"num_workers": 2}``).
    """

    fix: str
    safety: Safety
    baseline_samples_per_s: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: Verdict = Verdict.SKIPPED
    loss_max_rel_diff: float | None = None
    reason: str = ""
    repeats: int = 0
    time_to_first_step_s: float | None = None
    baseline_time_to_first_step_s: float | None = None
    params: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # NOTE: producers may pass the plain words ("improved", "safe"); hold the members.
        object.__setattr__(self, "verdict", Verdict.parse(self.verdict))
        object.__setattr__(self, "safety", Safety.parse(self.safety))


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
    """

    trials: tuple[Trial, ...] = ()
    combined: Trial | None = None
    kept: tuple[str, ...] = ()
    diff: str = ""
    notes: tuple[str, ...] = ()
    hidden_unsafe: tuple[str, ...] = ()
    kept_trials: tuple[Trial, ...] = ()
    wall_s: float | None = None
