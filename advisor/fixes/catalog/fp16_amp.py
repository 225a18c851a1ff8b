"""``fp16_amp``: float16 autocast with a GradScaler for loss scaling (CUDA only)."""

from __future__ import annotations

from typing import Any

from advisor.capture.model import RunSpec
from advisor.fixes.fix import LOSS_RTOL_PRECISION, UNSAFE, Fix, FixContext, VariantPlan, needs_cuda

MANUAL = (
    "fp16_amp: wrap the forward pass in torch.autocast('cuda', dtype=torch.float16) and "
    "use torch.amp.GradScaler: scaler.scale(loss).backward(); scaler.step(opt); scaler.update()"
)


def variants(ctx: FixContext, spec: RunSpec, step_ms: float | None) -> list[VariantPlan]:
    """One run on the baseline's device type."""
    return [VariantPlan({"device_type": "cuda" if ctx.cuda else "cpu"})]


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: float16 autocast plus a GradScaler on backward and optimizer steps."""
    import torch

    if not torch.cuda.is_available():
        state.skipped("fp16_amp", "no CUDA device (fp16 with loss scaling is a GPU fix)")
        return
    if state.autocast_dtype is not None:
        state.skipped("fp16_amp", "another autocast fix is already active")
        return
    state.autocast_dtype = torch.float16
    state.autocast_fix = "fp16_amp"
    state.scaler = torch.amp.GradScaler("cuda")
    # NOTE: now, before fixes installed after it wrap the optimizers (runtime.INSTALL_FIRST).
    state._patch_grad_scaling()
    state.pending("fp16_amp", "waiting for the model's first call")


FIX = Fix(
    id="fp16_amp",
    safety=UNSAFE,
    description="float16 autocast with a GradScaler for loss scaling",
    applies_when="a CUDA run is compute-bound in float32 on a GPU without fast bfloat16",
    check=needs_cuda("fp16_amp"),
    loss_rtol=LOSS_RTOL_PRECISION,
    conflicts=("bf16_autocast",),
    variants=variants,
    install=install,
    manual=MANUAL,
    shrinks=("compute",),
    kernel_bound=True,
)
