"""``tf32``: TensorFloat-32 matmuls and convolutions on Ampere and newer GPUs."""

from __future__ import annotations

from typing import Any

from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_PRECISION, UNSAFE, Fix, needs_cuda


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: set the TF32 flags once (CUDA only)."""
    import torch

    from advisor.fixes.runtime_torch import patch

    if not torch.cuda.is_available():
        state.skipped("tf32", "no CUDA device (TF32 is an Ampere+ GPU format)")
        return
    patch(torch.backends.cuda.matmul, "allow_tf32", True)
    patch(torch.backends.cudnn, "allow_tf32", True)
    torch.set_float32_matmul_precision("high")
    state.applied("tf32", "TF32 matmuls and convolutions (float32 matmul precision 'high')")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """One statement after the imports."""
    plan.header_statements.append('torch.set_float32_matmul_precision("high")')


FIX = Fix(
    id="tf32",
    safety=UNSAFE,
    description="TensorFloat-32 matmuls and convolutions (set_float32_matmul_precision('high'))",
    applies_when="a CUDA run does float32 matmuls on an Ampere or newer GPU",
    check=needs_cuda("tf32"),
    loss_rtol=LOSS_RTOL_PRECISION,
    install=install,
    plan_diff=plan_diff,
    shrinks=("compute",),
    kernel_bound=True,
)
