"""The trial loop against a deterministic fake capture stage."""

from __future__ import annotations

import pytest
from fixes_fakes import FakeRunner, by_fix, refs

from advisor.capture.model import RunSpec
from advisor.errors import UsageError
from advisor.fixes.loop import TrialProgress, run_trials
from advisor.fixes.model import FixOutcome


def test_workers_win_is_kept_and_the_best_rung_is_picked(spec):
    runner = FakeRunner(effects={"dataloader_workers": lambda p: {1: 1.5, 2: 1.9}[p["num_workers"]]})
    events: list[TrialProgress] = []
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, progress=events.append,
                     make_diff_text=False, early_stop=False)
    t = by_fix(out)["dataloader_workers"]
    assert t.verdict == "improved"
    assert t.params == {"num_workers": 2}
    assert t.speedup == pytest.approx(1.9, rel=0.03)
    assert t.ci_low > 1.0 and t.repeats == 3
    assert "ladder 1 workers: 1.4" in t.reason or "ladder 1 workers: 1.5" in t.reason
    assert out.kept == ("dataloader_workers",)
    assert out.combined is t
    # A V1 V2 A V2 V1 A V1 V2 A: one baseline per round serves both rungs.
    assert len(runner.calls) == 4 + 6
    assert all(s.profiled_steps == 0 and s.record_loss_steps == 5 and s.seed == 0 for s in runner.calls)
    assert all(s.min_timed_s >= 1.0 for s in runner.calls)  # no trial timed over a few ms
    assert all(s.out_dir.parent == spec.out_dir / "trials" for s in runner.calls)
    assert len({s.out_dir for s in runner.calls}) == len(runner.calls)
    assert [e.fix for e in events][:3] == ["baseline", "dataloader_workers@1", "dataloader_workers@2"]
    assert events[-1].estimate is None and events[-1].fix == "baseline"
    # the stage's four baseline runs are counted as four: the closing one is not a second "3/3"
    done = [(e.repeat, e.repeats) for e in events if e.fix == "baseline" and e.samples_per_s is not None]
    assert done == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert any(e.estimate and e.estimate > 1.8 for e in events if e.fix == "dataloader_workers@2")


def test_noise_slower_crash_nan_and_skips(spec):
    runner = FakeRunner(
        effects={"fused_optimizer": 1.0, "torch_compile": 0.6, "bf16_autocast": 1.7},
        noise=0.02,
        crash={"channels_last"},
        nan_loss={"bf16_autocast"},
    )
    out = run_trials(
        spec,
        refs("fused_optimizer", "torch_compile", "channels_last", "bf16_autocast", "pin_memory"),
        unsafe=True, runner=runner, make_diff_text=False,
    )
    t = by_fix(out)
    assert t["fused_optimizer"].verdict == "no_effect"
    assert t["torch_compile"].verdict == "slower"
    assert t["torch_compile"].time_to_first_step_s == 3.0
    assert t["torch_compile"].baseline_time_to_first_step_s == 1.0
    assert t["channels_last"].verdict == "failed"
    assert "out of memory" in t["channels_last"].reason
    assert t["bf16_autocast"].verdict == "failed" and "nan" in t["bf16_autocast"].reason
    assert t["pin_memory"].verdict == "skipped" and "CUDA" in t["pin_memory"].reason
    # Failures are not run again; a skip found by the registry costs no run at all.
    assert runner.runs_with("channels_last") == 1
    assert runner.runs_with("bf16_autocast") == 1
    assert runner.runs_with("pin_memory") == 0
    assert out.kept == () and out.combined is None


def test_a_measurement_whose_every_variant_failed_ends_with_the_rounds_closing_baseline(spec):
    runner = FakeRunner(crash={"channels_last"})
    run_trials(spec, refs("channels_last"), unsafe=True, runner=runner, make_diff_text=False)
    assert [s.out_dir.name for s in runner.calls] == ["baseline-1", "channels_last-1", "baseline-2"]


def test_runtime_not_applicable_note_is_a_skip(spec):
    runner = FakeRunner(not_applicable={"channels_last": "not applied: Net has no 2-D/3-D convolutions"})
    out = run_trials(spec, refs("channels_last"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["channels_last"]
    assert t.verdict == "skipped" and t.reason == "Net has no 2-D/3-D convolutions"
    assert runner.runs_with("channels_last") == 1


def test_unsafe_fixes_are_hidden_and_counted(spec):
    runner = FakeRunner()
    out = run_trials(spec, refs("bf16_autocast", "torch_compile", "torch_compile"), runner=runner)
    assert out.trials == () and runner.calls == []
    assert out.hidden_unsafe == ("bf16_autocast", "torch_compile")
    assert any("2 unsafe fixes hidden" in n and "--unsafe-fixes" in n for n in out.notes)


def test_only_tries_exactly_the_named_fixes(spec):
    runner = FakeRunner(effects={"bf16_autocast": 1.3})
    out = run_trials(spec, refs("dataloader_workers"), only=["bf16_autocast"], runner=runner,
                     make_diff_text=False)
    assert [t.fix for t in out.trials] == ["bf16_autocast"]
    assert by_fix(out)["bf16_autocast"].verdict == "improved"
    with pytest.raises(UsageError, match="did you mean bf16_autocast"):
        run_trials(spec, (), only=["bf16_autocast2"], runner=runner)


def test_prefetch_is_measured_on_top_of_workers_and_everything_is_combined(spec):
    runner = FakeRunner(effects={
        "dataloader_workers": lambda p: 1.0 + 0.4 * p["num_workers"],
        "prefetch_factor": 1.2,
        "persistent_workers": 1.0,
    })
    out = run_trials(spec, refs("dataloader_workers", "prefetch_factor", "persistent_workers"),
                     runner=runner, make_diff_text=False, early_stop=False)
    t = by_fix(out)
    assert t["prefetch_factor"].verdict == "improved"
    assert t["prefetch_factor"].reason.startswith("on top of dataloader_workers@2")
    assert t["prefetch_factor"].speedup == pytest.approx(1.2, rel=0.03)
    assert t["persistent_workers"].verdict == "no_effect"
    assert out.kept == ("dataloader_workers", "prefetch_factor")
    assert out.combined.fix == "dataloader_workers+prefetch_factor"
    assert out.combined.verdict == "improved"
    assert out.combined.speedup == pytest.approx(1.8 * 1.2, rel=0.03)
    # the pair chosen was measured against the plain baseline in the on-top stage: no more runs
    assert not any(s.out_dir.name.startswith("combined") for s in runner.calls)


def test_on_top_fixes_are_skipped_when_workers_did_not_run(spec):
    runner = FakeRunner(crash={"dataloader_workers"})
    out = run_trials(spec, refs("dataloader_workers", "prefetch_factor"), runner=runner, make_diff_text=False)
    t = by_fix(out)
    assert t["dataloader_workers"].verdict == "failed"
    assert t["prefetch_factor"].verdict == "skipped"
    assert "was not measured (failed)" in t["prefetch_factor"].reason
    assert runner.runs_with("prefetch_factor") == 0
    out = run_trials(spec, refs("prefetch_factor"), runner=runner, make_diff_text=False)
    assert "dataloader_workers was not tried" in by_fix(out)["prefetch_factor"].reason


def test_a_worse_combination_falls_back_to_the_best_single_fix(spec):
    def effect_bf16(p):
        return 1.5

    class Clashing(FakeRunner):
        def __call__(self, s):
            ids = {f.id for f in s.fixes}
            cap = super().__call__(s)
            if {"bf16_autocast", "fused_optimizer"} <= ids:  # they interfere
                from dataclasses import replace

                cap = replace(cap, timed=replace(cap.timed, samples_per_s=self.base * 1.05))
            return cap

    runner = Clashing(effects={"bf16_autocast": effect_bf16, "fused_optimizer": 1.2})
    out = run_trials(spec, refs("bf16_autocast", "fused_optimizer"), unsafe=True, runner=runner,
                     make_diff_text=False)
    assert out.kept == ("bf16_autocast",)
    assert out.combined is not None and out.combined.speedup == pytest.approx(1.05, rel=0.03)
    assert any("keeping bf16_autocast only" in n for n in out.notes)


def test_batch_fusion_uses_the_accumulation_count_and_fewer_steps(spec):
    runner = FakeRunner(effects={"batch_fusion": 2.5}, batches_per_step=4)
    out = run_trials(spec, refs("batch_fusion"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["batch_fusion"]
    assert t.verdict == "improved" and t.params == {"factor": 4}
    fused = [s for s in runner.calls if s.fixes]
    assert all(s.timed_steps == 5 and s.warmup_steps == 2 for s in fused)
    # Without accumulation there is nothing to fuse.
    out = run_trials(spec, refs("batch_fusion"), unsafe=True, runner=FakeRunner(), make_diff_text=False)
    assert by_fix(out)["batch_fusion"].verdict == "skipped"


def test_a_failing_baseline_measures_nothing(spec):
    from advisor.capture.model import RunCapture, ScriptError

    calls = []

    def broken(s):
        calls.append(s)
        return RunCapture(status="crashed", error=ScriptError("ValueError", "bad data"))

    out = run_trials(spec, refs("dataloader_workers"), runner=broken)
    assert len(calls) == 1
    assert out.trials[0].verdict == "skipped" and "bad data" in out.trials[0].reason
    assert any("baseline run failed" in n for n in out.notes)


def test_an_unchanged_dataloader_proves_a_loader_fix_did_not_apply(spec):
    # Even when the notes were saved before the script ran ("installed: ..."), the recorded
    # DataLoader settings show the fix did nothing.
    runner = FakeRunner(inert={"dataloader_workers"})
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False)
    t = by_fix(out)["dataloader_workers"]
    assert t.verdict == "skipped" and "did not change" in t.reason
    assert runner.runs_with("dataloader_workers") == 2  # one run per rung, then dropped


def test_an_undecided_gain_gets_extra_rounds_and_a_null_fix_does_not(spec):
    # Noise within what runs of one setting may differ by (+-20%: at most 1.5x apart), a gain
    # well inside it: undecided after the planned rounds.
    runner = FakeRunner(effects={"fused_optimizer": 1.12}, noise=0.2)
    out = run_trials(spec, refs("fused_optimizer", "torch_compile"), unsafe=True, runner=runner,
                     make_diff_text=False, max_repeats=6)
    t = by_fix(out)
    assert runner.runs_with("torch_compile") == 3
    assert 3 < runner.runs_with("fused_optimizer") <= 6
    assert t["fused_optimizer"].repeats == runner.runs_with("fused_optimizer")


class _Chaotic(FakeRunner):
    """A machine whose other work comes and goes: each run's rate times the next factor, in call order."""

    factors: tuple[float, ...] = (1.0, 1.0, 0.08, 0.9, 1.0, 0.1, 0.9, 1.0, 0.5)

    def __call__(self, spec):
        from dataclasses import replace as _replace

        cap = super().__call__(spec)
        factor = self.factors[(len(self.calls) - 1) % len(self.factors)]
        return _replace(cap, timed=_replace(cap.timed, samples_per_s=cap.timed.samples_per_s * factor))


@pytest.mark.parametrize(("effect", "verdict"), [(1.0, "unmeasurable"), (1.3, "unmeasurable"), (20.0, "improved")])
def test_runs_that_disagree_are_judged_by_their_range_and_get_no_extra_rounds(spec, effect, verdict):
    # Runs of the same setting 12x apart (baseline 100, 8, 100, 90): pairs of such runs cannot
    # tell a 1.3x fix (nor none) from the machine; a fix whose slowest run still beats the
    # baseline's fastest is faster all the same.
    runner = _Chaotic(effects={"fused_optimizer": effect}, noise=0.0)
    out = run_trials(spec, refs("fused_optimizer"), unsafe=True, runner=runner,
                     make_diff_text=False, max_repeats=6)
    t = by_fix(out)["fused_optimizer"]
    assert runner.runs_with("fused_optimizer") == 3
    assert t.interval == "run_range"
    assert t.verdict == verdict
    assert "disagreed" in t.reason and "every run with every other" in t.reason
    assert t.ci_low <= t.speedup <= t.ci_high
    if verdict == "unmeasurable":
        assert "not measurable here" in t.reason and out.kept == ()
    else:
        assert t.ci_low > 1.03 and out.kept == ("fused_optimizer",)


def test_runs_a_quiet_machine_apart_are_paired_as_before(spec):
    # +-25%: whole runs differ (as the demo's baseline did, 249-339 samples/s), not a changing machine.
    runner = FakeRunner(effects={"fused_optimizer": 1.8}, noise=0.25)
    out = run_trials(spec, refs("fused_optimizer"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["fused_optimizer"]
    assert t.interval == "ci95" and t.verdict == "improved"


def test_progress_line_is_readable():
    e = TrialProgress(fix="pin_memory", repeat=2, repeats=3, estimate=1.842, samples_per_s=120.04)
    assert e.line() == "pin_memory  2/3  120.0 samples/s  1.84x so far"


def test_fusion_runs_long_enough_to_reach_an_optimizer_step(spec):
    from advisor.fixes.fix import fusion_steps

    steps = fusion_steps(spec, 16)  # 16 loader batches before the first optimizer step
    assert steps["warmup_steps"] + steps["timed_steps"] > 16
    assert fusion_steps(spec, 4) == {"warmup_steps": 2, "timed_steps": 5}


def test_a_variant_whose_steps_are_counted_differently_is_failed_not_compared(spec):
    runner = FakeRunner(effects={"batch_fusion": 10.0}, batches_per_step=4,
                        step_source={"batch_fusion": "dataloader"})
    out = run_trials(spec, refs("batch_fusion"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["batch_fusion"]
    assert t.verdict == "failed" and "not comparable" in t.reason
    assert out.kept == ()


def test_a_fix_measured_on_top_is_never_kept_alone(spec):
    # cpu_threads' 3x is relative to workers, not to the baseline. When the combination measures
    # 2.5x (noise), it must still be kept over workers alone (1.3x) -- never "cpu_threads alone"
    # for having the largest number.
    class Noisy(FakeRunner):
        def __call__(self, s):
            from dataclasses import replace

            cap = super().__call__(s)
            if any(f.id == "cpu_threads" for f in s.fixes):  # the pair, 2.5x against the baseline
                cap = replace(cap, timed=replace(cap.timed, samples_per_s=self.base * 2.5))
            return cap

    runner = Noisy(effects={"dataloader_workers": 1.3, "cpu_threads": 3.0})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads"), runner=runner, make_diff_text=False)
    assert out.kept == ("dataloader_workers", "cpu_threads")
    assert out.combined.speedup == pytest.approx(2.5, rel=0.03)


# -- issue #16: the loop hands what it knows after every run, so nothing is lost --


def test_a_checkpoint_follows_every_run_and_marks_trials_in_progress(spec):
    runner = FakeRunner(effects={"fused_optimizer": 1.5}, crash={"channels_last"})
    seen: list[FixOutcome] = []
    out = run_trials(
        spec, refs("fused_optimizer", "channels_last"), unsafe=True, runner=runner, make_diff_text=False,
        checkpoint=seen.append, early_stop=False,
    )
    assert len(seen) == len(runner.calls)  # one snapshot per run, baselines included
    assert seen[0].trials == ()  # after the first baseline nothing is measured yet
    first = {t.fix: t for t in seen[1].trials}
    assert first["fused_optimizer"].unfinished and first["fused_optimizer"].repeats == 1
    assert first["fused_optimizer"].reason.startswith("unfinished: 1 of 3 planned pairs")
    crashed = {t.fix: t for t in seen[2].trials}["channels_last"]
    assert crashed.verdict == "failed" and not crashed.unfinished  # a failure is final at once
    pairs = [next(t.repeats for t in s.trials if t.fix == "fused_optimizer") for s in seen[1:]]
    assert pairs == sorted(pairs)  # counts never go backwards
    assert all(s.kept == () and s.diff == "" for s in seen)  # nothing is kept before the end
    final = {t.fix: t for t in out.trials}
    assert not final["fused_optimizer"].unfinished and final["fused_optimizer"].verdict == "improved"
    assert final["fused_optimizer"].repeats == 3


def test_an_interrupt_leaves_the_last_checkpoint_and_stops_the_loop(spec):
    runner = FakeRunner(effects={"fused_optimizer": 1.5})
    seen: list[FixOutcome] = []

    def stop_at_fourth(s: RunSpec):
        if len(runner.calls) == 3:
            raise KeyboardInterrupt
        return runner(s)

    with pytest.raises(KeyboardInterrupt):
        run_trials(spec, refs("fused_optimizer"), unsafe=True, runner=stop_at_fourth, make_diff_text=False,
                   checkpoint=seen.append)
    assert len(seen) == 3
    (t,) = seen[-1].trials
    assert t.fix == "fused_optimizer" and t.unfinished and t.repeats == 1


def test_progress_carries_a_plan_whose_counts_never_go_backwards(spec):
    runner = FakeRunner(effects={"dataloader_workers": lambda p: {1: 1.5, 2: 1.9}[p["num_workers"]]})
    events: list[TrialProgress] = []
    run_trials(spec, refs("dataloader_workers"), runner=runner, progress=events.append, make_diff_text=False,
               early_stop=False)
    assert [e.run for e in events] == list(range(1, len(runner.calls) + 1))
    # A V1 V2 A V2 V1 A V1 V2 A: after the first baseline 9 runs are planned, then one fewer each run
    assert [e.runs_left for e in events] == list(range(9, -1, -1))
    assert events[0].line().startswith("[run 1, 9 more in this stage")
    assert "more in this stage" in events[-1].line() and "~" not in events[-1].line()


class _Contradicting(FakeRunner):
    """Each fix wins alone, their combination measures nothing; runs named ``confirm`` see ``confirm_effect``."""

    confirm_effect: float = 1.0

    def __call__(self, spec):
        from dataclasses import replace as _replace

        cap = super().__call__(spec)
        ids = [f.id for f in spec.fixes]
        factor = 1.0
        if len(ids) > 1:
            factor = 1.0 / (1.5 * 1.4)  # together: no gain at all
        elif ids and "confirm" in str(spec.out_dir):
            factor = self.confirm_effect / self.effects[ids[0]]
        if factor == 1.0 or not cap.ok:
            return cap
        return _replace(cap, timed=_replace(cap.timed, samples_per_s=cap.timed.samples_per_s * factor))


@pytest.mark.parametrize(("confirm_effect", "kept"), [(1.5, ("fused_optimizer",)), (1.0, ())])
def test_a_win_contradicted_by_its_combination_is_measured_again_before_it_is_kept(spec, confirm_effect, kept):
    runner = _Contradicting(effects={"fused_optimizer": 1.5, "torch_compile": 1.4})
    runner.confirm_effect = confirm_effect
    out = run_trials(spec, refs("fused_optimizer", "torch_compile"), unsafe=True, runner=runner,
                     make_diff_text=False)
    assert out.kept == kept
    note = next(n for n in out.notes if "measured again alone against a fresh baseline" in n)
    assert note.endswith("; kept" if kept else "; not kept")
    assert any("confirm" in str(c.out_dir) for c in runner.calls)
    # every stage's baseline runs in folders of its own: the confirm stage's never replace the first's
    assert len({c.out_dir for c in runner.calls}) == len(runner.calls)
    assert any(c.out_dir.name == "confirm-baseline-1" for c in runner.calls)
    if kept:
        assert out.combined.fixes == kept and out.combined.speedup == pytest.approx(1.5, rel=0.05)


def test_each_measured_fix_carries_the_prediction_it_was_measured_against(spec):
    # data_loading holds half the step: pin_memory-like loader fixes are bounded by 2x (Amdahl).
    runner = FakeRunner(effects={"dataloader_workers": lambda p: 1.5})
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False,
                     breakdown={"data_loading": 0.5, "compute": 0.5})
    t = by_fix(out)["dataloader_workers"]
    assert t.estimate == pytest.approx(2.0) and t.estimate_basis == "amdahl"
    assert not t.beat_estimate
    assert out.combined.estimate == pytest.approx(2.0)


def test_a_measurement_beyond_its_amdahl_bound_says_the_bound_was_wrong():
    from advisor.fixes.model import Trial
    from advisor.report import style

    ok = Trial(fix="f", safety="safe", speedup=1.44, ci_low=1.3, ci_high=1.6, verdict="improved",
               estimate=1.8, estimate_basis="amdahl")
    assert style.trial_score(ok) == "estimated ≤ 1.80× (Amdahl bound), measured 1.44×"
    wrong = Trial(fix="f", safety="safe", speedup=2.5, ci_low=2.2, ci_high=2.8, verdict="improved",
                  estimate=1.8, estimate_basis="amdahl")
    assert wrong.beat_estimate
    assert style.trial_score(wrong).endswith("beyond the estimate, which was wrong")
    assert style.trial_score(Trial(fix="f", safety="safe", speedup=1.2)) == ""


class _Recompiling(FakeRunner):
    """Runs with torch_compile compile a graph in every timed step, as a loop whose shapes change would."""

    def __call__(self, spec):
        from dataclasses import replace as _replace

        cap = super().__call__(spec)
        if any(f.id == "torch_compile" for f in spec.fixes) and cap.ok:
            return _replace(cap, timed=_replace(cap.timed, compiles=len(cap.timed.step_times_ms)))
        return cap


def test_a_compile_that_keeps_recompiling_is_a_finding_not_a_speedup(spec):
    runner = _Recompiling(effects={"torch_compile": 0.004})
    out = run_trials(spec, refs("torch_compile"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["torch_compile"]
    assert t.verdict == "failed"
    assert "keeps recompiling" in t.reason and "TORCH_LOGS=recompiles" in t.reason
    assert runner.runs_with("torch_compile") == 1  # dropped after its first run
