"""A frame already running when profiling began has no known line; a frame entered later has its def line."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from advisor.capture.profilers import _record_always  # noqa: E402
from advisor.metrics.steps import analyze_trace  # noqa: E402
from advisor.metrics.userframes import _PythonStacks  # noqa: E402
from advisor.trace.load import load_trace  # noqa: E402


def helper(x):
    return (x * 2).sum()


def loop_already_running(path: Path) -> None:
    """A module-level-style loop: profiling starts inside it, its ops run at its own lines."""
    x = torch.randn(64)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
        schedule=_record_always,  # as advisor's capture: ProfilerStep#N ranges, nothing cleared
    )
    prof.start()
    for _ in range(3):
        y = torch.relu(x) + 1  # an op of this frame: its line is unknown to the trace
        helper(y)  # an op of a frame entered while profiling: its def line
        prof.step()
    prof.stop()
    prof.export_chrome_trace(str(path))


def test_the_running_frame_keeps_its_function_and_loses_its_stale_line(tmp_path: Path) -> None:
    path = tmp_path / "t.pt.trace.json"
    loop_already_running(path)
    analysis = analyze_trace(load_trace(path))
    assert analysis.real_steps
    stacks = _PythonStacks(analysis, lambda f: f.endswith("test_stale_frames.py"))
    ev = analysis.trace.events
    names = ev["name"].astype(str)
    tid = ev["tid"].cat.codes.to_numpy()
    seen = {}
    for name in ("aten::relu", "aten::sum"):
        row = int(names[names == name].index[-1])
        seen[name] = stacks.resolve(int(tid[row]), float(ev["ts"].iloc[row]) + 0.01)
    assert seen["aten::relu"] == (seen["aten::relu"][0], 0, "loop_already_running")
    assert seen["aten::sum"][1:] == (helper.__code__.co_firstlineno, "helper")
