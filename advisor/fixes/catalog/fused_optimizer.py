"""``fused_optimizer``: fused (else foreach) optimizer kernels."""

from __future__ import annotations

from typing import Any

from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_PRECISION, UNSAFE, Fix


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: torch.optim constructors get ``fused=True`` (else ``foreach=True``)."""
    state.fused = True
    state.pending("fused_optimizer", "waiting for a torch.optim optimizer")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``fused=True`` on the optimizer's constructor."""
    plan.fused = True


FIX = Fix(
    id="fused_optimizer",
    safety=UNSAFE,
    description="fused (else foreach) optimizer kernels (fused=True)",
    applies_when="the optimizer step launches one small kernel per parameter tensor",
    loss_rtol=LOSS_RTOL_PRECISION,
    install=install,
    plan_diff=plan_diff,
    shrinks=("compute",),
)
