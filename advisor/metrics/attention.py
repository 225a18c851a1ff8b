"""Hand-written attention in a trace: ``matmul -> softmax -> matmul`` on one call path.

Attention written out by hand shows on the CPU side of a trace as three operators in a row on
one thread: a batched matmul (``q @ k.T``: ``aten::matmul`` / ``aten::bmm`` / ``aten::baddbmm``),
a ``softmax`` (``aten::softmax`` / ``aten::_softmax``; scaling, masking and dropout ops between
them are ignored), and a second batched matmul (``weights @ v``), once per attention layer and
step. ``scaled_dot_product_attention`` shows as one ``aten::scaled_dot_product_attention``
instead, so a model that already uses it counts zero -- also where the operator runs its math
fallback (a CPU with an explicit mask, as ``nn.TransformerEncoderLayer`` passes one), whose own
matmul, softmax and matmul lie inside it: the SDPA operators are tokens too, and what they
hold is never read.

How the sequence is found (vectorised, no per-event Python loop over the whole trace):

- only the operators of interest are looked at, the outermost among them on each thread
  (``aten::matmul`` wraps an ``aten::bmm``, ``aten::softmax`` an ``aten::_softmax``);
- linear layers (``aten::linear`` / ``aten::addmm`` / ``aten::mm``) are tokens too, so that a
  softmax between two linear layers (a classifier head, a gating MLP) never reads as attention,
  and a matmul nested inside ``aten::linear`` is not taken for a batched matmul;
- ``M S M`` three tokens in a row on the same thread is one hand-written attention, counted in
  the step of its first matmul; the backward pass never matches (softmax's backward is
  ``aten::_softmax_backward_data``);
- when the trace recorded shapes, the first matmul's output, the softmax's input and the
  second matmul's first input must have the same last two dimensions (the weights of
  ``weights @ v`` are the softmax of ``q @ k.T``): a mismatch is not attention. The softmax's
  own shape matters: in a MONAI segmentation script of ours the 4x4 affine products of the
  data transforms (in the main process) sat before and after the loss's softmax of a
  (8, 2, 64, 64) output, and read as one attention block a step.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from advisor.metrics.events import name_mask, outermost, take
from advisor.metrics.intervals import Windows, point_step

BATCHED_MATMUL = frozenset({"aten::matmul", "aten::bmm", "aten::baddbmm"})
SOFTMAX = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax"})
LINEAR = frozenset({"aten::linear", "aten::addmm", "aten::mm"})
SDPA_PREFIXES = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_")
"""The fused attention operator and its backends (flash, efficient, cuDNN, the math fallback)."""

_M, _S, _L, _A = 1, 2, 3, 4


def hand_attention_count(events: pd.DataFrame, cpu_op: np.ndarray, windows: Windows, n: int) -> np.ndarray:
    """Hand-written attention blocks (matmul -> softmax -> matmul) per step.

    Args:
        events: One trace's events (columns ``name``, ``tid``, ``ts``, ``end``, ``input_dims``).
        cpu_op: Row mask of CPU operators.
        windows: The steps' windows.
        n: Number of steps.

    Returns:
        A float array of length ``n``: the count in each step.
    """
    names = events["name"]
    kind = np.zeros(len(events), dtype=np.int8)
    kind[name_mask(names, lambda s: s in BATCHED_MATMUL)] = _M
    kind[name_mask(names, lambda s: s in SOFTMAX)] = _S
    kind[name_mask(names, lambda s: s in LINEAR)] = _L
    kind[name_mask(names, lambda s: s.startswith(SDPA_PREFIXES))] = _A
    rows = np.flatnonzero(cpu_op & (kind > 0))
    out = np.zeros(n, dtype=np.float64)
    if len(rows) < 3:
        return out
    rows, tid_s = outermost(events, rows)  # a matmul inside a linear layer is not attention's
    k = kind[rows]
    if len(rows) < 3:
        return out
    hit = (
        (k[:-2] == _M) & (k[1:-1] == _S) & (k[2:] == _M)
        & (tid_s[:-2] == tid_s[1:-1]) & (tid_s[1:-1] == tid_s[2:])
    )
    first = np.flatnonzero(hit)
    if len(first) == 0:
        return out
    dims = events["input_dims"] if "input_dims" in events.columns else None
    if dims is not None:
        a = take(dims, rows[first])
        w = take(dims, rows[first + 1])
        b = take(dims, rows[first + 2])
        first = first[np.array([_shapes_agree(x, y, z) for x, y, z in zip(a, b, w, strict=True)], dtype=bool)]
    step = point_step(events["ts"].to_numpy()[rows[first]], windows)
    return out + np.bincount(step[step >= 0], minlength=n)[:n]


def _shapes_agree(first: object, second: object, softmax: object = None) -> bool:
    """``q @ k.T``'s output, the softmax's input and ``weights @ v``'s first input share their last two dims.

    True when the shapes are unknown; a softmax of unknown shape is not checked.
    """
    try:
        a = json.loads(first) if isinstance(first, str) else None
        b = json.loads(second) if isinstance(second, str) else None
        s = json.loads(softmax) if isinstance(softmax, str) else None
    except ValueError:
        return True
    if not (isinstance(a, list) and isinstance(b, list) and len(a) >= 2 and len(b) >= 1):
        return True
    q, kt, w = a[0], a[1], b[0]
    if not all(isinstance(x, list) and len(x) >= 2 for x in (q, kt, w)):
        return True
    scores = [q[-2], kt[-1]]
    if isinstance(s, list) and s and isinstance(s[0], list) and len(s[0]) >= 2 and s[0][-2:] != scores:
        return False
    return scores == w[-2:]
