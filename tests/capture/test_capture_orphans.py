"""Killing advisor outright never leaves the user's training script running behind it.

The capture child runs in its own session (so Ctrl-C reaches only advisor, which stops it in
order); the kernel's parent-death signal (advisor._proc) stops it when advisor dies by SIGKILL.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN_LOOP = REPO / "tests" / "scripts" / "train_loop.py"


def _children_running(run_dir: Path) -> list[psutil.Process]:
    """Capture children of this run (their command line names the run's config file)."""
    config = str(run_dir / "config.json")
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if config in (p.info["cmdline"] or []):
            found.append(p)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
def test_sigkilled_advisor_takes_the_script_down_with_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "advisor", "diagnose", "-q", "--no-fixes", "--out", str(run_dir),
         str(TRAIN_LOOP), "--hang-at", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while not _children_running(run_dir) and time.monotonic() < deadline:
            assert proc.poll() is None, "advisor ended before its child started"
            time.sleep(0.2)
        assert _children_running(run_dir), "the capture child never started"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while _children_running(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _children_running(run_dir)
    for p in left:  # never leak a hung script from a failing test
        p.kill()
    assert left == []
