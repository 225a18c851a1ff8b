"""Fixes measured on top of a workers rung that was no win alone, and the larger_batch ladder."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fixes_fakes import FakeRunner, by_fix, refs

from advisor.capture.model import DataLoaderInfo, FixRequest, RunSpec
from advisor.fixes import catalog as registry
from advisor.fixes.catalog.larger_batch import batch_ladder
from advisor.fixes.diff import transform
from advisor.fixes.fix import FixContext, ladder_steps
from advisor.fixes.loop import run_trials
from advisor.fixes.model import Trial

DATA = Path(__file__).parent / "data"



@pytest.fixture
def spec(tmp_path: Path) -> RunSpec:
    script = tmp_path / "train.py"
    shutil.copy(DATA / "sample_train.py", script)
    return RunSpec(script=script, out_dir=tmp_path / "run", seed=None)



class Pair(FakeRunner):
    """Workers alone change nothing; cpu_threads on top of workers doubles the throughput."""

    def __call__(self, s):
        from dataclasses import replace

        cap = super().__call__(s)
        ids = {f.id for f in s.fixes}
        if {"dataloader_workers", "cpu_threads"} <= ids:
            cap = replace(cap, timed=replace(cap.timed, samples_per_s=cap.timed.samples_per_s * 2.0))
        return cap


# -- fixes on top of workers ---------------------------------------------------------------------


def test_on_top_fix_is_measured_when_workers_alone_has_no_effect(spec):
    runner = Pair(effects={"dataloader_workers": 1.0})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads", "prefetch_factor"), runner=runner,
                     make_diff_text=False)
    t = by_fix(out)
    assert t["dataloader_workers"].verdict == "no_effect"
    assert t["cpu_threads"].verdict == "improved"
    assert t["cpu_threads"].speedup == pytest.approx(2.0, rel=0.03)
    rung = t["dataloader_workers"].params["num_workers"]
    assert t["cpu_threads"].reason.startswith(f"on top of dataloader_workers@{rung}; dataloader_workers alone: no_effect")
    from advisor.report.style import trial_reference

    assert trial_reference(t["cpu_threads"]) == f"dataloader_workers@{rung}"
    assert t["prefetch_factor"].verdict == "no_effect"
    # Every on-top run carried the workers rung.
    assert all(
        any(f.id == "dataloader_workers" for f in s.fixes)
        for s in runner.calls if any(f.id == "cpu_threads" for f in s.fixes)
    )


@pytest.mark.e2e
def test_a_kept_on_top_fix_carries_its_workers_rung_into_the_combination(spec):
    runner = Pair(effects={"dataloader_workers": 1.0})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads"), runner=runner, early_stop=False)
    t = by_fix(out)
    assert out.kept == ("dataloader_workers", "cpu_threads")
    assert out.combined.fix == "dataloader_workers+cpu_threads"
    assert out.combined.verdict == "improved"
    assert out.combined.speedup == pytest.approx(2.0, rel=0.03)  # against the plain baseline
    # The pair was measured against the plain baseline in the on-top stage, beside the rung:
    # A W C A C W A W C A, and no stage of its own.
    assert not any(s.out_dir.name.startswith("combined") for s in runner.calls)
    stage = [s.out_dir.name for s in runner.calls if s.out_dir.name.startswith(("on-top", "dataloader_workers-w",
                                                                                "cpu_threads"))]
    rung = t["dataloader_workers"].params["num_workers"]
    w, c = f"dataloader_workers-w{rung}-ref", "cpu_threads"
    assert stage[-10:] == ["on-top-baseline-1", f"{w}-1", f"{c}-1", "on-top-baseline-2", f"{c}-2", f"{w}-2",
                           "on-top-baseline-3", f"{w}-3", f"{c}-3", "on-top-baseline-4"]
    assert all(not s.fixes for s in runner.calls if s.out_dir.name.startswith("on-top-baseline"))
    assert out.combined.reason.startswith("dataloader_workers alone no_effect")
    assert "measured together in the on-top stage" in out.combined.reason
    # The workers trial keeps its honest verdict, and says why it is kept anyway.
    assert t["dataloader_workers"].verdict == "no_effect"
    assert "kept as the base of cpu_threads" in t["dataloader_workers"].reason
    assert [k.fix for k in out.kept_trials] == ["dataloader_workers", "cpu_threads"]
    assert any(
        re.search(r"dataloader_workers alone no_effect \(1\.0\dx\); with cpu_threads on top [12]\.\d\dx more", n)
        for n in out.notes
    ), out.notes
    # The diff makes both permanent.
    rung = t["dataloader_workers"].params["num_workers"]
    assert f"+        num_workers={rung}," in out.diff
    assert f"+torch.set_num_threads(max(1, torch.get_num_threads() - {rung}))" in out.diff


def test_a_carried_pair_that_does_not_improve_together_keeps_nothing(spec):
    class Apart(FakeRunner):
        def __call__(self, s):
            from dataclasses import replace

            cap = super().__call__(s)
            # the machine slowed the rung down in the on-top stage: the fix on top wins against
            # it (1.8x), the pair measures nothing against the plain baseline
            if s.out_dir.name.startswith("on-top") or not s.fixes:
                return cap
            if "-ref-" in s.out_dir.name:
                return replace(cap, timed=replace(cap.timed, samples_per_s=self.base / 1.8))
            if any(f.id == "cpu_threads" for f in s.fixes):
                return replace(cap, timed=replace(cap.timed, samples_per_s=self.base))
            return cap

    runner = Apart(effects={"dataloader_workers": 1.0, "cpu_threads": 1.8})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads"), runner=runner, make_diff_text=False)
    assert out.kept == () and out.combined is None
    assert any("dataloader_workers+cpu_threads measured" in n and "(no_effect)" in n and "nothing kept" in n for n in out.notes)


def test_a_standalone_win_beats_a_weaker_carried_pair(spec):
    runner = Pair(effects={"dataloader_workers": 0.8, "bf16_autocast": 3.0})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads", "bf16_autocast"), unsafe=True,
                     runner=runner, make_diff_text=False)
    t = by_fix(out)
    assert t["dataloader_workers"].verdict == "slower"
    assert t["cpu_threads"].verdict == "improved"  # measured on top of a slower rung all the same
    # workers + cpu_threads + bf16 measure 0.8 * 2 * 3 = 4.8x, better than bf16 alone.
    assert out.kept == ("dataloader_workers", "cpu_threads", "bf16_autocast")
    assert out.combined.speedup == pytest.approx(4.8, rel=0.04)


def test_a_pair_estimated_to_lose_is_not_combined(spec):
    # Measured on tiny_model: workers alone 0.28x, cpu_threads 1.34x on top of them, larger_batch
    # 9.3x. The pair (about 0.4x) must not be carried into larger_batch's combination.
    runner = FakeRunner(effects={"dataloader_workers": 0.3, "cpu_threads": 1.3, "larger_batch": 5.0})
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads", "larger_batch"), unsafe=True,
                     runner=runner, make_diff_text=False)
    t = by_fix(out)
    assert t["cpu_threads"].verdict == "improved"
    assert out.kept == ("larger_batch",) and out.combined is t["larger_batch"]
    assert any(re.search(r"dataloader_workers alone slower \(0\.\d\dx\); with cpu_threads on top "
                         r"1\.\d\dx more: about 0\.\d\dx against the plain baseline together \(at most 0\.\d\dx "
                         r"at the top of each interval\); not combined", n)
               for n in out.notes), out.notes
    assert not any(s.out_dir.name.startswith("combined") for s in runner.calls)
    assert "kept as the base" not in t["dataloader_workers"].reason


def test_a_pair_that_could_still_win_is_measured_together(spec):
    # A text classifier of ours: workers alone 0.76x [0.59-0.91], cpu_threads 1.30x [1.18-1.44] on
    # top. The point estimates make about 0.99x; the set, timed plainly, ran 1.56x faster. Only a
    # set that loses even at the top of both intervals is left unmeasured.
    runner = FakeRunner(effects={"dataloader_workers": 0.76, "cpu_threads": 1.3}, noise=0.05)
    out = run_trials(spec, refs("dataloader_workers", "cpu_threads"), runner=runner, make_diff_text=False)
    t = by_fix(out)
    assert t["dataloader_workers"].verdict == "slower" and t["cpu_threads"].verdict == "improved"
    assert (t["dataloader_workers"].speedup or 0) * (t["cpu_threads"].speedup or 0) < 1.03
    # measured together (in the on-top stage, against the plain baseline): about 0.99x, not kept
    assert any(n.startswith("the combination dataloader_workers+cpu_threads measured 0.9") and "nothing kept" in n
               for n in out.notes), out.notes
    assert any("goes into the combination as their base" in n for n in out.notes), out.notes


# -- larger_batch ----------------------------------------------------------------------------------


def test_batch_ladder_is_capped():
    assert batch_ladder(4) == (4, 16)
    assert batch_ladder(64) == (4, 16)
    assert batch_ladder(100) == (4,)
    assert batch_ladder(300) == (2,)
    assert batch_ladder(600) == ()
    assert registry.get("larger_batch").safety == "unsafe"
    assert "learning rate" in registry.get("larger_batch").description


def test_larger_batch_ladder_picks_the_best_rung_with_short_runs(spec):
    runner = FakeRunner(effects={"larger_batch": lambda p: {4: 3.0, 16: 8.0}[p["factor"]]})
    out = run_trials(spec, refs("larger_batch"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["larger_batch"]
    assert t.verdict == "improved" and t.params == {"factor": 16}
    assert t.speedup == pytest.approx(8.0, rel=0.03)
    assert re.search(r"ladder x4: [23]\.\d\dx \(improved\), x16: [78]\.\d\dx \(improved\)", t.reason)
    runs = {s.out_dir.name: s for s in runner.calls if s.fixes}
    assert {n.rsplit("-", 1)[0] for n in runs} == {"larger_batch-x4", "larger_batch-x16"}
    x4 = next(s for n, s in runs.items() if n.startswith("larger_batch-x4"))
    x16 = next(s for n, s in runs.items() if n.startswith("larger_batch-x16"))
    # The fake's baseline steps take 80 ms: x16 (est. 1.3 s a step) gets the minimum, x4 a bit more.
    assert (x4.warmup_steps, x4.timed_steps) == (3, 6)
    assert (x16.warmup_steps, x16.timed_steps) == (2, 5)
    assert out.kept == ("larger_batch",) and out.combined is t


def test_larger_batch_steps_are_short_for_slow_steps_and_kept_for_cheap_ones(spec):
    assert ladder_steps(spec, 4) == {"warmup_steps": 2, "timed_steps": 5}
    assert ladder_steps(spec, 16, step_ms=1000.0) == {"warmup_steps": 2, "timed_steps": 5}
    # Steps of 0.6 ms: even 16x as long, 20 of them fit in 2 s, so the counts are not cut.
    assert ladder_steps(spec, 16, step_ms=0.6) == {"warmup_steps": 5, "timed_steps": 20}
    steps = ladder_steps(spec, 4, accumulation=16)
    assert steps["warmup_steps"] + steps["timed_steps"] > 16


@pytest.mark.parametrize(
    ("ctx", "reason"),
    [
        (FixContext(), "no torch DataLoader"),
        (FixContext(dataloaders=(DataLoaderInfo(batch_size=None),)), "no batch_size"),
        (FixContext(dataloaders=(DataLoaderInfo(batch_size=768),)), "already 768 samples"),
    ],
)
def test_larger_batch_says_why_it_cannot_apply(ctx, reason):
    why = registry.get("larger_batch").check(ctx)
    assert why is not None and reason in why
    assert registry.get("larger_batch").check(FixContext(dataloaders=(DataLoaderInfo(batch_size=8),))) is None


def test_larger_batch_skips_without_runs_when_the_loader_has_no_batch_size(spec):
    class NoBatch(FakeRunner):
        def __call__(self, s):
            from dataclasses import replace

            cap = super().__call__(s)
            return replace(cap, dataloaders=(DataLoaderInfo(batch_size=None),))

    runner = NoBatch()
    out = run_trials(spec, refs("larger_batch"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["larger_batch"]
    assert t.verdict == "skipped" and "batch_sampler" in t.reason
    assert runner.runs_with("larger_batch") == 0


def test_with_gradient_accumulation_larger_batch_defers_to_batch_fusion(spec):
    # At run time both only scale batch_size, so at equal factors they time the same thing; the
    # advice differs, and accumulation calls for fusion (its diff keeps the effective batch).
    assert "batch_fusion" in registry.get("larger_batch").conflicts
    assert "larger_batch" in registry.get("batch_fusion").conflicts
    runner = FakeRunner(effects={"batch_fusion": 2.0, "larger_batch": 5.0}, batches_per_step=4)
    out = run_trials(spec, refs("batch_fusion", "larger_batch"), unsafe=True, runner=runner,
                     make_diff_text=False)
    t = by_fix(out)
    assert t["batch_fusion"].verdict == "improved"
    assert t["larger_batch"].verdict == "skipped" and "accumulates gradients over 4" in t["larger_batch"].reason
    assert runner.runs_with("larger_batch") == 0
    assert out.kept == ("batch_fusion",)


def test_the_diff_multiplies_the_batch_expression_and_says_to_scale_the_lr():
    src = (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True)\n"
        "val = DataLoader(ds, 4)\n"
    )
    new, manual = transform(src, [Trial("larger_batch", "unsafe", params={"factor": 16})])
    assert "DataLoader(ds, batch_size=args.batch_size * 16, shuffle=True)" in new
    assert "DataLoader(ds, 64)" in new
    assert any(m.startswith("larger_batch: each optimizer step now sees 16x") and "learning rate" in m
               for m in manual)
    combined = Trial("dataloader_workers+larger_batch", "unsafe", fixes=("dataloader_workers", "larger_batch"),
                     params={"dataloader_workers": {"num_workers": 2}, "larger_batch": {"factor": 4}})
    new, _ = transform(src, [combined])
    assert "batch_size=args.batch_size * 4, shuffle=True, num_workers=2)" in new
    _, manual = transform("x = 1\n", [Trial("larger_batch", "unsafe", params={"factor": 4})])
    assert any("larger_batch: no DataLoader(...) call found" in m for m in manual)


# -- run time ----------------------------------------------------------------------------------


def test_runtime_grows_the_batch_within_the_cap_and_the_data_set():
    import torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    from advisor.fixes import runtime

    ds = TensorDataset(torch.randn(256, 2))
    try:
        notes = runtime.install([FixRequest("larger_batch", {"factor": 16})])
        assert DataLoader(ds, batch_size=4).batch_size == 64
        assert "batch_size 4->64 (x16)" in str(notes["larger_batch"]) and "learning rate" in str(notes["larger_batch"])
        assert DataLoader(ds, batch_size=32).batch_size == 256  # capped by the data set (256 samples)
        runtime.uninstall()
        notes = runtime.install([FixRequest("larger_batch", {"factor": 16, "max_batch": 64})])
        assert DataLoader(ds, batch_size=8).batch_size == 64
        assert "capped from x16" in str(notes["larger_batch"])
        runtime.uninstall()
        notes = runtime.install([FixRequest("larger_batch", {"factor": 4})])
        sampler = BatchSampler(SequentialSampler(ds), 4, drop_last=False)
        assert DataLoader(ds, batch_sampler=sampler).batch_size is None
        assert str(notes["larger_batch"]).startswith("not applied: the DataLoader uses a batch_sampler")
        runtime.uninstall()
        notes = runtime.install([FixRequest("larger_batch", {"factor": 4})])
        DataLoader(ds, batch_size=256)
        assert str(notes["larger_batch"]).startswith("not applied: batch_size 256 cannot grow")
    finally:
        runtime.uninstall()


SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
ds = TensorDataset(torch.randn(512, 4), torch.randn(512, 1))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(ds, batch_size=4, shuffle=True, drop_last=True):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("seen", x.shape[0])
"""


@pytest.mark.e2e
def test_a_real_run_gets_the_larger_batch(tmp_path: Path):
    capture_run = pytest.importorskip("advisor.capture.run")
    script = tmp_path / "tiny.py"
    script.write_text(SCRIPT)
    spec = RunSpec(
        script=script, out_dir=tmp_path / "run", warmup_steps=2, timed_steps=5, profiled_steps=0,
        seed=0, record_loss_steps=3, quiet=True, fixes=(FixRequest("larger_batch", {"factor": 16}),),
        fix_installers=("advisor.fixes.runtime",),
    )
    cap = capture_run.capture(spec)
    assert cap.ok, cap.error
    assert [d.batch_size for d in cap.dataloaders] == [64]
    assert set(cap.timed.samples) == {64}
    assert str(cap.fix_notes["larger_batch"]).startswith("applied: batch_size 4->64 (x16)")
    assert "batch_size=4" in script.read_text()  # the user's file is untouched


def test_conflicting_wins_keep_the_faster_one(spec):
    # bf16 and fp16 autocast cannot be combined: the faster measured one is kept, with a note.
    runner = FakeRunner(effects={"bf16_autocast": 1.3, "fp16_amp": 1.8}, device="cuda:0")
    out = run_trials(spec, refs("bf16_autocast", "fp16_amp"), unsafe=True, runner=runner,
                     make_diff_text=False)
    t = by_fix(out)
    assert t["bf16_autocast"].verdict == "improved" and t["fp16_amp"].verdict == "improved"
    assert out.kept == ("fp16_amp",)
    assert any("bf16_autocast conflicts with a faster kept fix" in n for n in out.notes)
    assert not any(s.out_dir.name.startswith("combined") for s in runner.calls)


# -- fixes that their rung's runs show to be inert -------------------------------------------------


def test_persistent_workers_is_not_run_when_no_rung_run_reached_an_epoch_end(spec):
    runner = FakeRunner(effects={"dataloader_workers": 1.5, "persistent_workers": 1.3}, epoch_ends=0)
    out = run_trials(spec, refs("dataloader_workers", "persistent_workers"), runner=runner, make_diff_text=False)
    t = by_fix(out)["persistent_workers"]
    assert t.verdict == "skipped"
    assert runner.runs_with("persistent_workers") == 0
    rung_runs = sum(1 for s in runner.calls if [(f.id, f.params.get("num_workers")) for f in s.fixes]
                    == [("dataloader_workers", 2)])
    assert f"none of the {rung_runs} dataloader_workers@2 runs" in t.reason
    assert "end of an epoch" in t.reason
    # named with --fix, or with the inert skips off (--exhaustive), it is measured anyway
    for kwargs in ({"only": ["dataloader_workers", "persistent_workers"]}, {"skip_inert": False}):
        runner = FakeRunner(effects={"dataloader_workers": 1.5, "persistent_workers": 1.3}, epoch_ends=0)
        out = run_trials(spec, refs("dataloader_workers", "persistent_workers"), runner=runner,
                         make_diff_text=False, **kwargs)
        assert by_fix(out)["persistent_workers"].verdict == "improved", kwargs
        assert runner.runs_with("persistent_workers") > 0


def test_persistent_workers_is_measured_when_a_rung_run_crossed_an_epoch(spec):
    runner = FakeRunner(effects={"dataloader_workers": 1.5, "persistent_workers": 1.3}, epoch_ends=1)
    out = run_trials(spec, refs("dataloader_workers", "persistent_workers"), runner=runner, make_diff_text=False)
    assert by_fix(out)["persistent_workers"].verdict == "improved"


@pytest.mark.parametrize(("rung_ms", "skipped"), [(69.0, True), (15.0, False)])
def test_prefetch_is_not_run_when_the_workers_fall_behind_on_average(spec, rung_ms, skipped):
    # baseline 89.7 ms a step, 90.2% of it data loading: 8.8 ms of everything else
    # (examples/data_loading.py); with 2 workers a step of 69 ms means the workers are behind.
    runner = FakeRunner(effects={"dataloader_workers": 1.3, "prefetch_factor": 1.2},
                        step_ms={"dataloader_workers": rung_ms})
    base_ms = 8000.0 / runner.base
    breakdown = {"data_loading": 1.0 - 8.8 / base_ms, "cpu_ops": 8.8 / base_ms}
    out = run_trials(spec, refs("dataloader_workers", "prefetch_factor"), runner=runner,
                     make_diff_text=False, breakdown=breakdown)
    t = by_fix(out)["prefetch_factor"]
    if skipped:
        assert t.verdict == "skipped"
        assert runner.runs_with("prefetch_factor") == 0
        assert re.search(r"a step still takes 69\.0 ms, 7\.[89]x the 8\.[78] ms the baseline spent on everything "
                         "but data loading", t.reason), t.reason
    else:
        assert t.verdict == "improved"
    # without the breakdown (--exhaustive reads none) nothing says the workers are behind
    runner.calls.clear()
    out = run_trials(spec, refs("dataloader_workers", "prefetch_factor"), runner=runner, make_diff_text=False)
    assert by_fix(out)["prefetch_factor"].verdict == "improved"


def test_persistent_workers_is_not_run_when_steps_are_counted_from_loader_batches(spec):
    # the gap between epochs, where workers start again, belongs to no step then
    class LoaderSteps(FakeRunner):
        def __call__(self, s):
            from dataclasses import replace

            return replace(super().__call__(s), step_source="dataloader")

    runner = LoaderSteps(effects={"dataloader_workers": 1.5, "persistent_workers": 1.3}, epoch_ends=1)
    out = run_trials(spec, refs("dataloader_workers", "persistent_workers"), runner=runner, make_diff_text=False)
    t = by_fix(out)["persistent_workers"]
    assert t.verdict == "skipped" and runner.runs_with("persistent_workers") == 0
    assert "count their steps from DataLoader batches" in t.reason
