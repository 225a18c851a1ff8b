"""End to end: a folder named ``advisor`` where the user runs advisor does not shadow advisor's own.

The capture child starts as ``python -m advisor.capture.child``; without ``-P`` the working
directory comes first on ``sys.path`` and the project's ``advisor/`` package was imported
instead (our own repository root did that to the before/after benchmarks). The script still
finds the modules beside it first, as ``python train.py`` would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_helpers import invoke

pytestmark = pytest.mark.e2e

SCRIPT = """\
import torch
import helper  # beside the script: its folder comes first on sys.path

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(40):
    loss = model(helper.batch()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _project(tmp_path: Path) -> Path:
    """A project folder with a broken package named ``advisor``, a module the script imports, and the script."""
    project = tmp_path / "project"
    (project / "advisor").mkdir(parents=True)
    (project / "advisor" / "__init__.py").write_text('raise ImportError("the project\'s own advisor package")\n')
    (project / "helper.py").write_text("import torch\n\ndef batch():\n    return torch.randn(8, 4)\n")
    (project / "train.py").write_text(SCRIPT)
    return project


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is new in 3.11")
def test_a_project_folder_named_advisor_does_not_shadow_advisor(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(_project(tmp_path))
    code, _, err = invoke(
        capsys, "diagnose", "--no-fixes", "-q", "--out", str(tmp_path / "run"), "--warmup", "2", "--steps", "5",
        "--profile-steps", "2", "--format", "json", "-o", str(tmp_path / "r.json"), "train.py",
    )
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["run"]["status"] == "completed" or report["summary"]["step_count"] > 0, report["run"]


def test_the_scripts_folder_goes_first_and_a_preload_leaves_sys_path_as_it_was(monkeypatch) -> None:
    from advisor.capture import syspath

    for safe in (True, False):
        monkeypatch.setattr(syspath, "_safe", lambda safe=safe: safe)
        before = list(sys.path)
        try:
            with syspath.first_for_a_while("/the/script/folder"):
                assert sys.path[0] == "/the/script/folder"
            assert sys.path == before
            syspath.put_first("/the/script/folder")
            assert sys.path[0] == "/the/script/folder"
            assert sys.path[1:] == (before if safe else before[1:])  # inserted under -P, else in cwd's place
        finally:
            sys.path[:] = before


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is new in 3.11")
@pytest.mark.slow  # 8 s: make test-all (make test stays under 5 minutes)
def test_torchrun_ranks_do_not_import_the_projects_advisor_either(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(_project(tmp_path))
    code, _, err = invoke(
        capsys, "diagnose", "--no-fixes", "-q", "--nproc-per-node", "2", "--out", str(tmp_path / "run"),
        "--warmup", "2", "--steps", "5", "--profile-steps", "2", "--format", "json", "-o", str(tmp_path / "r.json"),
        "train.py",
    )
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "run").glob("rank*")) == ["rank0", "rank1"]
