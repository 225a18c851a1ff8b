"""Reading a multi-node job back from its node folders, without starting anything.

Two synthetic node run directories (as ``advisor diagnose --nnodes 2`` lays them out: ``node<R>/``
with ``node.json``, ``capture.json`` and ``rank<N>/`` folders) hold the four ranks of a DLRM-shaped
job (tests/metrics/tracegen.py) whose rank 3 straggles; rank 2 (on node 1) failed first in the
second job. ``--jobs 1`` keeps everything in this process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "metrics"))
import tracegen  # noqa: E402

from advisor.api import analyze_report  # noqa: E402
from advisor.capture.model import (
    RunCapture,
    # noqa: E402,
    RunStatus,
    ScriptError,
    TimedPhase,
)
from advisor.errors import InputError  # noqa: E402

NODES = {0: (0, 1), 1: (2, 3)}


def _job(root: Path, failing: int | None = None) -> Path:
    traces = tracegen.write_dlrm_job(root / "_traces", world_size=4, steps=1, straggler=3, small_ops=10)
    for node, ranks in NODES.items():
        node_dir = root / "job" / f"node{node}"
        for rank in ranks:
            folder = node_dir / f"rank{rank}"
            (folder / "traces").mkdir(parents=True)
            traces[rank].rename(folder / "traces" / traces[rank].name)
            failed = rank == failing
            RunCapture(
                run_dir=str(folder), script="train.py", steps_seen=5,
                status=RunStatus.CRASHED if failed else RunStatus.STOPPED,
                error=ScriptError(type="RuntimeError", message="failed on purpose", step=3) if failed else None,
                timed=TimedPhase(step_times_ms=(10.0, 11.0), samples=(32, 32), samples_per_s=3000.0),
                trace_files=(f"traces/{traces[rank].name}",),
            ).save(folder)
            (folder / "child.json").write_text(json.dumps({"finished": True}))
        RunCapture(run_dir=str(node_dir), script="train.py", steps_seen=5, ranks=tuple(f"rank{r}" for r in ranks),
                   notes=("2 rank(s) ran on other nodes: their folders are on those nodes",)).save(node_dir)
        (node_dir / "node.json").write_text(json.dumps({"node_rank": node, "hostname": f"host{node}",
                                                        "ranks": list(ranks)}))
    return root / "job"


def test_job_folder_and_node_folders_give_one_job_with_nodes_named(tmp_path: Path) -> None:
    job = _job(tmp_path)
    for report in (analyze_report(job, jobs=1), analyze_report([job / "node0", job / "node1"], jobs=1)):
        assert {r["rank"]: r["node"] for r in report.ranks} == {
            0: "node 0 (host0)", 1: "node 0 (host0)", 2: "node 1 (host1)", 3: "node 1 (host1)"}
        assert any("the straggler, rank 3, ran on node 1 (host1)" in n for n in report.notes)
        assert not any("ran on other nodes" in n for n in report.notes)
        # the job's throughput is every rank's, not one node's
        assert report.run.samples_per_s == pytest.approx(4 * 3000.0)


def test_the_rank_that_failed_first_is_named_with_its_node(tmp_path: Path) -> None:
    report = analyze_report(_job(tmp_path, failing=2), jobs=1)
    assert any("rank 2 on node 1 (host1) failed first" in n for n in report.notes), report.notes
    assert "rank 2" in str(report.run.error)


def test_a_node_given_twice_is_refused(tmp_path: Path) -> None:
    job = _job(tmp_path)
    with pytest.raises(InputError, match="rank 0 is in both"):
        analyze_report([job / "node0", job / "node0"], jobs=1)
