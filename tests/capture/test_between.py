"""Evaluation between training steps: timed, counted and named by the loop's callee (fake clock, no torch)."""

from __future__ import annotations

import pytest

from advisor.capture.between import BetweenSteps, attributed, is_length, is_period, run_hints
from advisor.capture.phases import Phases, StopScript
from advisor.capture.recorder import StepRecorder
from tests.capture.test_recorder import FakeProfiler
from tests.fakes import Clock

MODULE = ("train.py", "<module>", 1)
EVAL = ("train.py", "estimate_loss", 12)
SAMPLE = ("train.py", "sample", 30)


def _at(*frames, line=40):
    return tuple((*f, line) for f in frames)


def _eval(rec, clock, calls, seconds, stack):
    for _ in range(calls):
        start = clock.now
        clock.now += seconds
        rec.module_call(7, 8, grad=False, started=start, stack=lambda: stack)


def _train(rec, clock, steps, seconds=0.01):
    for _ in range(steps):
        clock.now += seconds
        rec.module_call(7, 8)
        rec.backward()
        rec.optimizer_step(1)


def test_evaluation_at_step_zero_and_every_period_is_timed_and_named():
    clock = Clock()
    rec = StepRecorder(Phases(2, 10, 0, 0, full=True), clock=clock)
    rec.optimizer_created()
    rec.script_started()
    stack = _at(MODULE, EVAL)
    _eval(rec, clock, 60, 0.002, stack)  # iteration 0: before the first optimizer step
    for _ in range(2):
        _train(rec, clock, 5)
        _eval(rec, clock, 60, 0.002, stack)
    rec.between.loop = (MODULE,)
    works = rec.between.records()
    assert [(w.function, w.line, w.step, w.calls) for w in works] == [
        ("estimate_loss", 12, 0, 60), ("estimate_loss", 12, 5, 60), ("estimate_loss", 12, 10, 60)]
    assert all(abs(w.seconds - 0.12) < 1e-9 for w in works)
    # the evaluation is no step: optimizer steps only, each 10 ms but the two that hold an evaluation
    assert rec.source == "optimizer" and rec.steps_seen == 10


def test_two_functions_between_the_same_steps_are_two_occurrences():
    tracker = BetweenSteps(loop=(MODULE,))
    tracker.call(0, 0.0, 1.0, _at(MODULE, EVAL))
    tracker.call(0, 1.0, 2.0, _at(MODULE, EVAL))
    tracker.call(0, 2.0, 2.5, _at(MODULE, SAMPLE))
    assert [(w.function, w.seconds, w.calls) for w in tracker.records()] == [
        ("estimate_loss", 2.0, 2), ("sample", 0.5, 1)]


def test_advisors_own_hook_time_is_taken_out_of_its_occurrence():
    tracker = BetweenSteps(loop=(MODULE,))
    tracker.call(0, 0.0, 1.0, _at(MODULE, EVAL))
    tracker.own(0.05)
    tracker.call(0, 1.0, 2.0, _at(MODULE, EVAL))
    tracker.own(0.05)
    tracker.call(0, 2.0, 2.5, _at(MODULE, SAMPLE))
    tracker.own(0.01)
    assert tracker.calls_seen == 3
    assert [(w.function, w.seconds) for w in tracker.records()] == [("estimate_loss", 1.9), ("sample", 0.49)]


def test_inline_evaluation_names_the_loop_and_its_line():
    tracker = BetweenSteps(loop=(MODULE,))
    tracker.call(3, 0.0, 1.0, _at(MODULE, line=55))
    (work,) = tracker.records()
    assert (work.function, work.line, work.step) == ("<module>", 55, 3)


def test_the_function_is_the_loops_callee_not_the_innermost_frame():
    train = ("train.py", "train", 5)
    helper = ("train.py", "batches", 20)
    # the loop is train(); evaluate() calls a helper that calls the model
    evaluate = ("train.py", "evaluate", 15)
    assert attributed((MODULE, train, evaluate, helper), (MODULE, train))[1] == "evaluate"
    # an optimizer step in a train_step() the loop calls: evaluate is still the loop's callee
    assert attributed((MODULE, train, evaluate), (MODULE, train, ("train.py", "train_step", 9)))[1] == "evaluate"
    # no optimizer step yet: the outermost frame is taken for the loop
    assert attributed((MODULE, evaluate, helper), None)[1] == "evaluate"


def test_a_profiled_occurrence_is_marked():
    clock = Clock()
    rec = StepRecorder(Phases(0, 0, 1, 0, full=True), clock=clock)
    rec.optimizer_created()
    rec.script_started()
    rec.open_window = "profiled"
    _eval(rec, clock, 2, 0.01, _at(MODULE, EVAL))
    assert rec.between.records()[0].profiled


def test_run_hints_read_lengths_and_periods_inner_first():
    hints = run_hints([{"max_steps": 100, "eval_iters": 200}, {"max_steps": 5000, "eval_interval": 300,
                                                               "flag": True, "lr": 0.1, "log_every": 0}])
    assert hints == {"max_steps": 100, "eval_interval": 300}
    assert is_length("max_iters") and is_length("num_steps") and not is_length("eval_iters")
    assert is_period("eval_interval") and is_period("sample_every") and not is_period("eval_iters")


def _stopping_recorder(clock, hints):
    cprof = FakeProfiler()
    rec = StepRecorder(Phases(1, 1, 1, 2), profiler=FakeProfiler(), cprofiler=cprof, clock=clock)
    rec.optimizer_created()
    rec.script_started()
    rec.between.loop, rec.between.hints = (MODULE,), hints
    _eval(rec, clock, 3, 0.01, _at(MODULE, EVAL))
    return rec, cprof


def test_one_occurrence_runs_the_capture_on_to_the_next_one_unprofiled():
    clock = Clock()
    rec, cprof = _stopping_recorder(clock, {"eval_interval": 8})
    steps = 0
    with pytest.raises(StopScript):
        for _ in range(50):
            _train(rec, clock, 1)
            steps += 1
            if steps == 8:
                _eval(rec, clock, 3, 0.01, _at(MODULE, EVAL))
    # measurement ended at step 5; the run went on to the evaluation after step 8 and one whole
    # step past the step it ran in (its page faults): stopped at step 10
    assert rec.steps_seen == 10 and cprof.calls == ["start", "step", "export"]
    assert [(w.step, w.profiled) for w in rec.between.records()] == [(0, False), (8, False)]
    (note,) = rec.between.notes
    assert "ran on 5 steps" in note and "estimate_loss (every 8 steps by the script's eval_interval)" in note


def test_running_on_is_bounded_in_time_and_needs_a_named_period():
    clock = Clock()
    rec, _ = _stopping_recorder(clock, {"eval_interval": 10_000})
    with pytest.raises(StopScript):
        for _ in range(50):
            _train(rec, clock, 1, seconds=5.0)
    assert rec.steps_seen < 15 and "at most 30 s" in rec.between.notes[0]
    rec, _ = _stopping_recorder(Clock(), {})
    with pytest.raises(StopScript):
        _train(rec, Clock(), 5)
    assert rec.steps_seen == 5 and not rec.between.notes
    # a fix trial (no profiled steps) stops on time
    trial = StepRecorder(Phases(1, 2, 0, 0), clock=Clock())
    trial.optimizer_created()
    trial.script_started()
    trial.between.loop, trial.between.hints = (MODULE,), {"eval_interval": 8}
    _eval(trial, Clock(), 3, 0.01, _at(MODULE, EVAL))
    with pytest.raises(StopScript):
        _train(trial, Clock(), 5)
    assert trial.steps_seen == 3


def _epoch_recorder(clock, epoch_batches):
    rec = StepRecorder(Phases(1, 1, 1, 2), profiler=FakeProfiler(), cprofiler=FakeProfiler(), clock=clock)
    rec.optimizer_created()
    rec.script_started()
    rec.between.loop, rec.between.train_batches, rec.between.eval_loader = (MODULE,), epoch_batches, True
    return rec


def _epochs(rec, clock, batches, epochs, test_seconds=0.0):
    """Train ``epochs`` epochs of ``batches`` steps, a test pass after each when ``test_seconds``."""
    for _ in range(epochs):
        _train(rec, clock, batches)
        rec.epoch_ended()
        if test_seconds:
            _eval(rec, clock, 4, test_seconds / 4, _at(MODULE, ("train.py", "test", 70)))


def test_an_evaluation_loader_runs_the_capture_on_to_the_first_epochs_end():
    clock = Clock()
    rec = _epoch_recorder(clock, epoch_batches=12)
    with pytest.raises(StopScript):
        _epochs(rec, clock, 12, 3, test_seconds=0.2)
    # measurement ended at step 5; the run went on through the epoch's end (12) and its test pass,
    # and stopped one whole step past the step it ran in
    assert rec.steps_seen == 14
    (work,) = rec.between.records()
    assert (work.function, work.step, work.epoch_end) == ("test", 12, True)
    (note,) = rec.between.notes
    assert "ran on 9 steps" in note and "first epoch's end" in note


def test_no_run_on_when_the_epochs_end_is_far_or_passed_without_work():
    clock = Clock()
    rec = _epoch_recorder(clock, epoch_batches=100_000)
    with pytest.raises(StopScript):
        _epochs(rec, clock, 100_000, 1)
    assert rec.steps_seen == 5  # 99,995 steps of 10 ms are past the 30 s bound
    (note,) = rec.between.notes
    assert "first epoch ends after 100000 batches" in note and "not in the projection" in note
    # short epochs: one ended inside the window with nothing after it, so there is nothing to wait for
    rec = _epoch_recorder(Clock(), epoch_batches=2)
    with pytest.raises(StopScript):
        _epochs(rec, rec.clock, 2, 10)
    assert rec.steps_seen == 5 and not rec.between.notes and not rec.between.records()


def test_both_aims_keep_the_capture_running_until_each_is_met():
    clock = Clock()
    rec = _epoch_recorder(clock, epoch_batches=12)
    rec.between.hints = {"save_every": 4}
    save = _at(MODULE, ("train.py", "save_checkpoint", 80))
    with pytest.raises(StopScript):
        for step in range(1, 40):
            _train(rec, clock, 1)
            if step % 4 == 0:
                _eval(rec, clock, 1, 0.05, save)
            if step % 12 == 0:
                rec.epoch_ended()
                _eval(rec, clock, 4, 0.05, _at(MODULE, ("train.py", "test", 70)))
    # a second save (step 8) was due before the first epoch's end (12): the run went on to step 14
    assert rec.steps_seen == 14
    assert [(w.function, w.step, w.epoch_end) for w in rec.between.records()] == [
        ("save_checkpoint", 4, False), ("save_checkpoint", 8, False), ("save_checkpoint", 12, True), ("test", 12, True)]
    (note,) = rec.between.notes
    assert "save_checkpoint (every 4 steps" in note and "first epoch's end" in note


def test_without_an_evaluation_loader_the_capture_stops_on_time():
    clock = Clock()
    rec = _epoch_recorder(clock, epoch_batches=12)
    rec.between.eval_loader = False
    with pytest.raises(StopScript):
        _epochs(rec, clock, 12, 3, test_seconds=0.2)
    assert rec.steps_seen == 5 and not rec.between.notes


def test_an_evaluation_loaders_start_is_the_start_of_its_occurrence():
    """Spawn-started evaluation workers: 3-4 s before the first model call, 0.05 s of model calls."""
    tracker = BetweenSteps(loop=(MODULE,))
    tracker.loader_started(10.0)
    tracker.loader_started(11.0)  # a second loader of the same evaluation: the first start holds
    tracker.call(5, 14.0, 14.01, _at(MODULE, EVAL))
    tracker.call(5, 14.01, 14.05, _at(MODULE, EVAL))
    (work,) = tracker.records()
    assert work.seconds == pytest.approx(4.05)
    # a loader made with grad disabled and read by no model call before the step ends starts nothing later
    tracker.loader_started(20.0)
    tracker.step_ended(6, 21.0)
    tracker.call(6, 30.0, 30.5, _at(MODULE, EVAL))
    assert tracker.records()[-1].seconds == pytest.approx(0.5)
