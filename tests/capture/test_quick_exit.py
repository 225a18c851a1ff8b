"""A measured run whose script ends by itself skips the interpreter's teardown, and nothing the script can see.

Its threads are waited for, its atexit hooks run, its last output is flushed, its exit code is
kept; only the freeing of objects is skipped (a second per run once torch is imported).
``--full`` runs end the normal way.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from advisor.capture.model import RunSpec, RunStatus
from advisor.capture.run import capture

pytestmark = pytest.mark.e2e

SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from pathlib import Path
    import torch

    out = Path(sys.argv[1])

    class Freed:
        def __del__(self):  # runs only when the interpreter frees the module's objects
            (out / "freed").write_text("freed")

    keep = Freed()
    atexit.register(lambda: (out / "atexit").write_text("ran"))

    def late():
        time.sleep(0.3)
        (out / "thread").write_text("joined")

    threading.Thread(target=late).start()  # non-daemon: a normal exit waits for it
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    print("last words", end="")  # no newline: only a flush writes it
    sys.exit(3)
""")


def _run(tmp_path: Path, **kw: object):  # type: ignore[no-untyped-def]
    script, marks = tmp_path / "ends.py", tmp_path / "marks"
    script.write_text(SCRIPT)
    marks.mkdir()
    spec = RunSpec(script=script, args=(str(marks),), out_dir=tmp_path / "run", warmup_steps=1, timed_steps=20,
                   profiled_steps=0, cprofile_steps=0, quiet=True, cwd=tmp_path, **kw)  # type: ignore[arg-type]
    cap = capture(spec)
    return cap, marks


def test_a_script_that_ends_by_itself_keeps_its_threads_hooks_output_and_code(tmp_path: Path) -> None:
    cap, marks = _run(tmp_path)
    assert cap.status == RunStatus.COMPLETED and cap.exit_code == 3
    assert (marks / "thread").read_text() == "joined"
    assert (marks / "atexit").read_text() == "ran"
    assert (tmp_path / "run" / "stdout.log").read_text().endswith("last words")
    assert not (marks / "freed").exists()  # the teardown was skipped


def test_a_full_run_ends_the_normal_way(tmp_path: Path) -> None:
    cap, marks = _run(tmp_path, full=True)
    assert cap.status == RunStatus.COMPLETED and cap.exit_code == 3
    assert (marks / "thread").exists() and (marks / "atexit").exists()
    assert (marks / "freed").read_text() == "freed"
