"""The diagnose's timing line: the whole, its overhead, and where the overhead went (report.style)."""

from __future__ import annotations

from advisor.report.style import timing_line


def _timing(**phases: float) -> dict:
    return {"total_s": 20.0, "capture_s": 8.0, "trials_s": 11.0, "trial_runs": 5, "starts": {"warm": 5},
            "measured_s": 12.0, "overhead_s": 8.0, "phases_s": {"timed": 10.0, "profiled": 1.5, "cprofile": 0.5, **phases}}


def test_the_overhead_is_named_part_by_part_largest_first() -> None:
    line = timing_line(_timing(setup=2.0, warmup=1.0, imports=1.5, process=0.5, export=0.8, finishing=0.02, server=1.7))
    assert line is not None and line.startswith("Diagnose took 20.0 s (capture 8.0 s, 5 trial runs (5 warm-started) 11.0 s)")
    assert "overhead 8.0 s (40%)" in line
    assert line.endswith(": the script's set-up and first step 2.0 s, waiting for the warm-start server 1.7 s, imports "
                         "1.5 s, warm-up 1.0 s, trace export 0.8 s, process start and end 0.5 s, analysis and reports 0.5 s.")
    assert "the runs' ends" not in line  # 0.02 s: not worth naming


def test_measured_phases_are_never_overhead_parts() -> None:
    line = timing_line(_timing(setup=8.0))
    assert line is not None and line.endswith("the script's set-up and first step 8.0 s.")
    assert "timed" not in line and "profiled" not in line


def test_without_phases_the_rest_is_all_analysis() -> None:
    timing = _timing()
    timing["phases_s"] = {}
    line = timing_line(timing)
    assert line is not None and line.endswith("everything but the measured steps: analysis and reports 8.0 s.")


def test_an_export_that_leads_the_overhead_says_what_shortens_it() -> None:
    line = timing_line(_timing(export=5.0, setup=1.0))
    assert line is not None and "measured steps: trace export 5.0 s (fewer --profile-steps shorten it), analysis" in line
    assert "--profile-steps" not in (timing_line(_timing(export=2.5, setup=3.0)) or "")
