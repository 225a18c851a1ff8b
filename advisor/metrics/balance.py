"""Which rank holds a synchronous data-parallel job back, judged by busy time, not wall time.

In DDP (and any job that all-reduces every step) the collective is a barrier: every rank's step
takes the same wall time, the fast ranks' extra time being spent *waiting inside the
collective*. Comparing per-rank step times therefore finds no straggler (or names a fast rank,
whose step is a little longer because it also pays for the wait). Measured on
``examples/ddp_gloo.py --slow-rank 1 --slow-ms 40`` (2 ranks, gloo, CPU): step time 62.6 ms on
rank 0 and 59.8 ms on rank 1, but communication 55.4 ms on rank 0 and 8.7 ms on rank 1.

So the straggler is the rank with the most *busy* time, ``step_time_ms - communication_ms``
(the step minus the exposed communication part of the breakdown): the rank the others wait for.
Holistic Trace Analysis reasons the same way (the rank with the least communication wait). The
cost of the imbalance is the difference in busy time between the slowest and the fastest rank:
time every other rank spends waiting, each step.

The input is :attr:`advisor.metrics.model.Metrics.ranks` (one row per rank, medians over its
steps, with every breakdown part as ``<part>_ms``).

This lives in the metrics stage because the ``straggler_*`` summary metrics are computed from
it; :mod:`advisor.distributed.balance` re-exports it (distributed builds on metrics, never the
other way round; tests/metrics/test_layering.py enforces that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.metrics.registry import BREAKDOWN_PARTS

COMM_PART = "communication"


@dataclass(frozen=True)
class RankBalance:
    """How evenly the ranks' work is spread.

    Attributes:
        busy: One row per rank: ``rank``, ``step_time_ms``, ``comm_wait_ms`` (the exposed
            communication part), ``busy_ms`` (step minus it), and every other breakdown part.
        straggler_rank: The rank with the most busy time (the one the others wait for).
        fastest_rank: The rank with the least busy time.
        busy_ratio: Straggler's busy time / fastest rank's.
        wait_ms: Straggler's busy time minus the fastest rank's: what the fastest rank waits
            for it every step.
        wait_frac: ``wait_ms`` over the median step time.
        cause: The breakdown part (not communication) whose per-rank difference between the
            straggler and the fastest rank is largest (e.g. ``data_loading``), or None.
        cause_ms: That difference, in ms per step.
    """

    busy: pd.DataFrame
    straggler_rank: int | None = None
    fastest_rank: int | None = None
    busy_ratio: float | None = None
    wait_ms: float | None = None
    wait_frac: float | None = None
    cause: str | None = None
    cause_ms: float | None = None


def rank_balance(ranks: pd.DataFrame) -> RankBalance:
    """Find the straggler by busy time (see the module docstring).

    Args:
        ranks: ``Metrics.ranks``: columns ``rank``, ``step_time_ms`` and ``<part>_ms`` for
            the breakdown parts (missing parts count as 0).

    Returns:
        The balance; its ranks and ratios are None with fewer than two usable ranks.
    """
    if ranks is None or len(ranks) == 0 or "step_time_ms" not in ranks.columns:
        return RankBalance(busy=pd.DataFrame())
    step = pd.to_numeric(ranks["step_time_ms"], errors="coerce").astype(float)
    comm_col = f"{COMM_PART}_ms"
    comm = pd.to_numeric(ranks[comm_col], errors="coerce").fillna(0.0) if comm_col in ranks.columns else 0.0 * step
    busy = pd.DataFrame({"rank": ranks["rank"].astype(int), "step_time_ms": step, "comm_wait_ms": comm})
    busy["busy_ms"] = (step - comm).clip(lower=0.0)
    for part in BREAKDOWN_PARTS:
        if part != COMM_PART and f"{part}_ms" in ranks.columns:
            busy[f"{part}_ms"] = pd.to_numeric(ranks[f"{part}_ms"], errors="coerce").fillna(0.0)
    busy = busy.reset_index(drop=True)
    ok = busy["busy_ms"].notna()
    if ok.sum() < 2:
        return RankBalance(busy=busy)
    usable = busy[ok]
    hi, lo = usable["busy_ms"].idxmax(), usable["busy_ms"].idxmin()
    slow, fast = usable.loc[hi], usable.loc[lo]
    wait = float(slow["busy_ms"] - fast["busy_ms"])
    median_step = float(np.nanmedian(usable["step_time_ms"]))
    parts = [c for c in busy.columns if c.endswith("_ms") and c not in ("step_time_ms", "comm_wait_ms", "busy_ms")]
    diffs = {c[: -len("_ms")]: float(slow[c] - fast[c]) for c in parts}
    cause = max(diffs, key=lambda k: diffs[k]) if diffs else None
    if cause is not None and diffs[cause] <= 0:
        cause = None
    return RankBalance(
        busy=busy,
        straggler_rank=int(slow["rank"]),
        fastest_rank=int(fast["rank"]),
        busy_ratio=float(slow["busy_ms"] / fast["busy_ms"]) if fast["busy_ms"] > 0 else None,
        wait_ms=wait,
        wait_frac=wait / median_step if median_step > 0 else None,
        cause=cause,
        cause_ms=diffs[cause] if cause is not None else None,
    )
