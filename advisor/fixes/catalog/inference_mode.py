"""``inference_mode``: run an inference loop's forward passes under ``torch.inference_mode()``.

A loop that never calls backward but runs the model with grad mode on records an autograd
graph for every operator and keeps its inputs alive for a backward pass that never comes. At
run time each call of the model is entered under ``torch.inference_mode()`` (only while grad
mode is on, so a script that already turned autograd off is left alone and says so); the diff
wraps the loop over the DataLoader in ``with torch.inference_mode():``.
"""

from __future__ import annotations

from typing import Any

from advisor.capture.vocab import StepSource
from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_SAFE, SAFE, Fix, FixContext


def check(ctx: FixContext) -> str | None:
    """Only for loops without an optimizer step: a training loop needs the graph."""
    if ctx.step_source == StepSource.OPTIMIZER:
        return "the loop steps an optimizer: it trains, and its backward pass needs the autograd graph"
    return None


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: enter inference mode around every call of the model while grad mode is on."""
    state.around_model["inference_mode"] = _around
    state.pending("inference_mode", "waiting for the model's first call")


def _around(state: Any, module: Any) -> Any:
    import torch

    if torch.is_inference_mode_enabled() or not torch.is_grad_enabled():
        if not state.is_applied("inference_mode"):
            state.skipped("inference_mode", "the model already runs without autograd (no_grad or inference_mode)")
        return None
    if not state.is_applied("inference_mode"):
        state.applied("inference_mode", f"torch.inference_mode() around {type(module).__name__} calls")
    return torch.inference_mode()


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``with torch.inference_mode():`` around the loop over the DataLoader."""
    plan.wrap_data_loop.append("torch.inference_mode()")


FIX = Fix(
    id="inference_mode",
    safety=SAFE,
    description="run the inference loop under torch.inference_mode(): no autograd graph is recorded",
    applies_when="a loop that never runs backward calls the model with grad mode on (operators record graph nodes)",
    measured="one run against the interleaved baseline runs; outputs are unchanged, memory and per-op cost drop",
    check=check,
    loss_rtol=LOSS_RTOL_SAFE,
    install=install,
    plan_diff=plan_diff,
)
