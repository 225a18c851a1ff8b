"""How the optimizer steps: one operator per parameter tensor, or a few multi-tensor kernels.

``torch.optim``'s optimizers have three implementations. The for-loop one updates one
parameter tensor at a time (an ``aten::mul_``, ``add_``, ``sqrt``, ``div`` ... each, and an
``item()`` per tensor for Adam's step count); ``foreach=True`` runs each of those operations
once over every tensor (``aten::_foreach_*``); ``fused=True`` runs the whole update as one
kernel per group (``aten::_fused_adamw_`` ...). torch picks foreach by default only when every
parameter is on a CUDA device: on a CPU the for-loop one runs unless the script asks.

Seen on a residual MLP of ours on this project's CPU (7 blocks of width 128, AdamW, batch 64):
the optimizer took 44% of the step, 400 operators a step inside ``Optimizer.step#AdamW.step``;
the same script with ``fused=True`` ran 1.19-1.35x faster end to end (three interleaved runs a
side), with ``foreach=True`` 1.18x (one run).

Two per-step columns, over the top-level operators inside ``Optimizer.step#...`` ranges:

* ``optimizer_op_count``: how many there are;
* ``optimizer_multi_tensor_flag``: 1 when any operator there is a foreach or fused one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.metrics.events import Classified, name_mask, outermost
from advisor.metrics.intervals import Windows, point_step

MULTI_TENSOR_PREFIXES = ("aten::_foreach_", "aten::_fused_")
"""Operator names of torch.optim's foreach and fused implementations."""


def optimizer_columns(events: pd.DataFrame, cls: Classified, windows: Windows, n: int) -> dict[str, np.ndarray]:
    """Per step: the top-level operators inside the optimizer's steps, and whether any is multi-tensor.

    A step without an ``Optimizer.step#`` range has a count of 0 and a NaN flag (nothing to say
    how its optimizer would run); an operator counts in the step its start falls in.
    """
    count = np.zeros(n, dtype=np.float64)
    flag = np.full(n, np.nan)
    ranges = np.flatnonzero(cls.optimizer & cls.complete)
    if not n or not len(ranges):
        return {"optimizer_op_count": count, "optimizer_multi_tensor_flag": flag}
    ts = events["ts"].to_numpy()
    rows = outermost(events, ranges)[0]
    rows = rows[np.argsort(ts[rows], kind="stable")]
    # the ranges as windows of their own: sorted, and disjoint once nested ones are dropped
    inside = Windows(np.arange(len(rows)), ts[rows], events["end"].to_numpy()[rows])
    has_range = np.bincount(point_step(inside.start, windows) + 1, minlength=n + 1)[1:] > 0
    flag[has_range] = 0.0
    top = cls.top_ops[point_step(ts[cls.top_ops], inside) >= 0]
    if not len(top):
        return {"optimizer_op_count": count, "optimizer_multi_tensor_flag": flag}
    step = point_step(ts[top], windows)
    ok = step >= 0
    count += np.bincount(step[ok], minlength=n)[:n]
    multi = name_mask(events["name"], lambda name: name.startswith(MULTI_TENSOR_PREFIXES))[top]
    hits = np.bincount(step[ok & multi], minlength=n)[:n] > 0
    flag[hits] = 1.0
    return {"optimizer_op_count": count, "optimizer_multi_tensor_flag": flag}
