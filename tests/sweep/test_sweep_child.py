"""The sweep's child installer, applied in this process: run-time accumulation and the FLOP count."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_module
from torch.optim import optimizer as optimizer_module
from torch.optim.optimizer import register_optimizer_step_post_hook

from advisor.capture.model import FixRequest, NoteState
from advisor.fixes import runtime
from advisor.sweep import child, spatial


@pytest.fixture(autouse=True)
def _undo_patches():
    originals = (torch.optim.Optimizer.__init__, nn.Module.zero_grad, nn.Module.__call__)
    yield
    runtime.uninstall()
    assert (torch.optim.Optimizer.__init__, nn.Module.zero_grad, nn.Module.__call__) == originals


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(n)]


def _train(batches, zero: str = "optimizer", scheduler: bool = False) -> tuple[nn.Linear, int]:
    """A plain loop (zero_grad, backward, step per batch); returns the model and the real steps."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100) if scheduler else None
    real = [0]
    handle = register_optimizer_step_post_hook(lambda *_: real.__setitem__(0, real[0] + 1))
    try:
        for x, y in batches:
            (model if zero == "model" else opt).zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if sched is not None:
                sched.step()
    finally:
        handle.remove()
    return model, real[0]


@pytest.mark.parametrize("zero", ["optimizer", "model"])
def test_run_time_accumulation_steps_once_per_k_batches_on_the_mean_gradient(zero):
    batches = _batches(8)
    notes = child.install([FixRequest(child.ACCUMULATE, {"factor": 4})])
    model, steps = _train(batches, zero)
    runtime.uninstall()
    assert steps == 2  # 8 micro-batches, 4 per optimizer step: the capture's step hook fires twice
    assert notes[child.ACCUMULATE].state is NoteState.APPLIED
    # the same update by hand: each step on the mean gradient of its 4 micro-batches
    torch.manual_seed(0)
    ref = nn.Linear(4, 1)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for i in range(0, 8, 4):
        opt.zero_grad()
        for x, y in batches[i:i + 4]:
            (nn.functional.mse_loss(ref(x), y) / 4).backward()
        opt.step()
    assert torch.allclose(model.weight, ref.weight, atol=1e-6) and torch.allclose(model.bias, ref.bias, atol=1e-6)


def test_run_time_accumulation_keeps_an_lr_scheduler_working():
    child.install([FixRequest(child.ACCUMULATE, {"factor": 2})])
    _, steps = _train(_batches(4), scheduler=True)  # LRScheduler re-wraps opt.step.__func__
    assert steps == 2


def test_catalog_fixes_pass_through_to_the_runtime():
    notes = child.install([FixRequest("bf16_autocast", {"device": "cpu"}), FixRequest(child.ACCUMULATE, {"factor": 2})])
    assert set(notes) == {"bf16_autocast", child.ACCUMULATE}
    assert notes["bf16_autocast"].state is not NoteState.SKIPPED  # the runtime knows it; no "unknown fix id"


def test_the_flop_count_covers_exactly_one_optimizer_step(tmp_path):
    path = tmp_path / "flops.json"
    child.install([FixRequest(child.COUNT_FLOPS, {"path": str(path), "step": 3})])
    torch.manual_seed(0)
    model = nn.Linear(16, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks_before = len(optimizer_module._global_optimizer_post_hooks)
    pre_hooks_before = len(module_module._global_forward_pre_hooks)
    for x in [torch.randn(8, 16) for _ in range(5)]:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    data = json.loads(path.read_text())
    # forward 2*B*in*out, and as much for the weight gradient (the input needs none): one step, not five
    # and the model's input of that step: what the input-size axis counts elements from
    assert data == {"flops": 4 * 8 * 16 * 32, "step": 3, "input_shape": [8, 16], "input_integer": False}
    assert len(module_module._global_forward_pre_hooks) == pre_hooks_before  # the input hook removed itself
    assert len(optimizer_module._global_optimizer_post_hooks) == hooks_before - 1  # the hook removed itself


def test_monai_crops_are_resized_at_run_time_for_the_size_axis():
    from monai.transforms import CenterSpatialCrop, RandCropByPosNegLabeld, RandSpatialCropd
    from monai.transforms.croppad import array

    original = array.RandSpatialCrop.__init__
    notes = child.install([FixRequest(spatial.SPATIAL_SIZE, {"size": 24})])
    assert notes[spatial.SPATIAL_SIZE].state is NoteState.SKIPPED  # nothing built yet
    crop = RandSpatialCropd(keys=("image",), roi_size=(16, 16, 16), random_size=False)
    whole_depth = CenterSpatialCrop(roi_size=(16, 16, -1))  # -1: the whole axis, kept
    pos_neg = RandCropByPosNegLabeld(keys=("image",), label_key="label", spatial_size=[8, 8, 8])
    assert crop.cropper.roi_size == (24, 24, 24) and whole_depth.roi_size == (24, 24, -1)
    assert tuple(pos_neg.cropper.spatial_size) == (24, 24, 24)
    out = crop({"image": torch.rand(1, 32, 32, 32)})["image"]
    assert tuple(out.shape) == (1, 24, 24, 24)
    note = notes[spatial.SPATIAL_SIZE]
    assert note.state is NoteState.APPLIED and "RandSpatialCrop roi_size (16, 16, 16) -> (24, 24, 24)" in note.detail
    runtime.uninstall()
    assert array.RandSpatialCrop.__init__ is original
