"""Is a window of step times steady? Level shifts, drift and two populations, tested on the steps themselves.

A step time is only worth reporting when the steps it summarises are one population. Harnesses
that time code for a living (pyperf, Google Benchmark, criterion.rs) test for this before they
report anything; so does advisor, for every timed window (the capture's and every trial run's):

- **Level shift** (a changepoint): the best single split of the log step times into a before
  and an after. It counts when the two levels differ by at least :data:`SHIFT` *and* by far more
  than the steps scatter within each part (a robust z of :data:`SHIFT_Z`). A slower start that
  ends in a steady part is warm-up that was still going (:attr:`SteadyState.SETTLED_LATE`): the
  steady part is used and the slow steps are named. Any other shift is
  :attr:`SteadyState.SHIFTED`.
- **Two populations** (:attr:`SteadyState.BIMODAL`): the sorted step times split by a gap of at
  least :data:`GAP`, each side holding at least :data:`MIN_MODE_SHARE` of the steps.
- **Drift** (:attr:`SteadyState.DRIFTING`): the step times trend (Spearman's rank correlation
  with the step index of at least :data:`DRIFT_RHO`) and the last third's median differs from
  the first third's by :data:`DRIFT` or more.
- **Scatter** (:attr:`SteadyState.SCATTERED`): no structure, but the slowest tenth of the steps
  take :data:`SCATTER` times the fastest tenth's or more (p90/p10): a median of such steps is
  one draw of a machine that keeps changing under the run (two threads stalling each other
  beside a busy process scattered one trainer's steps from 250 ms to 3.2 s).

An unsteady window is never silently averaged: it is reported with its spread (p10-p90) and the
steps used. Fewer than :data:`MIN_STEPS` steps are too few to test and count as steady.
Everything is pure Python over at most a few thousand floats (prefix sums: linear time).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from advisor._vocab import Vocab

MIN_STEPS = 6
"""Fewer steps than this are not tested: too few to tell a shift from noise."""
SHIFT = 0.20
"""Smallest level change counted as a shift: 20%, beyond the ~15% a quiet shared machine moves."""
SHIFT_Z = 4.0
"""How far apart two levels must be, in robust standard errors of their medians, to be two levels."""
GAP = 0.30
"""Smallest gap (30%) between two populations of step times."""
MIN_MODE_SHARE = 0.2
"""Each of two populations must hold at least this share of the steps (a rare slow step is an outlier)."""
DRIFT = 0.15
"""Smallest change between the first and last third of a window counted as drift."""
DRIFT_RHO = 0.6
"""Smallest rank correlation between step index and step time counted as a trend."""
SCATTER = 2.0
"""p90/p10 of the steps at or above which a window without other structure is scattered, not steady."""
MIN_SETTLED_SHARE = 0.25
"""A steady tail after a slow start is used only when it holds at least this share of the window."""
MIN_DRIFT_STEPS = 15
"""A trend is tested from this many steps on (thirds of fewer steps are two or three noisy points)."""
_MIN_PART = 4
"""The smallest part of a window on either side of a level shift."""
_MAX_SCAN = 4000
"""Windows longer than this are tested on their last ``_MAX_SCAN`` steps (bounded cost)."""


class SteadyState(Vocab):
    """What a window of step times looks like."""

    STEADY = "steady"
    SETTLED_LATE = "settled_late"  # slower first steps, then steady: the steady part is used
    SHIFTED = "shifted"  # the level changed inside the window (not a warm-up ending)
    BIMODAL = "bimodal"  # two populations of step times
    DRIFTING = "drifting"  # the step time trends up or down across the window
    SCATTERED = "scattered"  # no structure, but the steps spread over a factor of SCATTER or more


@dataclass(frozen=True)
class Steadiness:
    """The verdict on one window of step times, and the part of it that counts.

    Attributes:
        state: What the window looks like (:class:`SteadyState`).
        start: Index of the first step used (after a slow start, where the steady part begins).
        used: Number of steps used, from ``start``.
        total: Steps in the window.
        median_ms / p10_ms / p90_ms: Median and spread of the steps used (None without steps).
        detail: One sentence for a reader: what was found, with the figures.
    """

    state: SteadyState
    start: int
    used: int
    total: int
    median_ms: float | None
    p10_ms: float | None
    p90_ms: float | None
    detail: str = ""

    @property
    def steady(self) -> bool:
        """Whether the steps used are one steady population (a slow start cut off counts)."""
        return self.state in (SteadyState.STEADY, SteadyState.SETTLED_LATE)

    def part(self, values: Sequence[float]) -> list[float]:
        """Return the entries of ``values`` (aligned with the window's steps) that are used."""
        return list(values[self.start : self.start + self.used])


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` in [0, 1] of already sorted values (at least one)."""
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = q * (len(sorted_values) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def spread(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """Return (median, p10, p90) of the positive finite ``values`` (Nones without any)."""
    xs = sorted(v for v in values if _ok(v))
    if not xs:
        return None, None, None
    return statistics.median(xs), quantile(xs, 0.1), quantile(xs, 0.9)


def assess(times_ms: Sequence[float]) -> Steadiness:
    """Test a window of step times for a level shift, two populations and drift.

    Args:
        times_ms: Step times in order (non-positive or non-finite entries are not steps and
            make the window count as steady only over the valid ones).

    Returns:
        The :class:`Steadiness`: which steps count, and why.
    """
    times = [float(t) for t in times_ms]
    total = len(times)
    offset = max(0, total - _MAX_SCAN)
    window = times[offset:]
    if sum(1 for t in window if _ok(t)) < MIN_STEPS or not all(_ok(t) for t in window):
        return _result(SteadyState.STEADY, times, offset, total - offset, "")
    logs = [math.log(t) for t in window]
    split = _best_split(logs)
    if split is not None:
        k, before, after = split
        if before > after:
            tail = logs[k:]
            settled = len(tail) >= max(MIN_STEPS, math.ceil(MIN_SETTLED_SHARE * len(logs)))
            if settled and _best_split(tail) is None and _bimodal(tail) is None:
                head = sorted(window[:k])
                return _result(
                    SteadyState.SETTLED_LATE, times, offset + k, total - offset - k,
                    f"the first {offset + k} of {total} steps were slower "
                    f"({_ms(head[0])}-{_ms(head[-1])} ms, warm-up still going); the {total - offset - k} "
                    f"steady steps after them are used",
                )
        return _result(
            SteadyState.SHIFTED, times, offset, total - offset,
            f"the step time changed level after step {offset + k} of {total}, from {_ms(math.exp(before))} "
            f"to {_ms(math.exp(after))} ms",
        )
    gap = _bimodal(logs)
    if gap is not None:
        low, high, share = gap
        return _result(
            SteadyState.BIMODAL, times, offset, total - offset,
            f"the steps fall in two groups, around {_ms(low)} ms and {_ms(high)} ms "
            f"({share:.0%} of them slow)",
        )
    trend = _drift(logs)
    if trend is not None:
        first, last = trend
        way = "slower" if last > first else "faster"
        return _result(
            SteadyState.DRIFTING, times, offset, total - offset,
            f"the steps got steadily {way} across the window ({_ms(first)} ms in its first third, "
            f"{_ms(last)} ms in its last)",
        )
    whole = _result(SteadyState.STEADY, times, offset, total - offset, "")
    if whole.p10_ms and whole.p90_ms and whole.p90_ms >= SCATTER * whole.p10_ms:
        return replace(
            whole, state=SteadyState.SCATTERED,
            detail=f"the steps scatter from {_ms(whole.p10_ms)} to {_ms(whole.p90_ms)} ms (p10–p90, "
            f"{whole.p90_ms / whole.p10_ms:.1f}x apart)",
        )
    return whole


def steady_times(times_ms: Sequence[float]) -> list[float]:
    """Return the step times that count: the steady part of the window (all of it when unsteady)."""
    return assess(times_ms).part(list(times_ms))


def steady_rate(times_ms: Sequence[float], samples: Sequence[int | None] = (),
                skip: Collection[int] = ()) -> tuple[float | None, float | None]:
    """Return (samples/s, steps/s) over the steps that count, the positions in ``skip`` left out.

    Samples/s is None unless every step used counted its samples.
    """
    if skip:
        kept = [i for i in range(len(times_ms)) if i not in skip]
        aligned = len(samples) == len(times_ms)
        times_ms, samples = [times_ms[i] for i in kept], [samples[i] for i in kept] if aligned else ()
    verdict = assess(times_ms)
    used = [t for t in verdict.part(list(times_ms)) if _ok(t)]
    total_s = sum(used) / 1000.0
    if not used or total_s <= 0:
        return None, None
    counted = verdict.part(list(samples)) if len(samples) == len(times_ms) else []
    per_s = None
    if counted and all(c is not None for c in counted):
        per_s = sum(c or 0 for c in counted) / total_s
    return per_s, len(used) / total_s


def _ok(t: float | None) -> bool:
    return t is not None and isinstance(t, (int, float)) and math.isfinite(t) and t > 0


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def _result(state: SteadyState, times: list[float], start: int, used: int, detail: str) -> Steadiness:
    med, p10, p90 = spread(times[start : start + used])
    return Steadiness(state, start, used, len(times), med, p10, p90, detail)


def _robust_sd(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation: a standard deviation that outliers do not inflate."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return 1.4826 * mad


def _best_split(logs: Sequence[float]) -> tuple[int, float, float] | None:
    """Return (index, median before, median after) of the strongest level shift, or None.

    The split minimises the two parts' summed squared deviations (prefix sums, linear time);
    it counts only when the parts' mean log times differ by :data:`SHIFT` and by :data:`SHIFT_Z`
    standard errors (each part's spread floored at 1%, so identical steps do not divide by zero).
    """
    n = len(logs)
    m = max(_MIN_PART, n // 10)
    if n < 2 * m:
        return None
    s1, s2 = [0.0], [0.0]
    for v in logs:
        s1.append(s1[-1] + v)
        s2.append(s2[-1] + v * v)

    def sse(a: int, b: int) -> float:
        k = b - a
        return (s2[b] - s2[a]) - (s1[b] - s1[a]) ** 2 / k

    best_k = min(range(m, n - m + 1), key=lambda k: sse(0, k) + sse(k, n))
    before, after = logs[:best_k], logs[best_k:]
    mb, ma = statistics.fmean(before), statistics.fmean(after)
    shift = abs(mb - ma)
    if shift < math.log1p(SHIFT):
        return None
    # NOTE: the plain standard deviation, not a robust one: steps that alternate between two
    # levels must read as scatter inside each part (two populations), not as a shift.
    floor = math.log(1.01)
    se = math.sqrt(
        max(statistics.stdev(before), floor) ** 2 / len(before)
        + max(statistics.stdev(after), floor) ** 2 / len(after)
    )
    if shift / se < SHIFT_Z:
        return None
    return best_k, statistics.median(before), statistics.median(after)


def _bimodal(logs: Sequence[float]) -> tuple[float, float, float] | None:
    """Return (low median ms, high median ms, share slow) when the steps form two groups, else None."""
    xs = sorted(logs)
    n = len(xs)
    lo_i = max(1, math.ceil(MIN_MODE_SHARE * n))
    best: tuple[float, int] | None = None
    for i in range(lo_i, n - lo_i + 1):
        gap = xs[i] - xs[i - 1]
        if best is None or gap > best[0]:
            best = (gap, i)
    if best is None or best[0] < math.log1p(GAP):
        return None
    gap, i = best
    low, high = xs[:i], xs[i:]
    # NOTE: two groups are two only when the gap dwarfs the scatter inside each.
    if gap < 2.0 * max(_robust_sd(low), _robust_sd(high)):
        return None
    return math.exp(statistics.median(low)), math.exp(statistics.median(high)), len(high) / n


def _drift(logs: Sequence[float]) -> tuple[float, float] | None:
    """Return (first third's median ms, last third's) when the window trends, else None."""
    n = len(logs)
    if n < MIN_DRIFT_STEPS:
        return None
    third = n // 3
    first, last = statistics.median(logs[:third]), statistics.median(logs[-third:])
    if abs(last - first) < math.log1p(DRIFT):
        return None
    if abs(_spearman(logs)) < DRIFT_RHO:
        return None
    return math.exp(first), math.exp(last)


def _spearman(values: Sequence[float]) -> float:
    """Spearman's rank correlation between position and value (ties share their mean rank)."""
    n = len(values)
    order = sorted(range(n), key=lambda i: values[i])
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    mean = (n - 1) / 2.0
    cov = sum((i - mean) * (r - mean) for i, r in enumerate(ranks))
    var_i = sum((i - mean) ** 2 for i in range(n))
    var_r = sum((r - mean) ** 2 for r in ranks)
    return 0.0 if var_r == 0 else cov / math.sqrt(var_i * var_r)
