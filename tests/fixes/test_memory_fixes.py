"""The memory fixes: "activation_checkpointing" and "fit_accumulation", at run time, in the loop and in the diff.

Their objective is memory (``Fix.objective``): a trial is kept when it saves memory with loss
parity, whatever speed it costs (reported beside it), and both are tried when the baseline runs
out of memory under ``--memory-budget``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from fixes_fakes import FakeRunner, by_fix, refs
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader, TensorDataset

from advisor.capture.model import FixRequest, RunSpec
from advisor.fixes import catalog, runtime
from advisor.fixes.diff import transform
from advisor.fixes.fix import FixContext, Objective
from advisor.fixes.loop import run_trials
from advisor.fixes.loop.memory import judge_memory
from advisor.fixes.model import Trial
from advisor.fixes.stats import Estimate

MiB = 2**20


@pytest.fixture(autouse=True)
def _undo():
    yield
    runtime.uninstall()


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.up, self.act, self.down = nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(x)))


class Stack(nn.Module):
    def __init__(self, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def grads_of(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    model(x).square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


# -- the Fix objects ---------------------------------------------------------------------------


def test_both_fixes_declare_memory_as_their_objective_and_a_rule_suggests_them():
    from advisor.fixes.docs import suggested_by

    for fix_id in ("activation_checkpointing", "fit_accumulation"):
        fix = catalog.get(fix_id)
        assert fix.objective is Objective.MEMORY
        assert "ME001" in str(suggested_by(fix_id))
    assert catalog.get("dataloader_workers").objective is Objective.SPEED
    with pytest.raises(ValueError, match="objective"):
        catalog.get("tf32").__class__(id="x", safety="safe", description="d", objective="size")


def test_fit_accumulation_applies_only_near_the_limit_or_out_of_memory():
    from advisor.capture.model import DataLoaderInfo

    fix = catalog.get("fit_accumulation")
    loader = (DataLoaderInfo(batch_size=64),)
    assert "--memory-budget" in fix.check(FixContext(dataloaders=loader, peak_memory_bytes=900))
    assert "fits" in fix.check(FixContext(dataloaders=loader, peak_memory_bytes=500, memory_limit_bytes=1000))
    assert fix.check(FixContext(dataloaders=loader, peak_memory_bytes=950, memory_limit_bytes=1000)) is None
    assert fix.check(FixContext(dataloaders=loader, out_of_memory=True)) is None
    odd = (DataLoaderInfo(batch_size=7),)
    assert "cannot be split" in fix.check(FixContext(dataloaders=odd, out_of_memory=True))
    assert fix.check(FixContext(out_of_memory=True)) == "the script created no torch DataLoader"
    rungs = fix.plan_variants(FixContext(dataloaders=loader, out_of_memory=True), RunSpec(script="t.py"))
    assert [v.params for v in rungs] == [{"k": k, "micro_batch": 64 // k} for k in (2, 4, 8)]


def test_checkpointing_is_refused_for_a_loop_without_an_optimizer():
    fix = catalog.get("activation_checkpointing")
    assert "no optimizer step" in fix.check(FixContext(step_source="dataloader"))
    assert fix.check(FixContext(step_source="optimizer")) is None


# -- activation_checkpointing at run time -------------------------------------------------------


def test_repeated_blocks_of_a_module_list_are_checkpointed_with_the_same_gradients():
    torch.manual_seed(0)
    model, x = Stack(), torch.randn(4, 8)
    expected = grads_of(model, x)
    notes = runtime.install([FixRequest("activation_checkpointing")])
    got = grads_of(model, x)
    assert notes["activation_checkpointing"].detail == "checkpointed 3 Block blocks of blocks (use_reentrant=False)"
    assert all(getattr(b.forward, "__wrapped__", None) is not None for b in model.blocks)
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b)


def test_checkpointed_blocks_keep_fewer_tensors_for_backward():
    def saved_bytes(model: nn.Module, x: torch.Tensor) -> int:
        total = [0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            total[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x)
        return total[0]

    torch.manual_seed(0)
    model, x = Stack(depth=4), torch.randn(64, 8)
    plain = saved_bytes(model, x)
    runtime.install([FixRequest("activation_checkpointing")])
    model(x)  # the first outermost call wraps the blocks
    assert saved_bytes(model, x) < plain / 2


def test_sequential_stages_are_checkpointed_and_single_layers_are_not():
    stages = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3)), nn.Linear(8, 1))
    notes = runtime.install([FixRequest("activation_checkpointing")])
    stages(torch.randn(2, 8)).sum().backward()
    assert "3 Sequential blocks" in notes["activation_checkpointing"].detail
    runtime.uninstall()
    flat = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())
    notes = runtime.install([FixRequest("activation_checkpointing")])
    flat(torch.randn(2, 8))
    assert runtime.is_not_applied(notes["activation_checkpointing"])
    assert "no repeated blocks" in notes["activation_checkpointing"].detail


def test_a_hugging_face_style_model_is_asked_to_checkpoint_itself():
    class FakePretrained(nn.Module):
        """Duck-types transformers' PreTrainedModel (not installed here)."""

        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.asked: dict | None = None

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
            self.asked = gradient_checkpointing_kwargs

        def forward(self, x):
            return self.lin(x)

    model = FakePretrained()
    notes = runtime.install([FixRequest("activation_checkpointing")])
    model(torch.randn(1, 4))
    assert model.asked == {"use_reentrant": False}
    assert notes["activation_checkpointing"].detail == "FakePretrained.gradient_checkpointing_enable()"


# -- fit_accumulation at run time ---------------------------------------------------------------


def train(
    epochs: int = 1, scheduler: bool = False, gamma: float = 1.0, per_epoch: bool = False,
) -> tuple[list[torch.Tensor], int, list[int]]:
    """A plain loop: zero_grad, forward, backward, step per DataLoader batch of 8 (and an LR scheduler's step)."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=8, shuffle=False)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # gamma 1: the scheduler changes nothing, but it wraps opt.step as schedulers do
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=gamma) if scheduler else None
    steps = [0]
    handle = register_optimizer_step_post_hook(lambda *a: steps.__setitem__(0, steps[0] + 1))
    sizes = []
    try:
        for _ in range(epochs):
            for x, y in loader:
                sizes.append(len(x))
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                if sched is not None and not per_epoch:
                    sched.step()
            if sched is not None and per_epoch:
                sched.step()
    finally:
        handle.remove()
    return [p.detach().clone() for p in model.parameters()], steps[0], sizes


def test_micro_batches_accumulate_to_the_same_optimizer_steps_as_the_full_batch():
    expected, steps, sizes = train()
    assert steps == 4 and sizes == [8] * 4
    notes = runtime.install([FixRequest("fit_accumulation", {"k": 2, "micro_batch": 4})])
    got, fixed_steps, fixed_sizes = train()
    assert fixed_sizes == [4] * 8 and fixed_steps == 4  # twice the micro-batches, the same optimizer steps
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert "batch_size 8->4 with 2 micro-batches" in notes["fit_accumulation"].detail


def test_an_lr_scheduler_built_on_the_optimizer_still_works():
    # a plain function as opt.step made StepLR(opt) raise AttributeError ('__func__')
    expected, _, _ = train(scheduler=True)
    runtime.install([FixRequest("fit_accumulation", {"k": 2, "micro_batch": 4})])
    got, steps, sizes = train(scheduler=True)
    assert sizes == [4] * 8 and steps == 4
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("per_epoch", [False, True], ids=["per-iteration", "per-epoch"])
def test_an_lr_schedule_follows_the_real_optimizer_steps(per_epoch):
    # halving the LR at every scheduler step: stepped per micro-batch, the schedule would run
    # twice as fast under 2 micro-batches and the weights would differ; per epoch it is untouched
    expected, _, _ = train(epochs=2, scheduler=True, gamma=0.5, per_epoch=per_epoch)
    runtime.install([FixRequest("fit_accumulation", {"k": 2, "micro_batch": 4})])
    got, steps, sizes = train(epochs=2, scheduler=True, gamma=0.5, per_epoch=per_epoch)
    assert sizes == [4] * 16 and steps == 8
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_batch_k_does_not_divide_is_left_alone_and_nothing_accumulates():
    expected, _, _ = train()
    notes = runtime.install([FixRequest("fit_accumulation", {"k": 3})])
    got, steps, sizes = train()
    assert sizes == [8] * 4 and steps == 4
    assert runtime.is_not_applied(notes["fit_accumulation"])
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b)


# -- the verdict on memory -----------------------------------------------------------------------


def test_judge_memory_decides_on_the_peak_and_reports_the_speed_cost():
    slower = Estimate(speedup=0.8, ci_low=0.75, ci_high=0.85, verdict="slower", pairs=3)
    verdict, why = judge_memory(60 * MiB, 100 * MiB, slower)
    assert verdict == "improved"
    assert "peak 100 MiB -> 60 MiB (40% less)" in why and "its speed: 0.80x [0.75, 0.85] (slower)" in why
    verdict, why = judge_memory(98 * MiB, 100 * MiB, slower)
    assert verdict == "no_effect" and "under the 5%" in why
    assert judge_memory(None, 100 * MiB, slower)[0] == "undecided"


def test_a_slower_checkpointing_that_saves_memory_is_kept_beside_a_speed_win(spec):
    runner = FakeRunner(
        effects={"activation_checkpointing": 0.8, "dataloader_workers": 1.5},
        memory={"activation_checkpointing": 0.6},
    )
    out = run_trials(spec, refs("dataloader_workers", "activation_checkpointing"), runner=runner,
                     make_diff_text=False, early_stop=False)
    t = by_fix(out)["activation_checkpointing"]
    assert t.verdict == "improved" and t.speedup == pytest.approx(0.8, rel=0.03)
    assert t.memory_ratio == pytest.approx(0.6, rel=0.01)
    assert "objective memory: peak 100 MiB -> 60 MiB (40% less); its speed: 0." in t.reason
    assert out.kept == ("dataloader_workers", "activation_checkpointing")
    assert out.combined.fix == "dataloader_workers"  # the speed fixes' measurement; memory is kept apart
    assert any("kept for the memory it saves" in n for n in out.notes)


def test_checkpointing_that_saves_no_memory_is_not_kept(spec):
    runner = FakeRunner(effects={"activation_checkpointing": 0.8}, memory={"activation_checkpointing": 0.99})
    out = run_trials(spec, refs("activation_checkpointing"), runner=runner, make_diff_text=False)
    assert by_fix(out)["activation_checkpointing"].verdict == "no_effect"
    assert out.kept == ()


def test_near_the_budget_the_accumulation_ladder_keeps_the_largest_micro_batch_that_saves(spec):
    spec = replace(spec, memory_budget_bytes=105 * MiB)
    runner = FakeRunner(memory={"fit_accumulation": lambda p: {2: 0.7, 4: 0.5, 8: 0.4}[p["k"]]},
                        effects={"fit_accumulation": lambda p: 1.0 / (1 + 0.1 * p["k"])})
    out = run_trials(spec, refs("fit_accumulation"), unsafe=True, runner=runner, make_diff_text=False)
    t = by_fix(out)["fit_accumulation"]
    assert t.verdict == "improved" and t.params == {"k": 2, "micro_batch": 4}
    assert "ladder k=2 (micro-batch 4)" in t.reason
    assert out.kept == ("fit_accumulation",)


def test_a_baseline_out_of_memory_is_named_and_the_memory_fixes_are_tried_alone(spec):
    spec = replace(spec, memory_budget_bytes=80 * MiB)
    runner = FakeRunner(
        effects={"activation_checkpointing": 0.7, "fit_accumulation": 0.9},
        memory={"activation_checkpointing": 0.9, "fit_accumulation": lambda p: {2: 0.85, 4: 0.6, 8: 0.5}[p["k"]]},
    )
    out = run_trials(spec, refs("dataloader_workers", "activation_checkpointing"), unsafe=True, runner=runner,
                     make_diff_text=False, repeats=2)
    t = by_fix(out)
    assert t["dataloader_workers"].verdict == "skipped" and "ran out of memory" in t["dataloader_workers"].reason
    assert t["activation_checkpointing"].verdict == "failed"  # 90 MiB: still over the 80 MiB budget
    assert t["fit_accumulation"].verdict == "improved" and t["fit_accumulation"].params["k"] == 4
    assert t["fit_accumulation"].speedup is None and t["fit_accumulation"].samples_per_s
    assert "the baseline ran out of memory, fits: peak 60 MiB of the 80 MiB budget" in t["fit_accumulation"].reason
    assert "ladder k=2 (micro-batch 4): failed" in t["fit_accumulation"].reason
    assert out.kept == ("fit_accumulation",) and out.combined is t["fit_accumulation"]
    assert any("the baseline ran out of memory (over the memory budget)" in n for n in out.notes)
    assert runner.runs_with("dataloader_workers") == 0


def test_a_memory_fix_whose_peak_went_over_the_budget_between_the_watchdogs_polls_does_not_fit(spec):
    # make test-all: fit_accumulation's k=2 run ended normally at a peak of 836 MiB against an
    # 800 MiB budget, and was kept as "fits: peak 836 MiB of the 800 MiB budget"
    spec = replace(spec, memory_budget_bytes=80 * MiB)
    runner = FakeRunner(memory={"fit_accumulation": lambda p: {2: 0.85, 4: 0.6, 8: 0.5}[p["k"]]},
                        peak_between_polls={"fit_accumulation"})
    out = run_trials(spec, refs("fit_accumulation"), unsafe=True, runner=runner, make_diff_text=False, repeats=1)
    t = by_fix(out)["fit_accumulation"]
    assert t.verdict == "improved" and t.params["k"] == 4
    assert "fits: peak 60 MiB of the 80 MiB budget" in t.reason
    assert "ladder k=2 (micro-batch 4): failed, k=4" in t.reason  # 85 MiB: over the 80 MiB budget


def test_a_speed_fix_whose_peak_went_over_the_budget_between_the_watchdogs_polls_is_not_kept(spec):
    spec = replace(spec, memory_budget_bytes=110 * MiB)  # the baseline's 100 MiB fits
    runner = FakeRunner(effects={"dataloader_workers": 1.5}, memory={"dataloader_workers": 1.2},
                        peak_between_polls={"dataloader_workers"}, workers=0)
    out = run_trials(spec, refs("dataloader_workers"), runner=runner, make_diff_text=False)
    t = by_fix(out)["dataloader_workers"]
    assert t.verdict == "failed" and "its peak 120 MiB went over the 110 MiB memory budget" in t.reason
    assert out.kept == ()


def test_without_unsafe_fixes_an_out_of_memory_baseline_tries_only_the_safe_memory_fix(spec):
    spec = replace(spec, memory_budget_bytes=80 * MiB)
    runner = FakeRunner(memory={"activation_checkpointing": 0.5})
    out = run_trials(spec, refs("activation_checkpointing"), runner=runner, make_diff_text=False, repeats=1)
    assert out.kept == ("activation_checkpointing",)
    assert "fit_accumulation" in out.hidden_unsafe and runner.runs_with("fit_accumulation") == 0


# -- the diff ------------------------------------------------------------------------------------


def test_the_diff_checkpoints_the_calls_in_a_loop_over_the_blocks():
    src = (
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        for layer in self.layers:\n"
        "            x = layer(x)  # keep me\n"
        "        return self.head(x)\n"
    )
    new, manual = transform(src, [Trial("activation_checkpointing", "safe")])
    assert "from torch.utils.checkpoint import checkpoint\n" in new
    assert "            x = checkpoint(layer, x, use_reentrant=False)  # keep me\n" in new
    assert manual == []


def test_without_a_block_loop_the_diff_says_what_to_change_by_hand():
    new, manual = transform("import torch\nmodel = build()\n", [
        Trial("activation_checkpointing", "safe"), Trial("fit_accumulation", "unsafe", params={"k": 4, "micro_batch": 16}),
    ])
    assert new == "import torch\nmodel = build()\n"
    assert any("gradient_checkpointing_enable()" in m for m in manual)
    assert any(m.startswith("fit_accumulation: load micro-batches of 16") and "every 4 micro-batches" in m for m in manual)


PEAK_AT = ("model.py:21 (forward, block 1 (Deep))", "train.py:42 (<module>)")


def test_the_memory_fixes_carry_where_the_peak_is_held_into_their_diff_notes(spec):
    spec = replace(spec, memory_budget_bytes=105 * MiB)
    runner = FakeRunner(memory={"activation_checkpointing": 0.6, "fit_accumulation": 0.7})
    out = run_trials(spec, refs("activation_checkpointing", "fit_accumulation"), unsafe=True, runner=runner,
                     make_diff_text=False, peak_at=PEAK_AT, peak_activation_frac=0.72)
    t = by_fix(out)
    assert t["activation_checkpointing"].params == {"peak_at": list(PEAK_AT), "activation_frac": 0.72}
    assert t["fit_accumulation"].params["peak_at"] == list(PEAK_AT)
    _, manual = transform("import torch\nmodel = build()\n", [t["activation_checkpointing"], t["fit_accumulation"]])
    where = "the peak memory is allocated most at model.py:21 (forward, block 1 (Deep)), train.py:42 (<module>)"
    assert f"activation_checkpointing: {where}; activations kept for backward are 72% of it: checkpoint" in "\n".join(manual)
    assert any(m.startswith(f"fit_accumulation: {where}") for m in manual), manual


def test_without_a_known_peak_the_memory_fixes_say_nothing_of_it(spec):
    runner = FakeRunner(memory={"activation_checkpointing": 0.6})
    out = run_trials(spec, refs("activation_checkpointing"), runner=runner, make_diff_text=False)
    assert by_fix(out)["activation_checkpointing"].params == {}


def test_the_fix_loop_reads_the_peak_from_the_memory_finding():
    from advisor.api.fixloop import _peak
    from advisor.engine.model import Finding, FixRef, Location

    sync = Finding("SY001", "s", "sync", "warning", "m", evidence={}, locations=(Location("t.py", 3, "f"),),
                   fixes=(FixRef("host_reads", "safe"),))
    memory = Finding("ME001", "m", "memory", "warning", "m", evidence={"peak_activation_frac": 0.5},
                     locations=(Location("model.py", 21, "forward, block 1 (Deep)"), Location("t.py", 42)),
                     fixes=(FixRef("activation_checkpointing", "safe"),))
    assert _peak([sync, memory]) == {"peak_at": ("model.py:21 (forward, block 1 (Deep))", "t.py:42"),
                                     "peak_activation_frac": 0.5}
    assert _peak([sync]) == {}


def test_the_report_calls_a_memory_fix_that_improved_saves_memory_not_faster():
    from advisor.report.view import _verdict_label

    assert _verdict_label(Trial("activation_checkpointing", "safe", speedup=0.8, verdict="improved")) == "saves memory"
    assert _verdict_label(Trial("dataloader_workers", "safe", speedup=1.8, verdict="improved")) == "faster"
    assert _verdict_label(Trial("fit_accumulation", "unsafe", verdict="failed")) == "failed"
