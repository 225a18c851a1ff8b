"""Apply fixes at run time, inside the child process, before the user's script runs.

:func:`install` patches torch in memory only; it never reads or writes the user's files. The
capture child imports this module by name (``RunSpec.fix_installers``; capture itself imports
nothing of the fix stage), calls :func:`install` once, before ``runpy``, and stores the notes it
returns in ``RunCapture.fix_notes``.

The *mechanisms* fixes plug into, each patched at most once, are :class:`State`'s (in
:mod:`advisor.fixes.runtime_state`; the patch registry and torch helpers are in
:mod:`advisor.fixes.runtime_torch`); what each fix does lives in its own module of
:mod:`advisor.fixes.catalog` (its ``install``, and its ``adjust_loader`` / ``on_model`` hooks):

- ``DataLoader.__init__`` is wrapped; the call's arguments are bound to the real signature and
  every requested loader fix adjusts them in catalog order (workers first, so the fixes that
  need workers see the new count), then they are passed on.
- ``nn.Module.__call__`` is wrapped; only *outermost* module calls (not nested inside another
  module's forward, not inside a compiled region) are touched, so the cost is one Python frame
  per top-level call. On the first outermost module with parameters (the model) every
  ``on_model`` hook runs once (channels_last, compile, ...). Autocast wraps each outermost
  forward (the model, and a loss module called at top level) and casts low-precision outputs back
  to float32, so loss code outside the model and the backward pass run in float32 as they would
  with autocast around the forward only (the PyTorch recipe); the weight-cast cache is cleared
  on each exit, so updated weights are re-cast.
- A GradScaler (fp16): ``Tensor.backward`` on a scalar that requires grad scales it, and each
  optimizer's ``step`` becomes ``scaler.step(opt); scaler.update()``.
- Optimizer constructors (fused kernels) and ``Tensor.to``/``Tensor.cuda`` (non-blocking copies).

Notes are a live dict: fix id -> :class:`~advisor.capture.model.FixNote` (state ``applied``,
``skipped`` or ``pending``, and a detail). Notes that depend on the script (a DataLoader was
built, the model has convolutions, autocast was already on) are updated as the script runs, so
the caller should save the dict after the script ends; a copy taken right after :func:`install`
still holds the install-time verdicts (no CUDA, unknown id) and ``pending`` for the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from advisor.capture.model import FixNote, FixRequest
from advisor.fixes import catalog
from advisor.fixes.runtime_state import State, is_applied, is_not_applied
from advisor.fixes.runtime_torch import _targets_cuda as _targets_cuda  # read by tests
from advisor.fixes.runtime_torch import cores, patch, uninstall

__all__ = ["State", "accumulate_steps", "cores", "install", "is_applied", "is_not_applied", "patch", "uninstall"]

# Private names that tests reach through this module.
_cores, _State = cores, State


def install(fixes: Sequence[FixRequest]) -> dict[str, FixNote]:
    """Apply fixes by patching torch in this process; return fix id -> what happened.

    Args:
        fixes: The interventions to apply (ids from :mod:`advisor.fixes.catalog`).

    Returns:
        A live dict of notes, one per fix id: pending (waiting for the script to reach the
        fix), applied or skipped. Save it after the script ends: notes are updated while the
        script runs.
    """
    notes: dict[str, FixNote] = {}
    if not fixes:
        return notes
    import torch  # noqa: F401  (imported only when there is something to patch)

    known = catalog.get_fixes()
    state = State(notes)
    for req in sorted(fixes, key=lambda r: r.id not in INSTALL_FIRST):
        fix = known.get(req.id)
        if fix is None or fix.install is None:
            state.skipped(req.id, "unknown fix id" if fix is None else "no run-time install")
            continue
        try:
            fix.install(state, dict(req.params))
        except Exception as exc:  # a fix that cannot install must not stop the script
            state.skipped(req.id, f"{type(exc).__name__}: {exc}")
    state.patch()
    return notes



INSTALL_FIRST = ("fp16_amp",)
"""Fixes installed before the others: fp16's GradScaler must sit inside the optimizer wrappers of
the fixes that skip steps (fit_accumulation), so that it steps and unscales on real steps only."""


def accumulate_steps(
    k: int, *, active: Callable[[], bool] = lambda: True, on_real_step: Callable[[Any], None] | None = None,
) -> None:
    """Make every optimizer step real only on each ``k``-th call, so gradients accumulate between.

    Optimizers created from now on get a ``step`` that returns without stepping on all but each
    ``k``-th call (``on_real_step(optimizer)`` runs just before the real one) and a ``zero_grad``
    skipped while that optimizer is between real steps; ``nn.Module.zero_grad`` is skipped while
    any optimizer is. An LR scheduler of such an optimizer steps at most once per real step: a
    loop that steps its scheduler every iteration would otherwise run the schedule k times too
    fast, while one that steps it every epoch is left alone. Nothing changes while ``active()``
    is False. Used by ``fit_accumulation`` (micro-batches of a split batch) and the sweep's
    accumulation axis (k whole batches).
    """
    import types

    import torch

    counts: list[list[int]] = []  # one [micro-steps since the last real step] per optimizer
    original_init = torch.optim.Optimizer.__init__
    original_module_zero = torch.nn.Module.zero_grad
    original_sched_step = torch.optim.lr_scheduler.LRScheduler.step

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        original_init(self, *args, **kwargs)
        inner_step, inner_zero = self.step, self.zero_grad
        count = [0]
        counts.append(count)
        real = self._advisor_real_steps = [0]  # real steps taken while accumulating (for schedulers)

        def step(opt: Any, *a: Any, **kw: Any) -> Any:
            if not active():
                return inner_step(*a, **kw)
            count[0] += 1
            if count[0] < k:
                return None  # NOTE: the gradients keep accumulating until the k-th call
            count[0] = 0
            real[0] += 1
            if on_real_step is not None:
                on_real_step(opt)
            return inner_step(*a, **kw)

        def zero_grad(opt: Any, *a: Any, **kw: Any) -> Any:
            return None if active() and count[0] else inner_zero(*a, **kw)

        # NOTE: bound methods, as torch's own: an LR scheduler re-wraps ``opt.step.__func__``
        # (a plain function there made StepLR(opt) raise AttributeError).
        self.step, self.zero_grad = types.MethodType(step, self), types.MethodType(zero_grad, self)

    def module_zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        if active() and any(c[0] for c in counts):
            return None
        return original_module_zero(self, *args, **kwargs)

    def sched_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        real = getattr(getattr(self, "optimizer", None), "_advisor_real_steps", None)
        # NOTE: torch counts the scheduler's steps in _step_count, its constructor's own first
        # step included (always let through). After it, a scheduler may step once per real
        # optimizer step: a per-iteration scheduler then moves right after each real step and
        # never between, and a per-epoch one (fewer steps than real ones) is never held back.
        if active() and real is not None and getattr(self, "_step_count", 0) >= 1 and self._step_count - 1 >= real[0]:
            return None
        return original_sched_step(self, *args, **kwargs)

    patch(torch.optim.Optimizer, "__init__", __init__)
    patch(torch.nn.Module, "zero_grad", module_zero_grad)
    patch(torch.optim.lr_scheduler.LRScheduler, "step", sched_step)


