"""Verdicts from synthetic samples: the statistics alone, no runs."""

from __future__ import annotations

import math

import pytest

from advisor.fixes.stats import estimate, loss_parity, paired_ratios, t_quantile


def test_clear_win_is_improved_with_an_interval_above_one():
    est = estimate([1.82, 1.91, 1.87])
    assert est.verdict == "improved"
    assert est.speedup == pytest.approx(1.87)
    assert 1.0 < est.ci_low < est.speedup < est.ci_high


def test_noise_around_one_is_no_effect():
    assert estimate([0.97, 1.04, 1.01]).verdict == "no_effect"


def test_consistent_but_tiny_gain_is_no_effect():
    # The interval excludes 1.0 but 1.5% is below the minimum effect.
    est = estimate([1.015, 1.016, 1.014])
    assert est.ci_low > 1.0
    assert est.verdict == "no_effect"


def test_wide_disagreement_is_undecided_never_a_win_even_with_a_high_median():
    # NOTE: this case was "no_effect" until the verdict told a tight interval around 1 (no
    # effect) from one too wide to decide: [0.8, 1.6, 1.3] allows anything from 0.5x to 2.9x.
    est = estimate([0.8, 1.6, 1.3])
    assert est.ci_low < 1.0
    assert est.verdict == "undecided"
    assert "too noisy to decide" in est.reason and "interval [" in est.reason


def test_a_large_median_loss_inside_a_wide_interval_is_not_no_effect():
    # the combination "measured 0.53x" and called no effect
    est = estimate([0.53, 0.35, 1.05])
    assert est.ci_low < 1.0 < est.ci_high
    assert est.verdict == "undecided" and "0.53x" in est.reason
    # a loss of 25% or more that is consistent enough for the interval to end below 1.25
    est = estimate([0.6, 0.78, 1.1, 0.75])
    assert est.ci_high < 1.25 and est.verdict == "undecided" and "measured 0.77x" in est.reason


def test_a_tight_interval_around_one_is_no_effect_with_no_reason():
    est = estimate([0.95, 1.05, 1.0, 0.98])
    assert est.verdict == "no_effect" and est.reason == ""
    assert 1 / 1.25 < est.ci_low < 1.0 < est.ci_high < 1.25


def test_slower_is_slower():
    est = estimate([0.61, 0.66, 0.63])
    assert est.verdict == "slower"
    assert est.ci_high < 1.0


def test_single_pair_needs_a_large_effect_and_has_no_interval():
    assert estimate([1.10]).verdict == "no_effect"
    big = estimate([1.5])
    assert big.verdict == "improved" and big.ci_low is None
    assert estimate([]).verdict == "no_effect"


def test_t_quantiles():
    assert t_quantile(2) == pytest.approx(4.303)
    assert t_quantile(100) == pytest.approx(1.96)


def test_pairs_use_the_baselines_on_both_sides():
    # A drifts down 100 -> 80; the variant run between them at 90 is no change.
    assert paired_ratios([100, 80, 80], [math.sqrt(100 * 80), 160]) == pytest.approx([1.0, 2.0])
    # Failed runs (None) are left out; a missing neighbour falls back to the other one.
    assert paired_ratios([100, None, 100], [None, 150]) == pytest.approx([1.5])


def test_loss_parity_accepts_close_losses_and_rejects_nan_and_far_off():
    base = [2.30, 2.10, 1.90]
    ok = loss_parity(base, [2.31, 2.11, 1.88], rtol=0.1)
    assert ok.failure is None and ok.max_rel_diff == pytest.approx(0.02 / 1.9)
    nan = loss_parity(base, [2.30, float("nan"), 1.9], rtol=0.1)
    assert nan.failure is not None and "nan" in nan.failure
    far = loss_parity(base, [2.3, 4.0, 9.0], rtol=0.25)
    assert far.failure is not None and far.max_rel_diff > 1
    assert loss_parity([], [1.0], rtol=0.1).max_rel_diff is None
    # A near-zero baseline loss does not blow the relative error up.
    assert loss_parity([1.0, 1e-9], [1.0, 2e-9], rtol=0.1).failure is None
