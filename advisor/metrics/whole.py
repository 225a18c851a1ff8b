"""The kept fixes over the whole run: their measured step speedup beside start-up and periodic work.

A trial measures the steady step (:mod:`advisor.fixes.loop`); a user times the whole process. A
fix that halves the step does not halve a run that spends a third of its time starting up or
evaluating. Seen on a script of ours that evaluates every 25 steps (22% of its run): the kept
``cpu_threads`` measured 1.45x on the steps, and the plain script ran 1.29x faster with it
(3 pairs, whole process). This module projects what the user will see:

* **Steps**: the baseline projection's steady step (:func:`advisor.metrics.periodic.project`)
  over the kept trial's speedup, and over its interval's ends for the range.
* **Periodic work**: each periodic function's cost as the baseline projection measured it, at
  the point estimate; at the interval's ends it moves with the steps (faster at the high end,
  slower at a low end under 1), since no trial timed it under the fixes. The
  trials time steps only; the kept fixes' run under the profiler times an occurrence or two,
  which is kept beside it (``seen_s``) and never used: on the script above it read 0.044 s in
  the capture and 0.066 s with the fix, one occurrence each, where the plain script's 50
  evaluations took 0.068-0.070 s with and without it.
* **Start-up**: the baseline's, plus the kept trial's change in time to the first step (its runs
  and their baselines start the same way: the difference is the fixes', worker start-up included).
* **The epoch change** (:data:`~advisor.metrics.periodic.EPOCH_CHANGE`): the baseline's, plus the
  change in its median over the kept trial's runs, where those runs timed it with the fixes and
  without and every run of one side beat every run of the other (:func:`arm_medians
  <advisor.fixes.agreement.arm_medians>`); else held, as other periodic work. A trial's rate
  leaves the step that holds a change out, so its speedup is the steps' only: on a script of
  ours whose loaders start workers by ``spawn`` (7-9 s a change against 14 ms steps), windows
  that held a change read 400 samples/s and windows that did not 1,300. The interval is the
  steps': the change, timed once a run, is held at its point at both ends.
* **End**: the interpreter's exit after the last step (:attr:`RunCapture.end_s`), held. Left
  out, it made the demo's kept fixes 1.45x on the whole run where the plain script ran 1.32x
  faster with them (4 pairs, whole processes).

With the run's length known the scope is the whole run; without it, one step with its share of
the periodic work (what the training loop gains). With neither periodic work nor a length there
is nothing to add to the step's own ratio, and the answer is None.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from advisor._vocab import Vocab
from advisor.capture.model import RunCapture
from advisor.metrics.periodic import (
    EPOCH_CHANGE,
    PeriodicFunction,
    Projection,
    best_measured,
    by_function,
    project,
)


class WholeScope(Vocab):
    """What :class:`KeptWholeRun` covers."""

    RUN = "run"
    """The run's length is known: start-up, every step and every occurrence of periodic work."""
    TRAINING = "training"
    """The length is unknown: one steady step with its share of the periodic work."""


@dataclass(frozen=True)
class PeriodicChange:
    """One periodic function: its cost per occurrence in the projection, and what the kept fixes' run saw.

    ``seen_s``: the median of the occurrences the kept fixes' run timed (``seen`` of them), None
    when it saw none; shown, not projected (see the module docstring).
    """

    function: str
    period: int
    cost_s: float
    seen_s: float | None = None
    seen: int = 0


@dataclass(frozen=True)
class KeptWholeRun:
    """The projected run (or training step with its periodic work) before and with the kept fixes.

    ``before_s``/``after_s`` are seconds of the whole run (scope ``run``) or of one step with its
    periodic work (scope ``training``); ``low``/``high`` are the ratio at the ends of the kept
    trial's interval (start-up held; the periodic work held at the point and moving with the
    steps at the ends).
    """

    scope: WholeScope
    before_s: float
    after_s: float
    low: float | None = None
    high: float | None = None
    startup_before_s: float | None = None
    startup_after_s: float | None = None
    end_s: float | None = None
    periodic: tuple[PeriodicChange, ...] = ()
    gain_steps: int | None = None
    """The steps the speedup was counted on, when fewer than the run's (``Fix.gains_until``)."""
    epoch_changes: int | None = None
    """How many times the epoch changes in the run, where the kept trial's runs timed it (else None)."""
    epoch_change_before_s: float | None = None
    """Each change beyond a step, in the projection; ``epoch_change_after_s``: with the kept fixes."""
    epoch_change_after_s: float | None = None

    @property
    def ratio(self) -> float:
        """How many times faster the whole (run or training) is with the kept fixes."""
        return self.before_s / self.after_s if self.after_s > 0 else float("inf")


@dataclass(frozen=True)
class EpochArms:
    """The kept trial's runs' median epoch change (s) without the fixes and with them."""

    change_s: tuple[float, float]


def _changes(p: Projection, kept: RunCapture | None, skip: PeriodicFunction | None = None) -> tuple[PeriodicChange, ...]:
    """One change per periodic function of ``p`` with a period (``skip`` aside), in its order."""
    seen = by_function(kept.between_steps if kept is not None else ())
    out = []
    for f in p.functions:
        if f.period and f is not skip:
            works = seen.get((f.function, f.file, f.line))
            chosen = best_measured(works or [])
            seen_s = float(statistics.median(chosen)) if chosen else None
            out.append(PeriodicChange(f.function, f.period, f.cost_s, seen_s, len(chosen)))
    return tuple(out)


def _periodic_factor(end: float, speedup: float) -> float:
    """How much faster the periodic work is taken at one end of the interval (1 at the point estimate).

    Unmeasured under the fixes, it is held at the point and moves with the steps at the ends: up
    to the interval's high end, down to its low end below 1, never a gain at the low end.
    """
    if end > speedup:
        return max(1.0, end)
    if end < speedup:
        return min(1.0, end)
    return 1.0


def kept_whole_run(
    base: RunCapture,
    kept: RunCapture | None,
    speedup: float | None,
    ci_low: float | None = None,
    ci_high: float | None = None,
    startup_change_s: float | None = None,
    gain_steps: int | None = None,
    epoch: EpochArms | None = None,
) -> KeptWholeRun | None:
    """Project the kept fixes over the whole run (see the module docstring); None when there is nothing to add.

    Args:
        base: The diagnosed capture (its projection is the "before").
        kept: The kept fixes' run under the profiler (the periodic work it saw), or None.
        speedup: The kept trial's measured step speedup.
        ci_low: Its interval's low end (None: no range).
        ci_high: Its interval's high end.
        startup_change_s: The kept trial's median time to the first step less its baselines'.
        gain_steps: The steps the speedup holds on in a plain run, when not all of them (the
            rest keep the baseline's step); the run's length must be known to use it.
        epoch: The kept trial's runs' steps and epoch changes (see the module docstring), or None.
    """
    if not speedup or speedup <= 0:
        return None
    p = project(base)
    if p.step_s is None:
        return None
    # NOTE: without the kept trial's change the epoch change is held, as other periodic work
    change = next((f for f in p.functions if f.function == EPOCH_CHANGE and f.occurrences), None) if epoch is not None else None
    changes = _changes(p, kept, skip=change)
    if p.projected_s is not None and p.steps and p.startup_s is not None:
        startup_after = max(0.0, p.startup_s + (startup_change_s or 0.0))
        periodic = p.periodic_s or 0.0
        held, change_after = 0.0, None
        if change is not None and epoch is not None:
            change_after = max(0.0, change.cost_s + epoch.change_s[1] - epoch.change_s[0])
            periodic -= change.cost_s * (change.occurrences or 0)
            held = change_after * (change.occurrences or 0)
        steps = p.steps
        gained = min(steps, gain_steps) if gain_steps is not None else steps

        def total(step_speedup: float) -> float:
            return (startup_after + (gained / step_speedup + steps - gained) * p.step_s
                    + periodic / _periodic_factor(step_speedup, speedup) + held + (p.end_s or 0.0))

        return KeptWholeRun(
            WholeScope.RUN,
            p.projected_s,
            total(speedup),
            low=p.projected_s / total(ci_low) if ci_low else None,
            high=p.projected_s / total(ci_high) if ci_high else None,
            startup_before_s=p.startup_s,
            startup_after_s=startup_after,
            end_s=p.end_s,
            gain_steps=gained if gained < steps else None,
            periodic=changes,
            epoch_changes=change.occurrences if change is not None else None,
            epoch_change_before_s=change.cost_s if change is not None else None,
            epoch_change_after_s=change_after,
        )
    if not changes:
        return None
    periodic = sum(c.cost_s / c.period for c in changes)
    before = p.step_s + periodic

    def per_step(step_speedup: float) -> float:
        return p.step_s / step_speedup + periodic / _periodic_factor(step_speedup, speedup)

    return KeptWholeRun(
        WholeScope.TRAINING,
        before,
        per_step(speedup),
        low=before / per_step(ci_low) if ci_low else None,
        high=before / per_step(ci_high) if ci_high else None,
        periodic=changes,
    )

