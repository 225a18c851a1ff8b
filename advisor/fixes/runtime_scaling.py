"""fp16's loss scaling at run time: a GradScaler around every backward and optimizer step.

The script is not changed, so the scaler has to meet it wherever a hand-written AMP loop would
call it:

- ``Tensor.backward`` on a scalar scales the gradient flowing in (the loss itself stays unscaled
  for the capture's loss parity);
- each optimizer's ``step`` becomes ``scaler.step`` then ``scaler.update``, as a bound method, as
  torch's own (an LR scheduler re-wraps ``opt.step.__func__``: a plain function made any
  ``StepLR(opt)`` raise);
- ``clip_grad_norm_`` and ``clip_grad_value_`` unscale the optimizers whose parameters they clip
  first, as ``scaler.unscale_(opt)`` before clipping does in torch's AMP recipe: else they clip
  gradients 65,536 times too large and every step is clipped;
- a script that scales its own loss with a GradScaler keeps it alone: advisor's then steps
  aside, or each gradient would be scaled twice.

It is installed before any other fix wraps the optimizers (``runtime.INSTALL_FIRST``): under
``fit_accumulation`` the scaler then steps only on the real steps, not on every micro-batch
(whose ``unscale_`` would divide the gradients accumulated so far again and again).
"""

from __future__ import annotations

import contextlib
import types
import weakref
from typing import Any

from advisor.fixes.runtime_torch import patch


def patch_grad_scaling(state: Any) -> None:
    """Install the scaler ``state.scaler`` on backward, optimizer steps and gradient clipping."""
    import torch

    scaler = state.scaler
    optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
    script_scales = [False]

    def scaling() -> bool:
        return bool(scaler.is_enabled()) and not script_scales[0]

    original_scale = torch.amp.GradScaler.scale

    def scale(self: Any, outputs: Any) -> Any:
        if self is not scaler and not script_scales[0]:
            script_scales[0] = True
            state.skipped("fp16_amp", "the script scales its loss with its own GradScaler; advisor's stepped aside")
        return original_scale(self, outputs)

    patch(torch.amp.GradScaler, "scale", scale)

    original_backward = torch.Tensor.backward

    def backward(self: Any, gradient: Any = None, *args: Any, **kwargs: Any) -> Any:
        if gradient is None and self.dim() == 0 and self.requires_grad and scaling():
            # NOTE: scaling the incoming gradient equals scaling the loss, and keeps the
            # loss tensor itself (what the capture records for loss parity) unscaled.
            scaled = scaler.scale(torch.ones_like(self, dtype=torch.float32))
            return original_backward(self, scaled.to(self.dtype), *args, **kwargs)
        return original_backward(self, gradient, *args, **kwargs)

    patch(torch.Tensor, "backward", backward)

    original_init = torch.optim.Optimizer.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        original_init(self, *args, **kwargs)
        optimizers.add(self)
        inner = self.step

        def step(opt: Any, *a: Any, **k: Any) -> Any:
            if not scaling():
                return inner(*a, **k)
            # NOTE: GradScaler.step calls optimizer.step itself: for that call the attribute is
            # the real step, not this one nor a wrapper around it (an LR scheduler's, the
            # accumulation's, whose counter it would advance a second time).
            outer = opt.__dict__.get("step")
            opt.step = inner
            try:
                out = scaler.step(opt, *a, **k)
                scaler.update()
                return out
            finally:
                if outer is None:
                    del opt.step
                else:
                    opt.step = outer

        self.step = types.MethodType(step, self)

    patch(torch.optim.Optimizer, "__init__", __init__)

    def unscale_owners(params: list[Any]) -> None:
        ids = {id(p) for p in params}
        for opt in list(optimizers):
            if any(id(p) in ids for group in opt.param_groups for p in group["params"]):
                with contextlib.suppress(RuntimeError):  # already unscaled since the last update()
                    scaler.unscale_(opt)

    for name in ("clip_grad_norm_", "clip_grad_value_"):
        original = getattr(torch.nn.utils, name)

        def clip(parameters: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if scaling():
                parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
                unscale_owners(parameters)
            return _original(parameters, *args, **kwargs)

        patch(torch.nn.utils, name, clip)
        patch(torch.nn.utils.clip_grad, name, clip)
