"""``prefetch_factor``: let each loader worker prepare more batches ahead."""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.fix import SAFE, DiffPlan, Fix, FixContext, VariantPlan, needs_loader

DEFAULT_PREFETCH = 4


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One run with ``prefetch_factor=4`` (torch's default is 2)."""
    return [VariantPlan("prefetch_factor", {"prefetch_factor": DEFAULT_PREFETCH})]


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
)
