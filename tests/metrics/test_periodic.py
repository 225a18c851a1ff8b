"""The whole-run projection from a capture's evaluation occurrences, step times and the script's variables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from advisor.capture.between import BetweenWork
from advisor.capture.model import RunCapture
from advisor.capture.records import DataLoaderInfo, ScriptConfig, ScriptOption, TimedPhase
from advisor.capture.vocab import RunStatus
from advisor.metrics.periodic import (
    periodic_locations,
    periodic_metrics,
    periodic_notes,
    project,
    steady_step_s,
)

FILE = "/home/u/train.py"


def _work(step, seconds, profiled=False, function="estimate_loss", line=24):
    return BetweenWork(function=function, file=FILE, line=line, step=step, seconds=seconds, calls=60,
                       profiled=profiled)


def _capture(works, hints=None, steps=(10.0,) * 20, first=3.0, process=0.5, **kw):
    return RunCapture(
        script=FILE, between_steps=tuple(works), run_hints=dict(hints or {}),
        timed=TimedPhase(step_times_ms=tuple(steps), time_to_first_step_s=first),
        phases_s={"process": process}, **kw,
    )


def test_period_seen_projects_the_run():
    # evaluation at 0, 20, 40 (the last under cProfile: slower, not used), 2,000 steps of 10 ms
    cap = _capture([_work(0, 1.4), _work(20, 1.0), _work(40, 3.0, profiled=True)], {"max_iters": 2000})
    p = project(cap)
    (f,) = p.functions
    assert (f.period, f.period_from, f.cost_s, f.occurrences) == (20, "seen", 1.0, 100)
    # start-up: 0.5 s process + 3.0 s to the end of step 1, less that step (10 ms) and the 1.4 s evaluation
    assert p.startup_s == pytest.approx(2.09)
    assert p.projected_s == pytest.approx(2.09 + 2000 * 0.01 + 100 * 1.0)
    m = periodic_metrics(cap)
    assert m["periodic_work_frac"] == pytest.approx(100 / p.projected_s)
    assert (m["periodic_period_steps"], m["periodic_occurrences_count"], m["projected_steps_count"]) == (20, 100, 2000)
    assert periodic_notes(cap) == []


def test_the_runs_exit_is_part_of_the_projection_when_it_was_timed():
    cap = _capture([_work(0, 1.4), _work(20, 1.0)], {"max_iters": 2000}, end_s=0.9)
    p = project(cap)
    assert p.end_s == 0.9 and p.projected_s == pytest.approx(2.09 + 20.0 + 100.0 + 0.9)
    m = periodic_metrics(cap)
    assert m["run_end_s"] == 0.9 and m["periodic_work_frac"] == pytest.approx(100 / p.projected_s)
    assert periodic_metrics(_capture([], {"max_iters": 2000}))["run_end_s"] is None  # not timed: not guessed


def test_a_warm_started_run_has_no_start_up_to_project():
    from advisor.capture.vocab import StartKind

    # forked from the warm-start server: torch was imported before its clock began
    cap = _capture([_work(0, 1.4), _work(20, 1.0)], {"max_iters": 2000}, start=StartKind.WARM)
    assert cap.time_to_first_step_s is None and cap.timed.time_to_first_step_s == 3.0
    p = project(cap)
    assert p.startup_s is None and p.projected_s is None
    assert periodic_metrics(cap)["startup_s"] is None


def test_one_occurrence_takes_its_period_from_the_scripts_variable_and_says_so():
    cap = _capture([_work(0, 2.0)], {"max_iters": 3000, "eval_interval": 300})
    (f,) = project(cap).functions
    assert (f.period, f.period_from, f.occurrences, f.cost_s) == (300, "eval_interval", 10, 2.0)
    (note,) = periodic_notes(cap)
    assert "estimate_loss ran once" in note and "eval_interval" in note


def test_argparse_options_name_the_length_and_a_sampling_function_its_own_period():
    config = ScriptConfig(options=(ScriptOption("max_steps", 1000), ScriptOption("sample_every", 250),
                                   ScriptOption("eval_interval", 100)))
    cap = _capture([_work(0, 0.5, function="generate", line=60)], script_config=config)
    (f,) = project(cap).functions
    assert (f.period, f.period_from, f.occurrences) == (250, "sample_every", 4)


def test_epochs_times_the_first_loaders_steps_per_epoch_is_the_length():
    config = ScriptConfig(options=(ScriptOption("epochs", 3), ScriptOption("save_every", 25)))
    loaders = (DataLoaderInfo(batch_size=32, batches=160), DataLoaderInfo(batch_size=32, batches=40))
    cap = _capture([_work(25, 0.02, function="torch.save", line=38)], script_config=config, dataloaders=loaders)
    p = project(cap)
    assert (p.steps, p.steps_from) == (480, "epochs x 160 steps per epoch")
    assert p.functions[0].occurrences == 19  # after steps 25, 50, ..., 475
    # two loader batches per optimizer step (gradient accumulation): 80 steps an epoch
    timed = TimedPhase(step_times_ms=(10.0,) * 20, time_to_first_step_s=3.0, batches=(2,) * 20)
    assert project(RunCapture(script=FILE, script_config=config, dataloaders=loaders, timed=timed)).steps == 240


def test_the_loader_the_steps_iterate_gives_the_epoch_over_the_first_one_made():
    config = ScriptConfig(options=(ScriptOption("epochs", 2),))
    val_first = (DataLoaderInfo(batches=40), DataLoaderInfo(batches=160))
    assert project(_capture([], script_config=config, dataloaders=val_first, epoch_batches=160)).steps == 320
    assert project(_capture([], script_config=config, dataloaders=val_first)).steps == 80


def test_the_loops_epoch_variable_is_no_length():
    loaders = (DataLoaderInfo(batch_size=32, batches=160),)
    assert project(_capture([], {"epoch": 2}, dataloaders=loaders)).steps is None
    # a data set without a length (an iterable one): no epoch to count
    config = ScriptConfig(options=(ScriptOption("num_epochs", 3),))
    assert project(_capture([], script_config=config, dataloaders=(DataLoaderInfo(batches=None),))).steps is None


def test_unknown_length_gives_the_share_of_steady_training():
    cap = _capture([_work(0, 0.3), _work(10, 0.1), _work(20, 0.1)])
    m = periodic_metrics(cap)
    assert m["projected_run_s"] is None and m["projected_steps_count"] is None
    # 0.1 s every 10 steps of 10 ms: 0.1 / (0.1 + 0.1)
    assert m["periodic_work_frac"] == pytest.approx(0.5)
    assert any("length is unknown" in n for n in periodic_notes(cap))


def test_a_run_to_its_end_is_its_own_length():
    cap = _capture([_work(0, 0.2), _work(50, 0.2)], {"max_iters": 9999}, status=RunStatus.COMPLETED, steps_seen=100)
    assert project(cap).steps == 100 and project(cap).functions[0].occurrences == 2


def test_work_every_step_is_step_time_and_no_period_is_no_share():
    assert project(_capture([_work(s, 0.001) for s in range(5)], {"max_iters": 100})).functions == ()
    m = periodic_metrics(_capture([_work(0, 1.0)]))
    assert m["periodic_work_frac"] is None and m["periodic_period_steps"] is None


def test_locations_are_per_step_like_every_location():
    (loc,) = periodic_locations(_capture([_work(0, 1.0), _work(20, 1.0)]))
    assert (loc.kind, loc.function, loc.line, loc.count, loc.time_ms) == ("periodic", "estimate_loss", 24, 0.05, 50.0)
    assert periodic_locations(_capture([])) == [] and periodic_locations(None) == []


def test_steady_step_leaves_out_steps_that_held_an_evaluation():
    assert steady_step_s([10.0, 12.0, 11.0, 500.0]) == pytest.approx(0.011)
    assert steady_step_s([]) is None


def test_work_at_each_epochs_end_has_one_epoch_for_its_period_and_runs_after_the_last():
    config = ScriptConfig(options=(ScriptOption("epochs", 14),))
    test = BetweenWork(function="test", file=FILE, line=70, step=938, seconds=2.0, calls=157, epoch_end=True)
    cap = _capture([test], script_config=config, dataloaders=(DataLoaderInfo(batches=938), DataLoaderInfo(batches=157)))
    p = project(cap)
    (f,) = p.functions
    assert (p.steps, f.period, f.period_from, f.occurrences) == (13132, 938, "epoch", 14)
    assert p.projected_s == pytest.approx(p.startup_s + 13132 * 0.01 + 14 * 2.0)
    (note,) = periodic_notes(cap)
    assert "test ran once" in note and "each epoch's end, every 938 steps" in note



def test_the_epoch_change_is_projected_between_epochs_less_the_work_at_its_end():
    """The spawn-started loaders' script: 7-9 s at each change against 14 ms steps, projected at 11.5 s, ran 27-32 s."""
    from advisor.capture.between import EpochGap

    config = ScriptConfig(options=(ScriptOption("epochs", 3),))
    loaders = (DataLoaderInfo(batches=63), DataLoaderInfo(batches=8))
    evaluate = BetweenWork(function="evaluate", file=FILE, line=60, step=63, seconds=0.05, calls=8, epoch_end=True)
    gaps = (EpochGap(63, 7.6), EpochGap(126, 8.0, profiled=True))  # the profiled one is inflated: not used
    cap = _capture([evaluate], script_config=config, dataloaders=loaders, steps=(14.0,) * 20, epoch_gaps=gaps)
    p = project(cap)
    by_name = {f.function: f for f in p.functions}
    change, ev = by_name["the epoch change"], by_name["evaluate"]
    assert (change.period, change.occurrences, change.measured) == (63, 2, 1)
    assert change.cost_s == pytest.approx(7.6 - 0.014 - 0.05)  # the loaders' start: the test pass is its own
    assert ev.occurrences == 3  # after each epoch, the last included
    assert p.projected_s == pytest.approx(p.startup_s + 189 * 0.014 + 2 * (7.6 - 0.064) + 3 * 0.05)
    assert any("the epoch changes 2 times in the run, 7.54 s each" in n for n in p.notes)
    m = periodic_metrics(cap)
    assert (m["epoch_change_s"], m["epoch_changes_count"]) == (pytest.approx(7.536), 2)
    assert m["epoch_change_frac"] == pytest.approx(2 * 7.536 / p.projected_s)
    assert m["periodic_work_frac"] == pytest.approx(3 * 0.05 / p.projected_s)  # the test pass alone (HB002)
    # a test pass that is the whole change (no loader to start) leaves nothing: the projection is as before
    quiet = _capture([replace(evaluate, seconds=2.0)], script_config=config, dataloaders=loaders, steps=(14.0,) * 20,
                     epoch_gaps=(EpochGap(63, 2.02),))
    assert [f.function for f in project(quiet).functions] == ["evaluate"]
