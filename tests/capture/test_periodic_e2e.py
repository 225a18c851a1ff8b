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
