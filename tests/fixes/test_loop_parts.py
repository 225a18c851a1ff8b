"""The trial loop's parts alone: plan (no run), select (no run), and what a trial records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixes_fakes import FakeRunner

from advisor.capture.model import DataLoaderInfo, RunSpec
from advisor.engine.model import FixRef
from advisor.fixes import catalog
from advisor.fixes.fix import FixContext
from advisor.fixes.loop import run_trials
from advisor.fixes.loop.plan import plan_trials
from advisor.fixes.loop.select import collapse, pick_kept, select_combination
from advisor.fixes.loop.text import label_of
from advisor.fixes.model import Trial, set_name

SPEC = RunSpec(script=Path("train.py"))


def test_plan_skips_refused_fixes_waits_on_top_and_lays_out_ladders():
    ctx = FixContext(cpu_count=2, dataloaders=(DataLoaderInfo(batch_size=4),), batches_per_step=1)
    plan = plan_trials(["pin_memory", "dataloader_workers", "cpu_threads", "larger_batch"], ctx, SPEC, 5.0)
    assert set(plan.skipped) == {"pin_memory"} and "CUDA" in plan.skipped["pin_memory"].reason
    assert plan.on_top == ["cpu_threads"]  # no workers in the baseline: measured on top of them
    assert [v.label for v in plan.variants] == [
        "dataloader_workers@1", "dataloader_workers@2", "larger_batch@x4", "larger_batch@x16",
    ]
    assert all(v.requests[-1].id == v.fix for v in plan.variants)
    with_workers = FixContext(cpu_count=4, dataloaders=(DataLoaderInfo(batch_size=4, num_workers=1),))
    assert plan_trials(["cpu_threads"], with_workers, SPEC).on_top == []  # the base is there already


def _t(fix: str, speedup: float, verdict: str = "improved", **kw) -> Trial:
    return Trial(fix=fix, safety="safe", speedup=speedup, verdict=verdict, **kw)


def test_select_keeps_the_faster_of_conflicting_fixes_and_carries_the_base_of_an_on_top_fix():
    trials = [
        _t("bf16_autocast", 1.3), _t("fp16_amp", 1.8),
        _t("dataloader_workers", 1.0, "no_effect", params={"num_workers": 2}), _t("cpu_threads", 1.5),
    ]
    sel = select_combination(trials, frozenset({"cpu_threads"}))
    assert [t.fix for t in sel.chosen] == ["fp16_amp", "dataloader_workers", "cpu_threads"]
    assert any("bf16_autocast conflicts" in n for n in sel.notes)
    assert sel.carried and "dataloader_workers@2 goes into the combination" in sel.carried[0]
    assert sel.single is None
    lone = select_combination([_t("pin_memory", 1.4), _t("tf32", 0.9, "slower")])
    assert lone.single is not None and lone.single.fix == "pin_memory"


def test_pick_kept_falls_back_to_the_best_standalone_fix():
    a, b = _t("pin_memory", 1.5), _t("dataloader_workers", 1.2)
    worse = Trial(fix="pin_memory+dataloader_workers", fixes=("pin_memory", "dataloader_workers"),
                  safety="safe", speedup=1.3, verdict="improved")
    combined, kept, notes = pick_kept(worse, [a, b])
    assert combined is worse and kept == [a] and "keeping pin_memory only" in notes[0]
    better = Trial(fix="x", fixes=("pin_memory", "dataloader_workers"), safety="safe", speedup=1.7, verdict="improved")
    assert pick_kept(better, [a, b])[1] == [a, b]


def test_a_fix_decided_faster_on_top_of_the_one_standalone_win_stays_in_the_kept_set():
    workers = _t("dataloader_workers", 1.68, params={"num_workers": 2})
    threads = _t("cpu_threads", 1.16, reference="dataloader_workers@2")
    pair = Trial(fix="dataloader_workers+cpu_threads", fixes=("dataloader_workers", "cpu_threads"), safety="safe",
                 speedup=1.53, verdict="improved")
    on_top = frozenset({"cpu_threads"})
    assert pick_kept(pair, [workers, threads], on_top) == (pair, [workers, threads], [])
    # not decided on top of it, on top of another rung, or the pair itself not faster: the old comparison
    for top in (_t("cpu_threads", 1.05, "no_effect", reference="dataloader_workers@2"),
                _t("cpu_threads", 1.16, reference="dataloader_workers@1")):
        combined, kept, notes = pick_kept(pair, [workers, top], on_top)
        assert kept == [workers] and "keeping dataloader_workers only" in notes[0]
    slow = Trial(fix=pair.fix, fixes=pair.fixes, safety="safe", speedup=1.02, verdict="no_effect")
    assert pick_kept(slow, [workers, threads], on_top)[1] == [workers]


def test_collapse_reports_the_best_rung_with_the_ladder():
    rungs = [_t("larger_batch", 2.0, params={"factor": 4}), _t("larger_batch", 3.0, params={"factor": 16})]
    (best,) = collapse(rungs).values()
    assert best.params == {"factor": 16} and "ladder x4: 2.00x (improved), x16: 3.00x (improved)" in best.reason


def test_every_trial_reports_peak_memory_next_to_its_speedup_and_fields_not_strings(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    spec = RunSpec(script=script, out_dir=tmp_path / "run")
    runner = FakeRunner(
        effects={"dataloader_workers": 1.0, "cpu_threads": 1.6, "fused_optimizer": 1.3},
        memory={"dataloader_workers": 1.5, "fused_optimizer": 0.9},
    )
    refs = [FixRef("dataloader_workers", "safe"), FixRef("cpu_threads", "safe"), FixRef("fused_optimizer", "unsafe")]
    out = run_trials(spec, refs, unsafe=True, runner=runner, make_diff_text=False)
    by = {t.fix: t for t in out.trials}
    fused = by["fused_optimizer"]
    assert fused.baseline_peak_memory_bytes == 100 * 2**20
    assert fused.memory_ratio == pytest.approx(0.9, rel=0.01)
    assert fused.loss_max_rel_diff == pytest.approx(0.0) and fused.reference is None
    threads = by["cpu_threads"]
    assert threads.reference is not None and threads.reference.startswith("dataloader_workers@")
    assert threads.baseline_peak_memory_bytes == 150 * 2**20  # its reference is the workers run
    assert out.combined is not None and set(out.combined.fixes) == set(out.kept)
    assert len(out.combined.fixes) == 3 and out.combined.peak_memory_bytes is not None


def test_the_compile_mode_ladder_reports_its_best_rung_on_cuda(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    speed = {None: 1.2, "reduce-overhead": 1.6, "max-autotune": 1.4}
    runner = FakeRunner(effects={"torch_compile": lambda p: speed[p.get("mode")]}, device="cuda:0")
    out = run_trials(RunSpec(script=script, out_dir=tmp_path / "run"), [FixRef("torch_compile", "unsafe")],
                     unsafe=True, runner=runner, make_diff_text=False)
    (t,) = out.trials
    assert t.params == {"mode": "reduce-overhead"} and t.speedup == pytest.approx(1.6, rel=0.05)
    assert re.search(r"ladder default: 1\.[12]\dx \(improved\), reduce-overhead: 1\.[56]\dx .*max-autotune: 1\.[34]\dx", t.reason)
    assert t.time_to_first_step_s == 3.0 and t.baseline_time_to_first_step_s == 1.0  # compile apart


def test_cpu_threads_is_standalone_without_a_dataloader():
    no_loader = FixContext(cpu_count=2, intra_op_threads=2)
    plan = plan_trials(["dataloader_workers", "cpu_threads"], no_loader, SPEC)
    assert plan.on_top == [] and "no torch DataLoader" in plan.skipped["dataloader_workers"].reason
    assert [(v.label, v.params) for v in plan.variants] == [("cpu_threads@1", {"threads": 1, "standalone": True})]
    eight = plan_trials(["cpu_threads"], FixContext(cpu_count=8, intra_op_threads=8), SPEC)
    assert [v.params["threads"] for v in eight.variants] == [1, 4]
    one = plan_trials(["cpu_threads"], FixContext(cpu_count=2, intra_op_threads=1), SPEC)
    assert "already runs one intra-op thread" in one.skipped["cpu_threads"].reason


def test_cpu_threads_is_measured_alone_when_workers_are_not_tried():
    # a DataLoader without workers, and a diagnosis that asks for threads only (CO005: eight
    # threads on two cores): on top of workers it would be skipped, never measured
    loader = FixContext(cpu_count=2, intra_op_threads=8, dataloaders=(DataLoaderInfo(batch_size=16, num_workers=0),))
    alone = plan_trials(["cpu_threads"], loader, SPEC)
    assert alone.on_top == [] and [v.params for v in alone.variants] == [
        {"threads": 1, "standalone": True}, {"threads": 4, "standalone": True}]
    both = plan_trials(["dataloader_workers", "cpu_threads"], loader, SPEC)
    assert both.on_top == ["cpu_threads"]  # with workers tried, on top of their best rung, as before


def test_workers_past_the_cores_get_a_fewer_workers_ladder():
    ctx = FixContext(cpu_count=2, dataloaders=(DataLoaderInfo(batch_size=4, num_workers=4),))
    plan = plan_trials(["dataloader_workers"], ctx, SPEC)
    assert [(v.label, v.params) for v in plan.variants] == [
        ("dataloader_workers@2", {"num_workers": 2, "fewer": True}),
        ("dataloader_workers@1", {"num_workers": 1, "fewer": True}),
    ]


def test_a_rung_keeps_its_run_name_whatever_its_params():
    # Past the cores the workers ladder goes down, and its rungs carry two params (num_workers,
    # fewer): the trial of a rung must still name the runs its variant made.
    crowded = FixContext(cpu_count=2, dataloaders=(DataLoaderInfo(batch_size=4, num_workers=4),))
    rungs = catalog.get("dataloader_workers").plan_variants(crowded, SPEC)
    assert rungs and all(len(v.params) == 2 for v in rungs)
    for v in rungs:
        t = _t("dataloader_workers", 1.2, params=v.params)
        assert label_of(t) == v.label == f"dataloader_workers@{v.params['num_workers']}"
    ladder = catalog.get("larger_batch").plan_variants(FixContext(dataloaders=(DataLoaderInfo(batch_size=4),)), SPEC)
    assert [label_of(_t("larger_batch", 2.0, params=v.params)) for v in ladder] == [v.label for v in ladder]
    assert set_name(["pin_memory", "tf32"]) == "pin_memory+tf32" and set_name(["tf32"]) == "tf32"
