"""spare: how many of this process's cores other processes keep busy (the early server's condition)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import namedtuple

import pytest

from advisor.capture import spare

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def _clock(steps: list[list[float]]):  # type: ignore[no-untyped-def]
    """per_cpu() answering one listed reading per call: busy seconds per CPU (idle makes up the rest)."""
    readings = iter(steps)

    def per_cpu():  # type: ignore[no-untyped-def]
        return [Times(b, 0, 0, 100 - b, 0, 0, 0, 0, 0, 0) for b in next(readings)]

    return per_cpu


def test_other_processes_busy_time_is_the_cores_busy_less_our_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spare, "cores", lambda: [0, 1])
    own = iter([(1.0, 0.0), (1.0, 0.0)])  # this process used nothing
    monkeypatch.setattr(spare.os, "times", lambda: next(own))
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(spare.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(spare.time, "sleep", lambda s: None)
    assert spare.busy_elsewhere(1.0, _clock([[5.0, 3.0], [6.0, 3.0]])) == pytest.approx(1.0)  # one core busy


def test_our_own_cpu_time_and_cpus_we_may_not_use_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spare, "cores", lambda: [1])
    own = iter([(1.0, 0.0), (1.5, 0.0)])  # we used half a core
    monkeypatch.setattr(spare.os, "times", lambda: next(own))
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(spare.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(spare.time, "sleep", lambda s: None)
    # CPU 0 (not ours) was busy throughout; on CPU 1 only we ran
    assert spare.busy_elsewhere(1.0, _clock([[0.0, 0.0], [1.0, 0.5]])) == pytest.approx(0.0)


def test_an_unreadable_machine_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken():  # type: ignore[no-untyped-def]
        raise OSError("no /proc/stat")

    monkeypatch.setattr(spare.time, "sleep", lambda s: None)
    assert spare.busy_elsewhere(0.1, broken) is None


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat through psutil")
def test_a_busy_process_beside_us_reads_as_about_one_core() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        elsewhere = spare.busy_elsewhere(0.5)
    finally:
        busy.kill()
        busy.wait()
    assert elsewhere is not None and elsewhere >= 0.7  # more when the machine is busier: never less
    assert spare.free_cores(0.05) is not None and len(spare.cores()) <= (os.cpu_count() or 1)
