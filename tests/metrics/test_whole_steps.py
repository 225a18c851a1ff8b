"""A captured trace cut to the steps its capture counted (advisor.metrics.whole_steps)."""

from __future__ import annotations

from pathlib import Path

from advisor.distributed.parallel import analyze_files
from advisor.metrics.events import find_windows
from advisor.metrics.whole_steps import whole_steps
from advisor.trace.load import load_trace
from tests.metrics.tracegen import TraceBuilder


def _ended_in_the_window(path: Path) -> Path:
    """Three whole steps (a 1.5 ms batch, a kernel), then the step the script ended in: 0.2 ms of tail."""
    b = TraceBuilder()
    with b.python("train.py(50): main"):
        for s in range(3):
            with b.step(s):
                with b.dataloader():
                    with b.python("train.py(23): collate"):
                        b.cpu(1500.0)
                b.linear(64, 64, 64, kernel_us=400.0)
                b.sync()
        with b.step(3):
            b.cpu(200.0)  # the loop's StopIteration and a print: no batch, no model call
    return b.write(path / "t.pt.trace.json")


def test_the_step_after_the_counted_ones_is_left_out(tmp_path: Path) -> None:
    trace = load_trace(_ended_in_the_window(tmp_path))
    assert len(find_windows(trace)[0].step) == 4
    cut = whole_steps(trace, 3)
    windows, real = find_windows(cut)
    assert real and list(windows.step) == [0, 1, 2]
    assert len(cut.events) == len(trace.events) - 1  # only the step's own span goes
    assert not cut.events["name"].astype(str).eq("ProfilerStep#3").any()


def test_a_trace_with_no_more_steps_than_counted_is_kept_as_it_is(tmp_path: Path) -> None:
    trace = load_trace(_ended_in_the_window(tmp_path))
    assert whole_steps(trace, 4) is trace and whole_steps(trace, 10) is trace
    assert whole_steps(trace, 0) is trace  # unknown count (an older capture): every step


def test_a_run_s_trace_is_analysed_over_its_counted_steps(tmp_path: Path) -> None:
    path = _ended_in_the_window(tmp_path)
    whole, = analyze_files([path], steps=3)
    every, = analyze_files([path])
    assert len(every.steps) == 4 and len(whole.steps) == 3
    # the tail step, 0.2 ms beside 2 ms ones, no longer pulls the per-step figures down
    assert whole.steps["step_time_ms"].min() > 1.5 > every.steps["step_time_ms"].min()
