"""advisor sweep: cells planned through the fix catalog, measured interleaved, out-of-memory marked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_fakes import MemoryRunner

from advisor.capture.model import RunSpec
from advisor.errors import UsageError
from advisor.sweep.model import Cell, CellStatus
from advisor.sweep.render import RENDERERS
from advisor.sweep.run import parse_cells, run_sweep

REPO = Path(__file__).resolve().parents[2]


def test_cells_are_every_batch_times_every_precision_smallest_first():
    assert parse_cells([32, 8], ["fp32", "bf16"]) == [Cell(8, "fp32"), Cell(8, "bf16"), Cell(32, "fp32"), Cell(32, "bf16")]
    with pytest.raises(UsageError, match="unknown precision 'fp8'"):
        parse_cells([8], ["fp8"])
    with pytest.raises(UsageError, match="1 or more"):
        parse_cells([0], ["fp32"])


def test_cells_over_the_memory_budget_are_marked_out_of_memory_and_not_run_again(tmp_path):
    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path / "run", memory_budget_bytes=600 * 2**20)
    runner = MemoryRunner(spec.memory_budget_bytes)
    table = run_sweep(spec, parse_cells([8, 32, 64], ["fp32", "bf16"]), repeats=3, runner=runner)
    by = {(r.cell.batch_size, r.cell.precision): r for r in table.results}
    assert by[(64, "fp32")].status == CellStatus.OOM and by[(64, "bf16")].status == CellStatus.OOM
    assert "memory budget" in by[(64, "fp32")].reason
    oom_runs = [s for s in runner.calls if any(f.params.get("factor") == 8 for f in s.fixes)]
    assert len(oom_runs) == 2  # once per precision, never repeated
    for key in ((8, "fp32"), (8, "bf16"), (32, "fp32"), (32, "bf16")):
        r = by[key]
        assert r.status == CellStatus.OK and r.repeats == 3 and r.ci_low < r.samples_per_s < r.ci_high
        assert r.peak_memory_bytes <= spec.memory_budget_bytes
    assert by[(8, "fp32")].loss_delta == 0.0 and by[(8, "bf16")].loss_delta > 0
    assert table.recommended == Cell(32, "bf16")  # the fastest that fits
    assert table.reference == Cell(8, "fp32")
    # the plain first run is the reference cell's first repeat: 1 + 3*6 cells - 1 - 4 runs skipped for OOM
    assert table.runs == len(runner.calls) == 1 + 4 * 3 - 1 + 2
    for fmt, render in RENDERERS.items():
        text = render(table)
        assert "out_of_memory" in text, fmt
    data = json.loads(RENDERERS["json"](table))
    assert data["recommended"] == {"batch_size": 32, "precision": "bf16", "accumulation": 1, "size": None}
    assert "★" in RENDERERS["text"](table)


def test_a_batch_that_is_not_a_multiple_of_the_scripts_is_marked_not_applied(tmp_path):
    spec = RunSpec(script=tmp_path / "train.py", out_dir=tmp_path / "run")
    table = run_sweep(spec, parse_cells([8, 12], ["fp32"]), repeats=1, runner=MemoryRunner(None))
    r = {x.cell.batch_size: x for x in table.results}
    assert r[12].status == CellStatus.NOT_APPLIED and "multiple" in r[12].reason
    assert r[8].status == CellStatus.OK


@pytest.mark.e2e
@pytest.mark.slow
def test_a_real_sweep_marks_the_cells_over_the_memory_budget(tmp_path):
    from click.testing import CliRunner

    from advisor.cli.main import cli

    out = tmp_path / "sweep"
    result = CliRunner().invoke(cli, [
        "sweep", "--batch-sizes", "8,512", "--precisions", "fp32", "--memory-budget", "700MiB",
        "--repeats", "1", "--warmup", "2", "--steps", "5", "--out", str(out), "--format", "json", "-q",
        str(REPO / "tests" / "scripts" / "sweep_memory.py"),
    ])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    status = {r["cell"]["batch_size"]: r["status"] for r in data["results"]}
    assert status == {8: "ok", 512: "out_of_memory"}
    assert (out / "sweep.json").is_file()
    assert data["recommended"] == {"batch_size": 8, "precision": "fp32", "accumulation": 1, "size": None}
