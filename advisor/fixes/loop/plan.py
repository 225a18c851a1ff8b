"""The *plan* part of the fix loop: which fixes, which runs, how long they warm up, what the budget pays for.

Decided from the suggestions and the first baseline alone; no run is made here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from advisor._num import median
from advisor.capture.model import FixRequest, RunSpec
from advisor.engine.model import FixRef
from advisor.errors import UsageError
from advisor.fixes import catalog
from advisor.fixes.bounds import GainBound, by_gain
from advisor.fixes.fix import UNSAFE, FixContext
from advisor.fixes.loop.measure import Measurer
from advisor.fixes.loop.options import MIN_TRIAL_WARMUP, WARMUP_EDGE, WARMUP_SETTLED
from advisor.fixes.loop.variant import ADVICE, SKIPPED, Variant
from advisor.fixes.model import Trial


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
    variants: list[Variant] = field(default_factory=list)
    on_top: list[str] = field(default_factory=list)


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
            if fix.alone is not None and fix.requires not in wanted:
                # NOTE: nothing to build on will be measured (the diagnosis asked for threads,
                # not workers): the fix is measured on its own instead of skipped.
                plan.variants.extend(variants_of(fix_id, ctx, spec, step_ms=step_ms, alone=True))
            else:
                plan.on_top.append(fix_id)
        else:
            plan.variants.extend(variants_of(fix_id, ctx, spec, step_ms=step_ms))
    return plan


def variants_of(
    fix_id: str, ctx: FixContext, spec: RunSpec, on_top_of: tuple[FixRequest, ...] = (),
    step_ms: float | None = None, alone: bool = False,
) -> list[Variant]:
    """Build the candidate runs of one fix from its catalog variants (a ladder, or one run)."""
    fix = catalog.get(fix_id)
    return [
        Variant(
            label=vp.label, fix=fix_id, safety=fix.safety,
            requests=(*on_top_of, FixRequest(fix_id, dict(vp.params))),
            loss_rtol=fix.loss_rtol, params=dict(vp.params), overrides=dict(vp.overrides),
            fixes=(fix_id,),
        )
        for vp in fix.plan_variants(ctx, spec, step_ms, alone=alone)
    ]


def settled_warmup(warmup_ms: Sequence[float], timed_ms: Sequence[float], asked: int) -> int:
    """Warm-up steps a trial run needs, read from the baseline's own step times (never more than asked).

    A warm-up step has settled when it lies within the band of the steady steps (the timed
    steps after the first three: from the fastest to the slowest, and :data:`WARMUP_EDGE` beyond
    either), widened to at least :data:`WARMUP_SETTLED` times their median either way. Steps
    outside it, slower (allocator growth, lazy set-up) *or* faster (a first step that did no
    real work), are still warming up. The warm-up kept ends one step
    after the last unsettled one, never below :data:`MIN_TRIAL_WARMUP`. When the first three
    timed steps are, on average, more than that factor away from the steady median, warm-up was
    not long enough as it was, and nothing is cut.
    """
    steady = sorted(t for t in timed_ms if t > 0)
    if not warmup_ms or len(warmup_ms) < asked or len(steady) < 3:
        return asked
    mid = median(steady) or 0.0
    rest = [t for t in list(timed_ms)[3:] if t > 0] or steady
    lo = min(min(rest) / WARMUP_EDGE, mid / WARMUP_SETTLED)
    hi = max(max(rest) * WARMUP_EDGE, mid * WARMUP_SETTLED)

    def settled(t: float) -> bool:
        return lo <= t <= hi

    head = [t for t in list(timed_ms)[:3] if t > 0]
    first = sum(head) / len(head) if head else 0.0
    if not mid / WARMUP_SETTLED <= first <= mid * WARMUP_SETTLED:
        return asked
    unsettled = [i for i, t in enumerate(warmup_ms) if not settled(t)]
    needed = (unsettled[-1] + 2) if unsettled else 1
    return min(asked, max(MIN_TRIAL_WARMUP, needed))


def fit_budget(
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
