"""inference_mode: refused for training loops, applied at run time only with grad on, and its diff."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from advisor.capture.model import FixRequest
from advisor.fixes import catalog, runtime
from advisor.fixes.diff import transform
from advisor.fixes.fix import FixContext
from advisor.fixes.model import Trial


@pytest.fixture(autouse=True)
def _undo():
    yield
    runtime.uninstall()


def test_a_training_loop_is_refused_by_the_check():
    fix = catalog.get("inference_mode")
    assert "trains" in fix.check(FixContext(step_source="optimizer"))
    assert fix.check(FixContext(step_source="dataloader")) is None


def test_model_calls_run_without_autograd_and_the_outputs_are_unchanged():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    expected = model(x)
    assert expected.requires_grad
    notes = runtime.install([FixRequest("inference_mode")])
    assert str(notes["inference_mode"]).startswith("installed: ")
    out = model(x)
    assert not out.requires_grad and torch.is_inference(out)
    torch.testing.assert_close(out, expected.detach())
    assert str(notes["inference_mode"]) == "applied: torch.inference_mode() around Sequential calls"


def test_a_script_already_under_no_grad_is_left_alone_and_says_so():
    model = nn.Linear(4, 2)
    notes = runtime.install([FixRequest("inference_mode")])
    with torch.no_grad():
        out = model(torch.randn(1, 4))
    assert not torch.is_inference(out)
    assert runtime.is_not_applied(notes["inference_mode"])
    assert "already runs without autograd" in str(notes["inference_mode"])


def test_the_diff_wraps_the_loop_over_the_dataloader():
    src = (
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, batch_size=8)\n"
        "for i, (x,) in enumerate(loader):\n"
        "    pred = model(x)\n"
    )
    new, manual = transform(src, [Trial("inference_mode", "safe")])
    assert "with torch.inference_mode():\n    for i, (x,) in enumerate(loader):\n        pred = model(x)\n" in new
    assert manual == []
    _, manual = transform("for x in batches:\n    model(x)\n", [Trial("inference_mode", "safe")])
    assert manual and "no loop over a DataLoader found" in manual[0]


def test_compile_modes_are_a_ladder_on_cuda_and_one_rung_on_cpu():
    from pathlib import Path

    from advisor.capture.model import RunSpec

    fix = catalog.get("torch_compile")
    spec = RunSpec(script=Path("train.py"))
    assert [v.label for v in fix.plan_variants(FixContext(cuda=False), spec)] == ["torch_compile"]
    cuda = fix.plan_variants(FixContext(cuda=True), spec)
    assert [v.params for v in cuda] == [{}, {"mode": "reduce-overhead"}, {"mode": "max-autotune"}]
    # every rung warms up past its compile and recompile; a cold autotune takes minutes
    assert [v.overrides for v in cuda] == [{"warmup_steps": 5}, {"warmup_steps": 5}, {"warmup_steps": 5, "timeout_s": 900.0}]
    assert fix.plan_variants(FixContext(cuda=False), spec)[0].overrides == {"warmup_steps": 5}
    # max-autotune only makes kernels faster than reduce-overhead: not where the GPU idles
    idle = fix.plan_variants(FixContext(cuda=True, gpu_busy=0.15), spec)
    assert [v.params for v in idle] == [{}, {"mode": "reduce-overhead"}]
    busy = fix.plan_variants(FixContext(cuda=True, gpu_busy=0.8), spec)
    assert [v.params.get("mode") for v in busy] == [None, "reduce-overhead", "max-autotune"]
    assert fix.step_overrides({"mode": "max-autotune"}, RunSpec(script=Path("t.py"), timeout_s=60), FixContext(cuda=True),
                              None) == {"warmup_steps": 5}  # the user's --timeout stands
    assert fix.rung_name(cuda[2].params) == "max-autotune" and fix.rung_name({}) == "default"
    new, _ = transform(
        "import torch\nmodel = Net()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        [Trial("torch_compile", "unsafe", params={"mode": "max-autotune"})],
    )
    assert "model.compile(mode='max-autotune')" in new
