"""Issue 15: scripts built on frameworks diagnose unmodified, and a fix trial runs through each.

Our own small scripts (models from configs, synthetic data, no download) under ``scripts/``. The
framework packages are the ``frameworks`` test extra (``pip install torch==2.13.0 -e .[frameworks]``,
torch pinned so that pip keeps the CPU build); a test whose package is absent is skipped with the
reason. Each run imports its framework and takes tens of seconds: marked slow.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).resolve().parent / "scripts"
SMALL = ("-q", "--warmup", "3", "--steps", "5", "--profile-steps", "2", "--repeats", "1", "--timeout", "400")

CASES = {
    # script: (package it needs, step source, fix tried through it)
    "hf_trainer.py": ("transformers", "optimizer", "dataloader_workers"),
    "lightning_trainer.py": ("lightning", "optimizer", "dataloader_workers"),
    "accelerate_loop.py": ("accelerate", "optimizer", "dataloader_workers"),
    "ddp_loop.py": (None, "optimizer", "dataloader_workers"),
    "compiled.py": (None, "optimizer", "dataloader_workers"),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CASES))
def test_framework_script_diagnoses_unmodified_with_a_fix_trial(script: str, tmp_path: Path) -> None:
    package, source, fix = CASES[script]
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (pip install torch==2.13.0 -e '.[frameworks]')")
    report_file, run_dir = tmp_path / "report.json", tmp_path / "run"
    before = (SCRIPTS / script).read_text()
    out = subprocess.run(
        [sys.executable, "-m", "advisor", "diagnose", *SMALL, "--fix", fix, "--format", "json",
         "-o", str(report_file), "--out", str(run_dir), str(SCRIPTS / script)],
        capture_output=True, text=True, cwd=tmp_path, timeout=1800,
    )
    assert out.returncode in (0, 1), out.stderr[-3000:]
    assert (SCRIPTS / script).read_text() == before  # unmodified
    capture = json.loads((run_dir / "capture.json").read_text())
    assert capture["status"] == "stopped" and capture["step_source"] == source, capture["notes"]
    report = json.loads(report_file.read_text())
    trial = next(t for t in report["trials"] if t["fix"] == fix)
    # the fix really ran through the framework: measured, not skipped or failed
    # "undecided" is a measured verdict too: an interval too wide to call under load (issue #21);
    # so is "unmeasurable": the baseline's own runs disagreed (this machine's speed states), and
    # make test-all met it on compiled.py and ddp_loop.py (2026-11-27, both cores busy with the suite)
    assert trial["verdict"] in ("improved", "no_effect", "slower", "undecided", "unmeasurable"), trial
    assert trial["repeats"] >= 1 and trial["samples_per_s"], trial
