"""A diagnose of a script that saves over a file the user had: the file is the user's again at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SCRIPT = """\
import torch
w = torch.nn.Parameter(torch.zeros(64))
opt = torch.optim.SGD([w], lr=0.1)
for step in range({steps}):
    (torch.ones(64) @ w - 1).pow(2).backward()
    opt.step()
    opt.zero_grad()
    torch.save({{"w": w.detach(), "step": step}}, "best.pt")  # every step, over the user's file
"""


def _diagnose(tmp_path: Path, *options: str) -> dict:
    (tmp_path / "train.py").write_text(SCRIPT.format(steps=400))
    (tmp_path / "best.pt").write_bytes(b"the user's trained weights")
    out = subprocess.run(
        [sys.executable, "-m", "advisor", "diagnose", "-q", "--out", str(tmp_path / "run"), "--warmup", "2",
         "--steps", "6", "--profile-steps", "2", *options, "--format", "json", "-o", str(tmp_path / "r.json"),
         "train.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "best.pt").read_bytes() == b"the user's trained weights"
    assert not [p for p in tmp_path.iterdir() if ".advisor-kept-" in p.name]
    return json.loads((tmp_path / "r.json").read_text())


def test_the_captures_save_over_the_users_file_is_undone(tmp_path: Path) -> None:
    report = _diagnose(tmp_path, "--no-fixes")
    assert any("saved over 1 existing file(s)" in note and "best.pt" in note for note in report["notes"])


@pytest.mark.slow
def test_the_trial_runs_saves_are_undone_too(tmp_path: Path) -> None:
    report = _diagnose(tmp_path, "--fix", "cpu_threads", "--repeats", "2")
    assert any(t["fix"] == "cpu_threads" and t["verdict"] != "skipped" for t in report["trials"])
