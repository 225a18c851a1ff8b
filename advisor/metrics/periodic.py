"""The whole run, not only the median step: start-up, periodic work between steps, a projection.

A capture stops after a few dozen steps, yet a training run also spends time before its first
step (imports, data preparation, model build) and between steps every N iterations (evaluation,
sampling: :mod:`advisor.capture.between`). This module projects the full run from what the
capture measured:

    projected = start-up + steps x steady step + sum over periodic functions of occurrences x cost + end

* **Steady step**: the mean of the timed steps, without those over twice the median (a step
  that holds an evaluation is periodic work, counted below, not step time).
* **Periodic work**, per user function: its cost is the median of its occurrences measured
  outside the profilers (a profiler inflates it), preferring those after the first step (the
  iteration-0 one runs while the hooks still watch every module); its period is the distance
  between two occurrences, or, where the window saw one only, the script's own variable
  (``eval_interval``), or one epoch for work right after the training loader's epoch ended (a
  test pass per epoch), and a note says so. Work every step is step time, not periodic.
* **Length**: the steps of a run that went to its end, else the script's variable
  (``max_iters``, an argparse ``--max-steps``), else its epochs (``--epochs``) times the steps
  of one epoch of the DataLoader its steps iterate (else of its first DataLoader). Without one,
  no projection: the periodic share is then that of the steady training (one period's work
  over one period).
* **The epoch change**: the gap from the training loader's epoch ending to the end of the next
  step (:class:`~advisor.capture.between.EpochGap`), less one steady step and the work at the
  epoch's end timed on its own (a test pass's model calls): what is left is the loaders' start
  (the training loader's workers started again, a test loader's own, the first batch's wait), at
  each change between two epochs. Seen on a script of ours whose loaders start workers by
  ``spawn``: 7-9 s a change against 14 ms steps, and the run projected at 11.5 s where it took
  27-32 s plainly. A rest under 2 steps is not counted (no loader start to speak of). A test
  pass's own time holds its loader's start (:meth:`~advisor.capture.between.BetweenSteps.loader_started`),
  so it is counted after the last epoch too, where no change follows.
* **Start-up**: the time to the end of the first step (and the interpreter's start), less that
  step and the periodic work that ran before it.
* **End**: the interpreter's exit after the last step (:attr:`RunCapture.end_s`), which the
  capture skips; 0 when it was not timed.
* **Generation without a KV cache, one-sample inference**: the lines of a periodic function
  whose model calls read so (:mod:`advisor.metrics.generation`), with the same occurrences;
  their share is of the same projection.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from advisor.capture.between import BetweenWork, is_epochs, is_length, period_hint
from advisor.capture.generation import CallPattern
from advisor.capture.model import RunCapture
from advisor.capture.vocab import RunStatus
from advisor.metrics.generation import RepeatedCalls, repeated_calls
from advisor.metrics.model import SourceLocation

EPOCH = "epoch"
"""``period_from`` of work that runs at each end of the training DataLoader's epochs."""

_OUTLIER = 2.0
"""Timed steps over this many times the median hold work between steps: not steady step time."""

_REPEATED_METRICS = (
    "generation_frac", "generation_s", "generation_calls_count", "generation_tokens_count",
    "generation_positions_count", "generation_period_steps", "generation_occurrences_count",
    "one_sample_frac", "one_sample_s", "one_sample_calls_count", "one_sample_period_steps",
)
"""The metrics of :func:`_repeated_metrics`, None where no line shows the pattern."""

_LOCATION_KINDS = {CallPattern.GENERATION_NO_CACHE: "generation", CallPattern.ONE_SAMPLE: "one_sample"}
"""The location kind (``locations:`` of a rule) of each named pattern's lines."""


@dataclass(frozen=True)
class PeriodicFunction:
    """One user function that runs between steps every ``period`` steps."""

    function: str
    file: str
    line: int
    cost_s: float
    period: int | None
    period_from: str  # "seen", or the script variable it was read from
    occurrences: int | None  # over the whole run (None: its length is unknown)
    measured: int  # occurrences the capture saw
    sites: tuple[RepeatedCalls, ...] = ()  # its lines generating without a cache or inferring one sample at a time
    at_epoch_end: bool = False  # it ran right after the training loader's epochs ended


@dataclass(frozen=True)
class Projection:
    """The whole run as projected from one capture (see the module docstring)."""

    step_s: float | None = None
    steps: int | None = None
    steps_from: str = ""
    startup_s: float | None = None
    end_s: float | None = None
    projected_s: float | None = None
    functions: tuple[PeriodicFunction, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def periodic_s(self) -> float | None:
        """Projected seconds of all periodic work over the run (None without a length)."""
        if any(f.occurrences is None for f in self.functions):
            return None
        return sum(f.cost_s * (f.occurrences or 0) for f in self.functions)

    def share(self) -> float | None:
        """Share of the projected run in periodic work; of the steady training without a length."""
        periodic = self.periodic_s
        if self.projected_s and periodic is not None:
            return periodic / self.projected_s
        per_step = sum(f.cost_s / f.period for f in self.functions if f.period)
        if not self.step_s or not per_step:
            return None
        return per_step / (per_step + self.step_s)

    def share_of(self, f: PeriodicFunction, cost_s: float) -> float | None:
        """Share of the projected run (of the steady training without a length) of ``cost_s`` in each of ``f``'s occurrences."""
        if self.projected_s and f.occurrences is not None:
            return cost_s * f.occurrences / self.projected_s
        per_step = sum(g.cost_s / g.period for g in self.functions if g.period)
        if not self.step_s or not f.period or not per_step:
            return None
        return (cost_s / f.period) / (per_step + self.step_s)

    def repeated(self, pattern: CallPattern) -> list[tuple[float | None, PeriodicFunction, RepeatedCalls]]:
        """Return the lines of ``pattern`` with their share and function, the largest share first."""
        found = [(self.share_of(f, r.cost_s), f, r) for f in self.functions for r in f.sites if r.pattern == pattern]
        return sorted(found, key=lambda t: -(t[0] if t[0] is not None else -1.0))

    def top(self) -> PeriodicFunction | None:
        """Return the costliest periodic function of the script's own (per step of the run): the epoch change aside."""
        timed = [f for f in self.functions if f.period and f.function != EPOCH_CHANGE]
        return max(timed, key=lambda f: f.cost_s / (f.period or 1), default=None)


def steady_step_s(step_times_ms: Sequence[float]) -> float | None:
    """Mean timed step in seconds, without the steps that held work between steps (over 2x the median)."""
    times = [t for t in step_times_ms if t is not None and t > 0]
    if not times:
        return None
    median = statistics.median(times)
    kept = [t for t in times if t <= _OUTLIER * median]
    return statistics.fmean(kept) / 1000.0


def _hints(capture: RunCapture) -> dict[str, int]:
    """Return the loop's named integers, then the script's argparse/configurator options (the loop's win)."""
    out = dict(capture.run_hints)
    for opt in capture.script_config.options:
        if type(opt.value) is int and opt.value > 0:
            out.setdefault(opt.name, opt.value)
    return out


def _length(capture: RunCapture, hints: dict[str, int]) -> tuple[int | None, str]:
    if capture.status == RunStatus.COMPLETED and capture.steps_seen:
        return capture.steps_seen, "the run went to its end"
    name = next((n for n in hints if is_length(n)), None)
    if name:
        return hints[name], name
    epochs = next((n for n in hints if is_epochs(n)), None)
    per_epoch = capture.epoch_batches or (capture.dataloaders[0].batches if capture.dataloaders else None)
    if epochs and per_epoch:
        # NOTE: the training loader's batches per optimizer step (gradient accumulation) divide
        # an epoch's batches into its steps.
        batches = [b for b in capture.timed.batches if b]
        per_step = max(1, round(statistics.median(batches))) if batches else 1
        epoch_steps = per_epoch // per_step
        return hints[epochs] * max(1, epoch_steps), f"{epochs} x {epoch_steps} steps per epoch"
    return None, ""


def by_function(works: Sequence[BetweenWork]) -> dict[tuple[str, str, int], list[BetweenWork]]:
    """Group occurrences by their function (name, file, line), in the order first seen."""
    groups: dict[tuple[str, str, int], list[BetweenWork]] = {}
    for w in works:
        groups.setdefault((w.function, w.file, w.line), []).append(w)
    return groups


def best_measured(works: Sequence[BetweenWork]) -> list[float]:
    """Seconds of the best-measured occurrences: unprofiled after the first step, else unprofiled, else all."""
    for pick in (lambda w: not w.profiled and w.step > 0, lambda w: not w.profiled, lambda w: True):
        chosen = [w.seconds for w in works if pick(w)]
        if chosen:
            return chosen
    return []


def cost_of(works: Sequence[BetweenWork]) -> float:
    """Median seconds over the best-measured occurrences (:func:`best_measured`)."""
    chosen = best_measured(works)
    return float(statistics.median(chosen)) if chosen else 0.0


def _occurrences(first: int, period: int, steps: int) -> int:
    """Occurrences at steps first, first + period, ... before ``steps``."""
    return 0 if steps <= first else (steps - 1 - first) // period + 1


def project(capture: RunCapture) -> Projection:
    """Project the whole run from a capture (see the module docstring)."""
    works = capture.between_steps
    step_s = steady_step_s(capture.timed.step_times_ms)
    hints = _hints(capture)
    steps, steps_from = _length(capture, hints)
    functions, notes = [], []
    for (function, file, line), group in by_function(works).items():
        seen = sorted({w.step for w in group})
        gaps = [b - a for a, b in zip(seen, seen[1:], strict=False)]
        period, period_from = (min(gaps), "seen") if gaps else period_hint(function, hints)
        at_epoch_end = all(w.epoch_end for w in group)
        if period is None and at_epoch_end and seen[0] > 0:
            period, period_from = seen[0], EPOCH  # the first epoch's steps, from the first step
        if period is not None and period <= 1:
            continue  # every step: part of the step time already
        cost = cost_of(group)
        if not gaps:
            notes.append(
                f"{function} ran once in the captured window (after {seen[0]} steps, {cost:.2f} s); "
                + (f"it runs at each epoch's end, every {period} steps" if period_from == EPOCH
                   else f"its period, {period} steps, is the script's {period_from}" if period
                   else "its period is unknown (no second occurrence, no variable naming it)")
            )
        occurrences = None
        if period and steps:
            # NOTE: work at an epoch's end runs after the last epoch too; work at the top of an
            # iteration (``if it % eval_interval == 0``) does not run once the loop has ended.
            occurrences = steps // period if at_epoch_end else _occurrences(seen[0], period, steps)
        functions.append(PeriodicFunction(function, file, line, cost, period, period_from, occurrences, len(group),
                                          repeated_calls(group), at_epoch_end))
    inside = sum(f.cost_s for f in functions if f.at_epoch_end)
    change = _epoch_change(capture, step_s, steps, inside)
    if change is not None:
        functions.append(change)
        notes.append(f"the epoch changes {_count(change.occurrences)}, {change.cost_s:.2f} s each beyond a step and "
                     f"the work at the epoch's end (median of {change.measured} seen): the loaders' start")
    startup = _startup(capture, step_s)
    projection = Projection(step_s=step_s, steps=steps, steps_from=steps_from, startup_s=startup,
                            end_s=capture.end_s, functions=tuple(functions), notes=tuple(notes))
    periodic = projection.periodic_s
    if steps and step_s is not None and startup is not None and periodic is not None:
        projected = startup + steps * step_s + periodic + (capture.end_s or 0.0)
        projection = replace(projection, projected_s=projected)
    elif functions and not steps:
        notes.append("the run's length is unknown (no max_iters-like variable): the whole run is not projected")
        projection = replace(projection, notes=tuple(notes))
    return projection


EPOCH_CHANGE = "the epoch change"
"""The function name of the epoch change's :class:`PeriodicFunction` (no user function: no file, line 0)."""


def _epoch_change(capture: RunCapture, step_s: float | None, steps: int | None,
                  inside: float) -> PeriodicFunction | None:
    """Return the epoch change as periodic work, ``inside`` (the work at an epoch's end) taken out; None under 2 steps."""
    gaps = [g for g in capture.epoch_gaps if not g.profiled] or list(capture.epoch_gaps)
    if not gaps or not step_s or gaps[0].step <= 0:
        return None
    cost = statistics.median(g.seconds for g in gaps) - step_s - inside
    if cost < step_s:
        return None
    period = min(g.step for g in capture.epoch_gaps)  # NOTE: the first epoch's end: the recorder sees every one
    occurrences = (steps - 1) // period if steps else None
    return PeriodicFunction(EPOCH_CHANGE, "", 0, cost, period, EPOCH, occurrences, len(gaps))


def _count(n: int | None) -> str:
    return "an unknown number of times" if n is None else "once" if n == 1 else f"{n} times in the run"


def _startup(capture: RunCapture, step_s: float | None) -> float | None:
    first = capture.time_to_first_step_s
    if first is None or step_s is None:
        return None
    before = sum(w.seconds for w in capture.between_steps if w.step == 0)
    process = float(capture.phases_s.get("process", 0.0) or 0.0)
    return max(0.0, process + first - step_s - before)


def periodic_metrics(capture: RunCapture) -> dict[str, float | None]:
    """Return the run-scope metrics of the projection (names in :mod:`advisor.metrics.registry`)."""
    p = project(capture)
    top = p.top()
    change = next((f for f in p.functions if f.function == EPOCH_CHANGE), None)
    own = replace(p, functions=tuple(f for f in p.functions if f is not change))
    return {**_repeated_metrics(p),
        "startup_s": p.startup_s,
        "run_end_s": p.end_s,
        "projected_run_s": p.projected_s,
        "projected_steps_count": float(p.steps) if p.steps else None,
        "periodic_work_frac": own.share(),
        "epoch_change_s": change.cost_s if change else None,
        "epoch_change_frac": p.share_of(change, change.cost_s) if change else None,
        "epoch_changes_count": float(change.occurrences) if change and change.occurrences is not None else None,
        "periodic_work_s": top.cost_s if top else None,
        "periodic_period_steps": float(top.period) if top and top.period else None,
        "periodic_occurrences_count": float(top.occurrences) if top and top.occurrences is not None else None,
    }


def _repeated_metrics(p: Projection) -> dict[str, float | None]:
    """Return the metrics of the costliest line generating without a KV cache and of the costliest inferring one sample at a time."""
    out: dict[str, float | None] = dict.fromkeys(_REPEATED_METRICS)
    gen = p.repeated(CallPattern.GENERATION_NO_CACHE)
    if gen:
        share, f, r = gen[0]
        out.update(generation_frac=share, generation_s=r.cost_s, generation_calls_count=float(r.calls),
                   generation_tokens_count=float(r.tokens), generation_positions_count=r.positions,
                   generation_period_steps=float(f.period) if f.period else None,
                   generation_occurrences_count=float(f.occurrences) if f.occurrences is not None else None)
    one = p.repeated(CallPattern.ONE_SAMPLE)
    if one:
        share, f, r = one[0]
        out.update(one_sample_frac=share, one_sample_s=r.cost_s, one_sample_calls_count=float(r.calls),
                   one_sample_period_steps=float(f.period) if f.period else None)
    return out


def periodic_locations(capture: RunCapture | None) -> list[SourceLocation]:
    """Return the periodic functions as ``periodic`` locations, per step: 1/period occurrences, cost/period ms.

    Their lines that generate without a KV cache or infer one sample at a time follow, as
    ``generation`` and ``one_sample`` locations.
    """
    if capture is None or not capture.between_steps:
        return []
    p = project(capture)
    out = [
        SourceLocation("periodic", f.file, f.line, f.function, count=1.0 / f.period,
                       time_ms=f.cost_s * 1000.0 / f.period, source="capture")
        for f in sorted(p.functions, key=lambda f: -(f.cost_s / (f.period or 1)))
        if f.period and f.line > 0
    ]
    for pattern in (CallPattern.GENERATION_NO_CACHE, CallPattern.ONE_SAMPLE):
        out.extend(SourceLocation(_LOCATION_KINDS[pattern], r.file, r.line, r.function,
                                  count=1.0 / f.period, time_ms=r.cost_s * 1000.0 / f.period, source="capture")
                   for _share, f, r in p.repeated(pattern) if f.period and r.line > 0)
    return out


def periodic_notes(capture: RunCapture | None) -> list[str]:
    """Return what the projection could not see and how it filled it in."""
    return list(project(capture).notes) if capture is not None and capture.between_steps else []
