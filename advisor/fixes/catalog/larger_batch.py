"""``larger_batch``: multiply the DataLoader ``batch_size`` (a x4/x16 ladder, capped)."""

from __future__ import annotations

import math
from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.fix import (
    LOSS_RTOL_BATCH,
    UNSAFE,
    DiffPlan,
    Fix,
    FixContext,
    VariantPlan,
    ladder_steps,
    loader_batch_size,
    needs_loader,
)

# Factors tried (a ladder, like the workers'), and the largest batch it will make.
# NOTE: 4x and 16x. A step that is all per-op overhead costs about the same at 4 or 64 samples,
# so 16x already recovers much of that overhead (examples/tiny_model.py, batch 4 -> 64, through
# the fix loop on 2 shared cores: 9.3x [3.8, 26] on a quiet moment, 2.9-5.4x under load), while
# each further factor makes the optimization less like the user's (k times fewer updates per
# epoch; the learning rate must be re-tuned, Goyal et al. 2017). 1024 samples bounds the change
# (and memory) for scripts that already use moderate batches.
BATCH_FACTORS: tuple[int, ...] = (4, 16)
MAX_BATCH = 1024


def batch_ladder(batch_size: int, max_batch: int = MAX_BATCH) -> tuple[int, ...]:
    """Return the factors to try for a DataLoader batch of ``batch_size``.

    Args:
        batch_size: The script's batch size (samples per DataLoader batch).
        max_batch: Largest batch a rung may make.

    Returns:
        The factors of :data:`BATCH_FACTORS` that keep the batch at most ``max_batch``, e.g.
        ``(4, 16)`` for a batch of 4 or 64, ``(4,)`` for 200; ``(2,)`` when only doubling fits;
        ``()`` when even that would pass the cap.
    """
    if batch_size < 1:
        return ()
    factors = tuple(k for k in BATCH_FACTORS if batch_size * k <= max_batch)
    if not factors and batch_size * 2 <= max_batch:
        factors = (2,)
    return factors


def check(ctx: FixContext) -> str | None:
    """Needs a DataLoader batch_size that can grow, and no gradient accumulation."""
    if (reason := needs_loader(ctx)) is not None:
        return reason
    batch = ctx.batch_size
    if batch is None:
        return "the DataLoader has no batch_size (a batch_sampler or batch_size=None): nothing to scale"
    if not batch_ladder(batch):
        return f"the batch is already {batch} samples; larger_batch stops at {MAX_BATCH}"
    accum = ctx.accumulation or 1
    if accum > 1:
        # NOTE: at run time both fixes only scale batch_size, so at equal factors they measure the
        # same thing (grad_accumulation: x16 either way) and noise would pick the label. The
        # advice differs: batch_fusion's diff divides the accumulation count and keeps the
        # effective batch; larger_batch's changes it. Accumulation calls for batch_fusion.
        return (
            f"the loop accumulates gradients over {accum} micro-batches: batch_fusion is the fix "
            "for that (its diff keeps the effective batch)"
        )
    return None


def step_overrides(params: dict[str, Any], spec: RunSpec, ctx: FixContext, step_ms: float | None) -> dict[str, Any]:
    """Fewer steps when k times the samples would make the run long (see ``ladder_steps``)."""
    return ladder_steps(spec, int(params.get("factor", 1)), ctx.accumulation or 1, step_ms)


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One rung per factor of :func:`batch_ladder`."""
    out = []
    for k in batch_ladder(ctx.batch_size or 0):
        params = {"factor": k}
        out.append(VariantPlan(params, step_overrides(params, spec, ctx, step_ms)))
    return out


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: adjust every DataLoader the script builds."""
    state.want_loader("larger_batch", params)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Multiply one DataLoader call's ``batch_size``, within the cap and the data set."""
    from advisor.fixes.runtime_torch import dataset_len

    factor = int(params.get("factor", 1))
    cap = int(params.get("max_batch", MAX_BATCH))
    if factor <= 1:
        state.loader_skip("larger_batch", "factor 1")
        return
    old = loader_batch_size(state, "larger_batch", a, "scale")
    if old is None:
        return
    k = min(factor, cap // max(old, 1))
    size = dataset_len(a.get("dataset"))
    if size is not None:
        # NOTE: a batch larger than the data set yields no batch at all with drop_last=True.
        k = min(k, size // max(old, 1))
    if k <= 1:
        limit = f"the {cap}-sample cap" if cap // max(old, 1) <= 1 else f"the data set's {size} samples"
        state.loader_skip("larger_batch", f"batch_size {old} cannot grow within {limit}")
        return
    a["batch_size"] = old * k
    capped = f", capped from x{factor}" if k < factor else ""
    state.loader_ok(
        "larger_batch",
        f"batch_size {old}->{old * k} (x{k}{capped}); each optimizer step sees {k}x the samples "
        "(the learning rate may need scaling)",
    )


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``batch_size`` times the factor, and a note on the learning rate."""
    factor = int(params.get("factor", 1))
    plan.batch_factor *= factor
    plan.batch_fixes.append("larger_batch")
    plan.manual.append(
        f"larger_batch: each optimizer step now sees {factor}x the samples and an epoch has "
        f"{factor}x fewer steps; scale the learning rate (linear rule x{factor}, or sqrt rule "
        f"x{math.sqrt(factor):.3g}, with a warm-up) and check the loss curve; cap the batch "
        "by memory on your device"
    )


FIX = Fix(
    id="larger_batch",
    safety=UNSAFE,
    description=(
        "multiply the DataLoader batch_size (a x4/x16 ladder, at most 1024 samples): each optimizer "
        "step sees k times the samples, so the learning rate may need scaling"
    ),
    applies_when="tiny batches leave each step dominated by per-op overhead",
    measured="a ladder of batch factors (x4, x16, at most 1024 samples), fewer steps per rung; the best rung is reported",
    check=check,
    loss_rtol=LOSS_RTOL_BATCH,
    conflicts=("batch_fusion",),
    variants=variants,
    step_overrides=step_overrides,
    rung=lambda p: f"x{p.get('factor')}",
    rung_key=lambda p: f"x{p['factor']}" if "factor" in p else None,
    changes_loader=True,
    changes_samples=True,
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
)
