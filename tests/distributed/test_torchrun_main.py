"""torchrun's main ends its process even when a thread it started is still running.

torchrun tees the ranks' logs from a thread pool that its shutdown may leave running when a
SIGTERM lands in the wrong place (advisor killed outright); the interpreter's exit then waits for
those threads for ever. advisor starts torchrun through :func:`run_then_exit`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

LEAVES_A_THREAD = """
import atexit, sys, threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

def main():
    atexit.register(lambda: Path(sys.argv[1]).write_text("atexit ran"))
    ThreadPoolExecutor(1).submit(threading.Event().wait)  # a pool thread nobody stops
    print("main done")
    {end}

{run}
"""


def _run(tmp_path: Path, end: str, through_advisor: bool, timeout: float) -> subprocess.CompletedProcess[str]:
    run = ("from advisor.distributed.torchrun_main import run_then_exit\nrun_then_exit(main)"
           if through_advisor else "main()")
    script = tmp_path / "leaves_a_thread.py"
    script.write_text(LEAVES_A_THREAD.format(end=end, run=run))
    return subprocess.run([sys.executable, str(script), str(tmp_path / "marker")],
                          capture_output=True, text=True, timeout=timeout)


def test_a_plain_exit_waits_for_the_pool_thread_for_ever(tmp_path: Path) -> None:
    # NOTE: the hang this module exists for; without it the test below would prove nothing
    with pytest.raises(subprocess.TimeoutExpired):
        _run(tmp_path, "", through_advisor=False, timeout=3)


@pytest.mark.parametrize(("end", "code", "stderr"), [
    ("", 0, ""),
    ("raise SystemExit(3)", 3, ""),
    ("raise RuntimeError('agent failed')", 1, "RuntimeError: agent failed"),
], ids=["returns", "sys-exit", "raises"])
def test_run_then_exit_ends_with_mains_code_and_runs_the_exit_hooks(tmp_path: Path, end: str, code: int, stderr: str) -> None:
    done = _run(tmp_path, end, through_advisor=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stdout == "main done\n"
    assert stderr in done.stderr
    assert (tmp_path / "marker").read_text() == "atexit ran"
