"""The top of the fix loop: :func:`run_trials`, which reads as its steps (docs/fix-loop.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from advisor._num import median
from advisor.capture.model import RunCapture, RunSpec
from advisor.engine.model import FixRef
from advisor.fixes import catalog
from advisor.fixes.bounds import GainBound, gain_bounds
from advisor.fixes.fix import FixContext, context_from_capture, is_out_of_memory
from advisor.fixes.loop.measure import Measurer
from advisor.fixes.loop.memory import pick_memory
from advisor.fixes.loop.options import WARMUP_SETTLED, LoopOptions
from advisor.fixes.loop.plan import choose, fit_budget, plan_trials, settled_warmup
from advisor.fixes.loop.progress import TrialProgress
from advisor.fixes.loop.select import best_alone, collapse, pick_kept, select_combination
from advisor.fixes.loop.stages import (
    Together,
    combined_from,
    confirm_alone,
    measure_combined,
    measure_on_top,
    needs_fresh,
    out_of_memory,
    profile_kept,
)
from advisor.fixes.loop.text import advice_note, diff_text, failure_reason, since, times
from advisor.fixes.loop.variant import IMPROVED, SKIPPED
from advisor.fixes.model import FixOutcome, Trial


def run_trials(
    spec: RunSpec, suggested: Sequence[FixRef], options: LoopOptions | None = None, **fields: Any,
) -> FixOutcome:
    """Try each suggested fix at run time, measure it against the baseline, keep what helps.

    Args:
        spec: The diagnosed run's spec; trials run the same script and arguments, in
            ``<spec.out_dir>/trials/``, without the profiler.
        suggested: Fixes the findings suggest (duplicates are merged).
        options: How to try them (:class:`~advisor.fixes.loop.options.LoopOptions`; its
            defaults when None).
        **fields: Any :class:`~advisor.fixes.loop.options.LoopOptions` field by name
            (``repeats=5``), over ``options``; an unknown name is a TypeError.

    Returns:
        A :class:`~advisor.fixes.model.FixOutcome`: every trial with its verdict, the combined
        trial, the kept fix ids and the diff.

    Raises:
        UsageError: ``only`` names an unknown fix id, or ``repeats`` is below 1.
    """
    opts = replace(options or LoopOptions(), **fields)
    started = opts.clock()
    opts.check()
    loop = _measurer(spec, opts, started)
    wanted, hidden, notes = choose(suggested, opts.only, opts.unsafe)
    results: dict[str, Trial] = {}
    if opts.checkpoint is not None:
        save = opts.checkpoint
        loop.on_run = lambda: save(loop.snapshot(wanted, results, notes, hidden, started))
    bounds = gain_bounds(wanted, opts.breakdown, opts.impacts, opts.gpu_busy)
    if not opts.only:
        results.update(_hopeless(wanted, bounds, opts.min_effect, notes))
    todo = [f for f in wanted if f not in results]
    if not todo:
        return FixOutcome(trials=tuple(results[f] for f in wanted), notes=tuple(notes),
                          hidden_unsafe=hidden, wall_s=since(started, opts.clock))
    if all(catalog.get(f).needs_no_run for f in todo):
        return _advice_only(todo, wanted, hidden, notes, results, spec, opts, started)

    # Round 1's baseline comes first: it decides what can apply.
    base0 = loop.run_baseline("baseline", 1, flight=TrialProgress(fix="baseline", repeat=1, repeats=opts.repeats))
    if is_out_of_memory(base0):
        return out_of_memory(base0, wanted, hidden, notes, results, opts.only, opts.unsafe, loop, spec,
                             opts.make_diff_text)
    if not base0.ok or loop.rate(base0) is None:
        return _baseline_failed(base0, wanted, hidden, notes, results, loop, started)
    ctx = replace(_settle(base0, spec, loop, opts.settle_warmup, notes),
                  peak_at=opts.peak_at, peak_activation_frac=opts.peak_activation_frac, gpu_busy=opts.gpu_busy)

    plan = plan_trials(todo, ctx, spec, loop.base_step_ms)
    if opts.budget_s is not None:
        results.update(fit_budget(plan, bounds, loop, notes))
    # NOTE: a fix whose gain depends on what a forked run inherits is measured apart, every run
    # of it and of its baseline cold (Fix.fresh_process); the rest share the warm baseline.
    fresh = [v for v in plan.variants if needs_fresh(v.fixes)]
    loop.measure([v for v in plan.variants if v not in fresh], reference=(), ref_label="baseline",
                 first_baseline=base0)
    loop.measure(fresh, reference=(), ref_label="baseline", fresh=True)
    results.update({**plan.skipped, **plan.advice})
    results.update(collapse([loop.trial(v) for v in plan.variants]))
    together: dict[Together, tuple[Trial, dict[str, Any]]] = {}
    if plan.on_top:
        results.update(measure_on_top(plan.on_top, results, ctx, spec, loop, bounds, notes,
                                      shares=opts.breakdown, skip_inert=opts.skip_inert and not opts.only,
                                      together=together))

    trials = tuple(_scored(results[f], bounds) for f in wanted if f in results)
    combined, kept, trials = _keep(trials, frozenset(plan.on_top), loop, ctx, spec, notes, together)
    if combined is not None:
        combined = _scored(combined, bounds)  # a set measured together has no prediction: unchanged
    advice = [results[f] for f in wanted if f in plan.advice]
    if advice:
        notes.append(advice_note(advice))
    kept_run = profile_kept(kept, loop, ctx, spec, notes) if opts.profile_kept and kept else ""
    diff = diff_text(spec, [*kept, *advice], notes) if opts.make_diff_text and (kept or advice) else ""
    return FixOutcome(
        trials=trials,
        combined=combined,
        kept=tuple(t.fix for t in kept),
        diff=diff,
        notes=tuple(notes),
        hidden_unsafe=hidden,
        kept_trials=tuple(kept),
        wall_s=since(started, opts.clock),
        runs=loop.runs,
        phases_s=dict(loop.phases_s),
        starts=dict(loop.starts),
        kept_run=kept_run,
    )


def _measurer(spec: RunSpec, opts: LoopOptions, started: float) -> Measurer:
    """Make the loop's measurer, with its round limits, clock and budget deadline set from ``opts``."""
    loop = Measurer(spec, opts.runner, opts.progress, opts.repeats, opts.min_effect, opts.loss_steps)
    loop.max_repeats = max(opts.repeats, opts.max_repeats if opts.max_repeats is not None else 2 * opts.repeats)
    loop.started, loop.clock = started, opts.clock
    loop.early_stop = opts.early_stop
    if opts.budget_s is not None:
        loop.deadline = started + opts.budget_s
    return loop


def _hopeless(
    wanted: Sequence[str], bounds: Mapping[str, GainBound], min_effect: float, notes: list[str],
) -> dict[str, Trial]:
    """Skip, unrun, the fixes whose Amdahl bound cannot reach ``min_effect``.

    Such a fix is not worth a run even if its part of the step vanished; the caller runs it anyway
    when it was named with ``--fix`` (the user asked for that measurement).
    """
    hopeless = [f for f in wanted if bounds[f].cannot_reach(min_effect)]
    out = {
        f: Trial(fix=f, safety=catalog.get(f).safety, verdict=SKIPPED, reason=bounds[f].skip_reason(min_effect))
        for f in hopeless
    }
    if hopeless:
        notes.append(f"not run, their Amdahl bound is below the {min_effect:.0%} minimum effect: "
                     + ", ".join(f"{f} (at most {bounds[f].speedup:.3f}x)" for f in hopeless))
    return out


def _advice_only(
    todo: Sequence[str], wanted: Sequence[str], hidden: tuple[str, ...], notes: list[str],
    results: dict[str, Trial], spec: RunSpec, opts: LoopOptions, started: float,
) -> FixOutcome:
    """Return the outcome when every fix left is advice: nothing runs, not even a baseline.

    A baseline measured for advice would be read by nobody (examples/sync_logging.py ran three
    baseline runs for host_reads alone).
    """
    plan = plan_trials(todo, FixContext(), spec)
    results.update(plan.advice)
    advice = list(plan.advice.values())
    notes.append(advice_note(advice))
    return FixOutcome(
        trials=tuple(results[f] for f in wanted if f in results),
        diff=diff_text(spec, advice, notes) if opts.make_diff_text else "",
        notes=tuple(notes), hidden_unsafe=hidden, wall_s=since(started, opts.clock),
    )


def _baseline_failed(
    base0: RunCapture, wanted: Sequence[str], hidden: tuple[str, ...], notes: list[str],
    results: dict[str, Trial], loop: Measurer, started: float,
) -> FixOutcome:
    """Return the outcome when the first baseline failed or timed nothing: every fix not yet decided is skipped."""
    reason = failure_reason(base0) if not base0.ok else "the baseline recorded no timed steps"
    notes.append(f"no fix measured: the baseline run failed ({reason})")
    trials = tuple(
        results.get(f) or Trial(
            fix=f, safety=catalog.get(f).safety, verdict=SKIPPED, reason=f"baseline run failed: {reason}",
        )
        for f in wanted
    )
    return FixOutcome(trials=trials, notes=tuple(notes), hidden_unsafe=hidden, wall_s=since(started, loop.clock),
                      runs=loop.runs, phases_s=dict(loop.phases_s), starts=dict(loop.starts))


def _settle(base0: RunCapture, spec: RunSpec, loop: Measurer, settle_warmup: bool, notes: list[str]) -> FixContext:
    """Read the first baseline: the fixes' context, its step time, and the warm-up the trial runs need."""
    ctx = context_from_capture(base0, spec.memory_budget_bytes)
    loop.base_step_ms = median(base0.timed.step_times_ms)
    if settle_warmup:
        read = _warmup_reader(spec, loop, notes)
        read(base0)
        if loop.warmup_steps is None:
            loop.on_baseline = read
    return ctx


def _warmup_reader(spec: RunSpec, loop: Measurer, notes: list[str]) -> Callable[[RunCapture], None]:
    """Read plain baseline runs' warm-up, the first and then each later one, until one settled early.

    Trial runs then warm up as long as that run needed. A warm-up that one run needs, every run
    needs: it comes from the script. A machine whose speed moves between two levels within
    seconds (this project's VM: steps of 75 ms, then 105-120 ms) can start the first baseline on
    the slow level and leave it mid-window, which reads as a warm-up that never ended; every
    trial run then paid the full warm-up (0.3 s).
    """
    runs = 0

    def read(cap: RunCapture) -> None:
        nonlocal runs
        runs += 1
        if not cap.ok:
            return
        warmup = settled_warmup(cap.timed.warmup_step_times_ms, cap.timed.step_times_ms, spec.warmup_steps)
        if warmup >= spec.warmup_steps:
            return
        loop.warmup_steps, loop.on_baseline = warmup, None
        within = f"within {WARMUP_SETTLED:.2f}x of its timed median from warm-up step {warmup} on"
        notes.append(
            f"trial runs warm up for {warmup} steps, not {spec.warmup_steps}: the baseline's step time was {within}"
            if runs == 1 else
            f"trial runs warm up for {warmup} steps, not {spec.warmup_steps}, from baseline run {runs} on: "
            f"its step time was {within}, where the first baseline run's had not settled"
        )

    return read


def _keep(
    trials: tuple[Trial, ...], on_top: frozenset[str], loop: Measurer, ctx: FixContext, spec: RunSpec,
    notes: list[str], together: Mapping[Together, tuple[Trial, dict[str, Any]]],
) -> tuple[Trial | None, list[Trial], tuple[Trial, ...]]:
    """Decide what is kept: the wins combined (and measured together), plus the memory saver.

    A set the on-top stage already ran together against the plain baseline is not run again
    (:func:`~advisor.fixes.loop.stages.combined_from`).

    Returns:
        The combined trial to report (None when nothing is kept), the kept trials, and the
        trials again, a carried workers rung's reason now saying why it is kept.
    """
    selection = select_combination(trials, on_top, loop.min_effect)
    notes.extend(selection.notes)
    combined, kept = selection.single, selection.chosen
    if len(selection.chosen) > 1:
        measured = combined_from(selection, together, loop, ctx, spec)
        if measured is not None or loop.affords(loop.repeats * 2 + 1):
            measured = measured or measure_combined(selection, loop, ctx, spec)
            combined, kept, more = pick_kept(measured, selection.chosen, on_top, loop.min_effect)
            if len(kept) == 1 and measured.verdict != IMPROVED and loop.affords(loop.repeats * 2 + 1):
                combined, kept, again = _reconfirm(measured, kept[0], loop, ctx, spec)
                more.append(again)
        else:
            combined, kept, more = best_alone(selection.chosen, on_top)
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
    return combined, kept, trials


def _reconfirm(
    measured: Trial, best: Trial, loop: Measurer, ctx: FixContext, spec: RunSpec,
) -> tuple[Trial | None, list[Trial], str]:
    """Measure ``best`` again alone when the combination holding it did not improve; keep it only if it still does.

    A combination that contains a win and measures no gain contradicts that win: one of the two
    measurements is wrong, and on a machine whose load changed between them it is often the win.
    """
    again = confirm_alone(best, loop, ctx, spec)
    said = (
        f"{best.fix} measured {times(best.speedup)} alone but the combination {measured.fix} holding it "
        f"{times(measured.speedup)} ({measured.verdict}): measured again alone against a fresh baseline, "
        f"{times(again.speedup)} ({again.verdict})"
    )
    if again.verdict == IMPROVED:
        return again, [best], f"{said}; kept"
    return None, [], f"{said}; not kept"


def _scored(trial: Trial, bounds: Mapping[str, GainBound]) -> Trial:
    """Put the diagnosis's prediction for a measured fix beside its measurement.

    Only a trial against the plain baseline is scored: an on-top fix's speedup is relative to
    another fix's run, which no prediction was made for.
    """
    bound = bounds.get(trial.fix)
    if bound is None or bound.speedup is None or trial.reference or trial.speedup is None or len(trial.fixes) != 1:
        return trial
    return replace(trial, estimate=bound.speedup, estimate_basis="amdahl" if bound.strict else "finding")
