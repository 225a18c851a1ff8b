"""The kept fixes over the whole run: the step speedup set among start-up and periodic work."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.capture.between import BetweenWork
from advisor.capture.model import RunCapture
from advisor.capture.records import TimedPhase
from advisor.metrics.whole import WholeScope, kept_whole_run

FILE = "/home/u/train.py"


def _work(step, seconds, profiled=False, function="evaluate", line=24):
    return BetweenWork(function=function, file=FILE, line=line, step=step, seconds=seconds, calls=8, profiled=profiled)


def _capture(works, hints=None, steps=(10.0,) * 20, first=3.0, process=0.5):
    return RunCapture(
        script=FILE, between_steps=tuple(works), run_hints=dict(hints or {}),
        timed=TimedPhase(step_times_ms=tuple(steps), time_to_first_step_s=first), phases_s={"process": process},
    )


def test_a_known_length_projects_the_whole_run_before_and_with_the_fixes():
    # 2,000 steps of 10 ms, evaluation of 1 s every 20 steps (100 of them), start-up 2.09 s
    base = _capture([_work(0, 1.4), _work(20, 1.0)], {"max_iters": 2000})
    w = kept_whole_run(base, None, 2.0, 1.5, 2.5, startup_change_s=0.4)
    assert w.scope == WholeScope.RUN
    assert w.before_s == pytest.approx(2.09 + 20.0 + 100.0)
    # the steps halve; the evaluation is held; the start-up moves by the trials' change
    assert w.after_s == pytest.approx(2.49 + 10.0 + 100.0)
    assert w.ratio == pytest.approx(122.09 / 112.49)
    assert w.low == pytest.approx(122.09 / (2.49 + 20.0 / 1.5 + 100.0))
    # at the interval's high end the unmeasured evaluation moves with the steps; at its low end
    # (a gain) it is held
    assert w.high == pytest.approx(122.09 / (2.49 + 8.0 + 100.0 / 2.5))
    assert (w.startup_before_s, w.startup_after_s) == (pytest.approx(2.09), pytest.approx(2.49))
    (c,) = w.periodic
    assert (c.function, c.period, c.cost_s, c.seen_s, c.seen) == ("evaluate", 20, 1.0, None, 0)


def test_without_a_length_the_training_step_carries_its_share_of_the_periodic_work():
    base = _capture([_work(0, 1.4), _work(20, 1.0)])
    w = kept_whole_run(base, None, 2.0)
    assert w.scope == WholeScope.TRAINING
    # one step of 10 ms with 1 s / 20 steps of evaluation: 60 ms, then 5 + 50 ms
    assert (w.before_s, w.after_s) == (pytest.approx(0.06), pytest.approx(0.055))
    assert w.ratio == pytest.approx(0.06 / 0.055) and w.low is None and w.high is None
    assert w.startup_before_s is None


def test_what_the_kept_run_saw_is_kept_beside_the_projection_and_not_used():
    base = _capture([_work(0, 1.4), _work(20, 1.0)])
    # the kept run's unprofiled occurrence after the first step is the one read; its profiled one is not
    kept = _capture([_work(0, 2.0), _work(20, 1.6), _work(40, 9.0, profiled=True)])
    w = kept_whole_run(base, kept, 2.0)
    (c,) = w.periodic
    assert (c.cost_s, c.seen_s, c.seen) == (1.0, 1.6, 1)
    assert w.after_s == pytest.approx(0.055)  # as without the kept run


def test_nothing_to_add_to_the_step_ratio_is_none():
    plain = _capture([])
    assert kept_whole_run(plain, None, 2.0) is None  # no length, no periodic work
    assert kept_whole_run(_capture([_work(0, 1.0), _work(20, 1.0)]), None, None) is None
    # work every step is step time, not periodic
    assert kept_whole_run(_capture([_work(1, 0.1), _work(2, 0.1)]), None, 2.0) is None


def test_a_length_without_periodic_work_still_counts_the_start_up():
    base = _capture([], {"max_iters": 100}, first=5.0, process=0.0)
    w = kept_whole_run(base, None, 4.0)
    # start-up 5 s less the first step; 100 steps of 10 ms: 5.99 s, then 4.99 + 0.25
    assert w.scope == WholeScope.RUN and w.periodic == ()
    assert (w.before_s, w.after_s) == (pytest.approx(5.99), pytest.approx(4.99 + 0.25))
    assert w.ratio < 4.0 / 3


def test_a_gain_that_ends_partway_is_counted_on_its_steps_only():
    # 150 steps of 10 ms; the fix's 2x holds on the first 50 (its baseline stopped needing it there)
    base = _capture([], {"max_iters": 150}, first=1.0, process=0.0)
    w = kept_whole_run(base, None, 2.0, 1.5, 2.5, gain_steps=50)
    assert w.before_s == pytest.approx(0.99 + 1.5) and w.gain_steps == 50
    assert w.after_s == pytest.approx(0.99 + 0.25 + 1.0)
    assert w.low == pytest.approx(2.49 / (0.99 + 0.5 / 1.5 + 1.0))
    # as many steps as the run, or more: all of them, and no mention
    assert kept_whole_run(base, None, 2.0, gain_steps=400).gain_steps is None
    assert kept_whole_run(base, None, 2.0, gain_steps=400).after_s == pytest.approx(0.99 + 0.75)


def test_a_low_end_under_one_slows_the_periodic_work_with_the_steps():
    base = _capture([_work(0, 1.4), _work(20, 1.0)])
    w = kept_whole_run(base, None, 1.2, 0.9, 1.5)
    assert w.after_s == pytest.approx(0.01 / 1.2 + 0.05)  # the point: held
    assert w.low == pytest.approx(0.06 / (0.01 / 0.9 + 0.05 / 0.9))
    assert w.high == pytest.approx(0.06 / (0.01 / 1.5 + 0.05 / 1.5))


def test_the_runs_exit_is_held_on_both_sides_and_lowers_the_ratio():
    # the demo's shape: 80 steps of 100 ms, 3.3 s start-up, 0.9 s of interpreter shutdown after the last step
    base = replace(_capture([], {"max_iters": 80}, steps=(100.0,) * 20, first=3.4, process=0.0), end_s=0.9)
    w = kept_whole_run(base, None, 1.8, 1.5, 2.1)
    assert w.before_s == pytest.approx(3.3 + 8.0 + 0.9) and w.end_s == 0.9
    assert w.after_s == pytest.approx(3.3 + 8.0 / 1.8 + 0.9)
    assert w.low == pytest.approx(12.2 / (3.3 + 8.0 / 1.5 + 0.9))
    without = kept_whole_run(replace(base, end_s=None), None, 1.8)
    assert without.end_s is None and without.ratio > w.ratio  # left out, the exit overstated the gain
    assert without.before_s == pytest.approx(11.3)



def test_the_epoch_change_takes_what_the_trial_runs_measured_and_the_steps_the_trials_speedup():
    """persistent_workers on spawn-started loaders: the steps no faster, each change from 7.6 s to almost nothing."""
    from advisor.capture.between import EpochGap
    from advisor.metrics.whole import EpochArms

    evaluate = BetweenWork(function="evaluate", file=FILE, line=60, step=63, seconds=0.05, calls=8, epoch_end=True)
    base = replace(_capture([evaluate], {"epochs": 3, "max_iters": 189}, steps=(14.0,) * 20),
                   epoch_gaps=(EpochGap(63, 7.664),))  # 7.6 s beyond a step and the test pass
    w = kept_whole_run(base, None, 1.0, 0.9, 1.1, startup_change_s=0.0, epoch=EpochArms((7.6, 0.08)))
    startup = 0.5 + 3.0 - 0.014
    assert w.before_s == pytest.approx(startup + 189 * 0.014 + 2 * 7.6 + 3 * 0.05)
    # each change: 7.6 s beyond a step, less the 7.52 s the trial runs' changes shrank by
    assert (w.epoch_changes, w.epoch_change_before_s, w.epoch_change_after_s) == (2, pytest.approx(7.6), pytest.approx(0.08))
    assert w.after_s == pytest.approx(startup + 189 * 0.014 + 2 * 0.08 + 3 * 0.05)
    # the interval is the steps': the change is held at its point at both ends
    assert w.low == pytest.approx(w.before_s / (startup + 189 * 0.014 / 0.9 + 2 * 0.08 + 3 * 0.05 / 0.9))
    assert [c.function for c in w.periodic] == ["evaluate"]
    # without the arms (they did not separate, or an older report) the change is held at the baseline's
    held = kept_whole_run(base, None, 1.0, 0.9, 1.1, startup_change_s=0.0)
    assert held.epoch_changes is None and held.after_s == pytest.approx(held.before_s)
    assert "the epoch change" in [c.function for c in held.periodic]
