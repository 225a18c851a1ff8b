"""Headline numbers: the timed steps' median, a breakdown that adds up to it, honest rate units."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from report_fixtures import make_report

from advisor.report import headline
from advisor.report.figures import mean_part_ms, median_step_ms
from advisor.report.render import render


def test_step_time_is_the_timed_median_and_the_breakdown_adds_up_to_it() -> None:
    report = make_report()
    timed = report.run.timed_step_times_ms
    assert timed, "the fixture has timed steps"
    step = headline.step_time(report)
    assert step.basis == "timed" and step.steps == len(timed)
    assert step.ms == pytest.approx(statistics.median(timed))
    assert step.ms != pytest.approx(median_step_ms(report))  # the profiled median differs
    parts = headline.part_ms(report)
    assert sum(v for v in parts.values() if v) == pytest.approx(step.ms)
    text = render(report, "text")
    assert f"median of {len(timed)} timed steps (no profiler; p10–p90" in text
    assert "shares of the 5 profiled steps; ms are those shares of the timed median step" in text


def test_without_timed_steps_the_profiled_steps_are_named() -> None:
    report = make_report()
    report = dataclasses.replace(report, run=dataclasses.replace(report.run, timed_step_times_ms=()))
    step = headline.step_time(report)
    assert step.basis == "profiled" and step.ms == median_step_ms(report)
    assert step.caption() == "median of 5 profiled steps"
    assert headline.part_ms(report) == mean_part_ms(report)
    assert "mean share of a step's wall time over the 5 profiled steps" in headline.breakdown_caption(report)


def test_rate_is_steps_per_second_when_no_samples_were_counted() -> None:
    report = make_report()
    assert headline.rate(report)[1] == "samples/s"
    run = dataclasses.replace(
        report.run, samples_per_s=None, timed_samples=(None,) * len(report.run.timed_step_times_ms)
    )
    no_samples = dataclasses.replace(report, run=run, summary={**report.summary, "samples_per_s": None})
    value, unit = headline.rate(no_samples)
    timed = report.run.timed_step_times_ms
    assert unit == "steps/s" and value == pytest.approx(len(timed) / (sum(timed) / 1e3))
    for fmt in ("text", "markdown", "html"):
        out = render(no_samples, fmt)
        assert "steps/s" in out, fmt


def test_a_jobs_profiled_steps_are_counted_per_rank() -> None:
    """One profiled step of 8 ranks is not "8 profiled steps" (the DLRM traces of ../shared)."""
    report = make_report()
    rows = tuple({**r, "rank": rank, "step": 12} for rank in range(8) for r in report.steps[:1])
    job = dataclasses.replace(report, steps=rows, run=dataclasses.replace(report.run, timed_step_times_ms=()))
    step = headline.step_time(job)
    assert (step.basis, step.steps, step.ranks) == ("profiled", 1, 8)
    assert step.caption() == "median of 1 profiled step × 8 ranks"
    assert headline.breakdown_caption(job) == "mean share of a step's wall time over the 1 profiled step × 8 ranks"
    assert "8 profiled steps" not in render(job, "text")


def test_twelve_slow_steps_before_the_steady_ones_give_one_step_time_in_every_format() -> None:
    import html
    import json
    import random
    import re

    rng = random.Random(7)
    slow = tuple(rng.uniform(400.0, 1087.0) for _ in range(12))
    steady = tuple(118.0 * rng.uniform(0.98, 1.02) for _ in range(20))
    report = make_report(timed_ms=slow + steady)
    step = headline.step_time(report)
    assert (step.steps, step.skipped, step.steady) == (20, 12, True)
    assert step.ms == pytest.approx(statistics.median(steady))
    assert report.run.step_time_ms == pytest.approx(step.ms) and report.run.steady_from == 12
    parts = headline.part_ms(report)
    assert sum(v for v in parts.values() if v) == pytest.approx(step.ms)
    shown = f"{step.ms:.1f} ms median of 20 steady timed steps"
    mixed = f"{statistics.median(slow + steady):.1f} ms"
    for fmt in ("text", "markdown", "html", "json"):
        out = render(report, fmt)
        if fmt == "json":
            run = json.loads(out)["run"]
            assert run["step_time_ms"] == pytest.approx(step.ms) and run["steady_from"] == 12
            continue
        flat = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", out)).replace("│", " ").replace("**", "").split())
        assert shown in flat, fmt
        assert "the 12 before them were still warming up" in flat, fmt
        assert mixed not in flat, fmt


def test_an_unsteady_window_is_a_warning_with_its_spread_once() -> None:
    from advisor.report.model import steadiness_warnings

    assert steadiness_warnings([100.0] * 20) == ()
    shifted = steadiness_warnings([100.0] * 12 + [180.0] * 12)
    assert len(shifted) == 1 and "changed level after step 12" in shifted[0] and "(p10–p90" in shifted[0]
    import random

    rng = random.Random(5)
    scattered = steadiness_warnings([rng.uniform(250.0, 3200.0) for _ in range(20)])
    assert len(scattered) == 1 and "scatter from" in scattered[0] and scattered[0].count("p10–p90") == 1


def test_the_whole_run_is_in_the_headline_of_every_format_when_projected() -> None:
    report = make_report()
    assert headline.whole_run(report) is None  # no projection: no row
    assert "Whole run" not in render(report, "text")
    summary = {**report.summary, "projected_run_s": 612.4, "projected_steps_count": 3000.0, "startup_s": 4.25,
               "periodic_work_frac": 0.3125}
    projected = dataclasses.replace(report, summary=summary)
    # the exit is said to be left out where no warm-start server timed it
    assert headline.whole_run(projected) == ("612.4 s", "3,000 steps, 4.2 s start-up, exit not timed, 31.2% between steps")
    assert "Whole run" in render(projected, "text") and "612.4 s projected (3,000 steps" in render(projected, "text")
    assert "| **Whole run** | 612.4 s projected (3,000 steps, 4.2 s start-up, exit not timed, 31.2% between steps) |" in render(
        projected, "markdown")
    assert "Whole run (projected)</div><div class=\"v\">612.4 s</div>" in render(projected, "html")
    # an unknown length (no projection) or no work between steps
    assert headline.whole_run(dataclasses.replace(report, summary={**summary, "projected_steps_count": None})) is None
    assert headline.whole_run(dataclasses.replace(report, summary={**summary, "periodic_work_frac": 0.0}))[1] == (
        "3,000 steps, 4.2 s start-up, exit not timed")
    # the interpreter's exit, when the warm-start server timed it
    assert headline.whole_run(dataclasses.replace(report, summary={**summary, "run_end_s": 0.87}))[1] == (
        "3,000 steps, 4.2 s start-up, 0.87 s exit, 31.2% between steps")


def test_the_kept_fixes_over_the_whole_run_are_a_row_of_every_format(tmp_path) -> None:
    from advisor.metrics.whole import KeptWholeRun, PeriodicChange, WholeScope
    from advisor.report.model import Report

    report = make_report()
    assert headline.kept_whole(report) is None and "Kept, whole run" not in render(report, "text")
    whole = KeptWholeRun(WholeScope.RUN, 122.09, 112.49, low=1.05, high=1.12, startup_before_s=2.09,
                         startup_after_s=2.49, periodic=(PeriodicChange("<b>eval</b>", 20, 1.0, 1.6, 1),))
    kept = dataclasses.replace(report, kept_whole=whole)
    head, detail = headline.kept_whole(kept)
    assert head == "122.1 s → 112.5 s projected, 1.09× [1.05–1.12]"
    assert detail == ("start-up 2.1 s → 2.5 s; exit not timed; <b>eval</b> every 20 steps, 1.0 s each, as measured without them "
                      "(the kept fixes' profiled run timed 1.6 s in 1 occurrence: too few to project)")
    assert "Kept, whole run" in render(kept, "text") and "122.1 s → 112.5 s projected" in render(kept, "text")
    markdown = render(kept, "markdown")
    assert "| **Kept, whole run** | 122.1 s → 112.5 s projected, 1.09× \\[1.05–1.12\\]: start-up" in markdown
    assert "<b>" not in markdown
    html = render(kept, "html")
    assert "Kept, whole run</div><div class=\"v\">122.1 s → 112.5 s projected" in html
    assert "<b>eval</b>" not in html and "&lt;b&gt;eval&lt;/b&gt;" in html
    # a seen occurrence near the projected cost is not mentioned; an unknown length reads per step
    near = dataclasses.replace(whole, scope=WholeScope.TRAINING, before_s=0.06, after_s=0.055, low=None, high=None,
                               startup_before_s=None, startup_after_s=None,
                               periodic=(PeriodicChange("evaluate", 20, 1.0, 1.1, 2),))
    assert headline.kept_whole(dataclasses.replace(report, kept_whole=near)) == (
        "1.09× over the steps with their periodic work (the run's length is unknown)",
        "evaluate every 20 steps, 1.0 s each, as measured without them")
    # a gain counted on its first steps only says so
    partway = dataclasses.replace(whole, periodic=(), gain_steps=50)
    assert headline.kept_whole(dataclasses.replace(report, kept_whole=partway))[1] == (
        "start-up 2.1 s → 2.5 s; exit not timed; its speedup counted on the first 50 steps only: after them the baseline had "
        "nothing left for the fix to gain (its finding says why)")
    ended = dataclasses.replace(whole, periodic=(), end_s=0.87)
    assert headline.kept_whole(dataclasses.replace(report, kept_whole=ended))[1] == (
        "start-up 2.1 s → 2.5 s; exit 0.87 s, held")
    # it survives report.json
    kept.save(tmp_path)
    assert Report.load(tmp_path).kept_whole == whole
