"""fp16's GradScaler at run time, checked with a CPU scaler: schedulers, clipping, a script's own
scaler, and accumulation (fp16_amp itself installs only on CUDA)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from advisor.capture.model import FixRequest
from advisor.fixes import catalog, runtime
from advisor.fixes.runtime_torch import uninstall


@pytest.fixture(autouse=True)
def _undo():
    originals = (torch.Tensor.backward, torch.optim.Optimizer.__init__, torch.nn.utils.clip_grad_norm_,
                 torch.amp.GradScaler.scale)
    yield
    uninstall()
    assert (torch.Tensor.backward, torch.optim.Optimizer.__init__, torch.nn.utils.clip_grad_norm_,
            torch.amp.GradScaler.scale) == originals


def _scaled_state(notes: dict | None = None):
    state = runtime._State({} if notes is None else notes)
    state.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    state._patch_grad_scaling()
    return state


def _pair(seed: int = 0) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    a = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    b = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    b.load_state_dict(a.state_dict())
    return a, b


def _train(model: nn.Module, steps: int = 3, clip: float | None = None, accumulate: int = 1, own_scaler=None,
           divide: bool = True):
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(steps):
        for _ in range(accumulate):
            loss = nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 2)) / (accumulate if divide else 1)
            (own_scaler.scale(loss) if own_scaler is not None else loss).backward()
        if own_scaler is not None:
            own_scaler.unscale_(opt)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if own_scaler is not None:
            own_scaler.step(opt)
            own_scaler.update()
        else:
            opt.step()
        opt.zero_grad()
        sched.step()
    return model


def _same(a: nn.Module, b: nn.Module) -> None:
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_an_lr_scheduler_steps_a_scaled_optimizer():
    ref, model = _pair()
    _train(ref)
    _scaled_state()
    _train(model)  # StepLR(opt) re-wraps opt.step.__func__: a plain function raised AttributeError
    _same(model, ref)


def test_gradients_are_unscaled_before_they_are_clipped():
    ref, model = _pair()
    _train(ref, clip=0.05)
    _scaled_state()
    _train(model, clip=0.05)  # clipped at 1024x their size, every step would be cut to 0.05/1024 of it
    _same(model, ref)


def test_a_script_with_its_own_scaler_is_scaled_once():
    ref, model = _pair()
    _train(ref, own_scaler=torch.amp.GradScaler("cpu", init_scale=256.0))
    notes: dict = {}
    _scaled_state(notes)
    _train(model, own_scaler=torch.amp.GradScaler("cpu", init_scale=256.0))
    _same(model, ref)
    assert "own GradScaler" in str(notes["fp16_amp"])


def test_under_accumulation_the_scaler_steps_on_real_steps_only():
    ref, model = _pair()
    _train(ref, accumulate=2, divide=False)  # accumulate_steps sums the micro-batches' gradients
    _scaled_state()  # first, as INSTALL_FIRST has it, then the accumulation wraps the optimizers
    runtime.accumulate_steps(2)
    _train(model, accumulate=1, steps=6)  # six micro-steps: three real ones, as the reference's
    _same(model, ref)


def test_fp16_is_installed_before_the_fixes_that_wrap_the_optimizers(monkeypatch):
    order: list[str] = []
    fixes = {fid: replace(fix, install=lambda state, params, fid=fid: order.append(fid))
             for fid, fix in catalog.get_fixes().items()}
    monkeypatch.setattr(runtime.catalog, "get_fixes", lambda: fixes)
    runtime.install([FixRequest("fit_accumulation", {"k": 2}), FixRequest("fp16_amp")])
    assert order == ["fp16_amp", "fit_accumulation"]
