"""Unit tests of the per-rank merge and the busy-time straggler analysis (no subprocess)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from advisor.capture.model import (
    RunStatus,
    TimedPhase,
)
from advisor.distributed.balance import rank_balance
from advisor.distributed.merge import merge_ranks, merge_timed, read_rank
from advisor.rundir import rank_dirs


def _child(folder: Path, mtime: float | None = None, **fields) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "status": RunStatus.STOPPED,
        "finished": True,
        "steps_seen": 8,
        "timed_steps": 3,
        "trace_files": [f"{folder.name}/traces/t.pt.trace.json"],
        "pstats_file": f"{folder.name}/profile.pstats",
        "timed": {"step_times_ms": [10.0, 12.0, 11.0], "samples": [32, 32, 32], "samples_per_s": 2900.0,
                  "steps_per_s": 90.9, "time_to_first_step_s": 1.5, "batches": [1, 1, 1]},
        "notes": ["shared note"],
    }
    data.update(fields)
    path = folder / "child.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def _ranks(tmp_path: Path) -> list:
    return [read_rank(r, folder, {"script": "train.py"}) for r, folder in rank_dirs(tmp_path)]


def test_merge_timed_takes_the_slowest_rank_for_step_time_and_throughput() -> None:
    a = TimedPhase(step_times_ms=(10.0, 20.0, 30.0), samples=(8, 8, 8), samples_per_s=400.0,
                   steps_per_s=50.0, time_to_first_step_s=2.0, batches=(1, 1, 1))
    b = TimedPhase(step_times_ms=(15.0, 5.0, 30.5, 40.0), samples=(8, 8, 8, 8), samples_per_s=380.0,
                   steps_per_s=45.0, time_to_first_step_s=3.0, batches=(1, 1, 1, 1))
    m = merge_timed([a, b])
    assert m.step_times_ms == (15.0, 20.0, 30.5)
    assert m.samples_per_s == pytest.approx(2 * 380.0)  # the slowest rank's rate x 2 ranks, not 400 + 380
    assert m.steps_per_s == 45.0
    assert m.time_to_first_step_s == 3.0
    assert m.samples == (8, 8, 8) and m.batches == (1, 1, 1)  # per rank, not summed
    # a rank without a sample count makes the job's samples/s unknown, not half of it
    assert merge_timed([a, TimedPhase(step_times_ms=(1.0,), samples=(None,))]).samples_per_s is None


def test_a_jobs_phases_are_the_longest_ranks(tmp_path: Path) -> None:
    """Ranks run side by side: each phase lasts as long as its slowest rank's (a job's diagnose
    once read as 100% overhead because the job had no phases at all)."""
    _child(tmp_path / "rank0", phases_s={"process": 0.3, "imports": 1.4, "setup": 1.6, "timed": 0.9})
    _child(tmp_path / "rank1", phases_s={"process": 0.5, "imports": 1.3, "setup": 1.7, "timed": 1.0, "cprofile": 0.5})
    merged = merge_ranks(_ranks(tmp_path))
    # "process" is the parent's to add, from its own wall time (torchrun and the interpreters)
    assert merged["phases_s"] == {"imports": 1.4, "setup": 1.7, "timed": 1.0, "cprofile": 0.5}


def test_read_rank_makes_paths_relative_to_the_rank_folder(tmp_path: Path) -> None:
    _child(tmp_path / "rank1")
    (r,) = _ranks(tmp_path)
    assert r.rank == 1 and r.name == "rank1" and r.finished
    assert r.capture.trace_files == ("traces/t.pt.trace.json",)
    assert r.capture.pstats_file == "profile.pstats"
    assert r.capture.script == "train.py"


def test_all_ranks_stopped_merges_to_stopped(tmp_path: Path) -> None:
    _child(tmp_path / "rank0")
    _child(tmp_path / "rank1", notes=["shared note", "only here"])
    merged = merge_ranks(_ranks(tmp_path))
    assert merged["status"] == RunStatus.STOPPED and merged["error"] is None
    assert merged["ranks"] == ["rank0", "rank1"]
    assert merged["trace_files"] == []  # listed in the rank captures, not twice
    assert merged["pstats_file"] == "rank0/profile.pstats"
    assert merged["timed"].samples_per_s == pytest.approx(5800.0)
    assert "shared note" in merged["notes"] and "rank 1: only here" in merged["notes"]


def test_first_failing_rank_is_named(tmp_path: Path) -> None:
    # rank 1 raised first; rank 0 then failed in the collective ("Connection closed by peer"),
    # rank 2 was killed before it could save.
    _child(tmp_path / "rank0", mtime=2000.0, status=RunStatus.CRASHED,
           error={"type": "RuntimeError", "message": "Connection closed by peer", "step": 3})
    _child(tmp_path / "rank1", mtime=1000.0, status=RunStatus.CRASHED,
           error={"type": "ValueError", "message": "bad batch", "step": 3})
    _child(tmp_path / "rank2", mtime=500.0, finished=False, status="running")
    merged = merge_ranks(_ranks(tmp_path))
    assert merged["status"] == RunStatus.CRASHED
    err = merged["error"]
    assert err.type == "ValueError" and err.message == "rank 1: bad batch"
    assert err.log == "rank1/stderr.log" and err.step == 3
    assert any("rank 1 failed first" in n for n in merged["notes"])


def test_killed_rank_beats_its_peers_collective_errors(tmp_path: Path) -> None:
    # rank 0 was killed (out of memory) after its last phase change; rank 1 then failed in the
    # all-reduce. The killed rank saved earlier, but the peer error is only a consequence.
    _child(tmp_path / "rank0", mtime=500.0, finished=False, status="running", steps_seen=4)
    _child(tmp_path / "rank1", mtime=1000.0, status=RunStatus.CRASHED,
           error={"type": "RuntimeError", "message": "[pair.cc:553] Connection closed by peer [127.0.0.1]:9639"})
    merged = merge_ranks(_ranks(tmp_path))
    assert merged["error"].type == "ProcessDied" and merged["error"].message.startswith("rank 0: ")
    # the same when the killed rank's last save is later than the peer's error
    _child(tmp_path / "rank0", mtime=1500.0, finished=False, status="running", steps_seen=4)
    assert merge_ranks(_ranks(tmp_path))["error"].type == "ProcessDied"


def test_rank_exiting_nonzero_fails_the_job(tmp_path: Path) -> None:
    _child(tmp_path / "rank0", status=RunStatus.TIMEOUT)  # ended by torchrun's SIGTERM
    _child(tmp_path / "rank1", status=RunStatus.COMPLETED, exit_code=3)
    merged = merge_ranks(_ranks(tmp_path))
    assert merged["status"] == RunStatus.CRASHED
    assert merged["error"].message == "rank 1 exited with code 3"


def test_timeout_and_stall(tmp_path: Path) -> None:
    _child(tmp_path / "rank0")
    _child(tmp_path / "rank1", finished=False, status="running", steps_seen=7)
    ranks = _ranks(tmp_path)
    timed_out = merge_ranks(ranks, timed_out=True, timeout_s=30)
    assert timed_out["status"] == RunStatus.TIMEOUT and timed_out["error"].type == "Timeout"
    # an unfinished rank counts as crashed (ProcessDied) when nothing else explains it
    assert merge_ranks(ranks)["error"].type == "ProcessDied"
    _child(tmp_path / "rank1", status="running", finished=True, steps_seen=7)
    stalled = merge_ranks(_ranks(tmp_path), stalled=[1], stall_s=60)
    assert stalled["status"] == RunStatus.TIMEOUT
    assert stalled["error"].type == "RankStalled" and "rank(s) 1" in stalled["error"].message


def test_no_rank_started() -> None:
    merged = merge_ranks([])
    assert merged["status"] == RunStatus.CRASHED and merged["error"].type == "NoRanks"


def _ranks_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def test_balance_names_the_rank_the_others_wait_for() -> None:
    # Synchronous DDP: equal wall time; rank 0 waits 55 ms in the all-reduce for rank 1's loader.
    ranks = _ranks_frame([
        {"rank": 0, "step_time_ms": 62.6, "communication_ms": 55.4, "data_loading_ms": 0.7, "cpu_ops_ms": 3.7},
        {"rank": 1, "step_time_ms": 59.8, "communication_ms": 8.7, "data_loading_ms": 42.1, "cpu_ops_ms": 7.0},
    ])
    b = rank_balance(ranks)
    assert b.straggler_rank == 1 and b.fastest_rank == 0
    assert b.wait_ms == pytest.approx((59.8 - 8.7) - (62.6 - 55.4))
    assert b.busy_ratio == pytest.approx(51.1 / 7.2)
    assert b.cause == "data_loading" and b.cause_ms == pytest.approx(41.4)
    assert 0.7 < b.wait_frac < 0.75


def test_balance_needs_two_ranks() -> None:
    b = rank_balance(_ranks_frame([{"rank": 0, "step_time_ms": 10.0, "communication_ms": 1.0}]))
    assert b.straggler_rank is None and b.busy_ratio is None
    assert rank_balance(pd.DataFrame()).straggler_rank is None
