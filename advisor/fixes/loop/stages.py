"""The fix loop's stages after the first measurement, and the path taken when the baseline runs out of memory.

Fixes measured on top of another fix's best rung, the chosen fixes measured together, the kept
fixes run once under the profiler, and the memory fixes tried alone when there is no baseline to
pair with (docs/fix-loop.md, steps 6 and 7).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor._num import median
from advisor.capture.model import FixRequest, NoteState, RunCapture, RunSpec
from advisor.errors import AdvisorError
from advisor.fixes import catalog
from advisor.fixes.bounds import GainBound
from advisor.fixes.fix import SAFE, UNSAFE, FixContext, Objective, context_from_capture
from advisor.fixes.loop.measure import Measurer
from advisor.fixes.loop.memory import for_memory, over_budget
from advisor.fixes.loop.pairing import PAIRED_NOTE
from advisor.fixes.loop.plan import TrialPlan, fit_budget, plan_trials, variants_of
from advisor.fixes.loop.progress import TrialProgress
from advisor.fixes.loop.select import Selection, collapse
from advisor.fixes.loop.text import (
    diff_text,
    failure_reason,
    label_of,
    mib,
    safe_name,
    since,
    times,
)
from advisor.fixes.loop.variant import FAILED, IMPROVED, RAN, SKIPPED, Variant
from advisor.fixes.model import FixOutcome, Trial, set_name
from advisor.rundir import KEPT_DIR


def measure_on_top(
    on_top: Sequence[str], results: dict[str, Trial], ctx: FixContext, spec: RunSpec, loop: Measurer,
    bounds: Mapping[str, GainBound] | None = None, notes: list[str] | None = None,
    shares: Mapping[str, float] | None = None, skip_inert: bool = True,
    together: dict[Together, tuple[Trial, dict[str, Any]]] | None = None,
) -> dict[str, Trial]:
    """Stage 2: fixes that build on another fix, measured beside its best measured rung.

    They are measured whenever the required fix *ran* -- a no_effect workers trial may still be
    half of a winning pair -- unless that rung's runs show the fix could not change what its
    trial measures (:attr:`Fix.inert`, with ``skip_inert``). One measurement against the plain
    baseline runs the rung and the fixes on top of it; each fix is judged against the rung's run
    of the same round (:mod:`advisor.fixes.loop.pairing`). What the same runs say of each fix
    and its rung together, against the baseline, goes into ``together`` (by :func:`together_key`):
    the combination, when it is the one chosen, needs no runs of its own.
    """
    out: dict[str, Trial] = {}
    by_need: dict[str, list[str]] = {}
    for fix_id in on_top:
        by_need.setdefault(catalog.get(fix_id).requires or "", []).append(fix_id)
    for need_id, fixes in by_need.items():
        need = results.get(need_id)
        if need is None or need.verdict not in RAN or not need.params:
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
        ref_label = label_of(need)
        alone = f"{need_id} alone: {need.verdict}, {times(need.speedup)}"
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
            # NOTE: this stage starts with its own baseline run and runs the rung beside the
            # fixes, which nothing has paid for yet.
            out.update(fit_budget(stage, bounds or {}, loop, notes if notes is not None else [],
                                  extra_runs=1 + loop.repeats))
            stage2 = stage.variants
            if not stage2:
                continue
        rung = Variant(
            label=ref_label, fix=need_id, safety=need.safety, requests=ref, loss_rtol=catalog.get(need_id).loss_rtol,
            params=dict(need.params), fixes=(need_id,), anchor=True,
        )
        for v in stage2:
            v.reference, v.partner = ref_label, rung
            v.ref_note = f"{alone}; {PAIRED_NOTE.format(label=ref_label)}"
        loop.measure([rung, *stage2], reference=(), ref_label="baseline", stage="on-top")
        out.update(collapse([_on_top_trial(v, rung, loop) for v in stage2]))
        if together is not None:
            for v in stage2:
                if v.active and rung.active:
                    together[together_key((need, v))] = (_pair_trial(v, need, loop), dict(v.overrides))
    return out


Together = frozenset[tuple[str, str]]
"""A set of fixes with their parameters, as :func:`together_key` writes it."""


def together_key(items: Sequence[Trial | Variant]) -> Together:
    """Key a set of fixes (trials, or the variants measuring them) by each fix and its parameters."""
    return frozenset((x.fix, repr(sorted(dict(x.params).items()))) for x in items)


def combined_from(
    selection: Selection, together: Mapping[Together, tuple[Trial, dict[str, Any]]], loop: Measurer,
    ctx: FixContext, spec: RunSpec,
) -> Trial | None:
    """Return the chosen set's trial from runs already made, or None when none measured exactly that set.

    The on-top stage ran each fix on top of its rung against the plain baseline: when the set
    chosen is one such pair, with the run-time settings a measurement of the set would use, those
    runs are its measurement.
    """
    found = together.get(together_key(selection.chosen))
    fixes = [t.fix for t in selection.chosen]
    if found is None or needs_fresh(fixes) or found[1] != _overrides(selection.chosen, loop, ctx, spec):
        return None
    trial, carried = found[0], "; ".join(selection.carried)
    return replace(trial, reason="; ".join(x for x in (carried, trial.reason) if x))


def _on_top_trial(v: Variant, rung: Variant, loop: Measurer) -> Trial:
    """Judge a fix on top of ``rung`` against the rung's runs; a rung that failed fails it too."""
    if v.active and not rung.active:
        return Trial(fix=v.fix, safety=v.safety, params=dict(v.params), verdict=FAILED,
                     reason=f"on top of {rung.label}, whose own runs failed in this measurement: "
                     f"{rung.failure or rung.skip}")
    return loop.trial(v)


def _pair_trial(v: Variant, need: Trial, loop: Measurer) -> Trial:
    """Read the fix on top and its rung as one set against the plain baseline (the same runs)."""
    fixes = (need.fix, v.fix)
    pair = replace(
        v, label="combined", fix=set_name(fixes), safety=SAFE if v.safety == need.safety == SAFE else UNSAFE,
        params={need.fix: dict(need.params), v.fix: dict(v.params)}, fixes=fixes, partner=None, reference="",
        ref_note="measured together in the on-top stage: the same runs against the plain baseline around them",
        note="", early=0,
    )
    return loop.trial(pair)


def measure_combined(selection: Selection, loop: Measurer, ctx: FixContext, spec: RunSpec) -> Trial:
    """Run the chosen fixes together against the plain baseline; return the combined trial."""
    return measure_together(selection.chosen, loop, ctx, spec, "combined", "; ".join(selection.carried))


def confirm_alone(kept: Trial, loop: Measurer, ctx: FixContext, spec: RunSpec) -> Trial:
    """Measure a kept fix once more, alone, against a fresh baseline: a combination holding it contradicted it."""
    return measure_together([kept], loop, ctx, spec, "confirm", "measured again against a fresh baseline")


def measure_together(
    chosen: Sequence[Trial], loop: Measurer, ctx: FixContext, spec: RunSpec, stage: str, note: str,
) -> Trial:
    """Run ``chosen`` together against the plain baseline in a measurement of its own; return its trial."""
    fixes = catalog.get_fixes()
    overrides = _overrides(chosen, loop, ctx, spec)
    v = Variant(
        label=stage, fix=set_name(t.fix for t in chosen),
        safety=SAFE if all(t.safety == SAFE for t in chosen) else UNSAFE,
        requests=tuple(FixRequest(t.fix, dict(t.params)) for t in chosen),
        loss_rtol=max(fixes[t.fix].loss_rtol for t in chosen),
        params={t.fix: dict(t.params) for t in chosen}, overrides=overrides,
        fixes=tuple(t.fix for t in chosen), note=note,
    )
    loop.measure([v], reference=(), ref_label="baseline", stage=stage, fresh=needs_fresh(v.fixes))
    return loop.trial(v)


def _overrides(chosen: Sequence[Trial], loop: Measurer, ctx: FixContext, spec: RunSpec) -> dict[str, Any]:
    """Return the run settings a measurement of ``chosen`` together runs with."""
    fixes = catalog.get_fixes()
    overrides: dict[str, Any] = {}
    for t in chosen:
        # NOTE: runs whose batches hold k times the samples take fewer steps (see ladder_steps).
        overrides = fixes[t.fix].overrides_for(dict(t.params), spec, ctx, loop.base_step_ms) or overrides
    return overrides


def needs_fresh(fixes: Sequence[str]) -> bool:
    """Whether runs with ``fixes`` (and their baseline runs) must start cold (:attr:`Fix.fresh_process`)."""
    catalog_fixes = catalog.get_fixes()
    return any(catalog_fixes[f].fresh_process for f in fixes if f in catalog_fixes)


def profile_kept(kept: Sequence[Trial], loop: Measurer, ctx: FixContext, spec: RunSpec, notes: list[str]) -> str:
    """Run the kept fixes once under the profiler into ``<run>/kept/``; return that folder's name ("" if it failed).

    The diagnosed run's trace is the "before"; this one is the "after" (``advisor compare RUN
    RUN/kept``). Its timing is not a measurement of the fixes: the trials are. Nothing reads its
    start-up either, so it is forked from the warm-start server like the trials
    (``startup_reported=False``), which spares it the seconds of a fresh interpreter.
    """
    fixes = catalog.get_fixes()
    overrides: dict[str, Any] = {}
    for t in kept:
        overrides = fixes[t.fix].overrides_for(dict(t.params), spec, ctx, loop.base_step_ms) or overrides
    requests = tuple(FixRequest(t.fix, dict(t.params)) for t in kept)
    # NOTE: the diagnosed run's phases, not a trial's: a trial times at least 1.5 s of steps,
    # and a script of fast steps that ends on its own (regression/main.py: 0.3 ms steps, ~830
    # in all) ended inside that window, before its profiled steps, leaving no trace
    run_spec = replace(
        loop.trial_spec(KEPT_DIR, requests, overrides),
        out_dir=Path(spec.out_dir) / KEPT_DIR, profiled_steps=spec.profiled_steps or 10, cprofile_steps=0,
        timed_steps=spec.timed_steps, min_timed_s=spec.min_timed_s, startup_reported=False,
    )
    label = set_name(t.fix for t in kept)
    try:
        cap = loop.runner(run_spec)
    except AdvisorError as exc:
        notes.append(f"the kept fixes ({label}) could not be run under the profiler: {exc}")
        return ""
    loop.account(cap, timed=False)  # a profiled run is longer than a trial: not one for the ETA
    if not cap.ok or not cap.trace_files:
        why = failure_reason(cap) if not cap.ok else "no trace was written"
        notes.append(f"the kept fixes ({label}) ran under the profiler but left no trace: {why}")
        return ""
    notes.append(
        f"the kept fixes ({label}) ran once under the profiler: their trace is in {KEPT_DIR}/ beside "
        f"the baseline's (advisor compare RUN RUN/{KEPT_DIR})"
    )
    return KEPT_DIR


def out_of_memory(
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
            cap = loop.run(f"{safe_name(v.label)}-{r + 1}", v.requests, v.overrides,
                           flight=TrialProgress(fix=v.label, repeat=r + 1, repeats=loop.repeats))
            note = cap.fix_notes.get(v.fix)
            v.note = note.detail if note is not None else v.note
            if not cap.ok or loop.rate(cap) is None:
                v.failure = failure_reason(cap) if not cap.ok else "the run recorded no timed steps"
            elif note is not None and note.state is NoteState.SKIPPED:
                v.skip = note.detail
            elif any(x is None or not math.isfinite(x) for x in cap.losses):
                v.failure = "a loss was not finite"
            elif (over := over_budget(cap.peak_memory_bytes, budget)) is not None:
                v.failure = over
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
            fits = f"fits: peak {mib(peak)}" + (f" of the {mib(budget)} budget" if budget else "")
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
    diff = diff_text(spec, [best], notes) if make_diff_text and best is not None else ""
    return FixOutcome(
        trials=trials, combined=best, kept=(best.fix,) if best else (), diff=diff, notes=tuple(notes),
        hidden_unsafe=tuple(hidden), kept_trials=(best,) if best else (), wall_s=since(loop.started, loop.clock),
        runs=loop.runs, phases_s=dict(loop.phases_s), starts=dict(loop.starts),
    )
