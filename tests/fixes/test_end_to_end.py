"""The fix loop with the real capture stage, on a tiny data-loading-bound script."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.capture.model import FixRequest, RunSpec
from advisor.engine.model import FixRef
from advisor.fixes.loop import run_trials

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "scripts" / "slow_loader.py"

capture_run = pytest.importorskip("advisor.capture.run")


def test_a_fix_reaches_the_child_and_changes_the_dataloader(tmp_path: Path):
    spec = RunSpec(
        script=SCRIPT, out_dir=tmp_path / "run", warmup_steps=1, timed_steps=3, profiled_steps=0,
        seed=0, record_loss_steps=3, quiet=True,
        fixes=(FixRequest("dataloader_workers", {"num_workers": 2}), FixRequest("channels_last")),
        fix_installers=("advisor.fixes.runtime",),
    )
    cap = capture_run.capture(spec)
    assert cap.ok, cap.error
    assert [d.num_workers for d in cap.dataloaders] == [2]
    # Notes made while the script ran reach capture.json (the runtime's dict is live).
    assert str(cap.fix_notes["dataloader_workers"]) == "applied: num_workers 0->2"
    assert str(cap.fix_notes["channels_last"]) == "not applied: Sequential has no 2-D/3-D convolutions"
    assert len(cap.losses) == 3 and all(loss is not None for loss in cap.losses)
    assert SCRIPT.read_text().count("num_workers") == 0  # the user's file is untouched


@pytest.mark.slow
def test_workers_measurably_help_a_loading_bound_script(tmp_path: Path):
    spec = RunSpec(script=SCRIPT, out_dir=tmp_path / "run", warmup_steps=3, timed_steps=12, seed=0)
    out = run_trials(spec, [FixRef("dataloader_workers", "safe")], repeats=3)
    (trial,) = out.trials
    assert trial.verdict == "improved", trial
    assert trial.speedup > 1.2 and trial.ci_low > 1.0
    # Same seed, per-index data, same shuffling: the losses match the baseline's exactly.
    assert trial.loss_max_rel_diff == pytest.approx(0.0, abs=1e-6)
    assert out.kept == ("dataloader_workers",)
    assert f"num_workers={trial.params['num_workers']}" in out.diff
    runs = sorted(p.name for p in (tmp_path / "run" / "trials").iterdir())
    assert "baseline-1" in runs and any(r.startswith("dataloader_workers-w") for r in runs)
    assert all((tmp_path / "run" / "trials" / r / "capture.json").is_file() for r in runs)


@pytest.mark.slow
def test_fused_attention_rewrites_the_zoo_models_attention_in_the_child(tmp_path: Path):
    """The child binds the rewritten forward on the model's first call; the losses stay the script's."""
    script = Path(__file__).resolve().parents[2] / "examples" / "attention_lm.py"
    before = script.read_text()
    args = ("--batch-size", "2", "--context", "32", "--d-model", "16", "--vocab", "32", "--dropout", "0.1")
    common = dict(script=script, args=args, warmup_steps=1, timed_steps=3, profiled_steps=0, seed=0,
                  record_loss_steps=3, quiet=True, fix_installers=("advisor.fixes.runtime",))
    base = capture_run.capture(RunSpec(out_dir=tmp_path / "base", **common))
    cap = capture_run.capture(RunSpec(out_dir=tmp_path / "run", fixes=(FixRequest("fused_attention"),), **common))
    assert base.ok and cap.ok, (base.error, cap.error)
    note = str(cap.fix_notes["fused_attention"])
    assert note.startswith("applied: CausalSelfAttention.forward rewritten to scaled_dot_product_attention"), note
    # CPU SDPA draws its dropout masks as F.dropout does: the losses match to rounding.
    assert cap.losses == pytest.approx(base.losses, rel=1e-4)
    assert script.read_text() == before
