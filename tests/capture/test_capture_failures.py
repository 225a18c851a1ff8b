"""End to end: crashes, sys.exit, timeouts, scripts without steps, bad paths, short scripts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.capture.model import RunCapture, RunSpec
from advisor.capture.run import capture
from advisor.errors import EXIT_USAGE, UsageError

pytestmark = pytest.mark.e2e

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_crash_at_step_n_keeps_what_was_measured(run_script):
    # warm-up 1 + timed 3: step 5 is the first profiled step, so the profiler is open at the crash
    cap, _ = run_script("train_loop.py", "--crash-at", "5")
    run_dir = Path(cap.run_dir)
    assert cap.status == "crashed" and not cap.ok and cap.exit_code == 1
    assert cap.error is not None
    assert cap.error.type == "ValueError" and "boom in step 5" in cap.error.message
    assert cap.error.step == 5 and cap.error.log == "stderr.log"
    assert cap.steps_seen == 4 and cap.timed_steps == 3 and len(cap.timed.step_times_ms) == 3
    assert len(cap.trace_files) == 1  # the open profiler window was exported, not lost
    assert cap.trace_files[0].endswith(".gz")  # stored gzip-compressed (issue #20)
    events = json.loads(gzip.decompress((run_dir / cap.trace_files[0]).read_bytes()))["traceEvents"]
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in events)
    stderr = (run_dir / "stderr.log").read_text()
    assert "ValueError: boom in step 5" in stderr and 'train_loop.py", line' in stderr
    assert "runpy" not in stderr  # the traceback starts at the script, as Python prints it
    assert RunCapture.load(run_dir).error == cap.error


@pytest.mark.parametrize("code", [0, 3])
def test_sys_exit_midway_is_completed(run_script, code):
    cap, _ = run_script("train_loop.py", "--exit-at", "2", "--exit-code", str(code), profiled_steps=0)
    assert cap.status == "completed" and cap.exit_code == code and cap.error is None
    assert cap.steps_seen == 2 and cap.timed.step_times_ms and len(cap.timed.step_times_ms) == 1
    assert any("fewer than the 4 asked" in n for n in cap.notes)


def test_killed_process_keeps_what_was_saved(run_script):
    # SIGKILL (the OOM killer's signal) after step 5: child.json was last saved when the
    # profiled phase began (after step 4), so the timed steps survive
    cap, _ = run_script("train_loop.py", "--kill-at", "5")
    assert cap.status == "crashed" and cap.exit_code == -9
    assert cap.error is not None and cap.error.type == "ProcessKilled"
    assert "SIGKILL" in cap.error.message and "out of memory" in cap.error.message
    assert cap.timed_steps == 3 and len(cap.timed.step_times_ms) == 3
    assert cap.environment.python  # filled in by the parent when the child could not


def test_no_steps_explains_how_to_mark_them(run_script):
    cap, _ = run_script("no_steps.py")
    assert cap.status == "no_steps" and not cap.ok and cap.steps_seen == 0
    assert any("advisor.step()" in n for n in cap.notes)
    assert cap.timed.step_times_ms == () and cap.trace_files == ()


def test_fewer_steps_than_asked_still_captures(run_script):
    cap, _ = run_script("train_loop.py", "--steps", "5")
    assert cap.status == "completed" and cap.steps_seen == 5
    assert (cap.warmup_steps, cap.timed_steps, cap.profiled_steps) == (1, 3, 1)
    assert len(cap.trace_files) == 1 and cap.pstats_file is None
    assert any("fewer than the 10 asked" in n for n in cap.notes)  # 8, and two for the trace budget's probe
    # NOTE: the script ended with the step probed for the trace budget: that whole step is the trace
    assert not any("incomplete" in n for n in cap.notes)


@pytest.mark.parametrize("name", ["missing.py", "not_python.txt", "."])
def test_bad_script_path_is_a_usage_error(tmp_path, name):
    out = tmp_path / "run"
    with pytest.raises(UsageError) as info:
        capture(RunSpec(script=SCRIPTS / name, out_dir=out))
    assert info.value.exit_code == EXIT_USAGE
    assert "\n" not in str(info.value)
    assert not out.exists()


def test_python_script_without_suffix_is_accepted(tmp_path):
    from advisor.capture.run import validate_script

    script = tmp_path / "train"
    script.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    assert validate_script(script) == script.resolve()


def test_negative_counts_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="timed-steps"):
        capture(RunSpec(script=SCRIPTS / "no_steps.py", out_dir=tmp_path / "r", timed_steps=-1))
