"""``pin_memory``: page-locked host batches for faster host-to-device copies."""

from __future__ import annotations

from typing import Any

from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import SAFE, Fix, FixContext, needs_cuda, needs_loader


def check(ctx: FixContext) -> str | None:
    """CUDA only, and only where some DataLoader does not pin yet."""
    if (reason := needs_cuda("pin_memory")(ctx)) is not None:
        return reason
    if ctx.dataloaders and all(d.pin_memory for d in ctx.dataloaders):
        return "every DataLoader already sets pin_memory=True"
    return needs_loader(ctx)


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: adjust every DataLoader the script builds."""
    state.want_loader("pin_memory", params)


def adjust_loader(state: Any, a: dict[str, Any], params: dict[str, Any]) -> None:
    """Set ``pin_memory=True`` when a CUDA device is there to copy to."""
    import torch

    if not torch.cuda.is_available():
        state.loader_skip("pin_memory", "no CUDA device: pinned memory only speeds host-to-GPU copies")
    elif a.get("pin_memory"):
        state.loader_skip("pin_memory", "pin_memory is already True")
    else:
        a["pin_memory"] = True
        state.loader_ok("pin_memory", "pin_memory=True")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``pin_memory=True`` on every ``DataLoader(...)``."""
    plan.loader_kwargs["pin_memory"] = "True"


FIX = Fix(
    id="pin_memory",
    safety=SAFE,
    description="page-locked host batches for faster host-to-device copies (pin_memory=True)",
    applies_when="a CUDA run copies DataLoader batches from pageable host memory",
    check=check,
    changes_loader=True,
    install=install,
    adjust_loader=adjust_loader,
    plan_diff=plan_diff,
    shrinks=("host_to_device",),
)
