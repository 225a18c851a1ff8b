"""How much of a rank's CPU-side communication overlaps its computation (gloo / CPU traces).

On GPU traces the metrics stage measures overlap between collective kernels and compute
kernels (``comm_overlap_frac``). A CPU-only job (gloo) has no kernels: its collectives are
``gloo:*`` ranges on gloo's worker threads (torch 2.13 records the DDP gradient all-reduce as
``c10d::allreduce_`` on the main thread, a short enqueue, and ``gloo:all_reduce``
``user_annotation`` ranges on two gloo threads), while the model's operators run on the
main thread. Overlap here is the time a collective is in progress while a top-level operator
(not a collective) runs on any thread: DDP's bucketed all-reduce during the backward pass
counts; the tail of the all-reduce that the step waits for does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from advisor.metrics.intervals import clip_to_steps, concat, union_per_step
from advisor.metrics.steps import TraceAnalysis, analyze_trace, top_level_ops
from advisor.trace.load import Trace


def step_overlap(analysis: TraceAnalysis) -> pd.DataFrame:
    """Per step of one trace: communication time, the part overlapping compute, and the share.

    Args:
        analysis: One trace's analysis (:func:`advisor.metrics.steps.analyze_trace`).

    Returns:
        Columns ``rank``, ``step``, ``comm_ms``, ``overlap_ms``, ``overlap_frac`` (NaN in steps
        without communication).
    """
    ev, cls, win = analysis.trace.events, analysis.cls, analysis.windows
    n = len(win)
    ts, end = ev["ts"].to_numpy(), ev["end"].to_numpy()
    comm = clip_to_steps(ts[cls.comm_op], end[cls.comm_op], win)
    top = top_level_ops(ev, cls)
    top = top[~cls.comm_op[top]]
    compute = clip_to_steps(ts[top], end[top], win)
    c_len = union_per_step(comm, n)
    both = union_per_step(concat(comm, compute), n)
    overlap = c_len + union_per_step(compute, n) - both
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(c_len > 0, overlap / c_len, np.nan)
    return pd.DataFrame(
        {
            "rank": analysis.trace.rank,
            "step": win.step,
            "comm_ms": c_len / 1e3,
            "overlap_ms": overlap / 1e3,
            "overlap_frac": frac,
        }
    )


def rank_overlap(traces: Sequence[Trace]) -> pd.DataFrame:
    """Per rank: median communication and overlap per step, and the time-weighted overlap share.

    Args:
        traces: One CPU trace per rank.

    Returns:
        Columns ``rank``, ``comm_ms``, ``overlap_ms``, ``overlap_frac`` (sum of overlap over sum
        of communication across the rank's steps; NaN without communication).
    """
    rows = []
    for trace in traces:
        per_step = step_overlap(analyze_trace(trace))
        total = float(per_step["comm_ms"].sum())
        rows.append(
            {
                "rank": trace.rank,
                "comm_ms": float(per_step["comm_ms"].median()) if len(per_step) else np.nan,
                "overlap_ms": float(per_step["overlap_ms"].median()) if len(per_step) else np.nan,
                "overlap_frac": float(per_step["overlap_ms"].sum()) / total if total > 0 else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=["rank", "comm_ms", "overlap_ms", "overlap_frac"])
