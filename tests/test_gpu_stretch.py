"""benchmarks/gpu_stretch.py: the GPU machine's test of the profiler's stretch, read from two reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import benchmark


@pytest.fixture(scope="module")
def stretch():
    with benchmark("gpu_stretch") as module:
        yield module


def _report(step_ms: float, gpu_ms: float, timed_ms: float, stacks: bool = True) -> dict:
    steps = [{"step": i, "step_time_ms": step_ms, "gpu_compute_ms": gpu_ms, "cpu_ops_ms": step_ms - gpu_ms}
             for i in range(3)]
    run = {"timed_step_times_ms": [timed_ms] * 20, "trace_bound": None if stacks else {"stacks": False}}
    return {"steps": steps, "run": run}


def test_a_row_holds_the_device_time_beside_the_profiled_and_timed_steps(stretch):
    usual = stretch.row("compute_bound", "usual", _report(7.0, 0.4, 2.38))
    light = stretch.row("compute_bound", "light", _report(3.0, 0.4, 2.38, stacks=False))
    assert (usual["profiled_ms"], usual["device_ms"], usual["timed_ms"], usual["stacks"]) == (7.0, 0.4, 2.38, True)
    assert light["device_ms"] == usual["device_ms"] and light["stacks"] is False  # what the estimate assumes
    assert usual["device_share_of_timed"] == pytest.approx(0.4 / 2.38, abs=1e-4)
    assert "| compute_bound | light | 3 | False | 3.0 | 0.4 | 2.38 |" in stretch.markdown([usual, light])


def test_the_light_budget_leaves_three_steps_of_about_a_third_of_a_usual_step(stretch):
    assert stretch.light_budget(_report(7.0, 0.4, 2.38), trace_bytes=3_000_000) == int(3 * 0.35 * 1_000_000)
    assert stretch.light_budget({"steps": []}, trace_bytes=1000) == 64 << 10  # never below 64 KiB


def test_the_dry_run_writes_its_files_and_an_unknown_example_is_a_problem(stretch, tmp_path: Path):
    assert stretch.main(["--dry-run", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "stretch.json").read_text()) == {"missing": [], "rows": []}
    assert stretch.main(["--out", str(tmp_path), "no_such_example"]) == 1
    assert json.loads((tmp_path / "stretch.json").read_text())["missing"] == ["no_such_example"]
