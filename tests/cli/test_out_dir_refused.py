"""A refused ``--out`` is a one-line usage error before anything starts, and the folder is untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor import api
from tests.cli_helpers import invoke, one_line_error


@pytest.fixture
def no_capture(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    started: list[object] = []
    monkeypatch.setattr(api, "diagnose_script", lambda *a, **k: started.append(a))
    return started


def test_someone_elses_folder_is_refused_before_the_progress_starts(tmp_path: Path, capsys, no_capture) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    code, _, err = invoke(capsys, "diagnose", "--out", str(mine), str(script))
    line = one_line_error(code, err)
    assert "is not empty and is not an advisor run directory; pass --out with a new or empty folder" in line
    assert "steps" not in err and no_capture == []  # no live progress, no capture
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "precious"



def _earlier_run(folder: Path) -> None:
    (folder / "trials" / "pin_memory-1").mkdir(parents=True)
    (folder / "capture.json").write_text('{"script": "/elsewhere/other.py", "status": "stopped"}')
    (folder / "report.json").write_text("{}")


def test_an_existing_run_is_not_replaced_without_replace(tmp_path: Path, capsys, no_capture) -> None:  # type: ignore[no-untyped-def]
    """Issue #30: `--out runs/reuse` on another script's run deleted its trials and report, exit 0."""
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    earlier = tmp_path / "reuse"
    _earlier_run(earlier)
    code, _, err = invoke(capsys, "diagnose", "--out", str(earlier), str(script))
    line = one_line_error(code, err)
    assert "already holds a run of other.py (stopped) with report.json, 1 trial run(s)" in line
    assert "--replace" in line and no_capture == []
    assert (earlier / "trials" / "pin_memory-1").is_dir() and (earlier / "report.json").read_text() == "{}"


def test_replace_lets_out_reuse_a_run_directory(tmp_path: Path, capsys, no_capture) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    earlier = tmp_path / "reuse"
    _earlier_run(earlier)
    invoke(capsys, "diagnose", "--replace", "--out", str(earlier), str(script))
    assert len(no_capture) == 1  # went on to the capture, which cleans the folder
