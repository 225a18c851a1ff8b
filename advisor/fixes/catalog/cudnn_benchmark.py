"""``cudnn_benchmark``: let cuDNN autotune convolution algorithms."""

from __future__ import annotations

from typing import Any

from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_PRECISION, UNSAFE, Fix, needs_cuda


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: set the backend flag once (CUDA only)."""
    import torch

    from advisor.fixes.runtime_torch import patch

    if not torch.cuda.is_available():
        state.skipped("cudnn_benchmark", "no CUDA device")
        return
    patch(torch.backends.cudnn, "benchmark", True)
    state.applied("cudnn_benchmark", "torch.backends.cudnn.benchmark=True")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """One statement after the imports."""
    plan.header_statements.append("torch.backends.cudnn.benchmark = True")


FIX = Fix(
    id="cudnn_benchmark",
    safety=UNSAFE,
    description="let cuDNN autotune convolution algorithms (cudnn.benchmark=True)",
    applies_when="a CUDA conv net with fixed input shapes",
    check=needs_cuda("cudnn_benchmark"),
    loss_rtol=LOSS_RTOL_PRECISION,
    install=install,
    plan_diff=plan_diff,
    shrinks=("compute",),
    kernel_bound=True,
)
