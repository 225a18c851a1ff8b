"""End to end: ``diagnose --trace-budget`` keeps the exported trace of a many-op step under the budget and says so.

tests/scripts/many_ops.py runs 100 tiny operators per step: one step exports about 1.4 MB of
trace JSON with every option on (two fifths of it memory events), so six profiled steps do not
fit in a 4 MB budget: the plan drops steps and the memory events.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from cli_helpers import invoke

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "many_ops.py"
BUDGET = 4 * 2**20


def test_a_small_trace_budget_bounds_the_exported_trace_and_the_report_says_so(capsys, tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, _, err = invoke(
        capsys, "diagnose", "--no-fixes", "-q", "--out", str(run), "--warmup", "2", "--steps", "2",
        "--profile-steps", "6", "--trace-budget", "4MB", "--format", "json", "-o", str(tmp_path / "r.json"), str(SCRIPT),
    )
    assert code == 0, err
    traces = sorted((run / "traces").glob("*.pt.trace.json.gz"))
    assert len(traces) == 1
    raw = gzip.decompress(traces[0].read_bytes())
    assert len(raw) < BUDGET
    bound = json.loads((tmp_path / "r.json").read_text())["run"]["trace_bound"]
    assert bound["budget_bytes"] == BUDGET and bound["exported_bytes"] == len(raw)
    assert 6 * bound["step_bytes"] > BUDGET and 3 <= bound["steps"] < 6 and not bound["memory"]
    steps = {e["name"] for e in json.loads(raw)["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert len(steps) == bound["steps"]
    code, out, err = invoke(capsys, "report", str(run), "--format", "markdown")
    assert code == 0, err
    stacks = "" if bound["stacks"] else "Python stacks or "
    assert f"trace bounded to {bound['steps']} of 6 profiled steps, without {stacks}memory events: one step exported" in out
