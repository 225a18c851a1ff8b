"""Honest compare: intervals over runs only, the script's measured noise, busy machines, the diagnose's trial."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import sys
from pathlib import Path

import pytest
from report_fixtures import make_after_report, make_report

from advisor.api import compare_paths, regression
from advisor.cli.main import main
from advisor.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from advisor.report.compare import NOT_MEASURABLE, compare_groups, compare_reports
from advisor.report.compare_render import render_comparison
from advisor.report.compare_stats import (
    DEFAULT_NOISE_BAND,
    MIN_EFFECT_BAND,
    SUB_MS_NOISE_BAND,
    contention_warning,
    default_noise_band,
    group_ratio,
    kept_trial,
    noise_from_values,
    run_dir_noise,
)

BUSY = (
    "measured while other work competed for the cores (load average 3.9 on 2 cores, other processes used "
    "61% of the CPU, this run got 38%): step times, shares of the step and fix speedups may differ on a quiet "
    "machine; the primary category (data_loading) was decided from these timings"
)


def invoke(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def at_rate(report, samples_per_s: float, run_dir: str | None = None, busy: bool = False):
    """The report with its run at ``samples_per_s`` (and marked busy: the contention warning)."""
    run = dataclasses.replace(report.run, samples_per_s=samples_per_s, run_dir=run_dir or report.run.run_dir)
    summary = {**report.summary, "samples_per_s": samples_per_s, "contention_flag": 1.0 if busy else 0.0}
    warnings = (*report.warnings, BUSY) if busy else report.warnings
    return dataclasses.replace(report, run=run, summary=summary, warnings=warnings)


@functools.cache
def _base():
    return make_report()


def runs(rates, name="run"):
    return [at_rate(_base(), r, f"runs/{name}{i}") for i, r in enumerate(rates)]


# --- intervals over runs ----------------------------------------------------------------------


def test_one_run_a_side_has_no_interval() -> None:
    r = group_ratio([100.0], [120.0])
    assert r.speedup == pytest.approx(1.2) and r.ci_low is None and r.ci_high is None


def test_the_interval_is_over_runs_and_pools_their_spread() -> None:
    r = group_ratio([100.0, 104.0, 98.0], [120.0, 118.0, 125.0])
    assert r.speedup == pytest.approx(math.exp(sum(map(math.log, (120, 118, 125))) / 3) /
                                      math.exp(sum(map(math.log, (100, 104, 98))) / 3))
    assert 1.0 < r.ci_low < r.speedup < r.ci_high < 1.4
    wider = group_ratio([100.0, 130.0, 80.0], [120.0, 118.0, 125.0])
    assert wider.ci_high - wider.ci_low > r.ci_high - r.ci_low
    one_side = group_ratio([100.0], [120.0, 118.0, 125.0])  # the repeats on one side give the spread
    assert one_side.ci_low is not None and one_side.ci_low < one_side.speedup < one_side.ci_high


def test_the_point_always_lies_inside_its_interval() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.lognormvariate(5, rng.uniform(0.01, 1.5)) for _ in range(rng.randint(1, 6))]
        b = [rng.lognormvariate(5.2, rng.uniform(0.01, 1.5)) for _ in range(rng.randint(1, 6))]
        r = group_ratio(a, b)
        if r.ci_low is not None:
            assert r.ci_low <= r.speedup <= r.ci_high
            # centred in log space: the point is the interval's geometric middle
            assert math.sqrt(r.ci_low * r.ci_high) == pytest.approx(r.speedup)
        cmp = compare_groups(runs(a), runs(b, "b"))
        if cmp.ci_low is not None:
            assert cmp.ci_low <= cmp.speedup <= cmp.ci_high


def test_groups_of_unchanged_runs_are_no_measurable_effect() -> None:
    cmp = compare_groups(runs([100, 93, 108]), runs([97, 105, 99], "b"))
    assert cmp.verdict == "no measurable effect" and cmp.ci_low < 1 < cmp.ci_high
    assert cmp.before_runs == ("runs/run0", "runs/run1", "runs/run2") and len(cmp.after_values) == 3
    assert cmp.noise_band is None  # the interval decides, not a band
    assert any("t interval over runs (3 before, 3 after)" in n for n in cmp.notes)
    assert "and 2 more run(s)" in cmp.before
    text = render_comparison(cmp, "text")
    assert "3 before · 3 after (interval over runs)" in text


def test_groups_that_differ_beyond_their_spread_are_faster() -> None:
    cmp = compare_groups(runs([100, 102, 99]), runs([130, 128, 133], "b"))
    assert cmp.verdict == "faster" and cmp.ci_low > 1.0
    assert cmp.ci_low <= cmp.speedup <= cmp.ci_high


def test_an_interval_clear_of_one_but_under_the_minimum_effect_is_no_change() -> None:
    cmp = compare_groups(runs([100.0, 100.1, 100.05]), runs([101.0, 101.1, 101.05], "b"))
    assert cmp.ci_low > 1.0 and cmp.speedup < 1 + MIN_EFFECT_BAND
    assert cmp.verdict == "no measurable effect"


# --- single runs: the script's noise -----------------------------------------------------------


def baseline_trials(run: Path, rates) -> Path:
    for i, rate in enumerate(rates, 1):
        folder = run / "trials" / f"baseline-{i}"
        folder.mkdir(parents=True)
        (folder / "capture.json").write_text(json.dumps({"timed": {"samples_per_s": rate, "step_times_ms": [10.0]}}))
    (run / "trials" / "dataloader_workers-w2-1").mkdir()
    return run


def test_the_noise_is_the_spread_of_the_diagnoses_baseline_runs(tmp_path: Path) -> None:
    run = baseline_trials(tmp_path / "run", [100.0, 110.0, 95.0, 104.0])
    noise = run_dir_noise(run)
    assert noise.values == (100.0, 110.0, 95.0, 104.0)
    assert 0.15 < noise.band < 0.35  # 95% prediction band of a new single-run ratio
    (run / "kept").mkdir()
    assert run_dir_noise(run / "kept") == noise  # RUN/kept reads its parent's
    assert run_dir_noise(tmp_path) is None
    assert noise_from_values([100.0], "x") is None
    assert noise_from_values([100.0, 100.0], "x").band == MIN_EFFECT_BAND  # never below the minimum effect
    assert "4 baseline runs" in noise.describe() and "95.0–110" in noise.describe()


def test_single_runs_within_the_measured_noise_are_no_change(tmp_path: Path) -> None:
    noise = run_dir_noise(baseline_trials(tmp_path / "run", [100.0, 140.0, 80.0]))
    assert noise.band > 0.5
    cmp = compare_reports(at_rate(make_report(), 100.0), at_rate(make_report(), 140.0), noise=noise)
    assert cmp.verdict == "no measurable effect" and cmp.ci_low is None
    assert cmp.noise_band == pytest.approx(noise.band)
    assert any(n.startswith("run-to-run noise of this script: 3 baseline runs") for n in cmp.notes)


def test_single_runs_without_known_noise_use_the_default_band() -> None:
    base = at_rate(make_report(), 100.0)
    inside = compare_reports(base, at_rate(make_report(), 100.0 * (1 + DEFAULT_NOISE_BAND * 0.9)))
    assert inside.verdict == "no measurable effect" and inside.noise_band == DEFAULT_NOISE_BAND
    assert any("noise is unknown" in n for n in inside.notes)
    outside = compare_reports(base, at_rate(make_report(), 100.0 * (1 + DEFAULT_NOISE_BAND) * 1.1))
    assert outside.verdict == "faster"
    slower = compare_reports(base, at_rate(make_report(), 100.0 / ((1 + DEFAULT_NOISE_BAND) * 1.1)))
    assert slower.verdict == "slower"


def test_api_reads_the_noise_from_either_run_dir(tmp_path: Path) -> None:
    before = baseline_trials(tmp_path / "before", [100.0, 101.0, 99.0])
    make_report().save(before)
    make_after_report().save(tmp_path / "after")
    cmp = compare_paths(before, tmp_path / "after")
    assert cmp.noise_band == pytest.approx(noise_from_values([100.0, 101.0, 99.0], "x").band)


# --- busy machines ------------------------------------------------------------------------------


def test_a_single_run_whose_steps_changed_level_calls_no_change() -> None:
    # The quiet A/A pair that read 2.33x "faster": one run's steps went from 0.95 to 1.78 ms mid-window.
    shifted = (1.23, 0.95, 0.9, 1.36, 1.78, 1.76, 1.79, 1.78, 1.86, 1.73)
    steady = (1.02, 0.71, 0.62, 0.62, 0.61, 0.56, 0.57, 0.65, 0.52, 0.62)

    def run_with(rate: float, times: tuple[float, ...]):
        r = at_rate(make_report(), rate)
        return dataclasses.replace(r, run=dataclasses.replace(r.run, timed_step_times_ms=times))

    # (at 3.5x: the pair's 2.33x is now inside the sub-millisecond band before steadiness is asked)
    cmp = compare_reports(run_with(1760.0, shifted), run_with(6158.0, steady))
    assert cmp.verdict == NOT_MEASURABLE and cmp.speedup == pytest.approx(6158 / 1760)
    assert any("the before run's timed steps were not steady" in n for n in cmp.notes)
    assert regression(compare_reports(run_with(6158.0, steady), run_with(1760.0, shifted)), 5) is None
    # Both steady, sub-millisecond steps: 2.33x is inside their wider band, 3.5x is a change.
    assert compare_reports(run_with(2644.0, steady), run_with(6158.0, steady)).verdict == "no measurable effect"
    assert compare_reports(run_with(1760.0, steady), run_with(6158.0, steady)).verdict == "faster"
    # Both steady at 50 ms per step: the same 2.33x is a change (outside the default factor of 2).
    slow = tuple(50.0 + i % 3 for i in range(10))
    assert compare_reports(run_with(2644.0, slow), run_with(6158.0, slow)).verdict == "faster"
    # Within the noise, an unsteady side changes nothing: no change was going to be called.
    assert compare_reports(run_with(6000.0, shifted), run_with(6158.0, steady)).verdict == "no measurable effect"


def test_sub_millisecond_steps_get_the_wider_band_and_say_why() -> None:
    def run_with(rate: float, step_ms: float):
        r = at_rate(make_report(), rate)
        return dataclasses.replace(r, run=dataclasses.replace(r.run, timed_step_times_ms=(step_ms,) * 10))

    # A quiet A/A pair of tiny_model: two steady runs at per-process levels 0.48x apart.
    cmp = compare_reports(run_with(6500.0, 0.6), run_with(3120.0, 1.25))
    assert cmp.verdict == "no measurable effect" and cmp.noise_band == SUB_MS_NOISE_BAND
    assert any("steps take under 1 ms" in n for n in cmp.notes)
    assert regression(cmp, 5) is None
    assert default_noise_band((40.0, 45.0)) == DEFAULT_NOISE_BAND < default_noise_band((40.0, 0.9))
    assert default_noise_band((None, None)) == DEFAULT_NOISE_BAND


def test_a_busy_side_is_named_and_no_change_is_called_from_it() -> None:
    quiet = at_rate(make_report(), 100.0)
    busy = at_rate(make_report(), 25.0, busy=True)  # the "0.25x slower" from a busy run
    assert contention_warning(busy).startswith("measured while other work competed for the cores (load average 3.9")
    assert contention_warning(quiet) is None
    cmp = compare_reports(quiet, busy)
    assert cmp.verdict == NOT_MEASURABLE and cmp.contended == ("after",)
    assert any(n.startswith("after side measured while other work competed for the cores (load average 3.9") for n in cmp.notes)
    assert any("not called a change" in n for n in cmp.notes)
    assert regression(cmp, 5) is None  # never fails CI on a busy machine's figures
    text = render_comparison(cmp, "text")
    assert "Busy machine" in text and "not measurable" in text
    same = compare_reports(quiet, at_rate(make_report(), 101.0, busy=True))
    assert same.verdict == "no measurable effect" and same.contended == ("after",)


# --- RUN/kept: the diagnose's own trial ---------------------------------------------------------


def test_run_kept_shows_the_diagnoses_interleaved_trial(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_report().save(run)
    make_after_report().save(run / "kept")
    trial = kept_trial(run / "kept")
    assert trial is not None and trial.speedup == pytest.approx(1.589) and trial.ci_low == pytest.approx(1.512)
    assert kept_trial(run) is None and kept_trial(tmp_path / "nope" / "kept") is None
    cmp = compare_paths(run, run / "kept")
    assert cmp.trial == trial
    assert any(n.startswith("the diagnose measured the kept fixes (dataloader_workers) at 1.59× [1.51–1.66] faster")
               for n in cmp.notes)
    for fmt, needle in (("text", "Trial"), ("markdown", "**Trial**"), ("html", "Diagnose&#x27;s trial")):
        out = render_comparison(cmp, fmt)
        assert needle in out and "1.59×" in out, fmt
    assert json.loads(render_comparison(cmp, "json"))["trial"]["ci_high"] == pytest.approx(1.664)


def test_a_comparison_outside_the_trials_interval_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    at_rate(make_report(), 100.0).save(run)
    at_rate(make_after_report(), 631.0).save(run / "kept")  # the 6.31x against a 1.59x trial
    cmp = compare_paths(run, run / "kept")
    note = next(n for n in cmp.notes if n.startswith("the diagnose measured"))
    assert "this comparison's 6.31× lies outside it" in note


def test_one_pair_of_runs_is_judged_by_the_pairs_spread_not_the_means_interval() -> None:
    from advisor.fixes.model import Interval, Trial
    from advisor.report.compare_stats import one_pair_range, trial_note

    # The demo (2026-11-26, quiet): the combination 1.75x [1.67-1.82] over 2 pairs; compare of the
    # capture with the kept run read 1.27x. The mean's interval is not where one pair falls.
    t = Trial(fix="a+b", safety="safe", speedup=1.75, ci_low=1.67, ci_high=1.82, repeats=2, verdict="improved",
              interval=Interval.CI95)
    lo, hi = one_pair_range(t)
    centre, half = (math.log(1.67) + math.log(1.82)) / 2, (math.log(1.82) - math.log(1.67)) / 2
    assert (lo, hi) == pytest.approx((math.exp(centre - half * 3 ** 0.5), math.exp(centre + half * 3 ** 0.5)))
    assert 1.55 < lo < 1.67 and 1.82 < hi < 1.95
    assert "lies outside it" in trial_note(t, 1.27) and "lies outside it" not in trial_note(t, 1.85)
    ranged = Trial(fix="a", safety="safe", speedup=1.3, ci_low=0.8, ci_high=2.1, repeats=3, verdict="unmeasurable",
                   interval=Interval.RUN_RANGE)
    assert one_pair_range(ranged) == (0.8, 2.1)


# --- the gate and the command line --------------------------------------------------------------


def test_fail_on_regression_never_fires_within_the_noise(tmp_path: Path) -> None:
    base = at_rate(make_report(), 100.0)
    within = compare_reports(base, at_rate(make_report(), 100.0 / (1 + DEFAULT_NOISE_BAND * 0.9)))
    assert within.verdict == "no measurable effect" and regression(within, 5) is None
    groups = compare_groups(runs([100, 92, 107]), runs([95, 104, 90], "b"))
    assert groups.verdict == "no measurable effect" and regression(groups, 0) is None
    slower = compare_groups(runs([100, 102, 99]), runs([80, 81, 79], "b"))
    assert slower.verdict == "slower" and "20." in regression(slower, 5)


def test_cli_groups_of_runs(capsys, tmp_path: Path) -> None:
    paths = []
    for i, rate in enumerate((100.0, 104.0, 97.0, 131.0, 127.0, 134.0)):
        at_rate(make_report(), rate, f"runs/r{i}").save(tmp_path / f"r{i}")
        paths.append(str(tmp_path / f"r{i}"))
    code, out, err = invoke(capsys, "compare", "--before", paths[0], "--before", paths[1], "--before", paths[2],
                            "--after", paths[3], "--after", paths[4], "--after", paths[5], "--format", "json")
    assert code == EXIT_OK, err
    data = json.loads(out)
    assert data["verdict"] == "faster" and len(data["before_runs"]) == 3 and data["ci_low"] > 1.0
    # BEFORE AFTER plus more runs of each side
    code, out, _ = invoke(capsys, "compare", paths[0], paths[3], "--before", paths[1], "--after", paths[4],
                          "--format", "json")
    assert code == EXIT_OK and len(json.loads(out)["after_runs"]) == 2
    code, _, err = invoke(capsys, "compare", paths[0])
    assert code == EXIT_USAGE and "BEFORE and AFTER" in err
    code, _, err = invoke(capsys, "compare", "--before", paths[0])
    assert code == EXIT_USAGE and "a run on each side" in err
    code, _, err = invoke(capsys, "compare", "--before", paths[0], "--before", paths[1], "--before", paths[2],
                          "--after", paths[0], "--after", paths[1], "--after", paths[2], "--fail-on-regression", "0")
    assert code == EXIT_OK and "regression" not in err
    code, _, _ = invoke(capsys, "compare", "--before", paths[3], "--before", paths[4], "--before", paths[5],
                        "--after", paths[0], "--after", paths[1], "--after", paths[2], "--fail-on-regression", "5")
    assert code == EXIT_FINDINGS


# --- the A/A benchmark's bookkeeping (its runs replaced by saved reports) -----------------------


def test_the_aa_benchmark_counts_verdicts_and_gate_firings(capsys, monkeypatch, tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "compare_aa.py"
    spec = importlib.util.spec_from_file_location("compare_aa", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "compare_aa", bench)  # its dataclass looks itself up there
    monkeypatch.setattr(sys, "path", list(sys.path))  # it puts benchmarks/ first, for zoo
    spec.loader.exec_module(bench)
    rates = {1: (100.0, 104.0, False), 2: (100.0, 30.0, True), 3: (100.0, 96.0, False)}
    for i, (a, b, busy) in rates.items():
        at_rate(_base(), a).save(tmp_path / "tiny_model" / f"pair{i:02d}-a")
        at_rate(_base(), b, busy=busy).save(tmp_path / "tiny_model" / f"pair{i:02d}-b")
    code = bench.main(["--from", str(tmp_path), "--examples", "tiny_model", "--pairs", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    (row,) = [line for line in out.splitlines() if line.startswith("tiny_model ") and "pair" not in line]
    # 3 pairs: 2 no change, 1 not measurable (busy side, 0.30x), no change called, the gate quiet
    assert row.split()[1:7] == ["3", "2", "1", "0", "0", "1"]
    assert "0.30x-1.04x" in row
