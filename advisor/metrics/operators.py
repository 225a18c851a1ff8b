"""Host time per operator (``aten::convolution``, ``aten::addmm``, ...): calls, self and total time per step.

The breakdown says how much of the step the CPU ops take; this table says which operators,
the per-step view of torch.profiler's ``key_averages()``:

* **self** time is the operator's own time, its children's taken out, so the self times of all
  operators add up to the time operators ran (nothing counted twice);
* **total** time is inclusive of the operators it called (``aten::linear`` holds its
  ``aten::addmm``); an operator nested in another of the same name (recursion, ``aten::to`` inside
  ``aten::to``) is counted once, by the outermost call.

Only operators that start inside a profiled step count, so the figures are per step of the same
windows the breakdown uses. ``advisor compare`` diffs two runs' tables (which operators a fix
made faster or slower).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from advisor.metrics.events import take

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

TOP_OPERATORS = 20
"""Rows of the operator table kept in the report (the most self time first)."""

COLUMNS = ("operator", "calls", "self_ms", "total_ms", "self_frac")


def operator_times(analysis: TraceAnalysis, limit: int = TOP_OPERATORS) -> pd.DataFrame:
    """Per operator name: calls, ``self_ms`` and ``total_ms`` per step, and its share of all self time.

    Empty when no operator ran inside a profiled step. Sorted by self time, largest first.
    """
    ev, cls, windows = analysis.trace.events, analysis.cls, analysis.windows
    rows = np.flatnonzero(cls.cpu_op)
    if not len(rows) or not len(windows):
        return pd.DataFrame(columns=list(COLUMNS))
    ts = ev["ts"].to_numpy()[rows]
    # NOTE: an operator belongs to the step it starts in (windows are sorted and disjoint)
    w = np.searchsorted(windows.start, ts, side="right") - 1
    inside = (w >= 0) & (ts < windows.end[np.clip(w, 0, None)])
    rows, ts = rows[inside], ts[inside]
    if not len(rows):
        return pd.DataFrame(columns=list(COLUMNS))
    end = ev["end"].to_numpy()[rows]
    tid = ev["tid"].cat.codes.to_numpy()[rows]
    names, codes = np.unique(take(ev["name"], rows).astype(str), return_inverse=True)
    self_us, outermost = _self_time(tid, ts, end, codes)
    frame = pd.DataFrame({"code": codes, "self_us": self_us, "total_us": np.where(outermost, end - ts, 0.0)})
    g = frame.groupby("code").agg(calls=("code", "size"), self_us=("self_us", "sum"), total_us=("total_us", "sum"))
    steps = len(windows)
    all_self = float(g["self_us"].sum())
    out = pd.DataFrame({
        "operator": names[g.index.to_numpy()],
        "calls": g["calls"].to_numpy() / steps,
        "self_ms": g["self_us"].to_numpy() / 1e3 / steps,
        "total_ms": g["total_us"].to_numpy() / 1e3 / steps,
        "self_frac": g["self_us"].to_numpy() / all_self if all_self > 0 else np.nan,
    })
    out = out.sort_values(["self_ms", "operator"], ascending=[False, True], kind="stable")
    return out.head(limit).reset_index(drop=True)


def _self_time(tid: np.ndarray, ts: np.ndarray, end: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each operator's time less its direct children's, and whether no open operator shares its name.

    One pass in start order with a stack of the operators still open on the thread: events of
    one thread nest, so the top of the stack that has not ended is the direct parent.
    """
    n = len(ts)
    order = np.lexsort((-end, ts, tid)).tolist()
    t, s, e, c = tid.tolist(), ts.tolist(), end.tolist(), codes.tolist()
    children = [0.0] * n
    outermost = [True] * n
    open_names: dict[int, int] = {}
    stack: list[int] = []
    for i in order:
        while stack and (t[stack[-1]] != t[i] or e[stack[-1]] <= s[i]):
            top = stack.pop()
            open_names[c[top]] -= 1
        if stack:
            parent = stack[-1]
            children[parent] += min(e[i], e[parent]) - s[i]
        if open_names.get(c[i], 0):
            outermost[i] = False
        open_names[c[i]] = open_names.get(c[i], 0) + 1
        stack.append(i)
    self_us = np.maximum(end - ts - np.asarray(children), 0.0)
    return self_us, np.asarray(outermost, dtype=bool)
