"""ProcessTree.memory_bytes: what a process tree would hold on its own machine, shared pages counted once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from advisor._proc import ProcessTree

MIB = 2**20

# A parent touches 96 MiB, then forks two children that only sleep: the pages stay shared
# (copy on write), so the tree holds ~96 MiB while each process's RSS shows all of it.
FORKING = """
import os, sys, time
buf = bytes(range(256)) * (96 * 2**20 // 256)
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.e2e
@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"), reason="needs Linux smaps_rollup (USS)")
def test_pages_shared_by_forked_children_are_counted_once():
    proc = subprocess.Popen([sys.executable, "-c", FORKING], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        tree = ProcessTree(proc.pid)
        deadline = time.monotonic() + 10
        while len(tree.seen) < 2 and time.monotonic() < deadline:
            tree.refresh()
        assert len(tree.seen) == 2
        procs = [psutil.Process(proc.pid), *tree.seen.values()]
        rss = sum(p.memory_info().rss for p in procs)
        held = tree.memory_bytes()
        # RSS counts the 96 MiB three times; the tree holds it once: the parent's RSS, plus what
        # each child does not share with it (a few pages of its own)
        assert rss > 3 * 96 * MIB
        assert 96 * MIB < held < rss - 150 * MIB, (held / MIB, rss / MIB)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.e2e
def test_a_lone_process_counts_all_it_maps_even_pages_another_process_shares():
    # the root is measured as it would run alone: its RSS, whatever it shares outside the tree
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time; print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        tree = ProcessTree(proc.pid)
        rss = psutil.Process(proc.pid).memory_info().rss
        assert abs(tree.memory_bytes() - rss) < 4 * MIB
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.e2e
def test_a_tree_whose_root_is_gone_holds_nothing():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert ProcessTree(proc.pid).memory_bytes() == 0


@pytest.mark.e2e
@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"), reason="needs Linux smaps_rollup (USS)")
@pytest.mark.parametrize(("budget_mib", "ended_by"), [(200, "timeout"), (64, "memory")])
def test_the_memory_budget_watchdog_counts_shared_pages_once(budget_mib, ended_by):
    from advisor.capture.run import _wait

    # RSS sums to ~3 x 96 MiB: over 200 MiB; the tree holds ~96 MiB and an interpreter: under
    proc = subprocess.Popen([sys.executable, "-c", FORKING], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        tree = ProcessTree(proc.pid)
        got = _wait(proc, 1.0, time.perf_counter(), tree, memory_budget=budget_mib * MIB)
        assert got == ended_by
        if ended_by == "memory":
            assert tree.over_budget is not None and tree.over_budget > budget_mib * MIB
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
