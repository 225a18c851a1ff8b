"""The profiled window's export budget: a slow-to-export step profiles fewer steps (advisor.capture.budget)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from advisor.capture.budget import (
    MIN_PROFILED_STEPS,
    StepSize,
    TraceBound,
    plan_trace,
)
from advisor.capture.model import RunSpec

MB = 2**20
GRU_STEP = StepSize(total_bytes=13 * MB, stack_bytes=MB, memory_bytes=3 * MB, export_s=0.67)
"""A small GRU's probed step (2026-11-29): 13 MB, 0.67 s to stop the profiler and export it."""


def test_a_slow_step_is_profiled_as_often_as_the_budget_allows_options_kept() -> None:
    bound = plan_trace(replace(GRU_STEP, export_s=0.19), 256 * MB, 10, export_budget_s=2.0)
    assert (bound.steps, bound.stacks, bound.memory, bound.by_time) == (10, True, True, False)
    bound = plan_trace(replace(GRU_STEP, export_s=0.4), 256 * MB, 10, export_budget_s=2.0)
    assert (bound.steps, bound.stacks, bound.memory, bound.by_time) == (5, True, True, True)
    assert bound.step_export_s == 0.4 and bound.export_budget_s == 2.0 and bound.bounded


def test_the_export_budget_never_goes_below_the_minimum() -> None:
    bound = plan_trace(GRU_STEP, 256 * MB, 10, export_budget_s=2.0)
    assert bound.steps == MIN_PROFILED_STEPS and bound.by_time
    assert plan_trace(replace(GRU_STEP, export_s=30.0), 256 * MB, 2, export_budget_s=2.0).steps == 2  # asked fewer


def test_the_size_plan_wins_when_it_is_smaller() -> None:
    # 40 MB of budget (36 MB of room): two steps would not fit with every option; the size plan drops
    # memory events and keeps three, fewer than the export budget's five
    bound = plan_trace(replace(GRU_STEP, export_s=0.4), 40 * MB, 10, export_budget_s=2.0)
    assert (bound.steps, bound.memory, bound.by_time) == (3, False, False)


@pytest.mark.parametrize("kw", [{"export_budget_s": None}, {"fixed_steps": True, "export_budget_s": 2.0}])
def test_no_budget_an_untimed_step_or_a_job_keep_the_steps(kw: dict[str, Any]) -> None:
    assert plan_trace(GRU_STEP, 256 * MB, 10, **kw).steps == 10  # a job's ranks must stop at the same step
    assert plan_trace(replace(GRU_STEP, export_s=None), 256 * MB, 10, export_budget_s=2.0).steps == 10


def test_the_sentence_says_the_export_time_set_the_steps() -> None:
    bound = TraceBound(budget_bytes=256 * MB, step_bytes=13 * MB, asked_steps=10, steps=3, step_export_s=0.673,
                       export_budget_s=2.0, by_time=True, exported_bytes=39 * MB)
    assert bound.text() == (
        "trace bounded to 3 of 10 profiled steps: one step took 0.67 s to stop and export (13 MB), and the "
        "profiled window's export is kept near 2 s (an explicit --profile-steps is kept); the trace exported 39 MB"
    )


def test_a_spec_has_no_export_budget_unless_given_one() -> None:
    # the command line and api.diagnose give the default one when the profiled steps were not asked
    assert RunSpec(script=Path("train.py")).trace_export_s is None


def test_a_cut_window_ends_the_progress_bar_full(tmp_path: Path) -> None:
    from advisor.capture.model import RunCapture, RunStatus
    from advisor.capture.run import EventRelay, report_done, steps_total

    spec = RunSpec(script=tmp_path / "train.py", profiled_steps=10)
    asked = steps_total(spec)
    bound = TraceBound(budget_bytes=256 * MB, step_bytes=13 * MB, asked_steps=10, steps=3, by_time=True)
    seen: list[Any] = []
    done = RunCapture(run_dir=str(tmp_path), status=RunStatus.STOPPED, steps_seen=asked - 7, trace_bound=bound)
    report_done(seen.append, EventRelay(tmp_path / "events.jsonl", None), spec, done, 1.0)
    assert seen[-1].step == seen[-1].steps_total == asked - 7
    report_done(seen.append, EventRelay(tmp_path / "events.jsonl", None), spec, replace(done, trace_bound=None), 1.0)
    assert seen[-1].steps_total == asked  # nothing cut: the steps asked for
