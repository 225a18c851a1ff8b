"""Generation without a KV cache and one-sample inference: costed per line and projected over the run."""

from __future__ import annotations

import pytest

from advisor.capture.between import BetweenWork
from advisor.capture.generation import CallPattern, SiteWork
from advisor.capture.model import RunCapture
from advisor.capture.records import TimedPhase
from advisor.metrics.generation import repeated_calls
from advisor.metrics.periodic import periodic_locations, periodic_metrics, project

FILE = "/home/u/train.py"


def _work(step, seconds, pattern=CallPattern.GENERATION_NO_CACHE, profiled=False, calls=100, batch=2,
          function="generate", line=52):
    site = SiteWork(FILE, function, line, calls=calls, seconds=seconds, pattern=pattern, batch=batch, positions=40.0)
    return BetweenWork(function=function, file=FILE, line=48, step=step, seconds=seconds, calls=calls,
                       profiled=profiled, site=site)


def _capture(works, hints=None):
    return RunCapture(script=FILE, between_steps=tuple(works), run_hints={"max_iters": 1000} if hints is None else hints,
                      timed=TimedPhase(step_times_ms=(10.0,) * 20, time_to_first_step_s=2.0),
                      phases_s={"process": 0.5})


def test_one_line_is_costed_from_its_best_measured_occurrences():
    # the iteration-0 occurrence (hooks on every module) and a profiled one are left out
    (r,) = repeated_calls([_work(0, 3.0), _work(50, 1.0), _work(100, 1.2), _work(150, 4.0, profiled=True)])
    assert (r.pattern, r.function, r.line, r.cost_s, r.calls, r.tokens, r.positions) == (
        CallPattern.GENERATION_NO_CACHE, "generate", 52, 1.1, 100, 200, 40.0)


def test_cached_generation_and_evaluation_are_not_named():
    assert repeated_calls([_work(50, 1.0, CallPattern.GENERATION_CACHED), _work(100, 1.0, CallPattern.OTHER)]) == ()
    assert repeated_calls([BetweenWork(function="estimate_loss", step=50, seconds=1.0)]) == ()  # an older capture


def test_generation_share_is_of_the_projected_run():
    cap = _capture([_work(0, 1.0), _work(50, 1.0)])
    p = project(cap)
    m = periodic_metrics(cap)
    # 20 occurrences (0, 50, ..., 950) of 1 s in 1,000 steps of 10 ms after 0.5 + 2.0 - 0.01 - 1.0 s of start-up
    assert p.projected_s == pytest.approx(1.49 + 10.0 + 20.0)
    assert m["generation_frac"] == pytest.approx(20.0 / p.projected_s)
    assert (m["generation_calls_count"], m["generation_tokens_count"], m["generation_positions_count"]) == (100, 200, 40)
    assert (m["generation_period_steps"], m["generation_occurrences_count"], m["generation_s"]) == (50, 20, 1.0)
    assert m["one_sample_frac"] is None
    locs = [(loc.kind, loc.line, loc.function) for loc in periodic_locations(cap)]
    assert locs == [("periodic", 48, "generate"), ("generation", 52, "generate")]


def test_without_a_length_the_share_is_of_the_steady_training():
    cap = _capture([_work(0, 0.5, CallPattern.ONE_SAMPLE, batch=1), _work(10, 0.5, CallPattern.ONE_SAMPLE, batch=1)],
                   hints={})
    m = periodic_metrics(cap)
    # 0.5 s every 10 steps of 10 ms: 0.05 / (0.05 + 0.01)
    assert m["one_sample_frac"] == pytest.approx(0.05 / 0.06)
    assert (m["one_sample_calls_count"], m["one_sample_period_steps"], m["generation_frac"]) == (100, 10, None)
    assert [loc.kind for loc in periodic_locations(cap)] == ["periodic", "one_sample"]
