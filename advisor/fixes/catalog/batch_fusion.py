"""``batch_fusion``: fuse gradient-accumulation micro-batches into one larger DataLoader batch."""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.catalog import script_args
from advisor.fixes.fix import (
    LOSS_RTOL_BATCH,
    UNSAFE,
    DiffPlan,
    Fix,
    FixContext,
    VariantPlan,
    fusion_steps,
    loader_batch_size,
    needs_loader,
)


def check(ctx: FixContext) -> str | None:
    """Needs a DataLoader and more than one loader batch per optimizer step, and no argument for it.

    Where the script's own arguments set the batch size and the accumulation, ``script_args``
    tries the same fusion as a new command line: what the user will change, not a patch.
    """
    if (reason := needs_loader(ctx)) is not None:
        return reason
    if script_args.check(ctx) is None:
        return "the script's own arguments do this fusion: script_args tries it as a new command line"
    accum = ctx.accumulation
    if accum is None:
        return "no samples per step were counted, so gradient accumulation cannot be seen"
    if accum <= 1:
        return "one micro-batch per optimizer step: there is no gradient accumulation to fuse"
    return None


def step_overrides(params: dict[str, Any], spec: RunSpec, ctx: FixContext, step_ms: float | None) -> dict[str, Any]:
    """Fewer steps (each holds k times the samples), but more than k loader batches in all."""
    return fusion_steps(spec, int(params.get("factor", 1)))


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One run fusing the accumulation count the baseline showed."""
    params = {"factor": ctx.accumulation or 1}
    return [VariantPlan(params, step_overrides(params, spec, ctx, step_ms))]


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: adjust every DataLoader the script builds."""
    state.want_loader("batch_fusion", params)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Multiply ``batch_size`` by the factor; the loop itself is left alone."""
    factor = int(params.get("factor", 1))
    if factor <= 1:
        state.loader_skip("batch_fusion", "fusion factor 1")
    elif (old := loader_batch_size(state, "batch_fusion", a, "scale")) is not None:
        a["batch_size"] = old * factor
        state.loader_ok(
            "batch_fusion",
            f"batch_size {old}->{old * factor} (x{factor}); the loop is unchanged, so each "
            f"optimizer step sees {factor}x the samples",
        )


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``batch_size`` times the factor, and a note to divide the accumulation count."""
    factor = int(params.get("factor", 1))
    plan.batch_factor *= factor
    plan.batch_fixes.append("batch_fusion")
    plan.manual.append(
        f"batch_fusion: the DataLoader batch is now {factor}x larger; divide your "
        f"gradient-accumulation count by {factor} to keep the same effective batch "
        "(and scale the learning rate if you change it)"
    )


FIX = Fix(
    id="batch_fusion",
    safety=UNSAFE,
    description="fuse the gradient-accumulation micro-batches into one larger DataLoader batch",
    applies_when="the loop accumulates gradients over several tiny micro-batches per optimizer step",
    measured="one run with batch_size times the accumulation count, fewer steps of k times the samples",
    check=check,
    loss_rtol=LOSS_RTOL_BATCH,
    conflicts=("larger_batch",),
    variants=variants,
    step_overrides=step_overrides,
    rung=lambda p: f"x{p.get('factor')}",
    changes_loader=True,
    changes_samples=True,
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
)
