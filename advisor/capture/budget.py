"""Bounded capture: keep the exported torch.profiler trace under a size budget.

A profiled step of a large model exports gigabytes of Chrome-trace JSON (more than 1 GB per step
for an LLM with Python stacks), which neither the browser viewers nor a laptop's memory can open.
So before the profiled window starts, one step is measured:

1. :class:`TraceProbe` takes the *first step of the profiled window*, recorded with every option
   (shapes, memory, stacks, modules), exports it to a scratch file and measures it with
   :func:`measure_step` (its size, and how much of it is Python-stack and memory events); the
   scratch file is deleted, and the window starts again with the options planned one step later
   (:class:`TraceProbe` says why), two steps longer than asked. So the profiled window is one
   trace file of steps with one set of options, and the probed step is in none.

   The probe comes after the timed steps, never before them: a profiled step allocates and frees
   tens of megabytes, which raises glibc malloc's dynamic mmap threshold for the rest of the
   process. Probed in warm-up, the timed steps of ``python train.py`` (a small CNN on per-sample
   numpy work) ran churn-free at 115-268 page faults per step and 1.6-2.2% of their CPU time in
   the kernel, where the script as run plainly, and advisor's trial runs, take 2,300-4,600 faults
   per step and 9-32% (2026-11-27, :mod:`advisor.capture.kernel_use`): the capture's throughput
   was not the script's.
2. :func:`plan_trace` chooses, from that one step, how many steps the window profiles and
   whether stacks and memory events are recorded, so that the estimate stays under the budget:
   fewer steps first (down to :data:`MIN_PROFILED_STEPS`), then no memory events, then no
   stacks, then no both; only then fewer steps than the minimum, down to one. The probe's own
   stop and export are timed too: a window whose steps would take more than an export budget
   (:data:`DEFAULT_TRACE_EXPORT_S`) to stop and export profiles fewer steps, down to the
   minimum and never fewer, with every option kept.
3. The plan (:class:`TraceBound`) goes into the capture (``RunCapture.trace_bound``), with the
   size the trace really exported, and the report states what was bounded.

Everything here but :class:`TraceProbe` is pure; the probe drives the profiler through
:class:`~advisor.capture.profilers.TorchProfilerControl` and reads the recorder's phase.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

from advisor.capture.vocab import Phase

DEFAULT_TRACE_BUDGET_BYTES = 256 * 2**20
"""The default budget for one exported trace (uncompressed JSON): 256 MiB.

The browser viewers read a trace as one JavaScript string, and V8 caps strings at about 512 MiB
(2**29 characters on 64-bit builds): chrome://tracing and Perfetto's JSON import fail on larger
files outright, and slow to a crawl well before. Half that limit leaves room for the viewer's own
copy, and advisor's loader holds about the file's size while it decodes, so a default-bounded run
is analysed on a laptop too."""
DEFAULT_TRACE_EXPORT_S = 2.0
"""Seconds the profiled window's stop and export may take (estimated from the probed step's own)
before it profiles fewer steps, down to :data:`MIN_PROFILED_STEPS`. torch.profiler's stop and
export grow with the events: a small GRU's 8,000 operators a step took 0.5-0.7 s a step, and
its ten default steps 7.5 s of an 18 s diagnose (a 138 MB trace; 2026-11-29); the demo's steps
take 0.08 s each and are not cut. An explicit ``--profile-steps`` is not cut by it."""
MIN_PROFILED_STEPS = 3
"""Profiled steps the analysis needs: the per-step metrics are medians (three resist one odd
step, a collection or an evaluation inside it) and their spread needs at least two."""
PLAN_SHARE = 0.9
"""Plans fill at most this share of the budget: the profiled steps differ from the probed one by
a few percent (1-2% on examples/tiny_model.py, whose window also holds its first step's start-up
frames), and the budget is a bound, not a target."""
STACK_MARK = b'"cat": "python_function"'
"""How Kineto writes the category of a Python-stack event (with_stack; the module frames too)."""
MEMORY_MARK = b'"name": "[memory]"'
"""How Kineto writes the name of a memory allocation event (profile_memory)."""
EVENT_START = b"\n  {"
"""Kineto writes each event of ``traceEvents`` from a line of its own starting with this."""
_CHUNK = 16 * 2**20
PROBE_STEPS = 2
"""Steps the probe adds to the profiled window, in no trace: the probed one and the one after it."""


@dataclass(frozen=True)
class StepSize:
    """One probed step's exported trace: its size and the part of it each droppable kind takes.

    Attributes:
        total_bytes: The exported JSON of the one step, every option on.
        stack_bytes: The part that is Python-stack events (``with_stack``; the module frames too).
        memory_bytes: The part that is memory events (``profile_memory``).
        export_s: Seconds the probe took to stop the profiler and export the step (None: not timed).
    """

    total_bytes: int
    stack_bytes: int = 0
    memory_bytes: int = 0
    export_s: float | None = None  # the profiler's stop and the step's export, as timed by the probe

    def per_step(self, stacks: bool, memory: bool) -> int:
        """Return the bytes of one step recorded with these options."""
        return max(1, self.total_bytes - (0 if stacks else self.stack_bytes) - (0 if memory else self.memory_bytes))


@dataclass(frozen=True)
class TraceBound:
    """How the profiled window was sized to fit the trace budget (``RunCapture.trace_bound``).

    Attributes:
        budget_bytes: The budget for the exported trace (uncompressed JSON).
        step_bytes: One probed step's exported JSON, every option on.
        stack_bytes: Its Python-stack events; memory_bytes: its memory events.
        asked_steps: Profiled steps asked for; steps: the steps planned.
        stacks: Whether the window records Python stacks (and module frames).
        memory: Whether it records memory events.
        exported_bytes: The trace's size as exported (uncompressed), once written (None before).
        step_export_s: Seconds the probed step took to stop and export (None: not timed).
        export_budget_s: The export budget the steps were planned against (None: none).
        by_time: Whether the export budget, not the size budget, set the steps.
    """

    budget_bytes: int
    step_bytes: int
    asked_steps: int
    steps: int
    stack_bytes: int = 0
    memory_bytes: int = 0
    stacks: bool = True
    memory: bool = True
    exported_bytes: int | None = None
    step_export_s: float | None = None
    export_budget_s: float | None = None
    by_time: bool = False

    @property
    def bounded(self) -> bool:
        """Whether anything was given up to fit the budget."""
        return self.steps < self.asked_steps or not self.stacks or not self.memory

    @property
    def estimated_bytes(self) -> int:
        """The planned trace's size, estimated from the probed step."""
        size = StepSize(self.step_bytes, self.stack_bytes, self.memory_bytes)
        return self.steps * size.per_step(self.stacks, self.memory)

    def text(self) -> str:
        """One sentence for the report: what was bounded and why ("" when nothing was and the trace fit)."""
        over_after = self.exported_bytes is not None and self.exported_bytes > self.budget_bytes
        if not self.bounded and not over_after:
            return ""
        steps = f"{self.steps} of {self.asked_steps} profiled steps" if self.steps < self.asked_steps else f"{self.steps} profiled steps"
        lost = [w for w, kept in (("Python stacks", self.stacks), ("memory events", self.memory)) if not kept]
        without = f", without {' or '.join(lost)}" if lost else ""
        over = (" (still over the budget: no fewer steps or options are possible)"
                if self.estimated_bytes > self.budget_bytes else "")
        exported = "" if self.exported_bytes is None else f"; the trace exported {size_text(self.exported_bytes)}"
        if over_after and not over:
            exported += ", over the budget: its steps were larger than the probed step"
        head = f"trace bounded to {steps}{without}{over}" if self.bounded else f"trace of {steps}"
        if self.by_time and self.step_export_s is not None and self.export_budget_s is not None:
            return (f"{head}: one step took {self.step_export_s:.2f} s to stop and export "
                    f"({size_text(self.step_bytes)}), and the profiled window's export is kept near "
                    f"{self.export_budget_s:.0f} s (an explicit --profile-steps is kept){exported}")
        return (f"{head}: one step exported {size_text(self.step_bytes)}, "
                f"budget {size_text(self.budget_bytes)} (--trace-budget){exported}")


def size_text(n: int) -> str:
    """Format a byte count the way ``--trace-budget`` reads one (1 MB = 2**20 bytes)."""
    if n >= 2**30:
        return f"{n / 2**30:.1f} GB"
    if n >= 2**20:
        return f"{n / 2**20:.0f} MB" if n >= 10 * 2**20 else f"{n / 2**20:.1f} MB"
    return f"{n / 2**10:.0f} KB"


def plan_trace(step: StepSize, budget_bytes: int, asked_steps: int, min_steps: int = MIN_PROFILED_STEPS,
               fixed_steps: bool = False, export_budget_s: float | None = None) -> TraceBound:
    """Plan the window by size (:func:`plan_by_size`), then cut its steps to the export budget.

    ``export_budget_s``: seconds the window's stop and export may take, from the probed step's
    own (``step.export_s``); its steps are cut, down to ``min_steps`` and never fewer, options
    kept. None, an untimed step or ``fixed_steps`` (a job's ranks) leave the size plan as it is.
    """
    plan = plan_by_size(step, budget_bytes, asked_steps, min_steps, fixed_steps)
    if export_budget_s is None or step.export_s is None or fixed_steps:
        return plan
    plan = replace(plan, step_export_s=round(step.export_s, 3), export_budget_s=export_budget_s)
    fit = max(min(max(1, min_steps), asked_steps), int(export_budget_s / max(step.export_s, 1e-6)))
    return replace(plan, steps=fit, by_time=True) if fit < plan.steps else plan


def plan_by_size(step: StepSize, budget_bytes: int, asked_steps: int, min_steps: int = MIN_PROFILED_STEPS,
                 fixed_steps: bool = False) -> TraceBound:
    """Choose the profiled steps and options whose trace fits ``budget_bytes``.

    Args:
        step: The probed step's size (:func:`measure_step`).
        budget_bytes: The budget for the whole exported trace.
        asked_steps: The profiled steps asked for (the most planned).
        min_steps: The fewest steps the analysis wants (fewer than ``asked_steps`` only).
        fixed_steps: Keep ``asked_steps`` whatever the size: the ranks of a job must stop at the
            same step, and each rank measures its own step; only options are dropped then.

    Returns:
        The first plan, in order of preference, whose estimate fits in :data:`PLAN_SHARE` of
        the budget: every option, with as many steps as fit down to ``min_steps``; then without
        memory events; without stacks; without both; then without both and fewer steps than the
        minimum, down to one.
    """
    floor = min(max(1, min_steps), asked_steps)
    room = int(budget_bytes * PLAN_SHARE)
    base = TraceBound(budget_bytes=budget_bytes, step_bytes=step.total_bytes, stack_bytes=step.stack_bytes,
                      memory_bytes=step.memory_bytes, asked_steps=asked_steps, steps=asked_steps)
    if asked_steps <= 0:
        return base
    # NOTE: memory events go before stacks: the peak memory is measured apart from the trace, while
    # the stacks carry the source lines the advice points at and the module view.
    for stacks, memory in ((True, True), (True, False), (False, True), (False, False)):
        fit = room // step.per_step(stacks, memory)
        if fixed_steps:
            if fit >= asked_steps:
                return replace(base, stacks=stacks, memory=memory)
        elif fit >= floor:
            return replace(base, steps=min(asked_steps, fit), stacks=stacks, memory=memory)
    if fixed_steps:
        return replace(base, stacks=False, memory=False)
    return replace(base, steps=max(1, min(asked_steps, room // step.per_step(False, False))),
                   stacks=False, memory=False)


def measure_step(path: Path) -> StepSize:
    """Measure an exported one-step trace: its size and its stack and memory events' bytes.

    A streaming scan, never a JSON parse (one step of a large model is gigabytes): the file is
    cut at the line each Kineto event starts on, and each event is counted whole towards the
    kind its category or name marks. A file written another way counts as all-other.
    """
    stack = memory = 0
    carry = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            events = (carry + chunk).split(EVENT_START)
            carry = events.pop() if chunk else b""
            stack += sum(len(e) + len(EVENT_START) for e in events if STACK_MARK in e)
            memory += sum(len(e) + len(EVENT_START) for e in events if MEMORY_MARK in e)
            if not chunk:
                break
    return StepSize(total_bytes=path.stat().st_size, stack_bytes=stack, memory_bytes=memory)


class ProbeStage(str, Enum):
    """Where :class:`TraceProbe` is: before the window, in the probed step, in the step after it, done."""

    WAITING = "waiting"
    PROBING = "probing"
    BETWEEN = "between"
    DONE = "done"


class TraceProbe:
    """Profiles the first step of the profiled window, then sizes the window (see the module docstring).

    The child calls :meth:`on_event` from the recorder's step and phase callbacks; both come
    after the recorder's own bookkeeping and before the next step starts, so the probe's export
    is never inside a measured step. The window starts again one step after the probed one:
    torch.profiler started again in the callback that stopped it corrupted the heap now and then
    (``free(): invalid next size``, SIGSEGV: 7 end-to-end tests of one ``make test`` run, none alone).
    """

    def __init__(
        self, control: Any, budget_bytes: int, scratch: Path, notes: list[str], export_budget_s: float | None = None,
    ) -> None:
        self.control = control  # profilers.TorchProfilerControl: start, probe_stop, stacks, memory
        self.budget_bytes = budget_bytes
        self.export_budget_s = export_budget_s
        self.scratch = scratch
        self.notes = notes
        self.bound: TraceBound | None = None
        self._asked = 0  # the profiled steps asked for; 0 until the window begins
        self._stage = ProbeStage.WAITING

    def on_event(self, rec: Any) -> None:
        """Reserve two steps as the window begins; size the window after the first; start it after the second."""
        p = rec.phases
        if self._stage == ProbeStage.DONE or rec.phase != Phase.PROFILED or p.profiled <= 0:
            return
        if self._stage == ProbeStage.WAITING:
            # NOTE: called as the phase changes, before the recorder starts the window's profiler:
            # two more steps are asked for, the probed one and the one after it, in no trace.
            self._asked, p.profiled, self._stage = p.profiled, p.profiled + PROBE_STEPS, ProbeStage.PROBING
            return
        if rec.counts.get(Phase.PROFILED, 0) < 1:
            return
        rec.uncount_step(Phase.PROFILED)  # neither is one of the window's steps
        if self._stage == ProbeStage.BETWEEN:
            self._stage = ProbeStage.DONE
            try:
                self.control.start()
            except Exception as exc:  # noqa: BLE001 - the probe must never fail the script's step
                self.notes.append(f"the profiled window could not start again after the trace budget's probe ({exc})")
            rec.phase_started[Phase.PROFILED] = rec.clock()
            return
        self._stage = ProbeStage.BETWEEN
        try:
            step = self.control.probe_stop(self.scratch)
        except Exception as exc:  # noqa: BLE001 - an unmeasured step leaves the window unbounded, with a note
            step = None
            self.scratch.unlink(missing_ok=True)
            self.notes.append(f"the trace was not bounded to --trace-budget: the probed step could not be measured ({exc})")
        if step is not None:
            self.bound = plan_trace(step, self.budget_bytes, self._asked, fixed_steps=not p.settle,
                                    export_budget_s=self.export_budget_s)
            self.control.stacks, self.control.memory = self.bound.stacks, self.bound.memory
        p.profiled = (self.bound.steps if self.bound is not None else self._asked) + PROBE_STEPS

    def close(self, rec: Any) -> None:
        """Before the window closes at the script's end: drop the probed step's export, or keep it as the trace.

        A script that ends before the restarted window's first step is over would otherwise leave no
        profiled step at all: the probed one is then the trace, counted as the one profiled step.
        """
        if not self.scratch.exists():
            return
        if rec.open_window == Phase.PROFILED and not rec.counts.get(Phase.PROFILED, 0):
            self.control.stop(export=False)
            self.control.keep_probe(self.scratch)
            rec.counts[Phase.PROFILED], rec.open_window = 1, None
        else:
            self.scratch.unlink()

    def record(self) -> TraceBound | None:
        """Return the plan with the trace's exported size, once the profiled window was written."""
        if self.bound is None:
            return None
        return replace(self.bound, exported_bytes=getattr(self.control, "exported_bytes", None))
