"""The step/phase state machine with a fake clock and fake profilers (no torch, no subprocess)."""

from __future__ import annotations

import pytest

from advisor._steady import SteadyState, assess
from advisor.capture.phases import Phases, StopScript
from advisor.capture.recorder import StepRecorder
from tests.fakes import Clock


class FakeProfiler:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def step(self) -> None:
        self.calls.append("step")

    def stop(self, export: bool) -> None:
        self.calls.append("export" if export else "discard")


def make(warmup=1, timed=2, profiled=2, cprofile=1, full=False, **kw):
    clock = Clock(100.0)
    prof, cprof = FakeProfiler(), FakeProfiler()
    rec = StepRecorder(
        Phases(warmup, timed, profiled, cprofile, full), profiler=prof, cprofiler=cprof,
        clock=clock, start_time=90.0, **kw,
    )
    rec.script_started()
    return rec, clock, prof, cprof


def opt_step(rec, clock, seconds=0.01, samples=4, loader=True):
    if loader:
        rec.batch_requested()
        rec.batch_yielded(samples)
    clock.advance(seconds)
    rec.optimizer_step()


def test_phases_in_order_and_stop_after_the_last_window():
    rec, clock, prof, cprof = make()
    for _ in range(5):
        opt_step(rec, clock)
    assert prof.calls == ["start", "step", "export"] and cprof.calls == ["start"]
    with pytest.raises(StopScript):
        opt_step(rec, clock)
    # the last window is closed only after the stop has unwound (finish), and exported
    assert cprof.calls == ["start"]
    rec.finish()
    assert cprof.calls == ["start", "export"]
    snap = rec.snapshot()
    assert (snap["warmup_steps"], snap["timed_steps"], snap["profiled_steps"],
            snap["cprofiled_steps"]) == (1, 2, 2, 1)
    assert rec.source == "optimizer"
    assert not any("incomplete" in n for n in rec.notes)


def test_timed_phase_numbers():
    rec, clock, *_ = make(warmup=1, timed=3, profiled=0, cprofile=0, full=True)
    opt_step(rec, clock, seconds=0.5)
    for seconds in (0.01, 0.02, 0.03):
        opt_step(rec, clock, seconds=seconds, samples=8)
    timed = rec.timed_phase()
    assert timed.step_times_ms == pytest.approx((10.0, 20.0, 30.0))
    assert timed.samples == (8, 8, 8) and timed.batches == (1, 1, 1)
    assert timed.samples_per_s == pytest.approx(24 / 0.06)
    assert timed.steps_per_s == pytest.approx(3 / 0.06)
    assert timed.time_to_first_step_s == pytest.approx(100.5 - 90.0)


def test_zero_warmup_times_the_first_step_from_script_start():
    rec, clock, prof, _ = make(warmup=0, timed=1, profiled=0, cprofile=0, full=True)
    clock.advance(2.0)
    rec.optimizer_step()
    assert rec.step_times_ms == pytest.approx([2000.0]) and prof.calls == []


def test_dataloader_boundaries_without_optimizer():
    rec, clock, *_ = make(warmup=1, timed=2, profiled=0, cprofile=0, full=True)
    for _ in range(4):
        rec.batch_requested()  # the first request starts step 1; later ones end a step
        rec.batch_yielded(3)
        clock.advance(0.01)
    assert rec.source == "dataloader" and rec.steps_seen == 3
    assert rec.step_samples == [3, 3] and rec.step_batches == [1, 1]


def test_epoch_gap_is_not_a_step():
    rec, clock, *_ = make(warmup=0, timed=10, profiled=0, cprofile=0, full=True)
    rec.batch_requested()
    clock.advance(0.01)
    rec.batch_requested()  # ends step 1
    clock.advance(0.01)
    rec.batch_requested()     # ends step 2; epoch over
    rec.epoch_ended()
    clock.advance(5.0)                           # evaluation between epochs
    rec.batch_requested()   # starts step 3, ends nothing
    clock.advance(0.01)
    rec.batch_requested()                        # ends step 3
    assert rec.step_times_ms == pytest.approx([10.0, 10.0, 10.0])
    # the change is kept beside the steps: the gap with the step after it, one per epoch end
    [gap] = rec.between.epoch_gaps
    assert (gap.step, gap.seconds, gap.profiled) == (2, pytest.approx(5.01), False)


def test_epoch_gap_inside_an_optimizer_step_is_timed_from_the_last_step_before_it():
    """Steps from the optimizer: the change is inside the first step of the next epoch (the trials' 7-9 s step)."""
    rec, clock, *_ = make(warmup=0, timed=10, profiled=0, cprofile=0, full=True)
    opt_step(rec, clock)
    opt_step(rec, clock)
    rec.batch_requested()
    rec.epoch_ended()  # the loop asks for a batch after its last step: the epoch is over
    clock.advance(3.0)  # evaluation, the training loader's workers started again
    opt_step(rec, clock, seconds=0.02)
    opt_step(rec, clock)
    assert [(g.step, g.seconds) for g in rec.between.epoch_gaps] == [(2, pytest.approx(3.02))]
    assert max(rec.step_times_ms) == pytest.approx(3020.0)  # the step holds it, as before


def test_only_epochs_ending_in_the_timed_steps_are_counted():
    # 1 warm-up step, 3 timed; an epoch ends in the warm-up step and one in the timed steps
    rec, clock, *_ = make(warmup=1, timed=3, profiled=0, cprofile=0, full=True)
    rec.batch_requested()
    rec.epoch_ended()  # still warming up: not counted
    assert rec.phase == "warmup"
    for _ in range(3):
        clock.advance(0.01)
        rec.batch_requested()
    assert rec.phase == "timed"
    rec.epoch_ended()
    clock.advance(0.01)
    rec.batch_requested()
    assert rec.timed_phase().epoch_ends == 1


def test_gradient_accumulation_switch_in_warmup_is_silent():
    rec, clock, *_ = make(warmup=3, timed=1, profiled=0, cprofile=0, full=True)
    for _ in range(2):  # 2 micro-batches, then the optimizer step
        rec.batch_requested()
        rec.batch_yielded(4)
        clock.advance(0.01)
    rec.optimizer_step()
    assert rec.source == "optimizer" and rec.notes == []


def test_switch_after_warmup_restarts_measurement_and_discards_the_profile():
    rec, clock, prof, _ = make(warmup=1, timed=1, profiled=3, cprofile=0, full=True)
    for _ in range(4):  # dataloader steps reach the profiled window
        rec.batch_requested()
        rec.batch_yielded(2)
        clock.advance(0.01)
    assert prof.calls == ["start", "step"]
    rec.optimizer_step()
    assert prof.calls == ["start", "step", "discard"]
    # measurement restarted: this optimizer step ended the new warm-up's only step
    assert rec.counts == {"warmup": 1} and rec.phase == "timed" and rec.step_times_ms == []
    assert any("restarted" in n for n in rec.notes)
    rec.batch_requested()  # lower precedence now: ignored as a boundary
    assert rec.source == "optimizer"


def test_switch_inside_the_first_timed_step_restarts_silently():
    # 2 accumulated micro-batches, warm-up 1: the second request ends a (dataloader) warm-up
    # step, so the first optimizer step arrives inside the timed phase
    rec, clock, prof, _ = make(warmup=1, timed=2, profiled=0, cprofile=0, full=True)
    for _ in range(3):
        for _ in range(2):
            rec.batch_requested()
            rec.batch_yielded(4)
            clock.advance(0.01)
        rec.optimizer_step()
    assert rec.step_batches == [2, 2] and rec.step_samples == [8, 8]
    assert rec.notes == []


def test_marker_outranks_optimizer():
    rec, clock, *_ = make(warmup=5, timed=1, profiled=0, cprofile=0, full=True)
    rec.optimizer_step()
    rec.marker()
    rec.optimizer_step()  # ignored from now on
    assert rec.source == "marker" and rec.steps_seen == 2


def test_script_end_inside_a_window_exports_with_a_note():
    rec, clock, prof, _ = make(warmup=0, timed=0, profiled=5, cprofile=0)
    opt_step(rec, clock, loader=False)
    rec.finish()
    assert prof.calls == ["start", "step", "export"]
    assert any("incomplete" in n and "left out of the trace's analysis" in n for n in rec.notes)


def test_full_run_closes_windows_in_place_and_keeps_counting():
    rec, clock, prof, cprof = make(warmup=0, timed=0, profiled=1, cprofile=1, full=True)
    for _ in range(5):
        opt_step(rec, clock, loader=False)
    assert prof.calls == ["start", "export"] and cprof.calls == ["start", "export"]
    assert rec.steps_seen == 5 and rec.phase == "finishing"


def test_losses_summed_per_step_for_the_first_steps():
    rec, clock, *_ = make(warmup=10, timed=0, profiled=0, cprofile=0, record_loss_steps=2)
    rec.loss(1.0)
    rec.loss(0.5)
    rec.optimizer_step()
    assert rec.wants_loss()
    rec.loss(2.0)
    rec.optimizer_step()
    assert not rec.wants_loss()
    rec.loss(9.0)
    assert rec.losses == [1.5, 2.0]


def _recorder_with_min_window(min_timed_s: float):
    clock = Clock(100.0)
    rec = StepRecorder(Phases(1, 3, 0, 0, min_timed_s=min_timed_s), clock=clock, start_time=90.0)
    rec.script_started()
    return rec, clock


def test_short_steps_are_timed_until_the_window_is_long_enough():
    # 3 timed steps of 0.125 s make a 0.375 s window; asked for 1 s, timing goes on to 8 steps.
    rec, clock = _recorder_with_min_window(1.0)
    with pytest.raises(StopScript):
        for _ in range(40):
            opt_step(rec, clock, seconds=0.125)
    timed = rec.timed_phase()
    assert len(timed.step_times_ms) == 8
    assert sum(timed.step_times_ms) == pytest.approx(1000.0)


def test_long_steps_keep_the_asked_count():
    rec, clock = _recorder_with_min_window(1.0)
    with pytest.raises(StopScript):
        for _ in range(40):
            opt_step(rec, clock, seconds=0.5)
    assert len(rec.timed_phase().step_times_ms) == 3  # 1.5 s already: no extension


def test_no_minimum_means_exactly_the_asked_steps():
    rec, clock = _recorder_with_min_window(0.0)
    with pytest.raises(StopScript):
        for _ in range(40):
            opt_step(rec, clock, seconds=0.001)
    assert len(rec.timed_phase().step_times_ms) == 3


def test_phase_seconds_say_where_the_time_went():
    # issue #16: imports before the script, its set-up to the first step, warm-up, timed, finishing
    rec, clock, *_ = make(warmup=2, timed=3, profiled=0, cprofile=0, full=True)
    clock.advance(5.0)  # the script builds its data and model
    opt_step(rec, clock, seconds=0.25, loader=False)  # first (warm-up) step: carries the set-up
    opt_step(rec, clock, seconds=1.0, loader=False)
    for _ in range(3):
        opt_step(rec, clock, seconds=0.5, loader=False)
    clock.advance(2.0)  # the script runs on / exports
    got = rec.phase_seconds()
    assert list(got) == ["imports", "setup", "warmup", "timed", "finishing"]
    assert got == pytest.approx({"imports": 10.0, "setup": 5.25, "warmup": 1.0, "timed": 1.5, "finishing": 2.0})
    assert rec.snapshot()["phases_s"] == got


def test_phase_seconds_without_warmup_count_the_first_step_as_setup():
    rec, clock, *_ = make(warmup=0, timed=2, profiled=0, cprofile=0, full=True)
    clock.advance(3.0)
    opt_step(rec, clock, seconds=0.5, loader=False)
    opt_step(rec, clock, seconds=0.5, loader=False)
    got = rec.phase_seconds()
    assert got["setup"] == pytest.approx(3.5) and got["timed"] == pytest.approx(0.5)
    assert "warmup" not in got  # asked with 0 steps


def _run_steps(rec, clock, seconds):
    with pytest.raises(StopScript):
        for t in seconds:
            opt_step(rec, clock, seconds=t)


def test_a_window_still_warming_up_is_extended_until_its_steady_part_holds_the_asked_steps():
    # 20 timed steps asked; the first 8 are 5x slower (warm-up still going): timing goes on
    # until 20 steady steps follow them.
    clock = Clock(100.0)
    rec = StepRecorder(Phases(1, 20, 0, 0), clock=clock, start_time=90.0)
    rec.script_started()
    slow = [0.5 + 0.01 * (i % 3) for i in range(8)]
    steady = [0.1 + 0.001 * (i % 5) for i in range(200)]
    _run_steps(rec, clock, [0.5, *slow, *steady])
    times = rec.timed_phase().step_times_ms
    assert len(times) == 28
    verdict = assess(times)
    assert verdict.state is SteadyState.SETTLED_LATE
    assert (verdict.start, verdict.used) == (8, 20)


def test_a_steady_window_keeps_the_asked_steps():
    clock = Clock(100.0)
    rec = StepRecorder(Phases(1, 20, 0, 0), clock=clock, start_time=90.0)
    rec.script_started()
    _run_steps(rec, clock, [0.1 + 0.002 * (i % 7) for i in range(200)])
    assert len(rec.timed_phase().step_times_ms) == 20


def test_a_window_that_never_settles_grows_by_at_most_as_many_steps_again():
    # Every step slower than the one before: no steady part ever appears.
    clock = Clock(100.0)
    rec = StepRecorder(Phases(1, 20, 0, 0), clock=clock, start_time=90.0)
    rec.script_started()
    _run_steps(rec, clock, [2.0 / (1 + 0.05 * i) for i in range(300)])
    assert len(rec.timed_phase().step_times_ms) <= 40


def test_the_ranks_of_a_job_never_extend_their_window():
    # Every rank must stop at the same step: a window still warming up stays as asked.
    clock = Clock(100.0)
    rec = StepRecorder(Phases(1, 20, 0, 0, settle=False), clock=clock, start_time=90.0)
    rec.script_started()
    _run_steps(rec, clock, [0.5, *([0.5] * 8), *([0.1] * 200)])
    assert len(rec.timed_phase().step_times_ms) == 20


def test_phases_settle_and_keep_a_least_window_only_for_one_process():
    """The ranks of a job stop at the same step: none may grow its window by its own clock."""
    from advisor.capture.model import RunSpec

    one = Phases.for_spec(RunSpec(script="t.py", min_timed_s=1.0))
    assert one.settle and one.min_timed_s == 1.0
    for ranks in (RunSpec(script="t.py", nproc_per_node=2, min_timed_s=1.0), RunSpec(script="t.py", nnodes=2, min_timed_s=1.0)):
        phases = Phases.for_spec(ranks)
        assert not phases.settle and phases.min_timed_s == 0.0


def test_graphs_compiled_inside_the_timed_window_are_counted():
    graphs = {"n": 0}
    clock = Clock(100.0)
    rec = StepRecorder(Phases(2, 4, 0, 0), clock=clock, start_time=90.0, graph_count=lambda: graphs["n"])
    rec.script_started()
    with pytest.raises(StopScript):
        for i in range(20):
            graphs["n"] += 1 if i in (0, 1, 3, 4) else 0  # two in warm-up, two while timed
            opt_step(rec, clock, seconds=0.1)
    assert rec.timed_phase().compiles == 2


def test_without_a_graph_counter_nothing_is_counted():
    clock = Clock(100.0)
    rec = StepRecorder(Phases(1, 3, 0, 0), clock=clock, start_time=90.0)
    rec.script_started()
    _run_steps(rec, clock, [0.1] * 20)
    assert rec.timed_phase().compiles == 0


class SlowExport(FakeProfiler):
    """A profiler whose stop with export takes ``seconds`` of the clock (writing the trace)."""

    def __init__(self, clock, seconds: float) -> None:
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def stop(self, export: bool) -> None:
        super().stop(export)
        if export:
            self.clock.advance(self.seconds)


def test_a_window_s_export_is_not_counted_as_its_steps():
    # the profiled window's export (0.7 s on the demo) fell in its span: 10 steps of 0.13 s read
    # as 0.19 s each against cProfile's 0.125 s, and the overhead share left it out
    clock = Clock(100.0)
    prof, cprof = SlowExport(clock, 0.7), SlowExport(clock, 0.2)
    rec = StepRecorder(Phases(1, 2, 10, 10), profiler=prof, cprofiler=cprof, clock=clock, start_time=90.0)
    rec.script_started()
    opt_step(rec, clock, seconds=1.0)  # set-up and warm-up
    for _ in range(2):
        opt_step(rec, clock, seconds=0.1)
    for _ in range(10):
        opt_step(rec, clock, seconds=0.13)
    with pytest.raises(StopScript):
        for _ in range(10):
            opt_step(rec, clock, seconds=0.125)
    rec.finish()
    got = rec.phase_seconds()
    assert got["timed"] == pytest.approx(0.2)
    assert got["profiled"] == pytest.approx(1.3) and got["cprofile"] == pytest.approx(1.25)
    assert got["export"] == pytest.approx(0.7)  # the profiled window's, between its last step and cProfile's first
    assert got["finishing"] == pytest.approx(0.2)  # the last window closes after the stop
    assert sum(got.values()) == pytest.approx(clock() - 90.0)


def test_the_phase_in_progress_keeps_its_whole_span():
    rec, clock, *_ = make(warmup=1, timed=5, profiled=0, cprofile=0)
    opt_step(rec, clock, seconds=0.5)
    opt_step(rec, clock, seconds=0.1)
    clock.advance(0.05)  # a step under way is no export
    got = rec.phase_seconds()
    assert got["timed"] == pytest.approx(0.15) and "export" not in got


def test_the_last_windows_close_counts_as_export_not_as_the_runs_end() -> None:
    from advisor.capture.timeline import with_last_export

    phases = {"timed": 1.5, "export": 0.04, "finishing": 2.2}
    assert with_last_export(phases, 2.1) == {"timed": 1.5, "export": 2.14, "finishing": 0.1}
    assert with_last_export(phases, 5.0)["finishing"] == 0.0  # never more than finishing holds
    assert with_last_export(phases, 0.0) == phases
    assert with_last_export({"timed": 1.0}, 0.3) == {"timed": 1.0}  # a run that never finished


def test_a_timed_step_holding_an_epoch_change_is_left_out_of_the_rate():
    """Windows that held a change and windows that did not read 400 and 1,300 samples/s on one script."""
    rec, clock, *_ = make(warmup=0, timed=10, profiled=0, cprofile=0, full=True)
    for _ in range(4):
        opt_step(rec, clock, seconds=0.01, samples=4)
    rec.batch_requested()
    rec.epoch_ended()
    clock.advance(3.0)
    opt_step(rec, clock, seconds=0.01, samples=4)
    for _ in range(3):
        opt_step(rec, clock, seconds=0.01, samples=4)
    timed = rec.timed_phase()
    assert max(timed.step_times_ms) == pytest.approx(3010.0)  # kept in the window's times
    assert timed.samples_per_s == pytest.approx(4 / 0.01, rel=0.01)  # and out of its rate
