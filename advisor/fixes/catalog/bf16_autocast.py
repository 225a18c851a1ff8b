"""``bf16_autocast``: run the model's forward pass under ``torch.autocast`` with bfloat16."""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_PRECISION, UNSAFE, Fix, FixContext, VariantPlan


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One run on the baseline's device type."""
    return [VariantPlan({"device_type": "cuda" if ctx.cuda else "cpu"})]


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: autocast each outermost forward in bfloat16."""
    import torch

    if state.autocast_dtype is not None:
        state.skipped("bf16_autocast", "another autocast fix is already active")
        return
    state.autocast_dtype = torch.bfloat16
    state.autocast_fix = "bf16_autocast"
    state.pending("bf16_autocast", "waiting for the model's first call")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """Wrap the statement calling the model in ``with torch.autocast(...)``."""
    plan.autocast_device = str(params.get("device_type", "cpu"))


FIX = Fix(
    id="bf16_autocast",
    safety=UNSAFE,
    description="run the model's forward pass under torch.autocast with bfloat16",
    applies_when="the step is compute-bound in float32 on hardware with bfloat16 units",
    loss_rtol=LOSS_RTOL_PRECISION,
    conflicts=("fp16_amp",),
    variants=variants,
    install=install,
    plan_diff=plan_diff,
    shrinks=("compute",),
    kernel_bound=True,
)
