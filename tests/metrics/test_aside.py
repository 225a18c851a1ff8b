"""A side branch of the analysis in a forked child (advisor.metrics.aside): the same result, or computed here."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import advisor.metrics.aside as aside_mod
from advisor.metrics.aside import Aside, aside, can_fork
from advisor.metrics.digest import RankDigest, digest, digest_trace
from advisor.metrics.steps import analyze_trace
from advisor.trace.load import load_traces

DATA = Path(__file__).resolve().parents[1] / "data"

needs_fork = pytest.mark.skipif(not can_fork(), reason="needs os.fork and a second core")


@pytest.fixture(autouse=True)
def _no_other_threads():
    """A fork needs this process single-threaded: name the thread an earlier test left, rather than fail obscurely.

    A thread still ending (a reader an earlier test's pipe released) gets a few seconds first:
    CI once met one here, "Thread-10", in a run whose other 1844 tests passed.
    """
    deadline = time.monotonic() + 5.0
    for t in threading.enumerate():
        if t is not threading.main_thread():
            t.join(max(0.0, deadline - time.monotonic()))
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others and not can_fork():
        pytest.fail(f"a test before this one left a thread running in this process ({', '.join(others)}): "
                    "aside() does not fork beside a thread")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.e2e
@needs_fork
def test_the_result_comes_from_another_process():
    with aside(lambda: (os.getpid(), [1.5, float("nan"), "x"]), aside_mod.MIN_ROWS) as branch:
        pid = branch.pid
        assert pid
        where, value = branch.result()
    assert where == pid != os.getpid()
    assert value[0] == 1.5 and value[1] != value[1] and value[2] == "x"
    assert _gone(pid)


@pytest.mark.e2e
@needs_fork
def test_a_child_that_fails_leaves_the_work_to_this_process():
    parent = os.getpid()

    def work() -> int:
        if os.getpid() != parent:
            raise ValueError("only in the child")
        return 7

    with aside(work, aside_mod.MIN_ROWS) as branch:
        assert branch.pid
        assert branch.result() == 7


@pytest.mark.e2e
@needs_fork
def test_a_child_whose_result_is_not_taken_is_ended_and_reaped():
    with pytest.raises(KeyError), aside(lambda: time.sleep(60), aside_mod.MIN_ROWS) as branch:
        pid = branch.pid
        raise KeyError("an error here")
    assert _gone(pid)


def test_without_a_fork_the_work_runs_here_when_its_result_is_taken(monkeypatch):
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # another thread: no fork
    calls: list[int] = []
    with aside(lambda: calls.append(os.getpid()) or 3, aside_mod.MIN_ROWS) as branch:
        assert not branch.pid and not calls
        assert branch.result() == 3
    assert calls == [os.getpid()]


def test_no_fork_inside_a_single_core_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert not aside_mod.can_fork()
    assert Aside(lambda: 1).result() == 1


def test_a_small_table_is_not_worth_a_fork():
    with aside(lambda: os.getpid(), aside_mod.MIN_ROWS - 1) as branch:  # the guard refuses os.fork here
        assert not branch.pid and branch.result() == os.getpid()


@pytest.mark.e2e
@needs_fork
def test_the_analysis_is_the_same_with_its_branches_computed_aside(shared_traces, monkeypatch):
    path = next((shared_traces / "kineto").rglob("*.json.gz"))
    (trace,) = load_traces(path)
    forks: list[int] = []
    fork = os.fork

    def recorded() -> int:
        pid = fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recorded)
    analysis = analyze_trace(trace)
    here = digest(analysis, lead=True)
    assert not forks  # a small trace: no fork
    monkeypatch.setattr(aside_mod, "MIN_ROWS", 0)
    analysed = analyze_trace(trace)
    assert len(forks) == 1  # the breakdown
    there = digest(analysed, lead=True)
    assert len(forks) == 2  # the lead's tables
    pd.testing.assert_frame_equal(analysed.steps, analysis.steps)
    assert repr(there.view.tables) == repr(here.view.tables) and there.view.tables
    assert repr(there.lead) == repr(here.lead) and repr(there.view.run) == repr(here.view.run)
    assert list(there.view.tables) == list(here.view.tables)  # the same order of tables
    assert there.view.steps.equals(here.view.steps) and repr(there.view.locations) == repr(here.view.locations)
    early = digest_trace(trace, lead=True)
    assert len(forks) == 4  # the GPU-time views and the lead's branch, from the outline; the breakdown here
    _assert_same(early, here)


def _assert_same(got: RankDigest, want: RankDigest) -> None:
    pd.testing.assert_frame_equal(got.steps, want.steps)
    pd.testing.assert_frame_equal(got.view.steps, want.view.steps)
    assert list(got.view.tables) == list(want.view.tables)  # the same order of tables
    assert repr(got.view.tables) == repr(want.view.tables)
    assert repr(got.view.locations) == repr(want.view.locations) and got.view.notes == want.view.notes
    assert repr(got.view.run) == repr(want.view.run) and repr(got.lead) == repr(want.lead)
    assert repr(got.run) == repr(want.run) and got.notes == want.notes


@pytest.mark.parametrize("name", ["cpu_small", "gpu_small"])
@pytest.mark.parametrize("lead", [True, False])
def test_the_outline_gives_the_views_and_the_lead_tables_what_the_whole_analysis_does(name, lead):
    """digest_trace starts the GPU-time views and the lead's tables from the outline: they must not read a step column."""
    (trace,) = load_traces(DATA / name / "worker0.pt.trace.json.gz")
    want = digest(analyze_trace(trace), lead=lead, timeline=lead)
    got = digest_trace(trace, lead=lead, timeline=lead)
    _assert_same(got, want)
    if lead:
        assert got.view.tables and got.lead is not None and got.lead.timeline
