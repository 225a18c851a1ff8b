"""Child side of a sweep cell: the fix catalog's runtime, plus gradient accumulation and a FLOP count.

The capture child imports this module by name (``RunSpec.fix_installers``) and calls
:func:`install` once, before the script runs. Requests of the fix catalog go on to
:func:`advisor.fixes.runtime.install` unchanged; this module adds the two requests only the sweep
makes (and :data:`advisor.sweep.spatial.SPATIAL_SIZE`, MONAI crops resized for the size axis):

- :data:`ACCUMULATE` (``{"factor": k}``): gradient accumulation over ``k`` micro-batches for a
  script that has none of its own. Every optimizer's ``step`` becomes a no-op on all but each
  ``k``-th call, where the summed gradients are first divided by ``k`` (the mean over the
  micro-batches, as ``loss / k`` in a hand-written loop); ``zero_grad`` (the optimizer's or a
  module's) is skipped while micro-batches are being summed. The capture counts steps from the
  real optimizer steps only, so a step holds ``k`` DataLoader batches, as in a script that
  accumulates. Patched through :func:`advisor.fixes.runtime.patch`, so tests can undo it.
- :data:`COUNT_FLOPS` (``{"path": ..., "step": n}``): the FLOPs of optimizer step ``n`` (a
  warm-up step: the counter slows it), counted with ``torch.utils.flop_counter.FlopCounterMode``
  between the post-hooks of steps ``n - 1`` and ``n``, written as JSON to ``path``:
  ``{"flops": N, "step": n}``, or ``{"error": "..."}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from advisor.capture.model import FixNote, FixRequest, NoteState
from advisor.sweep import spatial

ACCUMULATE = "sweep_accumulation"
"""Request id: accumulate gradients over ``factor`` micro-batches per optimizer step."""
COUNT_FLOPS = "sweep_flop_count"
"""Request id: count one optimizer step's FLOPs and write them to ``path``."""
OWN = (ACCUMULATE, COUNT_FLOPS, spatial.SPATIAL_SIZE)


def install(fixes: Sequence[FixRequest]) -> dict[str, FixNote]:
    """Install the catalog's fixes, then the sweep's own requests; return the live notes dict."""
    from advisor.fixes import runtime

    notes = runtime.install([f for f in fixes if f.id not in OWN])
    for req in fixes:
        if req.id == ACCUMULATE:
            _accumulate(notes, int(req.params.get("factor", 1)))
        elif req.id == COUNT_FLOPS:
            _count_flops(Path(str(req.params["path"])), int(req.params.get("step", 2)))
        elif req.id == spatial.SPATIAL_SIZE:
            spatial.install(notes, int(req.params["size"]))
    return notes


def _accumulate(notes: dict[str, FixNote], k: int) -> None:
    """Make every optimizer step a real one only on each ``k``-th call (see the module doc)."""
    import torch

    from advisor.fixes.runtime import accumulate_steps

    if k <= 1:
        notes[ACCUMULATE] = FixNote(NoteState.APPLIED, "accumulation 1: every optimizer step is real")
        return
    notes[ACCUMULATE] = FixNote(NoteState.PENDING, "waiting for a torch.optim optimizer")

    def mean_of_sum(opt: Any) -> None:
        with torch.no_grad():
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.div_(k)
        notes[ACCUMULATE] = FixNote(
            NoteState.APPLIED,
            f"gradients summed over {k} micro-batches per optimizer step (divided by {k}: their mean)",
        )

    accumulate_steps(k, on_real_step=mean_of_sum)


def _count_flops(path: Path, at_step: int) -> None:
    """Count optimizer step ``at_step``'s FLOPs with FlopCounterMode and write them to ``path``."""
    import torch
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.flop_counter import FlopCounterMode

    state: dict[str, Any] = {"steps": 0, "mode": None, "input": None, "pre": None}

    def first_input(_module: Any, args: Any) -> None:
        x = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if x is not None and state["input"] is None:
            state["input"] = {"input_shape": list(x.shape), "input_integer": not x.is_floating_point()}
        if state["pre"] is not None:
            state["pre"].remove()
            state["pre"] = None

    at_step = max(at_step, 2)  # the counter starts at a step's end: step 1's post-hook at the earliest
    start = at_step - 1

    def write(payload: dict[str, Any]) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(payload), encoding="utf-8")
        except OSError:  # the run folder is gone: nothing to report to
            pass

    def after_step(*_: Any) -> None:
        state["steps"] += 1
        n = state["steps"]
        try:
            if n == start and state["mode"] is None:
                mode = FlopCounterMode(display=False)
                mode.__enter__()
                state["mode"] = mode
                state["pre"] = register_module_forward_pre_hook(first_input)
            elif n == at_step and state["mode"] is not None:
                mode, state["mode"] = state["mode"], None
                mode.__exit__(None, None, None)
                write({"flops": int(mode.get_total_flops()), "step": n, **(state["input"] or {})})
                handle.remove()
        except Exception as exc:  # noqa: BLE001 - a failed count must not stop the script
            state["mode"] = None
            write({"error": f"{type(exc).__name__}: {exc}"})
            handle.remove()

    handle = register_optimizer_step_post_hook(after_step)
