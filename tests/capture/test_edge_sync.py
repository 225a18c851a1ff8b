"""The timed window waits for the GPU at its edges: a CPU that runs ahead does not inflate rates."""

from __future__ import annotations

import pytest
import torch

from advisor.capture import edge_sync
from advisor.capture.phases import Phases, StopScript
from advisor.capture.recorder import StepRecorder
from tests.fakes import Clock


class FakeGpu:
    """Each step the CPU queues 5 ms of kernels in 1 ms; the device runs them in order."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.done_at, self.syncs = clock, clock.now, 0

    def step(self, rec: StepRecorder) -> None:
        self.done_at = max(self.done_at, self.clock.now) + 0.005
        self.clock.now += 0.001
        rec.optimizer_step()

    def sync_at_edges(self, rec: StepRecorder) -> bool:
        if not edge_sync.at_window_edge(rec):
            return False
        self.syncs += 1
        self.clock.now = max(self.clock.now, self.done_at)
        return True


def _run(sync: bool, timed: int = 4) -> tuple[list[float], int]:
    clock = Clock(100.0)
    gpu = FakeGpu(clock)
    rec = StepRecorder(Phases(2, timed, 0, 0), clock=clock, start_time=90.0,
                       edge_sync=gpu.sync_at_edges if sync else None)
    rec.script_started()
    with pytest.raises(StopScript):  # the measurement is done after the window
        for _ in range(2 + timed):
            gpu.step(rec)
    return rec.step_times_ms, gpu.syncs


def test_without_waiting_the_window_times_the_cpus_queueing_not_the_gpus_work():
    times, _ = _run(sync=False)
    assert sum(times) == pytest.approx(4.0)  # 4 steps of 1 ms: the CPU's pace


def test_waiting_at_the_two_edges_makes_the_window_the_gpus_time():
    times, syncs = _run(sync=True)
    assert syncs == 2  # the boundary that opens the window and the one that closes it, no other
    assert sum(times) == pytest.approx(20.0)  # 4 steps of 5 ms of kernels


def test_the_real_sync_runs_only_at_the_edges_of_a_run_that_started_cuda(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda: calls.append(1), raising=False)
    started = [False]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: started[0])
    rec = StepRecorder(Phases(1, 2, 0, 0), edge_sync=edge_sync.sync_at_window_edges)
    rec.script_started()
    rec.optimizer_step()  # closes warm-up, opens the window: CUDA never started, no wait
    assert calls == []
    started[0] = True
    rec.optimizer_step()  # inside the window
    assert calls == []
    with pytest.raises(StopScript):
        rec.optimizer_step()  # closes the window
    assert calls == [1]


def test_a_window_of_no_timed_steps_has_no_edges():
    rec = StepRecorder(Phases(1, 0, 2, 0))
    rec.script_started()
    assert not edge_sync.at_window_edge(rec)
