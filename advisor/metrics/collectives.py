"""Collectives across ranks: time waiting for the slowest rank, separated from the transfer.

Ranks of one job issue their collectives in the same order, so the k-th ``all_reduce`` kernel
of every rank is one collective. On a common clock (Kineto timestamps are wall-clock based;
the 8-rank DLRM traces share one), a collective's kernel starts on each rank when that rank
reaches it and ends on all ranks at about the same time, once the data has moved. So, per call:

* the last rank to arrive starts at ``max(start)``; every other rank's kernel spends
  ``max(start) - start`` *waiting* for it (skew: a load-balance problem, not a network one);
* the *transfer* is the last arriving rank's own kernel time (it never waits);
* effective bus bandwidth is ``size / transfer`` times the algorithm factor nccl-tests uses:
  ``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for all_gather (size = gathered output),
  reduce_scatter and all_to_all, 1 for broadcast/reduce.

The size comes from the ``nccl:<collective>`` annotation around the kernel's launch (its
``Input Dims`` and ``Input type``); a kernel without one gets its type from the kernel name and
no size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.metrics.events import name_mask, take
from advisor.metrics.flops import parse_json
from advisor.metrics.roofline import DTYPE_BYTES, kernel_owner

if TYPE_CHECKING:
    from advisor.metrics.steps import TraceAnalysis

_KERNEL_TYPES = (
    ("AllReduce", "all_reduce"), ("AllGather", "all_gather"), ("ReduceScatter", "reduce_scatter"),
    ("Broadcast", "broadcast"), ("SendRecv", "send_recv"), ("Reduce", "reduce"),
)


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor of a collective over ``ranks`` ranks."""
    if ranks <= 1:
        return 1.0
    if "all_reduce" in collective:
        return 2.0 * (ranks - 1) / ranks
    if any(k in collective for k in ("all_gather", "reduce_scatter", "all_to_all")):
        return (ranks - 1) / ranks
    return 1.0


def _kernel_type(name: str) -> str:
    for marker, kind in _KERNEL_TYPES:
        if marker in name:
            return kind
    return "collective"


def _message_bytes(dims_text: Any, types_text: Any) -> float | None:
    dims, types = parse_json(dims_text if isinstance(dims_text, str) else None), parse_json(
        types_text if isinstance(types_text, str) else None)
    if not isinstance(dims, list) or not isinstance(types, list) or not dims:
        return None
    total = 0
    for shape, t in zip(dims, types, strict=False):
        size = DTYPE_BYTES.get(t) if isinstance(t, str) else None
        if size and isinstance(shape, list) and shape:
            total += size * math.prod(int(v) for v in shape)
    return float(total) if total else None


def rank_collectives(analysis: TraceAnalysis) -> pd.DataFrame:
    """One rank's collective kernels in order: ``collective``, ``index`` (k-th of its kind), ``start``, ``end``, ``bytes``."""
    ev, cls = analysis.trace.events, analysis.cls
    cols = ["rank", "collective", "index", "start", "end", "bytes"]
    k_rows_all = np.flatnonzero(cls.comm_kernel)
    if not len(k_rows_all):
        return pd.DataFrame(columns=cols)
    ann = np.flatnonzero(cls.complete & name_mask(ev["name"], lambda n: n.startswith("nccl:")))
    k_rows, owner = kernel_owner(ev, analysis, ann)
    is_comm = cls.comm_kernel[k_rows]
    k_rows, owner = k_rows[is_comm], owner[is_comm]
    names = take(ev["name"], k_rows).astype(str)
    a_names = take(ev["name"], ann).astype(str) if len(ann) else np.zeros(0, dtype=object)
    a_dims, a_types = take(ev["input_dims"], ann), take(ev["input_type"], ann)
    kinds, sizes = [], []
    for name, o in zip(names, owner, strict=True):
        if o >= 0:
            kinds.append(str(a_names[o]).removeprefix("nccl:"))
            sizes.append(_message_bytes(a_dims[o], a_types[o]))
        else:
            kinds.append(_kernel_type(name))
            sizes.append(None)
    frame = pd.DataFrame(
        {
            "rank": analysis.trace.rank,
            "collective": kinds,
            "start": ev["ts"].to_numpy()[k_rows],
            "end": ev["end"].to_numpy()[k_rows],
            "bytes": np.array([np.nan if b is None else b for b in sizes], dtype=np.float64),
        }
    ).sort_values("start", kind="stable")
    frame["index"] = frame.groupby("collective").cumcount()
    return frame[cols].reset_index(drop=True)


def _calls(allr: pd.DataFrame) -> pd.DataFrame:
    """One row per collective call seen by at least two ranks (calls matched by kind and index).

    NOTE: whole-column group operations, not a loop over the groups: a 64-rank DLRM job has
    hundreds of calls, and this runs in the merge, after the rank workers, in series.
    """
    keys = ["collective", "index"]
    g = allr.groupby(keys, sort=False)
    last = g["start"].transform("max")
    rows = allr.assign(wait=last - allr["start"], took=allr["end"] - allr["start"], at_last=allr["start"] == last)
    per = rows.groupby(keys, sort=False)
    # the late rank: the first row holding its call's latest start (as idxmax picks it)
    late = rows.loc[per["start"].idxmax()].set_index(keys)
    c = pd.DataFrame({
        "bytes": per["bytes"].max(),
        "wait_us": per["wait"].mean(),
        "wait_total_us": per["wait"].sum(),
        "time_total_us": per["took"].sum(),
        "ranks": per.size(),
        "at_last": per["at_last"].sum(),
    })
    c["transfer_us"] = late["took"]
    # NOTE: a call that several ranks reached at the same last moment has no late rank (-1):
    # back-to-back collectives start together on every rank once the first has synchronised
    # them, and picking the first such row named rank 0 as "last to arrive" in a job whose
    # straggler was rank 37.
    c["late_rank"] = np.where(c["at_last"] == 1, late["rank"].astype(int), -1)
    c = c.drop(columns="at_last")
    c = c[c["ranks"] >= 2].reset_index()
    return c.astype({"bytes": float, "wait_us": float, "wait_total_us": float, "time_total_us": float,
                     "transfer_us": float})


def _most_often_late(late: pd.Series) -> int | None:
    """Return the rank most often last to reach a collective's calls, over the calls that had one."""
    known = late[late >= 0]
    return int(known.mode().iloc[0]) if len(known) else None


def merge_collectives(
    frames: Sequence[pd.DataFrame], steps_per_rank: int
) -> tuple[pd.DataFrame, dict[str, float | None]]:
    """Match each collective across ranks; return the per-collective table and the run metrics.

    The frames are small (one row per collective call), so ranks analysed in separate processes
    send only them back for this merge.
    """
    none: dict[str, float | None] = {"collective_wait_frac": None, "collective_busbw_gbps": None}
    empty = pd.DataFrame(columns=["collective", "calls", "bytes", "skew_ms", "transfer_ms", "busbw_gbps", "late_rank"])
    per_rank = [f for f in frames if len(f)]
    if len(per_rank) < 2:
        return empty, none
    allr = pd.concat(per_rank, ignore_index=True)
    steps = max(steps_per_rank, 1)
    c = _calls(allr)
    if c.empty:
        return empty, none
    # all_gather's nccl-tests size is the gathered output: n times the input
    size = np.where(c["collective"].str.contains("all_gather"), c["bytes"] * c["ranks"], c["bytes"])
    factor = np.array([bus_factor(k, r) for k, r in zip(c["collective"], c["ranks"], strict=True)])
    c["bus_bytes"] = size * factor
    c["size"] = size
    rows = []
    for kind, g in c.groupby("collective", sort=False):
        t = float(g["transfer_us"].sum())
        sized = g["bus_bytes"].notna()
        moved_us = float(g.loc[sized, "transfer_us"].sum())
        busbw = float(g.loc[sized, "bus_bytes"].sum()) / moved_us / 1e3 if sized.any() and moved_us > 0 else None
        rows.append(
            {
                "collective": kind,
                "calls": len(g) / steps,
                "bytes": float(g["size"].mean()) if g["size"].notna().any() else None,
                "skew_ms": float(g["wait_us"].mean()) / 1e3,
                "transfer_ms": t / len(g) / 1e3,
                "busbw_gbps": busbw,  # bytes/us / 1e3 = GB/s
                "late_rank": _most_often_late(g["late_rank"]),
            }
        )
    table = pd.DataFrame(rows).sort_values(["skew_ms", "collective"], ascending=[False, True], kind="stable")
    total = float(c["time_total_us"].sum())
    sized = c["bus_bytes"].notna() & (c["transfer_us"] > 0)
    metrics = {
        "collective_wait_frac": float(c["wait_total_us"].sum() / total) if total > 0 else None,
        "collective_busbw_gbps": float(c.loc[sized, "bus_bytes"].sum() / c.loc[sized, "transfer_us"].sum() / 1e3)
        if sized.any() else None,
    }
    return table.reset_index(drop=True), metrics
