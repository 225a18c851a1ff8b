"""``channels_last``: channels_last memory format for a conv net and its inputs."""

from __future__ import annotations

from typing import Any

from advisor.fixes.diff_plan import DiffPlan
from advisor.fixes.fix import LOSS_RTOL_PRECISION, UNSAFE, Fix


def install(state: Any, params: dict[str, Any]) -> None:
    """Child side: convert the model on its first call (its 4-D/5-D inputs on every call)."""
    state.want_model("channels_last", params)


def on_model(state: Any, module: Any) -> None:
    """``module.to(memory_format=...)`` in place, when the model has 2-D/3-D convolutions."""
    import torch
    from torch import nn

    convs = [m for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))]
    if not convs:
        state.skipped("channels_last", f"{type(module).__name__} has no 2-D/3-D convolutions")
        return
    fmt = torch.channels_last_3d if isinstance(convs[0], nn.Conv3d) else torch.channels_last
    module.to(memory_format=fmt)  # in place: parameter objects (and the optimizer's refs) stay
    state.applied("channels_last", f"{type(module).__name__} and its inputs in {fmt}")


def plan_diff(plan: DiffPlan, params: dict[str, Any]) -> None:
    """``model = model.to(memory_format=torch.channels_last)``, and a note for the inputs."""
    plan.channels_last = True
    plan.manual.append(
        "channels_last: also convert the 4-D inputs, "
        "x = x.to(memory_format=torch.channels_last), before the forward pass"
    )


FIX = Fix(
    id="channels_last",
    safety=UNSAFE,
    description="channels_last memory format for a conv net and its inputs",
    applies_when="a conv net whose convolution kernels prefer NHWC (Tensor Cores, oneDNN)",
    loss_rtol=LOSS_RTOL_PRECISION,
    install=install,
    on_model=on_model,
    plan_diff=plan_diff,
    shrinks=("compute",),
    kernel_bound=True,
)
