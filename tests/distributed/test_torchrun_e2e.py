"""End to end: 2-rank DDP (gloo, CPU) through torchrun under capture, then metrics over the ranks.

Each run takes about 15-20 s on a loaded 2-core machine (most of it torch's import in three
processes and torchrun's rendezvous), so one slowed run serves several tests.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pandas as pd
import pytest
from proc_helpers import pids_with_args

from advisor.capture.model import RunCapture, RunSpec, RunStatus
from advisor.distributed.balance import rank_balance
from advisor.distributed.launch import capture_distributed
from advisor.metrics.compute import analyze_path, compute_metrics
from advisor.trace.load import load_traces

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ddp_gloo.py"
SLOW_MS = 150
LIMIT_S = 110.0  # under the 120 s job timeout: a hang is caught, a loaded CI machine is not (15-20 s quiet)


def _spec(out: Path, *args: str) -> RunSpec:
    return RunSpec(
        script=EXAMPLE,
        args=("--steps", "40", *args),
        out_dir=out,
        warmup_steps=1,
        timed_steps=3,
        profiled_steps=2,
        nproc_per_node=2,
        quiet=True,
        timeout_s=120,
    )


def _leftovers(run_dir: Path) -> list[int]:
    """Processes still running that were started for this run (their command names its config)."""
    return pids_with_args(str(run_dir / "config.json"))


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunCapture, float, list]:
    """Rank 1 sleeps 150 ms per batch in its DataLoader.

    Large against the noise on purpose: with 40 ms, CI at load ~2 once stretched rank 0's own
    CPU work (data 12 ms, ops 20 ms) until both ranks spent the same 51-52 ms in the all-reduce.
    """
    out = tmp_path_factory.mktemp("ddp") / "run"
    events: list = []
    t0 = time.perf_counter()
    cap = capture_distributed(_spec(out, "--slow-rank", "1", "--slow-ms", str(SLOW_MS)), progress=events.append)
    return cap, time.perf_counter() - t0, events


def test_every_rank_writes_a_run_dir_and_the_job_merges_them(slow_run) -> None:
    cap, wall, events = slow_run
    assert wall < LIMIT_S
    assert cap.status == RunStatus.STOPPED, (cap.error, cap.notes)
    assert cap.exit_code == 0
    assert cap.ranks == ("rank0", "rank1")
    run_dir = Path(cap.run_dir)
    ranks = []
    for name in cap.ranks:
        rank = RunCapture.load(run_dir / name)  # a rank folder is a run directory of its own
        ranks.append(rank)
        assert rank.status == RunStatus.STOPPED
        assert rank.profiled_steps == 2 and rank.timed_steps == 3
        assert len(rank.trace_files) == 1 and (run_dir / name / rank.trace_files[0]).is_file()
        assert (run_dir / name / "stderr.log").is_file()
        trace_file = run_dir / name / rank.trace_files[0]
        # traces are stored gzip-compressed since main's 203999a (older runs: plain .json)
        raw = gzip.decompress(trace_file.read_bytes()) if trace_file.name.endswith(".gz") else trace_file.read_bytes()
        trace = json.loads(raw)
        assert trace["distributedInfo"]["rank"] == int(name[4:])
        assert trace["distributedInfo"]["backend"] == "gloo"
    assert cap.trace_files == ()  # each rank's capture lists its own
    assert cap.pstats_file == "rank0/profile.pstats" and (run_dir / cap.pstats_file).is_file()
    # the job's timed figures: slowest rank's step, and the slowest rank's throughput x the ranks
    assert cap.timed.step_times_ms == tuple(
        max(a, b) for a, b in zip(ranks[0].timed.step_times_ms, ranks[1].timed.step_times_ms, strict=True)
    )
    assert cap.timed.samples_per_s == pytest.approx(len(ranks) * min(r.timed.samples_per_s for r in ranks))
    assert cap.timed.samples == (32, 32, 32)
    # the job's phases: the slowest rank's each, plus the parent's own (torchrun, interpreters)
    assert cap.phases_s["timed"] == max(r.phases_s["timed"] for r in ranks)
    assert 0 < sum(cap.phases_s.values()) <= cap.wall_s + 1e-3 and "process" in cap.phases_s
    assert RunCapture.load(run_dir) == cap
    assert events[0].phase == "starting" and events[-1].phase == "done" and events[-1].message == RunStatus.STOPPED


def test_gloo_collectives_count_as_communication(slow_run) -> None:
    cap, _, _ = slow_run
    run_dir = Path(cap.run_dir)
    files = [run_dir / n / f for n in cap.ranks for f in RunCapture.load(run_dir / n).trace_files]
    traces = [t for f in files for t in load_traces(f)]
    assert sorted(t.rank for t in traces) == [0, 1]
    for t in traces:
        names = set(t.events["name"].astype(str))
        # what torch 2.13 writes for a DDP gradient all-reduce on gloo
        assert "c10d::allreduce_" in names and "gloo:all_reduce" in names
    m = compute_metrics(traces, capture=cap)
    assert m.summary["rank_count"] == 2
    assert (m.ranks["comm_time_ms"] > 0).all()
    assert m.summary["communication_frac"] > 0.1
    # CPU overlap (the metrics' comm_overlap_frac on gloo): rank 0 mostly waits in the
    # all-reduce for rank 1 (no compute to hide it)
    per_step = m.steps.assign(overlap_ms=m.steps["comm_overlap_frac"].fillna(0.0) * m.steps["comm_time_ms"])
    assert ((per_step["overlap_ms"] >= 0) & (per_step["overlap_ms"] <= per_step["comm_time_ms"] + 1e-6)).all()
    by_rank = per_step.groupby("rank")
    overlap = pd.DataFrame({
        "comm_ms": by_rank["comm_time_ms"].median(),
        "overlap_frac": by_rank["overlap_ms"].sum() / by_rank["comm_time_ms"].sum(),
    })
    assert m.summary["comm_overlap_frac"] is not None
    assert overlap.loc[0, "comm_ms"] > overlap.loc[1, "comm_ms"]
    # NOTE: not a fixed share: under load rank 0's own CPU ops stretch into the wait (once
    # measured 0.35+ at load 12), and then its share can pass the other rank's, both near 0.07
    # (make test, 2026-11-27: 0.070 against 0.064). What holds is that the waiting rank's
    # communication is the exposed one: its time not overlapped is the larger.
    assert overlap.loc[0, "overlap_frac"] < 0.6
    exposed = overlap["comm_ms"] * (1 - overlap["overlap_frac"])
    assert exposed.loc[0] > exposed.loc[1]


def test_slowed_rank_is_named_the_straggler(slow_run) -> None:
    cap, _, _ = slow_run
    m = analyze_path(cap.run_dir)  # what `advisor analyze RUN_DIR` computes
    print(m.ranks.to_string())  # shown when an assertion fails
    ranks = m.ranks.set_index("rank")
    # rank 1 loads 150 ms per batch; rank 0 waits for it inside the all-reduce
    # NOTE: the injected delay is bounded on the loader's wait itself; the exclusive breakdown
    # gives a share of that wait to the communication beside it, which grows with the load (rank 1:
    # a 151 ms wait, 117 ms of it data loading, beside a parallel test run)
    assert ranks.loc[1, "dataloader_wait_ms"] > 0.8 * SLOW_MS > ranks.loc[0, "dataloader_wait_ms"]
    assert ranks.loc[1, "data_loading_ms"] > 0.5 * SLOW_MS > ranks.loc[0, "data_loading_ms"]
    assert ranks.loc[0, "communication_ms"] > ranks.loc[1, "communication_ms"]
    assert m.summary["comm_max_rank"] == 0 and m.summary["comm_min_rank"] == 1
    # NOTE: the ratio of the two ranks' waits, not a fixed bar: rank 0's wait grows with the
    # machine's load (36 ms a step beside a parallel test run, 2 profiled steps), rank 1's delay does not.
    waits = ranks["dataloader_wait_ms"]
    assert m.summary["data_loading_imbalance_ratio"] == pytest.approx(waits.loc[1] / waits.loc[0])
    assert m.summary["data_loading_imbalance_ratio"] > 1
    balance = rank_balance(m.ranks)
    assert balance.straggler_rank == 1 and balance.fastest_rank == 0
    assert balance.cause == "data_loading"
    assert 0.5 * SLOW_MS < balance.wait_ms < 3 * SLOW_MS  # about the delay injected per batch; load adds to it
    # where the time goes is shown for the rank the job waits for: its loader line holds the delay
    # (rank 0's holds a fraction of a millisecond)
    assert m.focus_rank == 1
    loader = [loc for loc in m.locations if loc.kind == "data_loading"]
    assert loader and max(loc.time_ms or 0.0 for loc in loader) > 0.8 * SLOW_MS, loader


@pytest.mark.slow  # NOTE: 8 s; a job's runs and their merge are in make test (test_every_rank_writes_a_run_dir_...)
def test_failing_rank_stops_the_job_and_is_named(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    cap = capture_distributed(_spec(tmp_path / "run", "--fail-rank", "1", "--fail-step", "3"))
    assert time.perf_counter() - t0 < LIMIT_S
    assert cap.status == RunStatus.CRASHED
    assert cap.error is not None
    assert cap.error.type == "RuntimeError"
    assert cap.error.message.startswith("rank 1: ")
    assert cap.error.log == "rank1/stderr.log"
    assert "failed on purpose" in (Path(cap.run_dir) / cap.error.log).read_text()
    assert cap.exit_code not in (0, None)
    assert RunCapture.load(Path(cap.run_dir) / "rank1").status == RunStatus.CRASHED
    assert _leftovers(Path(cap.run_dir)) == []


def test_dlrm_per_rank_communication_imbalance(shared_traces: Path) -> None:
    from click.testing import CliRunner

    from advisor.cli.main import cli

    folder = shared_traces / "param" / "dlrm_kineto"
    result = CliRunner().invoke(cli, ["analyze", str(folder), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    metrics = report["summary"]
    assert metrics["rank_count"] == 8
    assert metrics["comm_imbalance_ratio"] > 5  # 11.3 ms of collectives on rank 1, 1.7 ms on rank 7
    assert metrics["comm_max_rank"] == 1 and metrics["comm_min_rank"] == 7
    assert any(f["code"] == "CM003" for f in report["findings"])
    m = analyze_path(folder)
    balance = rank_balance(m.ranks)
    assert balance.straggler_rank == 5 and balance.fastest_rank == 1


@pytest.mark.slow  # 11 s: make test-all (make test stays under 5 minutes)
def test_rank_that_does_not_stop_is_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.distributed import launch

    monkeypatch.setattr(launch, "STOP_GRACE_S", 3.0)
    monkeypatch.setattr(launch, "TERM_GRACE_S", 5.0)
    spec = RunSpec(
        script=REPO / "tests" / "distributed" / "scripts" / "stall.py",
        out_dir=tmp_path / "run",
        warmup_steps=1,
        timed_steps=2,
        profiled_steps=1,
        nproc_per_node=2,
        quiet=True,
    )
    t0 = time.perf_counter()
    cap = capture_distributed(spec)
    assert time.perf_counter() - t0 < LIMIT_S
    assert cap.status == "timeout"
    assert cap.error is not None and cap.error.type == "RankStalled"
    assert "rank(s) 1 " in cap.error.message
    assert RunCapture.load(Path(cap.run_dir) / "rank0").status == RunStatus.STOPPED
    assert _leftovers(Path(cap.run_dir)) == []


def test_several_nodes_need_a_rendezvous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.errors import UsageError

    monkeypatch.delenv("PET_RDZV_ENDPOINT", raising=False)
    monkeypatch.delenv("PET_MASTER_ADDR", raising=False)
    spec = RunSpec(script=EXAMPLE, out_dir=tmp_path / "run", nproc_per_node=2, nnodes=2)
    with pytest.raises(UsageError, match="PET_RDZV_ENDPOINT"):
        capture_distributed(spec)
    assert not (tmp_path / "run").exists()  # refused before anything ran


@pytest.mark.slow
def test_fix_trials_run_in_every_rank(tmp_path: Path) -> None:
    """The trial loop with capture_distributed as its runner: throughput is the job's."""
    from advisor.engine.model import FixRef
    from advisor.fixes.loop import run_trials

    spec = RunSpec(
        script=EXAMPLE,
        args=("--steps", "200", "--slow-rank", "1", "--slow-ms", "40"),
        out_dir=tmp_path / "run",
        warmup_steps=2,
        timed_steps=10,
        profiled_steps=0,
        nproc_per_node=2,
        timeout_s=120,
    )
    out = run_trials(
        spec, [FixRef("dataloader_workers", "safe")], only=["dataloader_workers"],
        repeats=1, max_repeats=1, runner=capture_distributed,
    )
    (trial,) = out.trials
    # a failed run leaves no rate: say why (make test-all once saw None here at load ~4)
    assert trial.baseline_samples_per_s is not None, (trial.verdict, trial.reason, out.notes)
    # 2 ranks x 32 samples per step, each step at least the slow rank's 40 ms loader: at most
    # 1,600 samples/s (about 1,000 measured quiet); no lower bound, which would be the load's
    assert 0 < trial.baseline_samples_per_s < 1600
    # workers load the slow rank's batches in the background: the job speeds up
    assert trial.verdict == "improved" and trial.speedup > 1.15
    assert trial.loss_max_rel_diff is not None and trial.loss_max_rel_diff < 1e-3
    for rank_dir in sorted((tmp_path / "run" / "trials").glob("*/rank1")):
        assert RunCapture.load(rank_dir).fixes == RunCapture.load(rank_dir.parent).fixes


def test_dataparallel_is_flagged(tmp_path: Path, slow_run) -> None:
    """torch.nn.DataParallel shows in the profiler's Python stacks; DDP does not set the flag."""
    from advisor.capture.run import capture

    script = REPO / "tests" / "distributed" / "scripts" / "dataparallel.py"
    spec = RunSpec(script=script, out_dir=tmp_path / "dp", warmup_steps=1, timed_steps=2, profiled_steps=2, quiet=True)
    cap = capture(spec)
    assert cap.status == RunStatus.STOPPED, cap.error
    assert analyze_path(cap.run_dir).summary["dataparallel_flag"] == 1
    assert analyze_path(slow_run[0].run_dir).summary["dataparallel_flag"] == 0


@pytest.mark.slow  # 17 s: two launches, each starting its own ranks
def test_two_nodes_on_localhost(tmp_path: Path) -> None:
    """--nnodes 2: two launches (one per "node") meet through a c10d rendezvous from PET_* vars."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def node(i: int) -> RunCapture:
        env = {
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ID": "advisor-test",
            "PET_RDZV_CONF": f"is_host={int(i == 0)}",
        }
        spec = RunSpec(
            script=EXAMPLE, args=("--steps", "40"), out_dir=tmp_path / f"node{i}", warmup_steps=1,
            timed_steps=3, profiled_steps=2, nproc_per_node=1, nnodes=2, env=env, quiet=True, timeout_s=120,
        )
        return capture_distributed(spec)

    with ThreadPoolExecutor(2) as pool:
        caps = list(pool.map(node, (0, 1)))
    assert [c.status for c in caps] == [RunStatus.STOPPED, RunStatus.STOPPED]
    assert sorted(r for c in caps for r in c.ranks) == ["rank0", "rank1"]  # one rank per node
    for c in caps:
        (name,) = c.ranks
        rank = RunCapture.load(Path(c.run_dir) / name)
        assert rank.trace_files and (Path(c.run_dir) / name / "stderr.log").is_file()
        assert any("ran on other nodes" in n for n in c.notes)
