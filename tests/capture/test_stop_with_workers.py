"""A run that profiles nothing (a fix trial) ends the script's DataLoader workers when its steps are in.

Its stop does not wait for the batch each worker holds, the script's own clean-up (``finally``)
still runs, a persistent iterator's workers end without torch's SIGCHLD error, and the folders
of multiprocessing's fd-passing listeners (``pymp-*``) go with the processes that held them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

from advisor.capture.model import RunSpec, RunStatus
from advisor.capture.run import capture

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not os.path.isdir("/proc"), reason="the listeners are found through /proc")]

SAMPLE_S = 1.0
"""A worker's time per sample: the batch in hand at the stop would hold the old stop this long."""

SCRIPT = textwrap.dedent(f"""
    import sys, time
    from pathlib import Path
    import torch

    out, persistent = Path(sys.argv[1]), sys.argv[2] == "persistent"

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep({SAMPLE_S})  # sleeping, not computing: the same on a busy machine
            return torch.ones(4), torch.ones(1)

    loader = torch.utils.data.DataLoader(Slow(), batch_size=1, num_workers=2, persistent_workers=persistent)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    finally:
        (out / "cleaned-up").write_text("yes")
""")


# NOTE: the persistent iterator outlives the unwinding, the same end of its workers: make test-all
@pytest.mark.parametrize("mode", ["plain", pytest.param("persistent", marks=pytest.mark.slow)])
def test_a_trial_run_stops_without_waiting_for_its_workers(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:
    # NOTE: the child's pymp-* folders land here: a short path, as a socket's path must be
    # (108 bytes), which pytest-xdist's tmp_path is not.
    temp = Path(tempfile.mkdtemp(prefix="adv-", dir="/tmp" if os.path.isdir("/tmp") else None))
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(temp))
    script, marks = tmp_path / "slow_workers.py", tmp_path / "marks"
    script.write_text(SCRIPT)
    marks.mkdir()
    spec = RunSpec(script=script, args=(str(marks), mode), out_dir=tmp_path / "run", warmup_steps=1, timed_steps=2,
                   profiled_steps=0, cprofile_steps=0, quiet=True, cwd=tmp_path, timeout_s=300)
    cap = capture(spec)
    assert cap.status == RunStatus.STOPPED and cap.exit_code == 0, (tmp_path / "run" / "stderr.log").read_text()
    assert (marks / "cleaned-up").read_text() == "yes"  # the script's finally ran
    assert "Traceback" not in (tmp_path / "run" / "stderr.log").read_text()  # no SIGCHLD error from torch
    assert not list(temp.glob("pymp-*")), "a killed worker's listener folder was left behind"
    phases = json.loads((tmp_path / "run" / "capture.json").read_text())["phases_s"]
    # each worker holds a sample of SAMPLE_S at the stop; waiting for it would take most of that
    assert phases["finishing"] < SAMPLE_S / 2, phases
