"""The fix loop: re-run the script with each fix applied at run time, measure, keep what helps.

:func:`run_trials` is the whole loop, in three parts that are each testable alone:
**plan** (:func:`choose`, :func:`plan_trials`: which fixes, which runs; pure),
**measure** (:class:`Measurer`: the interleaved runs) and **select** (:func:`collapse`,
:func:`select_combination`, :func:`pick_kept`: which rung, which set; pure). Every fix's own
behaviour (its check, ladder, step counts, what it requires) comes from its catalog object
(:mod:`advisor.fixes.catalog`); nothing here branches on a fix id. Its design, in the order it
runs:

1. **Choose.** Suggested fixes (from the findings) are de-duplicated; unsafe ones are hidden
   unless ``unsafe=True`` (counted, ruff-style); ``only`` (``--fix ID``) replaces the suggestions
   with exactly those ids (naming a fix is opting in to it, even an unsafe one).
   A fix whose Amdahl bound on the diagnosis's breakdown (:mod:`advisor.fixes.bounds`: the
   share of the step in the categories it can shorten) cannot reach ``min_effect`` is skipped
   unrun with that bound, unless named with ``--fix``.
2. **Baseline first.** Round 1 starts with a baseline run; what it recorded (device, cores,
   DataLoaders, batches per step) decides which fixes can apply at all (catalog checks), so a
   fix that cannot apply is ``skipped`` with the reason before any time is spent on it.
3. **Rounds.** Each round runs the baseline once, then every active variant once (the variant
   order is reversed on alternate rounds), and a final baseline closes the last round:
   ``A V1 V2 .. A V2 V1 .. A``. One baseline run serves every variant of its round, so a loop over
   four fixes costs ``repeats * 5 + 1`` runs instead of ``repeats * 8``. Each variant run is
   paired with the geometric mean of the baselines on either side (see :mod:`.stats`). Every run
   is a fresh child process with ``profiled_steps=0`` (timed steps only), a fixed seed, and the
   first losses recorded, in ``<run>/trials/<label>-<k>/``.
   A trial whose median shows a gain but whose interval still includes 1.0 after ``repeats``
   rounds gets extra rounds (up to ``max_repeats``) -- on a noisy machine a real win needs more
   pairs to be shown, and a fix is never called a win without them.
   **Sequential stop.** From 2 pairs on, a trial whose interval is already decided leaves the
   rounds early (:func:`~advisor.fixes.stats.decided_early`: a Bonferroni-corrected interval
   over the looks the plan allows says improved or slower, or rules a win out); the reported
   interval is the plain 95% one over the pairs measured, and its reason says it stopped early.
   **Warm-up.** Trial runs after the first warm up only as long as the first baseline's own
   warm-up step times say the script needed (:func:`settled_warmup`, at least 2 steps).
4. **Early exits.** After a variant's first run: a crash, timeout or non-finite/far-off loss is
   ``failed``; a runtime note in state ``skipped`` (no convolutions, autocast already on, an
   IterableDataset that does not shard) is ``skipped``; a DataLoader fix whose recorded loader
   settings did not change is ``skipped``; a run whose steps were counted from other boundaries
   than the baseline's (DataLoader batches vs optimizer steps) is ``failed`` as not comparable.
   None of these is run again.
5. **Ladders.** ``dataloader_workers`` is tried at a few worker counts sized to the cores
   (:func:`~advisor.fixes.catalog.dataloader_workers.worker_ladder`), ``larger_batch`` at a few batch factors
   capped at :data:`~advisor.fixes.catalog.larger_batch.MAX_BATCH` samples
   (:func:`~advisor.fixes.catalog.larger_batch.batch_ladder`, x4 and x16), each rung with fewer warm-up and
   timed steps when the baseline's step time says k times the samples would make the run long
   (:func:`ladder_steps`); the best rung is reported with the whole ladder in its reason.
6. **Fixes on top of another.** ``persistent_workers``, ``prefetch_factor`` and ``cpu_threads``
   (catalog ``requires="dataloader_workers"``) do nothing without loader workers: when the
   script has none, they are measured in a second stage against the best measured workers rung
   as the reference, whenever workers *ran* (improved, no_effect or slower; not when workers
   failed, was skipped or was not tried). On a few cores, workers alone can measure no effect
   because they fight torch's intra-op threads for the cores, and only pay off with
   ``cpu_threads`` on top, so a no_effect workers trial must not hide that pair. The on-top
   trial's speedup is relative to that rung, and its reason says so, with what workers alone
   measured.
7. **Combine.** The fixes that improved are combined (conflicts such as bf16 vs fp16, or
   ``batch_fusion`` vs ``larger_batch``, keep the faster one). A kept on-top fix carries the
   workers rung it was measured on into the combination even when workers alone was not a win
   (the workers trial keeps its own verdict; a note and its reason say why it is kept), unless
   the product of the rung's speedup and the on-top speedups already says the set loses against
   the baseline (workers 0.3x with cpu_threads 1.3x on top: not combined, with a note). The
   combination is measured together against the plain baseline the same way, and that trial
   is the one reported. If it is not at least as good as the best *standalone* fix (on-top fixes
   and a carried workers rung have no standalone speedup against the baseline, so they never
   compete alone), the best standalone fix is kept instead; with no standalone win and a
   combination that does not improve, nothing is kept.

**Budget.** With ``budget_s`` (``--budget``) the fixes are planned largest possible gain first
and those whose runs the remaining time cannot pay for are skipped as "not tried" (named in a
note); extra rounds, the on-top stage and the combined run also run only when they fit, and the
best standalone win is kept when the combination cannot be measured.
**After trace.** With ``profile_kept`` the kept set runs once more under the profiler into
``<run>/kept/``, the "after" of the diagnosed run's trace.

Time to first step is reported apart from the steady throughput (compile cost lands there).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from advisor._num import median
from advisor.capture.model import FixRequest, NoteState, RunCapture, RunSpec
from advisor.engine.model import FixRef
from advisor.errors import AdvisorError, UsageError
from advisor.fixes import catalog
from advisor.fixes.bounds import GainBound, by_gain, gain_bounds
from advisor.fixes.fix import (
    MIN_LADDER_PHASE_S,
    MIN_MEMORY_SAVING,
    SAFE,
    UNSAFE,
    FixContext,
    Objective,
    RungRuns,
    context_from_capture,
    fusion_steps,
    is_out_of_memory,
    ladder_steps,
)
from advisor.fixes.model import FixOutcome, Trial, Verdict
from advisor.fixes.stats import (
    MIN_EFFECT,
    MIN_PAIRS,
    Estimate,
    decided_early,
    estimate,
    loss_parity,
    paired_ratios,
)
from advisor.rundir import KEPT_DIR, TRIALS_DIR  # noqa: E402

__all__ = [
    "MIN_LADDER_PHASE_S", "Measurer", "TrialPlan", "TrialProgress", "choose", "collapse", "fusion_steps",
    "ladder_steps", "pick_kept", "plan_trials", "run_trials", "select_combination",
]

INSTALLER = "advisor.fixes.runtime"
"""The module the capture child imports by name to install fixes (``RunSpec.fix_installers``)."""
DEFAULT_LOSS_STEPS = 5
DEFAULT_SEED = 0
# Every trial run times at least this much of the script (RunSpec.min_timed_s): 20 steps of a
# tiny model are a 10-15 ms window, where one slow step halved a baseline's rate and inflated a
# larger_batch speedup to 19.8x against 11.4x timed plainly over the whole script (tiny_model,
# benchmarks/fix_speedups.py). Slow steps already fill it; only fast ones run longer.
MIN_TRIAL_WINDOW_S = 1.0
# A trial run times this many steps (fewer when the user asked for fewer), extended to
# MIN_TRIAL_WINDOW_S: each run yields one rate for the paired test, and the window, not a fixed
# 20 steps, is what steadies it. 20 steps of a 95 ms step were 1.9 s per run, 74 of the demo's
# 104 s; the capture still times the user's --steps.
TRIAL_TIMED_STEPS = 8
# Trial runs keep at least this many warm-up steps however stable the baseline's steps were:
# a variant pays its own one-time costs (worker start-up, a compile) that the baseline cannot
# show, and they land in its first step or two.
MIN_TRIAL_WARMUP = 2
# A warm-up step further than this factor from the baseline's steady median (either way, and
# outside the steady steps' own range) is still warming up (settled_warmup).
WARMUP_SETTLED = 1.25

# The verdicts under short names (advisor.fixes.model.Verdict).
IMPROVED, NO_EFFECT, SLOWER, FAILED, SKIPPED, ADVICE = (
    Verdict.IMPROVED, Verdict.NO_EFFECT, Verdict.SLOWER, Verdict.FAILED, Verdict.SKIPPED, Verdict.ADVICE
)
UNDECIDED = Verdict.UNDECIDED  # measured, but the interval is too wide to tell (advisor.fixes.stats)

# Verdicts of a workers trial that measured something (its best rung can carry on-top fixes).
_RAN = (IMPROVED, NO_EFFECT, UNDECIDED, SLOWER)


# In-flight step updates of a trial run are passed on at most this often (a phase change always).
STEP_EVENT_INTERVAL_S = 0.5


@dataclass(frozen=True)
class TrialProgress:
    """One live update from the loop: a run of a trial has finished, or one in flight has moved on.

    Attributes:
        fix: The trial's label (a fix id, ``dataloader_workers@2`` for a ladder rung,
            ``combined``), or ``baseline`` for a baseline run.
        repeat: Which round this run belongs to (1-based).
        repeats: Rounds planned.
        estimate: The trial's current median speedup (None before its first pair).
        samples_per_s: The throughput this run measured (None if it failed).
        stage: ``trials``, ``on-top`` (fixes measured on top of another) or ``combined``.
        message: A short remark (a verdict reached early, a failure), or "".
        run: Trial runs finished so far in the whole loop (never goes backwards).
        runs_left: Runs still planned in this stage (later stages, such as fixes on top of
            another or the combination, are planned only once this one has its verdicts).
        eta_s: ``runs_left`` times the median wall time of the runs so far.
        in_flight: For an update from a run still going, its capture phase (``warmup``,
            ``timed``...); "" when the run has finished. Such updates come from a background
            thread, throttled to one per :data:`STEP_EVENT_INTERVAL_S` within a phase, and
            ``run`` is the number the run will have when it ends.
        step / steps_total: The in-flight run's steps so far and the steps it asks for.
    """

    fix: str
    repeat: int
    repeats: int
    estimate: float | None = None
    samples_per_s: float | None = None
    stage: str = "trials"
    message: str = ""
    run: int = 0
    runs_left: int | None = None
    eta_s: float | None = None
    in_flight: str = ""
    step: int = 0
    steps_total: int = 0

    def line(self) -> str:
        """One human line for a live progress display, e.g. ``pin_memory  2/3  1.84x so far``."""
        parts = [f"{self.fix}", f"{self.repeat}/{self.repeats}"]
        if self.in_flight:
            total = f"/{self.steps_total}" if self.steps_total else ""
            parts.append(f"running: {self.in_flight}, step {self.step}{total}")
        if self.run:
            plan = f"run {self.run}"
            if self.runs_left is not None:
                plan += f", {self.runs_left} more in this stage"
                if self.eta_s is not None and self.runs_left:
                    plan += f" (~{_clock(self.eta_s)})"
            parts.insert(0, f"[{plan}]")
        if self.samples_per_s is not None:
            parts.append(f"{self.samples_per_s:.1f} samples/s")
        if self.estimate is not None:
            parts.append(f"{self.estimate:.2f}x so far")
        if self.message:
            parts.append(self.message)
        return "  ".join(parts)


Runner = Callable[[RunSpec], RunCapture]
Progress = Callable[[TrialProgress], None]


def default_runner(spec: RunSpec, progress: Callable[[Any], None] | None = None) -> RunCapture:
    """Run one capture with the real capture stage (imported lazily)."""
    from advisor.capture.run import capture

    return capture(spec, progress=progress)


@dataclass
class _Variant:
    """One candidate under measurement (mutable bookkeeping, turned into a :class:`Trial`)."""

    label: str
    fix: str
    safety: str
    requests: tuple[FixRequest, ...]
    loss_rtol: float
    params: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    fixes: tuple[str, ...] = ()
    rates: list[float | None] = field(default_factory=list)
    ttfs: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    loss_diffs: list[float] = field(default_factory=list)
    failure: str | None = None
    skip: str | None = None
    note: str = ""
    reference: str = ""
    ref_note: str = ""
    ref_rates: list[float | None] = field(default_factory=list)
    ref_ttfs: list[float] = field(default_factory=list)
    ref_peaks: list[int] = field(default_factory=list)
    memory_kind: str | None = None
    early: int = 0  # pairs after which the measurement stopped before its planned rounds
    cut: bool = False  # stopped by the budget rather than by a decided interval

    @property
    def active(self) -> bool:
        return self.failure is None and self.skip is None


@dataclass
class TrialPlan:
    """What the loop will run, decided from the baseline alone (the *plan* part).

    Attributes:
        skipped: Fixes whose check refused them, as skipped trials with the reason.
        variants: The runs measured against the plain baseline (every rung of every ladder).
        on_top: Fixes measured in a second stage on top of the fix they require (the baseline
            lacks it), in the order they were asked for.
        advice: Fixes with no safe run-time change: never run, their diff is offered as advice.
    """

    skipped: dict[str, Trial] = field(default_factory=dict)
    advice: dict[str, Trial] = field(default_factory=dict)
    variants: list[_Variant] = field(default_factory=list)
    on_top: list[str] = field(default_factory=list)


def run_trials(
    spec: RunSpec,
    suggested: Sequence[FixRef],
    *,
    unsafe: bool = False,
    only: Sequence[str] = (),
    repeats: int = 3,
    runner: Runner = default_runner,
    progress: Progress | None = None,
    min_effect: float = MIN_EFFECT,
    loss_steps: int = DEFAULT_LOSS_STEPS,
    make_diff_text: bool = True,
    max_repeats: int | None = None,
    checkpoint: Callable[[FixOutcome], None] | None = None,
    breakdown: Mapping[str, float] | None = None,
    impacts: Mapping[str, float] | None = None,
    budget_s: float | None = None,
    early_stop: bool = True,
    settle_warmup: bool = True,
    skip_inert: bool = True,
    profile_kept: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> FixOutcome:
    """Try each suggested fix at run time, measure it against the baseline, keep what helps.

    Args:
        spec: The diagnosed run's spec; trials run the same script and arguments, in
            ``<spec.out_dir>/trials/``, without the profiler.
        suggested: Fixes the findings suggest (duplicates are merged).
        unsafe: Also try unsafe fixes (precision, batch semantics, compile).
        only: Try exactly these fix ids instead of the suggestions (``--fix ID``).
        repeats: Interleaved baseline/variant rounds per trial (at least 1; 3 by default).
        runner: Runs one capture (the real capture stage by default; tests pass a fake).
        progress: Called after every run with a :class:`TrialProgress`.
        min_effect: Smallest relative change reported as an effect.
        loss_steps: First steps whose loss is compared with the baseline.
        make_diff_text: Also compute the source diff for the kept fixes.
        max_repeats: Rounds an undecided trial may grow to (default ``2 * repeats``).
        checkpoint: Called after every run with what is known so far (finished trials, and
            trials still being measured marked unfinished), so the caller can save it: an
            interrupted loop then loses nothing it measured.
        breakdown: The diagnosis's share of step time per category: a fix whose Amdahl bound
            on it cannot reach ``min_effect`` is skipped unrun (:mod:`advisor.fixes.bounds`).
        impacts: Fix id -> the largest recoverable share its findings claim (orders the fixes
            under a budget when the fix declares no categories).
        budget_s: Seconds the whole loop may take (``--budget``): fixes are measured largest
            possible gain first, and those the remaining time cannot pay for are not tried
            (skipped, saying so); a measurement stops early once every trial has its minimum
            pairs and the next round would overrun.
        early_stop: Stop a trial's rounds as soon as its interval is decided (from
            :data:`~advisor.fixes.stats.MIN_PAIRS` pairs, see
            :func:`~advisor.fixes.stats.decided_early`); False runs every planned round.
        settle_warmup: Let trial runs warm up for only as many steps as the first baseline
            needed to reach a stable step time (:func:`settled_warmup`); False keeps the spec's.
        skip_inert: Skip a fix measured on top of another's rung when that rung's runs show it
            could not change the measurement (:attr:`~advisor.fixes.fix.Fix.inert`); never for
            fixes named in ``only``.
        profile_kept: Run the kept fixes once more under the profiler, into
            ``<out_dir>/kept/``, so the run leaves a before/after pair of traces.
        clock: The clock the budget is kept with (tests pass a fake).

    Returns:
        A :class:`~advisor.fixes.model.FixOutcome`: every trial with its verdict, the combined
        trial, the kept fix ids and the diff.

    Raises:
        UsageError: ``only`` names an unknown fix id, or ``repeats`` is below 1.
    """
    started = clock()
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, not {repeats}")
    if budget_s is not None and not budget_s > 0:
        raise UsageError(f"--budget must be a positive number of seconds, not {budget_s}")
    loop = Measurer(spec, runner, progress, repeats, min_effect, loss_steps)
    loop.max_repeats = max(repeats, max_repeats if max_repeats is not None else 2 * repeats)
    loop.started, loop.clock = started, clock
    loop.early_stop = early_stop
    if budget_s is not None:
        loop.deadline = started + budget_s
    wanted, hidden, notes = choose(suggested, only, unsafe)
    results: dict[str, Trial] = {}
    if checkpoint is not None:
        loop.on_run = lambda: checkpoint(loop.snapshot(wanted, results, notes, hidden, started))
    bounds = gain_bounds(wanted, breakdown, impacts)
    # A fix that cannot reach the minimum effect even if its part of the step vanished is not
    # worth a run (named with --fix, it is run anyway: the user asked for that measurement).
    if not only:
        hopeless = [f for f in wanted if bounds[f].cannot_reach(min_effect)]
        for f in hopeless:
            results[f] = Trial(
                fix=f, safety=catalog.get(f).safety, verdict=SKIPPED,
                reason=bounds[f].skip_reason(min_effect),
            )
        if hopeless:
            notes.append(f"not run, their Amdahl bound is below the {min_effect:.0%} minimum effect: "
                         + ", ".join(f"{f} (at most {bounds[f].speedup:.3f}x)" for f in hopeless))
    todo = [f for f in wanted if f not in results]
    if not todo:
        return FixOutcome(trials=tuple(results[f] for f in wanted), notes=tuple(notes),
                          hidden_unsafe=hidden, wall_s=_since(started, clock))

    if all(catalog.get(f).needs_no_run for f in todo):
        # NOTE: advice is never run; a baseline measured for it would be read by nobody
        # (examples/sync_logging.py ran three baseline runs for host_reads alone).
        plan = plan_trials(todo, FixContext(), spec)
        results.update(plan.advice)
        advice = list(plan.advice.values())
        notes.append(_advice_note(advice))
        return FixOutcome(
            trials=tuple(results[f] for f in wanted if f in results),
            diff=_diff_text(spec, advice, notes) if make_diff_text else "",
            notes=tuple(notes), hidden_unsafe=hidden, wall_s=_since(started, clock),
        )

    # Round 1's baseline comes first: it decides what can apply.
    base0 = loop.run_baseline("baseline", 1, flight=TrialProgress(fix="baseline", repeat=1, repeats=repeats))
    if is_out_of_memory(base0):
        return _out_of_memory(base0, wanted, hidden, notes, results, only, unsafe, loop, spec, make_diff_text)
    if not base0.ok or loop.rate(base0) is None:
        reason = _failure_reason(base0) if not base0.ok else "the baseline recorded no timed steps"
        notes.append(f"no fix measured: the baseline run failed ({reason})")
        trials = tuple(
            results.get(f) or Trial(
                fix=f, safety=catalog.get(f).safety, verdict=SKIPPED, reason=f"baseline run failed: {reason}",
            )
            for f in wanted
        )
        return FixOutcome(trials=trials, notes=tuple(notes), hidden_unsafe=hidden, wall_s=_since(started, clock),
                          runs=loop.runs, phases_s=dict(loop.phases_s), starts=dict(loop.starts))
    ctx = context_from_capture(base0, spec.memory_budget_bytes)
    loop.base_step_ms = median(base0.timed.step_times_ms)
    warmup = settled_warmup(base0.timed.warmup_step_times_ms, base0.timed.step_times_ms, spec.warmup_steps)
    if settle_warmup and warmup < spec.warmup_steps:
        loop.warmup_steps = warmup
        notes.append(
            f"trial runs warm up for {warmup} steps, not {spec.warmup_steps}: the baseline's step time "
            f"was within {WARMUP_SETTLED:.2f}x of its timed median from warm-up step {warmup} on"
        )

    plan = plan_trials(todo, ctx, spec, loop.base_step_ms)
    if budget_s is not None:
        results.update(_fit_budget(plan, bounds, loop, notes))
    loop.measure(plan.variants, reference=(), ref_label="baseline", first_baseline=base0)
    results.update({**plan.skipped, **plan.advice})
    results.update(collapse([loop.trial(v) for v in plan.variants]))
    if plan.on_top:
        results.update(_measure_on_top(plan.on_top, results, ctx, spec, loop, bounds, notes,
                                       shares=breakdown, skip_inert=skip_inert and not only))

    trials = tuple(results[f] for f in wanted if f in results)
    on_top = frozenset(plan.on_top)
    selection = select_combination(trials, on_top, loop.min_effect)
    notes.extend(selection.notes)
    combined, kept = selection.single, selection.chosen
    if len(selection.chosen) > 1:
        if loop.affords(loop.repeats * 2 + 1):
            measured = _measure_combined(selection, loop, ctx, spec)
            combined, kept, more = pick_kept(measured, selection.chosen, on_top, loop.min_effect)
        else:
            combined, kept, more = _best_alone(selection.chosen, on_top)
        notes.extend(more)
    saver, more = pick_memory(trials)
    notes.extend(more)
    if saver is not None:
        kept = [*kept, saver]
        combined = combined or saver
    # A workers rung kept only as the base of an on-top fix keeps its own verdict; say why it is kept.
    tops = [t.fix for t in kept if t.fix in on_top]
    carried = {
        t.fix: replace(t, reason=f"{t.reason}; kept as the base of {', '.join(tops)} "
                       "(measured together: see the combined trial)".lstrip("; "))
        for t in kept if t.verdict != IMPROVED
    }
    if carried:
        kept = [carried.get(t.fix, t) for t in kept]
        trials = tuple(carried.get(t.fix, t) for t in trials)
    diff = ""
    advice = [results[f] for f in wanted if f in plan.advice]
    if advice:
        notes.append(_advice_note(advice))
    kept_run = ""
    if profile_kept and kept:
        kept_run = _profile_kept(kept, loop, ctx, spec, notes)
    if make_diff_text and (kept or advice):
        diff = _diff_text(spec, [*kept, *advice], notes)
    return FixOutcome(
        trials=trials,
        combined=combined,
        kept=tuple(t.fix for t in kept),
        diff=diff,
        notes=tuple(notes),
        hidden_unsafe=hidden,
        kept_trials=tuple(kept),
        wall_s=_since(started, clock),
        runs=loop.runs,
        phases_s=dict(loop.phases_s),
        starts=dict(loop.starts),
        kept_run=kept_run,
    )


def _profile_kept(kept: Sequence[Trial], loop: Measurer, ctx: FixContext, spec: RunSpec, notes: list[str]) -> str:
    """Run the kept fixes once under the profiler into ``<run>/kept/``; return that folder's name ("" if it failed).

    The diagnosed run's trace is the "before"; this one is the "after" (``advisor compare RUN
    RUN/kept``). Its timing is not a measurement of the fixes: the trials are.
    """
    fixes = catalog.get_fixes()
    overrides: dict[str, Any] = {}
    for t in kept:
        overrides = fixes[t.fix].overrides_for(dict(t.params), spec, ctx, loop.base_step_ms) or overrides
    requests = tuple(FixRequest(t.fix, dict(t.params)) for t in kept)
    # NOTE: the diagnosed run's phases, not a trial's: a trial times at least 1 s of steps,
    # and a script of fast steps that ends on its own (regression/main.py: 0.3 ms steps, ~830
    # in all) ended inside that window, before its profiled steps, leaving no trace
    run_spec = replace(
        loop.trial_spec(KEPT_DIR, requests, overrides),
        out_dir=Path(spec.out_dir) / KEPT_DIR, profiled_steps=spec.profiled_steps or 10, cprofile_steps=0,
        timed_steps=spec.timed_steps, min_timed_s=spec.min_timed_s,
    )
    label = "+".join(t.fix for t in kept)
    try:
        cap = loop.runner(run_spec)
    except AdvisorError as exc:
        notes.append(f"the kept fixes ({label}) could not be run under the profiler: {exc}")
        return ""
    loop.account(cap, timed=False)  # a profiled run is longer than a trial: not one for the ETA
    if not cap.ok or not cap.trace_files:
        why = _failure_reason(cap) if not cap.ok else "no trace was written"
        notes.append(f"the kept fixes ({label}) ran under the profiler but left no trace: {why}")
        return ""
    notes.append(
        f"the kept fixes ({label}) ran once under the profiler: their trace is in {KEPT_DIR}/ beside "
        f"the baseline's (advisor compare RUN RUN/{KEPT_DIR})"
    )
    return KEPT_DIR


def _best_alone(chosen: Sequence[Trial], on_top: frozenset[str]) -> tuple[Trial | None, list[Trial], list[str]]:
    """Keep the best standalone win when the budget cannot pay for measuring the combination."""
    standalone = [t for t in chosen if t.fix not in on_top and t.verdict == IMPROVED]
    names = "+".join(t.fix for t in chosen)
    if not standalone:
        return None, [], [f"the combination {names} was not measured: the --budget ran out; nothing kept"]
    best = max(standalone, key=lambda t: t.speedup or 0.0)
    return best, [best], [
        f"the combination {names} was not measured: the --budget ran out; keeping {best.fix} alone"
    ]


def settled_warmup(warmup_ms: Sequence[float], timed_ms: Sequence[float], asked: int) -> int:
    """Warm-up steps a trial run needs, read from the baseline's own step times (never more than asked).

    A warm-up step has settled when it lies within the band of the steady steps (the timed
    steps after the first three: from the fastest to the slowest), widened to at least
    :data:`WARMUP_SETTLED` times their median either way. Steps outside it, slower (allocator growth, lazy set-up) *or* faster
    (a first step that did no real work), are still warming up. The warm-up kept ends one step
    after the last unsettled one, never below :data:`MIN_TRIAL_WARMUP`. When the first three
    timed steps are, on average, more than that factor away from the steady median, warm-up was
    not long enough as it was, and nothing is cut.
    """
    steady = sorted(t for t in timed_ms if t > 0)
    if not warmup_ms or len(warmup_ms) < asked or len(steady) < 3:
        return asked
    mid = median(steady) or 0.0
    rest = [t for t in list(timed_ms)[3:] if t > 0] or steady
    lo, hi = min(min(rest), mid / WARMUP_SETTLED), max(max(rest), mid * WARMUP_SETTLED)

    def settled(t: float) -> bool:
        return lo <= t <= hi

    head = [t for t in list(timed_ms)[:3] if t > 0]
    first = sum(head) / len(head) if head else 0.0
    if not mid / WARMUP_SETTLED <= first <= mid * WARMUP_SETTLED:
        return asked
    unsettled = [i for i, t in enumerate(warmup_ms) if not settled(t)]
    needed = (unsettled[-1] + 2) if unsettled else 1
    return min(asked, max(MIN_TRIAL_WARMUP, needed))


def _fit_budget(
    plan: TrialPlan, bounds: Mapping[str, GainBound], loop: Measurer, notes: list[str], extra_runs: int = 0,
) -> dict[str, Trial]:
    """Keep the fixes the budget pays for, largest possible gain first; the rest are not tried.

    The cost of measuring ``n`` variants is ``repeats * (n + 1) + extra_runs`` runs of the median
    run's wall time so far (the round-1 reference is already run, or is ``extra_runs``). Fixes
    whose runs do not fit what is left are dropped from the plan, with a skipped trial saying why.
    """
    budget_s = loop.budget_s or 0.0
    fixes_in_order = list(dict.fromkeys(v.fix for v in plan.variants))
    ranked = by_gain(fixes_in_order, bounds)
    kept: list[str] = []
    n = 0
    out: dict[str, Trial] = {}
    for f in ranked:
        rungs = sum(v.fix == f for v in plan.variants)
        if loop.affords(loop.repeats * (n + rungs + 1) + extra_runs):
            kept.append(f)
            n += rungs
        else:
            out[f] = _over_budget(f, bounds, budget_s)
    plan.variants = [v for v in plan.variants if v.fix in kept]
    if out:
        notes.append(f"not tried for lack of budget (--budget {budget_s:g}s): {', '.join(out)}")
    return out


def _over_budget(fix_id: str, bounds: Mapping[str, GainBound], budget_s: float) -> Trial:
    b = bounds.get(fix_id)
    gain = f"; it could gain at most {b.speedup:.2f}x ({b.why})" if b is not None and b.speedup else ""
    return Trial(
        fix=fix_id, safety=catalog.get(fix_id).safety, verdict=SKIPPED,
        reason=f"not tried: the --budget of {budget_s:g}s could not pay for its runs after the fixes "
        f"with larger possible gains{gain}",
    )


# -- plan --------------------------------------------------------------------------------------


def choose(
    suggested: Sequence[FixRef], only: Sequence[str], unsafe: bool
) -> tuple[list[str], tuple[str, ...], list[str]]:
    """Pick the fixes to try: the suggestions (unsafe ones hidden unless asked), or ``only``.

    Returns:
        The fix ids to try, the hidden unsafe ids, and notes about what was left out.

    Raises:
        UsageError: ``only`` names an unknown fix id.
    """
    notes: list[str] = []
    fixes = catalog.get_fixes()
    if only:
        unknown = [f for f in only if f not in fixes]
        if unknown:
            import difflib

            hint = difflib.get_close_matches(unknown[0], sorted(fixes), n=1)
            tip = f" (did you mean {hint[0]}?)" if hint else f"; known: {', '.join(sorted(fixes))}"
            raise UsageError(f"unknown fix id {unknown[0]!r} for --fix{tip}")
        return list(dict.fromkeys(only)), (), notes
    wanted: list[str] = []
    hidden: list[str] = []
    for ref in suggested:
        if ref.id not in fixes:
            notes.append(f"suggested fix {ref.id!r} is not in the fix registry; not tried")
            continue
        if fixes[ref.id].safety == UNSAFE and not unsafe:
            if ref.id not in hidden:
                hidden.append(ref.id)
            continue
        if ref.id not in wanted:
            wanted.append(ref.id)
    if hidden:
        n = len(hidden)
        notes.append(
            f"{n} unsafe fix{'es' if n > 1 else ''} hidden ({', '.join(hidden)}); "
            "use --unsafe-fixes to try them"
        )
    return wanted, tuple(hidden), notes


def plan_trials(
    wanted: Sequence[str], ctx: FixContext, spec: RunSpec, step_ms: float | None = None
) -> TrialPlan:
    """Decide, from the baseline's context alone, what each wanted fix runs (no run is made).

    A fix its check refuses is skipped with the reason; a fix that requires another fix the
    baseline lacks (``persistent_workers`` without workers) waits for the second stage; every
    other fix contributes its variants (one run, or a ladder's rungs).
    """
    fixes = catalog.get_fixes()
    plan = TrialPlan()
    for fix_id in wanted:
        fix = fixes[fix_id]
        why = fix.check(ctx)
        if why is not None:
            plan.skipped[fix_id] = Trial(fix=fix_id, safety=fix.safety, verdict=SKIPPED, reason=why)
            continue
        if fix.advice:
            plan.advice[fix_id] = Trial(
                fix=fix_id, safety=fix.safety, verdict=ADVICE, reason=f"advice, not measured: {fix.advice}",
            )
            continue
        need = fixes.get(fix.requires) if fix.requires else None
        if need is not None and need.present is not None and not need.present(ctx):
            plan.on_top.append(fix_id)
        else:
            plan.variants.extend(variants_of(fix_id, ctx, spec, step_ms=step_ms))
    return plan


def variants_of(
    fix_id: str, ctx: FixContext, spec: RunSpec, on_top_of: tuple[FixRequest, ...] = (),
    step_ms: float | None = None,
) -> list[_Variant]:
    """Build the candidate runs of one fix from its catalog variants (a ladder, or one run)."""
    fix = catalog.get(fix_id)
    return [
        _Variant(
            label=vp.label, fix=fix_id, safety=fix.safety,
            requests=(*on_top_of, FixRequest(fix_id, dict(vp.params))),
            loss_rtol=fix.loss_rtol, params=dict(vp.params), overrides=dict(vp.overrides),
            fixes=(fix_id,),
        )
        for vp in fix.plan_variants(ctx, spec, step_ms)
    ]


def _measure_on_top(
    on_top: Sequence[str], results: dict[str, Trial], ctx: FixContext, spec: RunSpec, loop: Measurer,
    bounds: Mapping[str, GainBound] | None = None, notes: list[str] | None = None,
    shares: Mapping[str, float] | None = None, skip_inert: bool = True,
) -> dict[str, Trial]:
    """Stage 2: fixes that build on another fix, measured on top of its best measured rung.

    They are measured whenever the required fix *ran* -- a no_effect workers trial may still be
    half of a winning pair -- unless that rung's runs show the fix could not change what its
    trial measures (:attr:`Fix.inert`, with ``skip_inert``).
    """
    out: dict[str, Trial] = {}
    by_need: dict[str, list[str]] = {}
    for fix_id in on_top:
        by_need.setdefault(catalog.get(fix_id).requires or "", []).append(fix_id)
    for need_id, fixes in by_need.items():
        need = results.get(need_id)
        if need is None or need.verdict not in _RAN or not need.params:
            # NOTE: only workers is required today; its wording names what the script lacks.
            why = (
                f"needs DataLoader workers (the script has num_workers=0) and {need_id} "
                + ("was not tried" if need is None else f"was not measured ({need.verdict})")
            ) if need_id == "dataloader_workers" else (
                f"needs {need_id}, which " + ("was not tried" if need is None else f"was not measured ({need.verdict})")
            )
            for fix_id in fixes:
                out[fix_id] = Trial(fix=fix_id, safety=catalog.get(fix_id).safety, verdict=SKIPPED, reason=why)
            continue
        ref = (FixRequest(need_id, dict(need.params)),)
        ref_label = _label_of(need)
        alone = f"{need_id} alone: {need.verdict}, {_fmt(need.speedup)}"
        if skip_inert:
            evidence = loop.evidence(ref_label, shares)
            for fix_id in list(fixes):
                inert = catalog.get(fix_id).inert
                if inert is not None and (why := inert(evidence)) is not None:
                    out[fix_id] = Trial(fix=fix_id, safety=catalog.get(fix_id).safety, verdict=SKIPPED, reason=why)
                    fixes.remove(fix_id)
            if not fixes:
                continue
        stage2 = [v for fix_id in fixes for v in variants_of(fix_id, ctx, spec, on_top_of=ref)]
        if loop.deadline is not None:
            stage = TrialPlan(variants=stage2)
            # NOTE: this stage starts with its own reference run, which nothing has paid for yet.
            out.update(_fit_budget(stage, bounds or {}, loop, notes if notes is not None else [], extra_runs=1))
            stage2 = stage.variants
            if not stage2:
                continue
        for v in stage2:
            v.reference, v.ref_note = ref_label, alone
        loop.measure(stage2, reference=ref, ref_label=ref_label, stage="on-top")
        out.update(collapse([loop.trial(v) for v in stage2]))
    return out


def _advice_note(advice: Sequence[Trial]) -> str:
    return f"advice, not measured: {', '.join(t.fix for t in advice)} (no safe run-time change; the diff includes it)"


def _diff_text(spec: RunSpec, trials: Sequence[Trial], notes: list[str]) -> str:
    """Return the diff making ``trials`` permanent; a failure is a note, never a lost measurement."""
    try:
        from advisor.fixes.diff import make_diff

        return make_diff(Path(spec.script), list(trials))
    except Exception as exc:  # noqa: BLE001 - a diff problem must not lose the measurements
        notes.append(f"no diff: {type(exc).__name__}: {exc}")
        return ""


def _label_of(t: Trial) -> str:
    """Name the run of a measured rung: ``dataloader_workers@2`` (its one parameter's value)."""
    if len(t.params) == 1:
        return f"{t.fix}@{next(iter(t.params.values()))}"
    return t.fix


# -- measure -----------------------------------------------------------------------------------


class Measurer:
    """Runs captures for the trials and keeps the baseline runs of each measurement (the *measure* part)."""

    def __init__(
        self, spec: RunSpec, runner: Runner, progress: Progress | None, repeats: int,
        min_effect: float, loss_steps: int,
    ) -> None:
        self.spec = spec
        self.runner = runner
        self.progress = progress
        self.repeats = repeats
        self.min_effect = min_effect
        self.loss_steps = loss_steps
        self.root = Path(spec.out_dir) / TRIALS_DIR
        self.baseline_losses: tuple[float | None, ...] = ()
        self.base_timeout: float | None = spec.timeout_s
        self.max_repeats = repeats
        self.base_step_ms: float | None = None
        # per variant label, each measured run's (median timed step ms, epochs ended while timed,
        # step source): what fixes measured on top of that rung read before they run (Fix.inert)
        self.rung_runs: dict[str, list[tuple[float | None, int, str | None]]] = {}
        self.on_run: Callable[[], None] | None = None
        self.runs = 0
        self.phases_s: dict[str, float] = {}
        self.starts: dict[str, int] = {}  # runs per start kind (cold, warm)
        self.walls: list[float] = []
        self.left: int | None = None
        self.current: list[_Variant] = []
        self.early_stop = True
        self.warmup_steps: int | None = None  # fewer than the spec's when the baseline settled early
        self.deadline: float | None = None  # perf_counter() by which the loop should end (--budget)
        self.clock: Callable[[], float] = time.perf_counter
        self.started = self.clock()

    @property
    def budget_s(self) -> float | None:
        """The whole loop's budget in seconds (None: no budget)."""
        return None if self.deadline is None else self.deadline - self.started

    def affords(self, runs: int) -> bool:
        """Whether ``runs`` more runs of the median wall time so far fit in the budget (always, without one)."""
        if self.deadline is None:
            return True
        typical = median(self.walls) or 0.0
        return self.clock() + runs * typical <= self.deadline

    def trial_spec(self, name: str, fixes: tuple[FixRequest, ...], overrides: dict[str, Any]) -> RunSpec:
        """Return the spec of one trial run: timed steps only, seeded, losses recorded."""
        s = replace(
            self.spec,
            out_dir=self.root / name,
            profiled_steps=0,
            full=False,
            fixes=fixes,
            seed=self.spec.seed if self.spec.seed is not None else DEFAULT_SEED,
            record_loss_steps=self.loss_steps,
            quiet=True,
            timeout_s=self.base_timeout,
            timed_steps=min(self.spec.timed_steps, TRIAL_TIMED_STEPS),
            min_timed_s=MIN_TRIAL_WINDOW_S,
            fix_installers=(INSTALLER,) if fixes else (),
        )
        if self.warmup_steps is not None:
            s = replace(s, warmup_steps=self.warmup_steps)
        if hasattr(s, "cprofile_steps"):
            s = replace(s, cprofile_steps=0)
        return replace(s, **overrides) if overrides else s

    def evidence(self, label: str, shares: Mapping[str, float] | None) -> RungRuns:
        """Return what the measured runs of the rung ``label`` saw (for :attr:`Fix.inert`)."""
        runs = self.rung_runs.get(label, [])
        return RungRuns(
            label=label, step_ms=median([ms for ms, _, _ in runs if ms is not None]),
            epoch_ends=tuple(n for _, n, _ in runs), base_step_ms=self.base_step_ms, shares=dict(shares or {}),
            step_source=next((src for _, _, src in runs if src), None),
        )

    def run(
        self, name: str, fixes: tuple[FixRequest, ...], overrides: dict[str, Any] | None = None,
        flight: TrialProgress | None = None,
    ) -> RunCapture:
        """Run one capture with ``fixes``; a capture-stage error becomes a crashed capture.

        With ``flight`` (what the run is: its label, round, stage) and a runner that takes a
        ``progress`` callback, the run's step updates are passed on as in-flight
        :class:`TrialProgress` events while it runs.
        """
        spec = self.trial_spec(name, fixes, overrides or {})
        try:
            if flight is not None and self.progress is not None and _takes_progress(self.runner):
                cap = self.runner(spec, progress=self._relay(flight))  # type: ignore[call-arg]
            else:
                cap = self.runner(spec)
        except AdvisorError as exc:  # the capture stage may raise for a script that failed
            from advisor.capture.model import RunStatus, ScriptError

            cap = RunCapture(
                run_dir=str(spec.out_dir), status=RunStatus.CRASHED,
                error=ScriptError(type=type(exc).__name__, message=str(exc)),
            )
        self.account(cap)
        return cap

    def account(self, cap: RunCapture, timed: bool = True) -> None:
        """Count a finished run: its wall time (for the ETA, when ``timed``) and its phases."""
        self.runs += 1
        start = str(getattr(cap, "start", "cold"))
        self.starts[start] = self.starts.get(start, 0) + 1
        if cap.wall_s and timed:
            self.walls.append(float(cap.wall_s))
        for phase, seconds in (cap.phases_s or {}).items():
            self.phases_s[phase] = round(self.phases_s.get(phase, 0.0) + float(seconds), 4)

    def _relay(self, flight: TrialProgress) -> Callable[[Any], None]:
        """Return a capture-progress callback passing the run's steps on, throttled (a background thread calls it)."""
        last = {"phase": "", "t": -math.inf}
        progress = self.progress

        def on_event(event: Any) -> None:
            phase = str(getattr(event, "phase", ""))
            now = self.clock()
            if progress is None or phase in ("", "done"):
                return
            if phase == last["phase"] and now - last["t"] < STEP_EVENT_INTERVAL_S:
                return
            last["phase"], last["t"] = phase, now
            typical = median(self.walls)
            progress(replace(
                flight, in_flight=phase, step=int(getattr(event, "step", 0) or 0),
                steps_total=int(getattr(event, "steps_total", 0) or 0), run=self.runs + 1,
                runs_left=self.left, eta_s=None if self.left is None or typical is None else self.left * typical,
            ))

        return on_event

    def run_baseline(
        self, name: str, k: int, fixes: tuple[FixRequest, ...] = (), flight: TrialProgress | None = None,
    ) -> RunCapture:
        """Run a reference run (the plain baseline, or the fixes others are measured on top of)."""
        cap = self.run(f"{name}-{k}", fixes, flight=flight)
        if not fixes and cap.ok and not self.baseline_losses:
            self.baseline_losses = tuple(cap.losses)
        if self.spec.timeout_s is None and cap.ok and cap.wall_s:
            # NOTE: a hung variant must not hang the loop: allow generous slack over the
            # baseline (compile can take 15 s cold) but not forever.
            self.base_timeout = max(self.base_timeout or 0.0, 120.0, 6 * cap.wall_s)
        return cap

    def rate(self, cap: RunCapture) -> float | None:
        """Steady samples/s of a run (steps/s when the script yields no DataLoader batches)."""
        if not cap.ok:
            return None
        t = cap.timed
        value = t.samples_per_s if t.samples_per_s else t.steps_per_s
        return float(value) if value and value > 0 else None

    def emit(self, event: TrialProgress) -> None:
        """Pass a progress event to the caller, if it listens; then let it save what is known."""
        if self.progress is not None:
            typical = median(self.walls)
            eta = None if self.left is None or typical is None else self.left * typical
            self.progress(replace(event, run=self.runs, runs_left=self.left, eta_s=eta))
        if self.on_run is not None:
            self.on_run()

    def snapshot(
        self, wanted: Sequence[str], results: dict[str, Trial], notes: Sequence[str],
        hidden: tuple[str, ...], started: float,
    ) -> FixOutcome:
        """Return what the loop knows now: finished trials, and the ones being measured marked unfinished.

        Nothing is kept and no diff is made: selection needs every trial finished.
        """
        pending = collapse([self.unfinished(v) for v in self.current if v.rates or not v.active])
        known = {**pending, **results}
        return FixOutcome(
            trials=tuple(known[f] for f in wanted if f in known), notes=tuple(notes),
            hidden_unsafe=hidden, wall_s=_since(started, self.clock), runs=self.runs, phases_s=dict(self.phases_s),
            starts=dict(self.starts),
        )

    def unfinished(self, v: _Variant) -> Trial:
        """Return a variant still being measured as a trial from the pairs so far (its reason says so)."""
        if not v.active:  # failed or skipped: its verdict is final already
            return self.trial(v)
        # NOTE: the variant's last run may still wait for its closing reference run: pairing it
        # with the reference before it alone is what paired_ratios does with a missing neighbour.
        t = self.trial(replace(v, ref_rates=[*v.ref_rates, None]))
        what = f"unfinished: {t.repeats} of {self.repeats} planned pairs measured so far"
        return replace(t, reason=f"{what}; {t.reason}" if t.reason else what, unfinished=True)

    def measure(
        self,
        variants: list[_Variant],
        reference: tuple[FixRequest, ...],
        ref_label: str,
        first_baseline: RunCapture | None = None,
        stage: str = "trials",
    ) -> None:
        """Interleave reference and variant runs for ``repeats`` rounds, closing with a reference.

        A variant still undecided after ``repeats`` rounds (its interval straddles 1.0 while its
        median shows an effect) gets extra rounds, up to ``max_repeats``, with only the
        undecided variants; the closing reference of one round opens the next.
        """
        if not variants:
            return
        prefix = "baseline" if not reference else f"{_safe_name(ref_label)}-ref"
        if stage == "combined":
            prefix = "combined-baseline"
        ref_rates: list[float | None] = []
        ref_ttfs: list[float] = []
        ref_peaks: list[int] = []
        ref_losses: list[tuple[float | None, ...]] = []
        ref_loaders: tuple[Any, ...] = ()
        ref_source: str | None = None
        for v in variants:
            v.ref_rates, v.ref_ttfs, v.ref_peaks = ref_rates, ref_ttfs, ref_peaks
        planned = self.repeats
        running = list(variants)
        self.current = list(variants)
        r = 0
        while True:
            cap = first_baseline if (r == 0 and first_baseline is not None) else self.run_baseline(
                prefix, r + 1, reference, flight=TrialProgress(
                    fix="baseline" if not reference else ref_label, repeat=min(r + 1, planned),
                    repeats=planned, stage=stage,
                ),
            )
            ref_rates.append(self.rate(cap))
            ref_loaders = ref_loaders or tuple(cap.dataloaders)
            ref_source = ref_source or (cap.step_source if cap.ok else None)
            if cap.ok and cap.timed.time_to_first_step_s is not None:
                ref_ttfs.append(cap.timed.time_to_first_step_s)
            if cap.ok and cap.peak_memory_bytes:
                ref_peaks.append(int(cap.peak_memory_bytes))
            ref_losses.append(tuple(cap.losses) if cap.ok else ())
            self.left = _runs_left(r, planned, sum(v.active for v in running), 0)
            self.emit(TrialProgress(
                fix="baseline" if not reference else ref_label, repeat=min(r + 1, planned),
                repeats=planned, samples_per_s=ref_rates[-1], stage=stage,
                message="" if cap.ok else f"reference run failed: {_failure_reason(cap)}",
            ))
            if r == planned:
                running = [v for v in running if v.active and self._undecided(v)]
                # NOTE: an extra round is paid for by the budget, or not run.
                if not running or planned >= self.max_repeats or not self.affords(len(running) + 1):
                    self.current = []
                    break
                planned += 1
            elif r >= MIN_PAIRS:
                for v in running:
                    if self.early_stop and v.active and decided_early(paired_ratios(v.ref_rates, v.rates), self.looks, self.min_effect):
                        v.early = r
                running = [v for v in running if v.active and not v.early]
                if not running or not self.affords(len(running) + 1):
                    for v in running:  # the budget ends the measurement: say so in its reason
                        v.early, v.cut = r, True
                    self.current = []
                    break
            order = running if r % 2 == 0 else list(reversed(running))
            queue = [v for v in order if v.active]
            for i, v in enumerate(queue):
                if v.active:
                    self.left = _runs_left(r, planned, len(queue), i + 1)
                    self._run_variant(
                        v, r, planned, ref_rates, ref_losses[-1] or self.baseline_losses, stage,
                        ref_loaders, ref_source,
                    )
            r += 1

    @property
    def looks(self) -> int:
        """Early looks a measurement may take (after :data:`MIN_PAIRS` pairs up to ``repeats``)."""
        return max(1, self.repeats - MIN_PAIRS + 1)

    def _undecided(self, v: _Variant) -> bool:
        est = estimate(paired_ratios(v.ref_rates, v.rates), self.min_effect)
        # NOTE: only a possible win is worth more runs; slower and no_effect are both dropped.
        if est.speedup is None or est.verdict not in (NO_EFFECT, UNDECIDED):
            return False
        return est.speedup >= 1.0 + self.min_effect

    def _run_variant(
        self, v: _Variant, r: int, n: int, ref_rates: list[float | None],
        ref_losses: tuple[float | None, ...], stage: str, ref_loaders: tuple[Any, ...] = (),
        ref_source: str | None = None,
    ) -> None:
        cap = self.run(f"{_safe_name(v.label)}-{r + 1}", v.requests, v.overrides,
                       flight=TrialProgress(fix=v.label, repeat=r + 1, repeats=n, stage=stage))
        note = cap.fix_notes.get(v.fix) if len(v.fixes) <= 1 else None
        if note is not None:
            v.note = note.detail
        message = ""
        if not cap.ok:
            v.failure = _failure_reason(cap)
            message = f"failed: {v.failure}"
        elif note is not None and note.state is NoteState.SKIPPED:
            v.skip = note.detail
            message = f"skipped: {v.skip}"
        elif ref_source and cap.step_source and cap.step_source != ref_source:
            v.failure = (
                f"steps were counted from {cap.step_source} boundaries here but from {ref_source} "
                "boundaries in the baseline: the throughputs are not comparable"
            )
            message = f"failed: {v.failure}"
        elif (
            len(v.fixes) == 1 and catalog.get(v.fix).changes_loader
            and ref_loaders and tuple(cap.dataloaders) == ref_loaders
        ):
            v.skip = "the DataLoader settings did not change: the fix found nothing to apply"
            message = f"skipped: {v.skip}"
        else:
            rate = self.rate(cap)
            if rate is None:
                v.failure = "the run recorded no timed steps"
            self.rung_runs.setdefault(v.label, []).append(
                (median(cap.timed.step_times_ms), cap.timed.epoch_ends, cap.step_source))
            while len(v.rates) < r:
                v.rates.append(None)
            v.rates.append(rate)
            if cap.timed.time_to_first_step_s is not None:
                v.ttfs.append(cap.timed.time_to_first_step_s)
            if cap.peak_memory_bytes:
                v.peaks.append(int(cap.peak_memory_bytes))
                v.memory_kind = cap.memory_kind
            base_losses = ref_losses or self.baseline_losses
            check = loss_parity(base_losses, cap.losses, v.loss_rtol)
            if check.max_rel_diff is not None:
                v.loss_diffs.append(check.max_rel_diff)
            if check.failure is not None:
                v.failure = check.failure
                message = f"failed: {check.failure}"
        est = estimate(paired_ratios(ref_rates + [None], v.rates), self.min_effect)
        self.emit(TrialProgress(
            fix=v.label, repeat=r + 1, repeats=n, estimate=est.speedup,
            samples_per_s=self.rate(cap), stage=stage, message=message,
        ))

    def trial(self, v: _Variant) -> Trial:
        """Turn a measured variant into a :class:`Trial` with its verdict."""
        ref_rates = v.ref_rates
        ratios = paired_ratios(ref_rates, v.rates)
        base_ttfs = median(v.ref_ttfs)
        loss = max(v.loss_diffs) if v.loss_diffs else None
        peak, base_peak = median(v.peaks), median(v.ref_peaks)
        common = {
            "fix": v.fix, "safety": v.safety, "params": dict(v.params),
            "fixes": v.fixes or (v.fix,), "reference": v.reference or None,
            "loss_max_rel_diff": loss, "time_to_first_step_s": median(v.ttfs),
            "baseline_time_to_first_step_s": base_ttfs,
            "peak_memory_bytes": None if peak is None else int(peak),
            "baseline_peak_memory_bytes": None if base_peak is None else int(base_peak),
            "memory_kind": v.memory_kind,
        }
        if v.skip is not None:
            return Trial(**common, verdict=SKIPPED, reason=v.skip, repeats=0)
        if v.failure is not None:
            return Trial(**common, verdict=FAILED, reason=v.failure, repeats=len(ratios))
        est = estimate(ratios, self.min_effect)
        used = [a for a in ref_rates if a]
        verdict, why = est.verdict, est.reason
        if len(common["fixes"]) == 1 and catalog.get(v.fix).objective is Objective.MEMORY:
            verdict, why = judge_memory(common["peak_memory_bytes"], common["baseline_peak_memory_bytes"], est)
        reason = "; ".join(r for r in (_describe(v), why) if r)
        return Trial(
            **common,
            baseline_samples_per_s=median(used),
            samples_per_s=median([x for x in v.rates if x]),
            speedup=est.speedup, ci_low=est.ci_low, ci_high=est.ci_high,
            verdict=verdict, reason=reason, repeats=est.pairs,
        )


def _takes_progress(runner: Callable[..., Any]) -> bool:
    """Whether a runner accepts a ``progress`` keyword (the real capture stages do; fakes may not)."""
    import inspect

    try:
        params = inspect.signature(runner).parameters
    except (TypeError, ValueError):
        return False
    return "progress" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _runs_left(r: int, planned: int, active: int, done_in_round: int) -> int:
    """Return the runs still planned in a measurement after ``done_in_round`` variant runs of round ``r``.

    Rounds ``r < planned`` run a reference then the active variants; round ``planned`` is the
    closing reference alone. Extra rounds for undecided trials are added only when decided on.
    """
    if r >= planned:
        return 0
    return max(active - done_in_round, 0) + (planned - r - 1) * (active + 1) + 1


# -- select ------------------------------------------------------------------------------------


def collapse(trials: Sequence[Trial]) -> dict[str, Trial]:
    """One trial per fix: the best measured rung of a ladder, with the ladder in its reason."""
    by_fix: dict[str, list[Trial]] = {}
    for t in trials:
        by_fix.setdefault(t.fix, []).append(t)
    out: dict[str, Trial] = {}
    for fix, rungs in by_fix.items():
        if len(rungs) == 1:
            out[fix] = rungs[0]
            continue
        measured = [t for t in rungs if t.speedup is not None and t.verdict not in (FAILED, SKIPPED)]
        fits = [t for t in rungs if t.verdict == IMPROVED]
        if for_memory(rungs[0]) and fits:
            best = fits[0]  # NOTE: rungs come in ladder order: the first that fits holds the most per micro-batch
        elif measured:
            best = max(measured, key=lambda t: (t.verdict == IMPROVED, t.speedup or 0.0))
        else:
            best = rungs[0]
        rung = catalog.get(fix).rung_name
        ladder = ", ".join(
            f"{rung(t.params)}: " + (f"{t.speedup:.2f}x ({t.verdict})" if t.speedup is not None else t.verdict)
            for t in rungs
        )
        out[fix] = replace(best, reason=f"{best.reason}; ladder {ladder}".lstrip("; "))
    return out


@dataclass(frozen=True)
class Selection:
    """The fixes to combine, chosen from the measured trials (before the combined run).

    Attributes:
        chosen: The trials to measure together, in the order they were tried.
        notes: Why some improved fixes were left out (conflicts, a missing base).
        carried: Lines explaining a required rung carried into the set as a base.
        single: The answer when one trial is chosen (it is then not measured again).
    """

    chosen: list[Trial]
    notes: list[str]
    carried: list[str]
    single: Trial | None = None


def select_combination(
    trials: Sequence[Trial], on_top: frozenset[str] = frozenset(), min_effect: float = MIN_EFFECT,
) -> Selection:
    """Choose the improved fixes to measure together (pure: no run is made).

    Conflicting fixes (bf16 vs fp16) keep the faster one. An improved on-top fix (measured
    against a rung of the fix it requires, not the baseline) brings that rung into the set even
    when the rung was not a win by itself, unless the product of their speedups already says
    the set loses against the baseline.
    """
    fixes = catalog.get_fixes()
    notes: list[str] = []
    # NOTE: a fix whose objective is memory is kept for the memory it saves, not combined for
    # speed (it usually costs some): pick_memory decides it.
    improved = [t for t in trials if t.verdict == IMPROVED and not for_memory(t)]
    chosen: list[Trial] = []
    for t in sorted(improved, key=lambda t: -(t.speedup or 0.0)):
        conflicts = set(fixes[t.fix].conflicts)
        if any(c.fix in conflicts or t.fix in fixes[c.fix].conflicts for c in chosen):
            notes.append(f"{t.fix} conflicts with a faster kept fix; not combined")
            continue
        chosen.append(t)
    by_fix = {t.fix: t for t in trials}
    carried_why: list[str] = []
    for need in dict.fromkeys(fixes[t.fix].requires for t in chosen if t.fix in on_top):
        if need is None or any(c.fix == need for c in chosen):
            continue
        tops = [t for t in chosen if t.fix in on_top and fixes[t.fix].requires == need]
        base = by_fix.get(need)
        if base is None or base.verdict not in _RAN:
            chosen = [t for t in chosen if t not in tops]
            notes.append(f"{', '.join(t.fix for t in tops)}: measured on top of {need}, which is "
                         "not available; not kept")
            continue
        what = (
            f"{base.fix} alone {base.verdict} ({_fmt(base.speedup)}); with "
            + ", ".join(f"{t.fix} on top {_fmt(t.speedup)} more" for t in tops)
        )
        # NOTE: the on-top speedups are relative to the rung, the rung's to the baseline: their
        # product estimates the set against the baseline. A set estimated to lose (workers 0.3x,
        # cpu_threads 1.3x on top) is not worth the combined runs, and would drag down the rest.
        est = (base.speedup or 0.0) * math.prod(t.speedup or 0.0 for t in tops)
        if est < 1.0 + min_effect:
            chosen = [t for t in chosen if t not in tops]
            notes.append(f"{what}: about {est:.2f}x against the plain baseline together; not combined")
            continue
        chosen.append(base)
        carried_why.append(f"{what}: {_label_of(base)} goes into the combination as their base")
    notes.extend(w + ", measured together against the plain baseline" for w in carried_why)
    order = [x.fix for x in trials]
    chosen.sort(key=lambda t: order.index(t.fix))
    # NOTE: an on-top fix always arrives with its required rung (kept or carried), so a single
    # chosen trial is a standalone one, measured against the plain baseline: it is the answer.
    return Selection(chosen, notes, carried_why, single=chosen[0] if len(chosen) == 1 else None)


def _measure_combined(selection: Selection, loop: Measurer, ctx: FixContext, spec: RunSpec) -> Trial:
    """Run the chosen fixes together against the plain baseline; return the combined trial."""
    chosen = selection.chosen
    fixes = catalog.get_fixes()
    overrides: dict[str, Any] = {}
    for t in chosen:
        # NOTE: runs whose batches hold k times the samples take fewer steps (see ladder_steps).
        overrides = fixes[t.fix].overrides_for(dict(t.params), spec, ctx, loop.base_step_ms) or overrides
    v = _Variant(
        label="combined", fix="+".join(t.fix for t in chosen),
        safety=SAFE if all(t.safety == SAFE for t in chosen) else UNSAFE,
        requests=tuple(FixRequest(t.fix, dict(t.params)) for t in chosen),
        loss_rtol=max(fixes[t.fix].loss_rtol for t in chosen),
        params={t.fix: dict(t.params) for t in chosen}, overrides=overrides,
        fixes=tuple(t.fix for t in chosen), note="; ".join(selection.carried),
    )
    loop.measure([v], reference=(), ref_label="baseline", stage="combined")
    return loop.trial(v)


def pick_kept(
    combined: Trial, chosen: Sequence[Trial], on_top: frozenset[str] = frozenset(),
    min_effect: float = MIN_EFFECT,
) -> tuple[Trial | None, list[Trial], list[str]]:
    """Keep the combination, or the best standalone fix when the combination is not better.

    Returns:
        The combined trial to report (None when nothing is kept), the kept trials, and notes.
    """
    # NOTE: a fix measured on top of another has a speedup relative to that fix's run, not to
    # the baseline, and a carried rung was no win alone: neither competes with the combination
    # as a single fix. Only standalone wins do.
    standalone = [t for t in chosen if t.fix not in on_top and t.verdict == IMPROVED]
    best = max(standalone, key=lambda t: t.speedup or 0.0) if standalone else None
    label = combined.fix
    good = combined.verdict == IMPROVED
    if good and (best is None or (combined.speedup or 0.0) >= (best.speedup or 0.0) * (1 - min_effect)):
        return combined, list(chosen), []
    if best is None:
        return None, [], [
            f"the combination {label} measured {_fmt(combined.speedup)} ({combined.verdict}) against "
            "the plain baseline: nothing kept"
        ]
    return combined, [best], [
        f"the combination {label} measured {_fmt(combined.speedup)} ({combined.verdict}), "
        f"not better than {best.fix} alone ({_fmt(best.speedup)}): keeping {best.fix} only"
    ]


# -- memory: fixes whose objective is memory ---------------------------------------------------


def for_memory(t: Trial) -> bool:
    """Tell whether a trial measures one fix whose objective is memory (its verdict is on memory)."""
    fix = catalog.get_fixes().get(t.fix)
    return len(t.fixes) == 1 and fix is not None and fix.objective is Objective.MEMORY


def judge_memory(peak: int | None, base_peak: int | None, speed: Estimate) -> tuple[Verdict, str]:
    """Decide a memory fix's verdict on its peak memory; the speed it costs goes in the reason.

    ``improved`` when the peak falls by :data:`~advisor.fixes.fix.MIN_MEMORY_SAVING` or more,
    ``no_effect`` when it does not; ``undecided`` when no peak was recorded.
    """
    cost = "n/a" if speed.speedup is None else f"{speed.speedup:.2f}x"
    if speed.ci_low is not None and speed.ci_high is not None:
        cost += f" [{speed.ci_low:.2f}, {speed.ci_high:.2f}]"
    cost = f"its speed: {cost} ({speed.verdict})"
    if not peak or not base_peak:
        return UNDECIDED, f"objective memory: no peak memory was recorded; {cost}"
    saved = 1.0 - peak / base_peak
    change = f"peak {_mib(base_peak)} -> {_mib(peak)} ({saved:.0%} less)" if saved > 0 else (
        f"peak {_mib(base_peak)} -> {_mib(peak)} ({-saved:.0%} more)")
    if saved >= MIN_MEMORY_SAVING:
        return IMPROVED, f"objective memory: {change}; {cost}"
    return NO_EFFECT, f"objective memory: {change}, under the {MIN_MEMORY_SAVING:.0%} that counts as a saving; {cost}"


def pick_memory(trials: Sequence[Trial]) -> tuple[Trial | None, list[str]]:
    """Keep the memory fix that saves memory at the least speed cost (one: they were not measured together)."""
    savers = [t for t in trials if for_memory(t) and t.verdict == IMPROVED]
    if not savers:
        return None, []
    best = max(savers, key=lambda t: (t.speedup or 0.0, -(t.memory_ratio or 1.0)))
    notes = [f"{best.fix} is kept for the memory it saves (its objective), not combined with the speed fixes"]
    others = [t for t in savers if t is not best]
    if others:
        notes.append(
            "also saves memory, not kept (the memory fixes were each measured alone, not together): "
            + ", ".join(f"{t.fix} ({_fmt(t.speedup)}, memory {_ratio(t.memory_ratio)})" for t in others)
        )
    return best, notes


def _out_of_memory(
    base0: RunCapture, wanted: list[str], hidden: tuple[str, ...], notes: list[str], results: dict[str, Trial],
    only: Sequence[str], unsafe: bool, loop: Measurer, spec: RunSpec, make_diff_text: bool,
) -> FixOutcome:
    """Try the memory fixes alone after the baseline ran out of memory: each runs until it fails, or ``repeats`` times.

    There is no baseline throughput to pair with, so a fix that lets the script run is reported
    with its own samples/s and peak memory and no speedup; it is ``improved`` (it fits) when every
    run finished with finite losses. Other fixes are skipped: nothing measures them.
    """
    fixes = catalog.get_fixes()
    memory_ids = [f for f in (only or fixes) if fixes[f].objective is Objective.MEMORY]
    if not only:
        shown = [f for f in memory_ids if unsafe or fixes[f].safety == SAFE]
        hidden = (*hidden, *(f for f in memory_ids if f not in shown and f not in hidden))
        memory_ids = shown
    budget = spec.memory_budget_bytes
    why = base0.error.message if base0.error is not None else "out of memory"
    notes.append(f"the baseline ran out of memory ({why}); tried the fixes whose objective is memory: "
                 + (", ".join(memory_ids) or "none allowed (use --unsafe-fixes for fit_accumulation)"))
    ctx = context_from_capture(base0, budget)
    plan = plan_trials(memory_ids, ctx, spec, None)
    for v in plan.variants:
        for r in range(loop.repeats):
            cap = loop.run(f"{_safe_name(v.label)}-{r + 1}", v.requests, v.overrides,
                           flight=TrialProgress(fix=v.label, repeat=r + 1, repeats=loop.repeats))
            note = cap.fix_notes.get(v.fix)
            v.note = note.detail if note is not None else v.note
            if not cap.ok or loop.rate(cap) is None:
                v.failure = _failure_reason(cap) if not cap.ok else "the run recorded no timed steps"
            elif note is not None and note.state is NoteState.SKIPPED:
                v.skip = note.detail
            elif any(x is None or not math.isfinite(x) for x in cap.losses):
                v.failure = "a loss was not finite"
            else:
                v.rates.append(loop.rate(cap))
                v.peaks.append(int(cap.peak_memory_bytes or 0))
                v.memory_kind = cap.memory_kind
            loop.emit(TrialProgress(fix=v.label, repeat=r + 1, repeats=loop.repeats, samples_per_s=loop.rate(cap),
                                    message=f"failed: {v.failure}" if v.failure else ""))
            if not v.active:
                break
    measured: list[Trial] = []
    for v in plan.variants:
        peak = median([p for p in v.peaks if p])
        common = dict(fix=v.fix, safety=v.safety, params=dict(v.params), fixes=(v.fix,), memory_kind=v.memory_kind,
                      peak_memory_bytes=None if peak is None else int(peak),
                      baseline_peak_memory_bytes=base0.peak_memory_bytes)
        if v.skip is not None:
            measured.append(Trial(**common, verdict=SKIPPED, reason=v.skip))
        elif v.failure is not None:
            measured.append(Trial(**common, verdict=FAILED, reason=v.failure, repeats=len(v.rates)))
        else:
            fits = f"fits: peak {_mib(peak)}" + (f" of the {_mib(budget)} budget" if budget else "")
            measured.append(Trial(
                **common, verdict=IMPROVED, samples_per_s=median(v.rates), repeats=len(v.rates),
                reason="; ".join(x for x in (v.note, f"the baseline ran out of memory, {fits}; no speedup: the "
                                             "baseline never ran its timed steps") if x),
            ))
    results.update({**plan.skipped, **collapse(measured)})
    for f in wanted:
        results.setdefault(f, Trial(fix=f, safety=fixes[f].safety, verdict=SKIPPED,
                                    reason="the baseline ran out of memory: only fixes whose objective is memory "
                                    "can run, and none of them made it fit" if fixes[f].objective is Objective.MEMORY
                                    else "the baseline ran out of memory: only fixes whose objective is memory can run"))
    order = [*wanted, *(f for f in memory_ids if f not in wanted)]
    trials = tuple(results[f] for f in order if f in results)
    fitting = [t for t in trials if for_memory(t) and t.verdict == IMPROVED]
    best = max(fitting, key=lambda t: t.samples_per_s or 0.0) if fitting else None
    if best is not None and len(fitting) > 1:
        notes.append(f"keeping {best.fix}: the fastest of the fixes that fit ("
                     + ", ".join(f"{t.fix} {t.samples_per_s or 0:.1f}" for t in fitting)
                     + " samples/s, runs not interleaved)")
    diff = ""
    if make_diff_text and best is not None:
        try:
            from advisor.fixes.diff import make_diff

            diff = make_diff(Path(spec.script), [best])
        except Exception as exc:  # noqa: BLE001 - a diff problem must not lose the measurements
            notes.append(f"no diff: {type(exc).__name__}: {exc}")
    return FixOutcome(
        trials=trials, combined=best, kept=(best.fix,) if best else (), diff=diff, notes=tuple(notes),
        hidden_unsafe=tuple(hidden), kept_trials=(best,) if best else (), wall_s=_since(loop.started, loop.clock),
        runs=loop.runs, phases_s=dict(loop.phases_s), starts=dict(loop.starts),
    )


def _mib(n: float | None) -> str:
    return "n/a" if not n else f"{n / 2**20:,.0f} MiB"


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


# -- small helpers -----------------------------------------------------------------------------


def _describe(v: _Variant) -> str:
    parts = []
    if v.reference:
        parts.append(f"on top of {v.reference}")
    if v.ref_note:
        parts.append(v.ref_note)
    if v.note:
        parts.append(v.note)
    if v.early and v.cut:
        parts.append(f"stopped after {v.early} pairs: the --budget ran out")
    elif v.early:
        parts.append(f"decided after {v.early} pairs (sequential test, Bonferroni-corrected looks)")
    return "; ".join(parts)


def _failure_reason(cap: RunCapture) -> str:
    where = f" (see {Path(cap.run_dir) / cap.stderr_log})" if cap.run_dir else ""
    if cap.error is not None:
        return f"{cap.status}: {cap.error.type}: {cap.error.message}{where}"
    if cap.ok:
        return "no timed steps"
    return f"{cap.status} (exit code {cap.exit_code}){where}"




def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _safe_name(label: str) -> str:
    return label.replace("@x", "-x").replace("@", "-w").replace("+", "_").replace("/", "_")


def _clock(seconds: float) -> str:
    """``42s`` or ``3m05s``: a duration for a progress line."""
    seconds = max(int(round(seconds)), 0)
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"


def _since(t0: float, clock: Callable[[], float] = time.perf_counter) -> float:
    return round(clock() - t0, 3)
