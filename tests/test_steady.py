"""The steady-state test of a window of step times (advisor._steady)."""

from __future__ import annotations

import random

import pytest

from advisor._steady import Steadiness, SteadyState, assess, spread, steady_rate, steady_times


def _noise(n: int, level: float = 100.0, sd: float = 0.1, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [level * rng.lognormvariate(0.0, sd) for _ in range(n)]


def test_twelve_slow_steps_before_the_steady_ones_are_cut_off_and_named():
    rng = random.Random(3)
    times = [rng.uniform(400, 1087) for _ in range(12)] + _noise(48, 118.0, 0.03)
    verdict = assess(times)
    assert verdict.state is SteadyState.SETTLED_LATE
    assert (verdict.start, verdict.used, verdict.total) == (12, 48, 60)
    assert verdict.steady
    assert 110 < verdict.median_ms < 126
    assert "first 12 of 60 steps were slower" in verdict.detail
    assert steady_times(times) == times[12:]


def test_noise_alone_is_steady_in_nearly_every_window():
    flagged = sum(not assess(_noise(n, sd=0.12, seed=s)).steady for s in range(400) for n in (8, 20, 60))
    assert flagged <= 0.02 * 1200


@pytest.mark.parametrize(
    ("times", "state"),
    [
        ([100.0] * 12 + [180.0] * 12, SteadyState.SHIFTED),  # got slower half-way: not a warm-up
        ([100.0, 300.0] * 10, SteadyState.BIMODAL),  # alternating steps: two populations
        ([100.0 * (1 + 0.03 * i) for i in range(30)], SteadyState.SHIFTED),  # a ramp splits best in two
    ],
)
def test_unsteady_windows_are_named(times, state):
    verdict = assess(times)
    assert verdict.state is state
    assert not verdict.steady
    assert (verdict.start, verdict.used) == (0, len(times))  # an unsteady window is used whole
    assert verdict.detail


def test_a_slow_drift_with_scatter_is_drifting():
    rng = random.Random(0)
    times = [100.0 * (1 + 0.012 * i) * rng.lognormvariate(0, 0.08) for i in range(60)]
    verdict = assess(times)
    assert verdict.state in (SteadyState.DRIFTING, SteadyState.SHIFTED)
    assert not verdict.steady


def test_a_slow_start_followed_by_a_short_tail_is_not_called_settled():
    times = [500.0] * 17 + [100.0] * 4
    assert assess(times).state is not SteadyState.SETTLED_LATE


def test_too_few_steps_are_steady_and_an_outlier_is_not_a_population():
    assert assess([100.0, 900.0, 100.0]).state is SteadyState.STEADY
    times = _noise(40, sd=0.03)
    times[20] = 2000.0
    assert assess(times).steady


def test_spread_and_rate_over_the_steady_part():
    times = [400.0] * 10 + [100.0] * 40
    assert spread([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, 1.4, 4.6)
    per_s, steps_s = steady_rate(times, [32] * 50)
    assert per_s == pytest.approx(320.0)
    assert steps_s == pytest.approx(10.0)
    assert steady_rate(times, [32] * 49 + [None]) == (None, pytest.approx(10.0))
    assert steady_rate([], []) == (None, None)


def test_part_selects_aligned_values():
    verdict = Steadiness(SteadyState.SETTLED_LATE, 2, 3, 5, 1.0, 1.0, 1.0)
    assert verdict.part(["a", "b", "c", "d", "e"]) == ["c", "d", "e"]


def test_steps_scattered_over_twice_their_fastest_are_not_steady():
    rng = random.Random(5)
    times = [rng.uniform(250.0, 3200.0) for _ in range(20)]
    verdict = assess(times)
    assert verdict.state is SteadyState.SCATTERED and not verdict.steady
    assert "scatter from" in verdict.detail
