"""Collectives across ranks: skew (waiting for the last rank) separated from the transfer."""

from __future__ import annotations

import pytest
import tracegen

from advisor.metrics.collectives import bus_factor
from advisor.metrics.compute import analyze_path


def test_skew_transfer_and_bus_bandwidth_match_the_scenario(tmp_path):
    for b in tracegen.collectives(world_size=4, late_rank=2, late_us=300.0, transfer_us=200.0, nelems=1 << 20):
        b.write(tmp_path / f"rank{b.rank}.pt.trace.json")
    m = analyze_path(tmp_path)
    (row,) = m.extra["collectives"]
    # Ranks 0, 1, 3 start the all_reduce kernel when their 100 us GEMM ends (t0 + 110 us: 6 us of
    # op overhead + 4 us launch + 100 us); rank 2 launches after 300 us more of CPU work (t0 + 314).
    skew = 314.0 - 110.0
    assert row["collective"] == "all_reduce" and row["late_rank"] == 2 and row["calls"] == 1
    assert row["skew_ms"] == pytest.approx(3 * skew / 4 / 1e3)
    assert row["transfer_ms"] == pytest.approx(0.200)
    nbytes = 4 * (1 << 20)
    assert row["bytes"] == nbytes
    assert row["busbw_gbps"] == pytest.approx(nbytes * 2 * 3 / 4 / 200e-6 / 1e9)
    assert m.summary["collective_wait_frac"] == pytest.approx(3 * skew / (3 * (skew + 200) + 200))
    assert m.summary["rank_count"] == 4


def test_bus_factors():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_to_all", 8) == pytest.approx(0.875)
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("all_reduce", 1) == 1.0


def test_dlrm_ranks_wait_for_rank_7_most_of_the_collective_time(shared_traces):
    m = analyze_path(shared_traces / "param" / "dlrm_kineto")
    rows = {r["collective"]: r for r in m.extra["collectives"]}
    assert set(rows) == {"all_to_all", "all_reduce"}
    assert rows["all_to_all"]["calls"] == 5 and rows["all_reduce"]["calls"] == 3
    # rank 7 has the least NCCL kernel time (1.7 ms vs up to 11.3 ms, README): the others wait for it
    assert rows["all_to_all"]["late_rank"] == 7
    assert m.summary["collective_wait_frac"] > 0.5
    assert rows["all_reduce"]["busbw_gbps"] > 0


def _calls(collective, starts_by_call, end_by_call):
    import pandas as pd

    rows = [
        {"rank": rank, "collective": collective, "index": i, "start": start, "end": end_by_call[i], "bytes": 1024.0}
        for i, starts in enumerate(starts_by_call) for rank, start in enumerate(starts)
    ]
    frame = pd.DataFrame(rows)
    return [frame[frame["rank"] == r].reset_index(drop=True) for r in sorted(frame["rank"].unique())]


def test_calls_reached_together_name_no_late_rank():
    """Back-to-back calls start together once the first synchronised the ranks: no one is late."""
    from advisor.metrics.collectives import merge_collectives

    # call 0: rank 2 arrives 50 us after the others; calls 1 and 2 start on every rank at once
    frames = _calls("all_to_all", [(0.0, 0.0, 50.0), (60.0, 60.0, 60.0), (70.0, 70.0, 70.0)], [60.0, 70.0, 80.0])
    table, _ = merge_collectives(frames, 1)
    assert table.loc[0, "late_rank"] == 2  # not rank 0, the first row of the two tied calls
    tied = _calls("all_reduce", [(5.0, 5.0), (9.0, 9.0)], [8.0, 12.0])
    table, _ = merge_collectives(tied, 1)
    assert table.loc[0, "late_rank"] is None
