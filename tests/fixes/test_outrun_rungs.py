"""A ladder's rung stops once another rung of the same fix was decided faster (fixes.loop.stops)."""

from __future__ import annotations

from fixes_fakes import FakeRunner, by_fix, refs

from advisor.fixes.loop import run_trials
from advisor.fixes.loop.stops import outrun_by
from advisor.fixes.loop.variant import Variant


def _workers(one: float, two: float, noise: float) -> FakeRunner:
    return FakeRunner(effects={"dataloader_workers": lambda p: {1: one, 2: two}[p["num_workers"]]}, noise=noise)


def _runs(runner: FakeRunner, workers: int) -> int:
    return sum(1 for s in runner.calls for f in s.fixes
               if f.id == "dataloader_workers" and f.params.get("num_workers") == workers)


def test_a_slower_rung_stops_when_a_faster_one_is_decided(spec):
    # one worker a small, noisy gain that earned extra rounds; two workers a clear one
    runner = _workers(1.06, 1.8, noise=0.04)
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False)
    t = by_fix(out)["dataloader_workers"]
    assert t.params == {"num_workers": 2} and t.verdict == "improved"
    assert _runs(runner, 2) == 2  # decided at the first look
    assert _runs(runner, 1) == 2  # stopped at the same look: no third pair, no extra rounds
    exhaustive = _workers(1.06, 1.8, noise=0.04)
    run_trials(spec, refs("dataloader_workers"), runner=exhaustive, make_diff_text=False, early_stop=False)
    assert _runs(exhaustive, 1) >= 3  # --exhaustive measures every rung every round


def test_the_outrun_rung_says_why_it_stopped(spec):
    runner = _workers(1.06, 1.8, noise=0.04)
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False)
    reason = by_fix(out)["dataloader_workers"].reason
    # the kept rung's reason carries the ladder: the one-worker rung's own verdict is in it
    assert "ladder 1 workers:" in reason and "2 workers: 1.8" in reason
    assert "stopped after 2 pairs: a faster rung was decided)" in reason.split("ladder 1 workers:")[1].split(", 2 workers")[0]


def test_a_faster_rung_is_never_outrun_by_a_slower_decided_one(spec):
    # one worker decides first at a modest gain; two workers, faster but noisier, runs on
    runner = _workers(1.5, 1.9, noise=0.0)
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False)
    assert by_fix(out)["dataloader_workers"].params == {"num_workers": 2}


def _variant(label: str, fix: str, rates: list[float], refs_: list[float]) -> Variant:
    v = Variant(label=label, fix=fix, safety="safe", requests=(), loss_rtol=0.0)
    v.rates, v.ref_rates = list(rates), refs_
    return v


def test_outrun_by_reads_the_sibling_rungs_of_a_speed_ladder_only():
    base = [100.0, 101.0, 99.0, 100.0]
    slow = _variant("dataloader_workers@1", "dataloader_workers", [104.0, 108.0, 101.0], base)
    fast = _variant("dataloader_workers@2", "dataloader_workers", [180.0, 181.0, 179.0], base)
    other = _variant("cpu_threads", "cpu_threads", [180.0, 181.0, 179.0], base)
    assert outrun_by(slow, [slow, fast, other], 0.03, 0.05) is fast
    assert outrun_by(fast, [slow, fast, other], 0.03, 0.05) is None  # the slower rung outruns nothing
    assert outrun_by(slow, [slow, other], 0.03, 0.05) is None  # another fix is no rung of its ladder
    # an undecided sibling outruns nothing, however high its median
    wild = _variant("dataloader_workers@2", "dataloader_workers", [300.0, 60.0, 250.0], base)
    assert outrun_by(slow, [slow, wild], 0.03, 0.05) is None
    # a memory ladder keeps the first rung that fits, whatever the speed of the others
    fit_a = _variant("fit_accumulation@k2", "fit_accumulation", [90.0, 91.0, 89.0], base)
    fit_b = _variant("fit_accumulation@k4", "fit_accumulation", [150.0, 151.0, 149.0], base)
    assert outrun_by(fit_a, [fit_a, fit_b], 0.03, 0.05) is None
