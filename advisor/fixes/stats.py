"""Benchmark statistics for fix trials: paired speedups, their confidence interval, the verdict.

Each trial interleaves baseline (A) and variant (B) runs: ``A B A B ... A``. A variant run is
paired with the geometric mean of the baseline runs just before and just after it, which cancels
slow drift of the machine (other processes, thermal state) to first order. The speedup is the
median of the paired ratios ``variant / baseline`` of steady samples/s.

Confidence interval: a Student-t interval on the mean of the log-ratios, exponentiated. With 3 to
5 pairs a bootstrap of the median has too few distinct resamples to mean anything, while the
t interval on logs is exact for log-normal noise and honest (wide) when pairs disagree. Its variance
pools the pairs' spread with the reference runs measured against each other
(:func:`reference_residuals`): pairs can agree by chance, the reference's own scatter cannot be
argued away. A fix is
``improved`` only when the whole interval lies above 1 *and* the median beats a minimum effect
(default 3%); ``slower`` when the interval lies below 1 and the median loses at least that much.
Otherwise the interval holds 1, and that means two different things: ``no_effect`` when it also
rules out any large effect, ``undecided`` (with the reason) when it does not -- an interval that
reaches past a 25% gain on one side and a 25% loss on the other (``[0.02, 60.89]`` says nothing),
or a median 25% or more away from 1 (a combination measured at 0.53x is not "no effect"). Neither
is ever a win.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_EFFECT = 0.03
"""Smallest speedup (either way) reported as an effect: 3%, below the run-to-run noise here."""

DECISIVE_EFFECT = 0.25
"""A change this large (25% faster, or 1/1.25 = 0.8x) matters to anyone: an interval that allows
it on both sides, or a median this far from 1, cannot be called "no effect". Three pairs with the
~10% per-pair noise of a quiet shared machine (FACTS.md) give about [0.78, 1.28]: the limit sits
at that width, so quiet-machine trials still decide and busy-machine ones do not pretend to."""

SINGLE_PAIR_EFFECT = 0.15
"""With one pair there is no noise estimate; only a change beyond the ~15% noise seen on this
kind of shared machine (FACTS.md) counts, and the interval is left empty."""

# Two-sided 95% Student-t quantiles by degrees of freedom (1..30); beyond, the normal 1.96.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


@dataclass(frozen=True)
class Estimate:
    """A speedup estimate from paired ratios.

    Attributes:
        speedup: Median of the paired ratios (None without pairs).
        ci_low / ci_high: 95% interval (None with fewer than two pairs).
        verdict: ``improved``, ``no_effect``, ``undecided``, ``slower`` or (from
            :func:`range_estimate`) ``unmeasurable``.
        pairs: Number of pairs used.
        reason: Why the verdict is ``undecided`` ("" otherwise).
    """

    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str
    pairs: int
    reason: str = ""


def t_quantile(df: int, alpha: float = 0.05) -> float:
    """Two-sided ``1 - alpha`` Student-t quantile for ``df`` degrees of freedom.

    95% comes from the table; any other level is found by bisection on the t distribution's
    CDF (through the regularised incomplete beta function), to 1e-9.
    """
    if df < 1:
        raise ValueError("need at least one degree of freedom")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    if alpha == 0.05:
        return _T975[df - 1] if df <= len(_T975) else 1.96
    target = alpha / 2.0  # upper-tail probability
    lo, hi = 0.0, 1.0
    while _t_upper_tail(hi, df) > target:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_upper_tail(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return (lo + hi) / 2.0


def _t_upper_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0: half the regularised incomplete beta I_x(df/2, 1/2), x = df/(df+t^2)."""
    return 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) by its continued fraction (modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only on this side
        return 1.0 - _betainc(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return math.exp(log_front) * h / a


def paired_ratios(
    baseline: Sequence[float | None], variant: Sequence[float | None]
) -> list[float]:
    """Ratios of each variant run to its sandwiching baselines (geometric mean of A[i], A[i+1]).

    Args:
        baseline: Baseline throughputs ``A[0..n]`` (one more than the variant runs when the
            sequence ends with a baseline; a missing value is None).
        variant: Variant throughputs ``B[0..n-1]``, run between ``A[i]`` and ``A[i+1]``.

    Returns:
        One ratio per variant run that has a positive value and at least one positive neighbour.
    """
    out: list[float] = []
    for i, b in enumerate(variant):
        if not b or b <= 0:
            continue
        around = [a for a in baseline[i : i + 2] if a and a > 0]
        if not around:
            continue
        ref = math.exp(sum(math.log(a) for a in around) / len(around))
        out.append(b / ref)
    return out


def round_ratios(partner: Sequence[float | None], variant: Sequence[float | None]) -> list[float]:
    """Ratios of each variant run to its partner's run of the same round (both between the same two references).

    In a measurement ``A P V A V P A`` against the plain baseline ``A``, a fix ``V`` built on
    top of ``P`` is judged against ``P``: each round's ``V[i] / P[i]``, neighbours in time, the
    same baseline runs around both. Rounds where either run failed (None) or was not run give
    no ratio.
    """
    return [b / a for a, b in zip(partner, variant, strict=False) if a and b and a > 0 and b > 0]


def reference_residuals(baseline: Sequence[float | None]) -> list[float]:
    """Measure the reference against itself: each inner reference run over its neighbours (logs).

    ``log A[i] - (log A[i-1] + log A[i+1]) / 2`` is built exactly like a pair's log-ratio, so with
    no effect at all it has the pair's noise and expectation 0, and, like a pair, it cancels a
    linear drift. Two pairs can agree by chance while the reference runs around them scatter by
    35% (the demo's combined trial: 1.63x and 1.63x between baselines of 285, 387 and 312
    samples/s); these residuals are how :func:`estimate` hears that scatter.
    """
    out: list[float] = []
    for prev, mid, nxt in zip(baseline, baseline[1:], baseline[2:], strict=False):
        if all(x and x > 0 and math.isfinite(x) for x in (prev, mid, nxt)):
            out.append(math.log(mid) - (math.log(prev) + math.log(nxt)) / 2.0)  # type: ignore[arg-type]
    return out


def paired_estimate(
    baseline: Sequence[float | None], variant: Sequence[float | None],
    min_effect: float = MIN_EFFECT, alpha: float = 0.05, history: Sequence[float | None] | None = None,
) -> Estimate:
    """:func:`estimate` of a sandwiched measurement, its noise pooled with the reference's own.

    ``history``: every run of the reference's configuration in the whole diagnose, in the order
    they ran (this measurement's among them); its residuals replace those of ``baseline`` alone,
    so a level the configuration held in an earlier stage and left is heard too.
    """
    nulls = reference_residuals(baseline if history is None else history)
    return estimate(paired_ratios(baseline, variant), min_effect, alpha, nulls)


def estimate(
    ratios: Sequence[float], min_effect: float = MIN_EFFECT, alpha: float = 0.05,
    null_residuals: Sequence[float] = (),
) -> Estimate:
    """Median speedup, ``1 - alpha`` (95%) interval over log-ratios, and the verdict they support.

    Args:
        ratios: Paired ratios variant/baseline (each > 0).
        min_effect: Smallest relative change counted as an effect.
        alpha: One minus the interval's confidence (a stricter level for an early look, see
            :func:`decided_early`).
        null_residuals: Log-ratios of the same design known to have no effect
            (:func:`reference_residuals`). Their squares are pooled with the pairs' spread, one
            degree of freedom each, so pairs that agree by chance cannot make an interval
            narrower than the machine's run-to-run noise.

    Returns:
        The :class:`Estimate`; without ratios the verdict is ``no_effect`` and fields are None.
    """
    rs = [r for r in ratios if r > 0 and math.isfinite(r)]
    n = len(rs)
    if n == 0:
        return Estimate(None, None, None, "no_effect", 0)
    med = statistics.median(rs)
    if n == 1:
        verdict = "no_effect"
        if med >= 1 + SINGLE_PAIR_EFFECT:
            verdict = "improved"
        elif med <= 1 - SINGLE_PAIR_EFFECT:
            verdict = "slower"
        return Estimate(med, None, None, verdict, 1)
    logs = [math.log(r) for r in rs]
    mean = statistics.fmean(logs)
    nulls = [x for x in null_residuals if math.isfinite(x)]
    df = n - 1 + len(nulls)
    pooled = (sum((x - mean) ** 2 for x in logs) + sum(x * x for x in nulls)) / df
    half = t_quantile(df, alpha) * math.sqrt(pooled / n)
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    if lo > 1.0 and med >= 1 + min_effect:
        return Estimate(med, lo, hi, "improved", n)
    if hi < 1.0 and med <= 1 - min_effect:
        return Estimate(med, lo, hi, "slower", n)
    verdict, reason = _no_effect_or_undecided(med, lo, hi, n)
    return Estimate(med, lo, hi, verdict, n, reason)


MIN_PAIRS = 2
"""A trial is never decided on fewer pairs: one pair has no noise estimate at all."""


def range_estimate(
    baseline: Sequence[float | None], variant: Sequence[float | None], min_effect: float = MIN_EFFECT,
) -> Estimate:
    """Judge a fix from every run against every other, for runs that are not one population.

    When runs of one setting disagree (:func:`advisor.fixes.agreement.disagreement`), pairs of
    neighbouring runs no longer cancel the machine's changes, and a t interval over them means
    nothing. What still holds without any model of the noise is the range: the fix's speedup
    lies between its slowest run over the baseline's fastest and its fastest over the
    baseline's slowest. The fix is ``improved`` only when even the first clears the minimum
    effect, ``slower`` when even the second loses it, and otherwise ``unmeasurable`` ("not
    measurable here"), never ``no_effect``: the runs could not tell. The point estimate is the
    median of the usual paired ratios, which always lies inside that range.

    Args:
        baseline: Baseline throughputs of the measurement (None where a run failed).
        variant: The fix's throughputs.
        min_effect: Smallest relative change counted as an effect.
    """
    refs = [a for a in baseline if a and a > 0 and math.isfinite(a)]
    vals = [b for b in variant if b and b > 0 and math.isfinite(b)]
    if not refs or not vals:
        return Estimate(None, None, None, "no_effect", 0)
    lo, hi = min(vals) / max(refs), max(vals) / min(refs)
    ratios = paired_ratios(baseline, variant)
    med = statistics.median(ratios) if ratios else statistics.median(vals) / statistics.median(refs)
    med = min(max(med, lo), hi)
    pairs = len(ratios) or min(len(refs), len(vals))
    if lo >= 1.0 + min_effect:
        return Estimate(med, lo, hi, "improved", pairs)
    if hi <= 1.0 - min_effect:
        return Estimate(med, lo, hi, "slower", pairs)
    return Estimate(
        med, lo, hi, "unmeasurable", pairs,
        f"not measurable here: every run against every other gives {lo:.2f}x to {hi:.2f}x",
    )


def decided_early(
    baseline: Sequence[float | None], variant: Sequence[float | None], looks: int,
    min_effect: float = MIN_EFFECT, history: Sequence[float | None] | None = None,
) -> bool:
    """Whether a trial may stop before its planned rounds: its interval decides, corrected for repeated looks.

    Stopping as soon as a 95% interval happens to clear 1 would turn the repeated looks into
    repeated chances of a false win. Each early look therefore uses a Bonferroni-corrected
    interval (``alpha = 0.05 / looks``, ``looks`` being every look the plan allows), so the
    chance that *any* look decides wrongly stays within 5%; the reported interval is the plain
    95% one over the pairs measured, which a stricter interval that decided always agrees with.
    The trial stops when that stricter interval says ``improved`` or ``slower``, or lies wholly
    below ``1 + min_effect`` (no win is possible any more: more pairs would not change what is
    kept). Never before :data:`MIN_PAIRS` pairs.
    """
    return decides(paired_estimate(baseline, variant, min_effect, alpha=0.05 / max(1, looks), history=history),
                   min_effect)


def decides(est: Estimate, min_effect: float = MIN_EFFECT) -> bool:
    """Whether an early look's estimate (its interval already corrected for the looks) stops the trial.

    See :func:`decided_early`: ``improved`` or ``slower``, or an interval wholly below
    ``1 + min_effect``; never before :data:`MIN_PAIRS` pairs.
    """
    if est.pairs < MIN_PAIRS:
        return False
    if est.verdict in ("improved", "slower"):
        return True
    return est.ci_high is not None and est.ci_high < 1.0 + min_effect


def _no_effect_or_undecided(med: float, lo: float, hi: float, n: int) -> tuple[str, str]:
    """Tell "no effect" (the interval rules out a large change) from "undecided" (it does not)."""
    big = 1.0 + DECISIVE_EFFECT
    span = f"{med:.2f}x, interval [{lo:.2f}, {hi:.2f}] over {n} pairs"
    if lo < 1.0 / big and hi > big:
        return "undecided", f"too noisy to decide: {span} allows both a {DECISIVE_EFFECT:.0%} gain and loss"
    if med >= big or med <= 1.0 / big:
        return "undecided", f"too noisy to decide: measured {span}, which still holds 1"
    return "no_effect", ""


@dataclass(frozen=True)
class LossCheck:
    """Loss parity of a variant against the baseline over the first steps.

    Attributes:
        max_rel_diff: Largest ``|variant - baseline| / scale`` over the compared steps (None when
            nothing could be compared).
        failure: Why the variant is rejected (non-finite or far-off loss), or None.
        steps: Steps compared.
    """

    max_rel_diff: float | None
    failure: str | None
    steps: int


def loss_parity(
    baseline: Sequence[float | None], variant: Sequence[float | None], rtol: float
) -> LossCheck:
    """Compare the first losses of a variant with the baseline's (same seed).

    The scale of step ``i`` is ``max(|baseline[i]|, 1e-3 * max|baseline|, 1e-12)``, so a loss that
    is legitimately near zero does not turn rounding into a huge relative error.

    Args:
        baseline: Baseline losses of the first steps (None where not recorded).
        variant: Variant losses of the same steps.
        rtol: Largest accepted relative deviation.

    Returns:
        The :class:`LossCheck`; ``failure`` is set for NaN/inf (where the baseline is finite) or a
        deviation above ``rtol``.
    """
    finite_base = [abs(b) for b in baseline if b is not None and math.isfinite(b)]
    floor = max(max(finite_base, default=0.0) * 1e-3, 1e-12)
    worst: float | None = None
    steps = 0
    for i, (b, v) in enumerate(zip(baseline, variant, strict=False)):
        if b is None or v is None or not math.isfinite(b):
            continue
        if not math.isfinite(v):
            return LossCheck(None, f"loss is {v} at step {i + 1} (baseline {b:.4g})", steps + 1)
        steps += 1
        rel = abs(v - b) / max(abs(b), floor)
        worst = rel if worst is None else max(worst, rel)
    if worst is not None and worst > rtol:
        return LossCheck(
            worst, f"loss is off by {worst:.0%} from the baseline in the first steps (limit {rtol:.0%})", steps
        )
    return LossCheck(worst, None, steps)
