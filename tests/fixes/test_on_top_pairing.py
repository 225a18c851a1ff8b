"""A fix on top of a workers rung: measured beside the rung, against the plain baseline, in one stage."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixes_fakes import FakeRunner, by_fix, refs

from advisor.fixes.loop import run_trials
from advisor.fixes.loop.pairing import estimate_of, still_running
from advisor.fixes.loop.variant import Variant
from advisor.fixes.stats import round_ratios


def _variant(label: str, rates: list[float | None], **kw) -> Variant:
    return Variant(label=label, fix=label, safety="safe", requests=(), loss_rtol=0.1, rates=rates, **kw)


def test_round_ratios_pair_runs_of_the_same_round_and_skip_missing_ones():
    assert round_ratios([100.0, None, 110.0, 90.0], [150.0, 160.0, None, 180.0]) == [1.5, 2.0]
    assert round_ratios([100.0], [120.0, 130.0]) == [1.2]  # the partner's run of round 2 not yet made


def test_a_partnered_variant_is_judged_against_its_partner_not_the_baseline():
    rung = _variant("w", [200.0, 210.0, 190.0], anchor=True)
    top = _variant("c", [300.0, 315.0, 285.0], partner=rung)
    top.ref_rates = [100.0, 100.0, 100.0, 100.0]  # the plain baseline's runs around them
    est = estimate_of(top, 0.03)
    assert est.speedup == pytest.approx(1.5) and est.pairs == 3 and est.verdict == "improved"
    alone = estimate_of(replace(top, partner=None), 0.03)
    assert alone.speedup == pytest.approx(3.0, rel=0.06)  # the same runs against the baseline


def test_an_anchor_runs_while_a_variant_paired_with_it_does():
    rung = _variant("w", [], anchor=True)
    top = _variant("c", [], partner=rung)
    other = _variant("x", [])
    assert still_running([rung, top, other]) == [rung, top, other]
    assert still_running([rung, other]) == [other]
    rung.failure = "crashed"  # nothing left to judge the fix on top against
    assert still_running([rung, top, other]) == [other]


def test_the_fix_on_top_stops_once_decided_against_its_rung_and_the_rung_stops_with_it(spec):
    runner = FakeRunner(effects={"dataloader_workers": lambda p: 1.0 + 0.3 * p["num_workers"], "cpu_threads": 1.5})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads"), runner=runner, make_diff_text=False)
    t = by_fix(out)
    assert t["cpu_threads"].verdict == "improved" and t["cpu_threads"].repeats == 2
    assert t["cpu_threads"].speedup == pytest.approx(1.5, rel=0.03)
    assert "paired with dataloader_workers@2's run of the same round" in t["cpu_threads"].reason
    assert t["cpu_threads"].baseline_samples_per_s == pytest.approx(160.0, rel=0.03)  # "before": the rung's rate
    names = [s.out_dir.name for s in runner.calls]
    stage = names[names.index("on-top-baseline-1"):]
    assert stage == ["on-top-baseline-1", "dataloader_workers-w2-ref-1", "cpu_threads-1", "on-top-baseline-2",
                     "cpu_threads-2", "dataloader_workers-w2-ref-2", "on-top-baseline-3"]
    assert out.kept == ("dataloader_workers", "cpu_threads")
    assert out.combined.speedup == pytest.approx(1.6 * 1.5, rel=0.03)


def test_a_rung_that_fails_beside_the_fix_fails_the_fix_on_top(spec):
    class RungCrashes(FakeRunner):
        def __call__(self, s):
            from advisor.capture.model import RunCapture, ScriptError

            if "-ref-" in s.out_dir.name:
                self.calls.append(s)
                return RunCapture(status="crashed", error=ScriptError("RuntimeError", "worker died"))
            return super().__call__(s)

    runner = RungCrashes(effects={"dataloader_workers": 1.5, "cpu_threads": 1.3})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads"), runner=runner, make_diff_text=False)
    t = by_fix(out)
    assert t["cpu_threads"].verdict == "failed"
    assert "whose own runs failed in this measurement" in t["cpu_threads"].reason and "worker died" in t["cpu_threads"].reason
    assert out.kept == ("dataloader_workers",)
    # the fix on top stopped with its rung, unrun: the round's closing baseline, then nothing
    assert [s.out_dir.name for s in runner.calls][-3:] == ["on-top-baseline-1", "dataloader_workers-w2-ref-1",
                                                          "on-top-baseline-2"]


def test_a_set_the_on_top_stage_did_not_run_together_is_measured_in_a_stage_of_its_own(spec):
    # workers, cpu_threads on top and a fused optimizer: the set of three was never run together
    runner = FakeRunner(effects={"dataloader_workers": 1.5, "cpu_threads": 1.3, "fused_optimizer": 1.2})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads", "fused_optimizer"), runner=runner,
                     unsafe=True, make_diff_text=False)
    assert out.kept == ("dataloader_workers", "cpu_threads", "fused_optimizer")
    assert any(s.out_dir.name.startswith("combined-") for s in runner.calls)
    assert out.combined.speedup == pytest.approx(1.5 * 1.3 * 1.2, rel=0.04)
