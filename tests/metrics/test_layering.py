"""The metrics stage keeps rank balance (``advisor.distributed.balance`` only re-exports it).

That metrics never imports distributed is checked with every other layer rule in
``tests/test_layers.py``.
"""

from __future__ import annotations


def test_distributed_balance_reexports_the_metrics_implementation() -> None:
    from advisor.distributed import balance as old
    from advisor.metrics import balance as new

    assert old.rank_balance is new.rank_balance and old.RankBalance is new.RankBalance
