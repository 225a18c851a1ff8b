"""Issue #28 item 3: the trace budget's plan (pure), the probe's measure, and the probe driven by the recorder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.capture.budget import (
    DEFAULT_TRACE_BUDGET_BYTES,
    MIN_PROFILED_STEPS,
    StepSize,
    TraceBound,
    TraceProbe,
    measure_step,
    plan_trace,
)
from advisor.capture.phases import Phases, StopScript
from advisor.capture.recorder import StepRecorder
from tests.fakes import Clock

MB = 2**20
STEP = StepSize(total_bytes=100 * MB, stack_bytes=50 * MB, memory_bytes=30 * MB)
"""A probed step: half of it stacks, 30% memory events, 20% the rest."""


def _plan(budget_mb: float, asked: int = 10, **kw: object) -> tuple[int, bool, bool]:
    bound = plan_trace(STEP, int(budget_mb * MB), asked, **kw)  # type: ignore[arg-type]
    assert bound.asked_steps == asked and bound.budget_bytes == int(budget_mb * MB)
    return bound.steps, bound.stacks, bound.memory


def test_a_window_that_fits_is_left_as_asked() -> None:
    bound = plan_trace(STEP, 2000 * MB, 10)
    assert (bound.steps, bound.stacks, bound.memory, bound.bounded) == (10, True, True, False)
    assert bound.text() == ""


def test_fewer_steps_come_first_down_to_the_minimum() -> None:
    assert _plan(500) == (4, True, True)  # 450 MB of room: four steps of 100 MB
    assert _plan(334) == (MIN_PROFILED_STEPS, True, True)


def test_memory_events_go_before_stacks_then_both() -> None:
    assert _plan(240) == (3, True, False)  # 216 MB of room: three steps of 70 MB without memory events
    assert _plan(170) == (3, False, True)  # 153 MB: three of 50 MB without stacks
    assert _plan(80) == (3, False, False)  # 72 MB: three of 20 MB without either


def test_below_the_minimum_only_without_stacks_and_memory_and_never_below_one_step() -> None:
    assert _plan(40) == (1, False, False)
    bound = plan_trace(STEP, 10 * MB, 10)
    assert (bound.steps, bound.stacks, bound.memory) == (1, False, False)
    assert bound.estimated_bytes > bound.budget_bytes and "still over the budget" in bound.text()


def test_a_short_window_is_its_own_minimum() -> None:
    assert _plan(180, asked=2) == (2, True, False)  # 162 MB of room: two steps without memory events
    assert _plan(1000, asked=0) == (0, True, True)


def test_a_job_keeps_its_steps_and_drops_options_only() -> None:
    assert _plan(500, fixed_steps=True) == (10, False, False)
    assert _plan(800, fixed_steps=True) == (10, True, False)  # 720 MB of room: ten steps of 70 MB
    assert _plan(2000, fixed_steps=True) == (10, True, True)


def test_the_sentence_names_what_was_dropped_and_the_sizes() -> None:
    bound = TraceBound(budget_bytes=500 * MB, step_bytes=180 * MB, asked_steps=10, steps=3, stack_bytes=100 * MB,
                       stacks=False, exported_bytes=250 * MB)
    assert bound.text() == (
        "trace bounded to 3 of 10 profiled steps, without Python stacks: one step exported 180 MB, "
        "budget 500 MB (--trace-budget); the trace exported 250 MB"
    )
    over = TraceBound(budget_bytes=MB, step_bytes=MB // 20, asked_steps=10, steps=10, exported_bytes=2 * MB)
    assert over.text().startswith("trace of 10 profiled steps: ") and "over the budget" in over.text()


def test_the_default_budget_is_the_cli_default() -> None:
    from advisor.cli.options import TRACE_BUDGET_DEFAULT, ByteSize

    assert ByteSize().convert(TRACE_BUDGET_DEFAULT, None, None) == DEFAULT_TRACE_BUDGET_BYTES


def _kineto(path: Path, events: list[dict[str, object]]) -> list[int]:
    """Write events in Kineto's layout (one ``  {`` line per event); return each event's bytes."""
    head = '{\n  "schemaVersion": 1,\n  "traceEvents": ['
    bodies = ["\n  {\n" + json.dumps(e, indent=4)[2:-2] + "\n  }" for e in events]
    path.write_text(head + ",".join(bodies) + "\n  ],\n  \"traceName\": \"x\"\n}")
    return [len(b.encode()) + 1 for b in bodies]  # NOTE: with the comma that follows each


def test_measure_step_counts_stack_and_memory_events_whole(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "ts": 1, "dur": 5},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 3, "args": {"Bytes": 64}},
        {"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1): _call_impl", "ts": 2, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 2, "args": {"Input Dims": [[4, 4]]}},
    ]
    sizes = _kineto(tmp_path / "t.json", events)
    step = measure_step(tmp_path / "t.json")
    assert step.total_bytes == (tmp_path / "t.json").stat().st_size
    assert (step.stack_bytes, step.memory_bytes) == (sizes[0] + sizes[2], sizes[1])
    assert step.per_step(False, False) == step.total_bytes - step.stack_bytes - step.memory_bytes


# ----- the probe, driven by the recorder (a fake clock and a fake profiler: no torch) -----------


class FakeControl:
    """The profiler control: records calls; the probe measures ``step``."""

    def __init__(self, step: StepSize) -> None:
        self.calls: list[str] = []
        self.measured = step
        self.stacks = self.memory = True
        self.exported_bytes: int | None = None

    def start(self) -> None:
        self.calls.append(f"start stacks={self.stacks} memory={self.memory}")

    def step(self) -> None:
        self.calls.append("step")

    def stop(self, export: bool) -> None:
        self.calls.append("export" if export else "discard")
        self.exported_bytes = 123

    def probe_start(self) -> None:
        self.calls.append("probe")

    def probe_stop(self, scratch: Path | None) -> StepSize | None:
        self.calls.append("probe_stop" if scratch else "probe_close")
        return self.measured if scratch else None


def _recorder(warmup: int, step: StepSize, budget: int, **phases: object):
    control, clock, notes = FakeControl(step), Clock(10.0), []
    probe = TraceProbe(control, budget, Path("scratch.json"), notes)
    rec = StepRecorder(Phases(warmup, 2, 10, 0, **phases), profiler=control, clock=clock,  # type: ignore[arg-type]
                       on_step=probe.on_event, on_phase=probe.on_event)
    rec.script_started()
    return rec, control, probe, notes


def _steps(rec: StepRecorder, n: int) -> None:
    for _ in range(n):
        rec.optimizer_step()


def test_the_probe_is_the_last_warmup_step_and_sizes_the_window_before_it_starts() -> None:
    rec, control, probe, notes = _recorder(3, STEP, 240 * MB)
    _steps(rec, 2)
    assert control.calls == ["probe"]  # the third (last) warm-up step is probed
    _steps(rec, 1)
    assert control.calls == ["probe", "probe_stop"] and rec.phases.profiled == 3
    _steps(rec, 2 + 2)
    with pytest.raises(StopScript):  # the last profiled step ends the run
        _steps(rec, 1)
    assert control.calls[2] == "start stacks=True memory=False" and control.calls.count("step") == 2
    assert rec.counts["profiled"] == 3 and rec.stop_requested and notes == []
    rec.finish()
    record = probe.record()
    assert record is not None and record.exported_bytes == 123 and record.steps == 3 and not record.memory


def test_one_warmup_step_is_probed_from_the_script_start() -> None:
    rec, control, _, _ = _recorder(1, STEP, 2000 * MB)
    assert control.calls == ["probe"]
    _steps(rec, 1)
    assert control.calls == ["probe", "probe_stop"] and rec.phases.profiled == 10


def test_a_job_probes_but_keeps_its_steps() -> None:
    rec, _, probe, _ = _recorder(2, STEP, 500 * MB, settle=False)
    _steps(rec, 2)
    assert rec.phases.profiled == 10 and probe.bound is not None and not probe.bound.stacks


def test_no_warmup_no_probe_and_a_note() -> None:
    rec, control, probe, notes = _recorder(0, STEP, MB)
    _steps(rec, 3)
    assert "probe" not in control.calls and probe.record() is None and rec.phases.profiled == 10
    assert len(notes) == 1 and "--trace-budget" in notes[0] and "no warm-up step" in notes[0]


def test_a_script_ending_in_warmup_closes_the_probe_unmeasured() -> None:
    rec, control, probe, _ = _recorder(2, STEP, MB)
    _steps(rec, 1)
    probe.close()
    assert control.calls == ["probe", "probe_close"] and probe.record() is None


def test_a_failed_probe_leaves_the_window_as_asked_with_a_note() -> None:
    rec, control, probe, notes = _recorder(1, STEP, MB)

    def broken(_scratch: Path | None) -> StepSize:
        raise OSError(28, "No space left on device")

    control.probe_stop = broken  # type: ignore[method-assign]
    _steps(rec, 1)
    assert rec.phases.profiled == 10 and probe.record() is None
    assert len(notes) == 1 and "No space left" in notes[0]


@pytest.mark.parametrize("value", ["0", "-5MB", "lots", "5XB"])
def test_a_bad_trace_budget_is_a_one_line_usage_error(capsys, tmp_path: Path, value: str) -> None:
    from cli_helpers import invoke

    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    code, _, err = invoke(capsys, "diagnose", "--trace-budget", value, str(script))
    assert code == 2 and "--trace-budget" in err


def test_a_probe_that_cannot_start_leaves_the_step_alone_with_a_note() -> None:
    control, notes = FakeControl(STEP), []

    def busy() -> None:
        raise RuntimeError("Can't profile: another profiler is running")

    control.probe_start = busy  # type: ignore[method-assign]
    probe = TraceProbe(control, MB, Path("scratch.json"), notes)
    rec = StepRecorder(Phases(2, 2, 10, 0), profiler=control, clock=Clock(10.0),  # type: ignore[arg-type]
                       on_step=probe.on_event, on_phase=probe.on_event)
    rec.script_started()
    _steps(rec, 4)
    assert rec.phases.profiled == 10 and probe.record() is None and rec.phase == "profiled"
    assert len(notes) == 1 and "another profiler" in notes[0]
