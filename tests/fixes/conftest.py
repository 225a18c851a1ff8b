"""Fixtures of the trial-loop tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.capture.model import RunSpec


@pytest.fixture
def spec(tmp_path: Path) -> RunSpec:
    """A run of a one-line script (the fake runner never runs it)."""
    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    return RunSpec(script=script, out_dir=tmp_path / "run", seed=None)
