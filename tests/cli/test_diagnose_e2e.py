"""Real end-to-end runs of the ``advisor`` CLI, as a user types them (kept in ``make test``).

One full loop (capture -> metrics -> rules -> fix trials -> report) on a script whose data
loading is a sleep, so that DataLoader workers win clearly even on two busy cores, and the
crash path through the CLI (exit 3, one line, everything kept on disk).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SLOW_LOADER = REPO / "tests" / "fixes" / "scripts" / "slow_loader.py"
TRAIN_LOOP = REPO / "tests" / "scripts" / "train_loop.py"
ADVISOR = [sys.executable, "-m", "advisor"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ADVISOR, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_diagnose_finds_loading_bottleneck_and_keeps_the_worker_fix(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = run(
        "diagnose", "-q", "--out", run_dir, "--warmup", "2", "--steps", "8", "--profile-steps", "2",
        # NOTE: 4 interleaved repeats, not 2: the confidence interval needs them to hold on a
        # busy machine (at load 11, 2 repeats measured 1.9x yet could not exclude 1.0).
        "--fix", "dataloader_workers", "--repeats", "4", "--diff",
        "--format", "json", "-o", tmp_path / "report.json",
        SLOW_LOADER, "--steps", "400",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["schema_version"] >= 1
    assert report["primary"]["category"] == "data_loading"
    assert report["primary"]["estimated_speedup"] > 1.0
    assert abs(sum(report["breakdown"].values()) - 1.0) < 1e-5  # 7 shares rounded to 6 places
    assert "DL001" in {f["code"] for f in report["findings"]}
    assert report["run"]["status"] == "stopped" and report["run"]["steps_measured"] == 2
    trial = next(t for t in report["trials"] if t["fix"] == "dataloader_workers")
    assert trial["verdict"] == "improved", trial
    assert trial["speedup"] > 1.2 and trial["ci_low"] > 1.0
    assert report["combined"]["samples_per_s"] > report["combined"]["baseline_samples_per_s"]
    # The trial runs were forked from the warm-start server (issue #16), and so was the kept fixes'
    # profiled run (its start-up is not read); the diagnosed capture was not.
    starts = report["timing"]["starts"]
    assert starts.get("warm", 0) >= 5 and starts.get("warm", 0) + starts.get("cold", 0) == report["timing"]["trial_runs"]
    assert report["timing"]["phases_s"]["server"] >= 0  # the wait: the analysis ran beside its imports
    trial_runs = [json.loads(p.read_text()) for p in (run_dir / "trials").glob("*/capture.json")]
    warm = [c for c in trial_runs if c["start"] == "warm"]
    assert warm and all(c["status"] == "stopped" for c in warm)
    assert json.loads((run_dir / "capture.json").read_text())["start"] == "cold"
    assert json.loads((run_dir / "kept" / "capture.json").read_text())["start"] == "warm"
    assert any("warm-started" in n for n in report["notes"])
    # --diff goes to stdout after the report; the user's file is untouched without --write.
    assert "+++" in out.stdout and "num_workers=" in out.stdout
    assert "num_workers" not in SLOW_LOADER.read_text()
    for name in ("capture.json", "report.json", "profile.pstats", "stdout.log", "stderr.log"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "traces").glob("*.pt.trace.json*"))
    # The kept fix ran once under the profiler: a before/after pair of traces in one run directory.
    assert list((run_dir / "kept" / "traces").glob("*.pt.trace.json*"))
    assert any("kept/" in n for n in report["notes"])
    pair = run("compare", run_dir, run_dir / "kept", "--format", "json", cwd=tmp_path)
    assert pair.returncode == 0, pair.stderr
    # The saved run renders again without re-running anything.
    md = run("report", run_dir, "--format", "markdown", cwd=tmp_path)
    assert md.returncode == 0 and "data_loading" in md.stdout.lower().replace(" ", "_")


def test_crashing_script_exits_3_with_one_line_and_keeps_the_capture(tmp_path: Path) -> None:
    run_dir = tmp_path / "crash"
    out = run(
        "diagnose", "-q", "--no-fixes", "--out", run_dir, "--warmup", "1", "--steps", "2",
        "--profile-steps", "2", TRAIN_LOOP, "--crash-at", "5",
        cwd=tmp_path,
    )
    assert out.returncode == 3
    errors = [line for line in out.stderr.splitlines() if line.startswith("advisor: error:")]
    assert len(errors) == 1 and "ValueError" in errors[0] and "stderr.log" in errors[0]
    assert "Traceback" not in out.stderr
    capture = json.loads((run_dir / "capture.json").read_text())
    assert capture["status"] == "crashed" and capture["timed_steps"] == 2
    assert (run_dir / "report.json").is_file()
    assert "boom in step 5" in (run_dir / "stderr.log").read_text()
