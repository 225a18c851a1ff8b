"""Batches assembled in the training process: the user's functions that build inputs, not models.

A loop without a DataLoader (nanoGPT's ``get_batch``: random offsets, a slice per row,
``torch.stack``) or with Python-side batch building spends its input time in the user's own
functions, which the breakdown counted as "other" or CPU ops. From the profiler's
``python_function`` events (recorded with stacks), a call of a user function is *input work*
when, inside its span, the model never runs (no ``nn.Module`` call, no autograd backward, no
optimizer) and most of the top-level operators it runs move or index data (:data:`DATA_OPS`) --
and it runs at least one. Only the outermost such calls count, so nested helpers are not counted twice.
The breakdown adds their spans to ``data_loading``; ``input_assembly_ms`` reports them alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.metrics.events import Classified, name_mask, outermost
from advisor.metrics.frames import looks_like_user_file, parse_frame

DATA_OPS = frozenset({
    "aten::stack", "aten::cat", "aten::index", "aten::index_select", "aten::select", "aten::slice",
    "aten::narrow", "aten::gather", "aten::take", "aten::randint", "aten::randperm", "aten::to",
    "aten::_to_copy", "aten::copy_", "aten::unsqueeze", "aten::squeeze", "aten::view", "aten::reshape",
    "aten::contiguous", "aten::clone", "aten::pin_memory", "aten::lift_fresh", "aten::tensor",
    "aten::as_tensor", "aten::from_numpy", "aten::empty", "aten::empty_strided", "aten::zeros", "aten::ones",
    "aten::arange", "aten::full", "aten::alias", "aten::expand", "aten::permute", "aten::transpose",
    "aten::t", "aten::detach", "aten::flatten", "aten::split", "aten::chunk", "aten::unbind",
})
"""Operators that build, move or index a batch rather than compute on it."""

_MODEL_NAMES = ("nn.Module:", "autograd::engine::evaluate_function", "Optimizer.step#", "Optimizer.zero_grad#")


def _user_function(name: str) -> bool:
    frame = parse_frame(name)
    return frame is not None and frame[2] != "<module>" and looks_like_user_file(frame[0])


def _starts_within(starts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many of the sorted ``starts`` fall in each span ``[lo, hi)`` (what begins as it ends is next)."""
    return np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo, side="left")


def assembly_calls(events: pd.DataFrame, cls: Classified, top_ops: np.ndarray) -> np.ndarray:
    """Rows of every user-function call that assembles input, nested ones too (see the module docstring).

    ``top_ops``: row positions of the top-level CPU operators (an op's own nested ops, such as
    ``as_strided`` under ``select``, are not counted again). Locations name every such call (a
    generator and the function inside it doing the work); time counts :func:`outermost_calls`.
    """
    out = np.zeros(len(events), dtype=bool)
    names = events["name"]
    candidates = np.flatnonzero(cls.python & cls.complete & name_mask(names, _user_function))
    if not len(candidates):
        return out
    ts, end = events["ts"].to_numpy(), events["end"].to_numpy()
    model = np.sort(ts[name_mask(names, lambda n: n.startswith(_MODEL_NAMES)) | cls.optimizer])
    top = np.zeros(len(events), dtype=bool)
    top[top_ops] = True
    data = np.sort(ts[top & name_mask(names, lambda n: n in DATA_OPS)])
    every = np.sort(ts[top])
    lo, hi = ts[candidates], end[candidates]
    n_model, n_data, n_ops = (_starts_within(a, lo, hi) for a in (model, data, every))
    out[candidates[(n_model == 0) & (n_data >= 1) & (2 * n_data >= n_ops)]] = True
    return out


def outermost_calls(events: pd.DataFrame, calls: np.ndarray) -> np.ndarray:
    """Keep the calls of ``calls`` not inside another one on their thread: the same time counts once."""
    out = np.zeros(len(events), dtype=bool)
    rows = np.flatnonzero(calls)
    if len(rows):
        out[outermost(events, rows)[0]] = True
    return out
