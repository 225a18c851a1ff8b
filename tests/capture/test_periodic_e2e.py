"""Issue 29 with real torch hooks: evaluation at step 0 and every N steps is periodic work, not steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.metrics.compute import analyze_path

pytestmark = pytest.mark.e2e


def test_evaluation_every_n_steps_is_timed_named_and_projected(run_script):
    # 60 iterations, evaluation (2 x 20 batches under no_grad) at 0 and every 10: the window sees two
    cap, _ = run_script("periodic_eval.py", "60", "10", "20", warmup_steps=2, timed_steps=12, profiled_steps=0)
    assert cap.step_source == "optimizer", cap.step_source_reason
    assert [(w.function, w.step, w.calls) for w in cap.between_steps][:2] == [("estimate_loss", 0, 40),
                                                                             ("estimate_loss", 10, 40)]
    assert cap.run_hints == {"max_iters": 60, "eval_interval": 10}
    metrics = analyze_path(cap.run_dir)
    assert metrics.summary["periodic_period_steps"] == 10 and metrics.summary["projected_steps_count"] == 60
    assert metrics.summary["projected_run_s"] > metrics.summary["startup_s"] > 0
    assert 0 < metrics.summary["periodic_work_frac"] < 1  # whether HB002 fires depends on the machine: tests/fixtures
    # a decorated function's code starts at its decorator
    line = (Path(__file__).parents[1] / "scripts" / "periodic_eval.py").read_text().splitlines().index("@torch.no_grad()") + 1
    assert [(loc.function, loc.line) for loc in metrics.locations if loc.kind == "periodic"] == [("estimate_loss", line)]


def test_an_epoch_loops_test_pass_and_checkpoints_are_in_the_whole_run(run_script):
    # 48 steps an epoch: the capture's 2 + 12 + 2 + 2 steps end mid-epoch, and it runs on to the
    # epoch's end to time the test pass over the second DataLoader
    cap, _ = run_script("epoch_eval_ckpt.py", "--epochs", "3", warmup_steps=2, timed_steps=12, profiled_steps=2)
    assert cap.step_source == "optimizer" and cap.epoch_batches == 48
    works = [(w.function, w.step, w.epoch_end) for w in cap.between_steps]
    assert ("test", 48, True) in works
    assert [s for f, s, _ in works if f == "torch.save"][:2] == [8, 16]
    assert any("first epoch's end" in n for n in cap.notes), cap.notes
    metrics = analyze_path(cap.run_dir)
    assert metrics.summary["projected_steps_count"] == 144  # 3 epochs x 48
    periodic = {loc.function for loc in metrics.locations if loc.kind == "periodic"}
    assert {"test", "torch.save"} <= periodic, periodic
