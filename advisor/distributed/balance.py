"""Which rank holds a synchronous data-parallel job back (re-exported from the metrics stage).

The straggler analysis itself lives in :mod:`advisor.metrics.balance`, because the metrics
stage computes the ``straggler_*`` summary metrics from it and metrics must not import the
distributed package. This module keeps the names distributed callers already use.
"""

from __future__ import annotations

from advisor.metrics.balance import COMM_PART, RankBalance, rank_balance

__all__ = ["COMM_PART", "RankBalance", "rank_balance"]
