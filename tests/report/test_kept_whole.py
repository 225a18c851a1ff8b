"""The kept fixes over the whole run as ``advisor diagnose`` sets them in its report (:func:`advisor.api.fixloop.with_kept_whole`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from report_fixtures import make_report

from advisor.api.fixloop import with_kept_whole
from advisor.capture.between import BetweenWork
from advisor.capture.model import RunCapture
from advisor.capture.records import TimedPhase


def test_the_kept_fixes_are_projected_over_the_run_with_the_trials_start_up_change(tmp_path: Path) -> None:
    def work(step: int, seconds: float) -> BetweenWork:
        return BetweenWork(function="evaluate", file="t.py", line=3, step=step, seconds=seconds)

    base = RunCapture(script="t.py", between_steps=(work(0, 1.4), work(20, 1.0)), run_hints={"max_iters": 2000},
                      timed=TimedPhase(step_times_ms=(10.0,) * 20, time_to_first_step_s=3.0), phases_s={"process": 0.5})
    report = make_report()
    trial = dataclasses.replace(report.kept_trial, time_to_first_step_s=1.5, baseline_time_to_first_step_s=1.1)
    report = dataclasses.replace(report, combined=trial)
    RunCapture(script="t.py", between_steps=(work(0, 2.0), work(20, 1.7))).save(tmp_path)
    whole = with_kept_whole(report, base, tmp_path).kept_whole
    assert whole.startup_after_s == pytest.approx(whole.startup_before_s + 0.4)
    assert whole.after_s == pytest.approx(whole.startup_after_s + 20.0 / trial.speedup + 100.0)
    assert (whole.periodic[0].seen_s, whole.periodic[0].seen) == (1.7, 1)
    # no kept run folder (or an unreadable one): the same projection, nothing seen
    missing = with_kept_whole(report, base, tmp_path / "absent").kept_whole
    assert missing.after_s == whole.after_s and missing.periodic[0].seen_s is None
    # nothing kept, or no capture to project from: unchanged
    assert with_kept_whole(dataclasses.replace(report, kept_fixes=()), base, tmp_path).kept_whole is None
    assert with_kept_whole(report, None, tmp_path).kept_whole is None


def test_a_kept_fix_whose_gain_ends_partway_is_projected_on_the_steps_before(tmp_path: Path) -> None:
    base = RunCapture(script="t.py", run_hints={"max_iters": 150},
                      timed=TimedPhase(step_times_ms=(10.0,) * 20, time_to_first_step_s=1.0))
    report = make_report()
    malloc = dataclasses.replace(report.kept_trial, fix="malloc_thresholds", fixes=("malloc_thresholds",),
                                 time_to_first_step_s=None)
    report = dataclasses.replace(report, kept_fixes=("malloc_thresholds",), combined=malloc,
                                 summary={**report.summary, "page_faults_stopped_after_steps": 50.0})
    whole = with_kept_whole(report, base, None).kept_whole
    assert whole.gain_steps == 50
    assert whole.after_s == pytest.approx(whole.startup_after_s + (50 / malloc.speedup + 100) * 0.01)
    # the faults went on (no such metric), or a set of fixes: every step
    going = dataclasses.replace(report, summary={**report.summary, "page_faults_stopped_after_steps": None})
    assert with_kept_whole(going, base, None).kept_whole.gain_steps is None
    pair = dataclasses.replace(report, kept_fixes=("malloc_thresholds", "cpu_threads"),
                               combined=dataclasses.replace(malloc, fixes=("malloc_thresholds", "cpu_threads")))
    assert with_kept_whole(pair, base, None).kept_whole.gain_steps is None
