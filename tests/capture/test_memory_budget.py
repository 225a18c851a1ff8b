"""RunSpec.memory_budget_bytes on CPU: a watchdog on the script's resident memory stops it."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.capture.model import RunSpec
from advisor.capture.records import OUT_OF_MEMORY
from advisor.capture.run import capture
from advisor.errors import UsageError

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.e2e
def test_a_script_over_its_memory_budget_is_stopped_and_marked_out_of_memory(tmp_path):
    # torch alone holds far more than 64 MiB resident: the watchdog stops the run early
    spec = RunSpec(script=SCRIPTS / "train_loop.py", args=("--steps", "100000"), out_dir=tmp_path / "run",
                   memory_budget_bytes=64 * 2**20, timeout_s=300)
    cap = capture(spec)
    assert cap.status == "crashed"
    assert cap.error is not None and cap.error.type == OUT_OF_MEMORY
    assert "over the memory budget of 64 MiB" in cap.error.message


def test_a_budget_that_is_not_positive_is_a_usage_error(tmp_path):
    spec = RunSpec(script=SCRIPTS / "train_loop.py", out_dir=tmp_path / "run", memory_budget_bytes=0)
    with pytest.raises(UsageError, match="--memory-budget"):
        capture(spec)
