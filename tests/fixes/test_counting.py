"""A trial run must count its steps and samples as its reference did (advisor.fixes.loop.counting)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixes_fakes import FakeRunner, by_fix, refs

from advisor.capture.model import RunCapture, TimedPhase
from advisor.fixes.loop import run_trials
from advisor.fixes.loop.counting import Counting


def _run(samples: tuple[int | None, ...], source: str = "optimizer") -> RunCapture:
    return RunCapture(status="stopped", step_source=source, timed=TimedPhase(step_times_ms=(10.0,) * len(samples),
                                                                            samples=samples))


def test_a_fix_that_leaves_the_batch_alone_must_count_the_samples_its_reference_did() -> None:
    base = Counting.of(_run((35, 35, 35, 20)))  # an epoch's short last batch: the median holds
    assert base == Counting("optimizer", 35.0)
    # the word language model under torch.compile: the loss module's 700 rows counted as the samples
    why = base.mismatch(_run((700,) * 4), ["torch_compile"])
    assert why is not None and "700 samples" in why and "35" in why and "not comparable" in why
    assert base.mismatch(_run((700,) * 4), ["dataloader_workers", "torch_compile"]) is not None
    assert base.mismatch(_run((36, 30, 40)), ["torch_compile"]) is None  # within the tolerance
    assert base.mismatch(_run((None, None)), ["torch_compile"]) is None  # nothing counted: nothing to compare


@pytest.mark.parametrize("fix", ["larger_batch", "batch_fusion", "fit_accumulation", "script_args"])
def test_fixes_that_change_the_batch_may_change_the_samples(fix: str) -> None:
    assert Counting("optimizer", 32.0).mismatch(_run((128,) * 4), [fix]) is None


def test_a_step_source_that_moved_is_named() -> None:
    why = Counting("optimizer", 32.0).mismatch(_run((32,) * 4, source="dataloader"), ["cpu_threads"])
    assert why is not None and "dataloader boundaries here but from optimizer" in why


def test_a_trial_that_counted_other_samples_is_failed_not_kept(spec) -> None:  # type: ignore[no-untyped-def]
    class Miscounted(FakeRunner):
        def __call__(self, s):  # type: ignore[no-untyped-def]
            cap = super().__call__(s)
            if any(f.id == "cpu_threads" for f in s.fixes):  # 20x the samples, "20x" the rate
                n = len(cap.timed.samples)
                cap = replace(cap, timed=replace(cap.timed, samples=(160,) * n, samples_per_s=self.base * 20))
            return cap

    out = run_trials(spec, refs("cpu_threads"), runner=Miscounted(), make_diff_text=False)
    t = by_fix(out)["cpu_threads"]
    assert t.verdict == "failed" and "samples were counted per step" in t.reason
    assert out.kept == ()
