"""Runs of one setting that disagree: the range verdict and what the slow runs shared."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from advisor._steady import SteadyState
from advisor.capture.kernel_use import KernelUse
from advisor.fixes.agreement import RunFacts, disagreement, explain, facts_of, rate_range
from advisor.fixes.stats import estimate, paired_ratios, range_estimate

# The baseline runs of the issue: one unchanged script, one diagnose.
CHAOTIC = [614.0, 54.0, 747.0, 31.0, 94.0, 740.0, 1070.0]


def test_runs_within_a_factor_of_two_agree_and_wider_ones_do_not():
    assert disagreement([100.0, 112.0, 95.0, 160.0]) is None  # a quiet machine's run-to-run spread
    assert disagreement([100.0, 200.0]) == (100.0, 200.0)
    assert disagreement(CHAOTIC) == (31.0, 1070.0)
    assert disagreement([100.0, None, 0.0]) is None  # one run measured: nothing to compare


def test_a_loader_fix_on_a_chaotic_baseline_is_not_measurable_here():
    # The prefetch_factor: 3.93x [1.57-9.38] from pairs of such runs, nothing when timed plainly.
    variant = [700.0, 760.0, 690.0, 720.0, 810.0, 705.0]
    paired = estimate(paired_ratios(CHAOTIC, variant))
    ranged = range_estimate(CHAOTIC, variant)
    assert ranged.verdict == "unmeasurable"
    assert "not measurable here" in ranged.reason
    assert ranged.ci_low == pytest.approx(690 / 1070) and ranged.ci_high == pytest.approx(810 / 31)
    assert ranged.ci_low <= ranged.speedup <= ranged.ci_high
    assert paired.speedup > 1.5  # what pairs of such runs "show"


def test_a_fix_whose_slowest_run_beats_the_fastest_baseline_is_faster_even_on_a_noisy_machine():
    # cpu_threads beside a busy process: 117, 49, 137 samples/s against 641, 658.
    ranged = range_estimate([117.0, 49.0, 137.0], [641.0, 658.0])
    assert ranged.verdict == "improved"
    assert ranged.ci_low == pytest.approx(641 / 137)
    assert ranged.ci_high == pytest.approx(658 / 49)
    assert ranged.ci_low <= ranged.speedup <= ranged.ci_high


def test_a_fix_whose_fastest_run_loses_to_the_slowest_baseline_is_slower():
    assert range_estimate([100.0, 140.0], [50.0, 60.0]).verdict == "slower"
    assert range_estimate([], [50.0]).verdict == "no_effect"


def test_explain_names_what_separates_the_slow_runs():
    runs = [
        RunFacts(600.0, start="warm", other_frac=0.1, load=1.0),
        RunFacts(700.0, start="warm", other_frac=0.15, load=1.1),
        RunFacts(40.0, start="cold", other_frac=0.6, load=3.0),
        RunFacts(60.0, start="cold", other_frac=0.55, load=2.9),
    ]
    why = explain(runs)
    assert "cold-started runs were the slow ones" in why
    assert "other processes took 55%–60% of the CPU during the slow runs against 10%–15%" in why
    assert "load average" not in why  # the CPU share already says it


def test_explain_says_nothing_when_no_recorded_condition_separates_them():
    runs = [RunFacts(600.0, other_frac=0.5), RunFacts(40.0, other_frac=0.2), RunFacts(45.0, other_frac=0.7)]
    assert explain(runs) == ""


def test_explain_names_page_faults_that_separate_the_slow_runs():
    runs = [RunFacts(600.0, faults_per_step=250.0), RunFacts(650.0, faults_per_step=115.0),
            RunFacts(250.0, faults_per_step=2700.0), RunFacts(280.0, faults_per_step=2300.0)]
    assert "the slow runs took 2300–2700 page faults per step, the fast ones 115–250" in explain(runs)
    close = [RunFacts(600.0, faults_per_step=2000.0), RunFacts(250.0, faults_per_step=2600.0)]
    assert "page faults" not in explain(close)  # separated, but not a factor of 2 apart


def test_explain_names_unsteady_runs():
    runs = [
        RunFacts(600.0),
        RunFacts(40.0, steadiness=SteadyState.BIMODAL, steady_detail="the steps fall in two groups"),
    ]
    assert "1 of the 2 runs were not steady inside (in the slowest of them, the steps fall in two groups)" in explain(runs)


def test_facts_are_read_from_a_capture():
    cap = SimpleNamespace(
        start="warm", cpu=SimpleNamespace(load_avg_mean=2.5, other_util_frac=0.4, max_threads=18),
        timed=SimpleNamespace(step_times_ms=(100.0,) * 12 + (300.0,) * 12),
        kernel=KernelUse(steps=24, minor_faults=48_000),
    )
    facts = facts_of(cap, 50.0)
    assert facts.faults_per_step == 2000.0
    assert (facts.start, facts.load, facts.other_frac, facts.threads) == ("warm", 2.5, 0.4, 18)
    assert facts.steadiness is SteadyState.SHIFTED
    assert rate_range([None, 3.0]) is None



def test_each_arms_step_and_epoch_change_are_the_medians_over_its_runs():
    from advisor.fixes.agreement import arm_medians, change_note

    base = [RunFacts(400.0, step_ms=14.0, epoch_gap_s=8.6), RunFacts(1300.0, step_ms=15.0),
            RunFacts(410.0, step_ms=13.0, epoch_gap_s=8.8)]
    fix = [RunFacts(900.0, step_ms=14.0, epoch_gap_s=3.4), RunFacts(860.0, step_ms=14.5, epoch_gap_s=3.6)]
    assert arm_medians(fix, base) == {
        "step_ms": pytest.approx(14.25), "baseline_step_ms": 14.0,
        "epoch_change_s": pytest.approx(3.5), "baseline_epoch_change_s": pytest.approx(8.7)}
    assert change_note(fix, base) == ("the epoch change (left out of the rate) took 8.60-8.80 s over 2 runs without "
                                      "it and 3.40-3.60 s over 2 runs with it (every run of one side beyond every "
                                      "run of the other)")
    # overlapping runs (a fix that did nothing to the change): no change with the fix, said so
    same = [RunFacts(400.0, step_ms=13.0, epoch_gap_s=8.7), RunFacts(400.0, step_ms=13.0, epoch_gap_s=9.7)]
    assert arm_medians(same, base)["epoch_change_s"] is None
    assert "held in the whole-run projection" in change_note(same, base)
    assert arm_medians(fix[:1], base)["epoch_change_s"] is None  # one run a side is too few
    assert change_note(fix, [RunFacts(400.0, step_ms=14.0)]) == ""  # no baseline run saw one
