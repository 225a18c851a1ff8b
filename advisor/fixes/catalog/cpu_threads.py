"""``cpu_threads``: fewer intra-op threads: a core per loader worker, or fewer threads on their own.

Two cases, decided from the baseline:

* with a DataLoader, threads are lowered to ``cores - workers`` when the loader is built
  (measured on top of the best ``dataloader_workers`` rung when the script has no workers);
* without a DataLoader, the trial is standalone: ``torch.set_num_threads(n)`` before the script
  runs, for ``n`` below the baseline's thread count. On a shared or small machine torch's
  intra-op threads compete with each other and with every other process: on this project's
  2-core machine at load 11 a tiny GPT step took 855-1060 ms with 2 threads and 48 ms with 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.diff_plan import DiffPlan, EditScope
from advisor.fixes.fix import SAFE, Fix, FixContext, VariantPlan


def thread_ladder(current: int) -> tuple[int, ...]:
    """Return the thread counts a standalone trial tries below ``current``: 1, and half when that differs."""
    return tuple(sorted({n for n in (1, current // 2) if 1 <= n < current}))


def check(ctx: FixContext) -> str | None:
    """Needs more than one core, and more than one intra-op thread to take away without a DataLoader."""
    if ctx.cpu_count <= 1:
        return "one core: there is no thread count to trade"
    if not ctx.dataloaders and ctx.intra_op_threads is not None and ctx.intra_op_threads <= 1:
        return "torch already runs one intra-op thread and the script has no DataLoader workers to make room for"
    return None


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """Without a DataLoader: a rung per thread count; with one: cores - workers (one run)."""
    if ctx.dataloaders:
        return [VariantPlan()]
    return alone(ctx, spec, step_ms)


def alone(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """Return a rung per thread count, on its own (no DataLoader, or one whose workers are not tried)."""
    current = ctx.intra_op_threads or ctx.cpu_count
    return [VariantPlan({"threads": n, "standalone": True}) for n in thread_ladder(current)]


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: set the threads now (standalone), or when a DataLoader with workers is built."""
    if params.get("standalone"):
        import torch

        before = torch.get_num_threads()
        target = int(params.get("threads") or 1)
        _hold(torch, state, target)
        if before <= target:
            state.skipped("cpu_threads", f"already {before} intra-op threads (target {target})")
        else:
            torch.set_num_threads(target)
            state.applied("cpu_threads", f"torch.set_num_threads({target}) (was {before}) before the script ran")
        return
    state.want_loader("cpu_threads", params, "waiting for a DataLoader with workers")


def _hold(torch: Any, state: Any, target: int) -> None:
    """Hold the script's own ``torch.set_num_threads(n)`` calls at ``target`` for the rest of the run.

    A script that sets its threads itself (``torch.set_num_threads(8)`` on two cores, the case this
    fix exists for) would undo a count set before it ran.
    """
    from advisor.fixes.runtime_torch import patch

    original = torch.set_num_threads

    def set_num_threads(n: int) -> None:
        if int(n) > target:
            state.applied("cpu_threads", f"the script's torch.set_num_threads({int(n)}) held at {target}")
        original(min(int(n), target))

    patch(torch, "set_num_threads", set_num_threads)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Lower intra-op threads to ``cores - workers`` (or ``params['threads']``)."""
    import torch

    from advisor.fixes.runtime_torch import cores

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
        plan.edits.append(ThreadCount(int(threads)))
    elif _threads_for_workers not in plan.finish:
        plan.finish.append(_threads_for_workers)


@dataclass(frozen=True)
class ThreadCount:
    """The diff's edit (:class:`~advisor.fixes.diff_plan.SourceEdit`): :mod:`advisor.fixes.edits.thread_count`."""

    threads: int
    name = "cpu_threads"

    def apply(self, module: Any, scope: EditScope) -> tuple[Any, list[str]]:
        """Set the script's own thread-count calls to the kept count, or add one after the imports."""
        from advisor.fixes.edits.thread_count import set_thread_calls

        new, done = set_thread_calls(module, self.threads)
        line = f"torch.set_num_threads({self.threads})"
        if not done and line not in scope.header_statements:
            scope.header_statements.append(line)
        return new, []


def _threads_for_workers(plan: DiffPlan) -> None:
    """Leave one core per loader worker (cores - workers, >= 1), as the runtime did.

    A finish step: the worker count is known only once every kept fix has planned.
    """
    workers = plan.loader_kwargs.get("num_workers", "")
    n = int(workers) if workers.isdigit() else 0
    if n:
        plan.header_statements.append(
            f"torch.set_num_threads(max(1, torch.get_num_threads() - {n}))"
            "  # advisor: a core per loader worker"
        )
    else:
        plan.manual.append("cpu_threads: call torch.set_num_threads(cores - num_workers) at start-up")


FIX = Fix(
    id="cpu_threads",
    safety=SAFE,
    description="fewer intra-op threads: a core per loader worker (cores - workers), or fewer threads on their own",
    applies_when=(
        "loader workers and torch's intra-op threads fight for a few cores, or, without a DataLoader, "
        "intra-op threads contend with each other and with other work on a small or shared machine"
    ),
    measured=(
        "one run; on top of the best dataloader_workers rung when the script has a DataLoader without "
        "workers; without a DataLoader a ladder of thread counts (1, and half the threads) on its own"
    ),
    check=check,
    requires="dataloader_workers",
    alone=alone,
    variants=variants,
    rung=lambda p: f"{p['threads']} threads" if p.get("threads") else "cores - workers",
    rung_key=lambda p: p.get("threads"),
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
)
