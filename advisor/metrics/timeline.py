"""A single step's events as lanes, for the HTML report's timeline plot.

Lanes: ``data_loading`` (DataLoader ``__next__`` ranges), ``cpu_ops`` (top-level CPU
operators), ``gpu_kernels`` (kernels and memsets), ``copies`` (memcpys) and ``syncs`` (sync
calls and ``aten::item``). Times are relative to the step's start, in microseconds.
"""

from __future__ import annotations

import numpy as np

from advisor.metrics.events import classify, find_windows, take
from advisor.metrics.steps import top_level_ops
from advisor.trace.load import Trace

LANES: tuple[str, ...] = ("data_loading", "cpu_ops", "gpu_kernels", "copies", "syncs")


def step_timeline(trace: Trace, step: int | None = None, max_events: int = 2000) -> tuple[dict, ...]:
    """Return the events of one step, lane by lane.

    Args:
        trace: A loaded trace.
        step: The ``ProfilerStep`` number to show; None picks the step with the median
            duration (a typical step). A trace without steps shows the whole trace.
        max_events: Cap on events returned; the longest events are kept, so the plot stays
            readable and small on huge steps.

    Returns:
        Dicts ``{lane, name, start_us, dur_us}`` sorted by lane order then start; empty when the
        step does not exist.
    """
    ev = trace.events
    cls = classify(ev)
    windows, _ = find_windows(trace)
    if len(windows) == 0:
        return ()
    if step is None:
        order = np.argsort(windows.duration, kind="stable")
        i = int(order[(len(order) - 1) // 2])
    else:
        hits = np.flatnonzero(windows.step == step)
        if len(hits) == 0:
            return ()
        i = int(hits[0])
    start, end = float(windows.start[i]), float(windows.end[i])
    top = np.zeros(len(ev), dtype=bool)
    top[top_level_ops(ev, cls)] = True
    masks = {
        "data_loading": cls.dataloader,
        "cpu_ops": top & ~cls.item,
        "gpu_kernels": cls.kernel | cls.memset,
        "copies": cls.memcpy,
        "syncs": cls.sync_call | cls.item,
    }
    ts = ev["ts"].to_numpy()
    stop = ev["end"].to_numpy()
    inside = (ts < end) & (stop > start)
    rows: list[tuple[int, int]] = []
    for lane_no, lane in enumerate(LANES):
        rows += [(lane_no, r) for r in np.flatnonzero(masks[lane] & inside)]
    if not rows:
        return ()
    lane_of = np.array([r[0] for r in rows])
    idx = np.array([r[1] for r in rows])
    s = np.maximum(ts[idx], start) - start
    d = np.minimum(stop[idx], end) - start - s
    if len(idx) > max_events:
        # rare lanes (loader, copies, syncs) always stay; then the longest events
        rank = d + np.isin(lane_of, (0, 3, 4)) * 1e18
        keep = np.sort(np.argsort(-rank, kind="stable")[:max_events])
        lane_of, idx, s, d = lane_of[keep], idx[keep], s[keep], d[keep]
    names = take(ev["name"], idx)
    order = np.lexsort((s, lane_of))
    return tuple(
        {"lane": LANES[int(lane_of[k])], "name": str(names[k]), "start_us": float(s[k]), "dur_us": float(d[k])}
        for k in order
    )
