"""Helpers for the example zoo's tests: the manifest (examples/expected.json) and a script runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
MANIFEST = EXAMPLES / "expected.json"
HERE = Path(__file__).resolve().parent


def load_manifest() -> dict:
    """The examples' manifest: name -> entry (expected categories, args, smoke args)."""
    return json.loads(MANIFEST.read_text(encoding="utf-8"))["examples"]


def run_script(path: Path, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run one example plainly with this interpreter, on CPU, one intra-op thread per process.

    One thread keeps parallel test workers from oversubscribing the cores (2 here).
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, str(path), *args, "--device", "cpu"],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env,
    )

