"""A run's process tree read from its own /proc entries (advisor._proctree), not from every process's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from advisor import _proctree


def _fake_proc(root: Path, tree: dict[int, dict[int, list[int]]]) -> None:
    """Write ``/proc/PID/task/TID/children`` files: ``tree`` maps pid -> tid -> children."""
    for pid, tasks in tree.items():
        for tid, kids in tasks.items():
            task = root / str(pid) / "task" / str(tid)
            task.mkdir(parents=True)
            (task / "children").write_text("".join(f"{k} " for k in kids))


@pytest.fixture
def fake_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(_proctree, "PROC", str(tmp_path))
    return tmp_path


def test_the_walk_follows_every_threads_children_and_counts_threads(fake_proc: Path) -> None:
    # 1 has two threads, each with a child; 3 (a DataLoader worker, say) has a child of its own
    _fake_proc(fake_proc, {1: {1: [2], 7: [3]}, 2: {2: []}, 3: {3: [4], 8: [], 9: []}, 4: {4: []}, 50: {50: []}})
    assert _proctree.descendants(1) == {3: 3, 4: 1, 2: 1}
    assert _proctree.descendants(3) == {4: 1}
    assert _proctree.threads(3) == 3 and _proctree.threads(99) == 0


def test_a_child_gone_during_the_walk_is_left_out_and_a_gone_root_raises(fake_proc: Path) -> None:
    _fake_proc(fake_proc, {1: {1: [2, 5]}, 2: {2: []}})  # 5 is listed, but its entry is gone
    assert _proctree.descendants(1) == {2: 1}
    with pytest.raises(ProcessLookupError):
        _proctree.descendants(5)


def test_advisors_own_cpu_reads_its_tree_from_proc_where_the_kernel_lists_it(fake_proc, monkeypatch) -> None:
    from advisor.capture.sampler import _advisor_cpu_s

    me = os.getpid()
    _fake_proc(fake_proc, {me: {me: [20, 10]}, 20: {20: [21]}, 21: {21: []}, 10: {10: [11]}, 11: {11: []}})
    monkeypatch.setattr(_proctree, "supported", lambda: True)
    cpu = {me: 0.5, 20: 5.0, 21: 1.0, 10: 2.5, 11: 0.25}

    def process(pid: int | None = None) -> SimpleNamespace:
        pid = me if pid is None else pid
        return SimpleNamespace(pid=pid, cpu_times=lambda: (cpu[pid], 0.0))

    assert _advisor_cpu_s(SimpleNamespace(Process=process, Error=OSError), {20, 21}) == 0.5 + 2.5 + 0.25


_TREE = (
    "import subprocess, sys, threading, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(30)\"]); time.sleep(30)'])]\n"
    "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    "print('ready', flush=True); time.sleep(30)\n"
)


@pytest.mark.e2e
@pytest.mark.skipif(not _proctree.supported(), reason="the kernel has no /proc/PID/task/TID/children")
def test_the_walk_finds_what_psutil_finds_in_a_real_tree() -> None:
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while len(psutil.Process(proc.pid).children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        want = {p.pid: p.num_threads() for p in psutil.Process(proc.pid).children(recursive=True)}
        assert len(want) == 2
        assert _proctree.descendants(proc.pid) == want  # the same processes and thread counts
        assert _proctree.threads(proc.pid) == psutil.Process(proc.pid).num_threads() == 2
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
