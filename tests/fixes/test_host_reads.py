"""host_reads: advice only (never run, never a measured win), and a diff that reads every N steps."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixes_fakes import FakeRunner

from advisor.capture.model import RunSpec
from advisor.engine.model import FixRef
from advisor.fixes import catalog
from advisor.fixes.diff import transform
from advisor.fixes.loop import run_trials
from advisor.fixes.model import Trial

LOOP = """\
from torch.utils.data import DataLoader
loader = DataLoader(ds, batch_size=8)
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    print(f"loss {loss.item():.3f}")
    value = float(loss)
    history.append(value)
    bad = torch.isnan(loss).item()
    if bad:
        break
"""


def test_the_diff_moves_reads_under_every_n_steps_and_keeps_values_still_used():
    new, manual = transform(LOOP, [Trial("host_reads", "safe")])
    assert "advisor_step = 0" in new and "    advisor_step += 1\n" in new
    assert '    if advisor_step % 20 == 0:\n        print(f"loss {loss.item():.3f}")\n' in new
    # `value` feeds a statement that stays and `bad` decides control flow: those reads stay, and
    # the notes say so
    assert "\n    value = float(loss)\n    history.append(value)\n" in new
    assert "\n    bad = torch.isnan(loss).item()\n" in new
    assert any("2 per-step read(s) stay in place" in m for m in manual)


def test_enumerates_index_is_the_counter():
    src = "from torch.utils.data import DataLoader\nloader = DataLoader(ds)\nfor i, x in enumerate(loader):\n    print(model(x).item())\n"
    new, _ = transform(src, [Trial("host_reads", "safe")])
    assert "if i % 20 == 0:\n        print(model(x).item())" in new and "advisor_step" not in new


@pytest.mark.e2e
def test_it_is_advice_never_run_and_its_diff_is_offered(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    runner = FakeRunner()
    out = run_trials(RunSpec(script=script, out_dir=tmp_path / "run"), [FixRef("host_reads", "safe")], runner=runner)
    (t,) = out.trials
    assert t.verdict == "advice" and t.speedup is None and t.reason.startswith("advice, not measured")
    assert out.kept == () and out.combined is None
    assert runner.runs_with("host_reads") == 0
    assert runner.calls == []  # advice alone needs no baseline either: nothing is run
    assert "+    if advisor_step % 20 == 0:" in out.diff
    assert any(n.startswith("advice, not measured: host_reads") for n in out.notes)
    assert catalog.get("host_reads").install is None
