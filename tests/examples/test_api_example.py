"""Issue #20: the Python API example (examples/api/notebook.py) runs as documented in the README."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "api" / "notebook.py"


def _run(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), str(run_dir), *extra],
        capture_output=True, text=True, timeout=900, cwd=REPO, env=env,
    )


def test_the_readme_shows_the_example() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "examples/api/notebook.py" in readme and "advisor.diagnose(" in readme


@pytest.mark.e2e
@pytest.mark.slow  # 7.5 s: `make test` ran 4:12-5:14 on this machine's two speed levels; its diagnose is test_diagnose_e2e's
def test_the_api_example_runs_without_fixes(tmp_path: Path) -> None:
    proc = _run(tmp_path / "run", "--no-fixes")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "primary bottleneck: data_loading" in proc.stdout, proc.stdout
    assert "DL001" in proc.stdout and "schema: report.json is valid" in proc.stdout
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["trials"] == [] and saved["primary"]["category"] == "data_loading"


@pytest.mark.e2e
@pytest.mark.slow
def test_the_api_example_runs_with_its_fix_trial(tmp_path: Path) -> None:
    proc = _run(tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [t["fix"] for t in saved["trials"]] == ["dataloader_workers"]
    assert "dataloader_workers" in proc.stdout and "schema: report.json is valid" in proc.stdout
