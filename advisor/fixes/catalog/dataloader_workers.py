"""``dataloader_workers``: load batches in parallel worker processes (a ladder sized to the cores).

More workers than cores cannot run at once: there the ladder goes down instead (the cores, and
half of them), to measure whether fewer workers contend less (DL005).
"""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import SAFE, Fix, FixContext, VariantPlan, needs_loader


def worker_ladder(cores: int, current: int = 0) -> tuple[int, ...]:
    """Return a short ladder of ``num_workers`` to try: few rungs, sized to the machine.

    Args:
        cores: Cores available.
        current: Workers the script already uses; only larger counts are tried.

    Returns:
        Up to three increasing worker counts, e.g. ``(1, 2)`` on 2 cores, ``(2, 8, 16)`` on 16.
    """
    cores = max(1, cores)
    if cores <= 2:
        rungs = {1, cores}
    elif cores <= 4:
        rungs = {1, 2, cores}
    else:
        rungs = {2, cores // 2, cores}
    return tuple(sorted(r for r in rungs if r > current))


def fewer_ladder(cores: int, current: int) -> tuple[int, ...]:
    """Return the smaller ``num_workers`` to try when ``current`` passes the cores: the cores, and half."""
    cores = max(1, cores)
    return tuple(sorted({n for n in (cores, cores // 2) if 1 <= n < current}, reverse=True))


def check(ctx: FixContext) -> str | None:
    """Refuse without a DataLoader, or when the loaders use exactly every core."""
    if (reason := needs_loader(ctx)) is not None:
        return reason
    if all(d.iterable_dataset for d in ctx.dataloaders):
        # NOTE: the runtime re-checks for worker sharding (get_worker_info) and applies workers
        # where the dataset shards itself; the parent cannot see the source, so it lets it run.
        return None
    if ctx.max_workers == ctx.cpu_count:
        return f"the DataLoader already uses {ctx.max_workers} workers on {ctx.cpu_count} cores"
    return None


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One rung per worker count of :func:`worker_ladder` (of :func:`fewer_ladder` past the cores)."""
    if ctx.max_workers > ctx.cpu_count:
        return [
            VariantPlan({"num_workers": n, "fewer": True})
            for n in fewer_ladder(ctx.cpu_count, ctx.max_workers)
        ]
    return [
        VariantPlan({"num_workers": n})
        for n in worker_ladder(ctx.cpu_count, ctx.max_workers)
    ]


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: adjust every DataLoader the script builds."""
    state.want_loader("dataloader_workers", params)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Raise ``num_workers``, unless the IterableDataset would yield every sample per worker."""
    from torch.utils.data import IterableDataset

    from advisor.capture.sharding import worker_split

    want = int(params.get("num_workers", 2))
    have = int(a.get("num_workers") or 0)
    if isinstance(a.get("dataset"), IterableDataset) and worker_split(a["dataset"], a.get("worker_init_fn")) is not True:
        state.loader_skip(
            "dataloader_workers",
            "the IterableDataset does not shard by worker (no get_worker_info): "
            "each worker would yield every sample",
        )
    elif params.get("fewer") and have > want:
        a["num_workers"] = want
        state.loader_ok("dataloader_workers", f"num_workers {have}->{want} (fewer workers than before)")
    elif have >= want:
        state.loader_skip("dataloader_workers", f"the DataLoader already has num_workers={have}")
    else:
        a["num_workers"] = want
        state.loader_ok("dataloader_workers", f"num_workers {have}->{want}")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``num_workers=N`` on every ``DataLoader(...)``."""
    plan.loader_kwargs["num_workers"] = str(int(params.get("num_workers", 2)))


FIX = Fix(
    id="dataloader_workers",
    safety=SAFE,
    description=(
        "load batches in parallel worker processes (DataLoader num_workers, a ladder sized to the "
        "cores); safe: the arithmetic is unchanged, but random augmentations in the workers draw "
        "from the workers' own seeds, so a seeded run's loss can move a little"
    ),
    applies_when="the script builds a DataLoader with fewer workers than cores (the step waits for data)",
    measured=(
        "a ladder of worker counts sized to the cores (1 and 2 on 2 cores); past the cores, fewer "
        "workers (the cores, and half); the best rung is reported"
    ),
    check=check,
    variants=variants,
    rung=lambda p: f"{p.get('num_workers')} workers",
    rung_key=lambda p: p.get("num_workers"),
    # NOTE: without a DataLoader there are no workers to add, so the fixes that build on them
    # (cpu_threads) are measured against the plain baseline, on their own.
    present=lambda ctx: ctx.max_workers > 0 or not ctx.dataloaders,
    changes_loader=True,
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
    shrinks=("data_loading",),
)
