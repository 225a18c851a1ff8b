"""Whether runs of the same setting agree, and, when they do not, what the runs that differ shared.

The paired interval of :mod:`advisor.fixes.stats` assumes that runs of one setting differ only
by noise. On a machine whose other work comes and goes that fails: an unchanged script measured
31, 54, 94 and 1,070 samples/s in four runs of one diagnose, and an interval over pairs of such
runs can "show" any speedup. So every measurement first compares the runs of each setting with
each other (:func:`disagreement`): when the slowest and the fastest are a factor of
:data:`DISAGREEMENT` or more apart, the runs are not one population, the
verdict is taken from every run against every other instead
(:func:`~advisor.fixes.stats.range_estimate`: a fix is faster only when its slowest run beats
the baseline's fastest), and :func:`explain` looks for what the slow runs had in common in what
each run recorded: how it started (forked warm or cold), the machine's load and the CPU other
processes took while it ran, the threads it held, the page faults its steps took (glibc's malloc
hands memory back in some processes of one script and not in others: rule HB005), and whether
its own steps were steady.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from advisor._num import median
from advisor._steady import SteadyState, assess

__all__ = ["DISAGREEMENT", "RunFacts", "arm_medians", "change_note", "disagreement", "explain", "facts_of", "rate_range"]

DISAGREEMENT = 2.0
"""Runs of one setting this factor apart (fastest over slowest) or more are not one population.

Runs of an unchanged script do differ as wholes, and pairing absorbs that: on a quiet machine
the demo's data-loading example ran its baseline at 249-339 and 245-404 samples/s in two
diagnoses (up to 1.6x apart, each run steady inside), and its paired interval still decided.
A factor of 2 is past that, and far below what a machine whose load changes does (31 to 1,070
samples/s, 34x, in the run that opened issue #26)."""


FAULTS_APART = 2.0
"""Page faults per step this factor apart or more between the slow and the fast runs name the
allocator: the captures of one CNN script took 115-268 in one state and 1,708-4,914 in the other."""


@dataclass(frozen=True)
class RunFacts:
    """What one measured run recorded besides its rate, for telling why runs differ.

    Attributes:
        rate: Its throughput (None: the run measured nothing).
        start: ``warm`` (forked from the warm-start server) or ``cold``.
        load: Mean load average while it ran.
        other_frac: Share of the machine's CPU other processes used while it ran.
        threads: Most threads its process tree held.
        faults_per_step: Minor page faults per timed step of its main process (``kernel``).
        steadiness: Its own steps' verdict (:class:`~advisor._steady.SteadyState`).
        steady_detail: What was unsteady about its steps ("" when steady).
        step_ms: The median of its timed steps (an epoch change inside one does not move it).
        epoch_gap_s: The median of the changes of the training loader's epoch it saw, unprofiled
            (:class:`~advisor.capture.between.EpochGap`); None when it saw none.
    """

    rate: float | None
    start: str = "cold"
    load: float | None = None
    other_frac: float | None = None
    threads: int | None = None
    faults_per_step: float | None = None
    steadiness: SteadyState = SteadyState.STEADY
    steady_detail: str = ""
    step_ms: float | None = None
    epoch_gap_s: float | None = None


def facts_of(cap: Any, rate: float | None) -> RunFacts:
    """Read a finished capture's :class:`RunFacts` (missing fields stay None)."""
    cpu = getattr(cap, "cpu", None)
    timed = getattr(cap, "timed", None)
    verdict = assess(tuple(getattr(timed, "step_times_ms", ()) or ()))
    kernel = getattr(cap, "kernel", None)
    return RunFacts(
        rate=rate,
        start=str(getattr(cap, "start", "cold") or "cold"),
        load=_num(getattr(cpu, "load_avg_mean", None)),
        other_frac=_num(getattr(cpu, "other_util_frac", None)),
        threads=getattr(cpu, "max_threads", None),
        faults_per_step=getattr(kernel, "faults_per_step", None),
        steadiness=verdict.state,
        steady_detail=verdict.detail,
        step_ms=median(getattr(timed, "step_times_ms", ()) or ()),
        epoch_gap_s=median(g.seconds for g in getattr(cap, "epoch_gaps", ()) or () if not g.profiled),
    )


def arm_medians(facts: Sequence[RunFacts], ref_facts: Sequence[RunFacts]) -> dict[str, float | None]:
    """Return a trial's step and epoch change, each the median over its runs, with the fix and without.

    Keys are :class:`~advisor.fixes.model.Trial` fields. The change with the fix is given only
    where it separated: two runs or more a side, and every run of one side beyond every run of
    the other (changes of one script took 7.0-9.7 s without a fix that did nothing to them).
    """
    before, after = _changes(ref_facts), _changes(facts)
    return {
        "step_ms": median([f.step_ms for f in facts if f.step_ms]),
        "baseline_step_ms": median([f.step_ms for f in ref_facts if f.step_ms]),
        "epoch_change_s": median(after) if _separated(before, after) else None,
        "baseline_epoch_change_s": median(before),
    }


def _changes(facts: Sequence[RunFacts]) -> list[float]:
    return [f.epoch_gap_s for f in facts if f.epoch_gap_s is not None]


def _separated(before: Sequence[float], after: Sequence[float]) -> bool:
    return len(before) >= 2 and len(after) >= 2 and (max(after) < min(before) or min(after) > max(before))


def change_note(facts: Sequence[RunFacts], ref_facts: Sequence[RunFacts]) -> str:
    """Say how long the epoch change took without the fix and with it, where runs of both saw one ("" otherwise).

    The rate leaves the step that holds a change out (:meth:`StepRecorder.timed_phase`), so a
    fix whose gain is at the change (``persistent_workers``) shows it here, not in its speedup.
    """
    before, after = _changes(ref_facts), _changes(facts)
    if not before or not after:
        return ""
    verdict = ("every run of one side beyond every run of the other" if _separated(before, after)
               else "held in the whole-run projection: the runs overlap or are too few")
    return (f"the epoch change (left out of the rate) took {_runs_text(before)} without it and {_runs_text(after)} with it "
            f"({verdict})")


def _runs_text(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f} s" if len(values) == 1 else f"{lo:.2f}-{hi:.2f} s over {len(values)} runs"


def rate_range(rates: Sequence[float | None]) -> tuple[float, float] | None:
    """Return (slowest, fastest) of the positive rates, None with fewer than two."""
    xs = [r for r in rates if r is not None and r > 0 and math.isfinite(r)]
    return (min(xs), max(xs)) if len(xs) >= 2 else None


def disagreement(rates: Sequence[float | None], limit: float = DISAGREEMENT) -> tuple[float, float] | None:
    """Return (slowest, fastest) when runs of one setting are a factor of ``limit`` or more apart, else None.

    A difference that large between runs of the *same* thing is more than the noise a paired
    interval can absorb: it is a change in the machine or in the run, not in the fix.
    """
    span = rate_range(rates)
    if span is None or span[1] < span[0] * limit:
        return None
    return span


def explain(runs: Sequence[RunFacts]) -> str:
    """Say what the slow runs of one setting had in common, from what each run recorded.

    The runs are split at the geometric middle of their slowest and fastest rate; a recorded
    condition explains the split when it separates the two groups completely (every slow run
    started cold and every fast one warm; every slow run shared the machine with more other
    work than any fast one). Runs whose own steps were unsteady are named too. Returns "" when
    nothing recorded separates them.
    """
    measured = [r for r in runs if r.rate is not None and r.rate > 0]
    span = rate_range([r.rate for r in measured])
    if span is None:
        return ""
    mid = math.sqrt(span[0] * span[1])
    slow = [r for r in measured if r.rate is not None and r.rate < mid]
    fast = [r for r in measured if r.rate is not None and r.rate >= mid]
    found: list[str] = []
    starts_slow, starts_fast = {r.start for r in slow}, {r.start for r in fast}
    if len(starts_slow) == 1 and len(starts_fast) == 1 and starts_slow != starts_fast:
        found.append(f"the {next(iter(starts_slow))}-started runs were the slow ones, the "
                     f"{next(iter(starts_fast))}-started the fast ones")
    other = _separates(slow, fast, "other_frac")
    if other is not None:
        (s_lo, s_hi), (f_lo, f_hi) = other
        found.append(
            f"other processes took {_pct(s_lo, s_hi)} of the CPU during the slow runs against "
            f"{_pct(f_lo, f_hi)} during the fast ones"
        )
    load = _separates(slow, fast, "load")
    if load is not None and other is None:
        (s_lo, s_hi), (f_lo, f_hi) = load
        found.append(f"the load average was {_span(s_lo, s_hi)} during the slow runs against "
                     f"{_span(f_lo, f_hi)} during the fast ones")
    threads = _separates(slow, fast, "threads")
    if threads is not None:
        (s_lo, s_hi), (f_lo, f_hi) = threads
        found.append(f"the slow runs held {_span(s_lo, s_hi, 0)} threads, the fast ones {_span(f_lo, f_hi, 0)}")
    faults = _separates(slow, fast, "faults_per_step")
    if faults is not None and faults[0][0] >= FAULTS_APART * max(faults[1][1], 1.0):
        (s_lo, s_hi), (f_lo, f_hi) = faults
        found.append(f"the slow runs took {_span(s_lo, s_hi, 0)} page faults per step, the fast ones "
                     f"{_span(f_lo, f_hi, 0)} (glibc's malloc handing memory back in some processes: HB005)")
    unsteady = [r for r in measured if r.steadiness not in (SteadyState.STEADY, SteadyState.SETTLED_LATE)]
    if unsteady:
        worst = min(unsteady, key=lambda r: r.rate or 0.0)
        found.append(f"{len(unsteady)} of the {len(measured)} runs were not steady inside "
                     f"(in the slowest of them, {worst.steady_detail})")
    return "; ".join(found)


def _num(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _separates(
    slow: Sequence[RunFacts], fast: Sequence[RunFacts], attr: str,
) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """Return the two groups' ranges of ``attr`` when every slow run's value exceeds every fast run's."""
    s = [v for v in (getattr(r, attr) for r in slow) if v is not None]
    f = [v for v in (getattr(r, attr) for r in fast) if v is not None]
    if not s or not f or len(s) < len(slow) or len(f) < len(fast):
        return None
    if min(s) <= max(f):
        return None
    return (min(s), max(s)), (min(f), max(f))


def _pct(lo: float, hi: float) -> str:
    return f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo:.0%}–{hi:.0%}"


def _span(lo: float, hi: float, digits: int = 1) -> str:
    return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) else f"{lo:.{digits}f}–{hi:.{digits}f}"
