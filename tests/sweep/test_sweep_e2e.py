"""advisor sweep for real: run-time accumulation and FLOP counts in a real child, and a real interrupt.

The interrupt is sent once ``sweep.json`` shows a finished cell run (polled, never a fixed
sleep): the saved table then says ``interrupted`` and keeps that cell, the exit code is 128 + the signal (130, 143), and
no process of the run is left behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from proc_helpers import signal_when, survivors_after

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "scripts" / "sweep_memory.py"
GIVE_UP_S = 500.0  # only so a broken build fails instead of hanging; the test waits for a condition


def _table(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "sweep.json").read_text())
    except (OSError, ValueError):
        return None


@pytest.mark.slow
def test_a_real_sweep_accumulates_at_run_time_and_counts_flops(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "sweep", "--batch-sizes", "8,16", "--precisions", "fp32",
         "--accumulation", "1,2", "--repeats", "1", "--warmup", "3", "--steps", "5", "--out", str(out),
         "--format", "json", "-q", str(SCRIPT)],
        capture_output=True, text=True, cwd=tmp_path, timeout=GIVE_UP_S,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows = {(r["cell"]["batch_size"], r["cell"]["accumulation"]): r for r in data["results"]}
    assert {r["status"] for r in rows.values()} == {"ok"}
    # Linear(16, 1): 2*16 FLOPs forward and 2*16 for the weight gradient per sample, counted by torch
    for r in rows.values():
        assert r["flops_per_sample"] == pytest.approx(64.0)
        assert r["tflops"] > 0 and r["mfu"] is not None and r["peak_source"] == "measured"
    # the accumulation cell's optimizer steps each took 2 DataLoader batches of 8
    cell_run = json.loads((out / "trials" / "bs8-acc2-fp32-1" / "capture.json").read_text())
    assert set(cell_run["timed"]["samples"]) == {16}
    assert cell_run["fix_notes"]["sweep_accumulation"]["state"] == "applied"
    # cell runs fork from the warm-start server, as the fix loop's trial runs do
    starts = [json.loads(p.read_text())["start"] for p in (out / "trials").glob("*/capture.json")]
    assert starts and set(starts) == {"warm"}, starts
    assert any(n.startswith("cell runs: ") and "warm-started, 0 cold" in n for n in data["notes"]), data["notes"]
    # 2 micro-batches of 8 on their mean gradient train as one batch of 16 (same samples, SGD): the
    # first losses, against batch 8's, deviate as batch 16's do
    assert rows[(8, 2)]["loss_delta"] == pytest.approx(rows[(16, 1)]["loss_delta"], rel=1e-3)
    assert rows[(8, 2)]["loss_delta"] > 0.01


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_sweep_keeps_its_finished_cells(tmp_path: Path, sig: int) -> None:
    run_dir = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "sweep", "--batch-sizes", "8,16,32", "--precisions", "fp32",
         "--repeats", "3", "--warmup", "3", "--steps", "5", "--out", str(run_dir), "-q", str(SCRIPT),
         "--steps", "100000"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )

    def cell_finished() -> dict | None:
        table = _table(run_dir)
        running = table and table["status"] == "running" and any(r["repeats"] >= 1 for r in table["results"])
        return table if running else None

    _, err = signal_when(proc, cell_finished, sig, "a cell run finished", GIVE_UP_S)
    assert proc.returncode == 128 + sig, err  # 130 SIGINT, 143 SIGTERM, in every stage (issue #30)
    assert "interrupted" in err and str(run_dir) in err
    final = _table(run_dir)
    assert final is not None and final["status"] == "interrupted"
    ran = [r for r in final["results"] if r["repeats"] >= 1]
    assert ran and all(r["status"] == "ok" and r["samples_per_s"] > 0 for r in ran)
    assert survivors_after(run_dir) == [], "a process of the run outlived advisor"


@pytest.mark.slow  # NOTE: 17 s; the sizes plan and the MONAI crop resize have unit tests in make test
def test_a_monai_unet_sweep_over_three_patch_sizes_fills_the_table(tmp_path: Path) -> None:
    script = REPO / "tests" / "scripts" / "monai_patch.py"
    out = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "advisor", "sweep", "--batch-sizes", "2", "--sizes", "16,24,32", "--precisions", "fp32",
         "--repeats", "1", "--warmup", "3", "--steps", "4", "--out", str(out), "--format", "json", "-q", str(script)],
        capture_output=True, text=True, cwd=tmp_path, timeout=GIVE_UP_S,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["size_option"] == "--patch-size" and data["script_size"] == 16
    rows = {r["cell"]["size"]: r for r in data["results"]}
    assert sorted(rows) == [16, 24, 32] and {r["status"] for r in rows.values()} == {"ok"}, rows
    for size, r in rows.items():
        # the model's input is (batch, channel, patch, patch, patch): the crop follows --patch-size
        assert r["element_unit"] == "voxel" and r["elements_per_sample"] == size**3
        assert r["samples_per_s"] > 0 and r["elements_per_s"] == pytest.approx(size**3 * r["samples_per_s"])
        assert r["peak_memory_bytes"] > 0 and r["tflops"] > 0
    # a convolution's FLOPs grow with the voxels it sees: 8x from a 16- to a 32-voxel side
    assert rows[32]["flops_per_sample"] / rows[16]["flops_per_sample"] == pytest.approx(8.0, rel=0.05)
    cell_run = json.loads((out / "trials" / "size24-bs2-fp32-1" / "capture.json").read_text())
    assert cell_run["args"][-2:] == ["--patch-size", "24"]
