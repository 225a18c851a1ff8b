"""``cpu_threads``: leave a core per loader worker (``torch.set_num_threads(cores - workers)``)."""

from __future__ import annotations

from typing import Any

from advisor.fixes.fix import SAFE, DiffPlan, Fix, FixContext, needs_loader


def check(ctx: FixContext) -> str | None:
    """Needs more than one core and a DataLoader."""
    if ctx.cpu_count <= 1:
        return "one core: there is no thread count to trade"
    return needs_loader(ctx)


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: act when a DataLoader with workers is built."""
    state.want_loader("cpu_threads", params, "waiting for a DataLoader with workers")


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Lower intra-op threads to ``cores - workers`` (or ``params['threads']``)."""
    import torch

    from advisor.fixes.runtime import cores

    workers = int(a.get("num_workers") or 0)
    target = params.get("threads")
    target = int(target) if target else max(1, cores() - workers)
    before = torch.get_num_threads()
    if workers == 0 and not params.get("threads"):
        state.loader_skip("cpu_threads", "no loader workers compete with intra-op threads")
    elif before <= target:
        state.loader_skip("cpu_threads", f"already {before} intra-op threads (target {target})")
    else:
        torch.set_num_threads(target)
        state.loader_ok("cpu_threads", f"torch.set_num_threads({target}) (was {before}) next to {workers} workers")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Add ``torch.set_num_threads`` after the imports (sized by the workers when none is given)."""
    threads = params.get("threads")
    if threads:
        plan.header_statements.append(f"torch.set_num_threads({int(threads)})")
    else:
        plan.threads_for_workers = True


FIX = Fix(
    id="cpu_threads",
    safety=SAFE,
    description="leave a core per loader worker: torch.set_num_threads(cores - workers)",
    applies_when="loader workers and torch's intra-op threads fight for a few cores",
    measured="one run; on top of the best dataloader_workers rung when the script has no workers",
    check=check,
    requires="dataloader_workers",
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
)
