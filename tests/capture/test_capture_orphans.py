"""Killing advisor outright never leaves the user's training script running behind it.

The capture child runs in its own session (so Ctrl-C reaches only advisor, which stops it in
order); the kernel's parent-death signal (advisor._proc) stops it when advisor dies by SIGKILL.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_helpers import gone_within, pids_with_args

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TRAIN_LOOP = REPO / "tests" / "scripts" / "train_loop.py"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_sigkilled_advisor_takes_the_script_down_with_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = str(run_dir / "config.json")  # the capture child's command line names it
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "diagnose", "-q", "--no-fixes", "--out", str(run_dir),
         str(TRAIN_LOOP), "--hang-at", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while not pids_with_args(config) and time.monotonic() < deadline:
            assert proc.poll() is None, "advisor ended before its child started"
            time.sleep(0.2)
        assert pids_with_args(config), "the capture child never started"
    finally:
        proc.kill()
        proc.wait()
    assert gone_within(config) == []
