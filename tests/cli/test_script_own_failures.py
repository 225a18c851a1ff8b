"""Issue 15: failures that are the script's own, options validated first, ``-m``, call-site lines.

Each run is a real ``advisor diagnose`` in a subprocess on a tiny script written into tmp_path
(a second or two of torch import each).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ADVISOR = [sys.executable, "-m", "advisor"]
SMALL = ("-q", "--no-fixes", "--warmup", "1", "--steps", "2", "--profile-steps", "2")


def run(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ADVISOR, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)


def write(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


ARGPARSE = """\
    import argparse
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()
    print(torch.ones(1))
"""


def test_argparse_error_is_quoted_with_exit_code_and_misplaced_option_hint(tmp_path):
    script = write(tmp_path / "train.py", ARGPARSE)
    out = run("diagnose", *SMALL, "--out", tmp_path / "run", script, "--timeout", "5", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("advisor: error:")]
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert "before its first step (exit code 2)" in line
    assert "unrecognized arguments: --timeout 5" in line  # the script's own words
    assert "move it before the script" in line and "--timeout" in line
    assert str(tmp_path / "run" / "stderr.log") in line
    assert "no training step" not in out.stderr


def test_import_error_before_first_step_quotes_the_exception(tmp_path):
    script = write(tmp_path / "train.py", "import torch\nraise RuntimeError('operator demo::nms does not exist')\n")
    out = run("diagnose", *SMALL, "--out", tmp_path / "run", script, cwd=tmp_path)
    assert out.returncode == 3
    assert "exit code 1): RuntimeError: operator demo::nms does not exist" in out.stderr


def test_no_step_message_only_when_the_script_really_ran(tmp_path):
    script = write(tmp_path / "idle.py", "print('nothing to train')\n")
    out = run("diagnose", *SMALL, "--out", tmp_path / "run", script, cwd=tmp_path)
    assert out.returncode == 3 and "ran to its end but no training step was seen" in out.stderr


def test_bad_fix_id_fails_before_anything_runs(tmp_path):
    script = write(tmp_path / "train.py", "open('ran.txt', 'w').write('x')\n")
    out = run("diagnose", "-q", "--fix", "dataloader_worker", "--out", tmp_path / "run", script, cwd=tmp_path)
    assert out.returncode == 2
    assert "unknown fix id 'dataloader_worker'" in out.stderr and "dataloader_workers" in out.stderr
    assert not (tmp_path / "ran.txt").exists() and not (tmp_path / "run").exists()
    both = run("diagnose", "-q", "--no-fixes", "--fix", "pin_memory", script, cwd=tmp_path)
    assert both.returncode == 2 and "--no-fixes" in both.stderr


LOOP = """\
    import torch

    w = torch.randn(8, 1, requires_grad=True)


    def read(t):
        value = t.sum()
        return value.item()  # the host read: line 8


    for _ in range(100_000):
        x = torch.randn(16, 8)
        loss = (x @ w).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.01 * w.grad
            w.grad = None
        read(loss)
"""


def test_module_run_under_a_folder_named_advisor_gets_call_site_locations(tmp_path):
    # a project whose folder is called `advisor` and whose package is called `datasets`
    project = tmp_path / "advisor"
    write(project / "datasets" / "__init__.py", "")
    write(project / "datasets" / "train.py", LOOP)
    out = run("diagnose", *SMALL, "--format", "json", "-o", tmp_path / "r.json", "--out", tmp_path / "run",
              "-m", "datasets.train", cwd=project)
    assert out.returncode == 0, out.stderr
    cap = json.loads((tmp_path / "run" / "capture.json").read_text())
    assert cap["step_source"] == "backward" and "backward() call" in cap["step_source_reason"]
    assert cap["script"] == str(project / "datasets" / "train.py")
    report = json.loads((tmp_path / "r.json").read_text())
    items = [loc for loc in report["locations"] if loc["kind"] == "item"]
    assert items, report["locations"]
    assert items[0]["line"] == 8 and items[0]["file"].endswith("datasets/train.py")


def test_module_not_found_is_a_usage_error(tmp_path):
    out = run("diagnose", "-q", "-m", "nosuch.module", cwd=tmp_path)
    assert out.returncode == 2 and "module 'nosuch.module' not found" in out.stderr
