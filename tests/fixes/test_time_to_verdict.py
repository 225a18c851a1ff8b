"""Cutting the loop's time (issue #16): Amdahl skips, sequential stops, settled warm-up, a budget."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from fixes_fakes import FakeRunner, by_fix, refs

from advisor.capture.model import RunCapture, RunSpec
from advisor.errors import UsageError
from advisor.fixes.bounds import by_gain, gain_bounds
from advisor.fixes.loop import run_trials
from advisor.fixes.loop.plan import settled_warmup
from advisor.fixes.stats import decided_early, estimate, paired_estimate, paired_ratios
from tests.fakes import Clock

# -- Amdahl bounds -----------------------------------------------------------------------------


def test_bounds_come_from_the_categories_a_fix_shrinks():
    b = gain_bounds(["dataloader_workers", "bf16_autocast", "larger_batch"],
                    {"data_loading": 0.02, "compute": 0.5}, impacts={"larger_batch": 0.4})
    assert b["dataloader_workers"].speedup == pytest.approx(1 / 0.98)
    assert b["dataloader_workers"].strict and b["dataloader_workers"].cannot_reach(0.03)
    assert b["bf16_autocast"].speedup == pytest.approx(2.0) and not b["bf16_autocast"].cannot_reach(0.03)
    # larger_batch's gain is not confined to a category: its findings order it, never skip it
    assert not b["larger_batch"].strict and not b["larger_batch"].cannot_reach(0.03)
    assert by_gain(["dataloader_workers", "larger_batch", "bf16_autocast"], b) == [
        "bf16_autocast", "larger_batch", "dataloader_workers"]
    # no breakdown: nothing is bounded, nothing skipped
    assert not gain_bounds(["dataloader_workers"], {})["dataloader_workers"].cannot_reach(0.03)


def test_on_a_gpu_run_a_fix_that_only_speeds_kernels_is_bounded_by_the_gpus_busy_share():
    # the H200's char-level GPT: compute 84.5% of the step, its GPU busy 15.7% (2026-11-27)
    wanted = ["bf16_autocast", "tf32", "fp16_amp", "channels_last", "cudnn_benchmark", "fused_optimizer"]
    b = gain_bounds(wanted, {"compute": 0.845}, gpu_busy=0.157)
    for fix in wanted[:5]:
        assert b[fix].speedup == pytest.approx(1 / 0.843) and b[fix].strict
        assert b[fix].why == "the GPU is busy 15.7% of the step"
    # the fused optimizer saves the CPU's launches: the compute share still bounds it
    assert b["fused_optimizer"].speedup == pytest.approx(1 / 0.155) and "compute is 84.5%" in b["fused_optimizer"].why
    # a GPU idle all step: faster kernels cannot reach the minimum effect
    assert gain_bounds(["bf16_autocast"], {"compute": 0.6}, gpu_busy=0.002)["bf16_autocast"].cannot_reach(0.03)
    # a CPU run (no GPU share) and a GPU busier than the compute share keep the compute bound
    assert gain_bounds(["tf32"], {"compute": 0.5})["tf32"].speedup == pytest.approx(2.0)
    assert gain_bounds(["tf32"], {"compute": 0.5}, gpu_busy=0.9)["tf32"].speedup == pytest.approx(2.0)


def test_a_fix_whose_bound_cannot_reach_the_minimum_effect_is_skipped_unrun(spec):
    runner = FakeRunner(effects={"dataloader_workers": 1.9, "bf16_autocast": 1.4})
    out = run_trials(spec, refs("dataloader_workers", "bf16_autocast"), unsafe=True, runner=runner,
                     make_diff_text=False, breakdown={"data_loading": 0.01, "compute": 0.9})
    t = by_fix(out)
    assert t["dataloader_workers"].verdict == "skipped"
    assert "Amdahl" in t["dataloader_workers"].reason and "1.010x" in t["dataloader_workers"].reason
    assert runner.runs_with("dataloader_workers") == 0
    assert t["bf16_autocast"].verdict == "improved"
    assert any("Amdahl bound" in n and "dataloader_workers" in n for n in out.notes)


def test_naming_a_fix_runs_it_whatever_its_bound(spec):
    runner = FakeRunner(effects={"dataloader_workers": 1.9})
    out = run_trials(spec, [], only=["dataloader_workers"], runner=runner, make_diff_text=False,
                     breakdown={"data_loading": 0.01, "compute": 0.9})
    assert by_fix(out)["dataloader_workers"].verdict == "improved"


def test_when_every_fix_is_bounded_out_not_even_the_baseline_runs(spec):
    runner = FakeRunner()
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False,
                     breakdown={"data_loading": 0.0, "compute": 1.0})
    assert runner.calls == [] and out.runs == 0
    assert by_fix(out)["dataloader_workers"].verdict == "skipped"


# -- sequential decision -----------------------------------------------------------------------


def _early(ratios: list[float], looks: int) -> bool:
    """An early look at pairs against a flat reference of two runs (no reference residual)."""
    return decided_early([100.0, 100.0], [100.0 * r for r in ratios], looks=looks)


def test_an_early_look_needs_the_corrected_interval_not_the_plain_one():
    ratios = [1.20, 1.22]
    assert estimate(ratios).verdict == "improved"  # the plain 95% interval clears 1 ...
    assert not _early(ratios, looks=2)  # ... but not once corrected for two looks
    assert _early(ratios, looks=1)
    assert not _early([1.9], looks=1)  # never on one pair
    assert _early([0.50, 0.51], looks=2)  # clearly slower
    assert _early([0.990, 0.992], looks=2)  # a win is out of reach
    assert not _early([0.99, 1.0], looks=2)  # two pairs rarely rule a win out
    assert not _early([0.95, 1.08], looks=2)


def test_pairs_that_agree_by_chance_do_not_stop_a_trial_whose_reference_scatters():
    # The demo's combined trial: 541.8 and 566.1 samples/s between baselines of 285.5, 386.9
    # and 311.9 -- two pairs at 1.63x, a 35% scatter of the reference around them.
    base, fixed = [285.5, 386.9, 311.9], [541.8, 566.1]
    alone = estimate(paired_ratios(base, fixed))
    assert alone.ci_high / alone.ci_low < 1.01  # the pairs alone: "[1.63-1.63]"
    assert not decided_early(base, fixed, looks=3)
    pooled = paired_estimate(base, fixed)
    assert pooled.ci_low < 1.2 and pooled.ci_high > 2.3  # the reference's scatter is heard
    assert pooled.speedup == alone.speedup  # the point estimate is the pairs' median still
    # A flat reference around the same pairs decides at once.
    assert decided_early([300.0, 300.0, 300.0], [489.0, 490.0], looks=3)


def test_a_clear_trial_stops_after_two_pairs_and_an_unclear_one_runs_on(spec):
    runner = FakeRunner(effects={"bf16_autocast": 1.8, "fused_optimizer": 1.04}, noise=0.03)
    out = run_trials(spec, refs("bf16_autocast", "fused_optimizer"), unsafe=True, runner=runner,
                     make_diff_text=False, breakdown={"compute": 0.9})
    t = by_fix(out)
    assert t["bf16_autocast"].repeats == 2 and t["bf16_autocast"].verdict == "improved"
    assert "decided after 2 pairs" in t["bf16_autocast"].reason
    assert t["fused_optimizer"].repeats >= 3
    assert runner.runs_with("bf16_autocast") < runner.runs_with("fused_optimizer")
    # the same loop without early stops runs more
    fixed = FakeRunner(effects={"bf16_autocast": 1.8, "fused_optimizer": 1.04}, noise=0.03)
    run_trials(spec, refs("bf16_autocast", "fused_optimizer"), unsafe=True, runner=fixed,
               make_diff_text=False, early_stop=False)
    assert len(runner.calls) < len(fixed.calls)


def test_noiseless_trials_still_take_two_pairs(spec):
    runner = FakeRunner(effects={"bf16_autocast": 1.5}, noise=0.0)
    out = run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=runner, make_diff_text=False)
    assert by_fix(out)["bf16_autocast"].repeats == 2
    assert runner.runs_with("bf16_autocast") == 2


# -- warm-up read from the baseline --------------------------------------------------------------


def test_settled_warmup_is_measured_from_the_baseline_steps():
    timed = [10.0] * 20
    assert settled_warmup([500, 11, 10, 10, 10], timed, 5) == 2  # the floor
    assert settled_warmup([500, 300, 40, 10, 10], timed, 5) == 4  # one step past the last slow one
    assert settled_warmup([500, 10, 10, 30, 10], timed, 5) == 5  # slow late: no cut
    assert settled_warmup([500, 10, 10, 10, 10], [40.0, 10, 10] + timed, 5) == 5  # still warming up
    assert settled_warmup([], timed, 5) == 5  # not recorded: as asked
    assert settled_warmup([500, 10], timed, 2) == 2
    # too fast is not settled either: a first step that did no real work (seen on data_loading.py)
    assert settled_warmup([0.4, 0.7, 410, 620, 470], [450.0, 600, 520, 480, 700, 510], 5) == 4
    assert settled_warmup([0.4, 0.7, 500, 520, 300], [450.0, 600, 520, 480, 700, 510], 5) == 5
    assert settled_warmup([0.4, 0.7, 500, 520, 470], [450.0, 600, 520, 480, 700, 510], 5) == 3
    # a machine whose speed drifted within the run (data_loading.py's first baseline on this VM):
    # warm-up steps a few % slower than the slowest steady step are as settled as it is
    drifted = [116.0, 114, 77, 80, 81, 82, 82, 79, 80, 78, 82, 80, 79, 106, 111, 117, 119]
    assert settled_warmup([1, 15, 120, 119, 122], drifted, 5) == 3
    assert settled_warmup([1, 15, 140, 119, 122], drifted, 5) == 4  # 18% over it: still warming up
    # the band follows the steady steps' own spread (noisy steps: a wider band)
    assert settled_warmup([900, 13, 7, 10, 10], [6.0, 14, 10, 9, 11, 7, 13, 10, 10, 10], 5) == 2
    assert settled_warmup([900, 13, 6, 10, 10], [6.0, 14, 10, 9, 11, 7, 13, 10, 10, 10], 5) == 4


@dataclass
class WarmupRunner:
    """A FakeRunner whose captures record warm-up step times."""

    inner: FakeRunner
    warmup_ms: tuple[float, ...]
    calls: list[RunSpec] = field(default_factory=list)

    def __call__(self, spec: RunSpec) -> RunCapture:
        self.calls.append(spec)
        cap = self.inner(spec)
        ms = self.warmup_ms[: spec.warmup_steps]
        return replace(cap, timed=replace(cap.timed, warmup_step_times_ms=ms,
                                          step_times_ms=(10.0,) * len(cap.timed.step_times_ms)))


def test_trial_runs_warm_up_only_as_long_as_the_baseline_needed(spec):
    runner = WarmupRunner(FakeRunner(effects={"bf16_autocast": 1.5}), (900.0, 10.0, 10.0, 10.0, 10.0))
    out = run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=runner, make_diff_text=False)
    assert runner.calls[0].warmup_steps == 5
    assert {s.warmup_steps for s in runner.calls[1:]} == {2}
    assert any("warm up for 2 steps, not 5" in n for n in out.notes)


def test_a_later_baseline_that_settled_cuts_the_warm_up_the_first_could_not(spec):
    # the VM's two speed levels: the first baseline started slow and sped up mid-window, which read
    # as a warm-up that never ended; the second settled, so the runs after it warm up 2 steps
    @dataclass
    class Drifting(WarmupRunner):
        def __call__(self, spec: RunSpec) -> RunCapture:
            cap = super().__call__(spec)
            if len(self.calls) == 1:
                cap = replace(cap, timed=replace(cap.timed, warmup_step_times_ms=(900.0, 10.0, 15.0, 15.0, 15.0),
                                                 step_times_ms=(15.0,) * 3 + (10.0,) * 17))
            return cap

    runner = Drifting(FakeRunner(effects={"bf16_autocast": 1.5}), (900.0, 10.0, 10.0, 10.0, 10.0))
    out = run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=runner, make_diff_text=False)
    names = [s.out_dir.name for s in runner.calls]
    second = names.index("baseline-2")
    assert {s.warmup_steps for s in runner.calls[: second + 1]} == {5}
    assert {s.warmup_steps for s in runner.calls[second + 1:]} == {2}
    assert any("warm up for 2 steps, not 5, from baseline run 2 on" in n for n in out.notes)


# -- the budget ----------------------------------------------------------------------------------


def timed_runner(inner: FakeRunner, clock: Clock, run_s: float):
    def run(spec: RunSpec) -> RunCapture:
        clock.now += run_s
        return replace(inner(spec), wall_s=run_s)

    return run


def test_a_budget_measures_the_largest_possible_gains_first_and_names_the_rest(spec):
    inner = FakeRunner(effects={"dataloader_workers": lambda p: 1.5 * p["num_workers"],
                                "bf16_autocast": 1.3, "fused_optimizer": 1.3}, noise=0.0)
    clock = Clock(1000.0)
    out = run_trials(
        spec, refs("fused_optimizer", "bf16_autocast", "dataloader_workers"), unsafe=True,
        runner=timed_runner(inner, clock, 10.0), make_diff_text=False, clock=clock, budget_s=110.0,
        breakdown={"data_loading": 0.6, "compute": 0.3},
    )
    t = by_fix(out)
    assert t["dataloader_workers"].verdict == "improved"  # the 2.5x bound goes first
    for f in ("fused_optimizer", "bf16_autocast"):
        assert t[f].verdict == "skipped" and "--budget" in t[f].reason
        assert "at most 1.43x (compute is 30.0% of the step)" in t[f].reason
        assert inner.runs_with(f) == 0
    assert any("lack of budget" in n and "fused_optimizer" in n and "bf16_autocast" in n for n in out.notes)
    assert out.wall_s <= 110.0


def test_without_a_budget_every_fix_runs_and_a_bad_budget_is_a_usage_error(spec):
    inner = FakeRunner(effects={"bf16_autocast": 1.3, "fused_optimizer": 1.3}, noise=0.0)
    out = run_trials(spec, refs("fused_optimizer", "bf16_autocast"), unsafe=True, runner=inner,
                     make_diff_text=False)
    assert all(t.verdict == "improved" for t in out.trials)
    with pytest.raises(UsageError, match="--budget"):
        run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=inner, budget_s=0)


# -- activity while a run is in flight -------------------------------------------------------------


class SteppingRunner:
    """A runner that reports steps while it runs, as the real capture stage does, on a fake clock."""

    def __init__(self, inner: FakeRunner, clock: Clock, steps: int = 30, step_s: float = 0.1) -> None:
        self.inner, self.clock, self.steps, self.step_s = inner, clock, steps, step_s

    def __call__(self, spec: RunSpec, progress=None) -> RunCapture:
        from advisor.capture.model import ProgressEvent

        for i in range(self.steps + 1):
            phase = "starting" if i == 0 else "warmup" if i <= spec.warmup_steps else "timed"
            if progress is not None:
                progress(ProgressEvent(phase=phase, step=i, steps_total=self.steps))
            self.clock.now += self.step_s
        if progress is not None:
            progress(ProgressEvent(phase="done", step=self.steps, steps_total=self.steps))
        return self.inner(spec)


def test_runs_in_flight_report_their_steps_throttled_with_every_phase_change(spec):
    clock = Clock(1000.0)
    events = []
    run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=SteppingRunner(FakeRunner(), clock),
               progress=events.append, make_diff_text=False, clock=clock)
    flying = [e for e in events if e.in_flight]
    done = [e for e in events if not e.in_flight]
    assert flying and done
    first_run = [e for e in flying if e.run == 1]
    assert first_run[0].fix == "baseline" and first_run[0].in_flight == "starting"
    assert [e.in_flight for e in first_run][:3] == ["starting", "warmup", "timed"]  # each phase change
    assert "done" not in {e.in_flight for e in flying}
    timed = [e.step for e in first_run if e.in_flight == "timed"]
    # 25 timed steps 0.1 s apart, passed on at most every 0.5 s: about 5, and rising
    assert 3 <= len(timed) <= 7 and timed == sorted(timed) and timed[-1] > timed[0]
    assert "running: timed, step" in first_run[-1].line() and first_run[-1].line().endswith("/30")
    # every in-flight event carries the number its run will have; the counts never go backwards
    runs = [e.run for e in events]
    assert runs == sorted(runs)
    assert {e.run for e in flying} == {e.run for e in done}
    assert any(e.fix == "bf16_autocast" for e in flying)


@pytest.mark.e2e
def test_a_real_trial_run_reports_its_steps_while_in_flight(tmp_path):
    from advisor.fixes.loop import Measurer, TrialProgress, default_runner

    script = Path(__file__).resolve().parents[1] / "scripts" / "train_loop.py"
    spec = RunSpec(script=script, args=("--steps", "40"), out_dir=tmp_path / "run", warmup_steps=3,
                   timed_steps=10, timeout_s=120)
    events = []
    loop = Measurer(spec, default_runner, events.append, repeats=1, min_effect=0.03, loss_steps=0)
    cap = loop.run("baseline-1", (), flight=TrialProgress(fix="baseline", repeat=1, repeats=1))
    assert cap.ok
    phases = [e.in_flight for e in events]
    assert "timed" in phases and all(e.fix == "baseline" and e.run == 1 for e in events)
    assert max(e.step for e in events) > 0
    # issue #32: a trial run has no profilers; its progress never names their phases
    assert not {"profiled", "cprofile"} & set(phases), phases


# -- the kept fixes leave an "after" trace -------------------------------------------------------------


def tracing_runner(inner: FakeRunner):
    def run(spec: RunSpec) -> RunCapture:
        cap = inner(spec)
        traces = ("traces/after.pt.trace.json",) if spec.profiled_steps > 0 else ()
        return replace(cap, trace_files=traces)

    return run


def test_the_kept_fixes_run_once_under_the_profiler_into_the_kept_folder(spec):
    inner = FakeRunner(effects={"bf16_autocast": 1.5}, noise=0.0)
    out = run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=tracing_runner(inner),
                     make_diff_text=False, profile_kept=True)
    assert out.kept == ("bf16_autocast",) and out.kept_run == "kept"
    profiled = [s for s in inner.calls if s.profiled_steps > 0]
    assert len(profiled) == 1 and profiled[0].out_dir == spec.out_dir / "kept"
    assert [f.id for f in profiled[0].fixes] == ["bf16_autocast"] and profiled[0].cprofile_steps == 0
    assert all(s.profiled_steps == 0 for s in inner.calls if s is not profiled[0])  # trials stay unprofiled
    # the diagnosed run's phases, not a trial's >= 1 s window (a short script ended inside it)
    assert (profiled[0].timed_steps, profiled[0].min_timed_s) == (spec.timed_steps, spec.min_timed_s)
    assert all(s.min_timed_s > 0 for s in inner.calls if s is not profiled[0])
    # its start-up is not read: it may be forked from the warm-start server like the trials
    assert not profiled[0].startup_reported and spec.startup_reported
    assert any("kept/" in n and "advisor compare" in n for n in out.notes)
    assert out.runs == len(inner.calls)


def test_nothing_kept_means_no_profiled_run_and_a_missing_trace_is_said(spec):
    inner = FakeRunner(effects={"bf16_autocast": 1.0}, noise=0.0)
    out = run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=tracing_runner(inner),
                     make_diff_text=False, profile_kept=True)
    assert out.kept == () and out.kept_run == ""
    assert all(s.profiled_steps == 0 for s in inner.calls)
    inner = FakeRunner(effects={"bf16_autocast": 1.5}, noise=0.0)
    out = run_trials(spec, refs("bf16_autocast"), unsafe=True, runner=inner, make_diff_text=False,
                     profile_kept=True)
    assert out.kept_run == "" and any("left no trace" in n for n in out.notes)


@pytest.mark.parametrize(("asked", "timed"), [(20, 8), (5, 5)])
def test_trial_runs_time_a_window_not_the_captures_step_count(tmp_path: Path, asked: int, timed: int) -> None:
    from advisor.fixes.loop import Measurer
    from advisor.fixes.loop.options import MIN_TRIAL_WINDOW_S, TRIAL_TIMED_STEPS

    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path / "run", timed_steps=asked)
    loop = Measurer(spec, lambda s: None, None, repeats=1, min_effect=0.03, loss_steps=0)
    trial = loop.trial_spec("baseline-1", (), {})
    # 8 steps or 1.5 s, whichever is longer; never more steps than the user asked the capture for
    assert TRIAL_TIMED_STEPS == 8 and (trial.timed_steps, trial.min_timed_s) == (timed, MIN_TRIAL_WINDOW_S)
    assert loop.trial_spec("x", (), {"timed_steps": 5}).timed_steps == 5  # a ladder rung's own count wins


def test_the_ranks_of_a_job_time_a_step_count_as_long_as_the_window(tmp_path: Path) -> None:
    # each rank extending its window by its own clock: rank 0 stopped after step 22, rank 1 began
    # step 23's all-reduce and crashed ("Connection reset by peer"), and the baseline failed
    from advisor.fixes.loop import Measurer

    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path / "run", nproc_per_node=2)
    loop = Measurer(spec, lambda s: None, None, repeats=1, min_effect=0.03, loss_steps=0)
    first = loop.trial_spec("baseline-1", (), {})
    assert (first.timed_steps, first.min_timed_s) == (8, 0.0)  # the baseline's step time is not known yet
    loop.base_step_ms = 53.0
    assert (loop.trial_spec("baseline-2", (), {}).timed_steps, loop.trial_spec("b", (), {}).min_timed_s) == (29, 0.0)
    loop.base_step_ms = 400.0
    assert loop.trial_spec("baseline-3", (), {}).timed_steps == 8  # slow steps: the 8 fill the window already


def test_a_compiled_rung_keeps_its_warm_up_when_the_baseline_settled_early(tmp_path: Path) -> None:
    # the H200's chargpt: a settled warm-up of 2 timed the default compile rung from its recompile (0.13x)
    from advisor.fixes import catalog
    from advisor.fixes.fix import FixContext
    from advisor.fixes.loop import Measurer

    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path / "run")
    loop = Measurer(spec, lambda s: None, None, repeats=1, min_effect=0.03, loss_steps=0)
    loop.warmup_steps = 2
    rung = catalog.get("torch_compile").plan_variants(FixContext(cuda=True), spec)[0]
    assert loop.trial_spec("torch_compile-1", (), rung.overrides).warmup_steps == 5
    assert loop.trial_spec("baseline-1", (), {}).warmup_steps == 2


def test_a_reference_that_changed_level_between_stages_widens_the_interval():
    # The demo's combination (2026-11-26, quiet): its stage's plain baselines 246.5, 245.4, 254.2
    # around 430.8 and 434.5 read [1.67-1.82]; the same plain script had run at 278.9-371.8 in the
    # first stage, and compare of the capture with the kept run read 1.27x.
    stage, fixed = [246.5, 245.4, 254.2], [430.8, 434.5]
    history = [278.9, 371.8, 325.0, 360.1, *stage]
    narrow = paired_estimate(stage, fixed)
    wide = paired_estimate(stage, fixed, history=history)
    assert narrow.ci_low > 1.6 and narrow.ci_high < 1.9
    assert wide.speedup == narrow.speedup and wide.ci_low < 1.4 and wide.ci_high > 2.2
    assert wide.verdict == "improved"  # still a win, measured less precisely than its stage alone said


def test_the_fix_loop_reads_the_gpus_busy_share_only_from_a_run_with_gpu_work():
    from advisor.api.fixloop import _gpu_busy

    assert _gpu_busy({"has_gpu_flag": 1, "gpu_busy_frac": 0.157}) == 0.157
    assert _gpu_busy({"has_gpu_flag": 0, "gpu_busy_frac": 0.0}) is None
    assert _gpu_busy({"has_gpu_flag": 1, "gpu_busy_frac": None}) is None
    assert _gpu_busy({}) is None
