"""``prefetch_factor``: let each loader worker prepare more batches ahead."""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import SAFE, Fix, FixContext, RungRuns, VariantPlan, needs_loader

DEFAULT_PREFETCH = 4

# A step with workers still this many times longer than everything but data loading took in the
# baseline: the workers cannot keep up on average (see inert).
BEHIND = 2.0


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One run with ``prefetch_factor=4`` (torch's default is 2)."""
    return [VariantPlan({"prefetch_factor": DEFAULT_PREFETCH})]


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: adjust every DataLoader the script builds."""
    state.want_loader("prefetch_factor", params)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Raise ``prefetch_factor`` where the loader has workers."""
    want = int(params.get("prefetch_factor", DEFAULT_PREFETCH))
    have = a.get("prefetch_factor") or 2  # torch's default with workers
    if int(a.get("num_workers") or 0) == 0:
        state.loader_skip("prefetch_factor", "num_workers=0: prefetching needs workers")
    elif have >= want:
        state.loader_skip("prefetch_factor", f"prefetch_factor is already {have}")
    else:
        a["prefetch_factor"] = want
        state.loader_ok("prefetch_factor", f"prefetch_factor {have}->{want}")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``prefetch_factor=N`` on every ``DataLoader(...)``."""
    plan.loader_kwargs["prefetch_factor"] = str(int(params.get("prefetch_factor", DEFAULT_PREFETCH)))


def inert(rung: RungRuns) -> str | None:
    """Inert when the workers of the rung it is measured on cannot keep up on average."""
    # NOTE: a deeper queue absorbs bursts of workers that keep up on average; workers that fall
    # behind leave the queue empty whatever its depth, and the step waits for each batch as it
    # is made. They fall behind when a step with them still takes far longer than the rest of
    # the step did without them (data_loading.py: 69 ms against 8.8 ms).
    share = rung.shares.get("data_loading")
    if share is None or rung.step_ms is None or rung.base_step_ms is None:
        return None
    rest_ms = rung.base_step_ms * (1.0 - share)
    if rest_ms <= 0 or rung.step_ms < BEHIND * rest_ms:
        return None
    return (
        f"not run: with {rung.label} a step still takes {rung.step_ms:.1f} ms, "
        f"{rung.step_ms / rest_ms:.1f}x the {rest_ms:.1f} ms the baseline spent on everything but "
        "data loading: the workers fall behind on average, and a deeper queue only helps workers "
        "that keep up on average but deliver in bursts"
    )


FIX = Fix(
    id="prefetch_factor",
    safety=SAFE,
    description="let each loader worker prepare more batches ahead (prefetch_factor)",
    applies_when="loader workers cannot keep a queue of batches ahead of a bursty step",
    measured="one run with prefetch_factor=4; on top of the best dataloader_workers rung when the script has no workers",
    check=needs_loader,
    requires="dataloader_workers",
    variants=variants,
    changes_loader=True,
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
    shrinks=("data_loading",),
    inert=inert,
)
