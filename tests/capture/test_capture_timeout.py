"""End to end: --timeout ends a hung script and keeps the partial capture (its own file: it
takes the full timeout, so pytest-xdist runs it beside the other capture tests)."""

from __future__ import annotations

from pathlib import Path

from advisor.capture.model import RunCapture


def test_timeout_ends_a_hung_script_and_keeps_the_capture(run_script):
    # hangs after step 5, inside the profiled window: the child exports the trace on SIGTERM.
    # NOTE: 20 s leaves room for a slow start on a loaded 2-core machine (5 steps need ~3 s
    # quiet, over 10 s when the machine is shared).
    cap, _ = run_script("train_loop.py", "--hang-at", "5", timeout_s=20)
    run_dir = Path(cap.run_dir)
    assert cap.status == "timeout" and not cap.ok
    assert cap.error is not None and cap.error.type == "Timeout" and "20 s" in cap.error.message
    assert cap.steps_seen == 5 and cap.timed_steps == 3 and len(cap.timed.step_times_ms) == 3
    assert len(cap.trace_files) == 1 and (run_dir / cap.trace_files[0]).is_file()
    assert 20 <= cap.wall_s < 20 + 30  # the stop (SIGTERM, trace export) is slower under load
    assert RunCapture.load(run_dir).status == "timeout"
