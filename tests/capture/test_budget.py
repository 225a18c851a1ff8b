"""Issue #28 item 3: the trace budget's plan (pure), the probe's measure, and the probe driven by the recorder.

The probe takes the first profiled step, after the timed ones: a profiler before them changed
what they measured (glibc malloc's state, :mod:`advisor.capture.budget`)."""

from __future__ import annotations

import json
from dataclasses import replace
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

    def probe_stop(self, scratch: Path) -> StepSize:
        self.calls.append("probe_stop")
        scratch.write_text("{}")
        return self.measured

    def keep_probe(self, scratch: Path) -> None:
        self.calls.append("keep_probe")
        scratch.unlink()


def _recorder(tmp_path: Path, warmup: int, step: StepSize, budget: int, **phases: object):
    control, clock, notes = FakeControl(step), Clock(10.0), []
    probe = TraceProbe(control, budget, tmp_path / "scratch.json", notes)
    rec = StepRecorder(Phases(warmup, 2, 10, 0, **phases), profiler=control, clock=clock,  # type: ignore[arg-type]
                       on_step=probe.on_event, on_phase=probe.on_event)
    rec.script_started()
    return rec, control, probe, notes


def _steps(rec: StepRecorder, n: int) -> None:
    for _ in range(n):
        rec.optimizer_step()


def test_no_profiler_runs_before_the_timed_steps_end(tmp_path: Path) -> None:
    # NOTE: a profiled step raises glibc malloc's mmap threshold for the rest of the process: probed
    # in warm-up, the timed steps of a CNN on numpy work ran at a tenth of their page faults.
    rec, control, _, _ = _recorder(tmp_path, 3, STEP, 240 * MB)
    _steps(rec, 4)
    assert rec.phase == "timed" and control.calls == []
    _steps(rec, 1)
    assert rec.phase == "profiled" and control.calls == ["start stacks=True memory=True"]


def test_the_first_profiled_step_is_probed_and_the_window_starts_again_as_planned(tmp_path: Path) -> None:
    rec, control, probe, notes = _recorder(tmp_path, 3, STEP, 240 * MB)
    _steps(rec, 3 + 2 + 1)
    assert control.calls == ["start stacks=True memory=True", "step", "probe_stop"]
    assert rec.phases.profiled == 3 + 2 and rec.counts.get("profiled", 0) == 0  # the probed step is in no window
    _steps(rec, 1)  # NOTE: one step with no profiler: started again in the same callback, it corrupted the heap
    assert control.calls[3:] == ["step", "start stacks=True memory=False"] and rec.counts.get("profiled", 0) == 0
    _steps(rec, 2)
    with pytest.raises(StopScript):  # the third step of the planned window ends the run
        _steps(rec, 1)
    rec.finish()  # the last window closes once the stop has unwound
    assert control.calls[5:] == ["step", "step", "export"] and rec.counts["profiled"] == 3 and notes == []
    assert rec.stop_requested
    record = probe.record()
    assert record is not None and record.exported_bytes == 123 and record.steps == 3 and not record.memory
    assert record.asked_steps == 10


def test_a_roomy_budget_keeps_the_window_as_asked(tmp_path: Path) -> None:
    rec, control, _, _ = _recorder(tmp_path, 1, STEP, 2000 * MB)
    _steps(rec, 1 + 2 + 2)
    assert control.calls[-1] == "start stacks=True memory=True" and rec.phases.profiled == 12


def test_a_job_probes_but_keeps_its_steps(tmp_path: Path) -> None:
    rec, _, probe, _ = _recorder(tmp_path, 2, STEP, 500 * MB, settle=False)
    _steps(rec, 2 + 2 + 1)
    assert rec.phases.profiled == 12 and probe.bound is not None and not probe.bound.stacks


def test_without_warmup_the_window_is_probed_all_the_same(tmp_path: Path) -> None:
    rec, control, probe, notes = _recorder(tmp_path, 0, STEP, 240 * MB)
    _steps(rec, 2 + 1)
    assert "probe_stop" in control.calls and probe.bound is not None and notes == []


@pytest.mark.parametrize("after", [1, 2])
def test_a_script_ending_right_after_the_probed_step_keeps_that_step_as_its_trace(tmp_path: Path, after: int) -> None:
    rec, control, probe, notes = _recorder(tmp_path, 1, STEP, MB)
    _steps(rec, 1 + 2 + after)  # the probed step, and maybe the one after it
    probe.close(rec)
    rec.finish()
    assert control.calls[-2:] == ["discard", "keep_probe"] and rec.counts["profiled"] == 1
    assert notes == [] and not (tmp_path / "scratch.json").exists()


def test_a_script_ending_in_the_probed_step_exports_it(tmp_path: Path) -> None:
    rec, control, probe, _ = _recorder(tmp_path, 1, STEP, MB)
    _steps(rec, 1 + 2)
    probe.close(rec)
    rec.finish()
    assert control.calls == ["start stacks=True memory=True", "export"] and probe.record() is None


def test_the_probed_step_s_export_is_deleted_once_the_window_holds_a_step(tmp_path: Path) -> None:
    rec, _, probe, _ = _recorder(tmp_path, 1, STEP, 2000 * MB)
    _steps(rec, 1 + 2 + 2)
    assert (tmp_path / "scratch.json").exists()
    _steps(rec, 1)
    probe.close(rec)
    assert not (tmp_path / "scratch.json").exists() and rec.counts["profiled"] == 1


def test_a_failed_probe_leaves_the_window_as_asked_with_a_note(tmp_path: Path) -> None:
    rec, control, probe, notes = _recorder(tmp_path, 1, STEP, MB)

    def broken(_scratch: Path) -> StepSize:
        raise OSError(28, "No space left on device")

    control.probe_stop = broken  # type: ignore[method-assign]
    _steps(rec, 1 + 2 + 2)
    assert rec.phases.profiled == 12 and probe.record() is None
    assert control.calls[-1] == "start stacks=True memory=True"
    assert len(notes) == 1 and "No space left" in notes[0]


def test_a_window_that_cannot_start_again_leaves_the_step_alone_with_a_note(tmp_path: Path) -> None:
    rec, control, probe, notes = _recorder(tmp_path, 1, STEP, 240 * MB)

    def busy() -> None:
        raise RuntimeError("Can't profile: another profiler is running")

    _steps(rec, 1 + 2 + 1)
    control.start = busy  # type: ignore[method-assign]
    _steps(rec, 1)  # the step after the probed one: the window's start fails, the step does not
    assert rec.phase == "profiled" and len(notes) == 1 and "another profiler" in notes[0]


@pytest.mark.parametrize("value", ["0", "-5MB", "lots", "5XB"])
def test_a_bad_trace_budget_is_a_one_line_usage_error(capsys, tmp_path: Path, value: str) -> None:
    from cli_helpers import invoke

    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    code, _, err = invoke(capsys, "diagnose", "--trace-budget", value, str(script))
    assert code == 2 and "--trace-budget" in err


class SlowProbe(FakeControl):
    """Probing (the step's export and its measurement) takes 0.5 s of the clock."""

    def __init__(self, step: StepSize, clock: Clock) -> None:
        super().__init__(step)
        self.clock = clock

    def probe_stop(self, scratch: Path) -> StepSize:
        self.clock.advance(0.5)
        return super().probe_stop(scratch)


def test_the_probe_s_steps_and_export_are_no_measured_time(tmp_path: Path) -> None:
    clock = Clock(10.0)
    control = SlowProbe(STEP, clock)
    probe = TraceProbe(control, 2000 * MB, tmp_path / "scratch.json", [])
    rec = StepRecorder(Phases(1, 2, 3, 0), profiler=control, clock=clock,  # type: ignore[arg-type]
                       on_step=probe.on_event, on_phase=probe.on_event)
    rec.script_started()
    with pytest.raises(StopScript):
        for _ in range(20):
            clock.advance(0.1)
            rec.optimizer_step()
    rec.finish()
    got = rec.phase_seconds()
    assert rec.counts["profiled"] == 3
    assert got["timed"] == pytest.approx(0.2) and got["profiled"] == pytest.approx(0.3)
    assert got["export"] == pytest.approx(0.1 + 0.5 + 0.1)  # the probed step, its export, the step after it


def test_the_probe_cuts_a_slow_to_export_window_to_its_export_budget(tmp_path: Path) -> None:
    control, notes = FakeControl(replace(STEP, export_s=0.9)), []
    probe = TraceProbe(control, 2000 * MB, tmp_path / "scratch.json", notes, export_budget_s=2.0)
    rec = StepRecorder(Phases(1, 2, 10, 0), profiler=control, clock=Clock(10.0),  # type: ignore[arg-type]
                       on_step=probe.on_event, on_phase=probe.on_event)
    rec.script_started()
    _steps(rec, 1 + 2 + 2)
    assert control.calls[-1] == "start stacks=True memory=True"  # every option kept: only steps go
    assert rec.phases.profiled == MIN_PROFILED_STEPS + 2 and probe.bound is not None and probe.bound.by_time
