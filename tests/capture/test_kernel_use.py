"""The main process's page faults and kernel time over the timed steps (advisor.capture.kernel_use)."""

from __future__ import annotations

import resource
from types import SimpleNamespace

import pytest

from advisor.capture.kernel_use import AfterWork, AfterWorkMeter, KernelMeter, KernelUse
from advisor.capture.phases import Phases, StopScript
from advisor.capture.recorder import StepRecorder
from tests.fakes import Clock


class FakeUsage:
    """``getrusage`` readings: each call's counters are one step further than the last's."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> SimpleNamespace:
        n = self.calls
        self.calls += 1
        return SimpleNamespace(ru_utime=1.0 * n, ru_stime=0.25 * n, ru_minflt=1000 * n, ru_majflt=n, ru_nivcsw=3 * n)


def _recorder(meter: KernelMeter, clock: Clock, warmup: int = 1, timed: int = 3) -> StepRecorder:
    rec = StepRecorder(Phases(warmup, timed, 0, 0), clock=clock,
                       on_phase=lambda r: meter.on_phase(r.phase, r.step_times_ms))
    rec.script_started()
    return rec


def test_the_window_is_read_when_the_timed_steps_start_and_when_they_end() -> None:
    usage, clock = FakeUsage(), Clock(10.0)
    meter = KernelMeter(usage)
    rec = _recorder(meter, clock)
    rec.optimizer_step()  # warm-up ends: the first reading
    assert usage.calls == 1 and meter.record() is None  # no timed step yet
    for _ in range(2):
        clock.advance(0.5)
        rec.optimizer_step()
    assert meter.record() is not None and usage.calls == 2  # the window so far: a reading now
    clock.advance(0.5)
    with pytest.raises(StopScript):
        rec.optimizer_step()  # the third timed step: the window ends, the run stops
    got = meter.record()
    assert got == KernelUse(steps=3, wall_s=1.5, user_s=2.0, system_s=0.5, minor_faults=2000,
                            major_faults=2, involuntary_switches=6)
    assert meter.record() == got  # the end was read once, not again


def test_a_restart_from_warmup_starts_the_window_again() -> None:
    usage = FakeUsage()
    meter = KernelMeter(usage)
    meter.on_phase("timed", [1.0])
    meter.on_phase("warmup", [])
    assert meter.record() is None
    meter.on_phase("timed", [])
    assert meter.record() is None  # no timed step in the new window yet


def test_the_real_getrusage_counts_a_touched_buffer() -> None:
    meter = KernelMeter()
    steps: list[float] = []
    meter.on_phase("timed", steps)
    buf = bytearray(64 * 2**20)  # zero pages, faulted in as they are touched (fewer with huge pages)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    steps.append(1.0)
    meter.on_phase("profiled", steps)
    got = meter.record()
    assert got is not None and got.steps == 1 and got.wall_s == 0.001
    assert got.minor_faults > 0 and got.user_s + got.system_s > 0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt >= got.minor_faults


def test_the_first_whole_step_after_work_between_steps_has_its_page_faults_read() -> None:
    usage = FakeUsage()  # 1,000 more faults at every reading
    meter = AfterWorkMeter(usage)
    for steps in (1, 2, 3):
        meter.on_step(steps, set(), profiled=False)
    assert usage.calls == 0  # no work between steps yet: nothing read
    # work after step 3 lands in step 4; step 5 is the first whole step after it
    meter.on_step(4, {3}, profiled=False)
    meter.on_step(5, {3}, profiled=True)
    meter.on_step(6, {3}, profiled=False)
    assert meter.records == [AfterWork(3, 1000, profiled=True)]
    # work in two steps running: the step after the first holds the second, only the last is read
    meter.on_step(9, {3, 8, 9}, profiled=False)
    meter.on_step(10, {3, 8, 9}, profiled=False)
    meter.on_step(11, {3, 8, 9}, profiled=False)
    assert meter.records == [AfterWork(3, 1000, profiled=True), AfterWork(9, 1000)]
