"""``non_blocking_copy``: host-to-device copies from pinned memory with ``non_blocking=True``."""

from __future__ import annotations

from typing import Any

from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import SAFE, Fix, needs_cuda


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: patch ``Tensor.to``/``Tensor.cuda`` (CUDA only)."""
    import torch

    if not torch.cuda.is_available():
        state.skipped("non_blocking_copy", "no CUDA device: there are no host-to-device copies")
        return
    state.non_blocking = True
    state.pending("non_blocking_copy", "waiting for a copy from pinned memory")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``non_blocking=True`` on ``.to(device)`` calls inside loops."""
    plan.non_blocking = True


FIX = Fix(
    id="non_blocking_copy",
    safety=SAFE,
    description="host-to-device copies from pinned memory with non_blocking=True",
    applies_when="a CUDA run waits on synchronous copies of its batches",
    check=needs_cuda("non_blocking_copy"),
    install=install,
    plan_diff=plan_diff,
    shrinks=("host_to_device",),
)
