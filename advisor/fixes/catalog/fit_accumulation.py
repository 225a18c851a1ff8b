"""``fit_accumulation``: split each batch into k micro-batches with gradient accumulation, to fit in memory.

When the baseline's peak memory is near the limit (the ``--memory-budget``, or the CUDA device),
or the script runs out of memory, the activations of one batch are what does not fit. Loading
``batch_size / k`` samples at a time and stepping the optimizer every k micro-batches, with each
micro-batch's loss divided by k, keeps the effective batch (the same samples and, up to float
rounding, the same averaged gradient per optimizer step) at about 1/k of the activation memory.

At run time, with no edit to the script:

- the DataLoader's ``batch_size`` is divided by k (only when k divides it: the effective batch
  must stay the same);
- ``Tensor.backward`` on a scalar loss back-propagates ``loss / k`` (the capture then records the
  micro-batch losses summed per step, which is the batch's mean loss, for loss parity);
- every optimizer's ``step()`` only steps on every k-th call, and ``zero_grad()`` (the
  optimizer's, or a module's) is skipped between those, so gradients accumulate.

The trial is a ladder, k = 2, 4, 8: the rungs that still run out of memory fail on their first
run, and the largest micro-batch that fits (the smallest k) is reported. Its objective is memory
(:class:`~advisor.fixes.fix.Objective`): kept when it saves memory (or fits where the baseline
did not) with loss parity, its speed cost reported beside it. An LR scheduler steps at most once
per real optimizer step in the trial (a schedule stepped per iteration would run k times too
fast); per-batch statistics still change (BatchNorm sees micro-batches), so the fix is unsafe.
The diff is a note: the loop's accumulation is the user's to write.
"""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.fix import (
    LOSS_RTOL_BATCH,
    UNSAFE,
    DiffPlan,
    Fix,
    FixContext,
    Objective,
    VariantPlan,
    ladder_steps,
    loader_batch_size,
    needs_loader,
    peak_note,
    peak_params,
)

SPLITS: tuple[int, ...] = (2, 4, 8)
"""Micro-batches per batch tried, largest micro-batch first."""


def ladder(batch_size: int) -> tuple[int, ...]:
    """Return the splits of :data:`SPLITS` that divide ``batch_size`` exactly (``(2, 4, 8)`` for 64, ``(2,)`` for 6)."""
    return tuple(k for k in SPLITS if batch_size >= k and batch_size % k == 0)


def check(ctx: FixContext) -> str | None:
    """Needs a DataLoader batch that can be split, and memory near the limit (or out of it)."""
    if (reason := needs_loader(ctx)) is not None:
        return reason
    batch = ctx.batch_size
    if batch is None:
        return "the DataLoader has no batch_size (a batch_sampler or batch_size=None): nothing to split"
    if not ladder(batch):
        return f"a batch of {batch} cannot be split into 2, 4 or 8 equal micro-batches"
    if ctx.out_of_memory:
        return None
    if ctx.memory_limit_bytes is None:
        return "no memory limit is known on this CPU run (give --memory-budget SIZE to set one)"
    if not ctx.near_memory_limit:
        frac = ctx.memory_used_frac
        used = "unknown" if frac is None else f"{frac:.0%}"
        return f"peak memory is {used} of the limit: the batch fits, so there is nothing to fit"
    return None


def step_overrides(params: dict[str, Any], spec: RunSpec, ctx: FixContext, step_ms: float | None) -> dict[str, Any]:
    """Keep the baseline's steps (a step holds the same samples), but more than k batches in all."""
    return ladder_steps(spec, 1, int(params.get("k", 1)), step_ms)


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One rung per split of :func:`ladder`."""
    batch = ctx.batch_size or 0
    out = []
    for k in ladder(batch):
        params = {"k": k, "micro_batch": batch // k, **peak_params(ctx)}
        out.append(VariantPlan(params, step_overrides(params, spec, ctx, step_ms)))
    return out


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: split every DataLoader's batch; accumulate over k backward calls per optimizer step."""
    import torch

    from advisor.fixes.runtime import accumulate_steps
    from advisor.fixes.runtime_torch import patch

    k = int(params.get("k", 1))
    state.want_loader("fit_accumulation", params)

    def active() -> bool:
        # NOTE: accumulate only when a DataLoader was split, or each step would hold k times the samples.
        return k > 1 and bool(state.loader_counts.get("fit_accumulation"))

    original_backward = torch.Tensor.backward

    def backward(self: Any, gradient: Any = None, *args: Any, **kwargs: Any) -> Any:
        if active() and self.dim() == 0 and self.requires_grad:
            return original_backward(self / k, gradient, *args, **kwargs)
        return original_backward(self, gradient, *args, **kwargs)

    patch(torch.Tensor, "backward", backward)

    accumulate_steps(k, active=active)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Divide one DataLoader call's ``batch_size`` by k (only when k divides it)."""
    k = int(params.get("k", 1))
    old = loader_batch_size(state, "fit_accumulation", a, "split")
    if old is None:
        return
    if k <= 1 or old % k:
        state.loader_skip("fit_accumulation", f"a batch of {old} cannot be split into {k} equal micro-batches")
        return
    a["batch_size"] = old // k
    state.loader_ok(
        "fit_accumulation",
        f"batch_size {old}->{old // k} with {k} micro-batches accumulated per optimizer step "
        f"(loss / {k}): the effective batch stays {old}",
    )


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Add a note: the accumulation loop is the user's to write."""
    k = int(params.get("k", 2))
    micro = params.get("micro_batch")
    plan.manual.append(
        f"fit_accumulation: load micro-batches of {micro or f'batch_size // {k}'} (DataLoader batch_size "
        f"divided by {k}), divide each micro-batch's loss by {k}, and call optimizer.step() and "
        f"zero_grad() once every {k} micro-batches (and a scheduler stepped per iteration with them): "
        f"the effective batch stays the same at about 1/{k} of the activation memory"
    )
    note = peak_note("fit_accumulation", params)
    if note is not None:
        plan.manual.append(f"{note}: what grows with the micro-batch shrinks about {k}-fold")


FIX = Fix(
    id="fit_accumulation",
    safety=UNSAFE,
    description=(
        "split each batch into k micro-batches (DataLoader batch_size / k) and accumulate their gradients "
        "over k backward calls per optimizer step: same effective batch, about 1/k of the activation memory"
    ),
    applies_when="peak memory is near the limit (the --memory-budget, or the GPU), or the script runs out of memory",
    measured=(
        "a ladder of splits (k = 2, 4, 8; rungs that still run out of memory fail on their first run), the "
        "largest micro-batch that fits reported; its objective is memory: kept when it saves 5% or more of "
        "the peak (or fits where the baseline ran out) with loss parity, its speed cost reported beside it"
    ),
    check=check,
    loss_rtol=LOSS_RTOL_BATCH,
    conflicts=("batch_fusion", "larger_batch"),
    variants=variants,
    step_overrides=step_overrides,
    rung=lambda p: f"k={p.get('k')} (micro-batch {p.get('micro_batch')})",
    rung_key=lambda p: p.get("k"),
    changes_loader=True,
    changes_samples=True,
    objective=Objective.MEMORY,
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
)
