"""Rank-parallel analysis: ``--jobs N`` gives the report one process gives, and only digests travel.

The job is the project's synthetic DLRM-shaped one (tests/metrics/tracegen.py): 4 ranks on one
clock, rank 2 the straggler. Every test compares against :func:`compute_metrics` over
:func:`load_traces` (all ranks in one process, as ``advisor analyze`` did before ``--jobs``).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "metrics"))
import tracegen  # noqa: E402

from advisor.api import analyze_report  # noqa: E402
from advisor.distributed.parallel import analyze_files, analyze_job  # noqa: E402
from advisor.errors import TraceError  # noqa: E402
from advisor.metrics.compute import compute_metrics, merge_digests  # noqa: E402
from advisor.trace.load import find_trace_files, load_traces  # noqa: E402

pytestmark = pytest.mark.e2e

STRAGGLER = 2
RANKS = 4


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dlrm") / "job"
    tracegen.write_dlrm_job(folder, world_size=RANKS, steps=1, straggler=STRAGGLER, small_ops=20)
    return folder


@pytest.fixture(scope="module")
def reference(job: Path):
    """All ranks loaded and analysed in one process."""
    return compute_metrics(load_traces(job), source=str(job))


def _same_metrics(a, b) -> None:
    assert a.summary == b.summary
    pd.testing.assert_frame_equal(a.ranks, b.ranks)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert a.locations == b.locations and a.notes == b.notes and a.extra == b.extra


@pytest.mark.parametrize("jobs", [1, 2])
def test_jobs_give_the_metrics_of_one_process(job: Path, reference, jobs: int) -> None:
    digests, focus = analyze_job(find_trace_files(job), jobs=jobs)
    merged = merge_digests(digests, source=str(job), focus=focus)
    _same_metrics(reference, merged)
    assert merged.summary["straggler_rank"] == STRAGGLER
    # the tables and locations are the straggler's, in both paths
    assert focus is not None and focus.rank == STRAGGLER and merged.focus_rank == STRAGGLER
    assert any(f"rank {STRAGGLER}'s, the straggler" in n for n in merged.notes)
    assert merged.summary["rank_count"] == RANKS
    assert len(merged.extra["collectives"]) == 2  # all_to_all and all_reduce matched across ranks


def test_only_a_small_digest_travels_back(tmp_path: Path) -> None:
    # three steps: the step rows grow with the steps, the event table with the events of each
    tracegen.write_dlrm_job(tmp_path / "job", world_size=RANKS, steps=3, straggler=STRAGGLER, small_ops=20)
    files = find_trace_files(tmp_path / "job")
    digests = analyze_files(files[:2], jobs=1)
    other = digests[1]  # not the lead: no report tables, no timeline
    assert other.lead is None
    held = int(load_traces(files[1])[0].events.memory_usage(deep=True).sum())
    sent = len(pickle.dumps(other))
    # a digest is the step rows, collective calls and run values, not the event table
    assert sent < held / 20, (sent, held)


def test_lead_is_the_lowest_rank_even_when_its_file_is_not_first(job: Path, tmp_path: Path) -> None:
    """File names that sort rank 1 first: the same metrics as one process (tables: the straggler's)."""
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for f in find_trace_files(job):
        rank = int(f.name.removeprefix("worker").split(".")[0])
        shutil.copy(f, renamed / f"r{(rank + 3) % RANKS}_{f.name}")
    reference = compute_metrics(load_traces(renamed), source="x")
    digests, focus = analyze_job(find_trace_files(renamed), jobs=2)
    merged = merge_digests(digests, source="x", focus=focus)
    _same_metrics(reference, merged)


def test_files_claiming_one_rank_are_numbered_by_position(tmp_path: Path) -> None:
    src = next(iter(sorted((Path(__file__).resolve().parents[1] / "data" / "gpu_small").glob("*.json.gz"))))
    for i in range(3):
        shutil.copy(src, tmp_path / f"copy{i}.pt.trace.json.gz")
    digests = analyze_files(find_trace_files(tmp_path), jobs=2)
    assert [d.rank for d in digests] == [0, 1, 2]
    assert sorted(set(pd.concat([d.steps for d in digests])["rank"])) == [0, 1, 2]
    _same_metrics(compute_metrics(load_traces(tmp_path), source="x"), merge_digests(digests, source="x"))


def test_a_broken_rank_file_is_named_and_the_workers_end(job: Path, tmp_path: Path) -> None:
    import multiprocessing

    broken = tmp_path / "broken"
    shutil.copytree(job, broken)
    (broken / "worker3.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(TraceError, match="worker3"):
        analyze_files(find_trace_files(broken), jobs=2)
    assert multiprocessing.active_children() == []


def _ignore_sigterm(marker: str) -> None:
    """A worker task that ignores SIGTERM, says so, and never ends on its own."""
    import os
    import signal
    import time

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(marker, str(os.getpid())).write_text("ready")
    while True:
        time.sleep(0.1)


def test_workers_that_ignore_sigterm_are_killed_and_reaped(tmp_path: Path) -> None:
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    from advisor.distributed import parallel

    pool = ProcessPoolExecutor(max_workers=2, mp_context=parallel._context(), initializer=parallel._worker_init)
    for _ in range(2):
        pool.submit(_ignore_sigterm, str(tmp_path))
    deadline = time.monotonic() + 120
    while len(list(tmp_path.iterdir())) < 2:  # both workers run the task, SIGTERM ignored
        assert time.monotonic() < deadline, "the workers never started the task"
        time.sleep(0.05)
    parallel._end_pool(pool, grace=0.5)
    assert multiprocessing.active_children() == []
    for pid in (int(f.name) for f in tmp_path.iterdir()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_report_json_is_the_same_at_any_jobs(job: Path) -> None:
    from advisor.report.render import render

    def as_json(jobs: int) -> dict:
        data = json.loads(render(analyze_report(job, jobs=jobs), "json"))
        data.pop("created", None)
        return data

    one = as_json(1)
    assert one == as_json(2)
    assert one["timeline"], "the lead rank's timeline is in the report"
    assert one["focus_rank"] == STRAGGLER  # its tables and timeline are the straggler's


def test_cli_jobs_must_be_positive(job: Path) -> None:
    from click.testing import CliRunner

    from advisor.cli.main import cli

    out = CliRunner().invoke(cli, ["analyze", str(job), "--jobs", "0"])
    assert out.exit_code == 2 and "--jobs" in out.output


def test_a_bad_selection_read_while_the_workers_run_stops_them(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import multiprocessing

    from tests.cli_helpers import invoke, one_line_error

    line = one_line_error(*invoke(capsys, "analyze", str(job), "--jobs", "2", "--select", "ZZ999")[::2])
    assert "unknown rule code 'ZZ999'" in line
    assert multiprocessing.active_children() == []  # the workers started before the selection was read
