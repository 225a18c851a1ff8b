"""Memory live at the peak, by the line that allocated it (advisor.metrics.memory_lines)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from advisor.metrics.memory_lines import live_at_peak


def test_live_at_the_peak_are_the_allocations_not_yet_freed():
    mem = pd.DataFrame({
        "ts": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        "mem_addr": [10, 20, 10, 30, 30, 20],
        "mem_bytes": [100, 50, -100, 70, -70, -50],
    })
    # at t=4: 10 was freed at 3, 20 is live until 6, 30 was allocated at 4
    assert sorted(live_at_peak(mem, 4.0)["mem_addr"]) == [20, 30]
    assert sorted(live_at_peak(mem, 2.5)["mem_addr"]) == [10, 20]
    assert list(live_at_peak(mem, 6.5)["mem_addr"]) == []


SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "block_memory.py"


def _diagnose(tmp_path: Path, *script_args: str) -> dict:
    """Diagnose the block script (no fixes, two profiled steps) into ``tmp_path/run``; return the JSON report."""
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "diagnose", "--no-fixes", "-q", "--warmup", "2", "--steps", "3",
         "--profile-steps", "2", "--format", "json", "-o", str(out), "--out", str(tmp_path / "run"), str(SCRIPT),
         *script_args],
        capture_output=True, text=True, timeout=300,
    )
    assert out.is_file(), proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.e2e
def test_the_peak_of_a_wide_block_names_its_line_and_module(tmp_path):
    rows = _diagnose(tmp_path)["tables"]["memory_lines"]
    source = SCRIPT.read_text().splitlines()
    # The peak comes after the forward pass (the activations and their gradients live together,
    # in backward or the optimizer step): the training loop first, then the wide block's activations.
    assert rows[0]["function"] == "<module>"
    forward = [r for r in rows if r["function"] == "forward"]
    top = forward[0]
    # python_function frames name a function by its def line: Wide.forward's
    assert source[top["line"] - 1].strip() == "def forward(self, x):" and "hidden" in source[top["line"]], top
    assert top["module"] == "1 (Wide)" and top["share"] > 0.2  # the model's own name for the block
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=0.01)


@pytest.mark.e2e
@pytest.mark.slow  # NOTE: 11 s; the table's grouping and the peak share have unit tests in this file
def test_a_peak_of_one_blocks_activations_is_named_by_the_table_and_the_memory_finding(tmp_path):
    report = _diagnose(tmp_path, "--deep")
    top = report["tables"]["memory_lines"][0]
    source = SCRIPT.read_text().splitlines()
    assert source[top["line"] - 1].strip() == "def forward(self, x):" and "self.up" in source[top["line"]], top
    assert top["module"] == "1 (Deep)" and top["share"] > 0.5
    assert report["summary"]["peak_activation_frac"] > 0.5
    # As if run with --memory-budget just over its peak: ME001 fires, naming the block's line first
    run = tmp_path / "run"
    capture = json.loads((run / "capture.json").read_text())
    capture["memory_budget_bytes"] = int(capture["peak_memory_bytes"] / 0.95)
    (run / "capture.json").write_text(json.dumps(capture))
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--format", "json", str(run)],
                          capture_output=True, text=True, timeout=300)
    me001 = next(f for f in json.loads(proc.stdout)["findings"] if f["code"] == "ME001")
    where = me001["locations"][0]
    assert (where["line"], where["function"]) == (top["line"], "forward, block 1 (Deep)"), me001
    share = round(100 * report["summary"]["peak_activation_frac"])
    assert f"Activations kept for backward hold {share}%" in me001["message"]
    # the script as the report shows it (relative to the working directory), at the block's line
    assert re.search(rf"allocated most at \S*block_memory\.py:{top['line']} \(forward, block 1 \(Deep\)\)",
                     me001["message"]), me001["message"]
