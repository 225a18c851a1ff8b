"""Host and device time per ``nn.Module``, from the ``nn.Module: X`` frames of ``with_modules``.

A trace captured with ``with_modules=True`` (or ``with_stack``) holds a ``python_function``
event named ``nn.Module: Linear_0`` around each module's ``forward``. Per module this module
reports its hierarchical path (``BertModel_0/BertEncoder_0/BertLayer_3``), the host time (the
frames' wall time) and the device time: the time of the GPU kernels launched while the module
ran (runtime call inside the frame, same thread), inclusive of its children. Kernels of the
backward pass run outside the module frames (autograd calls no ``forward``), so device time
here is forward time; the report says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.events import name_mask, take

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

MODULE_PREFIX = "nn.Module: "
TOP_MODULES = 20
"""Rows of the module table kept in the report."""


def _launch_of_kernels(analysis: TraceAnalysis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tid code, launch ts, kernel duration) of every kernel whose launch call is in the trace."""
    ev, cls = analysis.trace.events, analysis.cls
    corr = ev["correlation"].to_numpy()
    k_rows = np.flatnonzero(cls.kernel)
    rt = np.flatnonzero(cls.runtime & (corr >= 0))
    if not len(k_rows) or not len(rt):
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    order = np.argsort(corr[rt], kind="stable")
    keys = corr[rt][order]
    pos = np.clip(np.searchsorted(keys, corr[k_rows]), 0, len(keys) - 1)
    found = keys[pos] == corr[k_rows]
    launch = rt[order][pos][found]
    tid = ev["tid"].cat.codes.to_numpy()
    return tid[launch], ev["ts"].to_numpy()[launch], ev["dur"].to_numpy()[k_rows][found]


def module_times(analysis: TraceAnalysis) -> pd.DataFrame:
    """Per module path: ``module`` (path), ``depth``, ``calls``, ``host_ms`` and ``device_ms`` per step.

    Empty when the trace has no module frames. Sorted by device time, then host time.
    """
    ev, cls = analysis.trace.events, analysis.cls
    rows = np.flatnonzero(cls.python & name_mask(ev["name"], lambda n: n.startswith(MODULE_PREFIX)))
    cols = ["module", "depth", "calls", "host_ms", "device_ms"]
    if not len(rows):
        return pd.DataFrame(columns=cols)
    names = [str(n)[len(MODULE_PREFIX):] for n in take(ev["name"], rows)]
    tid = ev["tid"].cat.codes.to_numpy()[rows]
    ts, end = ev["ts"].to_numpy()[rows], ev["end"].to_numpy()[rows]
    order = np.lexsort((-end, ts, tid))
    paths = [""] * len(rows)
    depth = np.zeros(len(rows), dtype=np.int64)
    stack: list[int] = []
    # NOTE: one pass over the frames in start order with a stack of open frames: frames nest,
    # so the top of the stack that still covers a frame is its parent module
    for i in order.tolist():
        while stack and (tid[stack[-1]] != tid[i] or end[stack[-1]] < ts[i]):
            stack.pop()
        paths[i] = f"{paths[stack[-1]]}/{names[i]}" if stack else names[i]
        depth[i] = len(stack)
        stack.append(i)
    k_tid, k_ts, k_dur = _launch_of_kernels(analysis)
    device = np.zeros(len(rows))
    for t in np.unique(tid):
        mine = np.flatnonzero(tid == t)
        ks = np.flatnonzero(k_tid == t)
        if not len(ks):
            continue
        o = np.argsort(k_ts[ks], kind="stable")
        lts, cum = k_ts[ks][o], np.r_[0.0, np.cumsum(k_dur[ks][o])]
        device[mine] = cum[np.searchsorted(lts, end[mine], side="right")] - cum[np.searchsorted(lts, ts[mine], side="left")]
    steps = max(len(analysis.windows), 1)
    frame = pd.DataFrame({"module": paths, "depth": depth, "host_us": end - ts, "device_us": device})
    g = frame.groupby("module", sort=False).agg(
        depth=("depth", "first"), calls=("depth", "size"), host_us=("host_us", "sum"), device_us=("device_us", "sum")
    ).reset_index()
    g["calls"] = g["calls"] / steps
    g["host_ms"] = g["host_us"] / 1e3 / steps
    g["device_ms"] = g["device_us"] / 1e3 / steps
    return g[cols]


def top_modules(table: pd.DataFrame, limit: int = TOP_MODULES) -> pd.DataFrame:
    """Keep the ``limit`` modules with the most device (then host) time and their ancestors, in tree order.

    Siblings are ordered by device time, then host time, so the table reads as an indented tree.
    """
    if not len(table):
        return table
    ranked = table.sort_values(["device_ms", "host_ms", "module"], ascending=[False, False, True], kind="stable")
    keep = set(ranked["module"].head(limit))
    for path in list(keep):
        parts = path.split("/")
        keep.update("/".join(parts[:i]) for i in range(1, len(parts)))
    sub = table[table["module"].isin(keep)].set_index("module")
    children: dict[str, list[str]] = {}
    for path in sub.index:
        children.setdefault(path.rsplit("/", 1)[0] if "/" in path else "", []).append(path)
    order: list[str] = []

    def visit(parent: str) -> None:
        kids = sorted(children.get(parent, []), key=lambda m: (-sub.at[m, "device_ms"], -sub.at[m, "host_ms"], m))
        for kid in kids:
            order.append(kid)
            visit(kid)

    visit("")
    return sub.loc[order].reset_index()


def with_model_names(records: list[dict[str, Any]], names: dict[str, str]) -> list[dict[str, Any]]:
    """Return module-table rows with each path's labels replaced by the model's own names.

    ``Sequential_0/Block_0/Conv2d_1`` becomes ``1.conv (Conv2d)`` when the capture mapped
    ``Conv2d_1`` to its qualified name (:mod:`advisor.capture.module_names`): the qualified name
    already holds the path, and the class says what the module is. A label without a name (a
    root module, a trace from elsewhere) keeps its path.
    """
    if not names:
        return records
    out = []
    for row in records:
        label = str(row.get("module", "")).rsplit("/", 1)[-1]
        name = names.get(label)
        out.append({**row, "module": f"{name} ({label.rsplit('_', 1)[0]})"} if name else row)
    return out
