"""A run's torch.save over a file from before the diagnose: the file is set aside, and put back at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from advisor.capture.set_aside import ENV, put_back, saves_set_aside, set_aside_before_save


def test_the_first_save_of_a_diagnose_sets_the_old_file_aside_and_the_end_puts_it_back(tmp_path: Path) -> None:
    best = tmp_path / "best.pt"
    best.write_bytes(b"the user's trained weights")
    with saves_set_aside() as restored:
        assert ENV in os.environ
        set_aside_before_save(best)  # a run's first save: the user's file goes aside
        best.write_bytes(b"a cut-short run's weights")
        set_aside_before_save(str(best))  # a later run's save: what is aside stays the user's
        best.write_bytes(b"another run's weights")
        aside = [p for p in tmp_path.iterdir() if p.name.startswith("best.pt.advisor-kept-")]
        assert len(aside) == 1 and aside[0].read_bytes() == b"the user's trained weights"
    assert best.read_bytes() == b"the user's trained weights"
    assert restored == [str(best)] and sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]
    assert ENV not in os.environ


def test_new_files_buffers_and_runs_outside_a_diagnose_are_left_alone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    old = tmp_path / "old.pt"
    old.write_bytes(b"x")
    set_aside_before_save(old)  # no diagnose: nothing to do
    assert [p.name for p in tmp_path.iterdir()] == ["old.pt"]
    with saves_set_aside() as restored:
        set_aside_before_save(tmp_path / "new.pt")  # nothing there yet
        set_aside_before_save(None)  # torch.save(obj, buffer): not a path
        (tmp_path / "new.pt").write_bytes(b"written by a run")
    assert restored == [] and (tmp_path / "new.pt").read_bytes() == b"written by a run"


def test_a_listed_file_that_is_gone_is_skipped(tmp_path: Path) -> None:
    listing = tmp_path / "saves.jsonl"
    listing.write_text(json.dumps([str(tmp_path / "a.pt"), str(tmp_path / "a.pt.aside")]) + "\nnot json\n")
    assert put_back(listing) == [] and put_back(tmp_path / "missing.jsonl") == []


torch = pytest.importorskip("torch")


def test_the_captures_save_hook_sets_the_file_aside(tmp_path: Path) -> None:
    from advisor.capture.checkpoints import timed_save
    from advisor.capture.phases import Phases
    from advisor.capture.recorder import StepRecorder

    ck = tmp_path / "ck.pt"
    torch.save({"w": torch.ones(2)}, ck)
    save = timed_save(torch.save, StepRecorder(Phases(0, 5, 0, 0, full=True)), lambda: ())
    with saves_set_aside():
        save({"w": torch.zeros(2)}, ck)
        assert torch.load(ck)["w"].sum() == 0  # the run reads what it saved, as a plain run does
    assert torch.load(ck)["w"].sum() == 2


def test_a_killed_diagnoses_list_is_swept_once_nothing_it_names_is_set_aside(tmp_path: Path) -> None:
    from advisor.capture.set_aside import PREFIX, _sweep

    dead = 4_194_304 + 4321  # over Linux's largest pid: no such process
    empty = tmp_path / f"{PREFIX}{dead}-abc"
    empty.mkdir()
    holding = tmp_path / f"{PREFIX}{dead}-def"
    holding.mkdir()
    kept = tmp_path / "best.pt.advisor-kept-1"
    kept.write_text("the user's checkpoint")
    (holding / "saves.jsonl").write_text(json.dumps([str(tmp_path / "best.pt"), str(kept)]) + "\n")
    mine = tmp_path / f"{PREFIX}{os.getpid()}-ghi"  # a live diagnose's: never touched
    mine.mkdir()
    other = tmp_path / "advisor-set-aside-unrelated"
    other.mkdir()
    _sweep(tmp_path)
    assert not empty.exists()
    assert holding.exists() and kept.exists()  # the record of where the user's file is stays
    assert mine.exists() and other.exists()
