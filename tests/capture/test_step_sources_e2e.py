"""Issue 15 with real torch hooks: one step per iteration for a GAN and for LBFGS with a closure."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


def test_gan_two_optimizers_count_one_step_per_iteration(run_script):
    cap, _ = run_script("gan_loop.py", warmup_steps=3, timed_steps=3, profiled_steps=0)
    assert cap.status == "stopped" and cap.step_source == "optimizer"
    assert "2 torch.optim optimizers" in cap.step_source_reason
    assert cap.timed.samples == (16, 16, 16) and cap.timed.batches == (1, 1, 1)
    assert cap.timed.backwards == (2, 2, 2)


def test_lbfgs_closure_is_one_step_per_optimizer_step(run_script):
    cap, _ = run_script("lbfgs_loop.py", profiled_steps=0)
    assert cap.status == "stopped" and cap.step_source == "optimizer"
    # the closure's backward calls run inside the step: no accumulation is read into them
    assert cap.timed.backwards == (0, 0, 0)
    assert cap.timed.samples == (64, 64, 64)  # from the model's input: no DataLoader


def test_evaluation_at_iteration_zero_leaves_optimizer_steps(run_script):
    # 60 forward passes under no_grad before the first optimizer step, and again every 25 steps.
    cap, _ = run_script("eval_every.py", warmup_steps=3, timed_steps=5, profiled_steps=0)
    assert cap.step_source == "optimizer", cap.step_source_reason
    assert cap.timed.samples == (8, 8, 8, 8, 8)
