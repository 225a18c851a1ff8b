"""The sampler sees short-lived children: DataLoader workers of a quick run live less than one CPU interval."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from advisor.capture.sampler import UtilSampler

# A parent that starts one child living ~0.6 s, then waits for it and lingers.
_PARENT = (
    "import subprocess, sys, time; time.sleep(0.2); "
    "subprocess.run([sys.executable, '-c', 'import time; time.sleep(0.6)']); time.sleep(0.2)"
)


@pytest.mark.e2e
def test_a_child_shorter_than_the_cpu_interval_is_counted() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _PARENT])
    sampler = UtilSampler(proc.pid, interval_s=30.0)  # one CPU sample only: the tree poll must see the child
    sampler.start()
    try:
        proc.wait(timeout=60)
    finally:
        time.sleep(0.05)
        cpu, _ = sampler.stop()
    assert cpu.max_processes == 2
    assert cpu.max_threads is not None and cpu.max_threads >= 2


class _Proc:
    def __init__(self, pid: int, cpu: float, children: tuple[_Proc, ...] = ()) -> None:
        self.pid, self._cpu, self._children = pid, cpu, children

    def cpu_times(self) -> tuple[float, float]:
        return (self._cpu, 0.0)

    def children(self, recursive: bool = False) -> list[_Proc]:
        out: list[_Proc] = []
        for child in self._children:
            out += [child, *child.children(recursive=True)] if recursive else [child]
        return out


def test_advisors_own_processes_are_not_other_processes_but_the_runs_tree_is_left_to_it(monkeypatch) -> None:
    from types import SimpleNamespace

    from advisor import _proctree
    from advisor.capture.sampler import _advisor_cpu_s

    monkeypatch.setattr(_proctree, "supported", lambda: False)  # psutil's walk (tests/capture/test_proctree.py: /proc's)

    run = _Proc(20, 5.0, (_Proc(21, 1.0),))  # the run and its DataLoader worker: the tree's own figure
    server = _Proc(10, 2.5, (_Proc(11, 0.25),))  # the warm-start server importing, and a run it forked
    me = _Proc(1, 0.5, (run, server))
    fake = SimpleNamespace(Process=lambda: me, Error=OSError)
    assert _advisor_cpu_s(fake, {20, 21}) == 0.5 + 2.5 + 0.25

    def broken():  # type: ignore[no-untyped-def]
        raise OSError("no /proc")

    assert _advisor_cpu_s(SimpleNamespace(Process=broken, Error=OSError), set()) is None


_BUSY = "import time\nt = time.time()\nwhile time.time() - t < 4: pass"


def _sampled_beside(busy: list[list[str]], start_new_session: bool = False) -> float:
    """other_util_frac of an idle run sampled while ``busy`` commands burn CPU (ours, or daemons when detached)."""
    import contextlib
    import os

    pids: list[int] = []
    for cmd in busy:
        if start_new_session:  # a daemon (double fork): not a descendant of this process, as another user's job
            out = subprocess.run([sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen(sys.argv[1:], "
                                  "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)",
                                  *cmd], capture_output=True, text=True, check=True)
            pids.append(int(out.stdout.strip()))
        else:
            pids.append(subprocess.Popen(cmd).pid)
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"])
    sampler = UtilSampler(run.pid, interval_s=0.5)
    sampler.start()
    try:
        run.wait(timeout=60)
    finally:
        cpu, _ = sampler.stop()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    assert cpu.other_util_frac is not None
    return cpu.other_util_frac


@pytest.mark.e2e
def test_a_busy_process_that_is_not_advisors_is_another_process() -> None:
    import os

    other = _sampled_beside([[sys.executable, "-c", _BUSY]], start_new_session=True)
    assert other >= 0.6 / (os.cpu_count() or 1)  # its core (more when the machine is busier: never less)


@pytest.mark.e2e
def test_advisors_own_busy_processes_are_not_other_processes() -> None:
    import os

    # three busy loops of ours (the warm-start server importing, say) take the cores from
    # whatever else runs here; counted as others they read as three cores
    ncpu = os.cpu_count() or 1
    other = _sampled_beside([[sys.executable, "-c", _BUSY]] * 3)
    assert other < 0.5 * min(3, ncpu) / ncpu
