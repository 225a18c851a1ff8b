"""Source paths in reports: relative to the working directory when inside it, else as recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor._paths import display_path, location_text


def test_paths_under_the_working_directory_are_shown_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    inside = str(tmp_path / "examples" / "train.py")
    assert display_path(inside) == str(Path("examples") / "train.py")
    assert location_text(inside, 41, "__getitem__") == f"{Path('examples') / 'train.py'}:41 (__getitem__)"


def test_other_paths_stay_as_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    elsewhere = "/home/someone/on/another/machine/train.py"  # a trace recorded elsewhere
    assert display_path(elsewhere) == elsewhere
    assert display_path("train.py") == "train.py"  # already relative: untouched
    assert display_path("<string>") == "<string>"
    assert display_path("") == ""
