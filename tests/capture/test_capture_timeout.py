"""End to end: --timeout ends a hung script and keeps the partial capture.

The verdict must not depend on how busy the machine is: the script's start (importing torch)
takes 2-3 s on a quiet machine and over 10 s on a shared one, so a fixed timeout from the start
would sometimes fire before the script even reached its hang. The test therefore waits for the
*condition* (the progress relay reports step 5, after which the script hangs) and only then lets
the real timeout logic (``capture.run._wait``: SIGTERM, trace export, kill) count its seconds.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from advisor.capture import run as capture_run
from advisor.capture.model import RunCapture

pytestmark = pytest.mark.e2e

TIMEOUT_S = 2.0
HANG_AT = 5
REACH_LIMIT_S = 600.0
"""Only a safety net: how long the script may take to reach its hang before the test gives up."""


def test_timeout_ends_a_hung_script_and_keeps_the_capture(run_script, monkeypatch: pytest.MonkeyPatch) -> None:
    hung = threading.Event()
    real_wait = capture_run._wait

    def wait_once_hung(proc, timeout_s, start, *rest):  # type: ignore[no-untyped-def]
        # Wait for the condition (or for the script to end some other way), then time out from there.
        while not hung.wait(0.1):
            if proc.poll() is not None or time.perf_counter() - start > REACH_LIMIT_S:
                pytest.fail(f"the script never reached step {HANG_AT} (exit code {proc.poll()})")
        return real_wait(proc, timeout_s, time.perf_counter(), *rest)

    monkeypatch.setattr(capture_run, "_wait", wait_once_hung)

    hung_at: list[float] = []

    def on_event(event) -> None:  # type: ignore[no-untyped-def]
        # NOTE: the relay reports phase changes, not every step: the profiled phase begins at
        # step HANG_AT - 1 and the script hangs one step later, so from here the hang is near.
        if (event.step >= HANG_AT or (event.phase == "profiled" and event.step >= HANG_AT - 1)) and not hung.is_set():
            hung_at.append(time.perf_counter())
            hung.set()

    # hangs after step 5, inside the profiled window: the child exports the trace on SIGTERM.
    cap, events = run_script("train_loop.py", "--hang-at", str(HANG_AT), timeout_s=TIMEOUT_S, progress=on_event)
    after_hang_s = time.perf_counter() - hung_at[0]
    run_dir = Path(cap.run_dir)
    assert cap.status == "timeout" and not cap.ok
    assert cap.error is not None and cap.error.type == "Timeout" and f"{TIMEOUT_S:g} s" in cap.error.message
    assert cap.steps_seen == HANG_AT and cap.timed_steps == 3 and len(cap.timed.step_times_ms) == 3
    assert len(cap.trace_files) == 1 and (run_dir / cap.trace_files[0]).is_file()
    assert cap.wall_s >= TIMEOUT_S
    # the timeout fired after TIMEOUT_S, and the stop is bounded by the mechanism itself (SIGTERM,
    # then SIGKILL after TERM_GRACE_S), not by how fast the machine is; 30 s covers the merge.
    assert TIMEOUT_S <= after_hang_s < TIMEOUT_S + capture_run.TERM_GRACE_S + 30
    assert RunCapture.load(run_dir).status == "timeout"
